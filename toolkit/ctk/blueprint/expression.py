"""Cluster Toolkit expressions inside blueprint strings.

`$(vars.x)`, `$(module_id.output)`, indexing (`$(m.nodes[0].ip)`), interpolation
(`"$(a.name)_$(vars.zone)"`), escapes (`\\$(`), literals `((terraform))`, and the functions
blueprints use: merge, flatten, jsonencode, ghpc_stage (plus a few plain ones).

Parsing is pure; evaluation is done by the caller through an `Env` (see expand.py).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable

from .errors import did_you_mean

_LITERAL = re.compile(r"^\(\((.*)\)\)$", re.S)
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")
_NUMBER = re.compile(r"-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?")


class ExprError(Exception):
    """A problem in one expression; `offset` is relative to the start of the host string."""

    def __init__(self, message: str, offset: int = 0, hint: str = ""):
        super().__init__(message)
        self.message = message
        self.offset = offset
        self.hint = hint


# ---- syntax tree -------------------------------------------------------------------------

@dataclass
class Node:
    offset: int  # where the node starts in the host string


@dataclass
class Const(Node):
    value: Any


@dataclass
class Ref(Node):
    """`vars.x...` or `module.output...`; `path` holds the accessors after the root."""

    root: str
    name: str
    path: list = field(default_factory=list)  # str attribute names or index Nodes
    name_offset: int = 0


@dataclass
class Call(Node):
    func: str
    args: list


@dataclass
class ListLit(Node):
    items: list


@dataclass
class MapLit(Node):
    items: list  # [(key: str, value: Node)]


@dataclass
class Interp:
    """A string mixing text and expressions; evaluates to a string."""

    parts: list  # str | Node


@dataclass
class Literal:
    """A `((...))` Terraform expression, passed through untouched."""

    text: str


# ---- parsing ---------------------------------------------------------------------------

def parse_string(s: str):
    """The parsed form of a blueprint string: the str itself when it holds no expression,
    a Node when it is exactly one `$(...)`, an Interp when it mixes text and expressions,
    a Literal for `((...))`."""
    if "$(" not in s and "((" not in s:
        return s
    m = _LITERAL.match(s)
    if m:
        return Literal(m.group(1))
    parts: list = []
    buf: list[str] = []
    i = 0
    n = len(s)
    while i < n:
        if s.startswith("\\$(", i):
            buf.append("$(")
            i += 3
            continue
        if s.startswith("$(", i):
            end = _matching_paren(s, i + 1)
            inner_start = i + 2
            node = _Parser(s, inner_start, end).parse()
            if buf:
                parts.append("".join(buf))
                buf = []
            parts.append(node)
            i = end + 1
            continue
        buf.append(s[i])
        i += 1
    if buf:
        parts.append("".join(buf))
    if len(parts) == 1 and isinstance(parts[0], Node):
        return parts[0]
    if all(isinstance(p, str) for p in parts):
        return "".join(parts)
    return Interp(parts)


def _matching_paren(s: str, open_at: int) -> int:
    depth = 0
    i = open_at
    quote = None
    while i < len(s):
        c = s[i]
        if quote:
            if c == "\\":
                i += 2
                continue
            if c == quote:
                quote = None
        elif c == '"':
            quote = c
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    raise ExprError("unclosed '$(': missing ')'", open_at - 1,
                    "write \\$( for a literal '$(' (for example in a shell script)")


class _Parser:
    def __init__(self, s: str, start: int, end: int):
        self.s = s
        self.i = start
        self.end = end

    def fail(self, msg: str, at: int | None = None, hint: str = ""):
        raise ExprError(msg, self.i if at is None else at, hint)

    def ws(self):
        while self.i < self.end and self.s[self.i] in " \t\n":
            self.i += 1

    def peek(self) -> str:
        self.ws()
        return self.s[self.i] if self.i < self.end else ""

    def eat(self, ch: str):
        if self.peek() != ch:
            got = repr(self.s[self.i]) if self.i < self.end else "end of expression"
            self.fail(f"expected '{ch}', found {got}")
        self.i += 1

    def parse(self) -> Node:
        self.ws()
        if self.i >= self.end:
            self.fail("empty expression '$()'", self.i - 2)
        node = self.expr()
        self.ws()
        if self.i < self.end:
            self.fail(f"unexpected {self.s[self.i]!r} in expression")
        return node

    def expr(self) -> Node:
        c = self.peek()
        start = self.i
        if c == '"':
            return Const(start, self.string())
        if c == "[":
            self.i += 1
            items = []
            while self.peek() != "]":
                items.append(self.expr())
                if self.peek() == ",":
                    self.i += 1
                elif self.peek() != "]":
                    self.fail("expected ',' or ']' in list")
            self.i += 1
            return self.postfix(ListLit(start, items))
        if c == "{":
            self.i += 1
            items = []
            while self.peek() != "}":
                self.ws()
                if self.peek() == '"':
                    key = self.string()
                else:
                    m = _IDENT.match(self.s, self.i, self.end)
                    if not m:
                        self.fail("expected a key in map")
                    key = m.group(0)
                    self.i = m.end()
                if self.peek() not in ("=", ":"):
                    self.fail("expected '=' after map key")
                self.i += 1
                items.append((key, self.expr()))
                if self.peek() == ",":
                    self.i += 1
            self.i += 1
            return MapLit(start, items)
        if c == "(":
            self.i += 1
            node = self.expr()
            self.eat(")")
            return self.postfix(node)
        m = _NUMBER.match(self.s, self.i, self.end)
        if m and (c.isdigit() or c == "-"):
            self.i = m.end()
            txt = m.group(0)
            return Const(start, float(txt) if any(x in txt for x in ".eE") else int(txt))
        m = _IDENT.match(self.s, self.i, self.end)
        if not m:
            self.fail(f"unexpected {c!r} in expression" if c else "unexpected end of expression")
        name = m.group(0)
        self.i = m.end()
        if name in ("true", "false", "null") and self.peek() != ".":
            return Const(start, {"true": True, "false": False, "null": None}[name])
        if self.peek() == "(":
            self.i += 1
            args = []
            while self.peek() != ")":
                if not self.peek():
                    self.fail(f"unclosed call of {name}(")
                args.append(self.expr())
                if self.peek() == ",":
                    self.i += 1
                elif self.peek() != ")":
                    self.fail("expected ',' or ')' in function call")
            self.i += 1
            return self.postfix(Call(start, name, args))
        if self.i >= self.end or self.s[self.i] != ".":
            self.fail(f"'{name}' is not a reference: expected '{name}.<name>'", start,
                      f"for a variable write $(vars.{name}); for a shell command substitution, "
                      f"escape it as \\$({name}...) so the blueprint leaves it alone")
        self.i += 1
        m2 = _IDENT.match(self.s, self.i, self.end)
        if not m2:
            self.fail(f"expected a name after '{name}.'")
        ref = Ref(start, name, m2.group(0), [], m2.start())
        self.i = m2.end()
        return self.postfix(ref)

    def postfix(self, node: Node) -> Node:
        path = node.path if isinstance(node, Ref) else None
        while self.i < self.end and self.s[self.i] in ".[":
            if self.s[self.i] == ".":
                self.i += 1
                m = _IDENT.match(self.s, self.i, self.end) or re.compile(r"[0-9]+").match(self.s, self.i, self.end)
                if not m:
                    self.fail("expected a name after '.'")
                acc: Any = m.group(0)
                self.i = m.end()
            else:
                self.i += 1
                acc = self.expr()
                self.eat("]")
            if path is None:
                node = _Index(node.offset, node, [acc])
                path = node.path
            else:
                path.append(acc)
        return node

    def string(self) -> str:
        start = self.i
        self.i += 1  # opening quote
        out = []
        while self.i < self.end:
            c = self.s[self.i]
            if c == "\\" and self.i + 1 < self.end:
                nxt = self.s[self.i + 1]
                out.append({"n": "\n", "t": "\t", '"': '"', "\\": "\\"}.get(nxt, nxt))
                self.i += 2
                continue
            if c == '"':
                self.i += 1
                return "".join(out)
            out.append(c)
            self.i += 1
        self.fail("unterminated string", start)


@dataclass
class _Index(Node):
    """Accessors applied to a non-reference value, e.g. `merge(a, b).key`."""

    base: Node
    path: list


# ---- evaluation --------------------------------------------------------------------------

class Deferred:
    """A value only known when the cluster is deployed (a module output, a Terraform literal).

    Kept as text in the form Cluster Toolkit blueprints use, so the expanded blueprint
    still reads as a blueprint."""

    def __init__(self, text: str):
        self.text = text

    def __repr__(self):
        return f"Deferred({self.text!r})"

    def __eq__(self, other):
        return isinstance(other, Deferred) and other.text == self.text

    def __hash__(self):
        return hash(self.text)


def is_deferred(v) -> bool:
    if isinstance(v, Deferred):
        return True
    if isinstance(v, dict):
        return any(is_deferred(x) for x in v.values())
    if isinstance(v, list):
        return any(is_deferred(x) for x in v)
    return False


class Env:
    """What evaluation needs from the blueprint: resolve references and stage files."""

    def ref(self, node: Ref) -> Any:  # pragma: no cover - interface
        raise NotImplementedError

    def stage(self, path: str, node: Node) -> str:  # pragma: no cover - interface
        raise NotImplementedError


def _flatten(v):
    if isinstance(v, list):
        out = []
        for x in v:
            out.extend(_flatten(x))
        return out
    return [v]


def _merge(*maps):
    out: dict = {}
    for m in maps:
        if m is None:
            continue
        if not isinstance(m, dict):
            raise TypeError("merge() takes maps")
        out.update(m)
    return out


def _concat(*lists):
    out: list = []
    for lst in lists:
        if not isinstance(lst, list):
            raise TypeError("concat() takes lists")
        out.extend(lst)
    return out


def _join(sep, lst):
    return sep.join(_to_text(x) for x in lst)


FUNCTIONS: dict[str, Callable] = {
    "merge": _merge,
    "flatten": lambda v: _flatten(v),
    "jsonencode": lambda v: json.dumps(v, separators=(",", ":"), sort_keys=False),
    "concat": _concat,
    "join": _join,
    "lower": lambda s: s.lower(),
    "upper": lambda s: s.upper(),
    "length": lambda v: len(v),
    "tostring": lambda v: _to_text(v),
}


def _to_text(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return ""
    if isinstance(v, (dict, list)):
        return json.dumps(v)
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


def evaluate(parsed, env: Env):
    """Evaluate a parsed string (see parse_string) to a value; Deferred where unknown."""
    if isinstance(parsed, str):
        return parsed
    if isinstance(parsed, Literal):
        return Deferred(f"(({parsed.text}))")
    if isinstance(parsed, Interp):
        vals = [p if isinstance(p, str) else _eval(p, env) for p in parsed.parts]
        if any(is_deferred(v) for v in vals):
            return Deferred("".join(p.replace("$(", "\\$(") if isinstance(p, str) else _deferred_text(v)
                                    for p, v in zip(parsed.parts, vals)))
        for p, v in zip(parsed.parts, vals):
            if isinstance(v, (dict, list)):
                raise ExprError("a map or list cannot be interpolated into a string", p.offset,
                                "use the reference alone as the whole value, or jsonencode()")
        return "".join(_to_text(v) for v in vals)
    return _eval(parsed, env)


def _deferred_text(v) -> str:
    if isinstance(v, Deferred):
        return v.text
    if isinstance(v, str):
        return v
    return _to_text(v)


def _eval(node: Node, env: Env):
    if isinstance(node, Const):
        return node.value
    if isinstance(node, Ref):
        return env.ref(node)
    if isinstance(node, ListLit):
        return [_eval(x, env) for x in node.items]
    if isinstance(node, MapLit):
        return {k: _eval(v, env) for k, v in node.items}
    if isinstance(node, _Index):
        return access(_eval(node.base, env), node.path, env, node.offset)
    if isinstance(node, Call):
        if node.func == "ghpc_stage":
            if len(node.args) != 1:
                raise ExprError("ghpc_stage() takes one path", node.offset)
            p = _eval(node.args[0], env)
            if not isinstance(p, str):
                raise ExprError("ghpc_stage() takes a string path", node.offset)
            return env.stage(p, node)
        fn = FUNCTIONS.get(node.func)
        if fn is None:
            names = ["ghpc_stage", *FUNCTIONS]
            raise ExprError(f"unknown function '{node.func}'", node.offset,
                            did_you_mean(node.func, names) or f"known functions: {', '.join(names)}")
        args = [_eval(a, env) for a in node.args]
        if any(is_deferred(a) for a in args):
            return Deferred(f"(({node.func}(...)))")
        try:
            return fn(*args)
        except (TypeError, AttributeError, ValueError) as e:
            raise ExprError(f"{node.func}(): {e}", node.offset) from None
    raise ExprError("unsupported expression", node.offset)


def access(value, path: list, env: Env, offset: int, what: str = "value"):
    """Apply `.name` and `[index]` accessors to a concrete value."""
    for acc in path:
        if isinstance(value, Deferred):  # unknown until deployed: so is any part of it
            return value
        key = acc if isinstance(acc, str) else _eval(acc, env)
        if isinstance(value, dict):
            if isinstance(key, str) and key in value:
                value = value[key]
                continue
            raise ExprError(f"{what} has no key '{key}'", offset, did_you_mean(str(key), value.keys()))
        if isinstance(value, list):
            try:
                idx = int(key)
            except (TypeError, ValueError):
                raise ExprError(f"a list is indexed by a number, not '{key}'", offset) from None
            if not -len(value) <= idx < len(value):
                raise ExprError(f"index {idx} out of range (the list has {len(value)} items)", offset)
            value = value[idx]
            continue
        raise ExprError(f"cannot index into {type(value).__name__} with '{key}'", offset)
    return value


def references(parsed) -> list[Ref]:
    """Every reference in a parsed string, in order."""
    out: list[Ref] = []

    def walk(n):
        if isinstance(n, Ref):
            out.append(n)
            for acc in n.path:
                if isinstance(acc, Node):
                    walk(acc)
        elif isinstance(n, Interp):
            for p in n.parts:
                if not isinstance(p, str):
                    walk(p)
        elif isinstance(n, Call):
            for a in n.args:
                walk(a)
        elif isinstance(n, ListLit):
            for a in n.items:
                walk(a)
        elif isinstance(n, MapLit):
            for _, a in n.items:
                walk(a)
        elif isinstance(n, _Index):
            walk(n.base)
            for acc in n.path:
                if isinstance(acc, Node):
                    walk(acc)

    walk(parsed)
    return out
