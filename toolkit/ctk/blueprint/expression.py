"""Cluster Toolkit expressions inside blueprint strings.

`$(vars.x)`, `$(module_id.output)`, indexing (`$(m.nodes[0].ip)`), interpolation
(`"$(a.name)_$(vars.zone)"`), escapes (`\\$(`), literals `((terraform))`, and function calls:
where each function may be called, and which ones ctk computes, is in functions.py. A call in
a Terraform module's setting stays an expression (a Lazy: its text for `ctk expand` and
gcluster, computed only when ctk needs the value).

Parsing is pure; evaluation is done by the caller through an `Env` (see expand.py).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NoReturn

from .errors import did_you_mean
from .functions import (
    COMPUTED,
    GCLUSTER_FUNCTIONS,
    TERRAFORM_FUNCTIONS,
    CannotCompute,
    quoted,
    to_text,
)

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

    def fail(self, msg: str, at: int | None = None, hint: str = "") -> NoReturn:
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
            entries: list[tuple[str, Node]] = []
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
                entries.append((key, self.expr()))
                if self.peek() == ",":
                    self.i += 1
            self.i += 1
            return MapLit(start, entries)
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
                width = {"u": 4, "U": 8}.get(nxt, 0)
                digits = self.s[self.i + 2:self.i + 2 + width]
                if width and len(digits) == width and all(d in "0123456789abcdefABCDEF" for d in digits):
                    out.append(chr(int(digits, 16)))  # HCL's \uNNNN and \UNNNNNNNN
                    self.i += 2 + width
                    continue
                out.append({"n": "\n", "r": "\r", "t": "\t", '"': '"', "\\": "\\"}.get(nxt, nxt))
                self.i += 2
                continue
            if self.s.startswith(("$${", "%%{"), self.i):  # HCL's escapes of template sequences
                out.append(c + "{")
                self.i += 3
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
        return f"{type(self).__name__}({self.text!r})"

    def __eq__(self, other):
        return isinstance(other, Deferred) and other.text == self.text

    def __hash__(self):
        return hash(self.text)

    @property
    def expr(self) -> str | None:
        """The text as an expression that can stand inside another `$(...)`, when it is one."""
        t = self.text
        if t.startswith("$(") and t.endswith(")"):
            try:
                if isinstance(parse_string(t), Node):
                    return t[2:-1]
            except ExprError:
                pass
        return None


class Lazy(Deferred):
    """A function call kept as an expression (for gcluster and `ctk expand`), which ctk computes
    when it needs the value: `compute()` gives the value, or the Lazy itself while it depends on
    a value known only when deployed, or raises ExprError (at an offset in the same string).
    `where` is the (document, path) of the string it came from, set by the evaluator."""

    def __init__(self, text: str, offset: int, compute: Callable[[], Any]):
        super().__init__(text)
        self.offset = offset
        self._compute = compute
        self.where: tuple | None = None

    def compute(self):
        if not hasattr(self, "_value"):
            v = self._compute()
            if v is self:
                return v  # still deferred: try again later
            self._value = v
        return self._value


def is_deferred(v) -> bool:
    if isinstance(v, Deferred):
        return True
    if isinstance(v, dict):
        return any(is_deferred(x) for x in v.values())
    if isinstance(v, list):
        return any(is_deferred(x) for x in v)
    return False


def has_lazy(v) -> bool:
    if isinstance(v, Lazy):
        return True
    if isinstance(v, dict):
        return any(has_lazy(x) for x in v.values())
    if isinstance(v, list):
        return any(has_lazy(x) for x in v)
    return False


def resolve(v, on_error: Callable[[Lazy, ExprError], None] | None = None):
    """`v` with each Lazy in it computed where it can be; one that fails is left in place and
    reported to `on_error` (without it, the ExprError is raised)."""
    if isinstance(v, Lazy):
        try:
            return v.compute()
        except ExprError as e:
            if on_error is None:
                raise
            on_error(v, e)
            return v
    if isinstance(v, dict):
        return {k: resolve(x, on_error) for k, x in v.items()}
    if isinstance(v, list):
        return [resolve(x, on_error) for x in v]
    return v


# Where an expression is evaluated decides which functions it may call (see functions.py).
VARS, PACKER, TERRAFORM, CTK = "vars", "packer", "terraform", "ctk"


class Env:
    """What evaluation needs from the blueprint: resolve references, stage and read files, and
    the context of the string (VARS, PACKER, TERRAFORM or CTK)."""

    @property
    def context(self) -> str:
        """VARS unless a subclass knows better."""
        return VARS

    def ref(self, node: Ref) -> Any:  # pragma: no cover - interface
        raise NotImplementedError

    def stage(self, path: str, node: Node) -> str:  # pragma: no cover - interface
        raise NotImplementedError

    def read_file(self, path: str, node: Node) -> str:  # pragma: no cover - interface
        raise NotImplementedError

    def warn(self, message: str, offset: int, hint: str = "") -> None:
        pass


def evaluate(parsed, env: Env):
    """Evaluate a parsed string (see parse_string) to a value; Deferred where unknown."""
    if isinstance(parsed, str):
        return parsed
    if isinstance(parsed, Literal):
        return Deferred(f"(({parsed.text}))")
    if isinstance(parsed, Interp):
        vals = [p if isinstance(p, str) else _eval(p, env) for p in parsed.parts]
        if any(is_deferred(v) for v in vals):
            text = "".join(p.replace("$(", "\\$(") if isinstance(p, str) else _deferred_text(v)
                           for p, v in zip(parsed.parts, vals))
            if not any(has_lazy(v) for v in vals):
                return Deferred(text)
            first = next(p for p, v in zip(parsed.parts, vals) if not isinstance(p, str) and has_lazy(v))
            lazy: Lazy = Lazy(text, first.offset, lambda: _join_parts(parsed.parts, [resolve(v) for v in vals], lazy))
            return lazy
        return _join_parts(parsed.parts, vals)
    return _eval(parsed, env)


def _join_parts(parts, vals, deferred=None):
    if deferred is not None and any(is_deferred(v) for v in vals):
        return deferred
    for p, v in zip(parts, vals):
        if isinstance(v, (dict, list)):
            raise ExprError("a map or list cannot be interpolated into a string", p.offset,
                            "use the reference alone as the whole value, or jsonencode()")
    return "".join(to_text(v) for v in vals)


def _deferred_text(v) -> str:
    if isinstance(v, Deferred):
        return v.text
    if isinstance(v, str):
        return v.replace("$(", "\\$(")
    if is_deferred(v):
        return "$(" + _literal(v) + ")"
    return to_text(v)


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
        base = _eval(node.base, env)
        keys = [acc if isinstance(acc, str) else _eval(acc, env) for acc in node.path]
        if not has_lazy(base) and not any(has_lazy(k) for k in keys):
            return access(base, keys, env, node.offset)
        text = "$(" + _arg_text(node.base, base) + "".join(
            f".{k}" if isinstance(k, str) and _IDENT.fullmatch(k) else f"[{_arg_text(acc, k)}]"
            for acc, k in zip(node.path, keys)) + ")"
        lazy: Lazy = Lazy(text, node.offset, lambda: _access_later(resolve(base), [resolve(k) for k in keys],
                                                                   env, node.offset, lazy))
        return lazy
    if isinstance(node, Call):
        return _call(node, env)
    raise ExprError("unsupported expression", node.offset)


def _access_later(base, keys, env, offset, lazy):
    if is_deferred(base) or any(is_deferred(k) for k in keys):
        return lazy
    return access(base, keys, env, offset)


def _call(node: Call, env: Env):
    name = node.func
    if name == "ghpc_stage":
        if len(node.args) != 1:
            raise ExprError("ghpc_stage() takes one path", node.offset)
        p = _eval(node.args[0], env)
        if not isinstance(p, str):
            raise ExprError("ghpc_stage() takes a string path", node.offset)
        return env.stage(p, node)
    ctx = env.context
    if ctx in (VARS, PACKER) and name not in GCLUSTER_FUNCTIONS:
        where = "vars" if ctx == VARS else "the settings of a Packer module"
        raise ExprError(f"unsupported function '{name}' in {where}", node.offset,
                        did_you_mean(name, GCLUSTER_FUNCTIONS) or
                        f"{where} may call only merge, flatten and ghpc_stage (gcluster evaluates them "
                        "itself); Terraform's other functions work in the settings of Terraform modules")
    if ctx == CTK and name not in COMPUTED:
        raise _not_computed(node)
    args = [_eval(a, env) for a in node.args]
    eager = ctx != TERRAFORM or name in GCLUSTER_FUNCTIONS
    if eager and not any(is_deferred(a) for a in args):
        return _apply(node, args, env)
    if ctx == TERRAFORM and name not in TERRAFORM_FUNCTIONS and name not in COMPUTED:
        env.warn(f"'{name}' is not a Terraform function: Terraform will refuse this setting", node.offset,
                 did_you_mean(name, TERRAFORM_FUNCTIONS) or "see Terraform's list of functions")
    text = f"$({_call_text(node, args)})"
    lazy: Lazy = Lazy(text, node.offset, lambda: _compute_call(node, args, env, lazy))
    return lazy


def _compute_call(node: Call, args: list, env: Env, lazy: Lazy):
    vals = [resolve(a) for a in args]
    if any(is_deferred(v) for v in vals):
        return lazy  # known only when deployed
    if node.func not in COMPUTED:
        raise _not_computed(node)
    return _apply(node, vals, env)


def _not_computed(node: Call) -> ExprError:
    name = node.func
    if name in TERRAFORM_FUNCTIONS:
        return CannotEvaluate(f"ctk cannot evaluate {name}() for this target", node.offset,
                              "ctk computes " + ", ".join(sorted(COMPUTED)) + " itself; give the value "
                              "directly, or compute it with those", name)
    return CannotEvaluate(f"unknown function '{name}'", node.offset,
                          did_you_mean(name, sorted(COMPUTED) + ["ghpc_stage"]) or
                          did_you_mean(name, TERRAFORM_FUNCTIONS) or "it is not a Terraform function either",
                          name)


class CannotEvaluate(ExprError):
    """A call ctk does not compute (`func`), where it needs the value."""

    def __init__(self, message: str, offset: int, hint: str, func: str):
        super().__init__(message, offset, hint)
        self.func = func


def _apply(node: Call, args: list, env: Env):
    name = node.func
    try:
        if name == "file":
            if len(args) != 1 or not isinstance(args[0], str):
                raise TypeError("takes one path")
            return env.read_file(args[0], node)
        fn = COMPUTED[name]
        assert fn is not None  # only `file` has none, and it was handled above
        return fn(*args)
    except CannotCompute as e:
        raise CannotEvaluate(f"ctk cannot evaluate {e} for this target", node.offset,
                             "give the value directly", name) from None
    except (TypeError, AttributeError, ValueError) as e:
        raise ExprError(f"{name}(): {e}", node.offset) from None


# ---- back to blueprint text -------------------------------------------------------------

class _NoLiteral(Exception):
    pass


def _literal(v) -> str:
    """A value written as a blueprint expression (HCL syntax)."""
    if isinstance(v, Deferred):
        if v.expr is None:
            raise _NoLiteral
        return v.expr
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return _quote(v)
    if isinstance(v, list):
        return "[" + ", ".join(_literal(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{_key(str(k))} = {_literal(x)}" for k, x in v.items()) + "}"
    raise _NoLiteral


def _quote(s: str) -> str:
    # HCL reads ${ and %{ in a string as a template: written $${ and %%{
    return quoted(s).replace("${", "$${").replace("%{", "%%{")


def _key(k: str) -> str:
    return k if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k) else _quote(k)


def _arg_text(node: Node, value) -> str:
    """An argument as blueprint text: its value where that can be written, else its source."""
    try:
        return _literal(value)
    except _NoLiteral:
        return unparse(node)


def _call_text(node: Call, args: list) -> str:
    return f"{node.func}({', '.join(_arg_text(a, v) for a, v in zip(node.args, args))})"


def unparse(node: Node) -> str:
    """A syntax tree back to blueprint expression text."""
    if isinstance(node, Const):
        return _literal(node.value)
    if isinstance(node, Ref):
        return f"{node.root}.{node.name}" + _accessors(node.path)
    if isinstance(node, Call):
        return f"{node.func}({', '.join(unparse(a) for a in node.args)})"
    if isinstance(node, ListLit):
        return "[" + ", ".join(unparse(x) for x in node.items) + "]"
    if isinstance(node, MapLit):
        return "{" + ", ".join(f"{_key(k)} = {unparse(v)}" for k, v in node.items) + "}"
    if isinstance(node, _Index):
        return unparse(node.base) + _accessors(node.path)
    raise _NoLiteral


def _accessors(path: list) -> str:
    return "".join(f".{acc}" if isinstance(acc, str) and _IDENT.fullmatch(acc) else
                   f"[{acc}]" if isinstance(acc, str) else f"[{unparse(acc)}]" for acc in path)


def access(value, path: list, env: Env, offset: int, what: str = "value"):
    """Apply `.name` and `[index]` accessors to a concrete value."""
    for acc in path:
        if isinstance(value, Deferred):  # unknown until deployed: so is any part of it
            return value
        key = _eval(acc, env) if isinstance(acc, Node) else acc
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
