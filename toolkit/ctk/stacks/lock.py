"""Lock files: a stack resolved, per Python version, into the exact versions and sha256 hashes
of its whole closure.

A stack pins the packages a JAX venv asks for; what they pull in (numpy, scipy, ml_dtypes, ...)
would float without a lock. `compile_lock` resolves a stack with uv (`uv pip compile
--generate-hashes` from PyPI's metadata, for the target Python and platform, whatever this
machine's are) into the requirements format pip installs with `--require-hashes --no-deps`. Locks live beside
the catalog, `locks/STACK/pyX.Y.txt`, and ship with ctk as package data.
"""

from __future__ import annotations

import os
import re
import tempfile
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ctk import atomic
from ctk.errors import Failure, UserError
from ctk.model import ImageSpec, base_python
from ctk.runner import CommandError, run

from . import te as te_
from .catalog import Stack, normalize

# The platform every lock is resolved for: x86_64 Linux with glibc >= 2.31. libtpu ships only
# manylinux_2_31 wheels (0.0.50.1 does), and every base with a Python jax supports has a newer
# glibc (Debian 12: 2.36, Ubuntu 24.04: 2.39, Debian 13: 2.41).
LOCK_PLATFORM = "x86_64-manylinux_2_31"
_GLIBC_MINOR = int(LOCK_PLATFORM.rsplit("_", 1)[1])

_REQ_RE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)")
_HEADER_RE = re.compile(r"^# (stack|python|platform|exclude-newer|transformer-engine): (\S+)$")
# A distribution built from source at image build time, with its sdist's sha256 (pip's syntax).
_SOURCE_RE = re.compile(r"^# source: (\S+==\S+ --hash=sha256:[0-9a-f]{64})$")


@dataclass(frozen=True)
class Lock:
    """One lock file as read: its stack, Python version, where it is and what it says."""

    stack: str
    python: str
    path: Path
    text: str
    te: str | None = None  # the Transformer Engine release locked with the stack, if any

    @property
    def versions(self) -> dict[str, str]:
        return parse_versions(self.text)

    @property
    def header(self) -> dict[str, str]:
        return parse_header(self.text)

    @property
    def sources(self) -> list[str]:
        """Requirements built from source at image build time (`NAME==V --hash=sha256:H`)."""
        out = []
        for line in self.text.splitlines():
            if not line.startswith("#"):
                break
            m = _SOURCE_RE.match(line)
            if m:
                out.append(m.group(1))
        return out


def parse_versions(text: str) -> dict[str, str]:
    """Normalized distribution name -> exact version, for every requirement in a lock."""
    out = {}
    for line in text.splitlines():
        m = _REQ_RE.match(line)
        if m:
            out[normalize(m.group(1))] = m.group(2)
    return out


def parse_header(text: str) -> dict[str, str]:
    """The `# key: value` lines ctk writes at the top of a lock."""
    out = {}
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        m = _HEADER_RE.match(line)
        if m:
            out[m.group(1)] = m.group(2)
    return out


def lock_path(stack: Stack, python: str, out_dir: str | Path | None = None, te: str | None = None) -> Path:
    """Where a stack's lock for one Python version lives (under out_dir/STACK/ when given);
    with Transformer Engine TE, pyX.Y-teTE.txt."""
    d = Path(out_dir) / stack.name if out_dir is not None else stack.lock_dir()
    return d / (f"py{python}-te{te}.txt" if te else f"py{python}.txt")


def lock_command(stack: Stack, python: str, te: str | None = None) -> str:
    """The command that (re)makes a lock, for hints."""
    return f"ctk stack lock {stack.name} --python {python}" + (f" --transformer-engine {te}" if te else "")


def check_te(stack: Stack, te: str) -> None:
    """A UserError unless Transformer Engine TE is a release ctk knows, for a CUDA stack."""
    if te not in te_.RELEASES:
        raise UserError(f"Transformer Engine {te} is not a release ctk knows how to build",
                        hint=f"known: {', '.join(te_.RELEASES)}")
    if te_.cuda_major(stack.accelerator) is None:
        raise UserError(f"Transformer Engine {te} needs a CUDA stack; stack {stack.name} is for "
                        f"{stack.accelerator}", hint="use a jax-cuda12 stack")


def te_locks(stack: Stack, python: str) -> list[str]:
    """The Transformer Engine releases the stack has a lock with, for this Python."""
    return sorted(p.name[len(f"py{python}-te"):-len(".txt")] for p in stack.lock_dir().glob(f"py{python}-te*.txt"))


def read_lock(stack: Stack, python: str, te: str | None = None) -> Lock:
    """The stack's lock for this Python (with Transformer Engine TE, if given); a UserError
    naming the command that makes it if there is none, or if the stack is not for that Python
    at all."""
    if te is not None:
        check_te(stack, te)
    if not stack.supports(python):
        if stack.too_new_for(python):
            raise UserError(f"{stack.misfit(python)}; it cannot be locked for Python {python}",
                            hint="pick a stack with an older jax for that Python (ctk stack list)")
        raise UserError(f"{stack.misfit(python)}; it is not locked for Python {python}",
                        hint=f"add \"{python}\" to its python list in {stack.file}, then run "
                             f"`{lock_command(stack, python)}`")
    path = lock_path(stack, python, te=te)
    try:
        text = path.read_text()
    except FileNotFoundError:
        with_te = f" with Transformer Engine {te}" if te else ""
        raise UserError(f"stack {stack.name} has no lock for Python {python}{with_te} ({path})",
                        hint=f"make it: {lock_command(stack, python, te)}") from None
    return Lock(stack.name, python, path, text, te)


def lock_problems(stack: Stack, lock: Lock) -> list[str]:
    """How a lock disagrees with its stack (a pin changed, another exclude_newer), [] if not."""
    out = []
    got = lock.versions
    for name, version in stack.pins.items():
        have = got.get(normalize(name))
        if have is None:
            out.append(f"{normalize(name)} is pinned to {version} but not in the lock")
        elif have != version:
            out.append(f"{normalize(name)} is pinned to {version} but locked at {have}")
    head = lock.header
    want = {"stack": stack.name, "python": lock.python, "platform": LOCK_PLATFORM,
            "exclude-newer": stack.exclude_newer or "none"}
    if lock.te:
        want["transformer-engine"] = lock.te
    for key, value in want.items():
        if head.get(key) != value:
            out.append(f"the lock says {key} {head.get(key, '(nothing)')}, the stack {value}")
    if lock.te:
        got = lock.versions
        for req in te_.requirements(lock.te, stack.accelerator):
            m = re.match(r"^([A-Za-z0-9._-]+)(\[[^]]*\])?==(\S+)$", req)
            if m and got.get(normalize(m.group(1))) != m.group(3):
                out.append(f"{normalize(m.group(1))} must be {m.group(3)} with Transformer Engine {lock.te}")
        if not any(s.startswith(f"{te_.SOURCE_DIST}=={lock.te} ") for s in lock.sources):
            out.append(f"the lock names no source of {te_.SOURCE_DIST} {lock.te}")
    return out


def current_lock(stack: Stack, python: str, te: str | None = None) -> Lock:
    """read_lock, and a UserError naming the command that remakes it if the lock no longer
    matches the stack (a pin changed since it was made): what it installs would not be the stack."""
    lock = read_lock(stack, python, te)
    problems = lock_problems(stack, lock)
    if problems:
        raise UserError(f"stack {stack.name}: its lock for Python {python} ({lock.path}) is out of date: "
                        + "; ".join(problems), hint=f"remake it: {lock_command(stack, python, te)}")
    return lock


def lock_state(stack: Stack, python: str, te: str | None = None) -> str:
    """"ok", "missing" or "stale" (the lock no longer matches the stack's pins)."""
    try:
        lock = read_lock(stack, python, te)
    except UserError:
        return "missing"
    return "stale" if lock_problems(stack, lock) else "ok"


def header(stack: Stack, python: str, te: str | None = None, sources: tuple[str, ...] = ()) -> str:
    """The comment block a lock starts with: what it is, how it was made, how to remake it."""
    since = (f"the files PyPI had at {stack.exclude_newer} (uv --exclude-newer)" if stack.exclude_newer
             else "PyPI as it was that day")
    with_te = (f" with Transformer Engine {te} (its JAX extension is built from the source named "
               "below, at image build time)") if te else ""
    prose = (f"The stack {stack.name} (jax {stack.jax}){with_te} locked for Python {python} on {LOCK_PLATFORM}: "
             "every package of its closure at one version, with the sha256 of each of its files, "
             f"resolved by uv from {since}. pip installs it with --require-hashes --no-deps. "
             "Do not edit: change the stack, then remake it with")
    lines = [f"# {ln}" for ln in textwrap.wrap(prose, width=94, break_on_hyphens=False)]
    lines.append(f"#   {lock_command(stack, python, te)}")
    lines += [f"# stack: {stack.name}", f"# python: {python}", f"# platform: {LOCK_PLATFORM}",
              f"# exclude-newer: {stack.exclude_newer or 'none'}"]
    if te:
        lines.append(f"# transformer-engine: {te}")
    lines += [f"# source: {s}" for s in sources]
    return "\n".join(lines) + "\n"


def uv_bin() -> str:
    """The uv binary of the `uv` package (a dependency of ctk: its wheel carries the binary)."""
    try:
        import uv
        return uv.find_uv_bin()
    except (ImportError, FileNotFoundError) as e:
        raise Failure(f"uv is not installed ({e})", hint="install ctk with its dependencies: pip install ctk") from None


def _uv_compile(stack: Stack, python: str, reqs: list[str], extra: list[str],
                on_line: Callable[[str], None] | None) -> str:
    """`uv pip compile` of REQS for the stack's platform and cut-off; the output's text."""
    with tempfile.TemporaryDirectory(prefix="ctk-lock-") as tmp:
        # The requirements file's name is what uv's "# via -r ..." lines say the pins come from.
        Path(tmp, "stacks.yaml").write_text("".join(f"{r}\n" for r in reqs))
        argv = [uv_bin(), "pip", "compile", "stacks.yaml", "--output-file", "lock.txt", "--quiet",
                "--no-config",  # no uv.toml of whatever folder this runs in shapes the lock
                "--python-version", python, "--python-platform", LOCK_PLATFORM,
                "--generate-hashes", "--no-header", *extra]
        if stack.exclude_newer:
            argv += ["--exclude-newer", stack.exclude_newer]
        try:
            run(argv, cwd=tmp, on_line=on_line, env={**os.environ, "NO_COLOR": "1"},
                what=f"stack {stack.name} cannot be resolved for Python {python}")
        except CommandError as e:
            raise Failure(e.message, hint="uv's message above names the requirement that does not "
                                          f"resolve; change the pins in {stack.file}") from None
        return Path(tmp, "lock.txt").read_text()


def _source_requirement(text: str, dist: str) -> str:
    """`DIST==V --hash=sha256:H` from uv's output for a source distribution (one file)."""
    m = re.search(rf"(?m)^({re.escape(dist)}==\S+) \\\n\s+--hash=sha256:([0-9a-f]{{64}})$", text)
    if m is None:
        raise Failure(f"uv gave no single sha256 for {dist}'s source distribution:\n{text}")
    return f"{m.group(1)} --hash=sha256:{m.group(2)}"


def compile_lock(stack: Stack, python: str, on_line: Callable[[str], None] | None = None,
                 te: str | None = None) -> str:
    """Resolve the stack (with Transformer Engine TE, if given) for this Python with uv; return
    the lock's text. A Failure (exit 1) with uv's message when it cannot be resolved."""
    if not stack.supports(python):
        read_lock(stack, python)  # raises the UserError that explains it
    reqs = stack.requirements()
    sources: tuple[str, ...] = ()
    if te is not None:
        check_te(stack, te)
        reqs += te_.requirements(te, stack.accelerator)
        # The JAX extension has only a source distribution: its hash, not its (build-time) closure.
        src = _uv_compile(stack, python, [f"{te_.SOURCE_DIST}=={te}"], ["--no-deps"], on_line)
        sources = (_source_requirement(src, te_.SOURCE_DIST),)
    # Wheels only: no interpreter needed to build anything.
    body = _uv_compile(stack, python, reqs, ["--only-binary", ":all:", "--no-python-downloads"], on_line)
    return header(stack, python, te, sources) + body


def write_lock(stack: Stack, python: str, text: str, out_dir: str | Path | None = None,
               te: str | None = None) -> tuple[Path, bool]:
    """Write a lock atomically (a reader sees the old file or the new one); (path, changed)."""
    path = lock_path(stack, python, out_dir, te)
    return path, atomic.write_if_changed(str(path), text)


def pip_target_args(python: str) -> list[str]:
    """pip arguments that select the wheels a lock was made for, on any machine: CPython `python`
    on x86_64 Linux, every manylinux tag up to LOCK_PLATFORM's glibc (pip takes --platform
    values literally, so the older ones are listed too)."""
    tags = [f"manylinux_2_{m}_x86_64" for m in range(_GLIBC_MINOR, 4, -1)]
    tags += ["manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"]
    args = ["--python-version", python, "--implementation", "cp", "--only-binary=:all:"]
    for t in tags:
        args += ["--platform", t]
    return args


def jax_role_vars(stack: Stack, locks: list[Lock]) -> dict:
    """The jax role's variables for a stack: its name, its pins, and its locks by Python version
    (the role installs the one for the interpreter it finds); with Transformer Engine, its
    release and, per Python, the source its JAX extension is built from."""
    out = {"jax_stack": stack.name, "jax_stack_pins": dict(stack.pins),
           "jax_stack_locks": {lk.python: lk.text for lk in locks}}
    te = {lk.te for lk in locks} - {None}
    if te:
        out["jax_transformer_engine"] = {
            "version": te.pop(),
            "sources": {lk.python: s for lk in locks for s in lk.sources if s.startswith(te_.SOURCE_DIST + "==")}}
    return out


def image_lock(spec: ImageSpec, stack: Stack) -> Lock | None:
    """The lock an image's jax layer installs: its stack's for its base's Python. None for an
    image without the jax role; a UserError naming the stack (and the command that makes the
    lock) when the stack does not fit the base or has no lock for it."""
    if "jax" not in spec.roles:
        return None
    python = base_python(spec.base)
    if python is None:
        raise UserError(f"image '{spec.name}': ctk does not know which Python base '{spec.base}' has")
    if not stack.supports(python):
        raise UserError(f"image '{spec.name}': {stack.misfit(python)}; base {spec.base} has Python {python}",
                        hint="pick a stack for that Python (ctk stack list)")
    return current_lock(stack, python, spec.transformer_engine)
