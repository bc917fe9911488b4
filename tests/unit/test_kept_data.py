"""What a user made outlives `ctk destroy`: a lab's /home, /root, accounting database and
controller state stay in DIR/lab (and are listed) until --purge, and a folder that holds one
cluster refuses another before it writes or starts anything. Real folders and the real CLI;
no lab is booted here (tests/integration/test_local_target.py boots one)."""

import json
import os

import pytest

from ctk.cli import main
from ctk.targets.local import destroy_local, kept_data, lab_identity

pytestmark = pytest.mark.root  # destroy frees the lab's lease in /run/ctk

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LAB = os.path.join(REPO, "blueprints", "lab.yaml")


def destroyed_lab(root, cluster="lab"):
    """A deployment folder as a lab leaves it on disk: users' files, the database, the
    controller's state (with slurmctld's record of its cluster's name) and runtime files."""
    ldir = root / "lab"
    for d in ("home/researcher", "root", "slurmdbd/mysql", "slurmctld", "nodes/lab-controller/upper",
              "etc/slurm", "secrets", "bin", "power/requests"):
        (ldir / d).mkdir(parents=True)
    (ldir / "home" / "researcher" / "train.py").write_text("print('mine')\n")
    (ldir / "root" / "notes.txt").write_text("admin notes\n")
    (ldir / "slurmdbd" / "mysql" / "db.opt").write_text("x\n")
    (ldir / "slurmctld" / "clustername").write_text(cluster + "\n")
    (ldir / "etc" / "slurm" / "slurm.conf").write_text("ClusterName=lab\n")
    (ldir / "secrets" / "munge.key").write_bytes(os.urandom(32))
    (ldir / "state.json").write_text("{}\n")
    (ldir / "ssh_config").write_text("Host x\n")
    return ldir


def test_destroy_keeps_users_data_and_removes_the_rest(tmp_path):
    ldir = destroyed_lab(tmp_path)
    res = destroy_local(str(tmp_path))
    assert [os.path.basename(p) for p, _ in res.kept] == ["home", "root", "slurmdbd", "slurmctld"]
    assert res.deleted == []
    assert (ldir / "home" / "researcher" / "train.py").read_text() == "print('mine')\n"
    assert (ldir / "root" / "notes.txt").exists() and (ldir / "slurmdbd" / "mysql" / "db.opt").exists()
    left = sorted(os.listdir(ldir))
    assert left == ["home", "identity.json", "root", "slurmctld", "slurmdbd"], left  # no key, no state
    assert lab_identity(str(tmp_path))["cluster"] == "lab"
    # destroyed twice: the same data, listed again
    assert [p for p, _ in destroy_local(str(tmp_path)).kept] == [p for p, _ in res.kept]


def test_destroy_purge_deletes_and_lists_what_it_deleted(tmp_path):
    destroyed_lab(tmp_path)
    res = destroy_local(str(tmp_path), purge=True)
    assert [os.path.basename(p) for p, _ in res.deleted] == ["home", "root", "slurmdbd", "slurmctld"]
    assert res.kept == [] and not (tmp_path / "lab").exists()


def test_the_cli_says_where_the_data_is_and_what_purge_deleted(tmp_path, capsys):
    dep = tmp_path / "dep"
    assert main(["create", LAB, "-o", str(dep)]) == 0
    destroyed_lab(dep)
    capsys.readouterr()
    assert main(["destroy", str(dep)]) == 0
    out = capsys.readouterr().out
    assert f"kept (the next `ctk deploy` into {dep} uses them again; `ctk destroy --purge {dep}` deletes them):" in out
    assert f"{dep}/lab/home  /home of every node" in out and "the accounting database" in out
    assert main(["status", str(dep)]) == 2
    assert "keeps a destroyed lab's data: home, root, slurmdbd, slurmctld" in capsys.readouterr().err
    assert main(["destroy", "--purge", str(dep)]) == 0
    out = capsys.readouterr().out
    assert "deleted (--purge):" in out and f"{dep}/lab/home" in out
    assert not (dep / "lab").exists() and (dep / "deployment.json").exists()


@pytest.mark.parametrize("running", [False, True])
def test_a_deploy_of_another_cluster_into_the_folder_is_refused_before_it_writes(tmp_path, capsys, running):
    dep = tmp_path / "dep"
    assert main(["create", LAB, "-o", str(dep)]) == 0
    ldir = destroyed_lab(dep, cluster="prod")
    if not running:
        (ldir / "state.json").unlink()
    before = {f: (dep / f).read_bytes() for f in ("deployment.json", "expanded.yaml")}
    capsys.readouterr()
    assert main(["deploy", LAB, "-o", str(dep)]) == 2
    err = capsys.readouterr().err
    how = "runs" if running else "keeps the data of"
    assert f"error: {dep} {how} cluster 'prod' on the local target; the blueprint is cluster 'lab'" in err, err
    assert "-w replaces the cluster" in err and f"ctk destroy --purge {dep}" in err
    assert {f: (dep / f).read_bytes() for f in before} == before
    assert (ldir / "home" / "researcher" / "train.py").exists() and (ldir / "secrets" / "munge.key").exists()
    assert json.loads((dep / "deployment.json").read_text())["slurm_cluster_name"] == "lab"


def test_create_w_refuses_a_folder_that_keeps_a_labs_data(tmp_path, capsys):
    dep = tmp_path / "dep"
    assert main(["create", LAB, "-o", str(dep)]) == 0
    destroyed_lab(dep)
    (dep / "lab" / "state.json").unlink()
    capsys.readouterr()
    assert main(["create", LAB, "-o", str(dep), "-w"]) == 2
    assert "keeps a destroyed lab's data" in capsys.readouterr().err
    assert (dep / "lab" / "home" / "researcher" / "train.py").exists()
    assert kept_data(str(dep))


def test_purge_is_refused_where_the_target_keeps_no_data(tmp_path, capsys):
    bp = os.path.join(REPO, "blueprints", "gcp-jax.yaml")
    dep = tmp_path / "g"
    assert main(["create", bp, "-o", str(dep)]) == 0
    capsys.readouterr()
    assert main(["destroy", "--purge", str(dep)]) == 2
    assert "--purge: a cluster on Google Cloud keeps no data" in capsys.readouterr().err
