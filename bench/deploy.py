"""Local target benchmark: deploy from a cached image until every node is idle (1 controller +
4 computes), re-deploy with no change, and the memory of one idle compute node's processes.

    .venv/bin/python bench/deploy.py

Targets (issue 4): deploy <= 15 s; no-change re-deploy <= 2 s.
The image is built first (not timed) so the deploy starts from a cached image.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BLUEPRINT = """\
blueprint_name: bench
vars:
  deployment_name: bench
deployment_groups:
- group: cluster
  modules:
  - id: img
    source: ctk/image
    settings: {name: lab}
  - id: compute
    source: ctk/slurm/nodeset
    use: [img]
    settings: {machine_type: n2-standard-2, node_count_static: 4}
  - id: debug
    source: ctk/slurm/partition
    use: [compute]
    settings: {partition_name: debug, is_default: true, exclusive: false}
  - id: controller
    source: ctk/slurm/controller
    use: [img, debug]
"""


def ctk(*args):
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "ctk", *args], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"ctk {' '.join(args)} failed:\n{r.stderr[-3000:]}")
    return time.monotonic() - t0, r.stdout


def tree_rss_kib(pid: int) -> tuple[int, list[str]]:
    """Resident memory of a process and all its descendants."""
    children: dict[int, list[int]] = {}
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                ppid = int(open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(p))
            except (OSError, IndexError, ValueError):
                pass
    total, names, todo = 0, [], [pid]
    while todo:
        p = todo.pop()
        todo += children.get(p, [])
        try:
            status = open(f"/proc/{p}/status").read()
        except OSError:
            continue
        name = status.split("\n", 1)[0].split()[1]
        rss = next((int(ln.split()[1]) for ln in status.splitlines() if ln.startswith("VmRSS:")), 0)
        total += rss
        names.append(f"{name}={rss // 1024}MB")
    return total, names


def main() -> None:
    work = tempfile.mkdtemp(prefix="ctk-bench-deploy-")
    bp = os.path.join(work, "bench.yaml")
    with open(bp, "w") as f:
        f.write(BLUEPRINT)
    dep = os.path.join(work, "dep")
    try:
        ctk("image", "build", bp, "--no-verify", "-q")  # warm the cache; not timed
        t_deploy, out = ctk("deploy", bp, "-o", dep, "--json")
        res = json.loads(out)
        t_redeploy, out2 = ctk("deploy", bp, "-o", dep, "--json")
        res2 = json.loads(out2)
        _, st = ctk("status", dep, "--json")
        idle = [n["slurm_state"] for n in json.loads(st)["nodes"] if n["role"] == "compute"]
        pid = int(open(os.path.join(dep, "lab", "nodes", "benchcompute-0", "pid")).read())
        rss, names = tree_rss_kib(pid)
    finally:
        subprocess.run([sys.executable, "-m", "ctk", "destroy", dep], capture_output=True)
        shutil.rmtree(work, ignore_errors=True)
    print(f"deploy from cached image, 1 controller + 4 computes, to all idle: {t_deploy:5.2f} s "
          f"(ctk's own figure {res['seconds']:.2f} s; nodes {idle})  (target <= 15 s)")
    print(f"re-deploy with no change:                                 {t_redeploy:5.2f} s "
          f"(kept {len(res2['kept'])}, restarted {len(res2['restarted'])})  (target <= 2 s)")
    print(f"memory of one idle compute node (all its processes):      {rss / 1024:5.1f} MB  "
          f"[{', '.join(names)}]")


if __name__ == "__main__":
    main()
