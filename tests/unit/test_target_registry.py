"""A target is a plugin: its entry in ctk.target_registry (its Target subclass, planning,
settings type, target module and traits) is all the code outside ctk/targets/ knows of it.
Nothing else compares a target's name."""

import ast
import dataclasses
import importlib
import json
import pathlib

import pytest

import ctk
from ctk import target_registry
from ctk.model import (
    Deployment,
    GcpSettings,
    LabSettings,
    SshHost,
    SshSettings,
    TargetSettings,
)
from ctk.modules.ctk_kinds import KINDS
from ctk.targets import REGISTRY, get
from ctk.targets.base import Target

PACKAGE = pathlib.Path(ctk.__file__).parent


def _name_comparisons(path: pathlib.Path, root: pathlib.Path = PACKAGE) -> list[str]:
    """Comparisons (==, !=, in, not in) of a value with a target's name, as file:line (the
    file relative to ROOT)."""
    names = set(target_registry.TARGETS)
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.Compare) or not all(
                isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)) for op in node.ops):
            continue
        for side in (node.left, *node.comparators):
            consts = [side] if isinstance(side, ast.Constant) else list(getattr(side, "elts", []))
            if any(isinstance(c, ast.Constant) and c.value in names for c in consts):
                found.append(f"{path.relative_to(root)}:{node.lineno}")
    return found


def test_no_code_outside_the_targets_compares_a_target_name():
    outside = [p for p in PACKAGE.rglob("*.py")
               if "targets" not in p.relative_to(PACKAGE).parts[:1] and "data" not in p.relative_to(PACKAGE).parts[:1]
               and p.name != "target_registry.py"]
    assert len(outside) > 50
    found = [hit for p in outside for hit in _name_comparisons(p)]
    assert not found, f"ask the deployment's traits (dep.traits), not its target's name: {found}"


def test_the_check_finds_a_comparison(tmp_path):
    """The check above means something: it finds what it looks for, both ways round."""
    probe = tmp_path / "probe.py"
    probe.write_text('if dep.target == "gcp":\n    pass\nx = "local" != t\ny = t in ("ssh", "x")\nz = t == "other"\n')
    assert _name_comparisons(probe, tmp_path) == ["probe.py:1", "probe.py:3", "probe.py:4"]


@pytest.mark.parametrize("name", sorted(target_registry.TARGETS))
def test_each_entry_is_a_target_with_its_traits(name):
    entry = REGISTRY[name]
    target = get(name)
    assert isinstance(target, Target) and target.name == name
    assert isinstance(entry.traits, target_registry.Traits)
    if entry.job_cluster:
        module, fn = entry.job_cluster.split(":")
        assert callable(getattr(importlib.import_module(module), fn))


@pytest.mark.parametrize("name", sorted(target_registry.TARGETS))
def test_each_entry_names_its_module_planning_and_settings(name):
    entry = REGISTRY[name]
    kind = target_registry.resolve(entry.kind)
    assert KINDS[kind.source] is kind, f"{entry.kind}: not among ctk's module kinds"
    assert target_registry.of_source(kind.source) == name
    assert callable(target_registry.resolve(entry.planner))
    kind = target_registry.resolve(entry.settings)
    assert issubclass(kind, TargetSettings) and dataclasses.is_dataclass(kind)
    assert kind.from_dict(dataclasses.asdict(kind())) == kind()


def test_a_blueprint_without_a_target_module_goes_to_the_default_target():
    assert target_registry.DEFAULT in target_registry.TARGETS
    assert target_registry.of_source("ctk/slurm/nodeset") is None


def test_settings_round_trip_through_deployment_json():
    dep = Deployment("d", "b", "c", target="ssh",
                     settings=SshSettings([SshHost("n0", "10.0.0.5", "compute", nodeset="debug")]))
    back = Deployment.from_dict(json.loads(json.dumps(dep.to_dict())))
    assert back == dep and isinstance(back.settings, SshSettings) and back.settings.hosts[0].host == "10.0.0.5"
    gcp = Deployment("d", "b", "c", target="gcp", settings=GcpSettings(project_id="p", image_disk_size=50))
    assert Deployment.from_dict(json.loads(json.dumps(gcp.to_dict()))) == gcp


def test_a_deployment_json_of_an_earlier_ctk_keeps_its_settings():
    """An earlier ctk kept every target's settings side by side (lab, ssh_hosts, gcp)."""
    old = {"deployment_name": "d", "blueprint_name": "b", "slurm_cluster_name": "c", "ssh_hosts": [],
           "gcp": {}, "lab": {"chaos_interval": 5.0, "user": "alice"}}
    dep = Deployment.from_dict({**old, "target": "local"})
    assert dep.settings == LabSettings(chaos_interval=5.0, user="alice")
    host = {"name": "n0", "host": "h", "role": "controller"}
    assert Deployment.from_dict({**old, "target": "ssh", "ssh_hosts": [host]}).settings == \
        SshSettings([SshHost("n0", "h", "controller")])
    assert Deployment.from_dict({**old, "target": "gcp", "gcp": {"zone": "z"}}).settings == GcpSettings(zone="z")


def test_a_target_asks_for_its_own_settings():
    dep = Deployment("d", "b", "c")
    assert dep.settings_of(LabSettings) is dep.settings
    with pytest.raises(TypeError, match="on the local target, whose settings are LabSettings, not SshSettings"):
        dep.settings_of(SshSettings)
