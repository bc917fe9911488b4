"""Image build benchmark: full build, no-op rebuild, and a rebuild after changing only one
stack pin (and relocking the stack, which is not timed), measured side by side in one run on a
fresh layer store, each as users run it: `ctk image build` with verification (a no-op's
verification is the pass on record; a rebuilt image is verified again).

    .venv/bin/python bench/image_build.py [--keep]

Targets: no-op rebuild with verification <= 1 s; stack-only rebuild <= 25 % of the full build.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import yaml

from ctk import paths
from ctk.plan import process

LAB = os.path.join(paths.BLUEPRINTS, "lab.yaml")


def timed_build(state: str, blueprint: str, stacks: str | None = None, *flags: str) -> tuple[float, dict]:
    env = {**os.environ, "CTK_STATE_DIR": state}
    if stacks:
        env["CTK_STACKS"] = stacks
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "ctk", "image", "build", blueprint, *flags, "--json"],
                       capture_output=True, text=True, env=env)
    dt = time.monotonic() - t0
    if r.returncode != 0:
        sys.exit(f"build failed:\n{r.stderr[-3000:]}")
    return dt, json.loads(r.stdout)[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--keep", action="store_true", help="keep the layer store afterwards")
    args = ap.parse_args()
    state = tempfile.mkdtemp(prefix="ctk-bench-")
    try:
        full, r1 = timed_build(state, LAB)
        noop, r2 = timed_build(state, LAB)
        noop_bare, _ = timed_build(state, LAB, None, "--no-verify")
        stack = process(LAB).deployment.images[0].stack
        stacks = yaml.safe_load(open(os.path.join(paths.IMAGES, "stacks.yaml")))
        stacks["stacks"][stack]["pins"]["chex"] = "0.1.91"
        path = os.path.join(state, "stacks-bench.yaml")
        with open(path, "w") as f:
            yaml.safe_dump(stacks, f)
        shutil.copytree(os.path.join(paths.IMAGES, "locks"), os.path.join(state, "locks"))
        subprocess.run([sys.executable, "-m", "ctk", "stack", "lock", stack, "-q"], check=True,
                       env={**os.environ, "CTK_STACKS": path}, stdout=subprocess.DEVNULL)
        stack_only, r3 = timed_build(state, LAB, path)
    finally:
        if not args.keep:
            shutil.rmtree(state, ignore_errors=True)
    print(f"full build (base and every layer):       {full:7.1f} s   built={r1['built']}")
    print(f"no-op rebuild, verification on record:    {noop:7.2f} s   built={r2['built']}  (target <= 1 s)"
          f"  verified: {r2.get('verified')}")
    print(f"no-op rebuild --no-verify:                {noop_bare:7.2f} s")
    print(f"stack-pin-only rebuild:                   {stack_only:7.1f} s   built={r3['built']}")
    print(f"stack-only / full:                        {stack_only / full:7.1%}   (target <= 25 %)")


if __name__ == "__main__":
    main()
