"""What `ctk job` prints: the logic behind the command line, kept out of ctk.cli."""

from __future__ import annotations

import json
import os
import time

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


# ---- submit and follow (ctk job submit/status/logs/cancel/list) ----------------------------

def _deployment(deployment: str | None) -> str:
    if not deployment:
        raise UserError("--deployment DIR is required\n  hint: ctk job submit jax-smoke --deployment DIR")
    if not os.path.isdir(deployment):
        raise UserError(f"--deployment {deployment}: no such folder\n"
                        "  hint: deploy a cluster with 'ctk deploy BLUEPRINT -o DIR'")
    return deployment


def submit_cli(template: str, sets: list[str], nodes: str | None, deployment: str | None,
               nodeset: str | None, command: list[str]):
    from .api import submit

    return submit(template, parse_sets(sets, nodes), _deployment(deployment), command, nodeset)


def load_job(job_id: str, deployment: str | None):
    from .api import Job

    return Job.load(job_id, _deployment(deployment))


def status_rows(ids: list[str], deployment: str | None) -> list[dict]:
    """One row per job asked about (every registered job when IDS is empty), one squeue call."""
    from . import registry, scheduler

    d = _deployment(deployment)
    recs = registry.load(d)
    if ids:
        by_id = {str(r["id"]): r for r in recs}
        for j in ids:
            if j not in by_id:
                registry.get(d, j)  # raises the UserError with its hint
        recs = [by_id[j] for j in ids]
    st = scheduler.states(d, [str(r["id"]) for r in recs])
    return [{"id": str(r["id"]), "state": st[str(r["id"])], "template": r.get("template"),
             "submitted": r.get("submitted"), "script": r.get("script"), "stdout": r.get("stdout")}
            for r in recs]


def status_text(rows: list[dict], as_json: bool) -> str:
    if as_json:
        return json.dumps(rows, indent=2) + "\n"
    return _table(rows, ("id", "state", "template"))


def list_text(deployment: str | None, as_json: bool) -> str:
    from . import registry

    recs = registry.load(_deployment(deployment))
    if as_json:
        return json.dumps(recs, indent=2) + "\n"
    rows = [{"id": str(r["id"]), "template": r.get("template", ""),
             "submitted": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r.get("submitted", 0))),
             "command": " ".join(r.get("command") or [])} for r in recs]
    return _table(rows, ("id", "template", "submitted", "command"))


def _table(rows: list[dict], cols: tuple[str, ...]) -> str:
    if not rows:
        return "(no jobs)\n"
    widths = {c: max(len(c), *(len(str(r.get(c) or "")) for r in rows)) for c in cols}
    lines = ["  ".join(c.upper().ljust(widths[c]) for c in cols).rstrip()]
    for r in rows:
        lines.append("  ".join(str(r.get(c) or "").ljust(widths[c]) for c in cols).rstrip())
    return "\n".join(lines) + "\n"


def follow(job, out, poll: float = 0.2, poll_max: float = 2.0, print_logs: bool = True) -> str:
    """Write the job's stdout to OUT as it grows until the job ends; the final state."""
    from . import scheduler

    pos = 0
    delay = poll
    while True:
        st = job.state
        if print_logs:
            text = job.logs()
            if len(text) > pos:
                out.write(text[pos:])
                out.flush()
                pos = len(text)
                delay = poll
        if st in scheduler.FINAL_STATES:
            break
        time.sleep(delay)
        delay = min(delay * 2, poll_max)
    return st


def final_exit_code(job, state: str) -> int:
    """The exit code `ctk job submit --wait` ends with: the job's own (ExitCode), else 0 for
    COMPLETED and 1 for any other end."""
    code = job.exit_code()
    if code is None or (code == 0 and state != "COMPLETED"):
        return 0 if state == "COMPLETED" else 1
    return code
