"""Loading YAML with positions: every key, scalar and list item keeps file, line, column."""

import pytest

from ctk.blueprint.errors import BlueprintErrors, Pos
from ctk.blueprint.load import load_text

TEXT = """\
blueprint_name: demo
vars:
  zone: us-central1-a
  zones: [a, b]
deployment_groups:
- group: primary
  modules:
  - id: net
    source: modules/network/vpc
    settings:
      script: |
        echo one
        echo $(vars.zone)
"""


def test_positions_of_keys_scalars_and_items():
    d = load_text("bp.yaml", TEXT)
    assert d.pos(("vars", "zone")) == Pos("bp.yaml", 3, 9)
    assert d.key_pos(("vars", "zone")) == Pos("bp.yaml", 3, 3)
    assert d.pos(("vars", "zones", 1)) == Pos("bp.yaml", 4, 14)
    assert d.pos(("deployment_groups", 0, "modules", 0, "id")) == Pos("bp.yaml", 8, 9)


def test_position_inside_a_block_scalar():
    d = load_text("bp.yaml", TEXT)
    path = ("deployment_groups", 0, "modules", 0, "settings", "script")
    s = d.value["deployment_groups"][0]["modules"][0]["settings"]["script"]
    assert d.pos_in(path, s.index("$(")) == Pos("bp.yaml", 13, 14)


def test_yaml_12_booleans_only():
    d = load_text("x.yaml", "a: yes\nb: true\nc: on\nd: 0o17\ne: null\n")
    assert d.value == {"a": "yes", "b": True, "c": "on", "d": 15, "e": None}


@pytest.mark.parametrize("text,line,col,msg", [
    ("a: 1\na: 2\n", 2, 1, "duplicate key 'a'"),
    ("a:\n\tb: 1\n", 2, 1, "tab character"),
    ("", 1, 1, "empty"),
    ("# only a comment\n", 1, 1, "empty"),
    ("a: [1, 2\n", 1, 4, "this '[' is never closed"),
    # PyYAML gives up a line late on these; the error is at the mistake, in plain words
    ("a:\n  b c\n  d: 1\n", 2, 3, "'b c' is neither 'key: value' nor a list item"),
    ("a:\n  b: \"abc\n  d: 1\n", 2, 6, 'this " is never closed'),
    ("a:\n  b: {c: 1\n  d: 1\n", 2, 6, "this '{' is never closed"),
    ("a:\n  b: 1\n    c: 2\n", 3, 5, "bad indentation: this line is indented 4 spaces, more than line 2"),
    ("a:\n  b:\n c: 1\n", 3, 2, "bad indentation: this line is indented 1 space, which lines up with no key"),
    ("a: b: c\n", 1, 5, "a second ':' on this line"),
    ("a:\n  b: 1\n  - c\n", 3, 3, "a list item ('- ') among the keys of a mapping"),
    ("a:\n  - b\n  c: 1\n", 3, 3, "a 'key: value' among the items ('- ') of a list"),
    ("a:\n  b: [x]]\n", 2, 9, "a ']' that closes nothing"),
    ("a: @x\n", 1, 4, "'@' cannot start a plain value"),
    ("a: 1\n---\nb: 2\n", 3, 1, "more than one YAML document"),
    ("a: &x [*x]\n", 1, 4, ""),
])
def test_load_errors(text, line, col, msg):
    with pytest.raises(BlueprintErrors) as e:
        load_text("f.yaml", text)
    err = e.value.errors[0]
    assert (err.pos.line, err.pos.col) == (line, col), err
    assert msg in err.message


def test_alias_bomb_is_refused_quickly():
    lines = ['a0: &a0 ["x","x","x","x","x","x","x","x","x","x"]']
    for i in range(1, 10):
        lines.append(f"a{i}: &a{i} [" + ",".join([f"*a{i-1}"] * 10) + "]")
    with pytest.raises(BlueprintErrors) as e:
        load_text("bomb.yaml", "\n".join(lines) + "\n")
    assert "more than" in e.value.errors[0].message


def test_invalid_utf8_names_line_and_column(tmp_path):
    from ctk.blueprint.load import load_file
    p = tmp_path / "bad.yaml"
    p.write_bytes(b"a: 1\nb: caf\xff\n")
    with pytest.raises(BlueprintErrors) as e:
        load_file(str(p))
    assert e.value.errors[0].pos.line == 2 and e.value.errors[0].pos.col == 7
