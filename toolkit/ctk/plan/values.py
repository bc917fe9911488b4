"""Reading an expanded blueprint's settings as planning needs them: numbers, strings and
objects whose unset or deferred (Terraform's) values fall back to defaults, checked keys of an
object setting, and the modules planning took a setting from."""

from __future__ import annotations

import math
import re
from typing import Any, overload

from ..blueprint.errors import Collector, did_you_mean
from ..blueprint.expand import Expanded, ExpandedModule
from ..blueprint.expand import setting_pos as setting_pos
from ..blueprint.expression import is_deferred
from ..modules import ctk_kinds


def slurm_cluster_name(deployment_name: str) -> str:
    """Cluster name as slurm-gcp derives it: lowercase letters and digits, a letter first, <= 10."""
    s = re.sub(r"[^a-z0-9]", "", deployment_name.lower())
    s = re.sub(r"^[^a-z]*", "", s)
    return s[:10] or "cluster"


def node_name(module_id: str) -> str:
    return re.sub(r"[^a-z0-9]", "", module_id.lower())


def int_of(v, default: int = 0) -> int:
    if v is None or is_deferred(v):
        return default
    if isinstance(v, bool):
        return int(v)
    try:
        return int(float(v))
    except (TypeError, ValueError):
        return default


@overload
def str_of(v, default: str) -> str: ...
@overload
def str_of(v, default: None = None) -> str | None: ...


def str_of(v, default: str | None = None) -> str | None:
    if v is None or is_deferred(v):
        return default
    return str(v)


def dict_of(v) -> dict[str, Any]:
    if isinstance(v, dict):
        return {k: x for k, x in v.items() if x is not None and not is_deferred(x)}
    return {}


def num_of(v) -> int | float | None:
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


def module_of(exp: Expanded, mid: str) -> ExpandedModule:
    """The module of id MID, which planning took from EXP (a nodeset's, an image's, ...)."""
    em = exp.module(mid)
    assert em is not None, mid
    return em


def object_of(exp: Expanded, em: ExpandedModule, name: str, keys: dict[str, str], c: Collector) -> dict[str, Any]:
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
                      setting_pos(exp, em, name, k, key=True),
                      did_you_mean(str(k), list(keys)) or "keys: " + ", ".join(keys))
            continue
        if x is None or is_deferred(x):
            continue
        got = x if want == "bool" and isinstance(x, bool) else num_of(x) if want == "number" else None
        if got is None:
            c.add(f"{name}.{k} of module '{em.id}' must be a {want}, found {type(x).__name__} {x!r}",
                  setting_pos(exp, em, name, k))
            continue
        out[k] = got
    return out


def module_ident(name: str) -> str:
    """A Cluster Toolkit module id or var name made from an image or nodeset name (the gcp
    target's hand-off: NAME_script, NAME_build, NAME_image)."""
    return re.sub(r"[^A-Za-z0-9_]", "_", name).strip("_").lower() or "x"
