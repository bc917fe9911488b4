"""Acceptance on real Cluster Toolkit blueprints (../shared/fixtures/cluster-toolkit)."""

import glob
import json
import os

import pytest

from conftest import FIXTURES
from ctk.blueprint import BlueprintErrors
from ctk.cli import main
from ctk.plan import process

VARS = ["project_id=demo-project,deployment_name=demo"]
A3MEGA = os.path.join(FIXTURES, "examples/machine-learning/a3-megagpu-8g/a3mega-slurm-blueprint.yaml")
A3ULTRA = os.path.join(FIXTURES, "examples/machine-learning/a3-ultragpu-8g/a3ultra-slurm-blueprint.yaml")

# What a user gives with --vars for the vars CT's deployment files leave empty ("region: # supply
# ..."); gcluster, like ctk, refuses a var left null (see test_null_deployment_vars_are_errors_there).
DEPLOYMENT_VARS = {
    A3MEGA: ["region=us-central1,zone=us-central1-a,network_name_system=sys-net,subnetwork_name_system=sys-subnet",
             "slurm_cluster_name=a3mega,a3mega_cluster_size=16,a3mega_reservation_name=a3mega-res"],
    A3ULTRA: ["region=europe-west1,zone=europe-west1-b,a3u_reservation_name=a3u-res,a3u_cluster_size=4"],
}

pytestmark = pytest.mark.ct_fixtures


def blueprints():
    files = sorted(glob.glob(os.path.join(FIXTURES, "examples", "**", "*.yaml"), recursive=True)
                   + glob.glob(os.path.join(FIXTURES, "community", "examples", "**", "*.yaml"), recursive=True))
    return [f for f in files if not f.endswith("-deployment.yaml")]


def deployment_file(bp):
    d = bp.replace("-blueprint.yaml", "-deployment.yaml")
    return d if d != bp and os.path.exists(d) else None


def extra_vars(bp):
    # The a3mega blueprint uses $(vars.disk_size_gb), which neither it nor its deployment file
    # defines; gcluster refuses it, and so does ctk (see test_a3mega_needs_disk_size_gb).
    return (["disk_size_gb=100"] if bp == A3MEGA else []) + DEPLOYMENT_VARS.get(bp, [])


def null_vars(path):
    """The vars a YAML file leaves empty, with their line and column (1-based)."""
    import yaml
    root = yaml.compose(open(path).read())
    vars_node = next(v for k, v in root.value if k.value == "vars")
    return {k.value: (k.start_mark.line + 1, k.start_mark.column + 1) for k, v in vars_node.value
            if v.tag.endswith(":null")}


def test_fixtures_are_there():
    assert len(blueprints()) >= 10


@pytest.mark.parametrize("bp", blueprints(), ids=lambda p: os.path.relpath(p, FIXTURES))
def test_fixture_validates(bp, capsys):
    args = ["validate", bp, "--vars", VARS[0]]
    for v in extra_vars(bp):
        args += ["--vars", v]
    if deployment_file(bp):
        args += ["-d", deployment_file(bp)]
    rc = main(args + ["--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["ok"] is True, out


def test_fixtures_with_deployment_files_are_these():
    assert sorted(b for b in blueprints() if deployment_file(b)) == sorted(DEPLOYMENT_VARS)


def test_a3mega_needs_disk_size_gb(capsys):
    rc = main(["validate", A3MEGA, "--vars", VARS[0], "-d", deployment_file(A3MEGA)]
              + [f"--vars={v}" for v in DEPLOYMENT_VARS[A3MEGA]])
    err = capsys.readouterr().err
    assert rc == 2
    assert f"{A3MEGA}:462:25: error: unknown variable 'vars.disk_size_gb'" in err
    assert "disk_size: $(vars.disk_size_gb)" in err  # the source line is shown
    assert "1 error" in err.splitlines()


@pytest.mark.parametrize("bp", sorted(DEPLOYMENT_VARS), ids=os.path.basename)
def test_null_deployment_vars_are_errors_there(bp, capsys):
    dep = deployment_file(bp)
    empty = null_vars(dep)
    assert {"region", "zone", "project_id", "deployment_name"} <= set(empty)
    rc = main(["validate", bp, "-d", dep] + (["--vars", "disk_size_gb=100"] if bp == A3MEGA else []))
    err = capsys.readouterr().err
    assert rc == 2
    reported = [ln for ln in err.splitlines() if ": error: " in ln]
    # Every var the file leaves empty, each at its own line there, and nothing else.
    assert sorted(reported) == sorted(f"{dep}:{line}:{col}: error: deployment variable '{name}' is not set"
                                      for name, (line, col) in empty.items())
    assert "  hint: give it a value there, or pass --vars region=VALUE" in err.splitlines()


def test_a_null_var_a_module_uses_is_reported_where_it_was_left_empty_not_where_it_is_used(capsys):
    # a3mega_cluster_size feeds node_count_static (a number): no type error there.
    vs = [v.replace("a3mega_cluster_size=16,", "") for v in DEPLOYMENT_VARS[A3MEGA]]
    rc = main(["validate", A3MEGA, "-d", deployment_file(A3MEGA), "--vars", VARS[0], "--vars", "disk_size_gb=100"]
              + [f"--vars={v}" for v in vs] + ["--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 2
    assert [(e["file"], e["line"], e["col"], e["message"]) for e in out["errors"]] == [
        (deployment_file(A3MEGA), 36, 3, "deployment variable 'a3mega_cluster_size' is not set")]


def test_a3mega_model_has_eight_h100_per_node():
    exp = process(A3MEGA, VARS + ["disk_size_gb=100"] + DEPLOYMENT_VARS[A3MEGA], deployment_file(A3MEGA))
    dep = exp.deployment
    ns = dep.nodeset("a3meganodeset")
    assert (ns.machine_type, ns.gpu_type, ns.gpu_count, ns.cpus) == ("a3-megagpu-8g", "h100", 8, 208)
    assert ns.node_count_static == 16 and ns.network == "gpudirect-tcpxo"
    assert ns.node_conf == {"CoresPerSocket": 52, "ThreadsPerCore": 2}
    parts = {p.name: p for p in dep.partitions}
    assert parts["a3mega"].is_default and parts["a3mega"].nodesets == ["a3meganodeset"]
    assert parts["a3mega"].oversubscribe == "EXCLUSIVE"
    assert parts["a3mega"].conf == {"ResumeTimeout": 900, "SuspendTimeout": 600}
    assert parts["debug"].nodesets == ["debugnodeset"]
    assert {u.module_id for u in dep.unsupported} >= {"sysnet", "gpunets", "private_service_access"}
    assert [i.name for i in dep.images] == ["slurm-a3mega"] and dep.images[0].base == "ubuntu-24.04"


def test_show_reports_partitions_and_accelerators(capsys):
    rc = main(["show", A3MEGA, "--vars", VARS[0], "--vars", "disk_size_gb=100", "-d", deployment_file(A3MEGA)]
              + [f"--vars={v}" for v in DEPLOYMENT_VARS[A3MEGA]])
    out = capsys.readouterr().out
    assert rc == 0
    assert "8 x H100" in out and "a3mega*" in out and "debug" in out
    assert "Not deployed on target local" in out and "modules/network/multivpc" in out


def test_a3ultra_is_h200():
    dep = process(A3ULTRA, VARS + DEPLOYMENT_VARS[A3ULTRA], deployment_file(A3ULTRA)).deployment
    ns = [n for n in dep.nodesets if n.machine_type == "a3-ultragpu-8g"][0]
    assert (ns.gpu_type, ns.gpu_count, ns.network) == ("h200", 8, "rdma")


def test_hpc_slurm_partitions():
    dep = process(os.path.join(FIXTURES, "examples/hpc-slurm.yaml"), VARS).deployment
    assert [(p.name, p.is_default) for p in dep.partitions] == [("debug", True), ("compute", False), ("h3", False)]
    h3 = dep.nodeset("h3nodeset")
    assert (h3.cpus, h3.memory_mb, h3.node_count_dynamic_max) == (88, 352 * 1024, 20)
    assert dep.shared_fs[0].local_mount == "/home"


def test_tpu_nodeset():
    dep = process(os.path.join(FIXTURES, "community/examples/hpc-slurm6-tpu.yaml"), VARS).deployment
    ns = dep.nodesets[0]
    assert ns.tpu_type == "v3-8" and ns.tpu_chips_per_host == 4 and ns.gpu_count == 0


def test_ghpc_stage_resolves_relative_to_the_blueprint():
    exp = process(os.path.join(FIXTURES, "community/examples/htc-slurm.yaml"), VARS)
    assert exp.expanded.vars["staged_configs"] == "staged/etc"
    assert exp.expanded.staged["staged/etc"].endswith("community/modules/scheduler/schedmd-slurm-gcp-v6-controller/etc")
    ctl = exp.expanded.module("slurm_controller")
    assert ctl.settings["slurm_conf_tpl"] == "staged/etc/htc-slurm.conf.tpl"


def test_a_null_deployment_name_is_one_error_at_the_deployment_file():
    # The a3mega deployment file leaves deployment_name empty; without --vars it is an error there,
    # once (not also "deployment_name is empty" or an invalid label).
    with pytest.raises(BlueprintErrors) as e:
        process(A3MEGA, ["project_id=p", "disk_size_gb=100"] + DEPLOYMENT_VARS[A3MEGA], deployment_file(A3MEGA))
    [err] = e.value.errors
    assert err.message == "deployment variable 'deployment_name' is not set"
    assert err.pos.file.endswith("a3mega-slurm-deployment.yaml") and (err.pos.line, err.pos.col) == (25, 3)
