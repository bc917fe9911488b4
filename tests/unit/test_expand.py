"""Expressions, vars precedence and `use` wiring, through the public `process` entry point."""

import pytest

from ctk.blueprint import BlueprintErrors
from ctk.blueprint.expression import Deferred, Interp, Literal, Ref, parse_string
from ctk.plan import process

HEAD = """\
blueprint_name: demo
vars:
  deployment_name: demo
  project_id: p
  zone: us-central1-a
  region: us-central1
  base:
    family: fam
    sizes: [10, 20, 30]
  name_of: $(vars.base.family)-$(vars.zone)
  tags: $(flatten([["a"], ["b", "c"]]))
  merged: $(merge(vars.base, {family = "other"}))
deployment_groups:
- group: primary
  modules:
"""


def bp(modules: str) -> str:
    return HEAD + modules


def test_parse_forms():
    assert parse_string("plain") == "plain"
    assert isinstance(parse_string("$(vars.x)"), Ref)
    assert isinstance(parse_string("a-$(vars.x)"), Interp)
    assert parse_string(r"echo \$(date)") == "echo $(date)"
    assert parse_string("((var.labels))") == Literal("var.labels")


def test_vars_expressions_functions_and_indexing(write):
    exp = process(write(bp("""\
  - id: ns
    source: ctk/slurm/nodeset
    settings:
      features: ["$(vars.base.sizes[1])", "$(vars.name_of)"]
""")))
    v = exp.expanded.vars
    assert v["name_of"] == "fam-us-central1-a"
    assert v["tags"] == ["a", "b", "c"]
    assert v["merged"] == {"family": "other", "sizes": [10, 20, 30]}
    assert exp.expanded.module("ns").settings["features"] == [20, "fam-us-central1-a"]  # a whole $(...) keeps its type


def test_precedence_cli_over_deployment_file_over_blueprint(write):
    path = write(bp("""\
  - id: ns
    source: ctk/slurm/nodeset
"""))
    dfile = write("vars:\n  zone: from-file\n  region:\n", "dep.yaml")
    # A var the deployment file leaves empty must be given (gcluster refuses a null var).
    with pytest.raises(BlueprintErrors) as e:
        process(path, [], dfile)
    [err] = e.value.errors
    assert (err.message, err.pos.file, err.pos.line, err.pos.col) == (
        "deployment variable 'region' is not set", dfile, 3, 3)
    assert err.hint == "give it a value there, or pass --vars region=VALUE"
    exp = process(path, ["region=r1"], dfile)
    assert exp.expanded.vars["zone"] == "from-file" and exp.expanded.vars["region"] == "r1"
    exp = process(path, ["zone=from-cli,extra=[1,2]", "region=r2"], dfile)
    assert exp.expanded.vars["zone"] == "from-cli" and exp.expanded.vars["extra"] == [1, 2] and exp.expanded.vars["region"] == "r2"


def test_null_vars_are_all_reported_where_they_won_used_or_not(write):
    path = write(bp("""\
  - id: ns
    source: ctk/slurm/nodeset
    settings:
      node_count_static: $(vars.count)
      features: ["$(vars.zone)-x"]
""").replace("  zone: us-central1-a\n", "  zone:\n  count: 2\n  unused: null\n"))
    dfile = write("vars:\n  count:\n", "dep.yaml")
    with pytest.raises(BlueprintErrors) as e:
        process(path, ["project_id=null"], dfile)
    got = [(x.pos.file, x.pos.line, x.pos.col, x.message) for x in e.value.errors]
    assert got == [
        ("--vars", 1, 1, "deployment variable 'project_id' is not set"),
        (path, 5, 3, "deployment variable 'zone' is not set"),
        (path, 7, 3, "deployment variable 'unused' is not set"),
        (dfile, 2, 3, "deployment variable 'count' is not set"),
    ]  # and no wrong-type error for node_count_static, nor "unused" warnings
    assert e.value.errors[0].hint == "give it a value: --vars project_id=VALUE"


def test_use_fills_inputs_and_lists_collect(write):
    exp = process(write(bp("""\
  - id: a
    source: ctk/slurm/nodeset
  - id: b
    source: ctk/slurm/nodeset
  - id: p
    source: ctk/slurm/partition
    use: [a, b]
    settings:
      partition_name: p
  - id: login
    source: ctk/slurm/login
  - id: ctl
    source: ctk/slurm/controller
    use: [p, login]
""")))
    p = exp.expanded.module("p")
    assert p.settings["nodeset"] == [Deferred("$(a.nodeset)"), Deferred("$(b.nodeset)")]
    assert p.wired == {"nodeset": ["a", "b"]}
    dep = exp.deployment
    assert dep.partitions[0].nodesets == ["a", "b"]
    assert [lg.module_id for lg in dep.logins] == ["login"]


def test_explicit_setting_beats_use_and_global_var_beats_default(write):
    exp = process(write(bp("""\
  - id: img
    source: ctk/image
    settings: {name: lab}
  - id: img2
    source: ctk/image
    settings: {name: other}
  - id: ns
    source: ctk/slurm/nodeset
    use: [img, img2]
  - id: ns2
    source: ctk/slurm/nodeset
    use: [img]
    settings: {image: mine}
""")))
    assert exp.expanded.module("ns").settings["image"] == Deferred("$(img.image)")  # first in use order wins
    assert exp.expanded.module("ns2").settings["image"] == "mine"
    assert exp.deployment.nodesets[0].image == "lab"
    assert exp.deployment.nodesets[1].image == "mine"


def test_module_output_reference_kept_deferred(write):
    exp = process(write(bp("""\
  - id: ns
    source: ctk/slurm/nodeset
  - id: p
    source: ctk/slurm/partition
    settings:
      partition_name: x
      nodeset: ["$(ns.nodeset)"]
""")))
    p = exp.expanded.module("p")
    assert p.settings["nodeset"] == [Deferred("$(ns.nodeset)")]
    assert exp.deployment.partitions[0].nodesets == ["ns"]


def test_errors_are_collected_all_at_once(write):
    with pytest.raises(BlueprintErrors) as e:
        process(write(bp("""\
  - id: ns
    source: ctk/slurm/nodeset
    settings:
      machine_type: $(vars.zonee)
      node_count_static: $(nss.nodeset)
      features: [$(ns.nodeset)]
""")))
    msgs = [(x.pos.line, x.pos.col, x.message, x.hint) for x in e.value.errors]
    assert msgs == [
        (19, 28, "unknown variable 'vars.zonee'", "did you mean 'zone'?"),
        (20, 28, "unknown module 'nss'", "did you mean 'ns'?"),
        (21, 20, "module 'ns' refers to its own output", ""),
    ]


def test_var_cycle_is_found(write):
    with pytest.raises(BlueprintErrors) as e:
        process(write("blueprint_name: x\nvars:\n  deployment_name: d\n  a: $(vars.b)\n  b: x-$(vars.a)\n"
                      "deployment_groups:\n- group: g\n  modules:\n  - id: n\n    source: ctk/slurm/nodeset\n"))
    assert [(x.pos.line, x.pos.col, x.message, x.hint) for x in e.value.errors] == [
        (5, 10, "cycle in vars: vars.a -> vars.b -> vars.a", "a variable cannot depend on itself")]


def test_later_group_reference_is_refused(write):
    with pytest.raises(BlueprintErrors) as e:
        process(write("blueprint_name: x\nvars:\n  deployment_name: d\ndeployment_groups:\n"
                      "- group: one\n  modules:\n  - id: p\n    source: ctk/slurm/partition\n"
                      "    settings:\n      partition_name: p\n      nodeset: [$(ns.nodeset)]\n"
                      "- group: two\n  modules:\n  - id: ns\n    source: ctk/slurm/nodeset\n"))
    assert [(x.pos.line, x.pos.col, x.message, x.hint) for x in e.value.errors] == [
        (11, 19, "module 'ns' is in a later group ('two')",
         "a module may only refer to modules in its own or earlier groups")]


def test_escape_survives_expansion(write):
    exp = process(write(bp("""\
  - id: s
    source: modules/scripts/startup-script
    settings:
      runners:
      - type: shell
        destination: x.sh
        content: |
          for i in \\$(seq 3); do echo $(vars.zone); done
""")))
    content = exp.expanded.module("s").settings["runners"][0]["content"]
    assert content == "for i in $(seq 3); do echo us-central1-a; done\n"
