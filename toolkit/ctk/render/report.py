"""Readable summaries of a Deployment: the tables `ctk show` prints."""

from __future__ import annotations

from ..model import Deployment, LabSettings, SshSettings
from .hostlist import compress


def _table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows)] if rows else [len(h) for h in headers]
    def line(r):
        return "  ".join(str(x).ljust(w) for x, w in zip(r, widths)).rstrip()
    return "\n".join([line(headers), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def accelerators(ns) -> str:
    if ns.gpu_count:
        return f"{ns.gpu_count} x {ns.gpu_type.upper()}"
    if ns.tpu_type:
        return f"TPU {ns.tpu_type} ({ns.tpu_chips_per_host} chips/host)"
    return "-"


def capacity(ns) -> str:
    """How a nodeset's VMs are provisioned, where it is not on demand."""
    if ns.flex_max_run_duration is not None:
        return f"flex-start (max run {ns.flex_max_run_duration} s)"
    return "spot" if ns.spot else "-"


def show(dep: Deployment, target: str = "local", target_module: bool = False) -> str:
    """The tables, as deployed on TARGET (the blueprint's, or another `ctk show --target` names);
    TARGET_MODULE: the blueprint has its target's module, whose settings are listed where
    TARGET is its target."""
    out = [f"deployment {dep.deployment_name}  (blueprint {dep.blueprint_name}, "
           f"Slurm cluster {dep.slurm_cluster_name})", ""]
    for title, images in (("Images", dep.images),
                          ("Container images (srun --container, the container template)", dep.containers)):
        if images:
            out += [title, _table(["NAME", "BASE", "STACK", "ROLES"],
                                  [[i.name, i.base, i.stack, ",".join(i.roles)] for i in images]), ""]
    if dep.partitions:
        rows = []
        for p in dep.partitions:
            nodes = sum(dep.nodeset(n).node_count for n in p.nodesets)
            rows.append([p.name + ("*" if p.is_default else ""), ",".join(p.nodesets) or "-", str(nodes),
                         "yes" if p.exclusive else "no", p.max_time or "UNLIMITED"])
        out += ["Partitions (* = default)",
                _table(["PARTITION", "NODESETS", "NODES", "EXCLUSIVE", "MAXTIME"], rows), ""]
    if dep.nodesets:
        rows = [[ns.name, ns.machine_type, str(ns.node_count_static), str(ns.node_count_dynamic_max),
                 str(ns.cpus), f"{ns.memory_mb // 1024} GiB", accelerators(ns),
                 compress(ns.node_names()) if ns.node_count else "-"] for ns in dep.nodesets]
        headers = ["NODESET", "MACHINE", "STATIC", "DYNAMIC", "CPUS", "MEMORY", "ACCELERATORS", "NODES"]
        if any(ns.gpu_count for ns in dep.nodesets):  # what the GPUs talk over across nodes (the jobs' network)
            headers.insert(7, "NETWORK")
            for r, ns in zip(rows, dep.nodesets):
                r.insert(7, ns.network if ns.gpu_count else "-")
        if any(capacity(ns) != "-" for ns in dep.nodesets):  # a column only where one is Spot or flex-start
            at = headers.index("NODES")
            headers.insert(at, "CAPACITY")
            for r, ns in zip(rows, dep.nodesets):
                r.insert(at, capacity(ns))
        out += ["Nodesets", _table(headers, rows), ""]
    if dep.controller:
        out += [f"Controller: {dep.controller.hostname} ({dep.controller.machine_type})"]
    for lg in dep.logins:
        out += [f"Login: {compress(lg.node_names())} ({lg.machine_type})"]
    for fs in dep.shared_fs:
        out += [f"Shared filesystem: {fs.local_mount} ({fs.fs_type}, module {fs.module_id})"]
    lb = dep.settings
    if target_module and target == dep.target and isinstance(lb, LabSettings):
        chaos = (f"a Spot preemption every {lb.chaos_interval:g} s on average"
                 + (f" (seed {lb.chaos_seed})" if lb.chaos_seed is not None else "")) if lb.chaos_interval else "none"
        out += [f"Lab: preemptions {chaos}; preemption notice {lb.preemption_notice:g} s; "
                f"flex-start capacity after {lb.flex_start_delay:g} s; nodes boot in {lb.boot_delay:g} s"]
    if isinstance(dep.settings, SshSettings) and dep.settings.hosts:
        rows = [[h.name, h.role, h.nodeset or "-", f"{h.user}@{h.host}:{h.port}", h.service_manager]
                for h in dep.settings.hosts]
        out += ["", "Hosts (target ssh)", _table(["NAME", "ROLE", "NODESET", "SSH", "SERVICES"], rows)]
    if target == dep.target and dep.traits.hands_off_to_gcluster:
        # What the hand-off to Cluster Toolkit (render.gcluster) leaves out of its blueprint.
        rows = [[u.module_id, u.source, "not translated into the gcp/ blueprint"] for u in dep.unsupported]
        rows += [[fs.module_id, fs.source or "-", "not carried: the controller's default NFS /home serves"]
                 for fs in dep.shared_fs]
        if rows:
            out += ["", "Not in the gcp hand-off", _table(["MODULE", "SOURCE", "WHY"], rows)]
    elif dep.unsupported:
        out += ["", f"Not deployed on target {target}",
                _table(["MODULE", "SOURCE", "WHY"], [[u.module_id, u.source, u.reason] for u in dep.unsupported])]
    return "\n".join(out).rstrip() + "\n"
