"""Planning: the expanded blueprint mapped onto the Deployment model (pure: the stacks catalog
is handed in; the ssh target's planning looks for its hosts' key files, and nothing else reads
or writes a file).

    values    reading settings as planning needs them (numbers, strings, objects, positions)
    nodes     nodesets, partitions, the controller, logins and shared file systems
    images    images and their stacks, against what their accelerators need
    targets   which target the blueprint goes to, and that target's own planning:
    local, ssh, gcp   one module per target, named in ctk.target_registry
"""

from __future__ import annotations

from dataclasses import dataclass

from ..blueprint.errors import BlueprintError, Collector
from ..blueprint.expand import Expanded
from ..model import Controller, Deployment
from ..stacks import Stack, load_stacks
from . import images as _images
from . import nodes as _nodes
from . import targets as _targets
from .values import slurm_cluster_name

__all__ = ["Planned", "plan", "process", "slurm_cluster_name"]


@dataclass(frozen=True)
class Planned:
    """A blueprint loaded, expanded, validated and planned: what every command starts from."""

    expanded: Expanded
    deployment: Deployment

    @property
    def warnings(self) -> list[BlueprintError]:
        """What is worth saying about the blueprint but does not stop it (BlueprintErrors)."""
        return self.expanded.warnings

    @property
    def sources(self) -> dict[str, str]:
        """The text of each file the blueprint was read from (for errors and warnings)."""
        return self.expanded.sources


def plan(exp: Expanded, c: Collector, stacks: dict[str, Stack] | None = None) -> Deployment:
    """The Deployment a valid expanded blueprint describes; its errors go to c. `stacks` is the
    stacks catalog images pick their stacks from (None: read ctk's)."""
    doc = exp.blueprint.doc
    dname = exp.deployment_name
    controllers = [m for m in exp.modules if m.schema and m.schema.role == "controller"]
    cluster = slurm_cluster_name(dname)
    if controllers and isinstance(controllers[0].setting("slurm_cluster_name"), str):
        cluster = controllers[0].setting("slurm_cluster_name")
    target, target_em = _targets.target_module(exp, c)
    dep = Deployment(deployment_name=dname, blueprint_name=exp.blueprint.name, slurm_cluster_name=cluster,
                     target=target)

    images = {em.id: _images.image(em, exp).name for em in exp.modules if em.schema and em.schema.role == "image"}
    by_id = _nodes.plan_modules(exp, dep, cluster, images, c, doc)
    _nodes.unique_nodeset_names(exp, dep, c, doc)
    auth_em = _nodes.plan_services(exp, dep, cluster, by_id, images, c, doc)
    stacks = load_stacks() if stacks is None else stacks
    if dep.traits.boots_slurm_gcp_images:
        _images.on_slurm_gcp_images(exp, dep, c)
    _images.unique_names(exp, dep, c)
    _images.no_extra_playbooks(exp, dep, c)
    _images.roles_and_pyxis(exp, dep, c)
    _images.slurm_releases(exp, dep, c)
    _images.pick_stacks(exp, dep, c, stacks)
    _images.accelerator_rules(exp, dep, c, stacks)
    _nodes.gpu_network_wiring(exp, dep)
    if dep.controller is None and (dep.partitions or dep.nodesets):
        dep.controller = Controller("", hostname=f"{cluster}-controller")
    if dep.controller is not None and dep.controller.slurm_auth:
        assert auth_em is not None  # the controller's module, which set slurm_auth
        _nodes.check_slurm_auth(auth_em, dep, c, doc)
    dep.settings = _targets.plan_target(exp, dep, target_em, c)
    _nodes.uncomputed(exp, c)
    _nodes.partition_names(exp, dep, c, doc)
    return dep


def process(path: str, cli_vars: list[str] | tuple = (), deployment_file: str | None = None) -> Planned:
    """The whole front of the pipeline: load, expand, validate and plan a blueprint; every
    error (planning's too) is raised together."""
    from ..blueprint import process as expand_file

    planned: list[Deployment] = []

    def _plan(exp: Expanded, c: Collector) -> None:
        planned.append(plan(exp, c, load_stacks()))

    exp = expand_file(path, cli_vars, deployment_file, then=_plan)
    return Planned(exp, planned[0])
