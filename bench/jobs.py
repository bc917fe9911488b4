"""Jobs benchmark, side by side in one run on a lab cluster (issue 5):

1. the Python API's `ctk.jobs.submit()` against a plain `sbatch --parsable` of the same script
   (the lab's own sbatch, run in its login node by the command `ctk env` puts on PATH),
   alternating, every job held (`--hold`) so nothing runs meanwhile; target ratio
   (API / sbatch, medians) <= 1.3;
2. the CLI `ctk job submit` wall time (a new process each time; the job runs `true`), side by
   side with and without Python's bytecode cache: an installed ctk has its .pyc files (pip
   compiles them), but an environment with PYTHONDONTWRITEBYTECODE set (this project's
   machines have it) compiles every module of a checkout again in each process; target
   <= 0.2 s with the cache;
3. `ctk job status` of 1,000 registered jobs (one squeue call); target <= 1 s;
4. submit-to-result of jax-smoke on 2 lab nodes (`ctk job submit --wait`).

    .venv/bin/python bench/jobs.py [--deployment DIR] [--json]

Without --deployment it deploys blueprints/lab.yaml into a temporary folder (the image is
built first if needed, not timed) and destroys it at the end.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "toolkit"))

import ctk as ctk_package  # noqa: E402
from ctk import paths  # noqa: E402
from ctk.jobs import api, registry, scheduler, templates  # noqa: E402
from ctk.jobs.clusters import LocalCluster  # noqa: E402


def ctk(*args, check=True, env=None):
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "ctk", *args], capture_output=True, text=True, env=env)
    if check and r.returncode != 0:
        sys.exit(f"ctk {' '.join(args)} failed:\n{r.stderr[-3000:]}")
    return time.monotonic() - t0, r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--deployment", help="a deployed lab (default: deploy one in a temporary folder)")
    ap.add_argument("--submits", type=int, default=40, help="submits of each kind for the ratio")
    ap.add_argument("--status-jobs", type=int, default=1000)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    tmp = None
    dep = args.deployment
    if not dep:
        tmp = tempfile.mkdtemp(prefix="ctk-bench-jobs-")
        dep = os.path.join(tmp, "lab")
        ctk("deploy", os.path.join(paths.BLUEPRINTS, "lab.yaml"), "-o", dep, "-q")
    cluster = LocalCluster(dep).check()
    figures: dict = {}
    held: list[str] = []
    try:
        params = {"partition": "debug"}
        cmd = ["python3", "train.py"]
        script = templates.render("jax-train", dict(params), cmd, templates.load_deployment(dep))
        path = os.path.join(dep, "lab", "home", ".ctk-jobs", "bench-plain.sbatch")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(script)
        # The plain baseline: the lab's own sbatch, run in its login node by the command
        # `ctk env` puts on PATH (the host has no Slurm of its own to compare with).
        env = {**os.environ, "PATH": os.path.join(dep, "lab", "bin") + os.pathsep + os.environ["PATH"]}
        env.pop("SLURM_CONF", None)
        plain_argv = ["sbatch", "--parsable", "--hold", "--chdir=/home/.ctk-jobs", "/home/.ctk-jobs/bench-plain.sbatch"]

        # 1. API submit vs plain sbatch, alternating, same script, all held
        api_t, plain_t = [], []
        for i in range(args.submits):
            for kind in (("api", "plain") if i % 2 == 0 else ("plain", "api")):
                t0 = time.perf_counter()
                if kind == "api":
                    job = api.submit("jax-train", params, cluster, cmd, extra_args=["--hold"])
                    api_t.append(time.perf_counter() - t0)
                    held.append(job.id)
                else:
                    r = subprocess.run(plain_argv, capture_output=True, text=True, env=env,
                                       cwd=os.path.join(dep, "lab", "home"))
                    plain_t.append(time.perf_counter() - t0)
                    if r.returncode != 0:
                        sys.exit(f"sbatch failed: {r.stderr}")
                    held.append(r.stdout.strip().split(";")[0])
        figures["api_submit_s"] = statistics.median(api_t)
        figures["sbatch_submit_s"] = statistics.median(plain_t)
        figures["api_over_sbatch"] = figures["api_submit_s"] / figures["sbatch_submit_s"]

        # 3. status of N registered jobs: fill the registry with held jobs, one squeue call
        # (the registry is the cluster's, in ~/.local/state/ctk/clusters/, not in the deployment)
        for _ in range(args.status_jobs - len(registry.load(cluster.registry_dir))):
            held.append(api.submit("jax-train", params, cluster, cmd, extra_args=["--hold"]).id)
        calls = []
        real_run = cluster.run

        def counting(argv, *a, **k):
            calls.append(argv[0])
            return real_run(argv, *a, **k)
        cluster.run = counting
        t0 = time.perf_counter()
        rows = scheduler.states(cluster, [str(r["id"]) for r in registry.load(cluster.registry_dir)])
        figures["status_api_s"] = time.perf_counter() - t0
        figures["status_slurm_calls"] = len(calls)
        cluster.run = real_run
        wall, r = ctk("job", "status", "--deployment", dep, "--json")
        n = len(json.loads(r.stdout))
        figures["status_jobs"] = n
        figures["status_cli_s"] = wall
        figures["status_states"] = sorted(set(rows.values()))

        # release the held jobs before anything runs: cancel them (one scancel call)
        subprocess.run(["scancel", *held], env=env, capture_output=True, cwd=os.path.join(dep, "lab", "home"))
        held = []

        # 2. CLI submit wall time, alternating: with ctk's bytecode cache (written by a first
        # run), and without it (ctk's __pycache__ folders moved aside for the run, none written)
        cached_env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        uncached_env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
        package = os.path.dirname(ctk_package.__file__)
        submit = ("job", "submit", "jax-train", "--deployment", dep, "--set", "partition=debug", "--", "true")
        ctk(*submit, env=cached_env)
        caches = [os.path.join(d, "__pycache__") for d, subdirs, _ in os.walk(package) if "__pycache__" in subdirs]
        cli: dict[str, list[float]] = {"cached": [], "uncached": []}
        for _ in range(10):
            cli["cached"].append(ctk(*submit, env=cached_env)[0])
            for c in caches:
                os.rename(c, c + ".aside")
            try:
                cli["uncached"].append(ctk(*submit, env=uncached_env)[0])
            finally:
                for c in caches:
                    # the lab's agent (a process of its own) may have written a cache meanwhile
                    shutil.rmtree(c, ignore_errors=True)
                    os.rename(c + ".aside", c)
        figures["cli_submit_s"] = statistics.median(cli["cached"])
        figures["cli_submit_min_s"] = min(cli["cached"])
        figures["cli_submit_uncached_s"] = statistics.median(cli["uncached"])

        # 4. jax-smoke submit-to-result on 2 nodes
        smoke = []
        for _ in range(3):
            wall, r = ctk("job", "submit", "jax-smoke", "--deployment", dep, "--nodes", "2",
                          "--set", "partition=debug", "--wait")
            smoke.append(wall)
        figures["jax_smoke_submit_to_result_s"] = statistics.median(smoke)
        figures["jax_smoke_runs_s"] = [round(x, 2) for x in smoke]
    finally:
        if held:
            subprocess.run(["scancel", *held], env=env, capture_output=True, cwd=os.path.join(dep, "lab", "home"))
        if tmp:
            ctk("destroy", dep, check=False)
            shutil.rmtree(tmp, ignore_errors=True)

    if args.json:
        print(json.dumps(figures, indent=2))
        return
    print(f"submit, median of {args.submits} each (held jobs, alternating):")
    print(f"  ctk.jobs.submit()        {figures['api_submit_s'] * 1000:8.1f} ms")
    print(f"  sbatch --parsable        {figures['sbatch_submit_s'] * 1000:8.1f} ms")
    print(f"  ratio                    {figures['api_over_sbatch']:8.2f}   (target <= 1.3)")
    print(f"ctk job submit (CLI)       {figures['cli_submit_s']:8.3f} s median, {figures['cli_submit_min_s']:.3f} s best"
          "   (target <= 0.2 s; bytecode cached)")
    print(f"  without ctk's .pyc files {figures['cli_submit_uncached_s']:8.3f} s median   "
          "(a checkout run with PYTHONDONTWRITEBYTECODE, which this project's machines set)")
    print(f"ctk job status, {figures['status_jobs']} jobs  {figures['status_cli_s']:8.3f} s CLI, "
          f"{figures['status_api_s']:.3f} s in-process, {figures['status_slurm_calls']} Slurm call(s)"
          "   (target <= 1 s, one query)")
    print(f"jax-smoke on 2 nodes       {figures['jax_smoke_submit_to_result_s']:8.2f} s submit-to-result "
          f"(runs: {figures['jax_smoke_runs_s']})")


if __name__ == "__main__":
    main()
