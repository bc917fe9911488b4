"""A target is a plugin: its entry in ctk.target_registry (its Target subclass and its traits)
is all the code outside ctk/targets/ knows of it. Nothing else compares a target's name."""

import ast
import importlib
import pathlib

import pytest

import ctk
from ctk import target_registry
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
