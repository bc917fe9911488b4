"""Planning: the expanded blueprint mapped onto the Deployment model (pure: the stacks catalog
is handed in; no other I/O)."""

from __future__ import annotations

import dataclasses
import math
import os
import re
from collections.abc import Callable
from typing import Any, TypedDict, overload

from .blueprint.errors import BlueprintError, Collector, did_you_mean
from .blueprint.expand import Expanded, ExpandedModule
from .blueprint.expand import setting_pos as _setting_pos
from .blueprint.expression import CannotEvaluate, Deferred, is_deferred
from .model import (
    BASE_PYTHON,
    BASES,
    DEFAULT_BASE,
    LAB_IDS,
    NO_SPOT_HINT,
    SERVICE_IDS,
    Controller,
    Deployment,
    ImageSpec,
    LabSettings,
    Login,
    Nodeset,
    Partition,
    SharedFs,
    SshHost,
    Unsupported,
    base_python,
)
from .modules import ctk_kinds, is_remote, slurm_gcp
from .modules.ctk_kinds import (
    CLOUD_PARAMETERS_KEYS,
    DWS_FLEX_KEYS,
    SERVICE_MANAGERS,
    SSH_HOST_KEYS,
    SSH_ROLES,
)
from .modules.machines import (
    accelerator_gpu,
    known_machine_types,
    known_series,
    lookup_machine,
    lookup_tpu,
)
from .stacks import Stack, load_stacks, newest_for, python_tuple
from .stacks.drivers import (
    GPU_NEEDS,
    TE_MIN_CUDA,
    Driver,
    bases_with_dcgm,
    bases_with_driver,
    bases_with_toolkit,
    cuda_toolkit,
    has_dcgm,
    image_driver,
)
from .stacks.lock import lock_command, lock_path, lock_state
from .stacks.te import RELEASES as TE_RELEASES

_CT_PARTITION_RE = re.compile(r"^[a-z][a-z0-9]*$")
# A host's name is its hostname and Slurm NodeName: one DNS label.
_HOST_NAME_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$")

# TPU VM host shapes (vCPUs, GB) per generation, as Cloud TPU publishes them.
TPU_HOSTS = {"v2": (96, 335), "v3": (96, 335), "v4": (240, 407), "v5p": (208, 448),
             "v5e": (224, 384), "v6e": (180, 1440)}

# Base images ctk knows how to provision, by the words found in a source image name.
_BASES = (("debian-13", "debian-13"), ("debian13", "debian-13"), ("debian-12", "debian-12"),
          ("debian12", "debian-12"), ("2404", "ubuntu-24.04"),
          ("24-04", "ubuntu-24.04"), ("2204", "ubuntu-22.04"), ("22-04", "ubuntu-22.04"),
          ("rocky-linux-9", "rocky-9"), ("rocky-9", "rocky-9"))


def slurm_cluster_name(deployment_name: str) -> str:
    """Cluster name as slurm-gcp derives it: lowercase letters and digits, a letter first, <= 10."""
    s = re.sub(r"[^a-z0-9]", "", deployment_name.lower())
    s = re.sub(r"^[^a-z]*", "", s)
    return s[:10] or "cluster"


def _node_name(module_id: str) -> str:
    return re.sub(r"[^a-z0-9]", "", module_id.lower())


def _int(v, default: int = 0) -> int:
    if v is None or is_deferred(v):
        return default
    if isinstance(v, bool):
        return int(v)
    try:
        return int(float(v))
    except (TypeError, ValueError):
        return default


@overload
def _str(v, default: str) -> str: ...
@overload
def _str(v, default: None = None) -> str | None: ...


def _str(v, default: str | None = None) -> str | None:
    if v is None or is_deferred(v):
        return default
    return str(v)


def _dict(v) -> dict[str, Any]:
    if isinstance(v, dict):
        return {k: x for k, x in v.items() if x is not None and not is_deferred(x)}
    return {}


def _num(v) -> int | float | None:
    """A number setting's value (a numeric string too, as validate accepts one), whole numbers as
    ints; None: unset, deferred or not a number."""
    if v is None or isinstance(v, bool) or is_deferred(v):
        return None
    if isinstance(v, str):
        try:
            v = float(v)
        except ValueError:
            return None
    if not isinstance(v, (int, float)) or not math.isfinite(v):
        return None
    return int(v) if isinstance(v, float) and v.is_integer() else v


def _module(exp: Expanded, mid: str) -> ExpandedModule:
    """The module of id MID, which planning took from EXP (a nodeset's, an image's, ...)."""
    em = exp.module(mid)
    assert em is not None, mid
    return em


def _object(exp: Expanded, em: ExpandedModule, name: str, keys: dict[str, str], c: Collector) -> dict[str, Any]:
    """The keys of an object setting ctk reads (KEYS: name -> bool or number), checked; null and
    deferred ones are left out (the default; Terraform's to compute). On ctk's own kinds, which
    declare every input, an unknown key is an error (ctk would ignore it); on Cluster Toolkit's
    the others are Cluster Toolkit's own."""
    v = em.get(name)
    if not isinstance(v, dict):
        return {}
    strict = em.module.source in ctk_kinds.KINDS
    out: dict[str, Any] = {}
    for k, x in v.items():
        want = keys.get(k)
        if want is None:
            if strict:
                c.add(f"setting '{name}' of module '{em.id}' has no key '{k}'",
                      _setting_pos(exp, em, name, k, key=True),
                      did_you_mean(str(k), list(keys)) or "keys: " + ", ".join(keys))
            continue
        if x is None or is_deferred(x):
            continue
        got = x if want == "bool" and isinstance(x, bool) else _num(x) if want == "number" else None
        if got is None:
            c.add(f"{name}.{k} of module '{em.id}' must be a {want}, found {type(x).__name__} {x!r}",
                  _setting_pos(exp, em, name, k))
            continue
        out[k] = got
    return out


def plan(exp: Expanded, c: Collector, stacks: dict[str, Stack] | None = None) -> Deployment:
    """The Deployment a valid expanded blueprint describes; its errors go to c. `stacks` is the
    stacks catalog images pick their stacks from (None: read ctk's)."""
    doc = exp.blueprint.doc
    dname = exp.deployment_name
    controllers = [m for m in exp.modules if m.schema and m.schema.role == "controller"]
    cluster = slurm_cluster_name(dname)
    if controllers and isinstance(controllers[0].setting("slurm_cluster_name"), str):
        cluster = controllers[0].setting("slurm_cluster_name")
    dep = Deployment(deployment_name=dname, blueprint_name=exp.blueprint.name, slurm_cluster_name=cluster)

    images = {em.id: _image(em, exp).name for em in exp.modules if em.schema and em.schema.role == "image"}
    by_id = _plan_modules(exp, dep, cluster, images, c, doc)
    _unique_nodeset_names(exp, dep, c, doc)
    auth_em = _plan_services(exp, dep, cluster, by_id, images, c, doc)
    stacks = load_stacks() if stacks is None else stacks
    _gcp_target(exp, dep, c, doc)
    _stacks(exp, dep, c, stacks)
    _accelerator_rules(exp, dep, c, stacks)
    if dep.controller is None and (dep.partitions or dep.nodesets):
        dep.controller = Controller("", hostname=f"{cluster}-controller")
    if dep.controller is not None and dep.controller.slurm_auth:
        assert auth_em is not None  # the controller's module, which set slurm_auth
        _check_slurm_auth(auth_em, dep, c, doc)
    _ssh_target(exp, dep, c, doc)
    _local_target(exp, dep, c, doc)
    _uncomputed(exp, c)
    _partition_names(exp, dep, c, doc)
    return dep


def _plan_modules(exp: Expanded, dep: Deployment, cluster: str, images: dict[str, str], c: Collector,
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
            dep.images.append(_image(em, exp))
        elif role == "shared-fs" or ("/file-system/" in src and em.get("local_mount")):
            mount = _str(em.get("local_mount"))
            if mount:
                dep.shared_fs.append(SharedFs(em.id, mount, _str(em.get("remote_mount"), "") or "",
                                              _fs_type(src, em), src))
        elif role in ("partition", "controller", "login", "target", "gcp-target", "local-target"):
            pass  # in the second pass (_plan_services) or by the targets' own, once every nodeset is known
        elif role == "startup-script":
            dep.unsupported.append(Unsupported(em.id, src, em.module.group,
                                               "startup scripts run only on the gcp target"))
        else:
            dep.unsupported.append(Unsupported(em.id, src, em.module.group,
                                               "remote source, not fetched" if is_remote(src) else
                                               "not modelled by ctk (kept for the gcp target)"))
    return by_id


def _unique_nodeset_names(exp: Expanded, dep: Deployment, c: Collector, doc) -> None:
    """An error at a nodeset whose name an earlier one has."""
    names_seen: dict[str, str] = {}
    for ns in dep.nodesets:
        if ns.name in names_seen:
            em = _module(exp, ns.module_id)
            c.add(f"nodesets '{names_seen[ns.name]}' and '{ns.module_id}' have the same name '{ns.name}'",
                  doc.pos(em.module.path + ("id",)), "set a distinct 'name' in one of them")
        names_seen[ns.name] = ns.module_id


def _plan_services(exp: Expanded, dep: Deployment, cluster: str, by_id: dict[str, Nodeset],
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
            prefix = re.sub(r"[^a-z0-9-]", "", (_str(em.get("name_prefix"), "login") or "login").lower()) or "login"
            dep.logins.append(Login(em.id, f"{cluster}-{prefix}", _str(em.get("machine_type"), "n2-standard-2"),
                                    _int(em.get("num_instances"), 1) or 1, _image_of(em, images)))
        elif role == "controller":
            if dep.controller is not None:
                c.add("a blueprint has one Slurm controller", doc.pos(em.module.path + ("id",)),
                      f"'{dep.controller.module_id}' is already the controller")
                continue
            dep.controller = Controller(em.id, _str(em.get("machine_type"), "c2-standard-4"),
                                        f"{cluster}-controller", _image_of(em, images),
                                        _dict(em.get("slurm_conf")), em.get("enable_slurm_auth") is True,
                                        em.get("accounting") is not False)
            _power_saving(exp, em, dep.controller, c)
            if dep.controller.slurm_auth:
                auth_em = em
    return auth_em


def _partition_names(exp: Expanded, dep: Deployment, c: Collector, doc) -> None:
    """One default partition at most, and a name of its own for each (a name slurm-gcp accepts,
    on slurm-gcp's partition module)."""
    defaults = [p for p in dep.partitions if p.is_default]
    if len(defaults) > 1:
        em = _module(exp, defaults[1].module_id)
        c.add(f"more than one default partition ('{defaults[0].name}', '{defaults[1].name}')",
              doc.pos(em.module.path + ("settings", "is_default")), "set is_default on one partition only")
    seen_p: dict[str, str] = {}
    for p in dep.partitions:
        em = _module(exp, p.module_id)
        where = em.module.path + (("settings", "partition_name") if "partition_name" in em.explicit else ("id",))
        if p.name in seen_p:
            c.add(f"partition name '{p.name}' is used twice (also by module '{seen_p[p.name]}')",
                  doc.pos(where), "give each partition its own partition_name")
        seen_p[p.name] = p.module_id
        if em.module.source.endswith("schedmd-slurm-gcp-v6-partition") and not _CT_PARTITION_RE.match(p.name):
            c.add(f"invalid partition_name '{p.name}'", doc.pos(where),
                  "slurm-gcp partition names are lowercase letters and digits, starting with a letter")


def _uncomputed(exp: Expanded, c: Collector) -> None:
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
    return _str(em.get("fs_type"), "nfs") or "nfs"


def _image(em: ExpandedModule, exp: Expanded) -> ImageSpec:
    if em.module.source == "ctk/image":
        name = _str(em.get("name"), em.id) or em.id
        base = _str(em.get("base"), DEFAULT_BASE)
        return ImageSpec(name=name, module_id=em.id, base=base,
                         roles=list(em.get("roles") or ["common", "munge", "slurm", "jax"]),
                         stack=_str(em.get("stack"), "") or "",  # "": chosen by _stacks
                         extra_playbooks=list(em.get("extra_playbooks") or []), source=em.module.source,
                         transformer_engine=_str(em.get("transformer_engine")))
    src_img = " ".join(str(x) for x in (em.get("source_image"), em.get("source_image_family"))
                       if x and not is_deferred(x))
    base = DEFAULT_BASE
    for word, b in _BASES:
        if word in src_img:
            base = b
            break
    name = _str(em.get("image_family"), em.id) or em.id
    return ImageSpec(name=name, module_id=em.id, base=base, stack="", source=em.module.source)


def _check_slurm_auth(em: ExpandedModule, dep: Deployment, c: Collector, doc) -> None:
    """auth/slurm needs Slurm >= 23.11 on every node: refuse an image of ctk's whose base's
    Slurm is older, at the line that asks for it (slurm-gcp's images bring their own Slurm)."""
    used = {dep.controller.image if dep.controller else None, *(ns.image for ns in dep.nodesets),
            *(lg.image for lg in dep.logins)}
    for img in dep.images:
        base = BASES.get(img.base)
        if img.source != "ctk/image" or base is None or base.slurm >= (23, 11):
            continue
        if img.name in used or (len(dep.images) == 1 and None in used):
            where = (em.module.path + ("settings", "enable_slurm_auth") if "enable_slurm_auth" in em.explicit
                     else ("vars", "enable_slurm_auth"))
            newer = [b.name for b in BASES.values() if b.slurm >= (23, 11) and b.name.startswith("debian")]
            c.add(f"enable_slurm_auth needs Slurm >= 23.11 (auth/slurm) on every node; image '{img.name}' "
                  f"(base {img.base}) has Slurm {base.slurm_release}", doc.pos(where),
                  f"build the image on base {newer[0] if newer else 'debian-13'}, or leave auth to munge")
            return


# ---- stacks ------------------------------------------------------------------------------

def _accelerator(img: ImageSpec, exp: Expanded, dep: Deployment) -> str:
    """The accelerator of the stack ctk picks for an image that names none: CPU for ctk's own
    images; CUDA 12 for a Cluster Toolkit image built on or for GPU machines."""
    if img.source == "ctk/image":
        if dep.traits.boots_slurm_gcp_images:  # they carry the driver: GPU nodes make it a GPU image
            return "cuda12" if any(dep.image_of(ns) is img and ns.gpu_count for ns in dep.nodesets) else "cpu"
        return "cuda12" if "nvidia_driver" in img.roles else "cpu"
    em = _module(exp, img.module_id)
    mt = lookup_machine(_str(em.get("machine_type"), "") or "")
    gpu = (mt and mt.gpu_count) or em.get("accelerator_type") or any(
        ns.image == img.name and ns.gpu_count for ns in dep.nodesets)
    return "cuda12" if gpu else "cpu"


def _bases_for(fits) -> str:
    """The bases whose Python passes fits(python), oldest Python first."""
    return ", ".join(b for b, v in sorted(BASE_PYTHON.items(), key=lambda bv: python_tuple(bv[1])) if fits(v))


def _stacks(exp: Expanded, dep: Deployment, c: Collector, stacks: dict[str, Stack]) -> None:
    """Each image's stack: the one it names, which must exist and be locked for its base's
    Python (an error at the line that names it, with the newest stack that fits), else the
    newest stack of its accelerator for that Python."""
    doc = exp.blueprint.doc
    for img in dep.images:
        em = _module(exp, img.module_id)
        py = base_python(img.base)
        jax = "jax" in img.roles
        if img.stack:
            stack = stacks.get(img.stack)
            if stack is None:
                c.add(f"unknown stack '{img.stack}'", _setting_pos(exp, em, "stack"),
                      did_you_mean(img.stack, stacks) or f"stacks: {', '.join(stacks)} (ctk stack list)")
            elif jax and py and not stack.supports(py):
                fit = newest_for(stacks, stack.accelerator, py)
                hint = (f"use stack {fit.name} (jax {fit.jax}), the newest {stack.accelerator} stack for "
                        f"Python {py}" if fit else
                        f"no {stack.accelerator} stack is for Python {py}; {stack.name} fits base "
                        f"{_bases_for(stack.supports)}")
                c.add(f"{stack.misfit(py)}; base {img.base} has Python {py}", _setting_pos(exp, em, "stack"), hint)
            continue
        acc = _accelerator(img, exp, dep)
        fit = newest_for(stacks, acc, py) if py else None
        if fit is not None:
            img.stack = fit.name
            continue
        img.stack = ImageSpec.stack  # the model's default: no stack fits, or the base is unknown
        if not (jax and py):
            continue
        why = f"no {acc} stack is for Python {py}, the Python of base {img.base}"
        bases = _bases_for(lambda v, acc=acc: newest_for(stacks, acc, v) is not None)
        if img.source == "ctk/image":
            where = em.module.path + (("settings", "base") if "base" in em.explicit else ("id",))
            c.add(why, doc.pos(where), f"use a base whose Python a {acc} stack is for ({bases}), "
                                       "or leave out the jax role")
        else:  # a Cluster Toolkit image: ctk adds the jax role itself, so it leaves it out instead
            img.roles = [r for r in img.roles if r != "jax"]
            exp.warnings.append(BlueprintError(
                f"image {img.name}: {why}, so it gets no JAX venv", doc.pos(em.module.path + ("id",)),
                f"an image on a base a {acc} stack is for ({bases}) gets one"))


def _accelerator_rules(exp: Expanded, dep: Deployment, c: Collector, stacks: dict[str, Stack]) -> None:
    """What ctk's images carry for accelerators, against what their stacks and GPUs need (the
    versions come from the nvidia_driver and cuda roles, see ctk.stacks.drivers): a CUDA stack
    whose wheels need a newer driver than the image gets, at the line naming the stack; a GPU
    generation the image's driver cannot run, at the nodeset's machine type; Transformer Engine
    without a CUDA toolkit of its stack's major version, at its setting."""
    doc = exp.blueprint.doc
    driver: Driver | None
    for img in dep.images:
        if img.source != "ctk/image":  # Cluster Toolkit's images bring their own driver
            continue
        em = _module(exp, img.module_id)
        stack = stacks.get(img.stack)
        # The driver the image gets: slurm-gcp's image's where nodes boot those, else the nvidia_driver role's.
        fam = slurm_gcp.family_for(img.base) if dep.traits.boots_slurm_gcp_images else None
        if fam is not None:
            driver = Driver(fam.driver, fam.driver.split(".")[0], None, "", f"{fam.family} (slurm-gcp's image)")
            others = [f.family for f in slurm_gcp.FAMILIES.values()
                      if stack is not None and stack.min_driver and python_tuple(f.driver) >= python_tuple(stack.min_driver)]
        else:
            d = image_driver(img.base) if "nvidia_driver" in img.roles else None
            driver = d and dataclasses.replace(d, source=f"{d.source} (the nvidia_driver role)")
            others = [b for b in bases_with_driver(stack.min_driver) if b != img.base] \
                if stack is not None and stack.min_driver else []
        if stack is not None and driver is not None and stack.min_driver and not driver.at_least(stack.min_driver):
            cuda12 = [s.name for s in stacks.values() if s.accelerator == "cuda12" and s.supports(base_python(img.base) or "")]
            c.add(f"stack {stack.name} needs NVIDIA driver >= {stack.min_driver} (jax[{stack.accelerator}]'s CUDA "
                  f"wheels); image '{img.name}' (base {img.base}) gets driver {driver.version} from "
                  f"{driver.source}", _setting_pos(exp, em, "stack"),
                  ", ".join(x for x in (
                      f"use {' or '.join(cuda12)} (CUDA 12, driver >= {stacks[cuda12[0]].min_driver})" if cuda12 else "",
                      f"or build on a base whose driver is >= {stack.min_driver} ({', '.join(others)})" if others else "")
                      if x))
        if img.transformer_engine:
            _transformer_engine(exp, em, img, stack, c)
        if "dcgm" in img.roles:
            _dcgm(exp, em, img, stack, c, driver_in_image=fam is not None)
    for ns in dep.nodesets:
        need = GPU_NEEDS.get(ns.gpu_type or "")
        ns_img = dep.image_of(ns)
        if need is None or ns.gpu_type is None or ns_img is None or ns_img.source != "ctk/image" \
                or "nvidia_driver" not in ns_img.roles:
            continue
        generation, floor, module = need
        driver = image_driver(ns_img.base)
        if driver is None or (driver.at_least(floor) and driver.kernel_module == module):
            continue
        em = _module(exp, ns.module_id)
        where = em.module.path + (("settings", "machine_type") if "machine_type" in em.explicit else ("id",))
        fits = bases_with_driver(floor, module)
        c.add(f"nodeset {ns.name}: {ns.machine_type}'s {ns.gpu_type.upper()} GPUs ({generation}) need NVIDIA's "
              f"{module} kernel module from driver {floor}; image '{ns_img.name}' (base {ns_img.base}) gets driver "
              f"{driver.version} with the {driver.kernel_module} module ({driver.source})", doc.pos(where),
              f"build image '{ns_img.name}' on a base that has it ({', '.join(fits)})" if fits else
              "no base ctk builds has it")


def _transformer_engine(exp: Expanded, em: ExpandedModule, img: ImageSpec, stack: Stack | None, c: Collector) -> None:
    doc = exp.blueprint.doc
    pos = doc.pos(em.module.path + ("settings", "transformer_engine"))
    te = img.transformer_engine
    if stack is None:
        return
    if not stack.accelerator.startswith("cuda"):
        c.add(f"Transformer Engine {te} needs a CUDA stack; stack {stack.name} is for {stack.accelerator}", pos,
              "use a jax-cuda12 stack, or leave transformer_engine out")
        return
    if te not in TE_RELEASES:
        c.add(f"Transformer Engine {te} is not a release ctk knows how to build", pos,
              f"known: {', '.join(TE_RELEASES)}")
        return
    major = int(stack.accelerator[len("cuda"):])
    toolkit = cuda_toolkit(img.base)
    fits = bases_with_toolkit(major)
    if toolkit is None or toolkit.major != major or python_tuple(toolkit.version) < python_tuple(TE_MIN_CUDA):
        have = f"base {img.base}'s CUDA toolkit is {toolkit.version}" if toolkit else f"base {img.base} has no CUDA toolkit ctk installs"
        c.add(f"Transformer Engine {te} builds against the CUDA {major} toolkit of stack {stack.name} "
              f"(>= {TE_MIN_CUDA}); {have}", pos,
              f"build the image on {' or '.join(fits)}" if fits else f"no base ctk builds has a CUDA {major} toolkit")
        return
    roles_pos = doc.pos(em.module.path + (("settings", "roles") if "roles" in em.explicit else ("id",)))
    if "jax" not in img.roles:
        c.add(f"Transformer Engine {te} goes into the JAX venv: image '{img.name}' has no jax role", roles_pos,
              "add jax to its roles, or leave transformer_engine out")
        return
    if "cuda" not in img.roles or img.roles.index("cuda") > img.roles.index("jax"):
        c.add(f"Transformer Engine {te} is built at image build time against the CUDA toolkit: image "
              f"'{img.name}' needs the cuda role before jax", roles_pos, "add cuda to its roles, before jax")
        return
    py = base_python(img.base)
    if py and stack.supports(py) and lock_state(stack, py, te) != "ok":
        c.add(f"stack {stack.name} has no current lock for Python {py} with Transformer Engine {te} "
              f"({lock_path(stack, py, te=te)})", pos, f"make it: {lock_command(stack, py, te)}")


def _dcgm(exp: Expanded, em: ExpandedModule, img: ImageSpec, stack: Stack | None, c: Collector,
          driver_in_image: bool = False) -> None:
    """The dcgm role: after the driver (the nvidia_driver role, or DRIVER_IN_IMAGE: slurm-gcp's
    images carry one), on a base NVIDIA publishes DCGM for, with a CUDA stack (DCGM 4's packages
    are per CUDA major)."""
    pos = exp.blueprint.doc.pos(em.module.path + (("settings", "roles") if "roles" in em.explicit else ("id",)))
    roles = img.roles
    if not driver_in_image and ("nvidia_driver" not in roles or roles.index("nvidia_driver") > roles.index("dcgm")):
        c.add(f"image '{img.name}': the dcgm role needs the NVIDIA driver: put nvidia_driver before it", pos)
    elif not has_dcgm(img.base):
        c.add(f"image '{img.name}': NVIDIA publishes no DCGM packages for base {img.base} (Debian's archive "
              "has none either)", pos, f"leave out dcgm, or build on {', '.join(bases_with_dcgm())}")
    elif stack is not None and not stack.accelerator.startswith("cuda"):
        c.add(f"image '{img.name}': the dcgm role installs DCGM for a CUDA stack; stack {stack.name} is for "
              f"{stack.accelerator}", pos)


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
    name = _node_name(_str(em.get("name")) or em.id)
    path = em.module.path
    static = _int(em.get("node_count_static"))
    dynamic = _int(em.get("node_count_dynamic_max"))
    node_conf = _dict(em.get("node_conf"))
    features = [str(f) for f in (em.get("features") or []) if isinstance(f, str)]
    common = _NodesetCommon(name=name, module_id=em.id, node_prefix=f"{cluster}{name}",
                            node_count_static=static, node_count_dynamic_max=dynamic,
                            node_conf=node_conf, features=features, image=_image_of(em, images or {}),
                            spot=bool(em.get("enable_spot_vm") is True or em.get("preemptible") is True))
    tpu_setting = "node_type" if em.schema.role == "nodeset-tpu" else "tpu_type"  # ctk/slurm/nodeset's
    if em.schema.role == "nodeset-tpu" or _str(em.get("tpu_type")):
        ntype = _str(em.get(tpu_setting)) or _str(em.get("accelerator_type")) or ""
        tpu = lookup_tpu(ntype)
        if tpu is None:
            c.add(f"unknown TPU node type {ntype!r}", doc.pos(path + ("settings", tpu_setting)),
                  "for example v4-8, v5p-8, v5litepod-8, v6e-8")
            return None
        cpus, gb = TPU_HOSTS.get(tpu.generation, (96, 335))
        return Nodeset(machine_type=ntype, cpus=cpus, memory_mb=gb * 1024, tpu_type=ntype,
                       tpu_chips_per_host=tpu.chips_per_host, **common)
    mtype = _str(em.get("machine_type"), "c2-standard-60") or ""
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
            if g and _int(acc.get("count")):
                gpu_type, gpu_count = g[0], _int(acc.get("count"))
    network = _str(em.get("gpu_network")) or mt.network
    return Nodeset(machine_type=mtype, cpus=mt.cpus, memory_mb=mt.memory_mb, gpu_type=gpu_type,
                   gpu_count=gpu_count, network=network, **common)


def _partition(exp: Expanded, em: ExpandedModule, by_id: dict[str, Nodeset], c: Collector) -> Partition:
    nodesets: list[str] = []
    for setting in ("nodeset", "nodeset_tpu", "nodeset_dyn"):
        for mid in em.modules_feeding(setting):
            if mid in by_id and by_id[mid].name not in nodesets:
                nodesets.append(by_id[mid].name)
    conf = _dict(em.get("partition_conf"))
    max_time = conf.pop("MaxTime", None) or em.get("max_time")
    over = conf.pop("OverSubscribe", None) or em.get("oversubscribe")
    name = _str(em.get("partition_name"), em.id) or em.id
    if em.module.source.endswith("schedmd-slurm-gcp-v6-partition"):
        _ct_partition_nodesets(exp, em, name, by_id, c)
    for key, slurm_key in (("resume_timeout", "ResumeTimeout"), ("suspend_timeout", "SuspendTimeout")):
        v = em.setting(key)
        if v is None or is_deferred(v):
            continue
        n = _num(v)
        # Cluster Toolkit's rule; Slurm keeps a partition's timeouts in 16 bits.
        if n is not None and not 0 < n < 65536:
            c.add(f"partition '{name}': {key} must be > 0 and < 65536 seconds, found {v!r}",
                  _setting_pos(exp, em, key), f"Slurm's {slurm_key}; null leaves it to the controller's")
        if slurm_key not in conf:
            conf[slurm_key] = v
    # partition_conf's SuspendTime wins over suspend_time, as Cluster Toolkit merges them; the model
    # keeps it in Partition.suspend_time alone (as MaxTime in max_time).
    suspend = em.get("suspend_time")
    suspend_time, where = _num(suspend), _setting_pos(exp, em, "suspend_time")
    if "SuspendTime" in conf:
        v = conf["SuspendTime"]
        n = -1 if isinstance(v, str) and v.strip().upper() == "INFINITE" else _num(v)
        if n is not None:
            del conf["SuspendTime"]
            suspend, suspend_time, where = v, n, _setting_pos(exp, em, "partition_conf", "SuspendTime")
    if suspend_time is not None and suspend_time < -1:
        c.add(f"partition '{name}': suspend_time must be >= -1, found {suspend!r}", where,
              "idle seconds before a node is powered down; -1: never")
        suspend_time = None
    exclusive = em.get("exclusive", True)
    return Partition(name=name, module_id=em.id, nodesets=nodesets,
                     is_default=em.get("is_default") is True,
                     exclusive=exclusive is not False and not isinstance(exclusive, Deferred),
                     max_time=_str(max_time), oversubscribe=_str(over), conf=conf,
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
            nsm = _module(exp, mid)
            where = (_setting_pos(exp, em, "exclusive") if "exclusive" in em.explicit
                     else _setting_pos(exp, nsm, "node_count_static"))
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
    flex = _object(exp, em, "dws_flex", DWS_FLEX_KEYS, c)
    duration = flex.get("max_run_duration", 604800)  # Cluster Toolkit's default: one week
    if not 600 <= duration <= 604800:  # checked enabled or not, as Cluster Toolkit's validation does
        c.add(f"nodeset '{ns.name}': dws_flex.max_run_duration must be 600 to 604800 seconds, found {duration:g}",
              _setting_pos(exp, em, "dws_flex", "max_run_duration"),
              "at least 10 minutes, at most one week (Cluster Toolkit's rule)")
        return
    # enabled is optional(bool, true) in Cluster Toolkit: a dws_flex object without it is enabled.
    if raw.get("enabled") is not None and flex.get("enabled") is not True:
        return  # false, deferred, or not a bool (reported)
    if em.get("enable_spot_vm") is True:
        c.add(f"nodeset '{ns.name}': flex-start (dws_flex) and Spot VMs (enable_spot_vm) cannot be combined",
              _setting_pos(exp, em, "enable_spot_vm"),
              "use one or the other: enable_spot_vm: false, or dws_flex: {enabled: false} "
              "(Cluster Toolkit's nodeset refuses both)")
        return
    ns.flex_max_run_duration = int(duration)


def _power_saving(exp: Expanded, em: ExpandedModule, ctl: Controller, c: Collector) -> None:
    """The controller's power-saving timeouts and rates (cloud_parameters); null and missing keys
    keep slurm-gcp's defaults."""
    params = _object(exp, em, "cloud_parameters", CLOUD_PARAMETERS_KEYS, c)
    for k, n in params.items():
        # Slurm keeps them in 16 bits; a timeout of 0 would give up on every node at once.
        low = 1 if k.endswith("timeout") else 0
        if not low <= n < 65536:
            c.add(f"cloud_parameters.{k} of the controller must be {low} to 65535, found {n:g}",
                  _setting_pos(exp, em, "cloud_parameters", k),
                  "seconds" if k.endswith("timeout") else "nodes per minute; 0: no limit")
            continue
        setattr(ctl, k, int(n))


def _target_module(exp: Expanded, role: str, what: str, hint: str, c: Collector, doc) -> ExpandedModule | None:
    """The blueprint's target module of ROLE, or None; a second one is an error at its id."""
    targets = [em for em in exp.modules if em.schema and em.schema.role == role]
    for extra in targets[1:]:
        c.add(f"a blueprint has one {what} target module", doc.pos(extra.module.path + ("id",)),
              f"'{targets[0].id}' {hint}")
    return targets[0] if targets else None


# ---- the local target (the lab) -------------------------------------------------------------

_LAB_NUMBERS = ("chaos_interval", "preemption_notice", "flex_start_delay", "flex_run_duration", "boot_delay")


def _local_target(exp: Expanded, dep: Deployment, c: Collector, doc) -> None:
    """A ctk/target/local module: the lab's rehearsal settings (Deployment.lab). The cluster
    stays on the local target, so the module cannot share a blueprint with another target's."""
    em = _target_module(exp, "local-target", "local", "already holds the lab's settings", c, doc)
    if em is not None:
        other = next((m for m in exp.modules if m.schema and m.schema.role in ("target", "gcp-target")), None)
        if other is not None:
            assert other.schema is not None  # picked by its kind's role
            first, second = sorted((em, other), key=exp.modules.index)
            kind = "an ssh" if other.schema.role == "target" else "a gcp"
            c.add(f"a blueprint goes to one target: it has both a local and {kind} target module",
                  doc.pos(second.module.path + ("id",)), f"remove '{second.id}' or '{first.id}'")
            return
        lab = LabSettings()
        for name in (*_LAB_NUMBERS, "chaos_seed"):
            v = em.get(name)
            n = _num(v)
            if n is None:
                continue  # unset or deferred (a wrong type was reported by validate)
            if n < 0 or (name == "chaos_seed" and not isinstance(n, int)):
                inp = em.schema.input(name) if em.schema else None
                assert inp is not None  # ctk/target/local declares each of these settings
                c.add(f"setting '{name}' of module '{em.id}' must be a {'whole ' if name == 'chaos_seed' else ''}"
                      f"number >= 0, found {v!r}",
                      _setting_pos(exp, em, name), inp.doc)
                continue
            setattr(lab, name, n if name == "chaos_seed" else float(n))
        _lab_user(exp, em, lab, c)
        if lab.chaos_interval and not any(ns.spot for ns in dep.nodesets):
            c.add(f"setting 'chaos_interval' of module '{em.id}' preempts random Spot nodes, but no nodeset of "
                  "this blueprint is Spot or preemptible: there would be nothing to preempt",
                  _setting_pos(exp, em, "chaos_interval"), NO_SPOT_HINT + ", or remove chaos_interval")
        dep.lab = lab
    if dep.traits.rehearses_cloud:
        _resume_waits(exp, dep, em, c)


# Names the lab's user cannot take: root, and the accounts its images have or make.
_RESERVED_USERS = ("root", "daemon", "bin", "sys", "sync", "games", "man", "lp", "mail", "news", "uucp", "proxy",
                   "www-data", "backup", "list", "irc", "_apt", "nobody", "munge", "slurm", "mysql", "sshd",
                   "messagebus", "systemd-network")


def _lab_user(exp: Expanded, em, lab: LabSettings, c: Collector) -> None:
    """The lab's user account (settings user, user_uid), checked at their lines."""
    import re

    name = em.get("user")
    if isinstance(name, str):
        if not re.fullmatch(r"[a-z_][a-z0-9_-]{0,31}", name):
            c.add(f"setting 'user' of module '{em.id}': {name!r} is not a user name",
                  _setting_pos(exp, em, "user"), "lower-case letters, digits, '_' and '-', starting with a letter "
                  "or '_', at most 32 characters: for example researcher")
        elif name in _RESERVED_USERS:
            c.add(f"setting 'user' of module '{em.id}': {name!r} is root or one of the image's service accounts",
                  _setting_pos(exp, em, "user"), "name an ordinary user, for example researcher; root jobs stay "
                  "possible with ctk env --user root")
        else:
            lab.user = name
    uid = _num(em.get("user_uid"))
    if uid is not None:
        lo, hi = LAB_IDS.start, SERVICE_IDS.start - 1
        if not isinstance(uid, int) or not lo <= uid <= hi:
            c.add(f"setting 'user_uid' of module '{em.id}' must be a whole number from {lo} to {hi}, found {uid!r}",
                  _setting_pos(exp, em, "user_uid"), "ctk keeps the lab's accounts in numbers no host account has; "
                  f"its services take {SERVICE_IDS.start} and up")
        else:
            lab.user_uid = uid


def _resume_timeout(exp: Expanded, dep: Deployment, p: Partition):
    """A partition's ResumeTimeout on the lab, where it was said, and whether it is the
    partition's own (partition_conf or resume_timeout) rather than the controller's (whose
    place is None when it is the default)."""
    pem = _module(exp, p.module_id)
    n = _num(p.conf.get("ResumeTimeout"))
    if n is not None:
        conf = pem.get("partition_conf")
        if isinstance(conf, dict) and "ResumeTimeout" in conf:
            return n, _setting_pos(exp, pem, "partition_conf", "ResumeTimeout"), True
        return n, _setting_pos(exp, pem, "resume_timeout"), True
    ctl = dep.controller
    cem = _module(exp, ctl.module_id) if ctl and ctl.module_id else None
    params = cem.get("cloud_parameters") if cem else None
    where = (_setting_pos(exp, cem, "cloud_parameters", "resume_timeout")
             if cem is not None and isinstance(params, dict) and params.get("resume_timeout") is not None else None)
    return (ctl.resume_timeout if ctl else Controller.resume_timeout), where, False


def _resume_waits(exp: Expanded, dep: Deployment, em: ExpandedModule | None, c: Collector) -> None:
    """On the lab a resumed node boots boot_delay after slurmctld asks, a flex-start one after
    waiting flex_start_delay for its capacity as well: that must stay below its partitions'
    ResumeTimeout, or Slurm marks the node DOWN first. The error is at the partition's own
    timeout where it has one, else at the lab's setting."""
    lab = dep.lab
    reported: set = set()  # one error per place: a controller's timeout covers every nodeset

    def said(name: str) -> bool:
        return em is not None and (name in em.explicit or name in em.from_vars)

    for ns in dep.nodesets:
        flex = ns.flex_max_run_duration is not None
        if not (flex or ns.spot or ns.node_count_dynamic_max):
            continue  # static nodes boot with the lab
        if flex:
            wait = lab.flex_start_delay + lab.boot_delay
            what = (f"flex-start nodeset '{ns.name}' waits {lab.flex_start_delay:g} s for capacity on the lab "
                    "(flex_start_delay)" + (f" and {lab.boot_delay:g} s to boot (boot_delay)" if lab.boot_delay else ""))
            setting = "flex_start_delay" if said("flex_start_delay") or not said("boot_delay") else "boot_delay"
            lower = "flex_start_delay" + (" + boot_delay" if lab.boot_delay else "")
            before = "the capacity arrives" if not lab.boot_delay else "they boot"
        elif lab.boot_delay:
            wait, setting, lower, before = lab.boot_delay, "boot_delay", "boot_delay", "they boot"
            what = f"the nodes of nodeset '{ns.name}' take {lab.boot_delay:g} s to boot on the lab (boot_delay)"
        else:
            continue
        for p in dep.partitions:
            if ns.name not in p.nodesets:
                continue
            timeout, where, own = _resume_timeout(exp, dep, p)
            if wait < timeout:
                continue
            if not own and em is not None and said(setting):
                where = _setting_pos(exp, em, setting)
            if where is None:
                where = exp.blueprint.doc.pos(_module(exp, ns.module_id).module.path + ("id",))
            if where in reported:
                continue
            reported.add(where)
            c.add(f"{what}, not less than partition '{p.name}''s ResumeTimeout of {timeout:g} s: Slurm would mark "
                  f"its nodes DOWN before {before}",
                  where, f"lower {lower}{f' in {em.id!r}' if em else ' (a ctk/target/local module)'} "
                         f"below {timeout:g}, or raise the partition's resume_timeout")


# ---- the gcp target ------------------------------------------------------------------------

def _gcp_target(exp: Expanded, dep: Deployment, c: Collector, doc) -> None:
    """A ctk/target/gcp module: the cluster goes to Google Cloud, where ctk's images are built on
    slurm-gcp's (which bring Slurm, munge and the NVIDIA driver). Each ctk/image must have a base
    slurm-gcp publishes a family of, and may not ask for a role that image already brings."""
    em = _target_module(exp, "gcp-target", "gcp", "is already the target", c, doc)
    if em is None:
        return
    if any(m.schema and m.schema.role == "target" for m in exp.modules):
        c.add("a blueprint goes to one target: it has both a gcp and an ssh target module",
              doc.pos(em.module.path + ("id",)), "remove one of them")
        return
    dep.target = "gcp"
    dep.gcp = {k: v for k in ("project_id", "region", "zone", "image_machine_type", "image_disk_size")
               if (v := em.get(k)) is not None and not is_deferred(v)}
    for img in dep.images:
        if img.source != "ctk/image":
            continue
        iem = _module(exp, img.module_id)
        fam = slurm_gcp.family_for(img.base)
        if fam is None:
            where = iem.module.path + (("settings", "base") if "base" in iem.explicit else ("id",))
            c.add(f"image '{img.name}': slurm-gcp publishes no image family for base {img.base} (the gcp "
                  "target builds every image on one of slurm-gcp's)", doc.pos(where),
                  f"bases with a slurm-gcp {slurm_gcp.RELEASE} family: {slurm_gcp.families_text()}")
            continue
        brought = [r for r in img.roles if r in slurm_gcp.BROUGHT_BY_IMAGE]
        if not brought:
            continue
        if "roles" not in iem.explicit:  # the default roles: leave out what the image brings
            img.roles = [r for r in img.roles if r not in slurm_gcp.BROUGHT_BY_IMAGE]
            continue
        c.add(f"image '{img.name}': {fam.family} already brings "
              + "; ".join(slurm_gcp.BROUGHT_BY_IMAGE[r] for r in brought)
              + f" (the roles {', '.join(brought)} would install another over it)",
              doc.pos(iem.module.path + ("settings", "roles")),
              f"leave {', '.join(brought)} out of roles on the gcp target")


# ---- the ssh target ------------------------------------------------------------------------

def _port(v) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, str) and v.strip().isdigit():
        v = int(v.strip())
    return v if isinstance(v, int) and 1 <= v <= 65535 else None


# An error of one ssh host: (message, key of the host it is at or None: the host's mapping, hint).
_HostError = Callable[[str, str | None, str], None]


def _ssh_target(exp: Expanded, dep: Deployment, c: Collector, doc) -> None:
    """A ctk/target/ssh module: the blueprint's cluster on existing machines. Its hosts become
    Deployment.ssh_hosts; each nodeset's nodes become its compute hosts (Nodeset.hostnames),
    the controller's hostname the controller host's name."""
    em = _target_module(exp, "target", "ssh", "already lists the hosts; list every machine there", c, doc)
    if em is None:
        return
    dep.target = "ssh"
    n_errors = len(c.errors)
    settings = em.module.path + ("settings",)
    default_mgr = _str(em.get("service_manager"), "systemd")
    if default_mgr not in SERVICE_MANAGERS:
        c.add(f"unknown service_manager {default_mgr!r}", doc.pos(settings + ("service_manager",)),
              "one of: " + ", ".join(SERVICE_MANAGERS))
        default_mgr = "systemd"
    hosts = em.get("hosts")
    if not isinstance(hosts, list):
        return  # a wrong type or a missing setting was reported by validate()
    if not hosts:
        c.add("the ssh target lists no hosts", doc.pos(settings + ("hosts",)),
              "add one mapping per machine: {name, host, role} (and key, user, port, nodeset)")
        return
    out = _ssh_hosts(hosts, settings, default_mgr, dep, c, doc)
    controllers = [h for h in out if h.role == "controller"]
    if len(controllers) > 1:
        c.add(f"the ssh target lists {len(controllers)} controllers ("
              + ", ".join(h.name for h in controllers) + ")", doc.pos(settings + ("hosts",)),
              "give exactly one host role: controller")
    elif not controllers and len(c.errors) == n_errors:
        c.add("the ssh target lists no controller", doc.pos(settings + ("hosts",)),
              "give one host role: controller (slurmctld runs there)")
    if len(c.errors) > n_errors:
        return
    _ssh_nodes(exp, em, dep, out, c, doc)
    ctl = controllers[0]
    if dep.controller is None:
        dep.controller = Controller("", hostname=ctl.name)
    else:
        dep.controller.hostname = ctl.name
    dep.ssh_hosts = out


def _ssh_hosts(hosts: list, settings: tuple, default_mgr: str, dep: Deployment, c: Collector,
               doc) -> list[SshHost]:
    """The ssh target's HOSTS (its setting, under SETTINGS) that pass every check, in their
    order; each problem of each host goes to c."""
    base_dir = os.path.dirname(os.path.abspath(doc.file))
    nodesets: dict[str, Nodeset] = {}  # by name and by module id
    for ns in dep.nodesets:
        nodesets.setdefault(ns.name, ns)
        nodesets.setdefault(ns.module_id, ns)
    out: list[SshHost] = []
    names: dict[str, int] = {}
    machines: dict[tuple[str, int], str] = {}
    for i, h in enumerate(hosts):
        host = _ssh_host(i, h, settings + ("hosts", i), names, machines, nodesets, base_dir, default_mgr,
                         dep, c, doc)
        if host is not None:
            out.append(host)
    return out


def _ssh_host(i: int, h: Any, here: tuple, names: dict[str, int], machines: dict[tuple[str, int], str],
              nodesets: dict[str, Nodeset], base_dir: str, default_mgr: str, dep: Deployment,
              c: Collector, doc) -> SshHost | None:
    """Host I of the ssh target (H, at HERE): its SshHost, or None once every problem it has is
    reported. NAMES (name -> index) and MACHINES ((address, port) -> name) hold the hosts before
    it; they get its own name, and its machine once it passed."""
    if not isinstance(h, dict):
        c.add(f"ssh host {i + 1} must be a mapping, found {type(h).__name__}", doc.pos(here),
              "for example {name: node-0, host: 10.0.0.5, role: compute, nodeset: debug, key: ~/.ssh/id_ed25519}")
        return None
    n_errors = len(c.errors)  # the host passes if its checks add none
    name = h.get("name")
    label = f" ({name})" if isinstance(name, str) and name else ""
    prefix = f"ssh host {i + 1}{label}: "

    def err(msg: str, key: str | None, hint: str) -> None:
        c.add(prefix + msg, doc.pos(here + ((key,) if key else ())), hint)

    for k in h:
        if k not in SSH_HOST_KEYS:
            c.add(f"{prefix}unknown key '{k}'", doc.key_pos(here + (k,)),
                  did_you_mean(str(k), list(SSH_HOST_KEYS)) or "keys: " + ", ".join(SSH_HOST_KEYS))
    _ssh_host_name(name, i, names, err)
    addr = h.get("host")
    if not isinstance(addr, str) or not addr.strip() or any(ch.isspace() for ch in addr.strip()):
        err("needs host, the address or DNS name ssh connects to" if addr is None else
            f"invalid host {addr!r}", "host" if addr is not None else None, "")
    role = h.get("role")
    if role not in SSH_ROLES:
        err("needs a role" if role is None else f"unknown role {role!r}", "role" if role is not None else None,
            did_you_mean(str(role), list(SSH_ROLES)) if isinstance(role, str) else
            "one of: " + ", ".join(SSH_ROLES))
    port, user = _ssh_host_login(h, err)
    key_path = _ssh_host_key(h.get("key"), base_dir, err)
    mgr = h.get("service_manager", default_mgr)
    if mgr not in SERVICE_MANAGERS:
        err(f"unknown service_manager {mgr!r}", "service_manager", "one of: " + ", ".join(SERVICE_MANAGERS))
    ports = _ssh_daemon_ports(h, role, err)
    nodeset = _ssh_host_nodeset(h, role, nodesets, dep, err)
    if len(c.errors) > n_errors:
        return None
    # each was checked above
    assert isinstance(name, str) and isinstance(addr, str) and isinstance(role, str) and port is not None
    machine = (addr.strip(), port)
    if machine in machines:
        err(f"{addr}:{port} is listed twice (also as '{machines[machine]}')", "host", "list each machine once")
        return None
    machines[machine] = name
    return SshHost(name=name, host=addr.strip(), role=role, port=port, user=user, key=key_path,
                   nodeset=nodeset, slurmd_port=ports.get("slurmd_port"),
                   slurmctld_port=ports.get("slurmctld_port"), service_manager=mgr)


def _ssh_host_name(name: Any, i: int, names: dict[str, int], err: _HostError) -> None:
    """Host I's name: a hostname (one DNS label) that no host before it has (NAMES: name -> index
    of the host, which gets this one's)."""
    if not isinstance(name, str) or not _HOST_NAME_RE.match(name):
        err("needs a name, a hostname (letters, digits, '-'), which is its Slurm node name"
            if name is None else f"invalid name {name!r}", "name" if name is not None else None,
            "use letters, digits and '-', at most 63, not starting or ending with '-'")
    elif name in names:
        err(f"name '{name}' is used by host {names[name] + 1} too", "name", "every host needs its own name")
    else:
        names[name] = i


def _ssh_host_login(h: dict, err: _HostError) -> tuple[int | None, Any]:
    """The port (None: invalid) and user ssh logs in to host H with."""
    port = _port(h.get("port", 22))
    if port is None:
        err(f"invalid port {h.get('port')!r}", "port", "a TCP port, 1-65535")
    user = h.get("user", "root")
    if not isinstance(user, str) or not re.match(r"^[A-Za-z_][A-Za-z0-9_.-]*$", user):
        err(f"invalid user {user!r}", "user", "")
    return port, user


def _ssh_host_key(key: Any, base_dir: str, err: _HostError) -> str | None:
    """The path of a host's private key file (KEY, relative to the blueprint's folder BASE_DIR);
    None without a key or with one that is not a path."""
    if key is None:
        return None
    if not isinstance(key, str) or not key:
        err(f"key must be the path of a private key file, found {key!r}", "key", "")
        return None
    key_path = os.path.normpath(os.path.join(base_dir, os.path.expanduser(key)))
    if not os.path.isfile(key_path):
        err(f"key file '{key}' does not exist", "key", f"looked for {key_path}")
    elif key_path.endswith(".pub"):
        err(f"key '{key}' is a public key", "key", "give the private key's path (without .pub)")
    return key_path


def _ssh_daemon_ports(h: dict, role: Any, err: _HostError) -> dict[str, int | None]:
    """Host H's slurmd_port and slurmctld_port (those it sets), each on the role whose daemon
    listens there."""
    ports: dict[str, int | None] = {}
    for k in ("slurmd_port", "slurmctld_port"):
        if h.get(k) is not None:
            ports[k] = _port(h[k])
            if ports[k] is None:
                err(f"invalid {k} {h[k]!r}", k, "a TCP port, 1-65535")
    if role != "compute" and "slurmd_port" in h:
        err("slurmd_port is for compute hosts (slurmd runs there)", "slurmd_port", "")
    if role != "controller" and "slurmctld_port" in h:
        err("slurmctld_port is for the controller host", "slurmctld_port", "")
    return ports


def _ssh_host_nodeset(h: dict, role: Any, nodesets: dict[str, Nodeset], dep: Deployment,
                      err: _HostError) -> str:
    """The name of the nodeset a compute host H is a node of (NODESETS: by name and by module id;
    the blueprint's only one when H names none); "" for other roles, and for a wrong one."""
    if role != "compute":
        if h.get("nodeset") is not None:
            err(f"only compute hosts belong to a nodeset (this one is {role})", "nodeset", "")
        return ""
    ref = h.get("nodeset")
    live = sorted({ns.name for ns in dep.nodesets})
    if ref is None and len(live) == 1:
        return live[0]
    if ref is None:
        err("a compute host needs nodeset, the nodeset it is a node of", None,
            "nodesets: " + ", ".join(live) if live else "the blueprint has no nodeset "
            "(add a ctk/slurm/nodeset module)")
    elif not isinstance(ref, str) or ref not in nodesets:
        err(f"no nodeset {ref!r}", "nodeset",
            (did_you_mean(str(ref), list(nodesets)) if isinstance(ref, str) else "")
            or ("nodesets: " + ", ".join(live) if live else "the blueprint has no nodeset"))
    else:
        return nodesets[ref].name
    return ""


def _ssh_nodes(exp: Expanded, em: ExpandedModule, dep: Deployment, out: list[SshHost], c: Collector,
               doc) -> None:
    """Each nodeset's nodes become its compute hosts among OUT, all static; a nodeset with more
    static nodes than hosts is an error (EM: the ssh target's module)."""
    for ns in dep.nodesets:
        mine = [h.name for h in out if h.role == "compute" and h.nodeset == ns.name]
        if ns.node_count_static > len(mine):
            nem = _module(exp, ns.module_id)
            where = nem.module.path + (("settings", "node_count_static") if "node_count_static" in nem.settings
                                       else ("id",))
            c.add(f"nodeset '{ns.name}' has {ns.node_count_static} static nodes but the ssh target lists "
                  f"{len(mine)} compute host(s) for it", doc.pos(where),
                  f"list one host per node (role: compute, nodeset: {ns.name}) in '{em.id}', "
                  "or lower node_count_static")
            continue
        # Existing machines are all up: every host is a static node, named as the blueprint names it.
        ns.hostnames = mine
        ns.node_count_static, ns.node_count_dynamic_max = len(mine), 0


def process(path: str, cli_vars: list[str] | tuple = (), deployment_file: str | None = None) -> Expanded:
    """The whole front of the pipeline: load, expand, validate and plan a blueprint. The
    Deployment is `exp.deployment`; every error (planning's too) is raised together."""
    from .blueprint import process as expand_file

    def _plan(exp: Expanded, c: Collector) -> None:
        exp.deployment = plan(exp, c, load_stacks())  # type: ignore[attr-defined]

    return expand_file(path, cli_vars, deployment_file, then=_plan)
