"""From blueprint to a running slurmctld: the whole pipeline (load, expand, plan, render) on
real blueprints, scaled down, and the real slurmctld of every release ctk's images carry (this
machine's 22.05; debian-13's 24.11 and forky's 26.05, in a node: the `slurm` fixture) accepts the
result with no complaint in its log, the blueprint's images taken as that release's (what ctk
renders depends on it: slurmctld's metrics from 25.11).

Cluster Toolkit's examples ask for Slurm's own authentication (enable_slurm_auth): a release
that has it (23.11 and later) runs them with a slurm.key beside slurm.conf, where auth/slurm
looks for it; an older one (22.05) has no auth/slurm plugin, and ctk refuses the setting for
images that carry it, so there the rest of the configuration is checked with MUNGE."""


import pytest

from conftest import FIXTURES
from ctk import paths
from ctk.model import slurm_text
from ctk.plan import process
from ctk.render.slurmconf import (
    NodeLayout,
    render_cgroup_conf,
    render_gres_conf,
    render_slurm_conf,
)
from ctk.sandbox.daemons import ensure_munge_key, free_tcp_port

from .slurm_releases import config_complaints

pytestmark = pytest.mark.integration

A3 = f"{FIXTURES}/examples/machine-learning/a3-megagpu-8g"
CASES = {
    "lab": (f"{paths.BLUEPRINTS}/lab.yaml", [], None,
            {"debug*": ("2", "(null)"), "gpu": ("2", "gpu:h100:8")}),
    # power saving: its dynamic nodes are State=CLOUD, with the programs and timeouts of a lab
    "elastic-lab": (f"{paths.BLUEPRINTS}/elastic-lab.yaml", [], None,
                    {"debug*": ("2", "(null)"), "dynamic": ("4", "(null)"), "spot": ("4", "(null)"),
                     "flex": ("2", "(null)")}),
    "hpc-slurm": (f"{FIXTURES}/examples/hpc-slurm.yaml",
                  ["project_id=p,deployment_name=demo"], None,
                  {"debug*": ("4", "(null)"), "compute": ("20", "(null)"), "h3": ("20", "(null)")}),
    "a3mega": (f"{A3}/a3mega-slurm-blueprint.yaml",
               ["project_id=p,deployment_name=demo,disk_size_gb=100,a3mega_cluster_size=4",
                # what the deployment file leaves empty (gcluster refuses a null var)
                "region=us-central1,zone=us-central1-a,network_name_system=sys-net,subnetwork_name_system=sys-subnet,"
                "slurm_cluster_name=demo,a3mega_reservation_name=a3mega-res"],
               f"{A3}/a3mega-slurm-deployment.yaml",
               {"a3mega*": ("4", "gpu:h100:8"), "debug": ("4", "(null)")}),
}


@pytest.mark.parametrize("case", [
    c if c in ("lab", "elastic-lab") else pytest.param(c, marks=pytest.mark.ct_fixtures) for c in sorted(CASES)])
def test_slurmctld_accepts_rendered_blueprint(case, slurm, tmp_path):
    bp, cli_vars, dfile, want = CASES[case]
    dep = process(bp, cli_vars, dfile).deployment
    for img in dep.images:  # the cluster as it is on the runner's release (the lab's asks for 26.05)
        img.slurm_release = slurm_text(slurm.version())
    if dep.controller.slurm_auth and slurm.version() < (23, 11):
        dep.controller.slurm_auth = False  # no auth/slurm before 23.11 (see above)
    names = [n for ns in dep.nodesets for n in ns.node_names()]
    for d in ("state", "spool", "log", "run"):
        (tmp_path / d).mkdir()
    power = {}
    if case == "elastic-lab":
        cloud = [n for ns in dep.nodesets for n in ns.node_names()[ns.node_count_static:]]
        for prog in ("resume", "suspend", "ready"):
            (tmp_path / prog).write_text("#!/bin/sh\nexit 0\n")
            (tmp_path / prog).chmod(0o755)
        power = {"cloud_nodes": cloud, "resume_program": str(tmp_path / "resume"),
                     "suspend_program": str(tmp_path / "suspend"), "nodes_ready_program": str(tmp_path / "ready")}
    layout = NodeLayout(controller_addr="127.0.0.1", controller_port=free_tcp_port(),
                        node_addr=dict.fromkeys(names, "127.0.0.1"),
                        node_port={n: free_tcp_port() for n in names},
                        state_dir=str(tmp_path / "state"), spool_dir=str(tmp_path / "spool"),
                        log_dir=str(tmp_path / "log"), pid_dir=str(tmp_path / "run"), slurm_user="root",
                        slurmd_port=free_tcp_port(), munge_socket=str(tmp_path / "munge" / "munge.sock"), **power)
    conf = tmp_path / "slurm.conf"
    conf.write_text(render_slurm_conf(dep, layout=layout))
    (tmp_path / "gres.conf").write_text(render_gres_conf(dep, layout=layout))
    (tmp_path / "cgroup.conf").write_text(render_cgroup_conf(dep, layout=layout))
    if dep.controller.slurm_auth:  # as ctk makes it for a lab: 1024 random bytes, 0400
        ensure_munge_key(str(tmp_path / "slurm.key"))
    munged = slurm.start_munged(tmp_path / "munge")
    try:
        ctld = slurm.start_slurmctld(conf)
        try:
            log = (tmp_path / "log" / "slurmctld.log").read_text()
            out = slurm.run(["sinfo", "-h", "-o", "%P|%D|%G"], ctld.env, check=True).stdout
            got = {row.split("|")[0]: tuple(row.split("|")[1:]) for row in out.splitlines()}
            assert got == want
            assert config_complaints(log) == []
        finally:
            ctld.stop()
    finally:
        munged.stop()
