"""MaxText benchmark on the MaxText lab (issue 26), side by side in one run:

1. MaxText's step time on 2 lab nodes, bare (the node's maxtext-cpu venv) and in the container
   image built from the same layers (Slurm's own containers: srun --container, runc), the two
   runs alternating; each run's figure is the median of the `seconds` MaxText logs for every
   step after the first few (compilation), both processes; the ratio container / bare is taken
   pair by pair; target <= 1.05;
2. the container image's build from a warm store (its layers are the node image's, so nothing
   is built): `ctk image build --only maxtext-cpu --verify` (its verification runs), then the
   same without --verify (the verification on record).

    .venv/bin/python bench/maxtext.py [--deployment DIR] [--rounds N] [--steps N] [--json]

Without --deployment it deploys blueprints/maxtext-lab.yaml into a temporary folder (the images
are built first if needed, not timed) and destroys it at the end.
"""

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
from ctk.jobs import submit  # noqa: E402

BLUEPRINT = os.path.join(paths.BLUEPRINTS, "maxtext-lab.yaml")
# Bigger than the tests' model, so that a step's compute outweighs the noise of a shared machine.
MODEL = ["max_target_length=256", "base_emb_dim=256", "base_num_query_heads=4", "base_num_kv_heads=4",
         "base_mlp_dim=1024", "base_num_decoder_layers=4", "head_dim=64", "vocab_size=2048",
         "async_checkpointing=false", "enable_tensorboard=false", "attention=dot_product"]
WARMUP = 5  # steps left out: the first compiles, a few more settle
STEP_RE = re.compile(r"completed step: (\d+), seconds: ([0-9.]+),")


def ctk(*args, check=True):
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "ctk", *args], capture_output=True, text=True)
    if check and r.returncode != 0:
        sys.exit(f"ctk {' '.join(args)} failed:\n{r.stderr[-3000:]}")
    return time.monotonic() - t0, r


def run_job(dep: str, steps: int, image: str) -> float:
    """The median step time of one MaxText run on 2 nodes (seconds)."""
    params = {"nodes": 2, "steps": steps, "checkpoint_period": steps * 10, "per_device_batch_size": 2.0,
              "job_name": "bench-maxtext"}
    if image:
        params["image"] = image
    job = submit("maxtext", params, dep, command=MODEL)
    state = job.wait(timeout=900)
    err = job.logs(stderr=True)
    if state != "COMPLETED":
        sys.exit(f"job {job.id} ({'container' if image else 'bare'}) ended {state}:\n{err[-3000:]}")
    times = [float(m.group(2)) for m in STEP_RE.finditer(err) if int(m.group(1)) >= WARMUP]
    if len(times) < 2 * (steps - WARMUP):
        sys.exit(f"job {job.id}: {len(times)} step times in its log, expected {2 * (steps - WARMUP)}")
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--deployment", help="a deployed MaxText lab (default: deploy one in a temporary folder)")
    ap.add_argument("--rounds", type=int, default=3, help="bare/container pairs")
    ap.add_argument("--steps", type=int, default=40, help="MaxText steps per run")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    tmp = None
    dep = args.deployment
    if not dep:
        tmp = tempfile.mkdtemp(prefix="ctk-bench-maxtext-")
        dep = os.path.join(tmp, "lab")
        ctk("deploy", BLUEPRINT, "-o", dep, "-q")
    out: dict = {"rounds": []}
    try:
        for i in range(args.rounds):
            # alternate which goes first, so that a drift of the machine's load falls on both
            order = ["", "maxtext-cpu"] if i % 2 == 0 else ["maxtext-cpu", ""]
            got = {image or "bare": run_job(dep, args.steps, image) for image in order}
            row = {"bare_s": got["bare"], "container_s": got["maxtext-cpu"],
                   "ratio": got["maxtext-cpu"] / got["bare"]}
            out["rounds"].append(row)
            if not args.json:
                print(f"round {i + 1}: step bare {row['bare_s'] * 1000:.1f} ms, container "
                      f"{row['container_s'] * 1000:.1f} ms, ratio {row['ratio']:.3f}", flush=True)
        out["ratio_median"] = statistics.median(r["ratio"] for r in out["rounds"])
        out["container_build_warm_verify_s"], _ = ctk("image", "build", BLUEPRINT, "--only", "maxtext-cpu",
                                                      "--verify", "--json")
        out["container_build_warm_s"], _ = ctk("image", "build", BLUEPRINT, "--only", "maxtext-cpu", "--json")
    finally:
        if tmp:
            ctk("destroy", dep, check=False)
            shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        print(json.dumps(out, indent=2))
        return
    print(f"MaxText step time, container / bare, median of {args.rounds} pairs: {out['ratio_median']:.3f} "
          f"(target <= 1.05)")
    print(f"container image from a warm store, verified: {out['container_build_warm_verify_s']:.1f} s; "
          f"again, the verification on record: {out['container_build_warm_s']:.1f} s")


if __name__ == "__main__":
    main()
