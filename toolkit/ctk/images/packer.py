"""Drives the `packer` CLI (1.6+, HCL2) with `-machine-readable` output.

The PyPI wrappers for Packer are unmaintained, so ctk builds the command itself, streams the
machine-readable records into a progress display, and turns a failure into one error naming
the Ansible role, the failing task and its output.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..ansible_out import recap_line
from ..errors import Failure
from ..runner import CommandError, run

_TASK = re.compile(r"TASK \[(?:(?P<role>[^:\]]+) : )?(?P<task>[^\]]+)\]")
_FAIL = re.compile(r"^(fatal|failed): \[[^\]]+\]")


class PackerError(Failure):
    """A Packer build failed; names the role and task where Ansible stopped, if it did."""

    def __init__(self, message: str, role: str = "", task: str = "", output: str = ""):
        self.role, self.task, self.output = role, task, output
        super().__init__(message)


@dataclass
class BuildLog:
    """What a `packer build` did, read from its machine-readable records."""

    tasks: list[tuple[str, str]] = field(default_factory=list)  # (role, task) in order
    failed: tuple[str, str] | None = None
    failure_lines: list[str] = field(default_factory=list)
    changed: int | None = None
    ok: int | None = None
    messages: list[str] = field(default_factory=list)
    # When (time.monotonic()) packer started, Ansible began (packer had connected), each task
    # in `tasks` started, and packer ended: where a layer's time goes (profile()).
    started: float = 0.0
    provisioning: float | None = None
    task_starts: list[float] = field(default_factory=list)
    ended: float | None = None

    def feed(self, ui_text: str, now: float | None = None) -> str | None:
        """Take one UI message; return a task description when a new task starts."""
        now = time.monotonic() if now is None else now
        text = re.sub(r"^\s*[\w.-]+: ", "", ui_text)  # drop the "null.build_node: " prefix
        self.messages.append(text)
        if self.provisioning is None and text.startswith("Provisioning with Ansible"):
            self.provisioning = now
        m = _TASK.search(text)
        if m:
            self.tasks.append(((m.group("role") or "").strip(), m.group("task").strip()))
            self.task_starts.append(now)
            return f"{m.group('role') + ': ' if m.group('role') else ''}{m.group('task')}"
        if _FAIL.match(text.strip()):
            self.failed = self.tasks[-1] if self.tasks else ("", "")
            self.failure_lines.append(text.strip())
        recap = recap_line(text)
        if recap:
            self.ok, self.changed = recap[1]["ok"], recap[1]["changed"]
        return None

    def span(self, name: str) -> float | None:
        """Seconds the task NAME ("role: task") took, the first time it ran; None if it did not."""
        end = self.ended if self.ended is not None else time.monotonic()
        for (role, task), a, b in zip(self.tasks, self.task_starts, self.task_starts[1:] + [end]):
            if f"{role + ': ' if role else ''}{task}" == name:
                return b - a
        return None

    def profile(self, slowest: int = 6) -> dict:
        """Seconds: packer's start until it reached the node and began Ansible, Ansible's start
        until its first task, the tasks, and the slowest tasks by name ("role: task")."""
        end = self.ended if self.ended is not None else time.monotonic()
        prov = self.provisioning if self.provisioning is not None else (
            self.task_starts[0] if self.task_starts else end)
        first = self.task_starts[0] if self.task_starts else end
        spans = [(b - a, f"{role + ': ' if role else ''}{task}")
                 for (role, task), a, b in zip(self.tasks, self.task_starts, self.task_starts[1:] + [end])]
        top = sorted(spans, key=lambda x: -x[0])[:slowest]
        return {"packer_start": round(prov - self.started, 2), "ansible_start": round(first - prov, 2),
                "tasks": round(end - first, 2), "task_count": len(self.tasks),
                "slowest_tasks": [[name, round(dt, 2)] for dt, name in top]}


def parse_record(line: str) -> tuple[str, list[str]] | None:
    """One -machine-readable line -> (type, data fields), unescaped."""
    parts = line.split(",")
    if len(parts) < 3 or not parts[0].isdigit():
        return None
    data = [p.replace("%!(PACKER_COMMA)", ",").replace("\\n", "\n").replace("\\r", "") for p in parts[3:]]
    return parts[2], data


def packer_env(extra_path: str | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["CHECKPOINT_DISABLE"] = "1"  # no network: never phone home
    env.setdefault("PACKER_NO_COLOR", "1")
    if extra_path:
        env["PATH"] = extra_path + os.pathsep + env.get("PATH", "")
    return env


def build(template: str, variables: dict, workdir: str, *, on_task: Callable[[str], None] | None = None,
          env: dict[str, str] | None = None, log_path: str | None = None) -> BuildLog:
    """`packer build` of one template with a variables file; returns what Ansible did."""
    os.makedirs(workdir, exist_ok=True)
    var_file = os.path.join(workdir, "variables.pkrvars.json")
    with open(var_file, "w") as f:
        json.dump(variables, f, indent=2)
    log = BuildLog(started=time.monotonic())

    def on_line(line: str) -> None:
        rec = parse_record(line)
        if rec is None:
            return
        kind, data = rec
        if kind == "ui" and len(data) >= 2:
            for text in data[1].splitlines():
                started = log.feed(text)
                if started and on_task:
                    on_task(started)

    argv = ["packer", "build", "-machine-readable", "-color=false", f"-var-file={var_file}", template]
    try:
        run(argv, env=env or packer_env(), cwd=workdir, on_line=on_line, log_path=log_path, tail_lines=200)
    except CommandError as e:
        role, task = log.failed or (log.tasks[-1] if log.tasks else ("", ""))
        detail = "\n".join(log.failure_lines) or "\n".join(log.messages[-25:]) or e.tail
        where = f"role '{role}', task '{task}'" if task else "before any Ansible task ran"
        raise PackerError(f"packer build failed in {where}:\n{detail}", role, task, detail) from None
    log.ended = time.monotonic()
    return log
