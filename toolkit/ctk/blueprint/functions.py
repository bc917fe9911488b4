"""The functions a blueprint expression may call, and the ones ctk computes itself.

Where each may be used follows gcluster (pkg/config/expression.go and materialize.go):

- `vars`, and the settings of a Packer module, are evaluated by gcluster itself, with only
  `merge`, `flatten` and `ghpc_stage` (GCLUSTER_FUNCTIONS); any other name is refused there.
- The settings of a Terraform module may call any Terraform function: gcluster writes the call
  into the module's Terraform, which evaluates it. ctk keeps such a call as an expression
  (`ctk expand` shows it) and computes it only where it needs the value itself, with the
  functions of COMPUTED below; a call of another function is an error only then.
- ctk's own module kinds (`ctk/...`) are evaluated by ctk alone: COMPUTED only.

COMPUTED holds functions whose Terraform results ctk can reproduce exactly, for the values it
accepts; outside those (a regular expression to replace(), format verbs other than %s, %d and
%%, letter case or length of non-ASCII text) it raises CannotCompute rather than guess.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable
from typing import Any

GCLUSTER_FUNCTIONS = ("merge", "flatten", "ghpc_stage")

# Terraform's built-in functions (developer.hashicorp.com/terraform/language/functions), for
# telling a misspelt name from one Terraform evaluates.
TERRAFORM_FUNCTIONS = frozenset("""
abs ceil floor log max min parseint pow signum
chomp endswith format formatlist indent join lower regex regexall replace split startswith
strcontains strrev substr templatestring title trim trimprefix trimspace trimsuffix upper
alltrue anytrue chunklist coalesce coalescelist compact concat contains distinct element flatten
index keys length lookup matchkeys merge one range reverse setintersection setproduct setsubtract
setunion slice sort sum transpose values zipmap
base64decode base64encode base64gzip csvdecode jsondecode jsonencode textdecodebase64
textencodebase64 urlencode yamldecode yamlencode
abspath dirname pathexpand basename file fileexists fileset filebase64 templatefile
formatdate plantimestamp timeadd timecmp timestamp
base64sha256 base64sha512 bcrypt filebase64sha256 filebase64sha512 filemd5 filesha1 filesha256
filesha512 md5 rsadecrypt sha1 sha256 sha512 uuid uuidv5
cidrhost cidrnetmask cidrsubnet cidrsubnets
can ephemeralasnull issensitive nonsensitive sensitive tobool tolist tomap tonumber toset tostring
try type
""".split())


class CannotCompute(Exception):
    """The call is valid Terraform, but ctk does not reproduce its result for these values."""


def _text(v, fn: str) -> str:
    """A string argument, or a number or bool as Terraform converts it to one."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int) or (isinstance(v, float) and v.is_integer()):
        return str(int(v))
    if isinstance(v, float):
        raise CannotCompute(f"{fn}() of a fractional number")
    if isinstance(v, str):
        return v
    raise TypeError(f"expects a string, found {_kind(v)}")


def _kind(v) -> str:
    return {dict: "a map", list: "a list", type(None): "null"}.get(type(v), type(v).__name__)


def _ascii(s: str, fn: str) -> str:
    if not s.isascii():
        raise CannotCompute(f"{fn}() of non-ASCII text")
    return s


def _merge(*maps):
    out: dict = {}
    for m in maps:
        if m is None:
            continue
        if not isinstance(m, dict):
            raise TypeError(f"takes maps, found {_kind(m)}")
        out.update(m)
    return out


def _flatten(v):
    if not isinstance(v, list):
        raise TypeError(f"takes a list, found {_kind(v)}")
    out: list = []
    for x in v:
        out.extend(_flatten(x) if isinstance(x, list) else [x])
    return out


def _concat(*lists):
    out: list = []
    for lst in lists:
        if not isinstance(lst, list):
            raise TypeError(f"takes lists, found {_kind(lst)}")
        out.extend(lst)
    return out


def _join(sep, *lists):
    if not lists:
        raise TypeError("takes a separator and at least one list")
    items = []
    for lst in lists:
        if not isinstance(lst, list):
            raise TypeError(f"takes lists, found {_kind(lst)}")
        for x in lst:
            if x is None:
                raise TypeError("a list element is null")
            items.append(_text(x, "join"))
    return _text(sep, "join").join(items)


def _split(sep, s):
    sep, s = _text(sep, "split"), _text(s, "split")
    if sep == "":
        raise CannotCompute("split() with an empty separator")
    return s.split(sep)


def _replace(s, old, new):
    s, old, new = _text(s, "replace"), _text(old, "replace"), _text(new, "replace")
    if len(old) > 1 and old.startswith("/") and old.endswith("/"):
        raise CannotCompute("replace() with a regular expression")
    return s.replace(old, new)


def _length(v):
    if isinstance(v, (list, dict)):
        return len(v)
    if isinstance(v, str):
        return len(_ascii(v, "length"))  # Terraform counts grapheme clusters
    raise TypeError(f"takes a string, list or map, found {_kind(v)}")


# Go's unicode.IsSpace, which Terraform's trimspace uses (Python's str.strip also strips \x1c-\x1f).
_GO_SPACE = "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a" \
            "\u2028\u2029\u202f\u205f\u3000"


def quoted(s: str, as_unicode: str = "") -> str:
    """S in double quotes as HCL and Go's JSON encoder both write it: " and \\ escaped by a
    backslash, \\n, \\r, \\t by name, other control characters and those in AS_UNICODE as
    \\u00XX."""
    out = ['"']
    for ch in s:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch in "\n\r\t":
            out.append({"\n": "\\n", "\r": "\\r", "\t": "\\t"}[ch])
        elif ord(ch) < 0x20 or ch in as_unicode:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _json_string(s: str) -> str:
    """A JSON string as Go's encoder (and so Terraform's jsonencode) writes it: <, >, &, U+2028
    and U+2029 escaped too."""
    return quoted(s, "<>&\u2028\u2029")


def _jsonencode(v) -> str:
    """Terraform's jsonencode: compact, object keys sorted."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if abs(v) >= 2.0 ** 53:
            raise CannotCompute(f"jsonencode() of the number {v!r}")
        if v.is_integer():
            return str(int(v))
        r = repr(v)
        if "e" in r or "n" in r:  # exponent, inf, nan: Terraform writes these otherwise
            raise CannotCompute(f"jsonencode() of the number {r}")
        return r
    if isinstance(v, str):
        return _json_string(v)
    if isinstance(v, list):
        return "[" + ",".join(_jsonencode(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ",".join(_json_string(str(k)) + ":" + _jsonencode(v[k]) for k in sorted(v, key=str)) + "}"
    raise TypeError(f"cannot encode {type(v).__name__}")


_FORMAT_VERB = re.compile(r"%(.)")


def _format(spec, *args):
    spec = _text(spec, "format")
    out, used = [], 0
    pos = 0
    for m in _FORMAT_VERB.finditer(spec):
        out.append(spec[pos:m.start()])
        pos = m.end()
        verb = m.group(1)
        if verb == "%":
            out.append("%")
            continue
        if verb not in "sd":
            raise CannotCompute(f"format() with %{verb}")
        if used >= len(args):
            raise TypeError("not enough arguments for the format string")
        a = args[used]
        used += 1
        if verb == "d":
            if isinstance(a, bool) or not isinstance(a, (int, float)) or not float(a).is_integer():
                raise TypeError(f"%d takes a whole number, found {a!r}")
            out.append(str(int(a)))
        else:
            if a is None or isinstance(a, (list, dict)):
                raise CannotCompute(f"format() of {_kind(a)} with %s")
            out.append(_text(a, "format"))
    if "%" in spec[pos:]:
        raise TypeError("the format string ends with a lone '%'")
    out.append(spec[pos:])
    if used < len(args):
        raise TypeError(f"too many arguments: the format string uses {used}")
    return "".join(out)


def _tostring(v):
    if v is None:
        return None
    if isinstance(v, (list, dict)):
        raise TypeError(f"cannot convert {_kind(v)} to a string")
    return _text(v, "tostring")


# name -> implementation; `file` is given the blueprint's reader by the evaluator.
COMPUTED: dict[str, Callable[..., Any] | None] = {
    "merge": _merge,
    "flatten": _flatten,
    "concat": _concat,
    "join": _join,
    "split": _split,
    "replace": _replace,
    "lower": lambda s: _ascii(_text(s, "lower"), "lower").lower(),
    "upper": lambda s: _ascii(_text(s, "upper"), "upper").upper(),
    "length": _length,
    "jsonencode": _jsonencode,
    "base64encode": lambda s: base64.b64encode(_text(s, "base64encode").encode()).decode(),
    "trimspace": lambda s: _text(s, "trimspace").strip(_GO_SPACE),
    "chomp": lambda s: _text(s, "chomp").rstrip("\r\n"),
    "format": _format,
    "tostring": _tostring,
    "file": None,  # reads through the evaluator (paths relative to the blueprint's folder)
}


def to_text(v) -> str:
    """A value interpolated into a string."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return ""
    if isinstance(v, (dict, list)):
        return json.dumps(v)
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)
