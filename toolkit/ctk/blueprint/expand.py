"""Expansion: vars evaluated, expressions resolved, `use` wired, global vars applied.

Precedence for a module input: its explicit setting > outputs of used modules (in `use`
order; list inputs collect them all) > a var of the same name > the module's default.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from ..modules import lookup
from ..modules.schema import ModuleKind
from .errors import BlueprintError, Collector, did_you_mean
from .expression import (
    CTK,
    PACKER,
    TERRAFORM,
    VARS,
    Deferred,
    Env,
    ExprError,
    Lazy,
    Ref,
    access,
    evaluate,
    has_lazy,
    parse_string,
    resolve,
    unparse,
)
from .load import Document
from .structure import Blueprint, Module
from .vars import VarSource

INVALID = Deferred("<invalid>")  # stands for a value whose error was already reported


@dataclass
class ExpandedModule:
    module: Module
    schema: ModuleKind | None
    settings: dict[str, Any]
    explicit: set[str] = field(default_factory=set)
    wired: dict[str, list[str]] = field(default_factory=dict)  # input -> used module ids
    from_vars: set[str] = field(default_factory=set)
    refs: dict[str, list[str]] = field(default_factory=dict)  # setting -> referenced module ids
    opaque_use: bool = False  # uses a module whose outputs ctk cannot know
    # (setting, Lazy, ExprError): a function call in a setting ctk read but could not compute
    unresolved: list = field(default_factory=list)

    @property
    def id(self) -> str:
        return self.module.id

    def setting(self, name: str, default=None):
        """The setting's value as set or wired (no schema default), computed as get() does."""
        if name not in self.settings:
            return default
        v = self.settings[name]
        if not has_lazy(v):
            return v
        return resolve(v, lambda lazy, e: self.unresolved.append((name, lazy, e)))

    def modules_feeding(self, setting: str) -> list[str]:
        """Module ids that supply `setting`, through `use` or explicit references."""
        out = list(self.wired.get(setting, []))
        for r in self.refs.get(setting, []):
            if r not in out:
                out.append(r)
        return out

    def get(self, name: str, default=None):
        """The setting's value, else the schema default, else `default`. A function call kept
        as an expression (a Lazy) is computed here where ctk can; one it cannot compute stays
        deferred and is noted in `unresolved` (planning reports it: ctk needed the value)."""
        if name in self.settings:
            return self.setting(name)
        inp = self.schema.input(name) if self.schema else None
        if inp is not None:
            d = inp.default
            return default if d is None else d
        return default


@dataclass
class Expanded:
    blueprint: Blueprint
    vars: dict[str, Any]
    var_sources: dict[str, VarSource]
    modules: list[ExpandedModule]
    staged: dict[str, str] = field(default_factory=dict)  # folder-relative dest -> source path
    warnings: list[BlueprintError] = field(default_factory=list)
    used_vars: set[str] = field(default_factory=set)  # the vars a module's setting took
    sources: dict[str, str] = field(default_factory=dict)  # file -> its text, for messages

    def module(self, mid: str) -> ExpandedModule | None:
        for m in self.modules:
            if m.id == mid:
                return m
        return None

    @property
    def deployment_name(self) -> str:
        return str(self.vars.get("deployment_name") or "")

    def to_blueprint(self) -> dict:
        """The expanded blueprint, still in Cluster Toolkit's format."""
        bp = self.blueprint
        out: dict[str, Any] = {"blueprint_name": bp.name, "vars": plain(self.vars)}
        for k in ("terraform_backend_defaults", "terraform_providers", "toolkit_modules_url",
                  "toolkit_modules_version", "ghpc_version"):
            if k in bp.extra:
                out[k] = bp.extra[k]
        if bp.validators:
            out["validators"] = bp.validators
        out["validation_level"] = bp.validation_level
        groups = []
        for g in bp.groups:
            mods = []
            for m in g.modules:
                em = self.module(m.id)
                d: dict[str, Any] = {"id": m.id, "source": m.source}
                if m.kind != "terraform":
                    d["kind"] = m.kind
                if m.use:
                    d["use"] = list(m.use)
                if em is not None:
                    d["settings"] = plain(em.settings)
                if m.outputs:
                    d["outputs"] = m.outputs
                mods.append(d)
            gd = {"group": g.name, **g.extra, "modules": mods}
            groups.append(gd)
        out["deployment_groups"] = groups
        return out


def setting_pos(exp: Expanded, em: ExpandedModule, name: str, *keys, key: bool = False):
    """Where a module's setting (or a key inside it, KEY: the key itself) was said: the
    setting, else the var it came from, else the module's id."""
    if name in em.explicit:
        doc, path = exp.blueprint.doc, em.module.path + ("settings", name)
    elif name in em.from_vars and name in exp.var_sources:
        src = exp.var_sources[name]
        doc, path = src.doc, src.path
    else:
        return exp.blueprint.doc.pos(em.module.path + ("id",))
    return doc.key_pos(path + keys) if key else doc.pos(path + keys)


def plain(v):
    """Values for YAML/JSON output: Deferred becomes the blueprint text it stands for."""
    if isinstance(v, Deferred):
        return v.text
    if isinstance(v, dict):
        return {k: plain(x) for k, x in v.items()}
    if isinstance(v, list):
        return [plain(x) for x in v]
    return v


def _ref_text(node: Ref) -> str:
    return f"$({unparse(node)})"


class _Evaluator(Env):
    def __init__(self, bp: Blueprint, var_sources: dict[str, VarSource], c: Collector, base_dir: str):
        self.bp = bp
        self.c = c
        self.base_dir = base_dir
        self.var_sources = var_sources
        self.values: dict[str, Any] = {}
        self.stack: list[str] = []
        self.current: Module | None = None
        self.current_refs: list[str] = []
        self.used_vars: set[str] = set()
        self.staged: dict[str, str] = {}
        self.module_ids = [m.id for m in bp.modules()]
        self.warnings: list[BlueprintError] = []
        self.where: tuple | None = None  # (document, path) of the string being evaluated

    @property
    def context(self) -> str:
        """Who evaluates the string: gcluster (vars, a Packer module's settings), Terraform (a
        Terraform module's settings: any Terraform function), or ctk (its own kinds)."""
        m = self.current
        if m is None:
            return VARS
        if m.kind == "packer":
            return PACKER
        return CTK if m.source.startswith("ctk/") else TERRAFORM

    # -- vars ---------------------------------------------------------------------------
    def var_value(self, name: str):
        if name in self.values:
            return self.values[name]
        if name in self.stack:
            loop = self.stack[self.stack.index(name):] + [name]
            raise ExprError("cycle in vars: " + " -> ".join(f"vars.{n}" for n in loop), 0,
                            "a variable cannot depend on itself")
        src = self.var_sources[name]
        self.stack.append(name)
        saved = self.current
        self.current = None
        try:
            val = self.tree(_get(src.doc.value, src.path), src.doc, src.path)
        finally:
            self.current = saved
            self.stack.pop()
        self.values[name] = val
        return val

    # -- Env ------------------------------------------------------------------------------
    def ref(self, node: Ref):
        if node.root == "vars":
            if node.name not in self.var_sources:
                raise ExprError(f"unknown variable 'vars.{node.name}'", node.name_offset,
                                did_you_mean(node.name, self.var_sources) or
                                f"define it under vars, or pass --vars {node.name}=VALUE")
            self.used_vars.add(node.name)
            if node.name in self.stack:
                loop = self.stack[self.stack.index(node.name):] + [node.name]
                raise ExprError("cycle in vars: " + " -> ".join(f"vars.{n}" for n in loop), node.offset,
                                "a variable cannot depend on itself")
            val = self.var_value(node.name)
            if val is INVALID:
                return INVALID
            return access(val, node.path, self, node.offset, f"vars.{node.name}")
        if self.current is None:
            raise ExprError(f"vars cannot refer to module outputs ('{node.root}.{node.name}')",
                            node.offset, "only $(vars.NAME) may be used inside vars")
        target = self.bp.module(node.root)
        if target is None:
            raise ExprError(f"unknown module '{node.root}'", node.offset,
                            did_you_mean(node.root, self.module_ids + ["vars"]) or
                            "references look like $(vars.NAME) or $(MODULE_ID.OUTPUT)")
        if target is self.current:
            raise ExprError(f"module '{target.id}' refers to its own output", node.offset)
        if target.group_index > self.current.group_index:
            raise ExprError(f"module '{target.id}' is in a later group ('{target.group}')",
                            node.offset, "a module may only refer to modules in its own or earlier groups")
        if target.kind == "packer":
            raise ExprError(f"packer module '{target.id}' has no outputs", node.offset)
        schema = lookup(target.source)
        if schema is not None and schema.outputs and node.name not in schema.output_names:
            raise ExprError(f"module '{target.id}' ({target.source}) has no output '{node.name}'",
                            node.name_offset, did_you_mean(node.name, schema.output_names) or
                            f"its outputs: {', '.join(schema.output_names)}")
        self.current_refs.append(target.id)
        return Deferred(_ref_text(node))

    def stage(self, path: str, node) -> str:
        src = os.path.normpath(os.path.join(self.base_dir, path))
        if not os.path.exists(src):
            raise ExprError(f"ghpc_stage: no such file or directory '{path}'", node.offset,
                            f"paths are relative to the blueprint's folder ({self.base_dir})")
        dest = f"staged/{os.path.basename(src.rstrip('/'))}"
        self.staged[dest] = src
        return dest

    def read_file(self, path: str, node) -> str:
        """file(PATH): a staged path (what ghpc_stage gave) reads its source; any other path is
        relative to the blueprint's folder."""
        src = None
        for dest, source in self.staged.items():
            if path == dest or path.startswith(dest + "/"):
                src = source + path[len(dest):]
                break
        src = os.path.normpath(src or os.path.join(self.base_dir, path))
        if not os.path.isfile(src):
            raise ExprError(f"file(): no such file '{path}'", node.offset,
                            f"paths are relative to the blueprint's folder ({self.base_dir}), as "
                            "ghpc_stage's are; looked for " + src)
        try:
            with open(src, "rb") as f:
                return f.read().decode("utf-8")
        except UnicodeDecodeError:
            raise ExprError(f"file(): '{path}' is not UTF-8 text", node.offset,
                            "Terraform's file() reads UTF-8 text only (filebase64() reads any file)") from None
        except OSError as e:
            raise ExprError(f"file(): cannot read '{path}': {e.strerror}", node.offset) from None

    def warn(self, message: str, offset: int, hint: str = "") -> None:
        if self.where is not None:
            doc, path = self.where
            self.warnings.append(BlueprintError(message, doc.pos_in(path, offset), hint))

    # -- trees ----------------------------------------------------------------------------
    def tree(self, value, doc: Document, path: tuple):
        if isinstance(value, dict):
            return {k: self.tree(v, doc, path + (k,)) for k, v in value.items()}
        if isinstance(value, list):
            return [self.tree(v, doc, path + (i,)) for i, v in enumerate(value)]
        if isinstance(value, str):
            saved, self.where = self.where, (doc, path)
            try:
                out = evaluate(parse_string(value), self)
            except ExprError as e:
                self.c.add(e.message, doc.pos_in(path, e.offset), e.hint)
                return INVALID
            finally:
                self.where = saved
            _place(out, doc, path)
            return out
        return value


def _place(v, doc: Document, path: tuple) -> None:
    """Tell each Lazy in a string's value which string it came from (for its errors)."""
    if isinstance(v, Lazy):
        if v.where is None:
            v.where = (doc, path)
    elif isinstance(v, dict):
        for x in v.values():
            _place(x, doc, path)
    elif isinstance(v, list):
        for x in v:
            _place(x, doc, path)


def _get(value, path):
    for p in path:
        value = value[p]
    return value


def collect_vars(bp: Blueprint, deployment: tuple[Document, dict] | None,
                 cli: list[tuple[str, Any, VarSource]]) -> dict[str, VarSource]:
    """Each var's winning source: --vars > deployment file > blueprint."""
    sources: dict[str, VarSource] = {}
    for name in bp.vars:
        sources[name] = VarSource(bp.doc, ("vars", name))
    if deployment is not None:
        ddoc, dvars = deployment
        for name in dvars:
            sources[name] = VarSource(ddoc, ("vars", name))
    for name, _, src in cli:
        sources[name] = src
    return sources


def expand(bp: Blueprint, var_sources: dict[str, VarSource], c: Collector) -> Expanded:
    base_dir = os.path.dirname(os.path.abspath(bp.doc.file))
    ev = _Evaluator(bp, var_sources, c, base_dir)
    _unset_vars(var_sources, ev, c)
    for name in var_sources:
        try:
            ev.var_value(name)
        except ExprError as e:  # a cycle closing on this var itself
            src = var_sources[name]
            c.add(e.message, src.doc.pos(src.path), e.hint)
            ev.values[name] = INVALID

    _default_labels(bp, ev)

    modules: list[ExpandedModule] = []
    for mod in bp.modules():
        schema = lookup(mod.source)
        em = ExpandedModule(mod, schema, {}, explicit=set(mod.settings))
        ev.current = mod
        for k, v in mod.settings.items():
            ev.current_refs = []
            em.settings[k] = ev.tree(v, bp.doc, mod.path + ("settings", k))
            if ev.current_refs:
                em.refs[k] = list(dict.fromkeys(ev.current_refs))
        ev.current = None
        _wire_use(bp, em, c)
        if schema is not None and schema.inject_module_id and schema.inject_module_id not in em.settings:
            em.settings[schema.inject_module_id] = mod.id
        if schema is not None and schema.input("labels") is not None:
            _module_labels(em, ev.values.get("labels"))
        if schema is not None:
            for inp in schema.inputs:
                if inp.name not in em.settings and inp.name in ev.values:
                    em.settings[inp.name] = ev.values[inp.name]
                    em.from_vars.add(inp.name)
                    ev.used_vars.add(inp.name)
        modules.append(em)

    return Expanded(bp, dict(ev.values), var_sources, modules, ev.staged, warnings=list(ev.warnings),
                    used_vars=ev.used_vars)


def _unset_vars(var_sources: dict[str, VarSource], ev: _Evaluator, c: Collector) -> None:
    """A var left empty (null) wherever it won, as a deployment file's `region: # supply ...`:
    an error at that key, whether or not a module uses it. gcluster refuses every null var
    before it expands the modules (pkg/config/validate.go, validateVars)."""
    for name, src in var_sources.items():
        if _get(src.doc.value, src.path) is not None:
            continue
        where = "--vars" if src.doc.file.startswith("--vars") else "there"
        c.add(f"deployment variable '{name}' is not set", src.doc.key_pos(src.path),
              f"give it a value: --vars {name}=VALUE" if where == "--vars" else
              f"give it a value there, or pass --vars {name}=VALUE")
        ev.values[name] = INVALID  # reported: no error further on for what it feeds


def _default_labels(bp: Blueprint, ev: _Evaluator) -> None:
    """vars.labels gains ghpc_blueprint and ghpc_deployment, as Cluster Toolkit adds them."""
    labels = ev.values.get("labels", {})
    if not isinstance(labels, dict):
        return  # reported by validate
    dn = ev.values.get("deployment_name")
    merged = {"ghpc_blueprint": bp.name}
    if isinstance(dn, str):
        merged["ghpc_deployment"] = dn
    merged.update(labels)
    ev.values["labels"] = merged


def _module_labels(em: ExpandedModule, global_labels) -> None:
    """A module's labels: the deployment's, its role (the source's folder), then its own."""
    if not isinstance(global_labels, dict):
        return
    own = em.settings.get("labels", {})
    if not isinstance(own, dict):
        return
    role = os.path.basename(os.path.dirname(em.module.source.rstrip("/"))) or "other"
    em.settings["labels"] = {**global_labels, "ghpc_role": role if role not in ("..", ".") else "other", **own}


def _wire_use(bp: Blueprint, em: ExpandedModule, c: Collector) -> None:
    mod = em.module
    seen: set[str] = set()
    for i, uid in enumerate(mod.use):
        upos = bp.doc.pos(mod.path + ("use", i))
        if uid in seen:
            c.add(f"module '{uid}' is listed twice in 'use'", upos)
            continue
        seen.add(uid)
        target = bp.module(uid)
        if target is None:
            c.add(f"module '{mod.id}' uses unknown module '{uid}'", upos,
                  did_you_mean(uid, [m.id for m in bp.modules()]))
            continue
        if target is mod:
            c.add(f"module '{mod.id}' cannot use itself", upos)
            continue
        if target.group_index > mod.group_index:
            c.add(f"module '{mod.id}' uses '{uid}' from a later group ('{target.group}')", upos,
                  "a module may only use modules in its own or earlier groups")
            continue
        if target.kind == "packer":
            c.add(f"module '{mod.id}' cannot use packer module '{uid}'", upos,
                  "packer modules have no outputs")
            continue
        tschema = lookup(target.source)
        if tschema is None or em.schema is None:
            em.opaque_use = True
            continue
        for out in tschema.outputs:
            inp = em.schema.input(out.name)
            if inp is None:
                continue
            ref = Deferred(f"$({uid}.{out.name})")
            if inp.is_list:
                cur = em.settings.get(out.name, [])
                if not isinstance(cur, list):
                    cur = [cur]
                em.settings[out.name] = cur + [ref]
                em.wired.setdefault(out.name, []).append(uid)
            elif out.name not in em.explicit and out.name not in em.wired:
                em.settings[out.name] = ref
                em.wired[out.name] = [uid]
