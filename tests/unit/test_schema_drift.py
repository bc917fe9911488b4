"""ctk's hand-written schemas of Cluster Toolkit modules against CT's own module interfaces.

The `variable` and `output` blocks of each module in ../shared/fixtures/cluster-toolkit (CT
v1.95.0) are read with python-hcl2 and compared with ctk.modules.cluster_toolkit: input names
both ways, output names, required (no default), types (simplified as ctk spells them) and
literal defaults. A change in CT's interface shows up here as a failing test, naming the module,
the variable, ctk's value and CT's.

python-hcl2 8.x returns a block's label quoted ('"name"'), a string literal quoted
('"pd-ssd"'), and any other expression as "${...}" (a type such as map(string) included;
a bare keyword type such as string comes back as it is).
"""

from __future__ import annotations

import glob
import json
import os
import re

import hcl2  # python-hcl2, from the 'test' extra: it reads CT's HCL
import pytest

from conftest import FIXTURES
from ctk.modules import cluster_toolkit as ct

pytestmark = pytest.mark.ct_fixtures

# Kinds whose every input ctk declares: the drift test checks their inputs both ways.
FULL = [ct.NODESET, ct.NODESET_DYNAMIC, ct.NODESET_TPU, ct.PARTITION, ct.CONTROLLER, ct.LOGIN,
        ct.STARTUP_SCRIPT, ct.CUSTOM_IMAGE, ct.VPC]
FULL_SOURCES = [k.source for k in FULL]

# The controller declares its VM's variables in variables_controller_instance.tf, a file the
# fixtures do not carry. Until they do, these names (that file's variables at v1.95.0) are the
# only inputs ctk may declare beyond the controller's variables.tf, and only their names are
# checked. With the file in the fixtures, it is read like the others and this list is unused.
NOT_IN_FIXTURES = {
    ct.CONTROLLER.source: ("variables_controller_instance.tf", frozenset({
        "additional_disks", "additional_networks", "advanced_machine_features", "allow_automatic_updates",
        "bandwidth_tier", "can_ip_forward", "controller_network_attachment", "controller_project_id",
        "disable_controller_public_ips", "disable_smt", "disk_auto_delete", "disk_encryption_key",
        "disk_encryption_key_service_account", "disk_labels", "disk_resource_manager_tags", "disk_size_gb",
        "disk_type", "enable_confidential_vm", "enable_controller_public_ips", "enable_oslogin",
        "enable_shielded_vm", "enable_smt", "guest_accelerator", "instance_image", "instance_image_custom",
        "instance_template", "labels", "machine_type", "metadata", "min_cpu_platform", "munge_mount",
        "on_host_maintenance", "preemptible", "resource_manager_tags", "service_account",
        "service_account_email", "service_account_scopes", "shielded_instance_config", "slurm_key_mount",
        "static_ips", "subnetwork_self_link", "subnetwork_stack_type", "tags",
    })),
}

# Variables whose CT default is an expression, not a literal: their default is not compared.
# Keep this explicit, so that a default turning into an expression is seen, not skipped quietly.
EXPRESSION_DEFAULTS: dict[str, set[str]] = {}


class _Expression(Exception):
    """A default that is not a literal."""


def _label(key: str) -> str:
    return key[1:-1] if len(key) >= 2 and key[0] == key[-1] == '"' else key


def _blocks(kind, block: str) -> dict[str, dict]:
    """The module's `block` blocks (variable or output) by name, from all its HCL files."""
    pattern = "*.pkr.hcl" if kind.kind == "packer" else "*.tf"
    found: dict[str, dict] = {}
    for path in sorted(glob.glob(os.path.join(FIXTURES, kind.source, pattern))):
        with open(path, encoding="utf-8") as f:
            doc = hcl2.load(f)
        for entry in doc.get(block, []):
            for key, body in entry.items():
                name = _label(key)
                assert name not in found, f"{kind.source}: {block} '{name}' declared twice"
                found[name] = body
    return found


def variables(kind) -> dict[str, dict]:
    return _blocks(kind, "variable")


def outputs(kind) -> dict[str, dict]:
    return _blocks(kind, "output")


def literal(value):
    """The Python value of an HCL literal as python-hcl2 returns it; _Expression otherwise."""
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, str):
        if "${" in value or not (len(value) >= 2 and value[0] == value[-1] == '"') or value.startswith('"<<'):
            raise _Expression(value)
        return json.loads(value)  # HCL's escapes (\", \\, \n, \uNNNN) are JSON's
    if isinstance(value, list):
        return [literal(v) for v in value]
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if k.startswith("__"):  # python-hcl2's own keys (__is_block__, __comments__)
                continue
            if "${" in k:
                raise _Expression(k)
            out[_label(k)] = literal(v)
        return out
    raise _Expression(repr(value))


def same(a, b) -> bool:
    """Equal, and of the same kind: True is not 1, 0 is not False (Python's == says they are)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, dict) or isinstance(b, dict):
        return (isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys()
                and all(same(a[k], b[k]) for k in a))
    if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
        return (isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and len(a) == len(b)
                and all(same(x, y) for x, y in zip(a, b)))
    return a == b


def _after_string(t: str, i: int) -> int:
    """The index after the string literal that starts at t[i] ('"')."""
    i += 1
    while t[i] != '"':
        i += 2 if t[i] == "\\" else 1
    return i + 1


def _after_parens(t: str, i: int) -> int:
    """The index after the parenthesis that opens at t[i] and its match (strings skipped)."""
    depth = 0
    while True:
        if t[i] == '"':
            i = _after_string(t, i)
            continue
        depth += {"(": 1, ")": -1}.get(t[i], 0)
        i += 1
        if depth == 0:
            return i


def simple_type(tf_type: str) -> str:
    """A Terraform type expression in ctk's simplified spelling: object({...}) is "object" and
    tuple([...]) is "tuple" wherever they occur (list(object({...})) is "list(object)");
    collection types keep their element type (map(string), list(map(string))); whitespace goes."""
    t = tf_type.strip()
    if t.startswith("${") and t.endswith("}"):
        t = t[2:-1]
    out, i = [], 0
    while i < len(t):
        word = next((w for w in ("object", "tuple") if t.startswith(w + "(", i)), None)
        if word:
            out.append(word)
            i = _after_parens(t, i + len(word))
            continue
        if not t[i].isspace():
            out.append(t[i])
        i += 1
    return "".join(out)


def _fail(problems: list[str]) -> None:
    assert not problems, f"{len(problems)} difference(s) from Cluster Toolkit:\n  " + "\n  ".join(problems)


# --- the parser itself -------------------------------------------------------------------------

def test_parser_finds_the_interfaces():
    """An HCL parse that returned nothing would make every check below pass."""
    assert len(variables(ct.NODESET)) > 50
    assert len(variables(ct.CONTROLLER)) > 40
    assert len(variables(ct.CUSTOM_IMAGE)) > 35
    assert len(variables(ct.VPC)) > 30
    assert outputs(ct.NODESET).keys() == {"nodeset"}
    nodeset = variables(ct.NODESET)
    assert "default" not in nodeset["name"] and nodeset["node_count_dynamic_max"]["default"] == 10
    assert literal(nodeset["machine_type"]["default"]) == "c2-standard-60"
    for kind in FULL:
        assert variables(kind), kind.source


@pytest.mark.parametrize("tf_type, expected", [
    ("string", "string"), ("bool", "bool"), ("number", "number"), ("any", "any"),
    ("${map(string)}", "map(string)"), ("${set(string)}", "set(string)"), ("${map(any)}", "map(any)"),
    ("${list(map(string))}", "list(map(string))"),
    ("${object({type = string, size = number})}", "object"),
    ("${list(object({filename = string, content = optional(string, \"x)\")}))}", "list(object)"),
    ("${map(list(object({range_name = string, ip_cidr_range = string})))}", "map(list(object))"),
    ("${tuple([string, number])}", "tuple"),
])
def test_simple_type(tf_type, expected):
    assert simple_type(tf_type) == expected


def test_literal():
    assert literal('"a\\"b"') == 'a"b'
    assert literal({"family": '"f"', "n": 1, "__is_block__": True}) == {"family": "f", "n": 1}
    assert literal(['"x"', None, False]) == ["x", None, False]
    assert same({"a": [1, True]}, {"a": [1, True]}) and same(None, None) and same(50, 50.0)
    assert not same(True, 1) and not same(0, False) and not same({"a": 1}, {"a": True}) and not same([], {})
    for expr in ("${var.x}", '"${var.x}-y"', ['"a"', "${local.b}"], {"k": "${tomap({})}"}):
        with pytest.raises(_Expression):
            literal(expr)


# --- the checks, per module --------------------------------------------------------------------

@pytest.mark.parametrize("source", FULL_SOURCES)
def test_input_names_agree(source):
    kind = ct.KINDS[source]
    assert not kind.open_inputs, f"{source}: declared in full, so not open_inputs"
    tf = set(variables(kind))
    ctk = set(kind.input_names)
    problems = [f"{source}: variable '{n}' is in CT, not in ctk" for n in sorted(tf - ctk)]
    extra = ctk - tf
    if source in NOT_IN_FIXTURES:
        missing_file, names = NOT_IN_FIXTURES[source]
        if not os.path.exists(os.path.join(FIXTURES, source, missing_file)):
            assert not names & tf, f"{source}: {sorted(names & tf)} are in the fixtures after all"
            problems += [f"{source}: variable '{n}' (from {missing_file}) is not in ctk"
                         for n in sorted(names - ctk)]
            extra -= names
    problems += [f"{source}: input '{n}' is in ctk, not in CT" for n in sorted(extra)]
    _fail(problems)


@pytest.mark.parametrize("source", FULL_SOURCES)
def test_output_names_agree(source):
    kind = ct.KINDS[source]
    tf, ctk = list(outputs(kind)), kind.output_names
    # a Packer module has no outputs; every Terraform one here has an outputs.tf
    assert bool(tf) == (kind.kind != "packer"), f"{source}: outputs parsed: {tf}"
    problems = [f"{source}: output '{n}' is in CT, not in ctk" for n in tf if n not in ctk]
    problems += [f"{source}: output '{n}' is in ctk, not in CT" for n in ctk if n not in tf]
    _fail(problems)


def test_every_fixture_module_is_checked():
    """The fixtures' modules are the ones ctk declares in full (and no module is missed), so the
    checks above, parametrized with FULL, cover every interface the fixtures carry."""
    dirs = {os.path.relpath(os.path.dirname(p), FIXTURES)
            for p in glob.glob(os.path.join(FIXTURES, "**", "variables.*"), recursive=True)}
    assert dirs == set(FULL_SOURCES)


@pytest.mark.parametrize("source", FULL_SOURCES)
def test_required_agrees(source):
    kind = ct.KINDS[source]
    problems = []
    for name, body in variables(kind).items():
        inp = kind.input(name)
        if inp is None:
            continue  # test_input_names_agree
        ct_required = "default" not in body
        if inp.required != ct_required:
            problems.append(f"{source}: variable '{name}': ctk required={inp.required}, "
                            f"CT {'has no default' if ct_required else 'has a default'}")
    _fail(problems)


@pytest.mark.parametrize("source", FULL_SOURCES)
def test_types_agree(source):
    kind = ct.KINDS[source]
    problems = []
    for name, body in variables(kind).items():
        inp = kind.input(name)
        if inp is None:
            continue
        want = simple_type(body["type"]) if "type" in body else "any"
        if inp.type != want:
            problems.append(f"{source}: variable '{name}': ctk type {inp.type!r}, CT {want!r}")
    _fail(problems)


def _defaults(kind):
    """(name, ctk input, CT's literal default) for each variable with a literal default, and
    the names of those whose default is an expression."""
    compared, skipped = [], set()
    for name, body in variables(kind).items():
        inp = kind.input(name)
        if inp is None or "default" not in body:
            continue
        try:
            compared.append((name, inp, literal(body["default"])))
        except _Expression:
            skipped.add(name)
    return compared, skipped


@pytest.mark.parametrize("source", FULL_SOURCES)
def test_literal_defaults_agree(source):
    kind = ct.KINDS[source]
    compared, skipped = _defaults(kind)
    assert skipped == EXPRESSION_DEFAULTS.get(source, set()), (
        f"{source}: defaults that are expressions (not compared): {sorted(skipped)}; "
        f"EXPRESSION_DEFAULTS lists {sorted(EXPRESSION_DEFAULTS.get(source, set()))}")
    problems = [f"{source}: variable '{name}': ctk default {inp.default!r}, CT {want!r}"
                for name, inp, want in compared if not same(inp.default, want)]
    _fail(problems)


def test_runtime_does_not_import_hcl2():
    """python-hcl2 is a test dependency (the 'test' extra): ctk itself must not need it."""
    toolkit = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                           "toolkit", "ctk")
    users = [p for p in glob.glob(os.path.join(toolkit, "**", "*.py"), recursive=True)
             if re.search(r"^\s*(import|from)\s+hcl2\b", open(p, encoding="utf-8").read(), re.M)]
    assert not users


def test_defaults_really_compared():
    """The literal-default check compares most variables, not none."""
    n = sum(len(_defaults(ct.KINDS[s])[0]) for s in FULL_SOURCES)
    assert n > 250
