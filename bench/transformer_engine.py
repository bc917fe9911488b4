"""Transformer Engine benchmark: a GPU image with Transformer Engine built for real, then a
rebuild of its jax layer that takes the JAX extension from the wheelhouse instead of compiling
it again, measured side by side in one run.

    .venv/bin/python bench/transformer_engine.py [--state DIR]

The image: debian-13, roles common, munge, slurm, nvidia_driver, cuda and jax, stack jax-cuda12
with `transformer_engine: "2.20.2"`. Its lower layers are those of blueprints/gpu-lab.yaml, so a
store that has built gpu-lab builds only the cuda and jax layers. The rebuild changes one pin of
the stack (chex, in a copy of the catalog, relocked with Transformer Engine; not timed), so
only the jax layer runs again.

Prints: each layer's build seconds, the JAX extension's compile seconds and wheel size, the
sizes of the cuda and jax layers, and the rebuild's seconds with the wheel reused.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time

import yaml

from ctk import paths

BLUEPRINT = textwrap.dedent("""\
    blueprint_name: te-bench
    vars:
      deployment_name: tebench
    deployment_groups:
    - group: image
      modules:
      - id: te_image
        source: ctk/image
        settings:
          name: gpu-te
          base: debian-13
          roles: [common, munge, slurm, nvidia_driver, cuda, jax]
          stack: jax-cuda12
          transformer_engine: "2.20.2"
    - group: cluster
      modules:
      - id: gpu_nodeset
        source: ctk/slurm/nodeset
        use: [te_image]
        settings: {machine_type: a3-megagpu-8g, node_count_static: 1}
      - id: gpu_partition
        source: ctk/slurm/partition
        use: [gpu_nodeset]
        settings: {partition_name: gpu, is_default: true}
      - id: controller
        source: ctk/slurm/controller
        use: [te_image, gpu_partition]
    """)


def build(state: str, blueprint: str, stacks: str | None = None) -> tuple[float, dict]:
    env = {**os.environ, "CTK_STATE_DIR": state}
    if stacks:
        env["CTK_STACKS"] = stacks
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "ctk", "image", "build", blueprint, "--json"],
                       stdout=subprocess.PIPE, text=True, env=env)  # progress shows on stderr
    dt = time.monotonic() - t0
    if r.returncode != 0:
        sys.exit(f"build failed (exit {r.returncode})")
    return dt, json.loads(r.stdout)[0]


def du(path: str) -> int:
    return int(subprocess.check_output(["du", "-sb", path], text=True).split()[0])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--state", default=os.environ.get("CTK_STATE_DIR"),
                    help="the layer store to build in (default: CTK_STATE_DIR, else a new one)")
    args = ap.parse_args()
    state = args.state or tempfile.mkdtemp(prefix="ctk-bench-te-")
    work = tempfile.mkdtemp(prefix="ctk-bench-te-work-")
    try:
        bp = os.path.join(work, "te.yaml")
        with open(bp, "w") as f:
            f.write(BLUEPRINT)
        t_start = time.time()
        full, r1 = build(state, bp)
        image = json.load(open(os.path.join(state, "images", "gpu-te.json")))
        te = image["stack"]["transformer_engine"]
        wheel_dir = os.path.join(state, "wheelhouse", "built", te["wheels"])
        compiled_now = os.path.getmtime(os.path.join(wheel_dir, "build.json")) >= t_start
        layers = {}
        for key in image["layers"][1:]:
            meta = json.load(open(os.path.join(state, "layers", key, "meta.json")))
            layers[meta["role"]] = (key, meta.get("seconds"))

        stacks = yaml.safe_load(open(os.path.join(paths.IMAGES, "stacks.yaml")))
        stacks["stacks"]["jax-cuda12"]["pins"]["chex"] = "0.1.91"
        catalog = os.path.join(work, "stacks.yaml")
        with open(catalog, "w") as f:
            yaml.safe_dump(stacks, f)
        shutil.copytree(os.path.join(paths.IMAGES, "locks"), os.path.join(work, "locks"))
        subprocess.run([sys.executable, "-m", "ctk", "stack", "lock", "jax-cuda12", "--python", "3.13",
                        "--transformer-engine", te["version"], "-q"], check=True,
                       env={**os.environ, "CTK_STACKS": catalog}, stdout=subprocess.DEVNULL)
        rebuild, r2 = build(state, bp, catalog)
        image2 = json.load(open(os.path.join(state, "images", "gpu-te.json")))
        te2 = image2["stack"]["transformer_engine"]
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print(f"image gpu-te (debian-13, jax-cuda12 + Transformer Engine {te['version']}), store {state}")
    print(f"  full build: {full:.1f} s (layers built: {', '.join(r1['built']) or 'none'}; "
          f"cached: {', '.join(r1['cached']) or 'none'})")
    for role, (key, secs) in layers.items():
        size = du(os.path.join(state, "layers", key))
        print(f"    layer {role:<14} {secs if secs is not None else '-':>7} s  {size / 1e6:8.0f} MB")
    b = te.get("build") or {}
    print(f"  JAX extension {te['wheel']}: {'compiled in this build' if compiled_now else 'taken from the wheelhouse; compiled earlier'}"
          f" in {b.get('seconds', '?')} s against CUDA {b.get('toolkit', '?')}, {b.get('bytes', 0) / 1e6:.2f} MB")
    print(f"  jax layer rebuilt after one pin change, extension from the wheelhouse: {rebuild:.1f} s "
          f"(built: {', '.join(r2['built'])}); the wheel was {'reused' if te2.get('build') == b else 'compiled again'}")
    print(f"  wheelhouse: {du(os.path.join(state, 'wheelhouse')) / 1e9:.2f} GB")


if __name__ == "__main__":
    main()
