"""Checks on the expanded blueprint: module settings against their kinds' schemas, required
inputs, names, and Cluster Toolkit's offline validators."""

from __future__ import annotations

import difflib
import os

from ..modules import ALL_KINDS, ct_checks, is_remote
from .errors import BlueprintError, Collector, did_you_mean
from .expand import INVALID, Expanded, ExpandedModule, setting_pos
from .expression import Deferred, is_deferred, resolve
from .structure import NAME_RE

# Vars every deployment has a use for, even when no module names them.
_ALWAYS_USED = {"deployment_name", "project_id", "region", "zone", "labels"}

_V6 = "community/modules/{}/schedmd-slurm-gcp-v6-{}"

# Embedded sources Cluster Toolkit removed, and what replaces each (None: nothing does).
# From its history: the slurm-gcp v5 modules went in v1.45.0 (commit 38570da, "Remove Slurm-gcp
# v5 modules"; v1.44.2 is the last release with them), the v4 ones (SchedMD-slurm-on-gcp-*) in
# v1.28 (commit 511e80c); docs/hybrid-slurm-cluster says slurm-gcp v6 has no hybrid module.
REMOVED_SOURCES: dict[str, tuple[str, str | None]] = {
    "community/modules/compute/schedmd-slurm-gcp-v5-node-group": ("v1.44.2", _V6.format("compute", "nodeset")),
    "community/modules/compute/schedmd-slurm-gcp-v5-partition": ("v1.44.2", _V6.format("compute", "partition")),
    "community/modules/compute/schedmd-slurm-gcp-v5-partition-dynamic":
        ("v1.44.2", _V6.format("compute", "nodeset-dynamic")),
    "community/modules/scheduler/schedmd-slurm-gcp-v5-controller": ("v1.44.2", _V6.format("scheduler", "controller")),
    "community/modules/scheduler/schedmd-slurm-gcp-v5-login": ("v1.44.2", _V6.format("scheduler", "login")),
    "community/modules/scheduler/schedmd-slurm-gcp-v5-hybrid": ("v1.44.2", None),
    "community/modules/compute/SchedMD-slurm-on-gcp-partition":
        ("v1.27.0", _V6.format("compute", "nodeset") + " with " + _V6.format("compute", "partition")),
    "community/modules/scheduler/SchedMD-slurm-on-gcp-controller": ("v1.27.0", _V6.format("scheduler", "controller")),
    "community/modules/scheduler/SchedMD-slurm-on-gcp-login-node": ("v1.27.0", _V6.format("scheduler", "login")),
}

# Embedded sources Cluster Toolkit moved: gcluster refuses the old path, naming the new one
# (pkg/config/config.go, movedModules and checkMovedModule; it trims '.' and '/' from both ends).
MOVED_SOURCES: dict[str, str] = {
    "community/modules/scheduler/cloud-batch-job": "modules/scheduler/batch-job-template",
    "community/modules/scheduler/cloud-batch-login-node": "modules/scheduler/batch-login-node",
    "community/modules/scheduler/htcondor-configure": "community/modules/scheduler/htcondor-setup",
    "community/modules/scripts/spack-install": "community/modules/scripts/spack-setup",
    "community/modules/file-system/cloud-storage-bucket": "modules/file-system/cloud-storage-bucket",
    "community/modules/project/service-account": "modules/project/service-account",
    "community/modules/network/private-service-access": "modules/network/private-service-access",
}


def _gone_source(doc, mod, c: Collector) -> bool:
    """A source Cluster Toolkit moved or removed: an error at `source:`; True when it is one."""
    pos = doc.pos(mod.path + ("source",))
    moved = MOVED_SOURCES.get(mod.source.strip().strip("./"))
    if moved:
        c.add(f"Cluster Toolkit moved module '{mod.source}' to '{moved}'", pos, f"use 'source: {moved}'")
        return True
    removed = REMOVED_SOURCES.get(mod.source.strip())
    if removed is None:
        return False
    last, replacement = removed
    pinned = f"github.com/GoogleCloudPlatform/cluster-toolkit//{mod.source.strip()}?ref={last}"
    c.add(f"Cluster Toolkit removed module '{mod.source}' (its last release with it is {last})", pos,
          f"use '{replacement}' instead; its settings differ (see its README)" if replacement else
          f"Cluster Toolkit has no replacement for it (slurm-gcp v6 has no hybrid module); to keep it, "
          f"pin the old release: 'source: {pinned}'")
    return True


def _type_ok(tstr: str, v) -> bool:
    if v is None or is_deferred(v):
        return True
    t = tstr.split("(")[0].strip()
    if t == "string":
        return isinstance(v, (str, int, float)) and not isinstance(v, bool)
    if t == "number":
        return isinstance(v, (int, float)) and not isinstance(v, bool) or (
            isinstance(v, str) and _is_number(v))
    if t == "bool":
        return isinstance(v, bool)
    if t in ("list", "set", "tuple"):
        return isinstance(v, list)
    if t in ("map", "object"):
        return isinstance(v, dict)
    return True


def _is_number(s: str) -> bool:
    try:
        float(s)
        return True
    except ValueError:
        return False


def validate(exp: Expanded, c: Collector) -> None:
    bp = exp.blueprint
    doc = bp.doc

    # deployment_name: required, a label value.
    src = exp.var_sources.get("deployment_name")
    dn = exp.vars.get("deployment_name")
    vars_ok = isinstance(doc.value.get("vars", {}), (dict, type(None))) if isinstance(doc.value, dict) else False
    if src is None and vars_ok:
        c.add("deployment_name is not set",
              doc.pos(("vars",)) if isinstance(doc.value, dict) and "vars" in doc.value else doc.pos(()),
              "add it under vars, or pass --vars deployment_name=NAME")
    elif src is not None and dn is not INVALID and (not isinstance(dn, str) or not NAME_RE.match(dn)):
        c.add("deployment_name is empty" if dn in (None, "") else f"invalid deployment_name {dn!r}",
              src.doc.pos(src.path),
              "pass --vars deployment_name=NAME" if dn in (None, "") else
              "use 1-63 lowercase letters, digits, '-' or '_'")
    labels = exp.vars.get("labels")
    if labels is not None and not isinstance(labels, (dict, Deferred)):
        s = exp.var_sources["labels"]
        c.add("vars.labels must be a mapping", s.doc.pos(s.path))

    for em in exp.modules:
        mod = em.module
        if _gone_source(doc, mod, c):
            continue
        if mod.source.startswith(("./", "../", "/")) and not is_remote(mod.source):
            local = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(doc.file)), mod.source))
            if not os.path.isdir(local):
                c.add(f"local module source '{mod.source}' does not exist", doc.pos(mod.path + ("source",)),
                      f"looked for {local}")
        schema = em.schema
        if schema is None:
            _check_embedded_source(doc, mod, c)
            continue
        if schema.kind != mod.kind:
            c.add(f"module '{mod.id}' ({mod.source}) is a {schema.kind} module, not {mod.kind}",
                  doc.pos(mod.path + ("id",)), f"set 'kind: {schema.kind}'")
        for k in mod.settings:
            p = mod.path + ("settings", k)
            inp = schema.input(k)
            if inp is None:
                if not schema.open_inputs:
                    c.add(f"module '{mod.id}' ({mod.source}) has no setting '{k}'", doc.key_pos(p),
                          did_you_mean(k, schema.input_names) or _settings_hint(schema.input_names))
                continue
            v = em.settings.get(k)
            if v is not INVALID and not _type_ok(inp.type, v):
                c.add(f"setting '{k}' of module '{mod.id}' must be {inp.type}, found {type(v).__name__} {v!r}",
                      doc.pos(p))
        for inp in schema.inputs:
            if inp.required and inp.name not in em.settings and not em.opaque_use:
                c.add(f"module '{mod.id}' ({mod.source}) needs setting '{inp.name}'",
                      doc.pos(mod.path + ("id",)),
                      "set it under settings, or 'use' a module that provides it"
                      + (f" ({inp.doc})" if inp.doc else ""))
        if schema.outputs:
            for oi, o in enumerate(mod.outputs):
                name = o if isinstance(o, str) else o.get("name")
                if isinstance(name, str) and name not in schema.output_names:
                    c.add(f"module '{mod.id}' has no output '{name}'", doc.pos(mod.path + ("outputs", oi)),
                          did_you_mean(name, schema.output_names))

    _ct_checks(exp, c)
    _validators(exp, c)


def _known(v):
    """V with each value known only at deploy time (a module output, an uncomputed call) as UNKNOWN."""
    if isinstance(v, Deferred):
        return ct_checks.UNKNOWN
    if isinstance(v, dict):
        return {k: _known(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_known(x) for x in v]
    return v


def _settings_hint(names: list[str], most: int = 16) -> str:
    """A module's settings for a hint: all of them when few, else the first MOST and a count."""
    if len(names) <= most:
        return f"its settings: {', '.join(names)}"
    return f"its settings include {', '.join(names[:most])} and {len(names) - most} more"


def _ct_checks(exp: Expanded, c: Collector) -> None:
    """The validation blocks and preconditions of Cluster Toolkit's Slurm modules (the table in
    ctk.modules.ct_checks), each at the setting that breaks it."""
    views: dict[str, ct_checks.Values] = {}

    def view(em: ExpandedModule) -> ct_checks.Values:
        if em.id not in views:
            def fed(name):
                return [view(m) for m in map(exp.module, em.modules_feeding(name)) if m is not None]
            # resolve without a callback to note failures: a call ctk cannot compute stays deferred
            # here, and planning reports it only where ctk itself needs the value.
            settings = {k: _known(resolve(x, lambda *_: None)) for k, x in em.settings.items()}
            defaults = {i.name: i.default for i in em.schema.inputs} if em.schema else {}
            views[em.id] = ct_checks.Values(em.id, settings, defaults, fed)
        return views[em.id]

    def said_first(em: ExpandedModule, at: tuple[str, ...]) -> tuple:
        paths = [tuple(a.split(".")) for a in at]
        return next((p for p in paths if p[0] in em.explicit or p[0] in em.from_vars), paths[0])

    for em in exp.modules:
        if em.schema is None:
            continue
        for check in ct_checks.for_source(em.schema.source):
            v = view(em)
            try:
                found = check.broken(v)
            except ct_checks.Unknown:
                continue  # Terraform's to decide
            if not found:
                continue
            if not isinstance(found, ct_checks.Found):
                found = ct_checks.Found()
            target = exp.module(found.of.module_id) if found.of else em
            assert target is not None  # FOUND.of is the view of one of exp's modules
            path = found.at or said_first(target, check.at or (check.block,))
            c.add(f"{ct_checks.WHAT[em.schema.source]} '{em.id}': {check.message.format(v=v, **found.info)}",
                  setting_pos(exp, target, *path, key=found.key), check.hint.format(v=v, **found.info))


def _check_embedded_source(doc, mod, c: Collector) -> None:
    """Cluster Toolkit fails on an embedded source that does not exist. ctk does not carry
    every embedded module, so it only flags a source that is a near miss of one it knows. A
    ctk/ source is ctk's own: one it does not know is an error, near miss or not."""
    if mod.source.startswith("ctk/"):
        ours = sorted(k for k in ALL_KINDS if k.startswith("ctk/"))
        c.add(f"unknown module source '{mod.source}'", doc.pos(mod.path + ("source",)),
              did_you_mean(mod.source, ours) or "ctk's kinds: " + ", ".join(ours))
        return
    if not mod.source.startswith(("modules/", "community/modules/")):
        return
    close = difflib.get_close_matches(mod.source, list(ALL_KINDS), n=1, cutoff=0.9)
    if close and close[0] != mod.source:
        c.add(f"unknown module source '{mod.source}'", doc.pos(mod.path + ("source",)),
              f"did you mean '{close[0]}'?")


def _validators(exp: Expanded, c: Collector) -> None:
    """Cluster Toolkit's validators that need no cloud access, at the blueprint's level."""
    bp = exp.blueprint
    level = bp.validation_level
    if level == 0:
        return
    if bp.validators:
        wanted = {v.get("validator") for v in bp.validators if isinstance(v, dict) and not v.get("skip")}
    else:
        wanted = {"test_module_not_used", "test_deployment_variable_not_used"}
    found: list[BlueprintError] = []
    if "test_deployment_variable_not_used" in wanted:
        used: set[str] = exp.used_vars
        for name, src in exp.var_sources.items():
            if name not in used and name not in _ALWAYS_USED and exp.vars.get(name) is not INVALID:
                found.append(BlueprintError(f"var '{name}' is not used by any module",
                                            src.doc.key_pos(src.path),
                                            "remove it, or skip validator test_deployment_variable_not_used"))
    if "test_module_not_used" in wanted:
        for em in exp.modules:
            for i, uid in enumerate(em.module.use):
                target = exp.module(uid)
                if (target and target.schema and em.schema and target.schema.outputs
                        and not em.schema.open_inputs
                        and not any(uid in ids for ids in em.wired.values())):
                    found.append(BlueprintError(
                        f"module '{em.id}' uses '{uid}' but takes none of its outputs",
                        bp.doc.pos(em.module.path + ("use", i)),
                        "remove it from 'use', or skip validator test_module_not_used"))
    if level >= 2:
        c.errors.extend(found)
    else:
        exp.warnings.extend(found)
