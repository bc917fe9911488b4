"""A soak of the elastic lab (blueprints/elastic-lab.yaml), for real: training jobs (train.py, 2
nodes each) kept running on its Spot and flex-start partitions for SECONDS while the lab's agent
preempts random powered-up Spot nodes (ctk deploy --chaos) and takes flex-start capacity back at
its run duration, then until every job has ended. Each job must end COMPLETED with the final
line of the same training run never interrupted (run first, on the static debug nodes).

    python tests/integration/soak.py --out DIR [--seconds 300] [--chaos 40s] [--seed 1]

writes DIR/result.json (what tests/integration/test_elastic.py checks) and leaves the lab
destroyed (--keep leaves it up). Run by the integration tests in the background, at a low CPU
priority, with CTK_STATE_DIR set to the session's store (the lab's image is built by then).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "toolkit"))

from ctk import paths  # noqa: E402

BLUEPRINT = os.path.join(paths.BLUEPRINTS, "elastic-lab.yaml")
TRAIN = os.path.join(paths.SBATCH, "examples", "train.py")
PY = "/opt/ctk/jax/bin/python"
IN_FLIGHT = {"spot": 2, "flex": 1}  # jobs kept running per partition (2 nodes each)
CHECKPOINT_EVERY = 5  # train.py --checkpoint-every
SETTLE = 120  # seconds every node has, after the last job, to be usable again
ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE")


def ctk(*args, timeout=900):
    return subprocess.run([sys.executable, "-m", "ctk", *args], capture_output=True, text=True, timeout=timeout)


def log(msg: str) -> None:
    print(f"[soak {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def final_line(text: str) -> str | None:
    lines = [ln for ln in text.splitlines() if ln.startswith("train: final ")]
    return lines[-1] if lines else None


def parse_runs(text: str) -> list[dict]:
    """The runs of a job whose log holds all of them (--open-mode=append), as train.py printed
    them: each begins at `train: restart K`; START is the step it began from (0 or the checkpoint
    it resumed from), LAST the last step it printed, SAVED the step of the checkpoint it saved on
    SIGTERM. A run cut short before jax.distributed.initialize() printed nothing and is not there;
    one whose node was lost may lack its last lines (they come back through srun)."""
    runs: list[dict] = []
    for line in text.splitlines():
        if m := re.match(r"train: restart (\d+)$", line):
            runs.append({"restart": int(m.group(1)), "start": None, "last": None, "saved": None})
        elif not runs:
            continue
        elif line == "train: starting from step 0":
            runs[-1]["start"] = 0
        elif m := re.match(r"train: resumed from step (\d+)$", line):
            runs[-1]["start"] = int(m.group(1))
        elif m := re.match(r"step=(\d+) loss=", line):
            runs[-1]["last"] = int(m.group(1))
        elif m := re.match(r"train: preempted at step (\d+): checkpoint saved", line):
            runs[-1]["saved"] = int(m.group(1))
    return runs


def unusable(sinfo: str) -> list[str]:
    """The nodes of `sinfo -h -N -o "%N %T"` that are down, drained or failed."""
    return [w[0] for w in (ln.split() for ln in sinfo.splitlines()) if len(w) == 2
            and w[1].startswith(("down", "drain", "fail"))]


def committed_before(runs: list[dict], every: int) -> int:
    """The step of the newest checkpoint these runs are known to have committed: one saved on
    SIGTERM (train.py waits for it before it says so), or a periodic one two saves back from
    the last step printed (orbax's save() waits for the save before it, and train.py prints a
    step before saving it: once `step=M` is out, the save at the last multiple of EVERY below M
    has begun, so the one before it is committed)."""
    best = 0
    for r in runs:
        if r["saved"]:
            best = max(best, r["saved"])
        if r["last"]:
            best = max(best, ((r["last"] - 1) // every - 1) * every)
    return best


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="folder for the lab (DIR/dep) and DIR/result.json")
    p.add_argument("--seconds", type=float, default=300, help="how long jobs are submitted (default 300)")
    p.add_argument("--chaos", default="40s", help="mean interval of the random preemptions (ctk deploy --chaos)")
    p.add_argument("--seed", type=int, default=1, help="the preemptions' seed")
    p.add_argument("--steps", type=int, default=60, help="train.py steps per job")
    p.add_argument("--sleep", type=float, default=0.5, help="train.py --sleep per step")
    p.add_argument("--drain-timeout", type=float, default=900, help="seconds to wait for the last jobs")
    p.add_argument("--keep", action="store_true", help="leave the lab up")
    args = p.parse_args(argv)
    import signal

    def stop(signum, frame):  # a soak cut short still destroys its lab (main's finally)
        raise SystemExit(f"stopped by signal {signum}")

    signal.signal(signal.SIGTERM, stop)
    os.makedirs(args.out, exist_ok=True)
    dep = os.path.join(args.out, "dep")
    result: dict = {"seconds": args.seconds, "chaos": args.chaos, "seed": args.seed, "steps": args.steps,
                    "checkpoint_every": CHECKPOINT_EVERY}
    t0 = time.monotonic()
    r = ctk("deploy", BLUEPRINT, "--vars", "deployment_name=soak", "-o", dep, "--chaos", args.chaos,
            "--chaos-seed", str(args.seed), "--json")
    if r.returncode != 0:
        result["error"] = f"deploy failed: {r.stderr[-3000:]}"
        return _write(args.out, result)
    result["deploy_seconds"] = round(time.monotonic() - t0, 1)
    try:
        _soak(args, dep, result)
    except Exception as e:  # noqa: BLE001 - reported in the result, which the test reads
        import traceback

        result["error"] = traceback.format_exc()[-4000:]
        log(f"error: {e}")
    finally:
        if not args.keep:
            ctk("destroy", dep)
    return _write(args.out, result)


def _write(out: str, result: dict) -> int:
    tmp = os.path.join(out, "result.json.tmp")
    with open(tmp, "w") as f:
        json.dump(result, f, indent=1)
    os.replace(tmp, os.path.join(out, "result.json"))
    return 1 if "error" in result else 0


def _soak(args, dep: str, result: dict) -> None:
    from ctk.jobs import submit
    from ctk.targets.labagent import read_events
    from ctk.targets.labclient import slurm

    shutil.copy(TRAIN, os.path.join(dep, "lab", "home", "researcher", "train.py"))

    def cmd(ckpt: str) -> list[str]:
        return [PY, "/home/researcher/train.py", "--steps", str(args.steps), "--checkpoint-every",
                str(CHECKPOINT_EVERY), "--checkpoint-dir", f"/home/researcher/{ckpt}", "--sleep", str(args.sleep)]

    ref = submit("jax-train", {"nodes": 2, "partition": "debug"}, dep, command=cmd("ckpt-reference")[:-2] + ["--sleep", "0"])
    state = ref.wait(timeout=600)
    expected = final_line(ref.logs())
    if state != "COMPLETED" or not expected:
        raise RuntimeError(f"the uninterrupted reference run ended {state}:\n{ref.logs()[-2000:]}")
    result["expected"] = expected
    log(f"reference: {expected}")

    jobs: list[dict] = []
    start = time.monotonic()
    n = 0
    while True:
        now = time.monotonic()
        submitting = now - start < args.seconds
        for j in jobs:
            if j["state"] not in ENDED:
                j["state"] = j["job"].state
        if submitting:
            for part, want in IN_FLIGHT.items():
                while sum(1 for j in jobs if j["partition"] == part and j["state"] not in ENDED) < want:
                    n += 1
                    job = submit("jax-train", {"nodes": 2, "partition": part, "preemptible": True}, dep,
                                 command=cmd(f"ckpt-soak-{n}"))
                    jobs.append({"job": job, "id": job.id, "partition": part, "state": "PENDING",
                                 "submitted": round(now - start, 1)})
                    log(f"submitted {job.id} on {part}")
        elif all(j["state"] in ENDED for j in jobs):
            break
        elif now - start > args.seconds + args.drain_timeout:
            log("drain timed out")
            break
        time.sleep(2)
    result["submit_seconds"] = args.seconds
    result["total_seconds"] = round(time.monotonic() - start, 1)
    out = []
    for j in jobs:
        text = j["job"].logs()
        out.append({"id": j["id"], "partition": j["partition"], "state": j["state"], "submitted": j["submitted"],
                    "runs": parse_runs(text), "final": final_line(text)})
    result["jobs"] = out
    events = read_events(os.path.join(os.path.abspath(dep), "lab", "power"))
    result["events"] = events
    result["squeue"] = slurm(dep, "squeue", "-h", "-o", "%i %T %r", check=False).stdout
    # The agent's random preemptions go on after the last job has ended (an idle Spot node
    # still up is a victim too): a node taken back in the last seconds is DOWN until the agent's
    # next sync powers it down again and SuspendTimeout (10 s) has passed. Every node must be
    # usable again within SETTLE seconds; how long it took is in the result.
    t0 = time.monotonic()
    while True:
        sinfo = slurm(dep, "sinfo", "-h", "-N", "-o", "%N %T", check=False).stdout
        if not unusable(sinfo) or time.monotonic() - t0 > SETTLE:
            break
        time.sleep(2)
    result["sinfo"] = sinfo
    result["settle_seconds"] = round(time.monotonic() - t0, 1)
    log(f"{len(out)} jobs; {sum(1 for e in events if e.get('event') == 'sigterm')} nodes taken back")


if __name__ == "__main__":
    sys.exit(main())
