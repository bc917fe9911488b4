"""A lab with a backup controller (Cluster Toolkit's enable_backup_controller) as it is planned:
a second controller node running slurmctld alone on the shared saved state, a second
SlurmctldHost line and a short SlurmctldTimeout. (The takeover for real: test_failover.py.)"""

from __future__ import annotations

import os

from ctk.plan import process
from ctk.targets.local import files, plan_lab

HA = os.path.join(os.path.dirname(__file__), "..", "integration", "blueprints", "ha-lab.yaml")


def test_the_backup_runs_slurmctld_alone_on_the_primarys_saved_state(tmp_path):
    dep = process(HA).deployment
    assert dep.controller is not None and dep.controller.backup
    plan = plan_lab(dep, 3)
    backup = plan.backup
    assert backup is not None and backup.name == "halab-controller-backup" and backup.role == "controller"
    assert backup.port == plan.controller.port and backup.addr != plan.controller.addr
    conf = files.lab_files(plan, str(tmp_path))["etc/slurm/slurm.conf"].splitlines()
    hosts = [ln for ln in conf if ln.startswith("SlurmctldHost=")]
    assert hosts == [f"SlurmctldHost={plan.controller.name}({plan.controller.addr})",
                     f"SlurmctldHost={backup.name}({backup.addr})"]
    assert "SlurmctldTimeout=10" in conf
    primary = files.node_spec(plan, plan.controller, str(tmp_path), ["/l"])
    second = files.node_spec(plan, backup, str(tmp_path), ["/l"])
    assert [s.name for s in second.services] == ["munged", "slurmctld"]
    assert {"slurmdbd", "slurmctld", "slurmrestd"} <= {s.name for s in primary.services}
    state = {"src": str(tmp_path / "slurmctld"), "dest": "/var/spool/slurmctld"}
    assert state in primary.binds and state in second.binds
    # both slurmctld check tokens (slurm.conf's AuthAltParameters): both hold the key; no compute node does
    assert any("jwt" in k for k in second.run_files) and any("jwt" in k for k in primary.run_files)


def test_a_lab_without_it_has_one_controller_and_slurms_default_timeout(tmp_path):
    text = open(HA).read().replace("settings: {enable_backup_controller: true}", "settings: {}")
    p = tmp_path / "one.yaml"
    p.write_text(text)
    plan = plan_lab(process(str(p)).deployment, 3)
    assert plan.backup is None and [x.role for x in plan.nodes].count("controller") == 1
    conf = files.lab_files(plan, str(tmp_path))["etc/slurm/slurm.conf"].splitlines()
    assert len([ln for ln in conf if ln.startswith("SlurmctldHost=")]) == 1 and "SlurmctldTimeout=120" in conf
