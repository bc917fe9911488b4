"""Deployment variables from the command line (`--vars`) and a deployment file (`-d`).

Precedence: --vars > -d deployment.yaml > the blueprint's own vars.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import yaml

from .errors import (
    BlueprintError,
    BlueprintErrors,
    Collector,
    Pos,
    UserError,
    did_you_mean,
)
from .load import Document, load_file

VAR_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")
DEPLOYMENT_FILE_KEYS = ("vars", "terraform_backend_defaults", "validators", "validation_level")


@dataclass
class VarSource:
    """Where one var's value came from: its document and its path there."""

    doc: Document
    path: tuple


def _split_top_level(arg: str) -> list[tuple[int, str]]:
    """Split on commas outside brackets and quotes: 'a=[1,2],b=x' -> ['a=[1,2]', 'b=x']."""
    parts, depth, quote, start = [], 0, None, 0
    for i, ch in enumerate(arg):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "\"'":
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append((start, arg[start:i]))
            start = i + 1
    parts.append((start, arg[start:]))
    return [(s, p) for s, p in parts if p.strip()]


def parse_cli_vars(args: list[str]) -> list[tuple[str, object, VarSource]]:
    """Parse repeatable `--vars k=v[,k2=v2]` flags; values are read as YAML (lists, maps)."""
    out: list[tuple[str, object, VarSource]] = []
    errors = []
    for n, arg in enumerate(args):
        fname = "--vars" if n == 0 else f"--vars#{n + 1}"
        values: dict[str, object] = {}
        doc = Document(fname, arg, values)
        for start, piece in _split_top_level(arg):
            if "=" not in piece:
                errors.append(BlueprintError(
                    f"--vars {piece!r}: expected NAME=VALUE", Pos(fname, 1, start + 1),
                    "for example --vars project_id=my-project,zone=us-central1-a"))
                continue
            name, raw = piece.split("=", 1)
            name = name.strip()
            if not VAR_NAME_RE.match(name):
                errors.append(BlueprintError(f"--vars: invalid variable name {name!r}",
                                             Pos(fname, 1, start + 1),
                                             "names use letters, digits and '_'"))
                continue
            try:
                value = yaml.safe_load(raw) if raw.strip() else ""
            except yaml.YAMLError:
                value = raw
            if isinstance(value, (dict, list, str, int, float, bool)) or value is None:
                pass
            else:  # dates and the like stay text
                value = raw
            values[name] = value
            doc.positions[(name,)] = Pos(fname, 1, start + len(name) + 2)
            doc.key_positions[(name,)] = Pos(fname, 1, start + 1)
            out.append((name, value, VarSource(doc, (name,))))
    if errors:
        raise BlueprintErrors(errors, {("--vars" if n == 0 else f"--vars#{n + 1}"): a
                                       for n, a in enumerate(args)})
    return out


def load_deployment_file(path: str, c: Collector) -> tuple[Document, dict]:
    """Load `-d deployment.yaml`: its vars (nulls allowed) and backend defaults."""
    doc = load_file(path, strict=False)
    c.errors.extend(doc.errors)
    v = doc.value
    if not isinstance(v, dict):
        c.add("a deployment file must be a mapping with 'vars'", doc.pos(()))
        return doc, {}
    for k in v:
        if k not in DEPLOYMENT_FILE_KEYS:
            c.add(f"unknown deployment file key '{k}'", doc.key_pos((k,)),
                  did_you_mean(k, DEPLOYMENT_FILE_KEYS) or f"allowed keys: {', '.join(DEPLOYMENT_FILE_KEYS)}")
    dvars = v.get("vars") or {}
    if not isinstance(dvars, dict):
        c.add("'vars' in a deployment file must be a mapping", doc.pos(("vars",)))
        dvars = {}
    return doc, dvars


def check_var_names(names_with_pos, c: Collector):
    for name, pos in names_with_pos:
        if not isinstance(name, str) or not VAR_NAME_RE.match(name):
            c.add(f"invalid variable name {name!r}", pos, "names use letters, digits and '_'")


__all__ = ["parse_cli_vars", "load_deployment_file", "VarSource", "UserError"]
