"""The blueprint's target: the one its target module chooses (a module whose source a target
of ctk.target_registry names; none: the default target), and the settings that target's own
planning makes of that module."""

from __future__ import annotations

from ..blueprint.errors import Collector
from ..blueprint.expand import Expanded, ExpandedModule
from ..model import Deployment, TargetSettings
from ..target_registry import DEFAULT, TARGETS, of_source, resolve


def _a(name: str) -> str:
    """NAME with its article: a local, a gcp, an ssh (a name without vowels is said letter by
    letter)."""
    spelled = not any(ch in "aeiouy" for ch in name)
    return f"{'an' if name[0] in 'aeiou' or (spelled and name[0] in 'fhlmnrsx') else 'a'} {name}"


def target_module(exp: Expanded, c: Collector) -> tuple[str, ExpandedModule | None]:
    """The target the blueprint goes to, and its target module (None: it has none). A second
    target module is an error at its id, whether of the same target or another."""
    doc = exp.blueprint.doc
    found = [(em, name) for em in exp.modules if (name := of_source(em.module.source)) is not None]
    if not found:
        return DEFAULT, None
    (first, target), order = found[0], list(TARGETS)
    for em, name in found[1:]:
        where = doc.pos(em.module.path + ("id",))
        if name == target:
            c.add(f"a blueprint has one {target} target module", where,
                  f"'{first.id}' is its {target} target module already: keep one")
        else:
            one, other = sorted((target, name), key=order.index)
            c.add(f"a blueprint goes to one target: it has both {_a(one)} and {_a(other)} target module", where,
                  f"remove '{em.id}' or '{first.id}'")
    return target, first


def plan_target(exp: Expanded, dep: Deployment, em: ExpandedModule | None, c: Collector) -> TargetSettings:
    """DEP's target's settings, made by its planning (ctk.target_registry's planner) from its
    target module EM, once the rest of DEP is planned; its errors go to c."""
    planner = resolve(TARGETS[dep.target].planner)
    return planner(exp, dep, em, c)
