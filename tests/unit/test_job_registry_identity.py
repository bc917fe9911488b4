"""One registry per cluster: found by the cluster's identity (ctk's file beside slurm.conf, else
Slurm's own name and controller), never by the host and port it was reached at; an id Slurm
gives again does not overwrite the earlier job; a log that is gone is said to be gone."""

import json
import os
import subprocess

import pytest

from ctk.cli import main
from ctk.connect.base import (
    IDENTITY_FILE,
    Cluster,
    HereCluster,
    Result,
    parse_identity,
    registry_home,
)
from ctk.jobs import api, commands, registry

ID = "0123456789abcdef0123456789abcdef"


def test_identity_from_ctks_file_slurm_conf_or_scontrol_and_hostile_names_refused():
    assert parse_identity(json.dumps({"cluster": "lab", "id": ID, "deployment": "x"})) == {"cluster": "lab", "id": ID}
    assert parse_identity("ClusterName=site # ours\nSlurmctldHost=ctl(10.0.0.1)\nSlurmctldHost=ctl2\n") == {
        "cluster": "site", "controller": "ctl"}  # the first controller: a backup does not make another cluster
    assert parse_identity("ClusterName                 = lab\nSlurmctldHost[0]            = lab-controller(10.1.2.3)\n"
                          ) == {"cluster": "lab", "controller": "lab-controller"}  # scontrol show config
    # what a cluster says becomes a folder name here: nothing that climbs out, or is not a name
    for text in (json.dumps({"cluster": "../../x", "id": ID}), '{"cluster": "lab", "id": "../x"}', '{"cluster": 1}',
                 "ClusterName=a/../b\nSlurmctldHost=x", "ClusterName=a\n", "{not json", ""):
        assert parse_identity(text) is None, text
    assert registry_home({"cluster": "lab", "id": ID}).endswith(f"/ctk/clusters/lab-{ID}")
    assert registry_home({"cluster": "site", "controller": "ctl"}).endswith("/ctk/clusters/site@ctl")


class Shell(Cluster):
    """The real shell line of Cluster.identity, run here with SLURM_CONF pointing at CONF."""

    def __init__(self, conf, path):
        self.conf, self.path = conf, path

    def run(self, argv, timeout=30, stdin=None):
        r = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout,
                           env={"SLURM_CONF": self.conf, "PATH": self.path})
        return Result(r.returncode, r.stdout, r.stderr)


def test_the_identity_line_a_login_node_runs_prefers_ctks_file_then_slurm_conf_then_the_controller(tmp_path):
    conf = tmp_path / "etc" / "slurm.conf"
    conf.parent.mkdir()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text("#!/bin/sh\nprintf 'ClusterName = far\\nSlurmctldHost[0] = head(1.2.3.4)\\n'\n")
    (bin_dir / "scontrol").chmod(0o755)
    path = f"{bin_dir}:/usr/bin:/bin"
    c = Shell(str(conf), path)
    assert c.identity() == {"cluster": "far", "controller": "head"}  # configless: no slurm.conf here
    conf.write_text("ClusterName=near\nSlurmctldHost=ctl\n")
    assert Shell(str(conf), path).identity() == {"cluster": "near", "controller": "ctl"}
    (conf.parent / IDENTITY_FILE).write_text(json.dumps({"cluster": "near", "id": ID}))
    c = Shell(str(conf), path)
    assert c.identity() == {"cluster": "near", "id": ID} and c.registry_dir == registry_home(c.identity())


def test_this_machines_cluster_reads_its_identity_beside_slurm_conf(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=site\nSlurmctldHost=ctl\n")
    monkeypatch.setenv("SLURM_CONF", str(conf))
    assert HereCluster().registry_dir == str(tmp_path / "state" / "ctk" / "clusters" / "site@ctl")
    (tmp_path / IDENTITY_FILE).write_text(json.dumps({"cluster": "site", "id": ID}))
    assert HereCluster().registry_dir == str(tmp_path / "state" / "ctk" / "clusters" / f"site-{ID}")


def test_an_id_slurm_gives_again_keeps_the_earlier_job_as_id_tilde_n(tmp_path):
    d = str(tmp_path)
    assert registry.add(d, {"id": "13", "template": "jax-train", "submitted": 1.0, "stdout": "a"}) is None
    registry.append(d, {"id": "13", "final_state": "COMPLETED", "exit_code": 0})
    earlier = registry.add(d, {"id": "13", "template": "array", "submitted": 2.0, "stdout": "b"})
    assert earlier is not None and earlier["id"] == "13~1" and earlier["template"] == "jax-train"
    registry.append(d, {"id": "13", "final_state": "FAILED"})  # the new job 13's end
    registry.add(d, {"id": "13", "template": "jax-smoke", "submitted": 3.0, "stdout": "c"})
    jobs = registry.load(d)
    assert [(j["id"], j["template"], j.get("final_state")) for j in jobs] == [
        ("13~1", "jax-train", "COMPLETED"), ("13~2", "array", "FAILED"), ("13", "jax-smoke", None)]
    assert registry.get(d, "13~1")["slurm_id"] == "13" and registry.get(d, "13")["stdout"] == "c"
    # a job without a recorded end is not asked about under an id Slurm gave another job
    registry.add(d, {"id": "14", "template": "jax-train", "submitted": 4.0})
    registry.add(d, {"id": "14", "template": "jax-train", "submitted": 5.0})
    assert registry.get(d, "14~1")["final_state"] == "UNKNOWN"
    with pytest.raises(Exception, match="gave its id 13 to another job"):
        api.Job("13~1", Folder(d), registry.get(d, "13~1")).cancel()


class Folder(Cluster):
    """Logs in a folder; Slurm answers STATE for every job."""

    def __init__(self, root, state="COMPLETED"):
        self.root, self.state = str(root), state
        self.key = self.registry_dir = str(root)

    def run(self, argv, timeout=30, stdin=None):
        if argv[0] == "squeue":
            return Result(0, "".join(f"{j}|{self.state}|None\n" for j in argv[argv.index("-j") + 1].split(",")), "")
        return Result(0, "", "")

    def read(self, path, offset=0, missing=b""):
        try:
            with open(os.path.join(self.root, path), "rb") as f:
                f.seek(offset)
                return f.read()
        except FileNotFoundError:
            return missing

    def forgotten(self, ids):
        return {}


def test_logs_of_a_lost_log_say_so_and_exit_1_a_pending_jobs_exit_0(tmp_path, monkeypatch, capsys):
    c = Folder(tmp_path)
    monkeypatch.setattr(commands, "cluster_of", lambda args: c)
    registry.add(str(tmp_path), {"id": "7", "template": "jax-train", "stdout": "7.out", "stderr": "7.err"})
    (tmp_path / "7.out").write_text("step 1\n")
    assert main(["job", "logs", "7", "--deployment", str(tmp_path)]) == 0
    assert capsys.readouterr().out == "step 1\n"
    (tmp_path / "7.out").unlink()
    assert main(["job", "logs", "7", "--deployment", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "job 7 (COMPLETED): its log 7.out is not there" in err and "Traceback" not in err
    c.state = "PENDING"
    registry.add(str(tmp_path), {"id": "8", "template": "jax-train", "stdout": "8.out", "stderr": "8.err"})
    assert main(["job", "logs", "8", "--deployment", str(tmp_path)]) == 0
    assert "job 8 is PENDING: no log yet" in capsys.readouterr().err
