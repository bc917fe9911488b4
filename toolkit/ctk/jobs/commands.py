"""What `ctk job` prints: the logic behind the command line, kept out of ctk.cli."""

from __future__ import annotations

import json

from ..blueprint.errors import UserError
from . import templates


def parse_sets(sets: list[str], nodes: str | None) -> dict[str, str]:
    """--set K=V flags (and --nodes) as a dict of raw strings; typed later by the template."""
    out: dict[str, str] = {}
    for s in sets:
        key, eq, value = s.partition("=")
        if not eq or not key.strip():
            raise UserError(f"--set {s}: expected K=V\n  hint: --set nodes=2")
        out[key.strip()] = value
    if nodes is not None:
        out["nodes"] = nodes
    return out


def render_cli(template: str, sets: list[str], nodes: str | None, deployment: str | None,
               nodeset: str | None, command: list[str]) -> str:
    params = parse_sets(sets, nodes)
    cluster = templates.load_deployment(deployment) if deployment else None
    if nodeset and not deployment:
        raise UserError("--nodeset needs --deployment DIR")
    return templates.render(template, params, command, cluster, nodeset)


def templates_text(as_json: bool) -> str:
    tpls = [templates.load_template(n) for n in templates.list_templates()]
    if as_json:
        return json.dumps([t.to_dict() for t in tpls], indent=2) + "\n"
    out = []
    for t in tpls:
        out.append(f"{t.name}: {t.description}")
        for p in t.params.values():
            default = "required" if p.required else f"default {json.dumps(p.default)}"
            out.append(f"  {p.name} ({p.type}, {default}): {p.help}")
        out.append("")
    return "\n".join(out)
