"""Jobs benchmark, side by side in one run on a lab cluster (issue 5):

1. the Python API's `ctk.jobs.submit()` against a plain `sbatch --parsable` of the same script
   (the lab's own sbatch, run in its login node by the command `ctk env` puts on PATH),
   alternating, every job held (`--hold`) so nothing runs meanwhile; target ratio
   (API / sbatch, medians) <= 1.3;
2. the CLI `ctk job submit` wall time (a new process each time; the job runs `true`);
   target <= 0.2 s;
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

from ctk import paths  # noqa: E402
from ctk.jobs import api, registry, scheduler, templates  # noqa: E402
from ctk.jobs.clusters import LocalCluster  # noqa: E402


def ctk(*args, check=True):
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "ctk", *args], capture_output=True, text=True)
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
        while len([j for j in registry.load(dep)]) < args.status_jobs:
            held.append(api.submit("jax-train", params, cluster, cmd, extra_args=["--hold"]).id)
        calls = []
        real_run = cluster.run

        def counting(argv, *a, **k):
            calls.append(argv[0])
            return real_run(argv, *a, **k)
        cluster.run = counting
        t0 = time.perf_counter()
        rows = scheduler.states(cluster, [str(r["id"]) for r in registry.load(dep)])
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

        # 2. CLI submit wall time
        cli = []
        for _ in range(10):
            wall, r = ctk("job", "submit", "jax-train", "--deployment", dep, "--set", "partition=debug", "--", "true")
            cli.append(wall)
        figures["cli_submit_s"] = statistics.median(cli)
        figures["cli_submit_min_s"] = min(cli)

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
    print(f"  ratio                    {figures['api_over_sbatch']:8.2f}   (target <= 1.5)")
    print(f"ctk job submit (CLI)       {figures['cli_submit_s']:8.3f} s median, {figures['cli_submit_min_s']:.3f} s best"
          "   (target <= 0.3 s)")
    print(f"ctk job status, {figures['status_jobs']} jobs  {figures['status_cli_s']:8.3f} s CLI, "
          f"{figures['status_api_s']:.3f} s in-process, {figures['status_slurm_calls']} Slurm call(s)"
          "   (target <= 1 s, one query)")
    print(f"jax-smoke on 2 nodes       {figures['jax_smoke_submit_to_result_s']:8.2f} s submit-to-result "
          f"(runs: {figures['jax_smoke_runs_s']})")


if __name__ == "__main__":
    main()
