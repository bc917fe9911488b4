"""Unit tests for ctk.render.hostlist."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctk.render.hostlist import MAX_EXPAND, compress, expand

# ------------------------------------------------------------------------- compress


@pytest.mark.parametrize(
    "names, expected",
    [
        ([], ""),
        (["x-1"], "x-1"),
        ([f"a3mega-{i}" for i in range(128)], "a3mega-[0-127]"),
        (["n-0", "n-1", "n-3", "x-1"], "n-[0-1,3],x-1"),
        (["n-007", "n-008"], "n-[007-008]"),
        (["n-0", "n-1"], "n-[0-1]"),
        (["n-9", "n-10"], "n-[9-10]"),  # unpadded ranges may change width
        (["n-08", "n-09", "n-10", "n-11"], "n-[08-11]"),  # padded width 2 reaches 10
        (["n-99", "n-100"], "n-[99-100]"),
        (["n-099", "n-100"], "n-[099-100]"),
        (["n-7", "n-07"], "n-[7,07]"),  # same number, different names
        (["n-09", "n-10", "n-9"], "n-[09-10,9]"),
        (["login", "n-1"], "login,n-1"),
        (["a", "a"], "a,a"),
        (["123", "124"], "123,124"),  # purely numeric names are not bracketed
        (["rack1-node-1", "rack1-node-2"], "rack1-node-[1-2]"),
    ],
)
def test_compress(names, expected):
    assert compress(names) == expected


def test_compress_keeps_order():
    # Same output as `scontrol show hostlist` for these inputs (checked by hand against
    # Slurm 22.05, and in tests/integration/test_slurmctld_accepts.py).
    assert compress(["n-3", "n-1", "n-07", "n-7", "n-8", "x", "n-09", "n-10"]) == "n-[3,1,07,7-8],x,n-[09-10]"
    assert compress(["n-3", "n-1", "m-2", "n-2"]) == "n-[3,1],m-2,n-2"
    assert compress(["n-1", "n-1"]) == "n-[1,1]"


def test_compress_sorted():
    assert compress(["n-3", "n-1", "m-2", "n-2"], sort=True) == "n-[1-3],m-2"
    assert compress(["n-1", "n-1", "n-0"], sort=True) == "n-[0-1]"
    assert compress(["b", "a", "b"], sort=True) == "b,a"
    # mixed padding: runs are kept apart where the width differs
    assert compress(["n-10", "n-9", "n-09"], sort=True) == "n-[9-10,09]"
    assert compress(["n-8", "n-08", "n-9", "n-09"], sort=True) == "n-[8-9,08-09]"


@pytest.mark.parametrize("bad", ["", "a,b", "n-[1]", "a b", "a]", "x\n"])
def test_compress_rejects_bad_names(bad):
    with pytest.raises(ValueError):
        compress(["ok-1", bad])


def test_compress_rejects_non_strings():
    with pytest.raises(TypeError):
        compress(["n-1", 2])  # type: ignore[list-item]


# --------------------------------------------------------------------------- expand


@pytest.mark.parametrize(
    "expr, expected",
    [
        ("", []),
        ("  ", []),
        ("x-1", ["x-1"]),
        ("a-[0-2,5],b-1", ["a-0", "a-1", "a-2", "a-5", "b-1"]),
        ("n-[007-008]", ["n-007", "n-008"]),
        ("n-[08-11]", ["n-08", "n-09", "n-10", "n-11"]),
        ("n-[9-10]", ["n-9", "n-10"]),
        ("n-[8-011]", ["n-8", "n-9", "n-10", "n-11"]),  # width comes from the lower bound
        ("n-[3]", ["n-3"]),
        ("n-[3,1]", ["n-3", "n-1"]),
        ("a[1-2]b[3-4]", ["a1b3", "a1b4", "a2b3", "a2b4"]),
        ("r[1-2]-n", ["r1-n", "r2-n"]),
        ("[1-2]", ["1", "2"]),
        (" n-[0-1] ", ["n-0", "n-1"]),
    ],
)
def test_expand(expr, expected):
    assert expand(expr) == expected


@pytest.mark.parametrize(
    "expr, message",
    [
        ("n-[0-1", "never closed"),
        ("n-0-1]", "unmatched ']'"),
        ("n-[[0]]", "nested"),
        ("n-[]", "empty brackets"),
        ("n-[a]", "not a number"),
        ("n-[1-]", "not a number"),
        ("n-[-1]", "not a number"),
        ("n-[1,,2]", "not a number"),
        ("n-[3-1]", "backwards"),
        ("a,,b", "empty host name"),
        ("a,", "empty host name"),
        (",a", "empty host name"),
        ("a b", "whitespace"),
        ("n-[0-1] ,b", "whitespace"),
    ],
)
def test_expand_rejects_malformed(expr, message):
    with pytest.raises(ValueError, match=message) as exc:
        expand(expr)
    assert repr(expr.strip()) in str(exc.value)  # the message names the input


def test_expand_refuses_huge_lists():
    with pytest.raises(ValueError, match="more than"):
        expand(f"n-[0-{MAX_EXPAND}]")
    with pytest.raises(ValueError, match="more than"):
        expand("a[0-1023]b[0-1023]c[0-1]")


def test_expand_rejects_non_strings():
    with pytest.raises(TypeError):
        expand(["n-1"])  # type: ignore[arg-type]


# ------------------------------------------------------------------------ properties

_prefix = st.text(alphabet="abcxyz-_.", min_size=1, max_size=6)


@st.composite
def _host(draw) -> str:
    prefix = draw(_prefix)
    if draw(st.booleans()):
        n = draw(st.integers(min_value=0, max_value=1200))
        width = draw(st.integers(min_value=1, max_value=5))
        return prefix + str(n).zfill(width)
    return prefix


@st.composite
def _node_block(draw) -> list[str]:
    """A run like a nodeset's names: prefix-start .. prefix-(start+count-1)."""
    prefix = draw(_prefix) + "-"
    start = draw(st.integers(min_value=0, max_value=200))
    count = draw(st.integers(min_value=1, max_value=50))
    width = draw(st.integers(min_value=1, max_value=4))
    return [f"{prefix}{str(i).zfill(width)}" for i in range(start, start + count)]


@settings(max_examples=400, deadline=None)
@given(st.lists(_host(), max_size=40))
def test_round_trip_any_list(names):
    assert expand(compress(names)) == names


@settings(max_examples=300, deadline=None)
@given(st.lists(_host(), max_size=40))
def test_round_trip_sorted(names):
    out = expand(compress(names, sort=True))
    assert set(out) == set(names)
    assert len(out) == len(set(names))
    # sorting is canonical: compressing again changes nothing
    assert compress(out, sort=True) == compress(names, sort=True)


@settings(max_examples=200, deadline=None)
@given(st.lists(_node_block(), min_size=1, max_size=5))
def test_node_blocks_compress_to_one_range_each(blocks):
    names = [n for b in blocks for n in b]
    expr = compress(names)
    assert expand(expr) == names
    # each contiguous block becomes at most one item (a range, or one name)
    assert len(expr.split(",")) <= len(blocks)


@settings(max_examples=200, deadline=None)
@given(st.lists(_host(), max_size=30))
def test_expand_is_left_inverse_on_expressions(names):
    expr = compress(names)
    assert compress(expand(expr)) == expr
