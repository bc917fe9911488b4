"""The shape of a blueprint: top-level keys, groups, modules. Names follow Cluster Toolkit's rules."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from .errors import Collector, did_you_mean
from .load import Document

TOP_LEVEL_KEYS = (
    "blueprint_name", "vars", "deployment_groups", "terraform_backend_defaults",
    "terraform_providers", "validators", "validation_level", "toolkit_modules_url",
    "toolkit_modules_version", "ghpc_version",
)
GROUP_KEYS = ("group", "modules", "terraform_backend", "terraform_providers", "kind")
MODULE_KEYS = ("id", "source", "kind", "use", "outputs", "settings")
VALIDATOR_KEYS = ("validator", "inputs", "skip")
KNOWN_VALIDATORS = (
    "test_project_exists", "test_apis_enabled", "test_region_exists", "test_zone_exists",
    "test_zone_in_region", "test_module_not_used", "test_deployment_variable_not_used",
    "test_tf_version_for_slurm",
)
VALIDATION_LEVELS = {0: "IGNORE", 1: "WARNING", 2: "ERROR", "IGNORE": 0, "WARNING": 1, "ERROR": 2}

# Blueprint and deployment names become Google Cloud label values.
NAME_RE = re.compile(r"^[a-z0-9_-]{1,63}$")
MODULE_ID_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_-]*$")
GROUP_RE = re.compile(r"^[A-Za-z0-9_-]+$")
RESERVED_IDS = ("vars", "var", "module", "local", "data", "deployment")


@dataclass
class Module:
    id: str
    source: str
    group: str
    group_index: int
    path: tuple  # path of the module's mapping in the document
    kind: str = "terraform"
    use: list[str] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)
    outputs: list[Any] = field(default_factory=list)


@dataclass
class Group:
    name: str
    index: int
    path: tuple
    modules: list[Module] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)  # backend, providers


@dataclass
class Blueprint:
    doc: Document
    name: str
    vars: dict[str, Any]
    groups: list[Group]
    validators: list[dict]
    validation_level: int = 1
    extra: dict[str, Any] = field(default_factory=dict)  # kept as is (backends, providers, ...)

    def modules(self):
        for g in self.groups:
            yield from g.modules

    def module(self, mid: str) -> Module | None:
        for m in self.modules():
            if m.id == mid:
                return m
        return None


def _unknown_keys(c: Collector, doc: Document, path: tuple, mapping: dict, allowed, what: str):
    for k in mapping:
        if k not in allowed:
            c.add(f"unknown {what} key '{k}'", doc.key_pos(path + (k,)),
                  did_you_mean(k, allowed) or f"allowed keys: {', '.join(allowed)}")


def _type_name(v) -> str:
    return {dict: "a mapping", list: "a list", str: "a string", int: "a number", float: "a number",
            bool: "a boolean", type(None): "empty"}.get(type(v), type(v).__name__)


def check_structure(doc: Document, c: Collector) -> Blueprint | None:
    """Read the document into a Blueprint, reporting every shape error into `c`."""
    v = doc.value
    if not isinstance(v, dict):
        c.add(f"a blueprint must be a mapping, found {_type_name(v)}", doc.pos(()),
              "start with 'blueprint_name: NAME'")
        return None
    _unknown_keys(c, doc, (), v, TOP_LEVEL_KEYS, "top-level")
    name = _blueprint_name(doc, c, v)
    bvars = _blueprint_vars(doc, c, v)
    level = _validation_level(doc, c, v)
    validators = _validators(doc, c, v)
    for key in ("terraform_backend_defaults",):
        if key in v and v[key] is not None and not isinstance(v[key], dict):
            c.add(f"'{key}' must be a mapping", doc.pos((key,)))
    groups = _groups(doc, c, v)
    extra = {k: v[k] for k in v if k in TOP_LEVEL_KEYS and k not in
             ("blueprint_name", "vars", "deployment_groups", "validators", "validation_level")}
    return Blueprint(doc, name or "", dict(bvars), groups, validators, level, extra)


def _blueprint_name(doc: Document, c: Collector, v: dict) -> str:
    """The blueprint's name (as written when it is not a valid one; "" when missing)."""
    name = v.get("blueprint_name")
    if "blueprint_name" not in v:
        c.add("missing required key 'blueprint_name'", doc.pos(()), "add 'blueprint_name: my-cluster'")
        name = ""
    elif not isinstance(name, str) or not NAME_RE.match(name):
        c.add(f"invalid blueprint_name {name!r}", doc.pos(("blueprint_name",)),
              "use 1-63 lowercase letters, digits, '-' or '_'")
        name = str(name)
    return name


def _blueprint_vars(doc: Document, c: Collector, v: dict) -> dict:
    """The blueprint's vars ({} when missing or not a mapping)."""
    bvars = v.get("vars", {})
    if bvars is None:
        bvars = {}
    if not isinstance(bvars, dict):
        c.add(f"'vars' must be a mapping, found {_type_name(bvars)}", doc.pos(("vars",)))
        bvars = {}
    return bvars


def _validation_level(doc: Document, c: Collector, v: dict) -> int:
    """The blueprint's validation_level as a number (1, WARNING, when missing or unknown)."""
    level = v.get("validation_level", 1)
    if level not in VALIDATION_LEVELS:
        c.add(f"invalid validation_level {level!r}", doc.pos(("validation_level",)),
              "use 0 (IGNORE), 1 (WARNING) or 2 (ERROR)")
        level = 1
    if isinstance(level, str):
        level = VALIDATION_LEVELS[level]
    return level


def _validators(doc: Document, c: Collector, v: dict) -> list:
    """The blueprint's validators, as written, each checked ([] when not a list)."""
    validators = v.get("validators") or []
    if not isinstance(validators, list):
        c.add("'validators' must be a list", doc.pos(("validators",)))
        validators = []
    for i, val in enumerate(validators):
        p = ("validators", i)
        if not isinstance(val, dict):
            c.add("a validator must be a mapping with 'validator' and 'inputs'", doc.pos(p))
            continue
        _unknown_keys(c, doc, p, val, VALIDATOR_KEYS, "validator")
        vname = val.get("validator")
        if vname not in KNOWN_VALIDATORS:
            c.add(f"unknown validator {vname!r}", doc.pos(p + ("validator",)),
                  did_you_mean(str(vname), KNOWN_VALIDATORS) or
                  f"known validators: {', '.join(KNOWN_VALIDATORS)}")
        if "skip" in val and not isinstance(val["skip"], bool):
            c.add("validator 'skip' must be true or false", doc.pos(p + ("skip",)))
        if "inputs" in val and not isinstance(val["inputs"], (dict, type(None))):
            c.add("validator 'inputs' must be a mapping", doc.pos(p + ("inputs",)))
    return validators


def _groups(doc: Document, c: Collector, v: dict) -> list[Group]:
    """The blueprint's deployment groups with their modules; a group or module with errors is
    left out (a group whose name is wrong is kept, named #INDEX)."""
    groups: list[Group] = []
    raw_groups = v.get("deployment_groups")
    if "deployment_groups" not in v:
        c.add("missing required key 'deployment_groups'", doc.pos(()),
              "add 'deployment_groups:' with at least one group of modules")
        raw_groups = []
    elif not isinstance(raw_groups, list) or not raw_groups:
        c.add("'deployment_groups' must be a non-empty list", doc.pos(("deployment_groups",)))
        raw_groups = []

    seen_groups: dict[str, tuple] = {}
    seen_ids: dict[str, tuple] = {}
    for gi, g in enumerate(raw_groups):
        gp = ("deployment_groups", gi)
        if not isinstance(g, dict):
            c.add(f"a deployment group must be a mapping, found {_type_name(g)}", doc.pos(gp))
            continue
        _unknown_keys(c, doc, gp, g, GROUP_KEYS, "deployment group")
        gname = _group_name(doc, c, g, gi, seen_groups)
        group = Group(gname, gi, gp, extra={k: g[k] for k in g if k not in ("group", "modules")})
        groups.append(group)
        mods = g.get("modules")
        if not isinstance(mods, list) or not mods:
            c.add(f"group '{gname}' needs a non-empty 'modules' list",
                  doc.pos(gp + (("modules",) if "modules" in g else ())))
            continue
        _group_modules(doc, c, group, mods, seen_ids)
    return groups


def _group_name(doc: Document, c: Collector, g: dict, gi: int, seen_groups: dict[str, tuple]) -> str:
    """The name of group GI (G), or #GI when it has no valid one. SEEN_GROUPS (name -> path of the
    first group's name) gets it."""
    gp = ("deployment_groups", gi)
    gname = g.get("group")
    if not isinstance(gname, str) or not GROUP_RE.match(gname):
        c.add("deployment group needs a 'group' name of letters, digits, '-' or '_'"
              if "group" not in g else f"invalid group name {gname!r}",
              doc.pos(gp + (("group",) if "group" in g else ())),
              "add 'group: primary'" if "group" not in g else "use letters, digits, '-' or '_'")
        gname = f"#{gi}"
    elif gname in seen_groups:
        first_at = doc.pos(seen_groups[gname])
        c.add(f"duplicate group name '{gname}'" + (f" (first at line {first_at.line})" if first_at else ""),
              doc.pos(gp + ("group",)))
    seen_groups.setdefault(gname, gp + ("group",))
    return gname


def _group_modules(doc: Document, c: Collector, group: Group, mods: list, seen_ids: dict[str, tuple]) -> None:
    """GROUP gets its modules (MODS, as written) that have no errors; SEEN_IDS (module id -> path
    of the first one's id) gets their ids."""
    for mi, m in enumerate(mods):
        mp = group.path + ("modules", mi)
        mod = _check_module(doc, c, m, mp, group.name, group.index, seen_ids)
        if mod:
            first = group.modules[0] if group.modules else None
            if first is not None and first.kind != mod.kind and "kind" in m:
                c.add(f"group '{group.name}' mixes {first.kind} and {mod.kind} modules",
                      doc.pos(mp + ("kind",)),
                      f"put '{mod.id}' in a deployment group of its own kind")
            group.modules.append(mod)


def _check_module(doc, c, m, mp, gname, gi, seen_ids) -> Module | None:
    if not isinstance(m, dict):
        c.add(f"a module must be a mapping with 'id' and 'source', found {_type_name(m)}", doc.pos(mp))
        return None
    _unknown_keys(c, doc, mp, m, MODULE_KEYS, "module")
    ok = True
    mid = m.get("id")
    if "id" not in m:
        c.add("module is missing 'id'", doc.pos(mp), "give every module a unique 'id'")
        ok = False
    elif not isinstance(mid, str) or not MODULE_ID_RE.match(mid):
        c.add(f"invalid module id {mid!r}", doc.pos(mp + ("id",)),
              "start with a letter; use letters, digits, '-' or '_'")
        ok = False
    elif mid in RESERVED_IDS:
        c.add(f"module id '{mid}' is reserved", doc.pos(mp + ("id",)), "choose another id")
        ok = False
    elif mid in seen_ids:
        c.add(f"duplicate module id '{mid}' (first at line {doc.pos(seen_ids[mid]).line})",
              doc.pos(mp + ("id",)), "module ids must be unique across the blueprint")
        ok = False
    else:
        seen_ids[mid] = mp + ("id",)
    src = m.get("source")
    if "source" not in m:
        c.add(f"module '{mid}' is missing 'source'", doc.pos(mp),
              "for example 'source: community/modules/compute/schedmd-slurm-gcp-v6-nodeset'")
        ok = False
    elif not isinstance(src, str) or not src.strip():
        c.add("module 'source' must be a non-empty string", doc.pos(mp + ("source",)))
        ok = False
    kind = m.get("kind", "terraform")
    if kind not in ("terraform", "packer"):
        c.add(f"invalid module kind {kind!r}", doc.pos(mp + ("kind",)),
              did_you_mean(str(kind), ["terraform", "packer"]) or "use 'terraform' or 'packer'")
    use = m.get("use", [])
    if use is None:
        use = []
    if not isinstance(use, list) or not all(isinstance(u, str) for u in use):
        c.add("'use' must be a list of module ids", doc.pos(mp + ("use",)))
        use = []
    settings = m.get("settings", {})
    if settings is None:
        settings = {}
    if not isinstance(settings, dict):
        c.add(f"'settings' must be a mapping, found {_type_name(settings)}", doc.pos(mp + ("settings",)))
        settings = {}
    outputs = m.get("outputs", []) or []
    if not isinstance(outputs, list):
        c.add("'outputs' must be a list", doc.pos(mp + ("outputs",)))
        outputs = []
    for oi, o in enumerate(outputs):
        if not (isinstance(o, str) or (isinstance(o, dict) and isinstance(o.get("name"), str))):
            c.add("an output is a name or a mapping with 'name'", doc.pos(mp + ("outputs", oi)))
    if not ok:
        return None
    assert isinstance(mid, str) and isinstance(src, str)  # ok: both were checked above
    return Module(mid, src, gname, gi, mp, kind if kind in ("terraform", "packer") else "terraform",
                  list(use), dict(settings), list(outputs))
