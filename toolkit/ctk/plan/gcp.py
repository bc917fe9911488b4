"""The gcp target's planning: where on Google Cloud the cluster goes (a ctk/target/gcp
module's settings). What booting slurm-gcp's images means for ctk's images is
images.on_slurm_gcp_images (the target's boots_slurm_gcp_images trait)."""

from __future__ import annotations

from ..blueprint.errors import BlueprintError, Collector
from ..blueprint.expand import Expanded, ExpandedModule, setting_pos
from ..blueprint.expression import is_deferred
from ..model import BASES, Deployment, GcpSettings
from ..modules import gpu_networks
from ..modules.machines import is_arm
from .values import module_ident, num_of


def plan_gcp(exp: Expanded, dep: Deployment, em: ExpandedModule | None, c: Collector) -> GcpSettings:
    """The project, region, zone and image build settings EM (a ctk/target/gcp module) gives;
    None for those it leaves to the blueprint's vars (or gcluster's --vars)."""
    assert em is not None  # the gcp target is chosen by its module

    def given(name: str):
        v = em.get(name)
        return None if v is None or is_deferred(v) else v

    x86_machines(exp, dep, c)
    booted_images(exp, dep, c)
    gpu_networks_on_gcp(exp, dep, c)
    text = {k: str(v) for k in ("project_id", "region", "zone", "image_machine_type") if (v := given(k)) is not None}
    return GcpSettings(**text, image_disk_size=num_of(given("image_disk_size")))


def _vms(dep: Deployment) -> list[tuple[str, str, str | None]]:
    """(module id, machine type, image named) of each module whose VMs boot an image: the
    nodesets (not TPU ones), the login groups and the controller the blueprint has."""
    vms = [(ns.module_id, ns.machine_type, ns.image) for ns in dep.nodesets if not ns.tpu_type]
    vms += [(lg.module_id, lg.machine_type, lg.image) for lg in dep.logins]
    if dep.controller is not None and dep.controller.module_id:
        vms.append((dep.controller.module_id, dep.controller.machine_type, dep.controller.image))
    return vms


def booted_images(exp: Expanded, dep: Deployment, c: Collector) -> None:
    """Each VM of the cluster boots a known image on Google Cloud: the one its module names, else
    the deployment's only one, else (no ctk image at all) slurm-gcp's, Cluster Toolkit's default.
    A module naming none where there are several is refused, and so is a cluster without a
    controller module."""
    ctl = dep.controller
    if ctl is None or not ctl.module_id:
        target = next((m for m in exp.modules if m.module.source == "ctk/target/gcp"), None)
        if dep.nodesets or dep.partitions:
            c.add("the gcp target needs a controller: this blueprint has no ctk/slurm/controller module",
                  exp.blueprint.doc.pos(target.module.path + ("source",)) if target else exp.blueprint.doc.pos(()),
                  "add a module with source: ctk/slurm/controller whose use lists an image and the partitions")
    names = [img.name for img in dep.images if img.source == "ctk/image"]
    ids = [img.module_id for img in dep.images if img.source == "ctk/image"]
    for module_id, _, image in _vms(dep):
        em = exp.module(module_id)
        if em is None or not em.module.source.startswith("ctk/") or image or len(names) == 1:
            continue  # it boots the deployment's only image
        if len(names) > 1:
            c.add(f"module '{module_id}' boots no image: on Google Cloud each VM boots one of the blueprint's images, "
                  f"and it has {len(names)} ({', '.join(names)})", exp.blueprint.doc.pos(em.module.path + ("id",)),
                  f"add one of the image modules {', '.join(ids)} to its use")
        elif any(ns.module_id == module_id and ns.gpu_count for ns in dep.nodesets):
            c.add(f"nodeset module '{module_id}' has GPUs and the blueprint no image: it would boot Cluster Toolkit's "
                  f"default, slurm-gcp's Rocky Linux 8 family, whose NVIDIA driver and GPU networks ctk cannot vouch for",
                  exp.blueprint.doc.pos(em.module.path + ("id",)),
                  "add a ctk/image module (e.g. base: ubuntu-24.04 with a CUDA stack) and use it")


def x86_machines(exp: Expanded, dep: Deployment, c: Collector) -> None:
    """The images ctk builds on slurm-gcp's families are x86-64: a VM of an Arm series cannot
    boot them."""
    for module_id, machine, _ in _vms(dep):
        em = exp.module(module_id)
        if em is not None and em.module.source.startswith("ctk/") and is_arm(machine):
            c.add(f"module '{module_id}': {machine} has Arm CPUs, and the images ctk builds on slurm-gcp's families "
                  "are x86-64", setting_pos(exp, em, "machine_type"),
                  "pick an x86-64 machine type, or write the cluster in Cluster Toolkit's kinds (its A4X examples "
                  "build an Arm image)")


def gpu_networks_on_gcp(exp: Expanded, dep: Deployment, c: Collector) -> None:
    """The GPU networks the hand-off builds for nodesets of ctk's kinds (render.gpunets), as
    their jobs will find them: a machine whose network ctk does not build trains over the primary
    network (said, and its jobs' network is tcp); RDMA's NCCL plugin comes from an apt
    repository, so its nodes' image must have apt."""
    # the ids the hand-off gives modules of its own: the vpc, each image's startup script and Packer
    # build (render.gcluster), the GPU networks' (render.gpunets)
    own = {"network"} | {f"{module_ident(img.name)}_{what}" for img in dep.images if img.source == "ctk/image"
                         for what in ("script", "build")}
    for m in exp.modules:
        if m.module.source != "ctk/image" and (m.id in own or gpu_networks.reserved_id(m.id)):
            c.add(f"module id '{m.id}' is one the Google Cloud hand-off gives a module of its own",
                  exp.blueprint.doc.pos(m.module.path + ("id",)), "give the module another id")
    for ns in dep.nodesets:
        em = exp.module(ns.module_id)
        if em is None or not em.module.source.startswith("ctk/") or ns.network == "tcp":
            continue
        why = gpu_networks.NOT_WIRED.get(ns.machine_type)
        if why and "gpu_network" in em.explicit:
            c.add(f"nodeset {ns.name}: on Google Cloud ctk does not build {ns.machine_type}'s {ns.network} network "
                  f"({why})", setting_pos(exp, em, "gpu_network"),
                  "gpu_network: tcp (the primary network alone), or write the cluster in Cluster Toolkit's kinds, "
                  "with the networks and prolog its examples/machine-learning give the machine")
            continue
        if why:
            exp.warnings.append(BlueprintError(
                f"nodeset {ns.name}: on Google Cloud ctk does not build {ns.machine_type}'s {ns.network} network "
                f"({why}): its jobs train over the primary network alone (their network: tcp)",
                setting_pos(exp, em, "machine_type"), "set gpu_network: tcp to say so and silence this"))
            ns.network = "tcp"
            continue
        img = dep.image_of(ns)
        base = BASES.get(img.base) if img is not None else None
        if ns.network == "rdma" and img is not None and base is not None and base.distribution == "rocky":
            c.add(f"nodeset {ns.name}: RDMA's NCCL plugin (Google's gIB, nccl-gib) comes from an apt repository, "
                  f"and image '{img.name}' is on {img.base}", setting_pos(exp, em, "machine_type"),
                  "build the nodes' image on ubuntu-24.04 (or another apt base), or gpu_network: tcp")
    by_name = {ns.name: ns for ns in dep.nodesets}
    for p in dep.partitions:
        rxdm = {g.rxdm: n for n in p.nodesets
                if (g := gpu_networks.built_for(by_name[n].machine_type, by_name[n].network)) and g.multivpc}
        if len(rxdm) > 1:
            pm = exp.module(p.module_id)
            assert pm is not None  # planned from it
            c.add(f"partition {p.name}: nodesets {' and '.join(sorted(rxdm.values()))} need different receive-datapath "
                  f"managers ({', '.join(sorted(rxdm))}) as the partition's prolog", setting_pos(exp, pm, "nodeset"),
                  "put GPUDirect-TCPX and GPUDirect-TCPXO nodesets in partitions of their own")
