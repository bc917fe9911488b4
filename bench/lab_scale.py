"""Lab scale benchmark: how long labs of more and more nodes take to come up idle, what an idle
lab costs in memory, and how long a job waits for dynamic nodes to boot for it.

    .venv/bin/python bench/lab_scale.py [--static 8,32,64,128] [--big 256] [--json]

1. The curve: a lab of N static nodes (and a controller with accounting, a login node), from a
   cached image, for each N: `ctk deploy` until every node is idle, and the lab's memory.
2. A lab of --big nodes, mostly dynamic (16 static, the rest powered down): up and idle
   (target <= 20 s), with its memory idle.
3. In that lab, from `sbatch` to RUNNING for a job on 1, 4 and 16 powered-down nodes (a batch
   job), and the whole of `srun -N K hostname` on as many; each time on nodes that are powered
   down (the previous ones are let power down first).

Memory is the proportional set size (PSS) of every process of the lab (its nodes' and its
agent's; shared pages split between the processes that map them), and the drop of the
machine's MemAvailable. The image is built first (not timed).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "toolkit"))


def blueprint(static: int, dynamic: int) -> str:
    burst = f"""
  - id: burst
    source: ctk/slurm/nodeset
    use: [lab_image]
    settings: {{machine_type: n2-standard-2, node_count_dynamic_max: {dynamic}}}
  - id: burstp
    source: ctk/slurm/partition
    use: [burst]
    settings: {{partition_name: burst, exclusive: false, suspend_time: 5, suspend_timeout: 5}}""" if dynamic else ""
    return f"""\
blueprint_name: bench-scale
vars:
  deployment_name: scale
deployment_groups:
- group: cluster
  modules:
  - id: lab_image
    source: ctk/image
    settings: {{name: lab, base: debian-13, roles: [common, munge, slurm, jax], stack: jax-cpu}}
  - id: fixed
    source: ctk/slurm/nodeset
    use: [lab_image]
    settings: {{machine_type: n2-standard-2, node_count_static: {static}}}
  - id: debug
    source: ctk/slurm/partition
    use: [fixed]
    settings: {{partition_name: debug, is_default: true, exclusive: false}}{burst}
  - id: login
    source: ctk/slurm/login
    use: [lab_image]
  - id: controller
    source: ctk/slurm/controller
    use: [lab_image, debug{", burstp" if dynamic else ""}, login]
    settings:
      cloud_parameters: {{resume_timeout: 300, suspend_timeout: 5}}
"""


def ctk(*args: str, check: bool = True) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "ctk", *args], capture_output=True, text=True)
    if check and r.returncode != 0:
        sys.exit(f"ctk {' '.join(args)} failed:\n{r.stderr[-3000:]}")
    return time.monotonic() - t0, r


def mem_available_mb() -> float:
    with open("/proc/meminfo") as f:
        return next(int(ln.split()[1]) for ln in f if ln.startswith("MemAvailable:")) / 1024


def _children() -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                ppid = int(open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            out.setdefault(ppid, []).append(int(p))
    return out


def pss_kib(pids: list[int]) -> int:
    """PSS of these processes and all their descendants."""
    children, total, todo, seen = _children(), 0, list(pids), set()
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        todo += children.get(p, [])
        try:
            with open(f"/proc/{p}/smaps_rollup") as f:
                total += next((int(ln.split()[1]) for ln in f if ln.startswith("Pss:")), 0)
        except OSError:
            pass
    return total


def lab_memory(dep: str) -> dict:
    """PSS in MB of the lab's nodes by role, and of its agent."""
    from ctk.sandbox.node import node_pid
    from ctk.targets.labagent import agent_pid
    from ctk.targets.labclient import load_state

    state = load_state(dep)
    by_role: dict[str, list[int]] = {}
    for x in state.nodes:
        pid = node_pid(os.path.join(dep, "lab", "nodes", x.name))
        if pid:
            by_role.setdefault(x.role, []).append(pss_kib([pid]))
    agent = agent_pid(os.path.join(os.path.abspath(dep), "lab", "power"))
    out = {role: {"nodes": len(v), "total_mb": round(sum(v) / 1024, 1), "per_node_mb": round(sum(v) / len(v) / 1024, 2)}
           for role, v in by_role.items()}
    out["agent_mb"] = round(pss_kib([agent]) / 1024, 1) if agent else 0
    out["total_mb"] = round(sum(v["total_mb"] for k, v in out.items() if isinstance(v, dict)) + out["agent_mb"], 1)
    return out


def up(work: str, static: int, dynamic: int) -> dict:
    bp = os.path.join(work, f"scale-{static}-{dynamic}.yaml")
    with open(bp, "w") as f:
        f.write(blueprint(static, dynamic))
    dep = os.path.join(work, f"dep-{static}-{dynamic}")
    avail0 = mem_available_mb()
    wall, r = ctk("deploy", bp, "-o", dep, "--max-nodes", str(max(static, dynamic, 1)), "--json")
    rec = json.loads(r.stdout)
    time.sleep(3)  # let the daemons settle before measuring
    mem = lab_memory(dep)
    return {"static": static, "dynamic": dynamic, "nodes": static + dynamic + 2, "deploy_s": round(rec["seconds"], 2),
            "wall_s": round(wall, 2), "memory": mem, "mem_available_drop_mb": round(avail0 - mem_available_mb(), 1),
            "dep": dep}


def wait_off(dep: str, names: list[str], timeout: float = 120) -> None:
    from ctk.targets.local import status_local

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = {x.name: x.power for x in status_local(dep).nodes}
        if all(st.get(n) == "off" for n in names):
            return
        time.sleep(0.5)
    sys.exit(f"nodes did not power down: {names}")


def to_running(dep: str, k: int) -> dict:
    """sbatch to RUNNING on K powered-down nodes, then srun -N K hostname on K powered-down ones."""
    from ctk.targets.labclient import slurm

    t0 = time.monotonic()
    jid = slurm(dep, "sbatch", "--parsable", "-N", str(k), "-p", "burst", "-o", "/dev/null",
                "--wrap", "sleep 1").stdout.strip()
    running = None
    while time.monotonic() - t0 < 300:
        st = slurm(dep, "squeue", "-h", "-j", jid, "-o", "%T", check=False).stdout.strip()
        if st == "RUNNING" or (st == "" and running is None and time.monotonic() - t0 > 2):
            running = time.monotonic() - t0
            break
        time.sleep(0.1)
    nodes = slurm(dep, "sacct", "-n", "-X", "-P", "-j", jid, "-o", "NodeList").stdout.strip()
    while slurm(dep, "squeue", "-h", "-j", jid, check=False).stdout.strip():
        time.sleep(0.5)
    names = slurm(dep, "scontrol", "show", "hostnames", nodes).stdout.split()
    wait_off(dep, names)
    t1 = time.monotonic()
    r = slurm(dep, "srun", "-N", str(k), "-p", "burst", "hostname", timeout=300)
    srun_s = time.monotonic() - t1
    hosts = r.stdout.split()
    wait_off(dep, hosts)
    return {"nodes": k, "sbatch_to_running_s": round(running, 2) if running else None,
            "srun_total_s": round(srun_s, 2), "srun_hosts": len(set(hosts))}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--static", default="8,32,64,128", help="node counts of the all-static labs (the curve)")
    p.add_argument("--big", type=int, default=256, help="nodes of the mostly dynamic lab (16 static)")
    p.add_argument("--jobs", default="1,4,16", help="powered-down nodes per job, in the big lab")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    _, r = ctk("image", "build", os.path.join(ROOT, "blueprints", "lab.yaml"), "--json")
    work = tempfile.mkdtemp(prefix="ctk-bench-scale-")
    out: dict = {"curve": [], "machine": {"cpus": os.cpu_count(), "mem_available_mb": round(mem_available_mb())}}
    try:
        for n in [int(x) for x in args.static.split(",") if x]:
            rec = up(work, n, 0)
            ctk("destroy", rec.pop("dep"))
            out["curve"].append(rec)
            print(f"static {n:>4} nodes (+ controller, login): up in {rec['deploy_s']:6.2f} s; memory "
                  f"{rec['memory']['total_mb']:7.1f} MB PSS ({rec['memory'].get('compute', {}).get('per_node_mb')} MB "
                  f"per compute node), MemAvailable -{rec['mem_available_drop_mb']:.0f} MB", flush=True)
        big = up(work, 16, args.big - 16)
        print(f"big lab {args.big} nodes (16 static, {args.big - 16} dynamic; + controller, login): up and idle "
              f"in {big['deploy_s']:.2f} s (target <= 20 s); memory {big['memory']['total_mb']:.1f} MB PSS, "
              f"MemAvailable -{big['mem_available_drop_mb']:.0f} MB", flush=True)
        big["jobs"] = []
        for k in [int(x) for x in args.jobs.split(",") if x]:
            rec = to_running(big["dep"], k)
            big["jobs"].append(rec)
            print(f"  job on {k:>2} powered-down nodes: sbatch -> RUNNING {rec['sbatch_to_running_s']} s; "
                  f"srun -N{k} hostname {rec['srun_total_s']} s", flush=True)
        ctk("destroy", big.pop("dep"))
        out["big"] = big
    finally:
        for d in os.listdir(work):
            if d.startswith("dep-"):
                ctk("destroy", os.path.join(work, d), check=False)
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
