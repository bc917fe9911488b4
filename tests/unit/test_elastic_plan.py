"""Elastic capacity in the model: Spot and flex-start nodesets, the partitions' and the
controller's power saving, and the lab's rehearsal settings (ctk/target/local), planned from
ctk's own kinds and from Cluster Toolkit's, with their errors at file:line:col."""

from __future__ import annotations

import json

import pytest

from ctk.blueprint import BlueprintErrors
from ctk.cli import main
from ctk.model import LabSettings
from ctk.plan import process

CTK = """\
blueprint_name: elastic-unit
vars:
  deployment_name: elastic
deployment_groups:
- group: cluster
  modules:
  - id: dyn
    source: ctk/slurm/nodeset
    settings:
      node_count_dynamic_max: 4
{dyn}
  - id: flex
    source: ctk/slurm/nodeset
    settings:
      node_count_dynamic_max: 2
{flex}
  - id: dyn_partition
    source: ctk/slurm/partition
    use: [dyn]
    settings:
      partition_name: dynamic
      exclusive: false
{dyn_partition}
  - id: flex_partition
    source: ctk/slurm/partition
    use: [flex]
    settings:
      partition_name: flex
      exclusive: false
{flex_partition}
  - id: controller
    source: ctk/slurm/controller
    use: [dyn_partition, flex_partition]
{controller}
{tail}"""

FLEX = """\
      dws_flex:
        enabled: true
        max_run_duration: 600
"""
LAB = """\
  - id: lab
    source: ctk/target/local
    settings:
{lab}"""


def ctk_bp(tmp_path, dyn="", flex=FLEX, dyn_partition="", flex_partition="", controller="", tail="") -> str:
    p = tmp_path / "bp.yaml"
    p.write_text(CTK.format(dyn=dyn.rstrip("\n"), flex=flex.rstrip("\n"), dyn_partition=dyn_partition.rstrip("\n"),
                            flex_partition=flex_partition.rstrip("\n"), controller=controller.rstrip("\n"),
                            tail=tail))
    return str(p)


def lab(settings: str) -> str:
    return LAB.format(lab=settings)


def errors(path: str) -> list[str]:
    with pytest.raises(BlueprintErrors) as e:
        process(path)
    return [f"{x.pos.line}:{x.pos.col} {x.message}" for x in e.value.errors]


def at(path: str, needle: str, token: str | None = None, nth: int = 1) -> str:
    """LINE:COL of TOKEN (default: NEEDLE) on the NTH line holding NEEDLE."""
    hits = [(i, ln) for i, ln in enumerate(open(path).read().splitlines(), 1) if needle in ln]
    i, ln = hits[nth - 1]
    return f"{i}:{ln.index(token or needle) + 1}"


def validate(path: str, capsys) -> tuple[int, list[dict]]:
    capsys.readouterr()
    rc = main(["validate", path, "--json"])
    out = json.loads(capsys.readouterr().out)
    return rc, out["errors"]


def refused(path: str, capsys, where: str, message: str, hint: str = "") -> None:
    """`ctk validate` exits 2 with exactly one error, at WHERE (LINE:COL), naming MESSAGE."""
    rc, errs = validate(path, capsys)
    assert rc == 2, errs
    assert [f"{e['line']}:{e['col']}" for e in errs] == [where], errs
    assert message in errs[0]["message"], errs
    assert hint in (errs[0]["hint"] or ""), errs


# ---- filled from ctk's own kinds --------------------------------------------------------------

def test_ctk_kinds_fill_every_field(tmp_path):
    dep = process(ctk_bp(
        tmp_path, dyn="      enable_spot_vm: true\n",
        dyn_partition="      suspend_time: 20\n      suspend_timeout: 10\n      resume_timeout: 120\n",
        flex_partition="      suspend_time: -1\n",
        controller="    settings:\n      cloud_parameters:\n        resume_timeout: 120\n        suspend_timeout: 10\n"
                   "        resume_rate: 5\n        suspend_rate: null\n",
        tail=lab("      chaos_interval: 60\n      chaos_seed: 7\n      preemption_notice: 10\n"
                 "      flex_start_delay: 15\n"))).deployment
    dyn, flex = dep.nodesets
    assert (dyn.spot, dyn.flex_max_run_duration) == (True, None)
    assert (flex.spot, flex.flex_max_run_duration) == (False, 600)
    dynamic, flexp = dep.partitions
    assert dynamic.suspend_time == 20 and dynamic.conf == {"ResumeTimeout": 120, "SuspendTimeout": 10}
    assert flexp.suspend_time == -1 and flexp.conf == {}
    ctl = dep.controller
    assert (ctl.resume_timeout, ctl.suspend_timeout, ctl.resume_rate, ctl.suspend_rate) == (120, 10, 5, 0)
    assert dep.target == "local"
    assert (dep.settings.chaos_interval, dep.settings.chaos_seed, dep.settings.preemption_notice, dep.settings.flex_start_delay) == \
        (60.0, 7, 10.0, 15.0)


def test_the_defaults(tmp_path):
    dep = process(ctk_bp(tmp_path, flex="")).deployment
    assert [(ns.spot, ns.flex_max_run_duration) for ns in dep.nodesets] == [(False, None), (False, None)]
    assert [p.suspend_time for p in dep.partitions] == [300, 300]
    ctl = dep.controller
    assert (ctl.resume_timeout, ctl.suspend_timeout, ctl.resume_rate, ctl.suspend_rate) == (300, 300, 0, 0)
    assert (dep.settings.chaos_interval, dep.settings.chaos_seed, dep.settings.preemption_notice, dep.settings.flex_start_delay) == \
        (0.0, None, 30.0, 30.0)


@pytest.mark.parametrize("flex, want", [
    ("      dws_flex: {}\n", 604800),  # enabled is optional(bool, true): the object alone is flex-start
    ("      dws_flex: {max_run_duration: 3600}\n", 3600),
    ("      dws_flex: {enabled: null, use_job_duration: true}\n", 604800),
    ("      dws_flex: {enabled: false, max_run_duration: 900}\n", None),
])
def test_dws_flex_as_cluster_toolkit_reads_it(tmp_path, flex, want):
    dep = process(ctk_bp(tmp_path, flex=flex)).deployment
    assert dep.nodeset("flex").flex_max_run_duration == want


def test_partition_conf_suspend_time_wins_and_leaves_conf(tmp_path):
    dep = process(ctk_bp(tmp_path, dyn_partition="      suspend_time: 20\n      partition_conf: {SuspendTime: 45}\n",
                         flex_partition="      partition_conf: {SuspendTime: INFINITE, ResumeTimeout: 200}\n")).deployment
    dynamic, flexp = dep.partitions
    assert (dynamic.suspend_time, dynamic.conf) == (45, {})
    assert (flexp.suspend_time, flexp.conf) == (-1, {"ResumeTimeout": 200})


DEFERRED = """\
blueprint_name: elastic-deferred
vars:
  project_id: p
  deployment_name: elastic
  region: us-central1
deployment_groups:
- group: primary
  modules:
  - id: network
    source: modules/network/vpc
- group: cluster
  modules:
  - id: flex
    source: ctk/slurm/nodeset
    settings:
      node_count_dynamic_max: 2
      dws_flex: {max_run_duration: $(network.subnetwork_name)}
  - id: flex_partition
    source: ctk/slurm/partition
    use: [flex]
    settings:
      partition_name: flex
      suspend_time: $(network.subnetwork_name)
      resume_timeout: $(network.subnetwork_name)
  - id: controller
    source: ctk/slurm/controller
    use: [flex_partition]
    settings:
      cloud_parameters: {resume_timeout: $(network.subnetwork_name)}
"""


def test_a_deferred_value_is_left_alone(tmp_path):
    # Module outputs ctk cannot know (Terraform's to compute): not checked, the defaults kept.
    p = tmp_path / "bp.yaml"
    p.write_text(DEFERRED)
    dep = process(str(p)).deployment
    assert dep.nodeset("flex").flex_max_run_duration == 604800
    assert (dep.partitions[0].suspend_time, dep.partitions[0].conf) == (300, {})
    assert dep.controller.resume_timeout == 300


# ---- filled from Cluster Toolkit's kinds ------------------------------------------------------

CT = """\
blueprint_name: elastic-ct
vars:
  project_id: p
  deployment_name: elasticct
  region: us-central1
  zone: us-central1-a
deployment_groups:
- group: primary
  modules:
  - id: network
    source: modules/network/vpc
  - id: spot_nodeset
    source: community/modules/compute/schedmd-slurm-gcp-v6-nodeset
    use: [network]
    settings:
      machine_type: n2-standard-2
      node_count_dynamic_max: 4
      enable_spot_vm: true
  - id: old_nodeset
    source: community/modules/compute/schedmd-slurm-gcp-v6-nodeset
    use: [network]
    settings:
      machine_type: n2-standard-2
      preemptible: true
  - id: flex_nodeset
    source: community/modules/compute/schedmd-slurm-gcp-v6-nodeset
    use: [network]
    settings:
      machine_type: n2-standard-2
      node_count_dynamic_max: 2
      dws_flex:
        max_run_duration: {duration}
  - id: tpu_nodeset
    source: community/modules/compute/schedmd-slurm-gcp-v6-nodeset-tpu
    use: [network]
    settings:
      node_type: v4-8
      preemptible: true
      node_count_dynamic_max: 1
  - id: spot_partition
    source: community/modules/compute/schedmd-slurm-gcp-v6-partition
    use: [spot_nodeset, old_nodeset]
    settings:
      partition_name: spot
      suspend_time: 60
      resume_timeout: 200
      suspend_timeout: 30
  - id: flex_partition
    source: community/modules/compute/schedmd-slurm-gcp-v6-partition
    use: [flex_nodeset]
    settings:
      partition_name: flex
  - id: tpu_partition
    source: community/modules/compute/schedmd-slurm-gcp-v6-partition
    use: [tpu_nodeset]
    settings:
      partition_name: tpu
  - id: controller
    source: community/modules/scheduler/schedmd-slurm-gcp-v6-controller
    use: [network, spot_partition, flex_partition, tpu_partition]
    settings:
      cloud_parameters:
        resume_rate: 10
        resume_timeout: {resume}
        suspend_timeout: 90
        scheduler_parameters: [bf_continue]
"""


def ct_bp(tmp_path, duration="7200", resume="400") -> str:
    p = tmp_path / "ct.yaml"
    p.write_text(CT.format(duration=duration, resume=resume))
    return str(p)


def test_cluster_toolkit_kinds_fill_every_field(tmp_path):
    dep = process(ct_bp(tmp_path)).deployment
    got = {ns.name: (ns.spot, ns.flex_max_run_duration) for ns in dep.nodesets}
    assert got == {"spotnodeset": (True, None), "oldnodeset": (True, None), "flexnodeset": (False, 7200),
                   "tpunodeset": (True, None)}
    spot, flex, tpu = dep.partitions
    assert spot.suspend_time == 60 and spot.conf == {"ResumeTimeout": 200, "SuspendTimeout": 30}
    assert flex.suspend_time == tpu.suspend_time == 300
    ctl = dep.controller
    assert (ctl.resume_timeout, ctl.suspend_timeout, ctl.resume_rate, ctl.suspend_rate) == (400, 90, 10, 0)


def test_cluster_toolkits_own_cloud_parameters_keys_are_not_refused(tmp_path):
    # scheduler_parameters is Cluster Toolkit's (ctk reads only the power-saving keys).
    assert process(ct_bp(tmp_path)).deployment.controller.module_id == "controller"


def test_cluster_toolkits_max_run_duration_rule(tmp_path, capsys):
    bp = ct_bp(tmp_path, duration="300")
    refused(bp, capsys, at(bp, "max_run_duration: 300", "300"),
            "nodeset 'flexnodeset': dws_flex.max_run_duration must be 600 to 604800 seconds, found 300",
            "at most one week")


def test_cluster_toolkits_controller_timeout_out_of_range(tmp_path, capsys):
    bp = ct_bp(tmp_path, resume="0")
    refused(bp, capsys, at(bp, "resume_timeout: 0", "0"), "cloud_parameters.resume_timeout of the controller")


# ---- the rules, at their lines ----------------------------------------------------------------

@pytest.mark.parametrize("value", ["599", "604801"])
def test_max_run_duration_out_of_range(tmp_path, capsys, value):
    bp = ctk_bp(tmp_path, flex=FLEX.replace("600", value))
    refused(bp, capsys, at(bp, f"max_run_duration: {value}", value),
            f"dws_flex.max_run_duration must be 600 to 604800 seconds, found {value}",
            "at least 10 minutes, at most one week")


def test_max_run_duration_is_checked_when_disabled_too(tmp_path):
    # Cluster Toolkit's validation reads the value whether or not flex-start is enabled.
    bp = ctk_bp(tmp_path, flex="      dws_flex: {enabled: false, max_run_duration: 60}\n")
    assert errors(bp) == [f"{at(bp, 'max_run_duration: 60', '60')} nodeset 'flex': dws_flex.max_run_duration "
                          "must be 600 to 604800 seconds, found 60"]


def test_flex_start_and_spot_cannot_be_combined(tmp_path, capsys):
    bp = ctk_bp(tmp_path, flex=FLEX + "      enable_spot_vm: true\n")
    refused(bp, capsys, at(bp, "enable_spot_vm: true", "true"),
            "nodeset 'flex': flex-start (dws_flex) and Spot VMs (enable_spot_vm) cannot be combined",
            "use one or the other")


def test_flex_start_with_static_nodes_is_allowed(tmp_path):
    # Cluster Toolkit's a3mega/a3ultra examples offer dws_flex for a nodeset of static nodes
    # (its docs: static nodes are re-provisioned when max_run_duration ends).
    dep = process(ctk_bp(tmp_path, flex=FLEX + "      node_count_static: 1\n")).deployment
    assert dep.nodeset("flex").flex_max_run_duration == 600


def test_unknown_and_mistyped_dws_flex_keys(tmp_path):
    bp = ctk_bp(tmp_path, flex="      dws_flex: {enabled: true, max_run_durations: 600, use_bulk_insert: 1}\n")
    assert errors(bp) == [
        f"{at(bp, 'max_run_durations', 'max_run_durations')} setting 'dws_flex' of module 'flex' has no key "
        "'max_run_durations'",
        f"{at(bp, 'use_bulk_insert: 1', '1')} dws_flex.use_bulk_insert of module 'flex' must be a bool, found int 1",
    ]


def test_suspend_time_below_minus_one(tmp_path, capsys):
    bp = ctk_bp(tmp_path, dyn_partition="      suspend_time: -2\n")
    refused(bp, capsys, at(bp, "suspend_time: -2", "-2"), "partition 'dynamic': suspend_time must be >= -1, found -2",
            "-1: never")


def test_partition_conf_suspend_time_below_minus_one(tmp_path):
    bp = ctk_bp(tmp_path, dyn_partition="      partition_conf: {SuspendTime: -5}\n")
    assert errors(bp) == [f"{at(bp, 'SuspendTime: -5', '-5')} partition 'dynamic': suspend_time must be >= -1, "
                          "found -5"]


@pytest.mark.parametrize("key, value", [("resume_timeout", "0"), ("resume_timeout", "65536"),
                                        ("suspend_timeout", "-1"), ("suspend_timeout", "70000")])
def test_partition_timeouts_out_of_range(tmp_path, capsys, key, value):
    bp = ctk_bp(tmp_path, dyn_partition=f"      {key}: {value}\n")
    refused(bp, capsys, at(bp, f"{key}: {value}", value),
            f"partition 'dynamic': {key} must be > 0 and < 65536 seconds, found {value}")


def test_controller_cloud_parameters_rules(tmp_path):
    bp = ctk_bp(tmp_path, controller="    settings:\n      cloud_parameters:\n        resume_timeout: 0\n"
                                     "        suspend_rate: -1\n        resume_timeot: 30\n")
    assert sorted(errors(bp)) == sorted([
        f"{at(bp, 'resume_timeot', 'resume_timeot')} setting 'cloud_parameters' of module 'controller' has no key "
        "'resume_timeot'",
        f"{at(bp, 'resume_timeout: 0', '0')} cloud_parameters.resume_timeout of the controller must be 1 to 65535, "
        "found 0",
        f"{at(bp, 'suspend_rate: -1', '-1')} cloud_parameters.suspend_rate of the controller must be 0 to 65535, "
        "found -1",
    ])


@pytest.mark.parametrize("setting", ["chaos_interval: -1", "chaos_seed: -3", "chaos_seed: 1.5",
                                     "preemption_notice: -0.5", "flex_start_delay: -10", "boot_delay: -1"])
def test_negative_lab_settings(tmp_path, capsys, setting):
    bp = ctk_bp(tmp_path, tail=lab(f"      {setting}\n"))
    name, value = setting.split(": ")
    refused(bp, capsys, at(bp, setting, value), f"setting '{name}' of module 'lab' must be a ")


def test_chaos_without_a_spot_nodeset(tmp_path, capsys):
    bp = ctk_bp(tmp_path, tail=lab("      chaos_interval: 60\n"))
    refused(bp, capsys, at(bp, "chaos_interval: 60", "60"),
            "setting 'chaos_interval' of module 'lab' preempts random Spot nodes, but no nodeset of this "
            "blueprint is Spot or preemptible", "mark a nodeset enable_spot_vm: true")
    spot = ctk_bp(tmp_path, dyn="      enable_spot_vm: true\n", tail=lab("      chaos_interval: 60\n"))
    assert process(spot).deployment.settings.chaos_interval == 60.0


def test_two_local_target_modules(tmp_path, capsys):
    bp = ctk_bp(tmp_path, tail=lab("      preemption_notice: 5\n") + "  - id: lab2\n    source: ctk/target/local\n")
    refused(bp, capsys, at(bp, "id: lab2", "lab2"), "a blueprint has one local target module",
            "'lab' is its local target module already: keep one")


@pytest.mark.parametrize("other, kind", [
    ("  - id: machines\n    source: ctk/target/ssh\n    settings:\n      hosts: []\n", "an ssh"),
    ("  - id: gcp\n    source: ctk/target/gcp\n", "a gcp"),
])
def test_a_local_target_with_another_target(tmp_path, capsys, other, kind):
    # The second of the two, in blueprint order, is the error, whichever it is.
    bp = ctk_bp(tmp_path, tail=lab("      preemption_notice: 5\n") + other)
    rc, errs = validate(bp, capsys)
    second = other.split("id: ")[1].split("\n")[0]
    assert rc == 2
    assert any(f"{e['line']}:{e['col']}" == at(bp, f"id: {second}", second)
               and e["message"] == f"a blueprint goes to one target: it has both a local and {kind} target module"
               for e in errs), errs
    before = ctk_bp(tmp_path, tail=other + lab("      preemption_notice: 5\n"))
    rc, errs = validate(before, capsys)
    assert rc == 2
    assert any(f"{e['line']}:{e['col']}" == at(before, "id: lab", "lab") and "both a local and a" in e["message"]
               for e in errs), errs


# ---- flex_start_delay against ResumeTimeout (the lab) -----------------------------------------

def test_flex_start_delay_not_below_the_controllers_resume_timeout(tmp_path, capsys):
    bp = ctk_bp(tmp_path, controller="    settings:\n      cloud_parameters: {resume_timeout: 60}\n",
                tail=lab("      flex_start_delay: 60\n"))
    refused(bp, capsys, at(bp, "flex_start_delay: 60", "60"),
            "flex-start nodeset 'flex' waits 60 s for capacity on the lab (flex_start_delay), not less than "
            "partition 'flex''s ResumeTimeout of 60 s: Slurm would mark its nodes DOWN",
            "lower flex_start_delay in 'lab' below 60")


def test_flex_start_delay_against_the_partitions_resume_timeout(tmp_path, capsys):
    bp = ctk_bp(tmp_path, flex_partition="      resume_timeout: 20\n", tail=lab("      flex_start_delay: 25\n"))
    refused(bp, capsys, at(bp, "resume_timeout: 20", "20"),
            "flex-start nodeset 'flex' waits 25 s for capacity on the lab (flex_start_delay), not less than "
            "partition 'flex''s ResumeTimeout of 20 s", "or raise the partition's resume_timeout")


def test_the_default_flex_start_delay_against_partition_conf(tmp_path, capsys):
    # No ctk/target/local module: the default 30 s, against the partition's partition_conf ResumeTimeout.
    bp = ctk_bp(tmp_path, flex_partition="      partition_conf: {ResumeTimeout: 30}\n")
    refused(bp, capsys, at(bp, "ResumeTimeout: 30", "30"), "waits 30 s for capacity on the lab",
            "(a ctk/target/local module)")


def test_the_default_flex_start_delay_against_the_controller(tmp_path, capsys):
    bp = ctk_bp(tmp_path, controller="    settings:\n      cloud_parameters: {resume_timeout: 30}\n")
    refused(bp, capsys, at(bp, "resume_timeout: 30", "30"), "not less than partition 'flex''s ResumeTimeout of 30 s")


def test_flex_start_delay_below_resume_timeout_is_fine(tmp_path):
    dep = process(ctk_bp(tmp_path, flex_partition="      resume_timeout: 16\n",
                         tail=lab("      flex_start_delay: 15\n"))).deployment
    assert dep.settings.flex_start_delay == 15.0


# ---- boot_delay against ResumeTimeout ----------------------------------------------------------

def test_boot_delay_is_read_and_defaults_to_0(tmp_path):
    assert process(ctk_bp(tmp_path, flex="")).deployment.settings.boot_delay == 0.0
    dep = process(ctk_bp(tmp_path, tail=lab("      boot_delay: 4\n"))).deployment
    assert dep.settings.boot_delay == 4.0


def test_boot_delay_not_below_a_dynamic_partitions_resume_timeout(tmp_path, capsys):
    bp = ctk_bp(tmp_path, flex="", dyn_partition="      resume_timeout: 20\n", tail=lab("      boot_delay: 20\n"))
    refused(bp, capsys, at(bp, "resume_timeout: 20", "20"),
            "the nodes of nodeset 'dyn' take 20 s to boot on the lab (boot_delay), not less than partition "
            "'dynamic''s ResumeTimeout of 20 s: Slurm would mark its nodes DOWN before they boot",
            "lower boot_delay in 'lab' below 20, or raise the partition's resume_timeout")


def test_boot_delay_against_the_controllers_resume_timeout_is_at_the_setting(tmp_path, capsys):
    bp = ctk_bp(tmp_path, flex="", controller="    settings:\n      cloud_parameters: {resume_timeout: 60}\n",
                tail=lab("      boot_delay: 90\n"))
    refused(bp, capsys, at(bp, "boot_delay: 90", "90"), "take 90 s to boot on the lab (boot_delay)")


def test_a_flex_nodes_capacity_wait_and_boot_add_up(tmp_path, capsys):
    # 15 + 10 = 25 >= 20; each alone is below it.
    bp = ctk_bp(tmp_path, flex_partition="      resume_timeout: 20\n",
                tail=lab("      flex_start_delay: 15\n      boot_delay: 10\n"))
    refused(bp, capsys, at(bp, "resume_timeout: 20", "20"),
            "flex-start nodeset 'flex' waits 15 s for capacity on the lab (flex_start_delay) and 10 s to boot "
            "(boot_delay), not less than partition 'flex''s ResumeTimeout of 20 s: Slurm would mark its nodes DOWN "
            "before they boot", "lower flex_start_delay + boot_delay in 'lab' below 20")


def test_boot_delay_below_every_resume_timeout_is_fine(tmp_path):
    dep = process(ctk_bp(tmp_path, dyn_partition="      resume_timeout: 20\n",
                         tail=lab("      flex_start_delay: 15\n      boot_delay: 19\n"))).deployment
    assert (dep.settings.boot_delay, dep.settings.flex_start_delay) == (19.0, 15.0)


def test_flex_start_delay_is_the_labs_only(tmp_path):
    # On the gcp target Google Cloud brings the capacity: the lab's delay is not checked there.
    bp = ctk_bp(tmp_path, flex_partition="      resume_timeout: 20\n",
                tail="  - id: gcp\n    source: ctk/target/gcp\n    settings: {project_id: p, region: r, zone: z}\n")
    assert process(bp).deployment.target == "gcp"


def test_exit_2_through_create_too(tmp_path, capsys):
    bp = ctk_bp(tmp_path, dyn_partition="      suspend_time: -2\n")
    capsys.readouterr()
    assert main(["create", bp, "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert f"{bp}:{at(bp, 'suspend_time: -2', '-2')}: error: partition 'dynamic': suspend_time must be >= -1" in err
    assert not (tmp_path / "out").exists()


# ---- the gcp hand-off ---------------------------------------------------------------------------

def gcp_variant(tmp_path) -> str:
    from test_gcp_target import GCP_JAX

    text = open(GCP_JAX).read()
    for old, new in (
        ("      machine_type: c2-standard-8\n      node_count_dynamic_max: 4\n",
         "      machine_type: c2-standard-8\n      node_count_dynamic_max: 4\n      enable_spot_vm: true\n"),
        ("      machine_type: a3-megagpu-8g\n      node_count_dynamic_max: 2\n",
         "      machine_type: a3-megagpu-8g\n      node_count_dynamic_max: 2\n"
         "      dws_flex: {enabled: true, max_run_duration: 3600, use_job_duration: true}\n"),
        ("      partition_name: cpu\n",
         "      partition_name: cpu\n      suspend_time: 60\n      resume_timeout: 600\n      suspend_timeout: 100\n"),
        ('      max_time: "2-00:00:00"\n', '      max_time: "2-00:00:00"\n      partition_conf: {ResumeTimeout: 900}\n'),
        ("    use: [cpu_image, cpu_partition, a3mega_partition, login]\n    settings:\n",
         "    use: [cpu_image, cpu_partition, a3mega_partition, login]\n    settings:\n"
         "      cloud_parameters: {resume_timeout: 600, suspend_rate: 5}\n"),
    ):
        assert old in text, old
        text = text.replace(old, new, 1)
    p = tmp_path / "gcp.yaml"
    p.write_text(text)
    return str(p)


def handed_off(tmp_path, capsys, bp: str, *args: str):
    """The modules of the deployment folder's gcp/blueprint.yaml by id, and its path."""
    import yaml

    out = tmp_path / "dep"
    assert main(["create", bp, "-o", str(out), *args]) == 0, capsys.readouterr().err
    gcp = yaml.safe_load((out / "gcp" / "blueprint.yaml").read_text())
    return {m["id"]: m for g in gcp["deployment_groups"] for m in g["modules"]}, out / "gcp" / "blueprint.yaml"


def test_the_gcp_hand_off_passes_the_settings_through(tmp_path, capsys):
    mods, path = handed_off(tmp_path, capsys, gcp_variant(tmp_path), "--vars", "project_id=demo")
    assert mods["cpu_nodeset"]["settings"]["enable_spot_vm"] is True
    assert "dws_flex" not in mods["cpu_nodeset"]["settings"]
    assert mods["a3mega_nodeset"]["settings"]["dws_flex"] == {"enabled": True, "max_run_duration": 3600,
                                                              "use_job_duration": True}
    assert "enable_spot_vm" not in mods["a3mega_nodeset"]["settings"]
    cpu = mods["cpu_partition"]["settings"]
    assert (cpu["suspend_time"], cpu["resume_timeout"], cpu["suspend_timeout"]) == (60, 600, 100)
    assert "partition_conf" not in cpu  # the timeouts are settings, not PartitionName parameters twice
    a3 = mods["a3mega_partition"]["settings"]
    assert a3["partition_conf"] == {"ResumeTimeout": "900", "MaxTime": "2-00:00:00"}
    assert not {"suspend_time", "resume_timeout", "suspend_timeout"} & set(a3)
    assert mods["controller"]["settings"]["cloud_parameters"] == {"resume_timeout": 600, "suspend_rate": 5}
    # Cluster Toolkit's modules take them, and plan them back into the same model.
    capsys.readouterr()
    assert main(["validate", str(path), "--vars", "project_id=demo"]) == 0, capsys.readouterr().err
    dep = process(str(path), ["project_id=demo"]).deployment
    assert [(ns.name, ns.spot, ns.flex_max_run_duration) for ns in dep.nodesets] == \
        [("cpunodeset", True, None), ("a3meganodeset", False, 3600)]
    assert [(p.name, p.suspend_time, p.conf) for p in dep.partitions] == [
        ("cpu", 60, {"ResumeTimeout": 600, "SuspendTimeout": 100}),
        ("a3mega", 300, {"ResumeTimeout": "900"})]
    assert (dep.controller.resume_timeout, dep.controller.suspend_rate) == (600, 5)


def test_the_defaults_are_not_handed_off(tmp_path, capsys):
    from test_gcp_target import GCP_JAX

    mods, _ = handed_off(tmp_path, capsys, GCP_JAX, "--vars", "project_id=demo")
    for mid in ("cpu_nodeset", "a3mega_nodeset", "cpu_partition", "a3mega_partition", "controller"):
        assert not {"enable_spot_vm", "dws_flex", "suspend_time", "resume_timeout", "suspend_timeout",
                    "cloud_parameters"} & set(mods[mid]["settings"]), mid


@pytest.mark.ct_fixtures
def test_a_kept_cluster_toolkit_blueprint_leaves_out_the_labs_module(tmp_path, capsys):
    import yaml

    from conftest import FIXTURES

    bp = yaml.safe_load(open(f"{FIXTURES}/examples/image-builder.yaml"))
    bp["deployment_groups"][-1]["modules"].append(
        {"id": "lab", "source": "ctk/target/local", "settings": {"flex_start_delay": 10}})
    p = tmp_path / "ib.yaml"
    p.write_text(yaml.safe_dump(bp, sort_keys=False))
    mods, _ = handed_off(tmp_path, capsys, str(p), "--vars", "project_id=demo-project,deployment_name=demo")
    assert "lab" not in mods and all(m["source"] != "ctk/target/local" for m in mods.values())


# ---- ctk show -----------------------------------------------------------------------------------

def show(path: str, capsys, *args: str) -> str:
    capsys.readouterr()
    assert main(["show", path, *args]) == 0
    return capsys.readouterr().out


def test_show_lists_the_capacity_and_the_labs_settings(tmp_path, capsys):
    out = show(ctk_bp(tmp_path, dyn="      enable_spot_vm: true\n",
                      tail=lab("      chaos_interval: 90\n      chaos_seed: 3\n      preemption_notice: 10\n")),
               capsys)
    rows = {ln.split()[0]: ln for ln in out.splitlines() if ln.startswith(("dyn ", "flex "))}
    assert "CAPACITY" in out and " spot " in rows["dyn"] and "flex-start (max run 600 s)" in rows["flex"]
    assert "Lab: preemptions a Spot preemption every 90 s on average (seed 3); preemption notice 10 s; " \
           "flex-start capacity after 30 s; nodes boot in 0 s" in out


def test_show_without_spot_flex_or_lab_module_is_unchanged(tmp_path, capsys):
    out = show(ctk_bp(tmp_path, flex=""), capsys)
    assert "CAPACITY" not in out and "Lab:" not in out
    # The lab's settings are the local target's: not listed for another.
    out = show(ctk_bp(tmp_path, tail=lab("      preemption_notice: 5\n")), capsys, "--target", "gcp")
    assert "Lab:" not in out


# ---- the lab's user ----------------------------------------------------------------------------

def test_the_labs_user_is_named_in_the_local_target(tmp_path):
    bp = ctk_bp(tmp_path, tail=lab("      user: alice\n      user_uid: 1900007\n"))
    dep = process(bp).deployment
    assert (dep.settings.user, dep.settings.user_uid) == ("alice", 1900007)
    assert (process(ctk_bp(tmp_path)).deployment.settings.user, LabSettings().user_uid) == ("researcher", 1900000)


@pytest.mark.parametrize("setting, message, hint", [
    ("user: Alice", "'Alice' is not a user name", "lower-case letters"),
    ("user: munge", "'munge' is root or one of the image's service accounts", "ordinary user"),
    ("user: root", "'root' is root", "--user root"),
    ("user_uid: 1000", "must be a whole number from 1900000 to 1900099, found 1000", "no host account has"),
    ("user_uid: 1900100", "found 1900100", "its services take 1900100"),
])
def test_a_lab_user_that_cannot_be(tmp_path, capsys, setting, message, hint):
    bp = ctk_bp(tmp_path, tail=lab(f"      {setting}\n"))
    refused(bp, capsys, at(bp, setting, setting.split(": ")[1]), message, hint)
