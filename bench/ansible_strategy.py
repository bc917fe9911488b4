"""Mitogen's strategy against Ansible's own, measured side by side in one run.

    .venv/bin/python bench/ansible_strategy.py [--tasks N] [--runs N] [--image] [--rounds N]

1. Per task: a play of N (default 40) `file` tasks that change nothing, over a local
   connection, with each strategy in turn (A B A B ...): wall and CPU seconds (this process's
   children: ansible-playbook and the module processes it starts), medians and the ratio
   mitogen/linear pair by pair.
2. --image: the lab image from an empty store (`ctk image build blueprints/lab.yaml --json`,
   verification on), CTK_ANSIBLE_STRATEGY=mitogen and =linear in turn, ROUNDS (default 1) pairs:
   whole seconds, CPU seconds, and each layer's seconds from the --json profile. Root, packer and
   mmdebstrap, and the network to Debian's archive and PyPI, as the build needs.

ctk uses Mitogen's strategy by default (toolkit/ctk/ansible_env.py).
"""

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from ctk import ansible_env, paths

LAB = os.path.join(paths.BLUEPRINTS, "lab.yaml")
SCRATCH = "/var/tmp"  # on disk, as /var/lib/ctk is


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed(argv: list[str], env: dict[str, str], cwd: str) -> tuple[float, float, str]:
    """(wall s, CPU s of the command and what it waited for, its stdout); exits on failure."""
    cpu0, t0 = children_cpu(), time.monotonic()
    r = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd)
    wall, cpu = time.monotonic() - t0, children_cpu() - cpu0
    if r.returncode != 0:
        sys.exit(f"bench: {' '.join(argv[:4])} ... failed ({env.get(ansible_env.STRATEGY_ENV)}):\n"
                 f"{(r.stdout + r.stderr)[-3000:]}")
    return wall, cpu, r.stdout


def strategy_environ(name: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env[ansible_env.STRATEGY_ENV] = name
    return env


def per_task(tasks: int, runs: int) -> None:
    work = tempfile.mkdtemp(prefix="ctk-bench-ansible-", dir=SCRATCH)
    try:
        play = [{"hosts": "localhost", "gather_facts": False, "tasks": [
            {"name": f"task {i}", "ansible.builtin.file": {"path": work, "state": "directory"}}
            for i in range(tasks)]}]
        with open(os.path.join(work, "play.yml"), "w") as f:
            json.dump(play, f)  # JSON is YAML
        exe = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
        argv = [exe, "-c", "local", "-i", "localhost,", "play.yml",
                "-e", f"ansible_python_interpreter={sys.executable}"]
        figures: dict[str, list[tuple[float, float]]] = {"mitogen": [], "linear": []}
        for i in range(runs + 1):  # the first pair warms the page cache and is not counted
            for name in figures:
                # what ctk itself gives ansible-playbook for this strategy
                os.environ[ansible_env.STRATEGY_ENV] = name
                with ansible_env.strategy_env(exe) as strategy:
                    wall, cpu, _ = timed(argv, {**strategy_environ(name), "ANSIBLE_PIPELINING": "True", **strategy},
                                         work)
                if i:
                    figures[name].append((wall, cpu))
        print(f"{tasks} tasks over a local connection, {runs} runs each, in turn:")
        for name, rows in figures.items():
            print(f"  {name:8s} wall median {statistics.median(w for w, _ in rows):6.2f} s"
                  f"  CPU median {statistics.median(c for _, c in rows):6.2f} s"
                  f"  ({statistics.median(c for _, c in rows) / tasks:.3f} CPU s a task)")
        pairs = list(zip(figures["mitogen"], figures["linear"]))
        print("  mitogen/linear pair by pair: wall " + ", ".join(f"{m[0] / ln[0]:.2f}" for m, ln in pairs)
              + "; CPU " + ", ".join(f"{m[1] / ln[1]:.2f}" for m, ln in pairs))
    finally:
        shutil.rmtree(work, ignore_errors=True)


def image(rounds: int) -> None:
    print(f"the lab image from an empty store, {rounds} pair(s), in turn:")
    for r in range(rounds):
        for name in ("mitogen", "linear"):
            state = tempfile.mkdtemp(prefix="ctk-bench-", dir=SCRATCH)
            try:
                env = {**strategy_environ(name), "CTK_STATE_DIR": state}
                wall, cpu, out = timed([sys.executable, "-m", "ctk", "image", "build", LAB, "--json"], env, SCRATCH)
                prof = json.loads(out)[0].get("profile", {})
                steps = ", ".join(f"{k} {v['seconds']:.1f}" for k, v in prof.items()
                                  if isinstance(v, dict) and "seconds" in v)
                tasks = sum(v.get("task_count", 0) for v in prof.values() if isinstance(v, dict))
                print(f"  round {r + 1} {name:8s} {wall:6.1f} s wall, {cpu:6.1f} CPU s (the processes ctk waited for), "
                      f"{tasks} tasks; {steps}")
            finally:
                subprocess.run(["rm", "-rf", "--one-file-system", state], check=False)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", type=int, default=40, help="tasks in the per-task play (default 40)")
    ap.add_argument("--runs", type=int, default=5, help="runs of each strategy for the per-task play")
    ap.add_argument("--image", action="store_true", help="also build the lab image with each strategy")
    ap.add_argument("--rounds", type=int, default=1, help="pairs of image builds with --image")
    args = ap.parse_args()
    if ansible_env.mitogen_strategy_dir() is None:
        sys.exit("bench: Mitogen is not installed in this environment (pip install -e .)")
    per_task(args.tasks, args.runs)
    if args.image:
        image(args.rounds)


if __name__ == "__main__":
    main()
