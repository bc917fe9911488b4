"""The targets ctk knows, and what each can do: the one table a new target is added to.

A target's code lives in its own modules, named here: its `Target` subclass (IMPL), the kind
of its target module (KIND: a blueprint with one goes to this target), its planning (PLANNER,
which makes its settings from that module) and the type of those settings in the Deployment
model (SETTINGS). What the layers below the targets ask of a deployment's target (planning,
rendering, the image commands) are its traits here, never its name. Pure data, imported by every layer; each "module:name" is
imported on first use (resolve).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Traits:
    """What a target does with a deployment, as the layers below the targets need to know it."""

    # `ctk image build` makes the blueprint's images on this machine; False: they are built
    # where the cluster goes, by the tool the deployment is handed to.
    builds_images_here: bool
    # The cluster is a lab on this machine: it rehearses a cloud (Spot preemptions, flex-start,
    # dynamic nodes powered up on demand), so the lab's settings and `--chaos` apply.
    rehearses_cloud: bool
    # The deployment is handed to Cluster Toolkit's gcluster, which deploys it on Google Cloud:
    # the folder gets gcp/ (a blueprint of Cluster Toolkit's own modules and Packer folders).
    hands_off_to_gcluster: bool
    # Nodes boot slurm-gcp's images with ctk's roles on top: their NVIDIA driver is the image
    # family's, and a GPU nodeset makes its image a GPU image.
    boots_slurm_gcp_images: bool
    # ctk writes the cluster's slurm.conf (cgroup.conf, gres.conf) into the deployment folder;
    # False where the cluster's own tooling writes them (slurm-gcp on Google Cloud).
    writes_slurm_conf: bool
    # Its compute nodes have each of the deployment's container images as an OCI bundle
    # (model.CONTAINERS_DIR/NAME), which Slurm's own containers run (srun --container).
    has_container_bundles: bool = False


@dataclass(frozen=True)
class Entry:
    impl: str  # "module:class" of its Target subclass
    traits: Traits
    kind: str  # "module:name" of its target module's kind (a blueprint with one goes to this target)
    # "module:function" planning it: (Expanded, Deployment, its target module or None,
    # Collector) -> its settings, once the rest of the Deployment is planned (ctk.plan.targets)
    planner: str
    settings: str  # "module:class" of its settings (Deployment.settings), with a from_dict
    # "module:function" giving the cluster `ctk job` submits to, where it lives apart from the
    # target's builders (so that a submit imports only it); None: Target.job_cluster.
    job_cluster: str | None = None


TARGETS: dict[str, Entry] = {
    "local": Entry("ctk.targets.local:LocalTarget",
                   Traits(builds_images_here=True, rehearses_cloud=True, hands_off_to_gcluster=False,
                          boots_slurm_gcp_images=False, writes_slurm_conf=True, has_container_bundles=True),
                   "ctk.modules.target_kinds.local:KIND", "ctk.plan.local:plan_local", "ctk.model:LabSettings",
                   job_cluster="ctk.targets.labclient:job_cluster"),
    "ssh": Entry("ctk.targets.ssh:SshTarget",
                 Traits(builds_images_here=True, rehearses_cloud=False, hands_off_to_gcluster=False,
                        boots_slurm_gcp_images=False, writes_slurm_conf=True),
                 "ctk.modules.target_kinds.ssh:KIND", "ctk.plan.ssh:plan_ssh", "ctk.model:SshSettings"),
    "gcp": Entry("ctk.targets.gcp:GcpTarget",
                 Traits(builds_images_here=False, rehearses_cloud=False, hands_off_to_gcluster=True,
                        boots_slurm_gcp_images=True, writes_slurm_conf=False),
                 "ctk.modules.target_kinds.gcp:KIND", "ctk.plan.gcp:plan_gcp", "ctk.model:GcpSettings"),
}

# The target of a blueprint without a target module.
DEFAULT = "local"


def traits(target: str) -> Traits:
    """The traits of the target called TARGET (a name the model took from the blueprint)."""
    return TARGETS[target].traits


def settings_type(target: str) -> str:
    """The "module:class" of the settings of the target called TARGET."""
    return TARGETS[target].settings


def target_kinds() -> list[Any]:
    """The module kinds (ctk.modules.schema.ModuleKind) of the targets' modules."""
    return [resolve(e.kind) for e in TARGETS.values()]


def of_source(source: str) -> str | None:
    """The target whose target module has SOURCE, or None: not a target module."""
    return next((name for name, e in TARGETS.items() if resolve(e.kind).source == source), None)


def resolve(ref: str) -> Any:
    """What a "module:name" of this table names, imported."""
    module, name = ref.split(":")
    return getattr(importlib.import_module(module), name)
