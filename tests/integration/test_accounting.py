"""Job states from accounting, for real: MariaDB, slurmdbd, slurmctld and one slurmd on this
machine (as on a login node that is also its cluster's submit host). MinJobAge is 2 s, so
slurmctld soon forgets finished jobs; `ctk job` then gets their state and exit code from
one sacct call. The jobs are submitted through ctk's own-cluster mode (no --deployment, no
--host: the Slurm commands this machine has, with SLURM_CONF pointing at this cluster)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from ctk.cli import main
from ctk.model import Controller, Deployment, Nodeset, Partition
from ctk.render.slurmconf import NodeLayout, render_cgroup_conf, render_slurm_conf
from ctk.sandbox.daemons import (
    free_tcp_port,
    start_munged,
    start_slurmctld,
    start_slurmd,
)

from .accounting_daemons import start_mariadb, start_slurmdbd, write_slurmdbd_conf
from .labtools import until

pytestmark = pytest.mark.integration
for tool in ("slurmctld", "slurmd", "slurmdbd", "mariadbd", "mariadb-install-db", "sacct"):
    if not shutil.which(tool, path="/usr/sbin:/usr/bin:/sbin:/bin"):
        pytest.skip(f"{tool} is not installed (apt-get install slurmdbd mariadb-server)", allow_module_level=True)

CLUSTER = "accttest"
NODE = "acct-0"


@pytest.fixture(scope="module")
def acct(tmp_path_factory):
    root = tmp_path_factory.mktemp("acct")
    for d in ("state", "spool", "log", "run", "etc", "jobs"):
        (root / d).mkdir()
    dep = Deployment(
        deployment_name=CLUSTER, blueprint_name="acct", slurm_cluster_name=CLUSTER,
        nodesets=[Nodeset(name="debugnodeset", module_id="debug", machine_type="n2-standard-2", node_prefix="acct",
                          cpus=2, memory_mb=2000, node_count_static=1)],
        partitions=[Partition(name="debug", module_id="debug_partition", nodesets=["debugnodeset"],
                              is_default=True, exclusive=False)],
        controller=Controller(module_id="controller", hostname="acct-controller"))
    munge_sock = str(root / "munge" / "munge.sock")
    dbd_port = free_tcp_port()
    layout = NodeLayout(
        controller_addr="127.0.0.1", controller_port=free_tcp_port(),
        node_addr={NODE: "127.0.0.1"}, node_port={NODE: free_tcp_port()},
        state_dir=str(root / "state"), spool_dir=str(root / "spool"), log_dir=str(root / "log"),
        pid_dir=str(root / "run"), slurm_user="root", slurmd_port=free_tcp_port(), munge_socket=munge_sock,
        slurmdbd_addr="127.0.0.1", slurmdbd_port=dbd_port, min_job_age=2)
    conf = root / "etc" / "slurm.conf"
    conf.write_text(render_slurm_conf(dep, layout=layout))
    (root / "etc" / "cgroup.conf").write_text(render_cgroup_conf(dep, layout=layout))
    started = []
    try:
        started.append(start_munged(root / "munge", force=True))
        db, password = start_mariadb(root / "mysql", free_tcp_port())
        started.append(db)
        db_port = int(next(a.split("=", 1)[1] for a in db.popen.args if a.startswith("--port=")))
        write_slurmdbd_conf(root / "etc" / "slurmdbd.conf", dep, port=dbd_port, db_port=db_port,
                            db_password=password, munge_socket=munge_sock, log_dir=root / "log")
        started.append(start_slurmdbd(root / "etc", CLUSTER))
        ctld = start_slurmctld(conf, clean=True)
        started.append(ctld)
        started.append(start_slurmd(conf, NODE))
        yield root, conf
    finally:
        for proc in reversed(started):
            proc.stop()


@pytest.fixture
def here(acct, monkeypatch, tmp_path):
    root, conf = acct
    monkeypatch.setenv("SLURM_CONF", str(conf))
    monkeypatch.setenv("HOME", str(root / "jobs"))  # ~/.ctk-jobs: this machine is also the node
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    os.makedirs(root / "jobs", exist_ok=True)
    monkeypatch.chdir(root / "jobs")  # jobs run where they are submitted from, as with sbatch
    return root


def ctk_json(capsys, *argv):
    capsys.readouterr()
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


def test_the_password_file_is_private(acct):
    root, _ = acct
    assert (os.stat(root / "etc" / "slurmdbd.conf").st_mode & 0o777) == 0o600


def test_forgotten_jobs_get_state_and_exit_code_from_sacct(here, capsys):
    from ctk.jobs import Job
    from ctk.jobs.clusters import HereCluster
    # --wait's exit code says the job failed (3), apart from ctk's own 1 and 2; the job's own
    # code (4) is in its last line
    assert main(["job", "submit", "jax-train", "--wait", "--", "bash", "-c", "echo hi; exit 4"]) == 3
    out = capsys.readouterr()
    failed = out.out.strip()
    assert f"job {failed}: FAILED (exit code 4)" in out.err
    assert main(["job", "submit", "jax-train", "--wait", "--", "true"]) == 0
    ok = capsys.readouterr().out.strip()
    assert main(["job", "submit", "jax-train", "--", "sleep", "300"]) == 0
    cancelled = capsys.readouterr().out.strip()
    assert main(["job", "cancel", cancelled]) == 0
    assert main(["job", "logs", failed]) == 0
    assert capsys.readouterr().out == "hi\n"

    # slurmctld purges jobs older than MinJobAge (2 s) on its own schedule (about a minute)
    env = {**os.environ}
    def listed() -> list[str]:
        return subprocess.run(["squeue", "-h", "--states=all", "-j", f"{failed},{ok},{cancelled}", "-o", "%i"],
                              capture_output=True, text=True, env=env).stdout.split()

    until(lambda: not listed(), 150, lambda _: f"slurmctld forgetting the jobs; it still lists {listed()}", interval=2)

    # a fresh registry knows nothing: every state now comes from accounting, in one sacct call
    os.environ["XDG_STATE_HOME"] = os.environ["XDG_STATE_HOME"] + "-fresh"
    c = HereCluster().check()
    calls = []
    real = c.run
    c.run = lambda argv, *a, **k: (calls.append(argv[0]), real(argv, *a, **k))[1]
    from ctk.jobs import scheduler
    assert scheduler.states(c, [failed, ok, cancelled, "999999"]) == {
        failed: "FAILED", ok: "COMPLETED", cancelled: "CANCELLED", "999999": "UNKNOWN"}
    assert calls == ["squeue", "sacct"]
    job = Job(failed, c, {"id": failed})
    assert job.exit_code() == 4 and job.state == "FAILED"
