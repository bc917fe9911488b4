"""The software stacks catalog (images/stacks.yaml) and the rules a stack must keep.

A stack pins, exactly, the Python packages an image's JAX venv is asked for, says which Python
versions it is for, and is locked per Python version (ctk.stacks.lock) with the exact versions
and hashes of their whole closure. `load_stacks` reads the catalog; `check_stack` refuses a stack
whose versions are known not to work together (jax and jaxlib apart, CUDA plugin wheels of
another jax release, a driver floor below what the CUDA wheels need, a libtpu other than the one
the jax release was built against, a Python the jax release does not support). Errors name the
file, the line and the stack.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from ctk import paths
from ctk.blueprint.errors import (
    BlueprintError,
    BlueprintErrors,
    Collector,
    Pos,
    UserError,
    did_you_mean,
)
from ctk.blueprint.load import Document, load_file

DEFAULT_PATH = Path(paths.IMAGES) / "stacks.yaml"

ACCELERATORS = ("cpu", "cuda12", "cuda13", "tpu")
STACK_KEYS = ("accelerator", "python", "min_driver", "exclude_newer", "pins")

# Published driver floors: jax[cuda12] runs on NVIDIA driver >= 525.60.13, jax[cuda13] on >= 580.
MIN_DRIVER = {"cuda12": "525.60.13", "cuda13": "580"}

# The libtpu each jax release requires for its `tpu` extra, as its wheel METADATA says
# (`Requires-Dist: libtpu==0.0.42.*; extra == "tpu"` for jax 0.10.2). "X.*" admits X and X.N.
LIBTPU_FOR_JAX = {
    "0.6.0": "0.0.13.*",
    "0.6.1": "0.0.15.*",
    "0.6.2": "0.0.17.*",
    "0.7.0": "0.0.19.*",
    "0.7.1": "0.0.20.*",
    "0.7.2": "0.0.23",
    "0.8.0": "0.0.24.*",
    "0.8.1": "0.0.30.*",
    "0.8.2": "0.0.32.*",
    "0.8.3": "0.0.32.*",
    "0.9.0": "0.0.34.*",
    "0.9.0.1": "0.0.34.*",
    "0.9.1": "0.0.35.*",
    "0.9.2": "0.0.37.*",
    "0.10.0": "0.0.40.*",
    "0.10.1": "0.0.41.*",
    "0.10.2": "0.0.42.*",
    "0.11.0": "0.0.44.*",
    "0.11.1": "0.0.46.*",
    "0.11.2": "0.0.48.*",
    "0.12.0": "0.0.50.*",
    "0.12.0.1": "0.0.50.*",
}

# The oldest Python each jax release supports, as its wheel's Requires-Python says (">=3.11" for
# jax 0.10.2, ">=3.12" for 0.11.0 onwards; checked on PyPI's simple index).
JAX_REQUIRES_PYTHON = {
    **dict.fromkeys(("0.6.0", "0.6.1", "0.6.2"), "3.10"),
    **dict.fromkeys(("0.7.0", "0.7.1", "0.7.2", "0.8.0", "0.8.1", "0.8.2", "0.8.3", "0.9.0", "0.9.0.1",
                     "0.9.1", "0.9.2", "0.10.0", "0.10.1", "0.10.2"), "3.11"),
    **dict.fromkeys(("0.11.0", "0.11.1", "0.11.2", "0.12.0", "0.12.0.1"), "3.12"),
}

# Plugin wheels that must carry the jax version, per accelerator.
CUDA_WHEELS = {
    "cuda12": ("jax-cuda12-plugin", "jax-cuda12-pjrt"),
    "cuda13": ("jax-cuda13-plugin", "jax-cuda13-pjrt"),
}
ACCELERATOR_WHEELS = {name: acc for acc, names in CUDA_WHEELS.items() for name in names}
ACCELERATOR_WHEELS["libtpu"] = "tpu"

# An exact release (PEP 440 public version), never a range or a wildcard.
EXACT_VERSION_RE = re.compile(r"^\d+(\.\d+)*((a|b|rc)\d+)?(\.post\d+)?(\.dev\d+)?$")
DRIVER_RE = re.compile(r"^\d+(\.\d+){0,2}$")
PYTHON_RE = re.compile(r"^3\.\d+$")
# An RFC 3339 timestamp in UTC, or a date: what uv's --exclude-newer takes.
TIMESTAMP_RE = re.compile(r"^\d{4}-\d{2}-\d{2}(T\d{2}:\d{2}:\d{2}Z)?$")
PIN_NAME_RE = re.compile(r"^([A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?)(\[[A-Za-z0-9._,-]+\])?$")


@dataclass
class Stack:
    name: str
    accelerator: str  # "cpu" | "cuda12" | "cuda13" | "tpu"
    pythons: list[str]  # the Python versions ("3.13") it is locked for
    pins: dict[str, str]
    min_driver: str | None = None
    # Locks take only files PyPI had at this time (uv --exclude-newer), so relocking an unchanged
    # stack gives the same lock whatever was released since. None: today's PyPI.
    exclude_newer: str | None = None
    file: str = ""  # where the stack was read from, for messages
    pos: Pos | None = field(default=None, compare=False)

    def version(self, dist: str) -> str | None:
        """The pinned version of a distribution, matched by its normalized name (extras ignored)."""
        want = normalize(dist)
        for k, v in self.pins.items():
            if normalize(k) == want:
                return v
        return None

    def requirements(self) -> list[str]:
        """pip requirement strings, `name==version`, in file order."""
        return [f"{k}=={v}" for k, v in self.pins.items()]

    @property
    def jax(self) -> str:
        return self.version("jax") or "?"

    def min_python(self) -> str | None:
        """The oldest Python its jax release supports, when ctk knows it."""
        return JAX_REQUIRES_PYTHON.get(self.jax)

    def supports(self, python: str) -> bool:
        """Is the stack locked for this Python version ("3.13")?"""
        return python in self.pythons

    def too_new_for(self, python: str) -> bool:
        """Does its jax need a newer Python than this one?"""
        low = self.min_python()
        return low is not None and python_tuple(python) < python_tuple(low)

    def misfit(self, python: str) -> str:
        """Why the stack does not fit a Python it does not support, in words."""
        if self.too_new_for(python):
            return f"stack {self.name} (jax {self.jax}) needs Python >= {self.min_python()}"
        return f"stack {self.name} (jax {self.jax}) is locked for Python {', '.join(self.pythons)} only"

    def lock_dir(self) -> Path:
        """Where its locks live: locks/NAME/ beside the catalog it was read from."""
        return Path(self.file).parent / "locks" / self.name


def python_tuple(v: str) -> tuple[int, ...]:
    """"3.13" -> (3, 13), for comparing Python versions."""
    return tuple(int(p) for p in v.split("."))


def newest_for(stacks: dict[str, Stack], accelerator: str, python: str) -> Stack | None:
    """The stack with the newest jax among those of this accelerator locked for this Python; of
    those on the same jax, the one that pins the fewest packages (jax-cpu, not maxtext-cpu)."""
    fits = [s for s in stacks.values() if s.accelerator == accelerator and s.supports(python)]
    return max(fits, key=lambda s: (_version_key(s.jax), -len(s.pins), -len(s.name)), default=None)


def _version_key(v: str) -> tuple:
    return tuple(int(p) if p.isdigit() else -1 for p in re.split(r"[.]", v))


def normalize(dist: str) -> str:
    """A distribution name as pip compares it: extras dropped, lower case, runs of -_. as '-'."""
    return re.sub(r"[-_.]+", "-", dist.split("[", 1)[0]).lower()


def _matches(spec: str, version: str) -> bool:
    """Does version satisfy `==spec` (spec may end in '.*')?"""
    if spec.endswith(".*"):
        prefix = spec[:-2]
        return version == prefix or version.startswith(prefix + ".")
    return version == spec


def _where(stack: Stack) -> str:
    return stack.file or "<stacks>"


def _add(c: Collector, stack: Stack, message: str, hint: str = "") -> None:
    msg = f"stack '{stack.name}': {message}"
    if stack.pos is None:
        msg = f"{_where(stack)}: {msg}"
    c.add(msg, stack.pos, hint)


def stack_problems(stack: Stack, c: Collector) -> None:
    """Add every rule the stack breaks to c."""
    if stack.accelerator not in ACCELERATORS:
        _add(c, stack, f"unknown accelerator '{stack.accelerator}'",
             did_you_mean(str(stack.accelerator), ACCELERATORS) or f"one of {', '.join(ACCELERATORS)}")
        return
    _python_problems(stack, c)
    if stack.exclude_newer is not None and (
            not isinstance(stack.exclude_newer, str) or not TIMESTAMP_RE.match(stack.exclude_newer)):
        _add(c, stack, f"exclude_newer '{stack.exclude_newer}' is not a UTC time like 2026-12-01T00:00:00Z",
             "quote it: YAML reads an unquoted date as a date")
    _pin_problems(stack, c)

    jax, jaxlib = stack.version("jax"), stack.version("jaxlib")
    if jax is None or jaxlib is None:
        _add(c, stack, "jax and jaxlib must both be pinned")
        return
    if jax != jaxlib:
        _add(c, stack, f"jax {jax} and jaxlib {jaxlib} differ",
             "pin jaxlib to the jax version: they are released together")

    # Wheels that belong to another accelerator.
    for name in stack.pins:
        owner = ACCELERATOR_WHEELS.get(normalize(name))
        if owner and owner != stack.accelerator:
            _add(c, stack, f"{name} is a {owner} wheel, but the stack's accelerator is {stack.accelerator}")
    _cuda_problems(stack, jax, c)
    if stack.accelerator == "tpu":
        _libtpu_problems(stack, jax, c)


def _python_problems(stack: Stack, c: Collector) -> None:
    """The stack's Python versions: at least one, each a 3.N that its jax supports, none twice."""
    if not stack.pythons:
        _add(c, stack, "python lists no Python version", 'for example python: ["3.13"]')
    jax_min = JAX_REQUIRES_PYTHON.get(str(stack.version("jax")))
    for py in stack.pythons:
        if not isinstance(py, str) or not PYTHON_RE.match(py):
            _add(c, stack, f"python '{py}' is not a 3.N version", 'quote it: python: ["3.11"]')
        elif jax_min and python_tuple(py) < python_tuple(jax_min):
            _add(c, stack, f"python {py}: jax {stack.version('jax')} needs Python >= {jax_min}",
                 f"lock it for Python {jax_min} or later, or pin an older jax")
    if len(set(map(str, stack.pythons))) != len(stack.pythons):
        _add(c, stack, "python lists a version twice")


def _pin_problems(stack: Stack, c: Collector) -> None:
    """The stack's pins: distribution names, each once (as pip compares them), at exact versions."""
    seen: dict[str, str] = {}
    for name, version in stack.pins.items():
        if not PIN_NAME_RE.match(name):
            _add(c, stack, f"'{name}' is not a distribution name")
            continue
        n = normalize(name)
        if n in seen:
            _add(c, stack, f"'{name}' is pinned twice (also as '{seen[n]}')")
        seen[n] = name
        if not isinstance(version, str) or not EXACT_VERSION_RE.match(version):
            _add(c, stack, f"{name}: '{version}' is not an exact version",
                 'pin one release and quote it, e.g. "0.10.2"')


def _cuda_problems(stack: Stack, jax: str, c: Collector) -> None:
    """A CUDA stack's plugin wheels (at JAX's version) and its NVIDIA driver floor; no driver
    floor on another accelerator's."""
    if stack.accelerator in CUDA_WHEELS:
        for wheel in CUDA_WHEELS[stack.accelerator]:
            v = stack.version(wheel)
            if v is None:
                _add(c, stack, f"{wheel} is not pinned", f"pin it to the jax version: {wheel}: \"{jax}\"")
            elif v != jax:
                _add(c, stack, f"{wheel} {v} does not match jax {jax}",
                     "the CUDA plugin wheels are released with jax and must carry its version")
        floor = MIN_DRIVER[stack.accelerator]
        if stack.min_driver is None:
            _add(c, stack, f"min_driver is missing; jax[{stack.accelerator}] needs driver >= {floor}")
        elif not DRIVER_RE.match(str(stack.min_driver)):
            _add(c, stack, f"min_driver '{stack.min_driver}' is not a driver version like {floor}")
        elif python_tuple(str(stack.min_driver)) < python_tuple(floor):
            _add(c, stack, f"min_driver {stack.min_driver} is below {floor}, the oldest NVIDIA driver "
                           f"jax[{stack.accelerator}] supports", f"min_driver: \"{floor}\" or later")
    elif stack.min_driver is not None:
        _add(c, stack, f"min_driver is set, but a {stack.accelerator} stack uses no NVIDIA driver")


def _libtpu_problems(stack: Stack, jax: str, c: Collector) -> None:
    """A TPU stack's libtpu: pinned, to the release JAX was built against."""
    libtpu = stack.version("libtpu")
    spec = LIBTPU_FOR_JAX.get(jax)
    if libtpu is None:
        _add(c, stack, "libtpu is not pinned",
             f"jax {jax} requires libtpu=={spec}" if spec else "")
    elif spec is None:
        _add(c, stack, f"ctk does not know which libtpu jax {jax} requires",
             "read `Requires-Dist: libtpu==...; extra == \"tpu\"` in that jax wheel's METADATA "
             "and add it to LIBTPU_FOR_JAX in ctk/stacks/catalog.py")
    elif not _matches(spec, libtpu):
        _add(c, stack, f"libtpu {libtpu} is not the libtpu jax {jax} was released with ({spec})",
             f"pin a libtpu release matching {spec}, as jax {jax} requires")


def check_stack(stack: Stack) -> None:
    """Raise UserError naming the file and the stack when its pins do not go together."""
    c = Collector()
    stack_problems(stack, c)
    c.raise_if_any()


def _stack_from(doc: Document, name: str, body, c: Collector) -> Stack | None:
    path = ("stacks", name)
    pos = doc.key_pos(path)
    if not isinstance(body, dict):
        c.add(f"stack '{name}': expected a mapping with {', '.join(STACK_KEYS)}", pos)
        return None
    bad = False
    for key in body:
        if key not in STACK_KEYS:
            c.add(f"stack '{name}': unknown key '{key}'", doc.key_pos(path + (key,)),
                  did_you_mean(str(key), STACK_KEYS))
            bad = True
    for key in ("accelerator", "python", "pins"):
        if key not in body:
            c.add(f"stack '{name}': '{key}' is required", pos)
            bad = True
    pins = body.get("pins")
    if "pins" in body and (not isinstance(pins, dict) or not pins):
        c.add(f"stack '{name}': pins must be a mapping of name: \"version\"", doc.pos(path + ("pins",)))
        bad = True
    if bad:
        return None
    assert isinstance(pins, dict)  # required, and checked to be a mapping above
    md = body.get("min_driver")
    py = body["python"]
    return Stack(
        name=name,
        accelerator=str(body["accelerator"]),
        # Left as read: a YAML number (3.10 -> 3.1) is refused by the check. One version may be
        # written without the list.
        pythons=list(py) if isinstance(py, list) else [py],
        pins={str(k): v for k, v in pins.items()},
        min_driver=md if md is None or isinstance(md, str) else str(md),
        exclude_newer=body.get("exclude_newer"),
        file=doc.file,
        pos=pos,
    )


def load_stacks(path: str | Path | None = None, check: bool = True) -> dict[str, Stack]:
    """Read the stacks catalog (default: the repository's images/stacks.yaml).

    With check (the default), every stack must pass check_stack; all problems in the file
    are reported together.
    """
    path = Path(path) if path is not None else default_path()
    doc = load_file(str(path))
    c = Collector()
    top = doc.value
    if not isinstance(top, dict) or "stacks" not in top:
        raise BlueprintErrors([BlueprintError(f"{doc.file}: expected a top-level 'stacks:' mapping",
                                              doc.pos(()))], {doc.file: doc.text})
    for key in top:
        if key != "stacks":
            c.add(f"unknown top-level key '{key}'", doc.key_pos((key,)), did_you_mean(str(key), ["stacks"]))
    body = top["stacks"]
    if not isinstance(body, dict) or not body:
        c.add("'stacks' must be a mapping of stack name to stack", doc.pos(("stacks",)))
        c.raise_if_any({doc.file: doc.text})
    stacks: dict[str, Stack] = {}
    for name, spec in body.items():
        stack = _stack_from(doc, str(name), spec, c)
        if stack is None:
            continue
        if check:
            stack_problems(stack, c)
        stacks[stack.name] = stack
    c.raise_if_any({doc.file: doc.text})
    return stacks


def default_path() -> Path:
    """The catalog ctk uses: CTK_STACKS when set (a site's own pins), else images/stacks.yaml."""
    return Path(os.environ["CTK_STACKS"]) if os.environ.get("CTK_STACKS") else DEFAULT_PATH


def get_stack(name: str, path: str | Path | None = None) -> Stack:
    """One checked stack by name, or a UserError listing the names there are."""
    stacks = load_stacks(path)
    if name not in stacks:
        hint = did_you_mean(name, stacks) or f"known stacks: {', '.join(sorted(stacks))}"
        where = Path(path) if path is not None else default_path()
        raise UserError(f"{where}: no stack named '{name}' ({hint})")
    return stacks[name]
