"""Controller failover on the lab: how long after a kill -9 of the primary slurmctld the backup
takes a submission, and how long `ctk deploy` takes to bring the primary back in control.

    .venv/bin/python bench/failover.py [--rounds 3] [--json]

It deploys tests/integration/blueprints/ha-lab.yaml (the lab's image with
enable_backup_controller: the lab's SlurmctldTimeout is then 10 s) into a temporary folder,
then each round: a 2-node job running and in the saved state; kill -9 of the primary's
slurmctld; the time until `sbatch` is accepted (by the backup) and until that job ends; then
`ctk deploy` again and the time until the primary is in control (`scontrol ping`). It destroys
the lab, and removes its folder, at the end. Figures: each round's, and the medians.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

from labbench import BLUEPRINTS, ctk, lab_env, lab_folder, slurm

HA = os.path.join(BLUEPRINTS, "ha-lab.yaml")


def wait(check, timeout: float, what: str, interval: float = 0.1):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = check()
        if got:
            return got
        time.sleep(interval)
    sys.exit(f"not within {timeout} s: {what}")


def job_state(env: dict, dep: str, job: str) -> str:
    out = slurm(env, dep, "scontrol", "show", "-o", "job", job).stdout
    return dict(t.split("=", 1) for t in out.split() if "=" in t).get("JobState", "")


def one_round(env: dict, dep: str, primary: str) -> dict:
    job = slurm(env, dep, "sbatch", "--parsable", "-N2", "-o", "/dev/null", "--wrap", "srun sleep 25").stdout.strip()
    wait(lambda: job_state(env, dep, job) == "RUNNING", 60, "the job running")
    t_run = time.time()
    wait(lambda: os.stat(os.path.join(dep, "lab", "slurmctld", "job_state")).st_mtime > t_run + 0.5, 60, "state saved")
    ctk("exec", dep, primary, "--", "pkill", "-9", "-x", "slurmctld")
    t0 = time.monotonic()
    after = wait(lambda: slurm(env, dep, "sbatch", "--parsable", "-N1", "-o", "/dev/null", "--wrap",
                               "true").stdout.strip(), 120, "a submission the backup takes")
    takeover = time.monotonic() - t0
    wait(lambda: job_state(env, dep, after) == "COMPLETED", 120, "the new job's end")
    first_job = time.monotonic() - t0
    wait(lambda: job_state(env, dep, job) == "COMPLETED", 120, "the running job's end")
    t1 = time.monotonic()
    ctk("deploy", HA, "-o", dep, "-q")
    wait(lambda: f"Slurmctld(primary) at {primary} is UP" in slurm(env, dep, "scontrol", "ping").stdout, 120,
         "the primary back")
    back = time.monotonic() - t1
    return {"takeover_s": round(takeover, 2), "first_job_done_s": round(first_job, 2), "primary_back_s": round(back, 2)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    with lab_folder("ctk-bench-failover-") as (_, dep):
        ctk("deploy", HA, "-o", dep, "-q")
        st = json.loads(ctk("status", dep, "--json").stdout)
        primary = next(x["name"] for x in st["nodes"] if x["role"] == "controller")
        env = lab_env(dep)
        rounds = []
        for i in range(args.rounds):
            rounds.append(one_round(env, dep, primary))
            if not args.json:
                print(f"round {i + 1}: {rounds[-1]}", flush=True)
        med = {k: round(statistics.median(r[k] for r in rounds), 2) for k in rounds[0]}
        if args.json:
            print(json.dumps({"rounds": rounds, "median": med}))
        else:
            print(f"median over {len(rounds)} rounds: backup takes a submission {med['takeover_s']} s after the "
                  f"kill (SlurmctldTimeout 10 s); its first job done at {med['first_job_done_s']} s; `ctk deploy` "
                  f"puts the primary back in control in {med['primary_back_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
