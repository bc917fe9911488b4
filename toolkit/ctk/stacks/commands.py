"""What the `ctk stack ...` commands do (cli/stack.py only parses their arguments)."""

from __future__ import annotations

import json
from dataclasses import dataclass

from ctk.errors import UserError, did_you_mean
from ctk.progress import Progress

from .catalog import PYTHON_RE, Stack, default_path, load_stacks
from .lock import (
    check_te,
    compile_lock,
    lock_path,
    lock_problems,
    lock_state,
    parse_versions,
    read_lock,
    te_locks,
    write_lock,
)


def rows() -> list[dict]:
    """One row per stack: its accelerator, jax, Python versions and each lock's state."""
    out = []
    for s in load_stacks().values():
        out.append({"name": s.name, "accelerator": s.accelerator, "jax": s.jax, "python": list(s.pythons),
                    "min_driver": s.min_driver,
                    "locks": {py: {"state": lock_state(s, py), "path": str(lock_path(s, py)),
                                   "transformer_engine": {te: lock_state(s, py, te) for te in te_locks(s, py)}}
                              for py in s.pythons}})
    return out


def list_text(as_json: bool) -> str:
    """`ctk stack list`: a table, or JSON."""
    data = rows()
    if as_json:
        return json.dumps({"catalog": str(default_path()), "stacks": data}, indent=2) + "\n"
    lines = [f"{'NAME':<18} {'ACCEL':<7} {'JAX':<10} {'PYTHON':<11} LOCKS"]
    for r in data:
        locks = ", ".join(f"{py} {v['state']}" + "".join(f", {py}+te{te} {st}" for te, st in v["transformer_engine"].items())
                          for py, v in r["locks"].items())
        lines.append(f"{r['name']:<18} {r['accelerator']:<7} {r['jax']:<10} {','.join(r['python']):<11} {locks}")
    return "\n".join(lines) + "\n"


@dataclass
class Locked:
    stack: str
    python: str
    path: str
    changed: bool
    packages: int


def _targets(name: str | None, python: str | None) -> list[tuple[Stack, str]]:
    """(stack, python) pairs to lock; a UserError for a name or Python that is not there."""
    if python is not None and not PYTHON_RE.match(python):
        raise UserError(f"--python {python!r} is not a 3.N version", hint="for example --python 3.13")
    stacks = load_stacks()
    if name is not None:
        if name not in stacks:
            raise UserError(f"no stack named '{name}' in {default_path()}",
                            hint=did_you_mean(name, stacks) or f"known stacks: {', '.join(stacks)}")
        chosen = [stacks[name]]
    else:
        chosen = [s for s in stacks.values() if python is None or s.supports(python)]
        if not chosen:
            raise UserError(f"no stack is for Python {python}",
                            hint="add it to a stack's python list in " + str(default_path()))
    out = []
    for s in chosen:
        if python is not None and not s.supports(python):
            read_lock(s, python)  # raises the UserError that says what to do
        out += [(s, py) for py in s.pythons if python is None or py == python]
    return out


def lock(name: str | None, python: str | None, out_dir: str | None, progress: Progress,
         te: str | None = None) -> list[Locked]:
    """Resolve each chosen stack for each of its Python versions (with Transformer Engine TE,
    for one named CUDA stack) and write its lock (each file atomically, so an interrupted run
    leaves every lock whole, old or new)."""
    if te is not None and name is None:
        raise UserError("--transformer-engine needs the stack to lock with it",
                        hint=f"for example: ctk stack lock jax-cuda12 --transformer-engine {te}")
    targets = _targets(name, python)
    if te is not None:
        check_te(targets[0][0], te)
    done = []
    for stack, py in targets:
        with progress.step(f"lock {stack.name} for Python {py}" + (f" with Transformer Engine {te}" if te else "")):
            text = compile_lock(stack, py, on_line=progress.task, te=te)
            path, changed = write_lock(stack, py, text, out_dir, te)
        done.append(Locked(stack.name, py, str(path), changed, len(parse_versions(text))))
    return done


def check_locks() -> list[str]:
    """Every problem of the shipped locks: missing or out of date with their stacks."""
    problems = []
    for s in load_stacks().values():
        for py in s.pythons:
            for te in [None, *te_locks(s, py)]:
                try:
                    lk = read_lock(s, py, te)
                except UserError as e:
                    problems.append(e.message)
                    continue
                problems += [f"{lk.path}: {p}" for p in lock_problems(s, lk)]
    return problems
