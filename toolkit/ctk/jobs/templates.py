"""sbatch templates: discovery, declared parameters, validation and rendering.

A template is a Jinja2 file under sbatch/ (`NAME.sbatch.j2`) that begins with a parameter
block, a Jinja comment holding a YAML list:

    {#- ctk-params:
    - {name: nodes, type: int, default: 1, min: 1, help: number of nodes}
    - {name: job_name, type: str, default: jax, pattern: name, help: ...}
    -#}

Fields: name, type (str|int|bool|float|list), default (absent: required), help, `min` and
`max` (int and float: the bounds, both included), `choices`, and for `str` values that are
written into `#SBATCH` lines, `pattern` (a key of PATTERNS): such values are checked against a
strict pattern before rendering. Every other string reaches the script
only through the `q` / `qargv` filters (shlex.quote), so no value can change the script.
The block of sbatch/_preempt.j2 (preemptible, checkpoint_hook) is added to every template.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import jinja2

from .. import paths
from ..errors import UserError, did_you_mean
from ..model import Deployment, Nodeset
from ..modules.machines import NETWORKS

SUFFIX = ".sbatch.j2"
COMMON = "_preempt.j2"
TYPES = ("str", "int", "bool", "float", "list")
ACCELERATORS = ("cpu", "gpu", "tpu")

# Values written into #SBATCH lines (or otherwise unquoted) must match one of these, fully.
PATTERNS: dict[str, tuple[re.Pattern, str]] = {
    "name": (re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,127}"),
             "letters, digits and _.+- (at most 128, starting with a letter or digit)"),
    "partition": (re.compile(r"[A-Za-z0-9_-]{1,64}(,[A-Za-z0-9_-]{1,64})*"),
                  "a Slurm partition name, or several separated by commas"),
    "time": (re.compile(r"\d{1,9}(:\d\d){0,2}|\d{1,3}-\d{1,4}(:\d\d){0,2}|UNLIMITED|INFINITE"),
             "a Slurm time: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS or UNLIMITED"),
    "path": (re.compile(r"[A-Za-z0-9_./%+-]{1,1024}"),
             "a path of letters, digits and _./%+- (no spaces or quotes)"),
    "accelerator": (re.compile("|".join(ACCELERATORS)), " | ".join(ACCELERATORS)),
    "network": (re.compile("|".join(re.escape(n) for n in NETWORKS)), " | ".join(NETWORKS)),
    "tpu_type": (re.compile(r"[a-z0-9]{1,16}(-[a-z0-9]{1,16}){0,3}"), "a TPU type such as v5p-8"),
}

_BLOCK = re.compile(r"\A\{#-?\s*ctk-params:[ \t]*\n(.*?)\n[ \t]*-?#\}", re.S)
_DESC = re.compile(r"\{#-?\s*ctk:\s*(.+?)\s*-?#\}", re.S)


@dataclass
class Param:
    name: str
    type: str
    default: Any = None
    required: bool = False
    help: str = ""
    pattern: str | None = None
    min: float | None = None
    max: float | None = None
    choices: list | None = None

    def to_dict(self) -> dict[str, Any]:
        d = {"name": self.name, "type": self.type, "required": self.required, "help": self.help}
        if not self.required:
            d["default"] = self.default
        if self.pattern:
            d["pattern"] = self.pattern
        if self.min is not None:
            d["min"] = self.min
        if self.max is not None:
            d["max"] = self.max
        if self.choices:
            d["choices"] = self.choices
        return d


@dataclass
class Template:
    name: str
    path: str
    description: str
    params: dict[str, Param] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "path": self.path, "description": self.description,
                "params": [p.to_dict() for p in self.params.values()]}


def template_dir() -> str:
    """The templates' folder (CTK_SBATCH_DIR overrides, e.g. for a site's own templates)."""
    return os.environ.get("CTK_SBATCH_DIR", paths.SBATCH)


def list_templates() -> list[str]:
    d = template_dir()
    if not os.path.isdir(d):
        return []
    return sorted(f[: -len(SUFFIX)] for f in os.listdir(d) if f.endswith(SUFFIX) and not f.startswith("_"))


def _cache_dir(kind: str) -> str | None:
    """A folder of ctk's own cache (~/.cache/ctk/KIND) that only this user can read, made if
    needed; None where there can be none. What it holds is always remade from its source."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    d = os.path.join(base, "ctk", kind)
    try:
        os.makedirs(d, mode=0o700, exist_ok=True)
        st = os.stat(d)
        if st.st_uid != os.getuid() or st.st_mode & 0o077:
            return None
    except OSError:
        return None
    return d


def _params_yaml(block: str, where: str) -> Any:
    """The parameter block's YAML, read once per text: later runs (each `ctk job` is a new
    process) take it from a JSON copy keyed by the text's hash and never import PyYAML."""
    import hashlib
    import json

    d = _cache_dir("params")
    path = os.path.join(d, hashlib.sha256(block.encode()).hexdigest() + ".json") if d else None
    if path:
        try:
            with open(path, encoding="utf-8") as f:
                return json.load(f)
        except (OSError, ValueError):
            pass
    import yaml

    try:
        # libyaml's loader where PyYAML has it: a tenth of the pure-Python one's time
        raw = yaml.load(block, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) or []
    except yaml.YAMLError as e:
        raise UserError(f"{where}: parameter block is not valid YAML: {e}") from None
    if path:
        try:
            tmp = f"{path}.{os.getpid()}.tmp"
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(raw, f)
            os.replace(tmp, path)
        except (OSError, TypeError, ValueError):
            pass
    return raw


def _parse_block(text: str, where: str, depth: int = 0) -> tuple[list[Param], str]:
    m = _BLOCK.match(text)
    if not m:
        raise UserError(f"{where}: no parameter block at the top",
                        hint="start the template with '{#- ctk-params:' followed by a YAML list")
    raw = _params_yaml(m.group(1), where)
    if not isinstance(raw, list):
        raise UserError(f"{where}: parameter block must be a YAML list of parameters")
    out: list[Param] = []
    for i, item in enumerate(raw):
        if isinstance(item, dict) and set(item) == {"from"}:  # another template's parameters
            base = os.path.join(template_dir(), f"{item['from']}{SUFFIX}")
            if depth > 4 or not os.path.isfile(base):
                raise UserError(f"{where}: 'from: {item['from']}' names no template")
            with open(base, encoding="utf-8") as f:
                out.extend(_parse_block(f.read(), base, depth + 1)[0])
            continue
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise UserError(f"{where}: parameter #{i + 1} needs a 'name'")
        unknown = set(item) - {"name", "type", "default", "help", "pattern", "min", "max", "choices", "required"}
        if unknown:
            raise UserError(f"{where}: parameter {item['name']!r}: unknown field(s) {sorted(unknown)}")
        typ = item.get("type", "str")
        if typ not in TYPES:
            raise UserError(f"{where}: parameter {item['name']!r}: type must be one of {', '.join(TYPES)}")
        pat = item.get("pattern")
        if pat is not None and (typ != "str" or pat not in PATTERNS):
            raise UserError(f"{where}: parameter {item['name']!r}: pattern must be one of "
                            f"{', '.join(PATTERNS)} (str parameters only)")
        for bound in ("min", "max"):
            b = item.get(bound)
            if b is not None and (typ not in ("int", "float") or isinstance(b, bool)
                                  or not isinstance(b, (int, float))):
                raise UserError(f"{where}: parameter {item['name']!r}: {bound} must be a number "
                                "(int and float parameters only)")
        if item.get("min") is not None and item.get("max") is not None and item["min"] > item["max"]:
            raise UserError(f"{where}: parameter {item['name']!r}: min {item['min']} is above max {item['max']}")
        required = bool(item.get("required", "default" not in item))
        p = Param(item["name"], typ, None, required, str(item.get("help", "")), pat, item.get("min"),
                  item.get("max"), item.get("choices"))
        if not required:
            p.default = _coerce(p, item["default"], f"{where}: default of")
        if any(x.name == p.name for x in out):  # a later declaration overrides an inherited one
            out = [x for x in out if x.name != p.name]
        out.append(p)
    desc = _DESC.search(text[m.end():])
    return out, desc.group(1).strip() if desc else ""


def _signature(d: str) -> tuple:
    """What the templates folder holds now (names, sizes, mtimes): caches are valid while it
    stays the same. A stat per file is far cheaper than parsing YAML or compiling Jinja."""
    try:
        names = sorted(os.listdir(d))
    except FileNotFoundError:
        return ()
    out = []
    for n in names:
        try:
            st = os.stat(os.path.join(d, n))
        except FileNotFoundError:
            continue
        out.append((n, st.st_size, st.st_mtime_ns))
    return tuple(out)


_TEMPLATES: dict[tuple, Template] = {}


def load_template(name: str) -> Template:
    """The template NAME with its parameters (its own, then the common ones), validated;
    cached while the templates folder is unchanged."""
    key = (template_dir(), name, _signature(template_dir()))
    if key not in _TEMPLATES:
        if len(_TEMPLATES) > 64:
            _TEMPLATES.clear()
        _TEMPLATES[key] = _load_template(name)
    return _TEMPLATES[key]


def _load_template(name: str) -> Template:
    names = list_templates()
    if name not in names:
        hint = did_you_mean(name, names) or f"templates: {', '.join(names) or f'(none in {template_dir()})'}"
        raise UserError(f"unknown template {name!r}", hint=f"{hint} (see 'ctk job templates')")
    path = os.path.join(template_dir(), name + SUFFIX)
    with open(path, encoding="utf-8") as f:
        own, desc = _parse_block(f.read(), path)
    common_path = os.path.join(template_dir(), COMMON)
    with open(common_path, encoding="utf-8") as f:
        common, _ = _parse_block(f.read(), common_path)
    params: dict[str, Param] = {}
    for p in own + common:
        if p.name in params:
            raise UserError(f"{path}: parameter {p.name!r} is also declared in {COMMON}")
        params[p.name] = p
    return Template(name, path, desc, params)


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_TRUE, _FALSE = {"true", "yes", "on", "1"}, {"false", "no", "off", "0"}

MAX_VALUE = 64 * 1024  # bytes in one --set value: far above any real one, far below harm
_ECHO = 60  # characters of a value that a message repeats
MAX_TIME_DAYS = 365  # longer is a typo; Slurm reads an absurd limit as no limit at all
_LIST_HELP = " (a list such as [a, 'b c'] or a,b)"
_LIST_HINT = ("a list is a,b or [a, 'b c', \"d\"]: one level of plain or quoted strings "
              "(quote an element holding a comma, bracket or leading &*!); no YAML anchors or aliases")


def _bounds(p: Param) -> str:
    """P's bounds as a message gives them: ' from 1 to 65535', ' >= 0', ''."""
    if p.min is not None and p.max is not None:
        return f" from {p.min} to {p.max}"
    if p.min is not None:
        return f" >= {p.min}"
    return f" <= {p.max}" if p.max is not None else ""


def clip(value: Any, keep: int = _ECHO) -> str:
    """VALUE as a message shows it: its repr, or for a long value its first KEEP characters
    and its size, so that a huge value is never printed back whole."""
    text = value if isinstance(value, str) else repr(value)
    if len(text) <= keep:
        return repr(value) if isinstance(value, str) else text
    size = len(text.encode("utf-8", errors="surrogatepass"))
    head = repr(text[:keep]) if isinstance(value, str) else text[:keep]
    return f"{head}... ({size} bytes)"


class _ListSyntax(ValueError):
    """A flow list that _flow_list cannot read; the message says why."""


_ESCAPES = {"\\": "\\", '"': '"', "/": "/", "n": "\n", "t": "\t", "r": "\r", "0": "\x00"}
_HEX = {"x": 2, "u": 4}
_BLANK = " \t\r\n"


def _quoted(s: str, i: int) -> tuple[str, int]:
    """The quoted element starting at S[I] (' or "), and the index after its closing quote."""
    q, n, parts = s[i], len(s), []
    i += 1
    while True:
        j = s.find(q, i) if q == "'" else min((k for k in (s.find('"', i), s.find("\\", i)) if k >= 0),
                                                default=-1)
        if j < 0:
            raise _ListSyntax(f"a quote ({q}) that is not closed")
        parts.append(s[i:j])
        if q == "'":
            if s.startswith("''", j):  # '' inside single quotes is one quote
                parts.append("'")
                i = j + 2
                continue
            return "".join(parts), j + 1
        if s[j] == '"':
            return "".join(parts), j + 1
        esc = s[j + 1:j + 2]  # a backslash escape
        if esc in _ESCAPES:
            parts.append(_ESCAPES[esc])
            i = j + 2
        elif esc in _HEX and re.fullmatch(f"[0-9A-Fa-f]{{{_HEX[esc]}}}", s[j + 2:j + 2 + _HEX[esc]]):
            parts.append(chr(int(s[j + 2:j + 2 + _HEX[esc]], 16)))
            i = j + 2 + _HEX[esc]
        elif j + 1 >= n:
            raise _ListSyntax('a quote (") that is not closed')
        else:
            raise _ListSyntax(f"unknown escape \\{esc} in a double-quoted element")


def _flow_list(s: str) -> list[str]:
    """The elements of S, a one-level list written `[a, 'b c', "d\\te"]`, each a string as
    written (no YAML typing). Plain and quoted strings only: nesting, mappings, anchors, aliases
    and tags are refused, so reading costs one pass over S and builds nothing bigger than S."""
    out: list[str] = []
    i, n = 1, len(s)  # s[0] is "["
    while True:
        while i < n and s[i] in _BLANK:
            i += 1
        if i >= n:
            raise _ListSyntax("no closing ]")
        c = s[i]
        if c == "]":
            i += 1
            break
        if c == ",":
            raise _ListSyntax(f"an empty element at character {i + 1}")
        if c in "[{":
            raise _ListSyntax("plain values only: no nested lists or mappings")
        if c in "&*!":
            raise _ListSyntax(f"YAML anchors, aliases and tags ({c}...) are not read; "
                              "quote an element that starts with one")
        if c in "'\"":
            item, i = _quoted(s, i)
            out.append(item)
        else:  # a plain element: up to the next comma or ]
            j = i
            while j < n and s[j] not in ",]":
                if s[j] in "[{}":
                    raise _ListSyntax(f"{s[j]!r} inside an element; quote the element")
                j += 1
            out.append(s[i:j].rstrip(_BLANK))
            i = j
        while i < n and s[i] in _BLANK:
            i += 1
        if i < n and s[i] == ",":
            i += 1
        elif i < n and s[i] != "]":
            raise _ListSyntax(f"expected , or ] at character {i + 1}")
    if s[i:].strip(_BLANK):
        raise _ListSyntax("text after the closing ]")
    return out


def _time_seconds(v: str) -> int | None:
    """A Slurm time (one PATTERNS['time'] matched) in seconds; None for UNLIMITED."""
    if v in ("UNLIMITED", "INFINITE"):
        return None
    days, _, rest = v.rpartition("-")
    parts = [int(x) for x in rest.split(":")]
    if days:  # D-HH, D-HH:MM, D-HH:MM:SS
        h, m, sec = (parts + [0, 0])[:3]
        return int(days) * 86400 + h * 3600 + m * 60 + sec
    if len(parts) == 1:  # MM
        return parts[0] * 60
    if len(parts) == 2:  # MM:SS
        return parts[0] * 60 + parts[1]
    return parts[0] * 3600 + parts[1] * 60 + parts[2]  # HH:MM:SS


# Makes the error of a value that does not convert, given what is wrong with it ("": its type).
_Bad = Callable[[str], UserError]


def _coerce(p: Param, value: Any, ctx: str, shown: bool = False) -> Any:
    """VALUE converted to P's type; strings (from --set) are parsed. Raises UserError, whose
    message repeats VALUE (cut short) unless CTX already SHOWN it."""
    raw, t = value, p.type

    def bad(why: str = "") -> UserError:
        got = "" if shown else f", got {clip(raw)}"
        if t == "list":
            hint = _LIST_HINT
        elif p.pattern:
            hint = f"{p.name}: {PATTERNS[p.pattern][1]}"
        else:
            hint = f"{p.name}: {p.type}{_bounds(p)}; see 'ctk job templates' for every parameter"
        return UserError(f"{ctx} parameter {p.name!r}: expected {p.type}{why}{got}", hint=hint)

    if isinstance(value, str) and len(value.encode("utf-8", "surrogatepass")) > MAX_VALUE:
        raise bad(f" of at most {MAX_VALUE // 1024} KiB")
    v: Any
    if t == "str":
        v = _coerce_str(p, value, bad)
    elif t == "int":
        v = _coerce_int(value, bad)
    elif t == "float":
        v = _coerce_float(value, bad)
    elif t == "bool":
        v = _coerce_bool(value, bad)
    else:  # list
        v = _coerce_list(value, bad)
    if t in ("int", "float"):
        if p.min is not None and v < p.min:
            raise bad(f" >= {p.min}")
        if p.max is not None and v > p.max:
            raise bad(f" <= {p.max}")
    if p.choices and v not in p.choices:
        raise bad(f" (one of {', '.join(map(str, p.choices))})")
    return v


def _coerce_str(p: Param, value: Any, bad: _Bad) -> str:
    """A str parameter's VALUE (a string or a number), matching P's pattern if it has one."""
    if not isinstance(value, (str, int, float)) or isinstance(value, bool):
        raise bad("")
    v = str(value)
    if "\x00" in v:
        raise bad(" without NUL characters")
    if p.pattern and v != "":  # "" means "not set": the template leaves the line out
        rx, what = PATTERNS[p.pattern]
        if not rx.fullmatch(v):
            raise bad(f" ({what})")
        if p.pattern == "time":
            secs = _time_seconds(v)
            if secs == 0:
                raise bad(" above zero (Slurm reads 0 as no limit: write UNLIMITED for that)")
            if secs is not None and secs > MAX_TIME_DAYS * 86400:
                raise bad(f" of at most {MAX_TIME_DAYS} days ({MAX_TIME_DAYS}-00:00:00; "
                          "UNLIMITED for no limit)")
    return v


def _coerce_int(value: Any, bad: _Bad) -> int:
    """An int parameter's VALUE: an int, or a string of at most 18 digits (no bool)."""
    if isinstance(value, bool):
        raise bad("")
    if isinstance(value, int):
        return value
    if isinstance(value, str) and re.fullmatch(r"[+-]?\d{1,18}", value.strip()):
        return int(value.strip())
    raise bad(" (a whole number)")


def _coerce_float(value: Any, bad: _Bad) -> float:
    """A float parameter's VALUE: anything float() reads as a finite number (no bool)."""
    if isinstance(value, bool):
        raise bad("")
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise bad(" (a number)") from None
    if v != v or v in (float("inf"), float("-inf")):
        raise bad(" (a finite number)")
    return v


def _coerce_bool(value: Any, bad: _Bad) -> bool:
    """A bool parameter's VALUE: a bool, or one of the words of _TRUE and _FALSE."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    raise bad(" (true or false)")


def _coerce_list(value: Any, bad: _Bad) -> list[str]:
    """A list parameter's VALUE as strings: a list or tuple of plain values, or a string (a flow
    list, [a, b], or comma-separated words)."""
    if isinstance(value, str):
        s = value.strip()
        if s.startswith("["):
            try:
                value = _flow_list(s)
            except _ListSyntax as e:
                raise bad(f"{_LIST_HELP}: {e}") from None
        else:
            value = s.split(",") if s else []
    if not isinstance(value, (list, tuple)):
        raise bad(_LIST_HELP)
    v = []
    for x in value:
        if isinstance(x, (list, dict)) or x is None:
            raise bad(" (a list of plain values)")
        x = str(x).lower() if isinstance(x, bool) else str(x)
        if "\x00" in x:
            raise bad(" without NUL characters")
        v.append(x)
    return v


def q(value: Any) -> str:
    """One shell word holding VALUE exactly."""
    if isinstance(value, bool):
        value = "true" if value else "false"
    s = str(value)
    if not _CONTROL.search(s):
        return shlex.quote(s)
    # $'...' with escapes: the script keeps one line per statement, whatever the value holds.
    out = []
    for ch in s:
        if ch in "\\'":
            out.append("\\" + ch)
        elif _CONTROL.match(ch):
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return "$'" + "".join(out) + "'"


def on_stack(argv: list[str], python: str) -> list[str]:
    """ARGV with a leading `python` / `python3` replaced by PYTHON (the stack's interpreter of
    the nodes the job lands on); no ARGV at all is PYTHON alone."""
    if not argv:
        return [python]
    return [python, *argv[1:]] if argv[0] in ("python", "python3") else list(argv)


def qargv(values: list[Any]) -> str:
    """Shell words, one per element, each exactly as given."""
    return " ".join(q(v) for v in values)


def shsplit(value: str) -> list[str]:
    try:
        return shlex.split(value)
    except ValueError as e:
        raise UserError(f"cannot split {clip(value)} into arguments: {e}") from None


def envname(value: str) -> str:
    """VALUE if it is a valid environment variable name, else a UserError."""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,127}", value):
        raise UserError(f"{clip(value)} is not an environment variable name",
                        hint="NAME=VALUE, NAME of letters, digits and _")
    return value


def _fail(message: str):
    raise UserError(message)


_ENVS: dict[tuple[str, str | None], jinja2.Environment] = {}


def _environment() -> jinja2.Environment:
    """One Jinja environment per templates folder and cache folder: it keeps compiled templates
    and recompiles a file when its mtime changes (auto_reload)."""
    key = (template_dir(), _cache_dir("jinja"))
    if key not in _ENVS:
        _ENVS[key] = _new_environment(key[1])
    return _ENVS[key]


class _BytecodeCache(jinja2.FileSystemBytecodeCache):
    """Compiled templates kept between runs (each `ctk job` is a new process, and compiling
    jax-train costs more than the rest of a submit), in a folder only this user can read;
    Jinja recompiles a template whose source changed. A cache that cannot be read or written
    (its folder removed meanwhile, a full disk) costs a compile, never the render."""

    def load_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        try:
            super().load_bytecode(bucket)
        except OSError:
            pass

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        try:
            super().dump_bytecode(bucket)
        except OSError:
            pass


def _new_environment(cache: str | None) -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(template_dir()), undefined=jinja2.StrictUndefined,
                             keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True,
                             autoescape=False, bytecode_cache=_BytecodeCache(cache) if cache else None)
    env.filters.update(q=q, qargv=qargv, shsplit=shsplit, envname=envname, on_stack=on_stack)
    env.globals["fail"] = _fail
    return env


def pick_nodeset(cluster: Deployment, nodeset: str | None) -> tuple[Nodeset, str | None]:
    """The nodeset NODESET (default: the default partition's first) and a partition holding it."""
    names = [ns.name for ns in cluster.nodesets]
    if nodeset is None:
        parts = [p for p in cluster.partitions if p.is_default] or cluster.partitions
        for p in parts:
            if p.nodesets:
                return cluster.nodeset(p.nodesets[0]), p.name
        if not cluster.nodesets:
            raise UserError(f"deployment {cluster.deployment_name!r} has no nodesets")
        return cluster.nodesets[0], None
    if nodeset not in names:
        hint = did_you_mean(nodeset, names) or f"nodesets: {', '.join(names) or '(none)'}"
        raise UserError(f"--nodeset {nodeset}: no such nodeset in deployment {cluster.deployment_name!r}",
                        hint=hint)
    parts = [p for p in cluster.partitions if nodeset in p.nodesets]
    parts.sort(key=lambda p: not p.is_default)
    return cluster.nodeset(nodeset), parts[0].name if parts else None


def stack_python(cluster: Deployment, nodeset: str | None) -> str | None:
    """The Python of the JAX stack on the nodes of NODESET (default: as pick_nodeset), or None
    when their image has no stack."""
    img = cluster.image_of(pick_nodeset(cluster, nodeset)[0])
    return img.python if img is not None else None


def cluster_facts(cluster: Deployment, nodeset: str | None) -> dict[str, Any]:
    """Parameter values the deployment knows: accelerator, GPUs per node, network, TPU."""
    ns, partition = pick_nodeset(cluster, nodeset)
    if ns.tpu_type:
        acc = "tpu"
    elif ns.gpu_count:
        acc = "gpu"
    else:
        acc = "cpu"
    img = cluster.image_of(ns)
    # The container template's: pyxis where the nodes' image has the pyxis role or is slurm-gcp's
    # (which carries pyxis and enroot); else Slurm's own, which ctk's nodes have (runc, oci.conf).
    pyxis = not cluster.traits.writes_slurm_conf or (img is not None and "pyxis" in img.roles)
    facts: dict[str, Any] = {"accelerator": acc, "network": ns.network,
                             "container_runtime": "pyxis" if pyxis else "oci",
                             "container_images": ([c.name for c in cluster.containers]
                                                  if cluster.traits.has_container_bundles else [])}
    if partition:
        facts["partition"] = partition
    if acc == "gpu":
        facts["gpus_per_node"] = ns.gpu_count
    if acc == "tpu":
        facts["tpu_type"] = ns.tpu_type
        facts["tpu_chips_per_host"] = ns.tpu_chips_per_host
    return facts


def _echo(value: Any) -> str:
    """VALUE as the user typed it after --set, cut like clip() when long."""
    return value if isinstance(value, str) and len(value) <= _ECHO else clip(value)


def resolve_params(tpl: Template, params: dict[str, Any], facts: dict[str, Any] | None = None) -> dict[str, Any]:
    """Defaults, then deployment facts, then PARAMS, typed and checked."""
    for k in params:
        if k not in tpl.params:
            hint = did_you_mean(k, tpl.params) or f"parameters: {', '.join(tpl.params)}"
            raise UserError(f"--set {_echo(k)}=...: template {tpl.name!r} has no parameter {clip(k)}",
                            hint=f"{hint} (see 'ctk job templates')")
    out: dict[str, Any] = {}
    missing = []
    for name, p in tpl.params.items():
        if name in params:
            out[name] = _coerce(p, params[name], f"--set {name}={_echo(params[name])}:", shown=True)
        elif facts and name in facts:
            out[name] = _coerce(p, facts[name], "deployment:")
        elif p.required:
            missing.append(p)
        else:
            out[name] = p.default
    if missing:
        p = missing[0]
        raise UserError(f"template {tpl.name!r} needs parameter {p.name!r} ({p.type}: {p.help})",
                        hint=f"--set {p.name}=VALUE")
    return out


def render(name: str, params: dict[str, Any], command: list[str] | None = None,
           cluster: Deployment | None = None, nodeset: str | None = None) -> str:
    """The batch script of template NAME for PARAMS and the user's COMMAND (an argv)."""
    tpl = load_template(name)
    facts = cluster_facts(cluster, nodeset) if cluster is not None else None
    if cluster is None and nodeset is not None:
        raise UserError("--nodeset needs --deployment DIR", hint="ctk job render ... --deployment DIR --nodeset NAME")
    values = resolve_params(tpl, dict(params), facts)
    if "gpus_per_node" in params and "accelerator" in values and values["accelerator"] != "gpu":
        # the template would leave the GPUs out: say so rather than run the job without them
        where = (f"the nodes of nodeset {pick_nodeset(cluster, nodeset)[0].name} have none"
                 if cluster is not None and facts and "accelerator" not in params
                 else f"accelerator is {values['accelerator']}")
        raise UserError(f"--set gpus_per_node={values['gpus_per_node']}: GPUs go with accelerator=gpu, "
                        f"and {where}",
                        hint="--nodeset NAME of a GPU nodeset (with --deployment), or --set accelerator=gpu, or "
                        "leave gpus_per_node out")
    argv = [str(a) for a in (command or [])]
    if any("\x00" in a for a in argv):
        raise UserError("the command contains a NUL character")
    python = stack_python(cluster, nodeset) if cluster is not None else None
    ctx = dict(values, command=argv, template_name=name, python=python or "python3")
    try:
        return _environment().get_template(name + SUFFIX).render(ctx)
    except jinja2.UndefinedError as e:
        raise UserError(f"template {name!r}: {e}", hint="the template uses a value it does not declare") from None


_DEPLOYMENTS: dict[tuple, Deployment] = {}


def load_deployment(folder: str) -> Deployment:
    """The deployment.json of FOLDER (cached while the file is unchanged; read-only: callers
    never change it)."""
    import json

    path = os.path.join(folder, "deployment.json")
    try:
        st = os.stat(path)
        key = (os.path.abspath(path), st.st_size, st.st_mtime_ns)
        if key not in _DEPLOYMENTS:
            with open(path, encoding="utf-8") as f:
                dep = Deployment.from_dict(json.load(f))
            _DEPLOYMENTS.clear()
            _DEPLOYMENTS[key] = dep
        return _DEPLOYMENTS[key]
    except FileNotFoundError:
        raise UserError(f"--deployment {folder}: no deployment.json there",
                        hint="create it with 'ctk create BLUEPRINT -o DIR'") from None
    except (ValueError, TypeError) as e:
        raise UserError(f"--deployment {folder}: cannot read deployment.json: {e}") from None
