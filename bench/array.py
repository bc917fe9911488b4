"""Array throughput: a 200-task array of `true` on the lab, from sbatch to the last task done.

    .venv/bin/python bench/array.py [--deployment DIR ...] [--tasks 200] [--rounds 3] [--json]

Each --deployment is a deployed lab (several: measured in turn, round by round, so that labs
rendered with other settings are compared side by side on a machine whose speed drifts).
Without one it deploys blueprints/lab.yaml into a temporary folder and destroys it at the end.
The array goes to every partition (`--partition=debug,gpu`: the lab's 4 compute nodes) and to
the debug partition alone (2 nodes of 2 CPUs); its tasks name no memory, so what a task is
given is the partition's default (DefMemPerCPU, or without one the whole node). The end is the
moment squeue no longer lists a task pending, running or completing (polled every 0.1 s); sacct
gives each task's wait (start - eligible). The tasks ask for 10 minutes: a job sent to several
partitions takes its time limit from the first (debug: UNLIMITED), and would never fit the gpu
partition's MaxTime of 2 hours.

Measured on this project's 2-core machine (default lab, 200 tasks, medians):
  main's slurm.conf (no DefMemPerCPU: each task holds a whole node; batch jobs started in waves
  3 s apart): 131.9 s, 1.52 tasks/s on debug,gpu (284.7 s, 0.70 tasks/s without --time, on the
  2 debug nodes alone);
  with DefMemPerCPU and batch_sched_delay=0: 6.1 s, 32.7 tasks/s on debug,gpu; 46.5 s,
  4.30 tasks/s on debug alone (4 CPUs; 133 s with DefMemPerCPU but Slurm's batch_sched_delay).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "toolkit"))

from ctk import paths  # noqa: E402


def ctk(*args, check=True):
    r = subprocess.run([sys.executable, "-m", "ctk", *args], capture_output=True, text=True)
    if check and r.returncode != 0:
        sys.exit(f"ctk {' '.join(args)} failed:\n{r.stderr[-3000:]}")
    return r


def lab_env(dep: str) -> dict:
    """The environment `ctk env DIR --user root` makes: the lab's own Slurm commands first."""
    r = ctk("env", dep, "--user", "root")
    m = re.search(r"export PATH=(\S+):", r.stdout)
    env = {k: v for k, v in os.environ.items() if k != "SLURM_CONF"}
    env.update(PATH=m.group(1) + os.pathsep + env["PATH"], CTK_LAB_USER="root")
    return env


def slurm(env, dep, *argv) -> str:
    r = subprocess.run(list(argv), capture_output=True, text=True, env=env, timeout=120,
                       cwd=os.path.join(dep, "lab", "root"))
    if r.returncode != 0:
        sys.exit(f"{argv}: {r.stderr}")
    return r.stdout


def seconds(stamp: str) -> float:
    return time.mktime(time.strptime(stamp, "%Y-%m-%dT%H:%M:%S"))


def one_array(env, dep: str, tasks: int, partition: str) -> dict:
    t0 = time.monotonic()
    out = slurm(env, dep, "sbatch", "--parsable", f"--array=0-{tasks - 1}", f"--partition={partition}",
                "--time=10", "--output=/dev/null", "--job-name=bench-array", "--wrap=true")
    job = out.strip().split(";")[0]
    while slurm(env, dep, "squeue", "-h", "-r", "-j", job, "-t", "PD,R,CG", "-o", "%i").strip():
        time.sleep(0.1)
    wall = time.monotonic() - t0
    figures = {"job": job, "seconds": wall, "tasks_per_s": tasks / wall}
    # sacct (slurmdbd records ends a moment later): the queue wait and run time of each task
    rows: list[list[str]] = []
    for _ in range(50):
        rows = [ln.split("|") for ln in slurm(env, dep, "sacct", "-n", "-P", "-X", "-j", job, "-o",
                                               "Eligible,Start,End,NodeList").splitlines()]
        if len(rows) >= tasks and all(r[2] not in ("", "Unknown") for r in rows):
            break
        time.sleep(0.2)
    done = [r for r in rows if r[1] not in ("", "Unknown") and r[2] not in ("", "Unknown")]
    if done:
        figures["wait_median_s"] = statistics.median(seconds(r[1]) - seconds(r[0]) for r in done)
        figures["run_median_s"] = statistics.median(seconds(r[2]) - seconds(r[1]) for r in done)
        figures["nodes"] = len({r[3] for r in done})
    return figures


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--deployment", action="append", default=[], help="a deployed lab (repeatable)")
    ap.add_argument("--tasks", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--partitions", default="debug,gpu;debug",
                    help="the partition lists to submit to, separated by ';'")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    tmp = None
    deps = args.deployment
    if not deps:
        tmp = tempfile.mkdtemp(prefix="ctk-bench-array-")
        deps = [os.path.join(tmp, "lab")]
        ctk("deploy", os.path.join(paths.BLUEPRINTS, "lab.yaml"), "-o", deps[0], "-q")
    envs = {d: lab_env(d) for d in deps}
    results: dict = {d: {} for d in deps}
    try:
        for _ in range(args.rounds):
            for part in args.partitions.split(";"):
                for d in deps:
                    results[d].setdefault(part, []).append(one_array(envs[d], d, args.tasks, part))
    finally:
        if tmp:
            ctk("destroy", deps[0], check=False)
            shutil.rmtree(tmp, ignore_errors=True)

    if args.json:
        print(json.dumps(results, indent=2))
        return
    for d in deps:
        conf = open(os.path.join(d, "lab", "etc", "slurm", "slurm.conf")).read()
        mem = re.findall(r"^PartitionName=(\S+) .*?DefMemPerCPU=(\d+)", conf, re.M)
        print(f"{d}  (DefMemPerCPU: {', '.join(f'{p} {m}' for p, m in mem) or 'none'})")
        for part, runs in results[d].items():
            secs = [r["seconds"] for r in runs]
            med = statistics.median(secs)
            waits = [r.get("wait_median_s", float("nan")) for r in runs]
            print(f"  {args.tasks} x true on {part:10s} {med:7.1f} s median ({args.tasks / med:6.2f} tasks/s; "
                  f"runs {', '.join(f'{s:.1f}' for s in secs)} s); task wait median "
                  f"{statistics.median(waits):.0f} s, on {runs[-1].get('nodes', '?')} node(s)   (target <= 20 s)")


if __name__ == "__main__":
    main()
