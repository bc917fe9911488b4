"""Planning the images: what each image module makes, where its nodes boot slurm-gcp's
images, its stack (the one it names, or the newest that fits its base's Python and its
accelerator), and what its accelerators need of its driver and CUDA toolkit."""

from __future__ import annotations

import dataclasses
import os
import re

from .. import paths
from ..blueprint.errors import BlueprintError, Collector, did_you_mean
from ..blueprint.expand import Expanded, ExpandedModule
from ..blueprint.expand import setting_pos as setting_pos
from ..blueprint.expression import is_deferred
from ..model import (
    BASE_PYTHON,
    BASES,
    CONTAINER_IMAGE,
    CONTAINER_ROLES,
    DEFAULT_BASE,
    SLURM_ARCHIVES,
    Deployment,
    ImageSpec,
    base_python,
    slurm_text,
)
from ..modules import slurm_gcp
from ..modules.machines import (
    is_arm,
    lookup_machine,
)
from ..stacks import Stack, newest_for, python_tuple
from ..stacks.drivers import (
    TE_MIN_CUDA,
    Driver,
    bases_with_dcgm,
    bases_with_driver,
    bases_with_toolkit,
    cuda_toolkit,
    gpu_needs,
    has_dcgm,
    image_driver,
)
from ..stacks.lock import lock_command, lock_path, lock_state
from ..stacks.te import RELEASES as TE_RELEASES
from .values import module_of, str_of

# Base images ctk knows how to provision, by the words found in a source image name.
_BASES = (("debian-13", "debian-13"), ("debian13", "debian-13"), ("debian-12", "debian-12"),
          ("debian12", "debian-12"), ("2404", "ubuntu-24.04"),
          ("24-04", "ubuntu-24.04"), ("2204", "ubuntu-22.04"), ("22-04", "ubuntu-22.04"),
          ("rocky-linux-9", "rocky-9"), ("rocky-9", "rocky-9"))


def image(em: ExpandedModule, exp: Expanded) -> ImageSpec:
    """The image a ctk/image module, or a Cluster Toolkit image module, makes."""
    if em.module.source in ("ctk/image", CONTAINER_IMAGE):
        name = str_of(em.get("name"), em.id) or em.id
        base = str_of(em.get("base"), DEFAULT_BASE)
        default_roles = CONTAINER_ROLES if em.module.source == CONTAINER_IMAGE else ["common", "munge", "slurm", "jax"]
        return ImageSpec(name=name, module_id=em.id, base=base,
                         roles=list(em.get("roles") or default_roles),
                         stack=str_of(em.get("stack"), "") or "",  # "": chosen by stacks
                         extra_playbooks=list(em.get("extra_playbooks") or []), source=em.module.source,
                         transformer_engine=str_of(em.get("transformer_engine")),
                         pyxis=dict(em.get("pyxis") or {}) if isinstance(em.get("pyxis"), dict) else {},
                         slurm_release=_own_release_is_none(str_of(em.get("slurm_release"), "") or "", base))
    src_img = " ".join(str(x) for x in (em.get("source_image"), em.get("source_image_family"))
                       if x and not is_deferred(x))
    base = DEFAULT_BASE
    for word, b in _BASES:
        if word in src_img:
            base = b
            break
    name = str_of(em.get("image_family"), em.id) or em.id
    return ImageSpec(name=name, module_id=em.id, base=base, stack="", source=em.module.source)


def unique_names(exp: Expanded, dep: Deployment, c: Collector) -> None:
    """One name, one image: node images and container images share the image store's names
    (ctk image build --only NAME, ctk image export NAME)."""
    seen: dict[str, ImageSpec] = {}
    for img in dep.images + dep.containers:
        first = seen.setdefault(img.name, img)
        if first is not img:
            em = module_of(exp, img.module_id)
            where = em.module.path + (("settings", "name") if "name" in em.explicit else ("id",))
            c.add(f"image name '{img.name}' is taken: module {first.module_id} makes an image of that name",
                  exp.blueprint.doc.pos(where), "give one of them another name")


def no_extra_playbooks(exp: Expanded, dep: Deployment, c: Collector) -> None:
    """extra_playbooks is refused where it is given: no builder of ctk's runs them yet, and an
    image that silently lacked what they install would be worse than no image."""
    for img in dep.images + dep.containers:
        if img.extra_playbooks:
            em = module_of(exp, img.module_id)
            c.add(f"image '{img.name}': extra_playbooks are not run by ctk's image builds (yet)",
                  exp.blueprint.doc.pos(em.module.path + ("settings", "extra_playbooks")),
                  "leave them out; what they do can become a role of ctk's own (ansible/roles in ctk's "
                  "source, listed in the image's roles: docs/images-and-stacks.md)")


def _accelerator(img: ImageSpec, exp: Expanded, dep: Deployment) -> str:
    """The accelerator of the stack ctk picks for an image that names none: CPU for ctk's own
    images; CUDA 12 for a Cluster Toolkit image built on or for GPU machines."""
    if img.source == "ctk/image":
        if dep.traits.boots_slurm_gcp_images:  # they carry the driver: GPU nodes make it a GPU image
            return "cuda12" if any(dep.image_of(ns) is img and ns.gpu_count for ns in dep.nodesets) else "cpu"
        return "cuda12" if "nvidia_driver" in img.roles else "cpu"
    em = module_of(exp, img.module_id)
    mt = lookup_machine(str_of(em.get("machine_type"), "") or "")
    gpu = (mt and mt.gpu_count) or em.get("accelerator_type") or any(
        ns.image == img.name and ns.gpu_count for ns in dep.nodesets)
    return "cuda12" if gpu else "cpu"


def _bases_for(fits) -> str:
    """The bases whose Python passes fits(python), oldest Python first."""
    return ", ".join(b for b, v in sorted(BASE_PYTHON.items(), key=lambda bv: python_tuple(bv[1])) if fits(v))


def pick_stacks(exp: Expanded, dep: Deployment, c: Collector, stacks: dict[str, Stack]) -> None:
    """Each image's stack: the one it names, which must exist and be locked for its base's
    Python (an error at the line that names it, with the newest stack that fits), else the
    newest stack of its accelerator for that Python."""
    doc = exp.blueprint.doc
    for img in dep.images + dep.containers:
        em = module_of(exp, img.module_id)
        py = base_python(img.base)
        jax = "jax" in img.roles
        if img.stack:
            stack = stacks.get(img.stack)
            if stack is None:
                c.add(f"unknown stack '{img.stack}'", setting_pos(exp, em, "stack"),
                      did_you_mean(img.stack, stacks) or f"stacks: {', '.join(stacks)} (ctk stack list)")
            elif jax and py and not stack.supports(py):
                fit = newest_for(stacks, stack.accelerator, py)
                hint = (f"use stack {fit.name} (jax {fit.jax}), the newest {stack.accelerator} stack for "
                        f"Python {py}" if fit else
                        f"no {stack.accelerator} stack is for Python {py}; {stack.name} fits base "
                        f"{_bases_for(stack.supports)}")
                c.add(f"{stack.misfit(py)}; base {img.base} has Python {py}", setting_pos(exp, em, "stack"), hint)
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
        if img.source in ("ctk/image", CONTAINER_IMAGE):
            where = em.module.path + (("settings", "base") if "base" in em.explicit else ("id",))
            c.add(why, doc.pos(where), f"use a base whose Python a {acc} stack is for ({bases}), "
                                       "or leave out the jax role")
        else:  # a Cluster Toolkit image: ctk adds the jax role itself, so it leaves it out instead
            img.roles = [r for r in img.roles if r != "jax"]
            exp.warnings.append(BlueprintError(
                f"image {img.name}: {why}, so it gets no JAX venv", doc.pos(em.module.path + ("id",)),
                f"an image on a base a {acc} stack is for ({bases}) gets one"))


def accelerator_rules(exp: Expanded, dep: Deployment, c: Collector, stacks: dict[str, Stack]) -> None:
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
        em = module_of(exp, img.module_id)
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
                  f"{driver.source}", setting_pos(exp, em, "stack"),
                  ", ".join(x for x in (
                      f"use {' or '.join(cuda12)} (CUDA 12, driver >= {stacks[cuda12[0]].min_driver})" if cuda12 else "",
                      f"or build on a base whose driver is >= {stack.min_driver} ({', '.join(others)})" if others else "")
                      if x))
        if img.transformer_engine:
            _transformer_engine(exp, em, img, stack, c)
        if "dcgm" in img.roles:
            _dcgm(exp, em, img, stack, c, driver_in_image=fam is not None)
    for ns in dep.nodesets:
        need = gpu_needs(ns.gpu_type)
        ns_img = dep.image_of(ns)
        if need is None or ns.gpu_type is None or ns_img is None or ns_img.source != "ctk/image":
            continue
        generation, floor, module = need
        em = module_of(exp, ns.module_id)
        where = doc.pos(em.module.path + (("settings", "machine_type") if "machine_type" in em.explicit else ("id",)))
        gpus = f"nodeset {ns.name}: {ns.machine_type}'s {ns.gpu_type.upper()} GPUs ({generation})"
        if dep.traits.boots_slurm_gcp_images and is_arm(ns.machine_type):
            continue  # refused as Arm (plan.gcp): no x86-64 family's driver is the question
        on_gcp = slurm_gcp.family_for(ns_img.base) if dep.traits.boots_slurm_gcp_images else None
        if on_gcp is not None:  # the image's driver is slurm-gcp's: its version is known, its module is not
            if python_tuple(on_gcp.driver) >= python_tuple(floor):
                continue
            fits = [f"{f.base} ({f.family})" for f in slurm_gcp.FAMILIES.values()
                    if python_tuple(f.driver) >= python_tuple(floor)]
            c.add(f"{gpus} need NVIDIA driver {floor} or later (its {module} kernel module); image '{ns_img.name}' "
                  f"boots slurm-gcp's {on_gcp.family}, with driver {on_gcp.driver}", where,
                  f"build image '{ns_img.name}' on {' or '.join(fits)}" if fits else "no slurm-gcp family has it")
            continue
        if "nvidia_driver" not in ns_img.roles:
            continue
        driver = image_driver(ns_img.base)
        if driver is None or (driver.at_least(floor) and driver.kernel_module == module):
            continue
        fits = bases_with_driver(floor, module)
        c.add(f"{gpus} need NVIDIA's {module} kernel module from driver {floor}; image '{ns_img.name}' (base "
              f"{ns_img.base}) gets driver {driver.version} with the {driver.kernel_module} module ({driver.source})",
              where, f"build image '{ns_img.name}' on a base that has it ({', '.join(fits)})" if fits else
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


def on_slurm_gcp_images(exp: Expanded, dep: Deployment, c: Collector) -> None:
    """Where nodes boot slurm-gcp's images (the gcp target), each ctk/image is built on one of
    them: its base must be one slurm-gcp publishes a family of, and it may not ask for a role
    that image already brings (the default roles leave those out)."""
    doc = exp.blueprint.doc
    for img in dep.images:
        if img.source != "ctk/image":
            continue
        iem = module_of(exp, img.module_id)
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


def _known_roles() -> list[str]:
    """The roles ctk's Ansible folder has (paths.ansible_dir(): a site's own may add some)."""
    d = os.path.join(paths.ansible_dir(), "roles")
    try:
        return sorted(n for n in os.listdir(d) if os.path.isdir(os.path.join(d, n, "tasks")))
    except OSError:
        return []


_SHA256 = re.compile(r"[0-9a-f]{64}")


def _own_release_is_none(release: str, base: str) -> str:
    """The base's own release asked for by name is the base's own: "" (the same layers)."""
    b = BASES.get(base)
    return "" if b and release == b.slurm_release else release


def slurm_releases(exp: Expanded, dep: Deployment, c: Collector) -> None:
    """An image's slurm_release is one ctk can install on its base (SLURM_ARCHIVES), on an image
    with the slurm role; and a cluster's node images run one Slurm release."""
    for img in dep.images + dep.containers:
        if img.source not in ("ctk/image", CONTAINER_IMAGE) or not img.slurm_release:
            continue
        em = module_of(exp, img.module_id)
        pos = setting_pos(exp, em, "slurm_release")
        own = BASES[img.base].slurm_release if img.base in BASES else None
        offered = [f"{own} (the base's)"] if own else []
        offered += [f"{r} (Debian {suites[img.base]}'s)" for r, suites in SLURM_ARCHIVES.items() if img.base in suites]
        if not re.fullmatch(r"\d\d\.\d\d", img.slurm_release):
            c.add(f"image '{img.name}': slurm_release {img.slurm_release!r} is not a Slurm release", pos,
                  f"a release as Slurm spells it, e.g. \"26.05\"; base {img.base} offers: {', '.join(offered) or 'none'}")
        elif img.base not in SLURM_ARCHIVES.get(img.slurm_release, {}):
            bases = sorted(SLURM_ARCHIVES.get(img.slurm_release, {}))
            c.add(f"image '{img.name}': ctk has no Slurm {img.slurm_release} for base {img.base}", pos,
                  f"base {img.base} offers: {', '.join(offered) or 'its own only'}"
                  + (f"; Slurm {img.slurm_release} is on base {', '.join(bases)}" if bases else ""))
        elif "slurm" not in img.roles:
            c.add(f"image '{img.name}': slurm_release is for the slurm role, which is not in its roles", pos,
                  "add slurm to roles, or leave slurm_release out")
    _one_release(exp, dep, c)


def _one_release(exp: Expanded, dep: Deployment, c: Collector) -> None:
    """The nodes' images of one cluster run one Slurm release (slurmctld, slurmd and the clients
    of different releases work together only in an upgrade's order: `ctk deploy` of a new image)."""
    imgs = [(i, i.slurm) for i in dep.node_images() if i.source == "ctk/image" and "slurm" in i.roles and i.slurm]
    for img, release in imgs[1:]:
        first, first_release = imgs[0]
        if release is not None and first_release is not None and release != first_release:
            em = module_of(exp, img.module_id)
            where = "slurm_release" if "slurm_release" in em.explicit else "base"
            c.add(f"image '{img.name}' has Slurm {slurm_text(release)}, image '{first.name}' "
                  f"Slurm {slurm_text(first_release)}: the nodes of one cluster run one Slurm release",
                  setting_pos(exp, em, where), "give every node image the same slurm_release (and base)")
            return


def roles_and_pyxis(exp: Expanded, dep: Deployment, c: Collector) -> None:
    """Every role an image names is one ctk has; the pyxis role goes on node images of targets
    without Slurm's own container bundles (ssh, gcp), and its files, where given, each have an
    https url and a sha256."""
    known = _known_roles()
    for img in dep.images + dep.containers:
        if img.source not in ("ctk/image", CONTAINER_IMAGE):
            continue
        em = module_of(exp, img.module_id)
        for i, role in enumerate(img.roles):
            if known and role not in known:
                c.add(f"image '{img.name}': no role '{role}'", setting_pos(exp, em, "roles", i),
                      did_you_mean(role, known) or f"ctk's roles: {', '.join(known)}")
        if "pyxis" in img.roles:
            pos = setting_pos(exp, em, "roles", img.roles.index("pyxis"))
            if img.source == CONTAINER_IMAGE:
                c.add(f"container image '{img.name}': the pyxis role is for nodes (it loads pyxis in Slurm)", pos,
                      "give the pyxis role to the nodes' ctk/image")
            elif dep.traits.has_container_bundles:
                c.add(f"image '{img.name}': the pyxis role is not for the {dep.target} target: its nodes run "
                      "Slurm's own containers (srun --container, OCI bundles of the deployment's container images), "
                      "and ctk's srun takes pyxis's options to them", pos,
                      "leave pyxis out of roles here; it is for the ssh and gcp targets")
        if "pyxis" in em.explicit:
            if "pyxis" not in img.roles:
                c.add(f"image '{img.name}': the pyxis setting is for the pyxis role, which is not in its roles",
                      setting_pos(exp, em, "pyxis", key=True), "add pyxis to roles, or leave the setting out")
            _pyxis_files(exp, em, img, c)


def _pyxis_files(exp: Expanded, em: ExpandedModule, img: ImageSpec, c: Collector) -> None:
    value = em.get("pyxis")
    if not isinstance(value, dict):
        c.add("pyxis: a map {enroot_packages: [{url, sha256}, ...], source: {url, sha256}}",
              setting_pos(exp, em, "pyxis"))
        return
    for key in value:
        if key not in ("enroot_packages", "source"):
            c.add(f"pyxis: no key '{key}'", setting_pos(exp, em, "pyxis", key, key=True),
                  did_you_mean(key, ("enroot_packages", "source")) or "keys: enroot_packages, source")
    pkgs = value.get("enroot_packages", [])
    files: list[tuple[tuple, object]] = []
    if not isinstance(pkgs, list):
        c.add("pyxis.enroot_packages: a list of {url, sha256}", setting_pos(exp, em, "pyxis", "enroot_packages"))
    else:
        files += [(("enroot_packages", i), f) for i, f in enumerate(pkgs)]
    if "source" in value:
        files.append((("source",), value["source"]))
    for keys, f in files:
        where = "pyxis." + ".".join(str(k) for k in keys)
        if not isinstance(f, dict) or set(f) != {"url", "sha256"}:
            c.add(f"{where}: a file is {{url, sha256}}", setting_pos(exp, em, "pyxis", *keys),
                  "url: https://..., sha256: its 64 hex digits (sha256sum FILE)")
            continue
        url, sha = f["url"], f["sha256"]
        if not isinstance(url, str) or not url.startswith("https://") or any(ch.isspace() for ch in url):
            c.add(f"{where}.url: {url!r} is not an https URL", setting_pos(exp, em, "pyxis", *keys, "url"),
                  "ctk fetches these files over https only")
        if not isinstance(sha, str) or not _SHA256.fullmatch(sha):
            c.add(f"{where}.sha256: not a sha256 (64 lower-case hex digits)",
                  setting_pos(exp, em, "pyxis", *keys, "sha256"), "sha256sum FILE gives it")
