"""Planning the cluster's nodes and services: nodesets (machine shapes, GPUs, TPUs, Spot and
flex-start capacity), partitions, the controller (one) and its power saving, login nodes and
shared file systems, each checked as Cluster Toolkit's modules check them, before Terraform
would."""

from __future__ import annotations

import re
from typing import Any, TypedDict

from ..blueprint.errors import BlueprintError, Collector, did_you_mean
from ..blueprint.expand import Expanded, ExpandedModule
from ..blueprint.expand import setting_pos as setting_pos
from ..blueprint.expression import CannotEvaluate, Deferred, is_deferred
from ..model import (
    BASES,
    Controller,
    Deployment,
    Login,
    Nodeset,
    Partition,
    SharedFs,
    Unsupported,
    slurm_text,
)
from ..modules import gpu_networks, is_remote
from ..modules.ctk_kinds import (
    CLOUD_PARAMETERS_KEYS,
    DWS_FLEX_KEYS,
)
from ..modules.machines import (
    NETWORKS,
    accelerator_gpu,
    known_machine_types,
    known_series,
    lookup_machine,
    lookup_tpu,
)
from .images import image
from .values import dict_of, int_of, module_of, node_name, num_of, object_of, str_of

_CT_PARTITION_RE = re.compile(r"^[a-z][a-z0-9]*$")


# TPU VM host shapes (vCPUs, GB) per generation, as Cloud TPU publishes them.
TPU_HOSTS = {"v2": (96, 335), "v3": (96, 335), "v4": (240, 407), "v5p": (208, 448),
             "v5e": (224, 384), "v6e": (180, 1440)}


def plan_modules(exp: Expanded, dep: Deployment, cluster: str, images: dict[str, str], c: Collector,
                  doc) -> dict[str, Nodeset]:
    """The first pass over the modules: DEP gets their nodesets, images and shared file systems,
    and the modules ctk does not model (Unsupported). The nodesets by module id."""
    by_id: dict[str, Nodeset] = {}
    for em in exp.modules:
        role = em.schema.role if em.schema else None
        src = em.module.source
        if role in ("nodeset", "nodeset-tpu"):
            ns = _nodeset(em, cluster, c, doc, images)
            if ns:
                _capacity(exp, em, ns, c)
                by_id[em.id] = ns
                dep.nodesets.append(ns)
        elif role == "image":
            dep.images.append(image(em, exp))
        elif role == "container-image":
            dep.containers.append(image(em, exp))
        elif role == "shared-fs" or ("/file-system/" in src and em.get("local_mount")):
            mount = str_of(em.get("local_mount"))
            if mount:
                dep.shared_fs.append(SharedFs(em.id, mount, str_of(em.get("remote_mount"), "") or "",
                                              _fs_type(src, em), src))
        elif role in ("partition", "controller", "login", "target", "gcp-target", "local-target"):
            pass  # in the second pass (plan_services) or by the targets' own, once every nodeset is known
        elif role == "startup-script":
            dep.unsupported.append(Unsupported(em.id, src, em.module.group,
                                               "startup scripts run only on the gcp target"))
        else:
            dep.unsupported.append(Unsupported(em.id, src, em.module.group,
                                               "remote source, not fetched" if is_remote(src) else
                                               "not modelled by ctk (kept for the gcp target)"))
    return by_id


def unique_nodeset_names(exp: Expanded, dep: Deployment, c: Collector, doc) -> None:
    """An error at a nodeset whose name an earlier one has."""
    names_seen: dict[str, str] = {}
    for ns in dep.nodesets:
        if ns.name in names_seen:
            em = module_of(exp, ns.module_id)
            c.add(f"nodesets '{names_seen[ns.name]}' and '{ns.module_id}' have the same name '{ns.name}'",
                  doc.pos(em.module.path + ("id",)), "set a distinct 'name' in one of them")
        names_seen[ns.name] = ns.module_id


def plan_services(exp: Expanded, dep: Deployment, cluster: str, by_id: dict[str, Nodeset],
                   images: dict[str, str], c: Collector, doc) -> ExpandedModule | None:
    """The second pass over the modules, once every nodeset is known: DEP gets its partitions,
    login nodes and controller (one only). The controller's module when it enables Slurm's auth
    (enable_slurm_auth), else None."""
    auth_em = None
    for em in exp.modules:
        role = em.schema.role if em.schema else None
        if role == "partition":
            dep.partitions.append(_partition(exp, em, by_id, c))
        elif role == "login":
            prefix = re.sub(r"[^a-z0-9-]", "", (str_of(em.get("name_prefix"), "login") or "login").lower()) or "login"
            dep.logins.append(Login(em.id, f"{cluster}-{prefix}", str_of(em.get("machine_type"), "n2-standard-2"),
                                    int_of(em.get("num_instances"), 1) or 1, _image_of(em, images)))
        elif role == "controller":
            if dep.controller is not None:
                c.add("a blueprint has one Slurm controller", doc.pos(em.module.path + ("id",)),
                      f"'{dep.controller.module_id}' is already the controller")
                continue
            dep.controller = Controller(em.id, str_of(em.get("machine_type"), "c2-standard-4"),
                                        f"{cluster}-controller", _image_of(em, images),
                                        dict_of(em.get("slurm_conf")), em.get("enable_slurm_auth") is True,
                                        em.get("accounting") is not False)
            dep.controller.backup = em.get("enable_backup_controller") is True
            _power_saving(exp, em, dep.controller, c)
            if dep.controller.slurm_auth:
                auth_em = em
    return auth_em


def partition_names(exp: Expanded, dep: Deployment, c: Collector, doc) -> None:
    """One default partition at most, and a name of its own for each (a name slurm-gcp accepts,
    on slurm-gcp's partition module)."""
    defaults = [p for p in dep.partitions if p.is_default]
    if len(defaults) > 1:
        em = module_of(exp, defaults[1].module_id)
        c.add(f"more than one default partition ('{defaults[0].name}', '{defaults[1].name}')",
              doc.pos(em.module.path + ("settings", "is_default")), "set is_default on one partition only")
    seen_p: dict[str, str] = {}
    for p in dep.partitions:
        em = module_of(exp, p.module_id)
        where = em.module.path + (("settings", "partition_name") if "partition_name" in em.explicit else ("id",))
        if p.name in seen_p:
            c.add(f"partition name '{p.name}' is used twice (also by module '{seen_p[p.name]}')",
                  doc.pos(where), "give each partition its own partition_name")
        seen_p[p.name] = p.module_id
        if em.module.source.endswith("schedmd-slurm-gcp-v6-partition") and not _CT_PARTITION_RE.match(p.name):
            c.add(f"invalid partition_name '{p.name}'", doc.pos(where),
                  "slurm-gcp partition names are lowercase letters and digits, starting with a letter")


def uncomputed(exp: Expanded, c: Collector) -> None:
    """A function call in a setting planning read, which ctk could not compute: an error at the
    call (Terraform would compute it on the gcp target; this target needs the value now)."""
    seen = set()
    for em in exp.modules:
        for name, lazy, e in em.unresolved:
            key = (id(lazy), e.offset, e.message)
            if key in seen:
                continue
            seen.add(key)
            doc, path = lazy.where or (exp.blueprint.doc, em.module.path + ("settings", name))
            message = e.message
            if isinstance(e, CannotEvaluate) and message.startswith("ctk cannot evaluate"):
                message += f": ctk needs setting '{name}' of module '{em.id}' to plan the cluster"
            c.add(message, doc.pos_in(path, e.offset), e.hint)


def _fs_type(src: str, em: ExpandedModule) -> str:
    if "lustre" in src:
        return "lustre"
    if "cloud-storage" in src or "gcs" in src:
        return "gcsfuse"
    return str_of(em.get("fs_type"), "nfs") or "nfs"


def check_slurm_auth(em: ExpandedModule, dep: Deployment, c: Collector, doc) -> None:
    """auth/slurm needs Slurm >= 23.11 on every node: refuse an image of ctk's whose base's
    Slurm is older, at the line that asks for it (slurm-gcp's images bring their own Slurm)."""
    for img in dep.node_images():
        if img.source != "ctk/image" or img.slurm is None or img.slurm >= (23, 11):
            continue
        where = (em.module.path + ("settings", "enable_slurm_auth") if "enable_slurm_auth" in em.explicit
                 else ("vars", "enable_slurm_auth"))
        newer = [b.name for b in BASES.values() if b.slurm >= (23, 11) and b.name.startswith("debian")]
        c.add(f"enable_slurm_auth needs Slurm >= 23.11 (auth/slurm) on every node; image '{img.name}' "
              f"(base {img.base}) has Slurm {slurm_text(img.slurm)}", doc.pos(where),
              f"build the image on base {newer[0] if newer else 'debian-13'}, or leave auth to munge")
        return


def _image_of(em: ExpandedModule, images: dict[str, str]) -> str | None:
    """The image a node module boots: a used/referenced image module's name, or a plain name."""
    for mid in em.modules_feeding("image"):
        if mid in images:
            return images[mid]
    v = em.setting("image")
    if isinstance(v, str):
        return v
    fam = em.setting("instance_image")
    if isinstance(fam, dict) and isinstance(fam.get("family"), str):
        return fam["family"]
    return None


class _NodesetCommon(TypedDict):
    """The fields of a Nodeset that every kind of nodeset module sets alike."""

    name: str
    module_id: str
    node_prefix: str
    node_count_static: int
    node_count_dynamic_max: int
    node_conf: dict[str, Any]
    features: list[str]
    image: str | None
    spot: bool


def _nodeset(em: ExpandedModule, cluster: str, c: Collector, doc, images=None) -> Nodeset | None:
    assert em.schema is not None  # planning calls it for the modules whose kind is a nodeset
    name = node_name(str_of(em.get("name")) or em.id)
    path = em.module.path
    static = int_of(em.get("node_count_static"))
    dynamic = int_of(em.get("node_count_dynamic_max"))
    node_conf = dict_of(em.get("node_conf"))
    features = [str(f) for f in (em.get("features") or []) if isinstance(f, str)]
    common = _NodesetCommon(name=name, module_id=em.id, node_prefix=f"{cluster}{name}",
                            node_count_static=static, node_count_dynamic_max=dynamic,
                            node_conf=node_conf, features=features, image=_image_of(em, images or {}),
                            spot=bool(em.get("enable_spot_vm") is True or em.get("preemptible") is True))
    tpu_setting = "node_type" if em.schema.role == "nodeset-tpu" else "tpu_type"  # ctk/slurm/nodeset's
    if em.schema.role == "nodeset-tpu" or str_of(em.get("tpu_type")):
        ntype = str_of(em.get(tpu_setting)) or str_of(em.get("accelerator_type")) or ""
        tpu = lookup_tpu(ntype)
        if tpu is None:
            c.add(f"unknown TPU node type {ntype!r}", doc.pos(path + ("settings", tpu_setting)),
                  "for example v4-8, v5p-8, v5litepod-8, v6e-8")
            return None
        cpus, gb = TPU_HOSTS.get(tpu.generation, (96, 335))
        return Nodeset(machine_type=ntype, cpus=cpus, memory_mb=gb * 1024, tpu_type=ntype,
                       tpu_chips_per_host=tpu.chips_per_host, **common)
    mtype = str_of(em.get("machine_type"), "c2-standard-60") or ""
    mt = lookup_machine(mtype)
    if mt is None:
        c.add(f"unknown machine type {mtype!r}", doc.pos(path + ("settings", "machine_type")),
              did_you_mean(mtype, known_machine_types())
              or f"ctk knows the {', '.join(known_series())} series (and custom-CPUS-MB types)")
        return None
    gpu_type, gpu_count = mt.gpu_type, mt.gpu_count
    for acc in em.get("guest_accelerator") or []:
        if isinstance(acc, dict) and isinstance(acc.get("type"), str):
            g = accelerator_gpu(acc["type"])
            if g and int_of(acc.get("count")):
                gpu_type, gpu_count = g[0], int_of(acc.get("count"))
    network = _gpu_network(em, mtype, mt.network, c, doc)
    return Nodeset(machine_type=mtype, cpus=mt.cpus, memory_mb=mt.memory_mb, gpu_type=gpu_type,
                   gpu_count=gpu_count, network=network, **common)


def _gpu_network(em: ExpandedModule, mtype: str, own: str, c: Collector, doc) -> str:
    """A ctk nodeset's GPU network: its gpu_network, which may name the machine's own or tcp (the
    primary network alone); else the machine type's."""
    given = em.get("gpu_network")
    if given is None or is_deferred(given):
        return own
    where = doc.pos(em.module.path + ("settings", "gpu_network"))
    if given not in NETWORKS:
        c.add(f"gpu_network {given!r} is not a GPU network", where,
              did_you_mean(str(given), NETWORKS) or f"one of {', '.join(NETWORKS)}")
        return own
    if given not in ("tcp", own):
        if own == "tcp":
            c.add(f"{mtype} has no {given} network: its nodes have no GPU network", where,
                  "leave gpu_network out (or tcp)")
        else:
            c.add(f"{mtype} has no {given} network: its GPUs talk over {own}", where,
                  f"gpu_network: {own}, or tcp (the primary network alone), or leave it out")
        return own
    return str(given)


def gpu_network_wiring(exp: Expanded, dep: Deployment) -> None:
    """A Cluster Toolkit nodeset on a GPU machine whose GPU NICs are wired to nothing (no
    additional_networks, set or fed by a multivpc or gpu-rdma-vpc in `use`) trains over its
    primary network alone: its jobs' network is tcp, and ctk says so."""
    for ns in dep.nodesets:
        em = exp.module(ns.module_id)
        if em is None or em.schema is None or em.module.source.startswith("ctk/") or ns.network == "tcp" \
                or ns.tpu_type:
            continue
        if "additional_networks" in em.explicit or "additional_networks" in em.from_vars \
                or em.modules_feeding("additional_networks"):
            continue
        g = gpu_networks.of_machine(ns.machine_type)
        how = (f"a {gpu_networks.MULTIVPC} of {g.gpu_nics} networks in its use" if g and g.multivpc else
               f"additional_networks from a {gpu_networks.RDMA_VPC}" if g else "additional_networks")
        exp.warnings.append(BlueprintError(
            f"nodeset '{em.id}': {ns.machine_type}'s GPU network ({ns.network}) is not wired: no additional_networks, "
            "so its jobs train over the primary network alone (their network: tcp)",
            exp.blueprint.doc.pos(em.module.path + ("settings", "machine_type") if "machine_type" in em.explicit
                                  else em.module.path + ("id",)),
            f"give it {how}, as Cluster Toolkit's examples/machine-learning do"))
        ns.network = "tcp"


def _partition(exp: Expanded, em: ExpandedModule, by_id: dict[str, Nodeset], c: Collector) -> Partition:
    nodesets: list[str] = []
    for setting in ("nodeset", "nodeset_tpu", "nodeset_dyn"):
        for mid in em.modules_feeding(setting):
            if mid in by_id and by_id[mid].name not in nodesets:
                nodesets.append(by_id[mid].name)
    conf = dict_of(em.get("partition_conf"))
    max_time = conf.pop("MaxTime", None) or em.get("max_time")
    over = conf.pop("OverSubscribe", None) or em.get("oversubscribe")
    name = str_of(em.get("partition_name"), em.id) or em.id
    if em.module.source.endswith("schedmd-slurm-gcp-v6-partition"):
        _ct_partition_nodesets(exp, em, name, by_id, c)
    for key, slurm_key in (("resume_timeout", "ResumeTimeout"), ("suspend_timeout", "SuspendTimeout")):
        v = em.setting(key)
        if v is None or is_deferred(v):
            continue
        n = num_of(v)
        # Cluster Toolkit's rule; Slurm keeps a partition's timeouts in 16 bits.
        if n is not None and not 0 < n < 65536:
            c.add(f"partition '{name}': {key} must be > 0 and < 65536 seconds, found {v!r}",
                  setting_pos(exp, em, key), f"Slurm's {slurm_key}; null leaves it to the controller's")
        if slurm_key not in conf:
            conf[slurm_key] = v
    # partition_conf's SuspendTime wins over suspend_time, as Cluster Toolkit merges them; the model
    # keeps it in Partition.suspend_time alone (as MaxTime in max_time).
    suspend = em.get("suspend_time")
    suspend_time, where = num_of(suspend), setting_pos(exp, em, "suspend_time")
    if "SuspendTime" in conf:
        v = conf["SuspendTime"]
        n = -1 if isinstance(v, str) and v.strip().upper() == "INFINITE" else num_of(v)
        if n is not None:
            del conf["SuspendTime"]
            suspend, suspend_time, where = v, n, setting_pos(exp, em, "partition_conf", "SuspendTime")
    if suspend_time is not None and suspend_time < -1:
        c.add(f"partition '{name}': suspend_time must be >= -1, found {suspend!r}", where,
              "idle seconds before a node is powered down; -1: never")
        suspend_time = None
    exclusive = em.get("exclusive", True)
    return Partition(name=name, module_id=em.id, nodesets=nodesets,
                     is_default=em.get("is_default") is True,
                     exclusive=exclusive is not False and not isinstance(exclusive, Deferred),
                     max_time=str_of(max_time), oversubscribe=str_of(over), conf=conf,
                     suspend_time=300 if suspend_time is None else int(suspend_time))


def _ct_partition_nodesets(exp: Expanded, em: ExpandedModule, name: str, by_id: dict[str, Nodeset],
                           c: Collector) -> None:
    """The preconditions of Cluster Toolkit's partition output, which would fail only at terraform
    time: exactly one kind of nodeset (nodeset, nodeset_tpu or nodeset_dyn), and no static nodes
    in an exclusive partition."""
    doc = exp.blueprint.doc
    kinds = [k for k in ("nodeset", "nodeset_tpu", "nodeset_dyn")
             if em.modules_feeding(k) or (k in em.explicit and em.setting(k) not in (None, []))]
    if not kinds:
        at = em.module.path + (("use",) if em.module.use else ("id",))
        c.add(f"partition '{name}' has no nodeset", doc.pos(at),
              "use a nodeset module (schedmd-slurm-gcp-v6-nodeset, -nodeset-tpu or -nodeset-dynamic); "
              "Cluster Toolkit's partition needs exactly one kind")
        return
    if len(kinds) > 1:
        c.add(f"partition '{name}' mixes kinds of nodesets ({', '.join(kinds)})", doc.pos(em.module.path + ("id",)),
              "one partition per kind: Cluster Toolkit cannot mix TPU, dynamic and ordinary nodesets in one")
        return
    exclusive = em.get("exclusive", True)
    if exclusive is not True:
        return  # false, or deferred: Terraform decides
    for mid in em.modules_feeding("nodeset"):
        ns = by_id.get(mid)
        if ns is not None and ns.node_count_static > 0:
            nsm = module_of(exp, mid)
            where = (setting_pos(exp, em, "exclusive") if "exclusive" in em.explicit
                     else setting_pos(exp, nsm, "node_count_static"))
            c.add(f"partition '{name}' is exclusive, which Cluster Toolkit refuses with static nodes: nodeset "
                  f"'{ns.name}' has node_count_static {ns.node_count_static}", where,
                  f"set exclusive: false on partition '{em.id}' (its default is true), or node_count_static: 0")
            return


def _capacity(exp: Expanded, em: ExpandedModule, ns: Nodeset, c: Collector) -> None:
    """A nodeset's flex-start capacity (dws_flex), checked as Cluster Toolkit's nodeset checks it:
    max_run_duration within 600-604800 s, and not with Spot VMs."""
    assert em.schema is not None  # a nodeset module's
    if em.schema.input("dws_flex") is None:  # TPU and dynamic nodesets have none
        return
    raw = em.get("dws_flex")
    if not isinstance(raw, dict):
        return
    flex = object_of(exp, em, "dws_flex", DWS_FLEX_KEYS, c)
    duration = flex.get("max_run_duration", 604800)  # Cluster Toolkit's default: one week
    if not 600 <= duration <= 604800:  # checked enabled or not, as Cluster Toolkit's validation does
        c.add(f"nodeset '{ns.name}': dws_flex.max_run_duration must be 600 to 604800 seconds, found {duration:g}",
              setting_pos(exp, em, "dws_flex", "max_run_duration"),
              "at least 10 minutes, at most one week (Cluster Toolkit's rule)")
        return
    # enabled is optional(bool, true) in Cluster Toolkit: a dws_flex object without it is enabled.
    if raw.get("enabled") is not None and flex.get("enabled") is not True:
        return  # false, deferred, or not a bool (reported)
    if em.get("enable_spot_vm") is True:
        c.add(f"nodeset '{ns.name}': flex-start (dws_flex) and Spot VMs (enable_spot_vm) cannot be combined",
              setting_pos(exp, em, "enable_spot_vm"),
              "use one or the other: enable_spot_vm: false, or dws_flex: {enabled: false} "
              "(Cluster Toolkit's nodeset refuses both)")
        return
    ns.flex_max_run_duration = int(duration)


def _power_saving(exp: Expanded, em: ExpandedModule, ctl: Controller, c: Collector) -> None:
    """The controller's power-saving timeouts and rates (cloud_parameters); null and missing keys
    keep slurm-gcp's defaults."""
    params = object_of(exp, em, "cloud_parameters", CLOUD_PARAMETERS_KEYS, c)
    for k, n in params.items():
        # Slurm keeps them in 16 bits; a timeout of 0 would give up on every node at once.
        low = 1 if k.endswith("timeout") else 0
        if not low <= n < 65536:
            c.add(f"cloud_parameters.{k} of the controller must be {low} to 65535, found {n:g}",
                  setting_pos(exp, em, "cloud_parameters", k),
                  "seconds" if k.endswith("timeout") else "nodes per minute; 0: no limit")
            continue
        setattr(ctl, k, int(n))
