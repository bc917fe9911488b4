"""Rolling image updates on the lab: how long a changed image takes to reach each compute node,
and how long the `ctk deploy` that starts it takes.

    .venv/bin/python bench/rollout.py [--rounds 3] [--json]

It deploys tests/integration/blueprints/rollout-lab.yaml (two static compute nodes) into a
temporary folder, then each round deploys the other of two images (the lab's, and the same with
the metrics role: the first round may build that layer, which is left out of the figures), with
no job running: each compute node reboots at once. Figures per round: the deploy's wall time
(the controller and login node restart on the new image, the compute nodes are asked to reboot
when idle), and for each compute node the time from the deploy's start until it is idle again on
the new image, and the agent's stop-and-boot of it. It destroys the lab, and removes its folder,
at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from labbench import BLUEPRINTS, ctk, lab_env, lab_folder

V1 = os.path.join(BLUEPRINTS, "rollout-lab.yaml")
ROLES = "roles: [common, munge, slurm, jax]"


def booted(dep: str, node: str) -> str:
    """The image build (top layer key) the node booted, from the spec it booted with."""
    try:
        with open(os.path.join(dep, "lab", "nodes", node, "spec.json")) as f:
            return os.path.basename(os.path.dirname(json.load(f)["lowerdirs"][0]))
    except (OSError, ValueError, KeyError, IndexError):
        return ""


def states(env: dict, dep: str) -> dict[str, str]:
    out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %T"], capture_output=True, text=True, env=env,
                         cwd=os.path.join(dep, "lab", "root"), timeout=30).stdout
    return dict(ln.split() for ln in out.splitlines() if len(ln.split()) == 2)


def one_round(env: dict, dep: str, blueprint: str, computes: list[str]) -> dict:
    before = {n: booted(dep, n) for n in computes}
    t0 = time.monotonic()
    ctk("deploy", blueprint, "-o", dep, "-q")
    deploy_s = time.monotonic() - t0
    back: dict[str, float] = {}
    while len(back) < len(computes):
        if time.monotonic() - t0 > 300:
            sys.exit(f"not every node back on the new image in 300 s: {back}")
        st = states(env, dep)
        for n in computes:
            if n not in back and booted(dep, n) not in ("", before[n]) and st.get(n) == "idle":
                back[n] = round(time.monotonic() - t0, 2)
        time.sleep(0.1)
    with open(os.path.join(dep, "lab", "power", "events.log")) as f:
        events = [json.loads(ln) for ln in f if ln.strip()]
    reboots = [e["seconds"] for e in events if e["event"] == "rebooted"][-len(computes):]
    return {"deploy_s": round(deploy_s, 2), "node_back_s": back, "agent_reboot_s": reboots}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    with lab_folder("ctk-bench-rollout-") as (top, dep):
        v2 = os.path.join(top, "rollout-v2.yaml")
        with open(V1) as f, open(v2, "w") as g:
            g.write(f.read().replace(ROLES, "roles: [common, munge, slurm, jax, metrics]"))
        ctk("image", "build", v2, "-q")  # the metrics layer, outside the figures
        ctk("deploy", V1, "-o", dep, "-q")
        st = json.loads(ctk("status", dep, "--json").stdout)
        computes = sorted(x["name"] for x in st["nodes"] if x["role"] == "compute")
        env = lab_env(dep)
        rounds = []
        for i in range(args.rounds):
            rounds.append(one_round(env, dep, v2 if i % 2 == 0 else V1, computes))
            if not args.json:
                print(f"round {i + 1}: {rounds[-1]}", flush=True)
        per_node = [s for r in rounds for s in r["node_back_s"].values()]
        med = {"deploy_s": round(statistics.median(r["deploy_s"] for r in rounds), 2),
               "node_back_s": round(statistics.median(per_node), 2),
               "agent_reboot_s": round(statistics.median(s for r in rounds for s in r["agent_reboot_s"]), 2)}
        if args.json:
            print(json.dumps({"rounds": rounds, "median": med}))
        else:
            print(f"median over {len(rounds)} rounds of {len(computes)} idle compute nodes: `ctk deploy` of the other "
                  f"image {med['deploy_s']} s; a node idle on its new image {med['node_back_s']} s after the deploy "
                  f"began; the agent's stop and boot of a node {med['agent_reboot_s']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
