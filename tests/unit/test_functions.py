"""Functions in expressions, where gcluster allows them: in vars (and a Packer module's settings)
only merge, flatten and ghpc_stage; in a Terraform module's settings any Terraform function,
kept as an expression for Terraform and computed by ctk only where it needs the value."""

import pytest
import yaml

from ctk.blueprint import BlueprintErrors
from ctk.blueprint.expression import Call, Lazy, parse_string
from ctk.blueprint.functions import COMPUTED, TERRAFORM_FUNCTIONS, CannotCompute
from ctk.cli import main
from ctk.plan import process

HEAD = """\
blueprint_name: demo
vars:
  deployment_name: demo
  project_id: p
  region: us-central1
  zone: us-central1-a
deployment_groups:
- group: primary
  modules:
  - id: network
    source: modules/network/vpc
"""

NODESET = """\
  - id: nodeset
    source: community/modules/compute/schedmd-slurm-gcp-v6-nodeset
    use: [network]
    settings:
      machine_type: {machine}
      node_count_static: {count}
  - id: partition
    source: community/modules/compute/schedmd-slurm-gcp-v6-partition
    use: [nodeset]
    settings:
      partition_name: compute
      exclusive: false
"""

SCRIPT = """\
  - id: script
    source: modules/scripts/startup-script
    settings:
      runners:
      - type: shell
        destination: hello.sh
        content: {content}
"""


@pytest.fixture
def folder(tmp_path):
    (tmp_path / "files").mkdir()
    (tmp_path / "files" / "hello.sh").write_text("#!/bin/sh\necho hello\n")
    (tmp_path / "machine.txt").write_text("a3-megagpu-8g\n")
    (tmp_path / "nodes.txt").write_text("n0,n1,n2\n")
    return tmp_path


def bp(folder, modules: str) -> str:
    p = folder / "bp.yaml"
    p.write_text(HEAD + modules)
    return str(p)


def errors(path, *args):
    with pytest.raises(BlueprintErrors) as e:
        process(path, *args)
    return [(x.pos.line, x.pos.col, x.message, x.hint) for x in e.value.errors]


# ---- a Terraform module's settings ----------------------------------------------------------

def test_file_of_a_staged_file_in_a_runner_validates_and_expand_shows_the_call(folder, capsys):
    path = bp(folder, SCRIPT.format(content="$(file(ghpc_stage(\"files/hello.sh\")))"))
    assert main(["validate", path]) == 0
    capsys.readouterr()
    assert main(["expand", path]) == 0
    out = yaml.safe_load(capsys.readouterr().out)
    script = [m for m in out["deployment_groups"][0]["modules"] if m["id"] == "script"][0]
    # ghpc_stage is evaluated (as gcluster does); the file() call stays for Terraform.
    assert script["settings"]["runners"][0]["content"] == '$(file("staged/hello.sh"))'
    exp = process(path)
    assert exp.expanded.staged == {"staged/hello.sh": str(folder / "files" / "hello.sh")}
    lazy = exp.expanded.module("script").settings["runners"][0]["content"]
    assert isinstance(lazy, Lazy) and lazy.compute() == "#!/bin/sh\necho hello\n"


def test_the_kept_call_reads_back_as_the_same_expression(folder):
    path = bp(folder, SCRIPT.format(
        content="$(templatefile(\"t.tpl\", {name = vars.deployment_name, n = [1, 2], \"k-1\" = true}))"))
    lazy = process(path).expanded.module("script").settings["runners"][0]["content"]
    assert lazy.text == '$(templatefile("t.tpl", {name = "demo", n = [1, 2], "k-1" = true}))'
    node = parse_string(lazy.text)
    assert isinstance(node, Call) and node.func == "templatefile" and len(node.args) == 2


def test_a_function_ctk_does_not_know_is_kept_where_ctk_does_not_need_the_value(folder):
    # templatefile is Terraform's: gcluster passes it through, so does ctk (and reads no file).
    exp = process(bp(folder, SCRIPT.format(content="$(templatefile(\"missing.tpl\", {}))")))
    assert exp.expanded.module("script").settings["runners"][0]["content"].text == '$(templatefile("missing.tpl", {}))'
    assert not exp.warnings


def test_a_local_target_value_computed_from_file(folder):
    path = bp(folder, NODESET.format(machine="$(trimspace(file(\"machine.txt\")))",
                                     count="$(length(split(\",\", trimspace(file(\"nodes.txt\")))))"))
    exp = process(path)
    ns = exp.deployment.nodesets[0]
    assert (ns.machine_type, ns.gpu_type, ns.gpu_count, ns.node_count_static) == ("a3-megagpu-8g", "h100", 8, 3)
    # ... while the expanded blueprint keeps the calls for Terraform.
    assert exp.expanded.module("nodeset").settings["machine_type"].text == '$(trimspace(file("machine.txt")))'


def test_a_function_ctk_cannot_compute_where_it_needs_the_value_is_an_error_there(folder):
    path = bp(folder, NODESET.format(machine="n2-standard-2", count="$(tonumber(\"4\"))"))
    [(line, col, message, hint)] = errors(path)
    assert (line, col) == (17, 28)
    assert message == ("ctk cannot evaluate tonumber() for this target: ctk needs setting 'node_count_static' "
                       "of module 'nodeset' to plan the cluster")
    assert "ctk computes" in hint and "file" in hint and "jsonencode" in hint


def test_a_missing_file_is_an_error_at_the_call_when_ctk_needs_it(folder):
    path = bp(folder, NODESET.format(machine="$(lower(file(\"nope.txt\")))", count=1))
    [(line, col, message, hint)] = errors(path)
    assert (line, col, message) == (16, 29, "file(): no such file 'nope.txt'")
    assert str(folder) in hint


def test_a_name_that_is_no_terraform_function_warns_and_fails_where_needed(folder, capsys):
    path = bp(folder, SCRIPT.format(content="$(jsonencdoe({a = 1}))"))
    assert main(["validate", path]) == 0
    err = capsys.readouterr().err
    assert f"{path}:18:20: warning: 'jsonencdoe' is not a Terraform function" in err
    assert "did you mean 'jsonencode'?" in err
    path = bp(folder, NODESET.format(machine="n2-standard-2", count="$(lenght([1]))"))
    assert errors(path) == [(17, 28, "unknown function 'lenght'", "did you mean 'length'?")]


def test_a_call_on_a_module_output_is_kept_and_not_an_error(folder):
    path = bp(folder, NODESET.format(machine="$(lower(network.network_name))", count=1))
    exp = process(path)
    assert exp.expanded.module("nodeset").settings["machine_type"].text == "$(lower(network.network_name))"
    assert exp.deployment.nodesets[0].machine_type == "c2-standard-60"  # unknown until deployed: the default


def test_interpolated_and_indexed_calls(folder):
    path = bp(folder, SCRIPT.format(content="\"#$(upper(vars.deployment_name)) $(split(\\\",\\\", \\\"a,b\\\")[1])\""))
    content = process(path).expanded.module("script").settings["runners"][0]["content"]
    assert content.text == '#$(upper("demo")) $(split(",", "a,b")[1])'
    assert content.compute() == "#DEMO b"


# ---- vars and Packer modules: gcluster's functions only --------------------------------------

def test_vars_refuse_other_functions_naming_the_allowed_ones(folder):
    path = bp(folder, SCRIPT.format(content="x"))
    text = open(path).read().replace("  zone: us-central1-a\n",
                                     "  zone: us-central1-a\n  name: $(lower(\"A\"))\n  both: $(mrege({}, {}))\n")
    open(path, "w").write(text)
    assert errors(path) == [
        (7, 11, "unsupported function 'lower' in vars",
         "vars may call only merge, flatten and ghpc_stage (gcluster evaluates them itself); Terraform's "
         "other functions work in the settings of Terraform modules"),
        (8, 11, "unsupported function 'mrege' in vars", "did you mean 'merge'?"),
    ]


def test_vars_keep_merge_flatten_and_ghpc_stage(folder):
    path = bp(folder, SCRIPT.format(content="x"))
    text = open(path).read().replace(
        "  zone: us-central1-a\n",
        "  zone: us-central1-a\n  m: $(merge({a = 1}, {b = 2}))\n  f: $(flatten([[1], [2, [3]]]))\n"
        "  s: $(ghpc_stage(\"files\"))\n")
    open(path, "w").write(text)
    v = process(path).expanded.vars
    assert (v["m"], v["f"], v["s"]) == ({"a": 1, "b": 2}, [1, 2, 3], "staged/files")


def test_a_packer_modules_settings_are_evaluated_by_gcluster_so_only_its_functions(folder):
    path = bp(folder, """\
- group: image
  modules:
  - id: image
    source: modules/packer/custom-image
    kind: packer
    use: [network]
    settings:
      source_image_family: $(lower("Debian-12"))
      labels: $(merge({c = "d"}, {a = "b"}))
""")
    [(line, col, message, hint)] = errors(path)
    assert (line, col, message) == (19, 30, "unsupported function 'lower' in the settings of a Packer module")
    assert "may call only merge, flatten and ghpc_stage" in hint


def test_ctk_kinds_are_computed_by_ctk(folder):
    path = bp(folder, """\
  - id: ns
    source: ctk/slurm/nodeset
    settings:
      features: $(split(",", trimspace(file("nodes.txt"))))
      node_conf: $(templatefile("x", {}))
""")
    assert errors(path) == [(16, 20, "ctk cannot evaluate templatefile() for this target",
                             "ctk computes " + ", ".join(sorted(COMPUTED)) + " itself; give the value directly, "
                             "or compute it with those")]


# ---- the functions ctk computes: Terraform's results ----------------------------------------

@pytest.mark.parametrize("name, args, want", [
    ("jsonencode", [{"b": 1, "a": "<x>&", "c": [1.0, 2.5, None, True]}], '{"a":"\\u003cx\\u003e\\u0026","b":1,"c":[1,2.5,null,true]}'),
    ("jsonencode", ["tab\tnl\nbs\\q\"\x08"], '"tab\\tnl\\nbs\\\\q\\"\\u0008"'),
    ("join", ["-", ["a", 1, True], ["b"]], "a-1-true-b"),
    ("split", [",", "a,,b"], ["a", "", "b"]),
    ("split", [",", ""], [""]),
    ("replace", ["a.b.c", ".", "/"], "a/b/c"),
    ("lower", ["MiXeD"], "mixed"),
    ("upper", ["MiXeD"], "MIXED"),
    ("length", [[1, 2, 3]], 3),
    ("length", [{"a": 1}], 1),
    ("length", ["abc"], 3),
    ("base64encode", ["héllo"], "aMOpbGxv"),
    ("trimspace", ["\t x \n\u00a0"], "x"),
    ("trimspace", ["\x1fx"], "\x1fx"),  # not a space to Go, unlike Python's strip()
    ("chomp", ["a\r\n\n"], "a"),
    ("format", ["%s-%d%%", "n", 3], "n-3%"),
    ("concat", [[1], [2, 3]], [1, 2, 3]),
    ("tostring", [5], "5"),
    ("tostring", [None], None),
])
def test_computed_functions_give_terraforms_results(name, args, want):
    assert COMPUTED[name](*args) == want


@pytest.mark.parametrize("name, args", [
    ("replace", ["abc", "/b/", "x"]), ("format", ["%5s", "x"]), ("format", ["%v", 1]), ("lower", ["É"]),
    ("length", ["é"]), ("split", ["", "ab"]), ("jsonencode", [1e300]),
])
def test_what_ctk_would_have_to_guess_it_does_not_compute(name, args):
    with pytest.raises(CannotCompute):
        COMPUTED[name](*args)


@pytest.mark.parametrize("name, args", [
    ("format", ["%s %s", "a"]), ("format", ["%s", "a", "b"]), ("format", ["%d", "x"]), ("flatten", ["a"]),
    ("merge", [{}, [1]]), ("tostring", [[1]]), ("join", ["-", [None]]),
])
def test_calls_terraform_refuses_are_errors(name, args):
    with pytest.raises(TypeError):
        COMPUTED[name](*args)


def test_every_computed_function_is_terraforms():
    assert set(COMPUTED) <= TERRAFORM_FUNCTIONS
