"""Slurm hostlist expressions: ``["n-0", "n-1", "n-3"]`` <-> ``"n-[0-1,3]"``.

Two functions:

* :func:`compress` turns a list of host names into one expression.  By default it keeps
  the input order exactly (like ``scontrol show hostlist``): neighbouring names that share
  a prefix go into one bracket, and consecutive numbers become ranges.  With
  ``sort=True`` it first groups names by prefix (prefixes in order of first appearance),
  sorts each group numerically and drops duplicates, which gives the shortest form.
* :func:`expand` turns an expression back into the list of names, in written order.

Zero padding is kept: the width of a range is the width of its lower bound, so
``"n-[007-008]"`` means ``n-007, n-008`` and ``"n-[9-10]"`` means ``n-9, n-10``.
``expand(compress(names)) == names`` holds for every list of valid names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["compress", "expand", "MAX_EXPAND"]

# expand() refuses to produce more names than this (a typo such as "n-[0-99999999]"
# would otherwise eat all memory).
MAX_EXPAND = 1 << 20

_SPECIAL = set(",[]")
_TRAILING_DIGITS = re.compile(r"^(.*?)(\d+)$")
_RANGE_ITEM = re.compile(r"^(\d+)(?:-(\d+))?$")


# ----------------------------------------------------------------------------- compress


@dataclass
class _Run:
    """A run of consecutive numbers written with the same zero padding."""

    lo: int
    hi: int
    width: int  # digits of the lower bound; numbers are written str(n).zfill(width)

    def accepts(self, n: int, digits: str) -> bool:
        return n == self.hi + 1 and str(n).zfill(self.width) == digits

    def render(self) -> str:
        lo = str(self.lo).zfill(self.width)
        if self.lo == self.hi:
            return lo
        return f"{lo}-{str(self.hi).zfill(self.width)}"


def _split_name(name: str) -> tuple[str, int, str] | None:
    """("n-", 7, "007") for "n-007"; None when the name has no usable numeric suffix."""
    m = _TRAILING_DIGITS.match(name)
    if m is None or m.group(1) == "":
        # A purely numeric name is left as it is: "[1-2]" without a prefix is not
        # something Slurm writes, so do not produce it.
        return None
    return m.group(1), int(m.group(2)), m.group(2)


def _check_name(name: object) -> str:
    if not isinstance(name, str):
        raise TypeError(f"host name must be a str, not {type(name).__name__}: {name!r}")
    if name == "":
        raise ValueError("empty host name")
    bad = sorted({c for c in name if c in _SPECIAL or c.isspace()})
    if bad:
        raise ValueError(f"host name {name!r} contains characters not allowed in a hostlist: {bad!r}")
    return name


def _runs_in_order(items: list[tuple[int, str]]) -> list[_Run]:
    """Merge only neighbours, keeping the given order."""
    runs: list[_Run] = []
    for n, digits in items:
        if runs and runs[-1].accepts(n, digits):
            runs[-1].hi = n
        else:
            runs.append(_Run(n, n, len(digits)))
    return runs


def _runs_sorted(items: list[tuple[int, str]]) -> list[_Run]:
    """Sort numerically, drop duplicates, then merge."""
    unique = sorted(set(items), key=lambda it: (it[0], len(it[1])))
    runs: list[_Run] = []
    for n, digits in unique:
        # Extend any open run (several may be open when paddings are mixed, e.g.
        # "n-9", "n-09", "n-10"); the first one that fits wins, which is deterministic.
        for run in runs:
            if run.accepts(n, digits):
                run.hi = n
                break
        else:
            runs.append(_Run(n, n, len(digits)))
    runs.sort(key=lambda r: (r.lo, r.width))
    return runs


def _render_group(prefix: str, runs: list[_Run]) -> str:
    if len(runs) == 1 and runs[0].lo == runs[0].hi:
        return prefix + runs[0].render()
    return f"{prefix}[{','.join(r.render() for r in runs)}]"


def compress(names: list[str], *, sort: bool = False) -> str:
    """Compress host names into a Slurm hostlist expression.

    >>> compress(["n-0", "n-1", "n-3", "x-1"])
    'n-[0-1,3],x-1'
    >>> compress(["n-3", "n-1", "n-2"])
    'n-[3,1-2]'
    >>> compress(["n-3", "n-1", "n-2"], sort=True)
    'n-[1-3]'

    Raises ValueError for empty names or names with ``,``, ``[``, ``]`` or whitespace.
    An empty list gives an empty string.
    """
    checked = [_check_name(n) for n in names]

    if sort:
        by_prefix: dict[str, list[tuple[int, str]]] = {}
        literals: set[str] = set()
        order: list[tuple[str, str]] = []  # ("p", prefix) or ("l", literal)
        for name in checked:
            parts = _split_name(name)
            if parts is None:
                if name not in literals:
                    literals.add(name)
                    order.append(("l", name))
                continue
            prefix, n, digits = parts
            if prefix not in by_prefix:
                by_prefix[prefix] = []
                order.append(("p", prefix))
            by_prefix[prefix].append((n, digits))
        out = []
        for kind, key in order:
            if kind == "l":
                out.append(key)
            else:
                out.append(_render_group(key, _runs_sorted(by_prefix[key])))
        return ",".join(out)

    out = []
    cur_prefix: str | None = None
    cur_items: list[tuple[int, str]] = []

    def flush() -> None:
        if cur_prefix is not None:
            out.append(_render_group(cur_prefix, _runs_in_order(cur_items)))

    for name in checked:
        parts = _split_name(name)
        if parts is None:
            flush()
            cur_prefix, cur_items = None, []
            out.append(name)
            continue
        prefix, n, digits = parts
        if prefix != cur_prefix:
            flush()
            cur_prefix, cur_items = prefix, []
        cur_items.append((n, digits))
    flush()
    return ",".join(out)


# ------------------------------------------------------------------------------- expand


def _split_top_level(expr: str) -> list[tuple[int, str]]:
    """Split on commas outside brackets; returns (offset, term) pairs."""
    terms: list[tuple[int, str]] = []
    depth = 0
    start = 0
    for i, c in enumerate(expr):
        if c == "[":
            if depth:
                raise ValueError(f"malformed hostlist {expr!r}: nested '[' at position {i}")
            depth = 1
        elif c == "]":
            if not depth:
                raise ValueError(f"malformed hostlist {expr!r}: unmatched ']' at position {i}")
            depth = 0
        elif c == "," and not depth:
            terms.append((start, expr[start:i]))
            start = i + 1
        elif c.isspace():
            raise ValueError(f"malformed hostlist {expr!r}: whitespace at position {i}")
    if depth:
        raise ValueError(f"malformed hostlist {expr!r}: '[' opened but never closed")
    terms.append((start, expr[start:]))
    return terms


def _parse_bracket(expr: str, body: str, offset: int) -> list[str]:
    if body == "":
        raise ValueError(f"malformed hostlist {expr!r}: empty brackets at position {offset}")
    values: list[str] = []
    for item in body.split(","):
        m = _RANGE_ITEM.match(item)
        if m is None:
            raise ValueError(
                f"malformed hostlist {expr!r}: {item!r} (at position {offset}) is not "
                "a number or a range like 0-7"
            )
        lo_s, hi_s = m.group(1), m.group(2)
        lo = int(lo_s)
        hi = lo if hi_s is None else int(hi_s)
        if hi < lo:
            raise ValueError(f"malformed hostlist {expr!r}: range {item!r} goes backwards")
        if hi - lo + 1 > MAX_EXPAND:
            raise ValueError(f"hostlist {expr!r}: range {item!r} has more than {MAX_EXPAND} hosts")
        width = len(lo_s)
        values.extend(str(n).zfill(width) for n in range(lo, hi + 1))
    return values


def _expand_term(expr: str, term: str, offset: int) -> list[str]:
    if term == "":
        raise ValueError(f"malformed hostlist {expr!r}: empty host name at position {offset}")
    # Alternate literal text and bracket groups; several groups give their product
    # ("r[1-2]n[1-2]" -> r1n1, r1n2, r2n1, r2n2), leftmost group varying slowest.
    names = [""]
    pos = 0
    while pos < len(term):
        open_at = term.find("[", pos)
        if open_at < 0:
            literal, pos = term[pos:], len(term)
            names = [n + literal for n in names]
            continue
        literal = term[pos:open_at]
        close_at = term.index("]", open_at)  # balanced: checked by _split_top_level
        values = _parse_bracket(expr, term[open_at + 1 : close_at], offset + open_at)
        if len(names) * len(values) > MAX_EXPAND:
            raise ValueError(f"hostlist {expr!r} expands to more than {MAX_EXPAND} hosts")
        names = [n + literal + v for n in names for v in values]
        pos = close_at + 1
    return names


def expand(expr: str) -> list[str]:
    """Expand a Slurm hostlist expression into host names, in written order.

    >>> expand("a-[0-2,5],b-1")
    ['a-0', 'a-1', 'a-2', 'a-5', 'b-1']
    >>> expand("n-[007-008]")
    ['n-007', 'n-008']

    Leading and trailing whitespace is ignored and an empty expression gives ``[]``.
    Raises ValueError on malformed input (unbalanced or nested brackets, empty names,
    non-numeric or backwards ranges, whitespace inside) or when the result would have
    more than :data:`MAX_EXPAND` names.
    """
    if not isinstance(expr, str):
        raise TypeError(f"hostlist must be a str, not {type(expr).__name__}")
    expr = expr.strip()
    if expr == "":
        return []
    out: list[str] = []
    for offset, term in _split_top_level(expr):
        out.extend(_expand_term(expr, term, offset))
        if len(out) > MAX_EXPAND:
            raise ValueError(f"hostlist {expr!r} expands to more than {MAX_EXPAND} hosts")
    return out
