"""The local target for real: slurmctld, slurmd and munged in lab nodes booted from the built
image, driven through the ctk CLI and the host's own Slurm commands."""

import contextlib
import json
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
import time

import pytest

from conftest import FIXTURES

from .conftest import LAB, lab_env, user_home
from .labtools import (
    Lab,
    assert_jaxlib_accepts_template_xla_flags,
    deploy,
    sacct_line,
    until,
    wait_forgotten,
)

pytestmark = pytest.mark.integration
for tool in ("slurmctld", "packer", "debootstrap"):
    if not shutil.which(tool, path="/usr/sbin:/usr/bin:/sbin:/bin"):
        pytest.skip(f"{tool} is not installed", allow_module_level=True)

A3 = f"{FIXTURES}/examples/machine-learning/a3-megagpu-8g"


@pytest.fixture(scope="module")
def lab(lab_build, state, tmp_path_factory):
    lab = deploy(tmp_path_factory, state, "lab", LAB)
    yield lab
    lab.destroy()


def test_every_compute_node_is_idle(lab):
    rc, st = lab.status()
    assert rc == 0 and st["controller_reachable"]
    computes = [n for n in st["nodes"] if n["role"] == "compute"]
    assert len(computes) == 4 and all(n["slurm_state"] == "idle" for n in computes)
    parts = {p["partition"]: p for p in st["partitions"]}
    assert parts["debug"]["default"] and parts["debug"]["nodes"] == 2
    assert parts["gpu"]["gres"] == "gpu:h100:8"


def test_srun_runs_on_two_different_nodes(lab):
    out = lab.slurm("srun", "-N2", "hostname").stdout.split()
    assert len(out) == 2 and len(set(out)) == 2
    assert all(h.startswith("labdebugnodeset-") for h in out)


def test_home_is_shared_between_nodes(lab):
    r = lab.ctk("exec", lab.path, "labdebugnodeset-0", "--", "sh", "-c", "echo written-on-0 > /home/probe")
    assert r.returncode == 0, r.stderr
    r = lab.ctk("exec", lab.path, "labgpunodeset-1", "--", "cat", "/home/probe")
    assert r.stdout.strip() == "written-on-0"


def test_munge_key_is_secret(lab):
    key = os.path.join(lab.path, "lab", "secrets", "munge.key")
    assert os.stat(key).st_mode & 0o777 == 0o400
    assert os.stat(os.path.dirname(key)).st_mode & 0o077 == 0
    r = lab.ctk("exec", lab.path, "labdebugnodeset-0", "--", "stat", "-c", "%a %U", "/run/ctk/munge.key")
    assert r.stdout.strip() == "400 munge"


# ---- containment: what a job (or ctk exec) may do on a lab node -------------------------

PROBE = r"""
import ctypes, json, os, subprocess, sys
marker, host_pid = sys.argv[1], int(sys.argv[2])
libc = ctypes.CDLL(None, use_errno=True)
out = {}

def attempt(name, fn):
    try:
        out[name] = "succeeded: " + repr(fn())[:200]
    except Exception as e:
        out[name] = "failed: " + type(e).__name__ + ": " + str(e)[:200]

def read(p):
    with open(p) as f:
        return f.read()

def syscall(name, *args):
    if getattr(libc, name)(*args) != 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    return 0

def every_proc_root():
    for p in (d for d in os.listdir("/proc") if d.isdigit()):
        try:
            return read(f"/proc/{p}/root{marker}")
        except OSError:
            pass
    raise FileNotFoundError("through no /proc/PID/root")

def chroot_out():
    os.makedirs("/tmp/esc", exist_ok=True)
    os.chroot("/tmp/esc")
    for _ in range(64):
        os.chdir("..")
    os.chroot(".")
    return read(marker)

def run(*argv):
    r = subprocess.run(argv, capture_output=True, text=True)
    if r.returncode != 0:
        raise OSError(r.returncode, r.stderr.strip())
    return r.stdout

attempt("read through /proc/1/root", lambda: read("/proc/1/root" + marker))
attempt("read through ..", lambda: read("/" + "../" * 16 + marker.lstrip("/")))
attempt("read through any /proc/PID/root", every_proc_root)
attempt("read after chroot out of the node", chroot_out)
attempt("write a host path", lambda: open(marker + ".written", "w").write("x"))
attempt("mount tmpfs", lambda: syscall("mount", b"none", b"/mnt", b"tmpfs", 0, None))
attempt("bind mount /", lambda: syscall("mount", b"/", b"/mnt", None, 4096, None))
attempt("ip link add", lambda: run("ip", "link", "add", "ctkprobe0", "type", "dummy"))
attempt("kill a host process", lambda: os.kill(host_pid, 9))
attempt("init_module", lambda: syscall("init_module", None, 0, b""))
attempt("finit_module", lambda: syscall("finit_module", 0, b"", 0))
attempt("write a sysctl", lambda: open("/proc/sys/kernel/core_pattern", "w").write("|/tmp/x"))
attempt("sysrq", lambda: open("/proc/sysrq-trigger", "w").write("h"))
attempt("write sysfs", lambda: open("/sys/kernel/uevent_helper", "w").write("/tmp/x"))
attempt("mknod a disk", lambda: os.mknod("/tmp/sda", 0o600 | 0o060000, os.makedev(8, 0)))
caps = {ln.split(":")[0]: int(ln.split()[1], 16) for ln in read("/proc/self/status").splitlines() if ln.startswith("Cap")}
try:  # a job as root sees the node's own root there; its user may not look into PID 1 (root's)
    hostname = read("/proc/1/root/etc/hostname").strip()
except PermissionError:
    hostname = "denied: " + read("/etc/hostname").strip()
print(json.dumps({"attempts": out, "caps": caps, "hostname": hostname,
                  "uid": os.getuid(), "devices": sorted(os.listdir("/dev"))}))
"""
SYS_ADMIN, NET_ADMIN, SYS_MODULE, SYS_PTRACE, MKNOD, DAC_READ_SEARCH = 21, 12, 16, 19, 27, 2


@pytest.fixture(scope="module")
def marker(tmp_path_factory):
    """A file on the host only, and a host process: what no job may read or signal."""
    d = tmp_path_factory.mktemp("host-only")
    path = d / "marker"
    path.write_text("the host's\n")
    sleeper = subprocess.Popen(["sleep", "600"])
    yield str(path), sleeper
    sleeper.kill()


def _probe(lab, marker, argv_prefix, env=None, cwd=None):
    path, sleeper = marker
    r = subprocess.run([*argv_prefix, "python3", "/home/probe.py", path, str(sleeper.pid)], capture_output=True,
                       text=True, env=env, cwd=cwd, timeout=120)
    assert r.returncode == 0, (r.stdout, r.stderr)
    res = json.loads(r.stdout.strip().splitlines()[-1])
    failed = {k: v for k, v in res["attempts"].items() if not v.startswith("failed")}
    assert not failed, failed
    assert sleeper.poll() is None and not os.path.exists(path + ".written")
    return res


def test_a_job_cannot_reach_the_host_as_root_or_as_the_labs_user(lab, marker):
    with open(os.path.join(lab.path, "lab", "home", "probe.py"), "w") as f:
        f.write(PROBE)
    node = "labdebugnodeset-0"
    srun = ["srun", "-N1", "-w", node, "-p", "debug"]
    as_root = _probe(lab, marker, srun, env=lab_env(lab.path, "root"), cwd=os.path.join(lab.path, "lab", "root"))
    as_user = _probe(lab, marker, srun, env=lab_env(lab.path), cwd=user_home(lab.path))
    assert (as_root["uid"], as_user["uid"]) == (0, 1900000)
    assert (as_root["hostname"], as_user["hostname"]) == (node, f"denied: {node}")  # /proc/1/root: the node's
    for res in (as_root, as_user):
        assert not [d for d in res["devices"] if d.startswith(("sd", "vd", "nvme", "loop", "kmsg", "mem"))], res
        eff = res["caps"]["CapEff"] | res["caps"]["CapBnd"]
        assert not any(eff >> c & 1 for c in (SYS_ADMIN, NET_ADMIN, SYS_MODULE, SYS_PTRACE, MKNOD, DAC_READ_SEARCH))
    assert as_user["caps"]["CapEff"] == 0 and as_root["caps"]["CapEff"] != 0
    # ctk exec, an admin's root shell in a node, is held the same way
    _probe(lab, marker, [sys.executable, "-m", "ctk", "exec", lab.path, node, "--"])


def test_no_host_account_but_root_can_read_a_secret_of_any_node(lab):
    """Every secret of every node (on the host and in each node's /run), tried as each uid that
    has an account or a process on this machine: none is readable but by root."""
    own_ns = os.readlink("/proc/self/ns/pid")
    secrets = [os.path.join(dp, f) for dp, _, fs in os.walk(os.path.join(lab.path, "lab", "secrets")) for f in fs]
    in_nodes = []
    for pid in (d for d in os.listdir("/proc") if d.isdigit()):
        try:
            if os.readlink(f"/proc/{pid}/ns/pid") == own_ns:
                continue
        except OSError:
            continue
        for rel in ("ctk/munge.key", "ctk/slurm.key", "ctk/ssh_host_ed25519_key", "ctk/dbd/slurmdbd.conf"):
            p = f"/proc/{pid}/root/run/{rel}"
            if os.path.exists(p):
                in_nodes.append(p)
    assert len(secrets) >= 4 and len(in_nodes) >= 6, (secrets, in_nodes)
    uids = {int(ln.split(":")[2]) for ln in open("/etc/passwd") if ln.count(":") >= 6}
    for pid in (d for d in os.listdir("/proc") if d.isdigit()):  # the host's processes, not the nodes'
        try:
            if os.readlink(f"/proc/{pid}/ns/pid") == own_ns:
                uids |= {int(x) for ln in open(f"/proc/{pid}/status") if ln.startswith("Uid:") for x in ln.split()[1:]}
        except OSError:
            pass
    uids.discard(0)
    assert len(uids) >= 5, uids  # (root's own python may be out of other users' reach: Debian's is not)
    check = ("import sys\nleaked = []\nfor p in sys.argv[1:]:\n    try:\n        open(p, 'rb').read(1)\n"
             "        leaked.append(p)\n    except OSError:\n        pass\nprint(leaked)\n")
    for uid in sorted(uids):
        r = subprocess.run(["/usr/bin/python3", "-I", "-c", check, *secrets, *in_nodes], capture_output=True, text=True,
                           preexec_fn=lambda u=uid: (os.setgroups([]), os.setgid(u), os.setuid(u)), timeout=60)
        assert (r.returncode, r.stdout.strip()) == (0, "[]"), (uid, r.stdout, r.stderr)


def test_the_labs_accounts_have_numbers_no_host_account_has(lab):
    """The lab's user and the image's service accounts (munge, slurm, mysql, sshd, ...) all
    have uids from ctk's range, the same on every node; /home/USER is the user's."""
    host = {int(ln.split(":")[2]) for ln in open("/etc/passwd") if ln.count(":") >= 6}
    rows = {}
    for node in ("lab-controller", "labdebugnodeset-0", "lab-login-0"):
        r = lab.ctk("exec", lab.path, node, "--", "getent", "passwd")
        assert r.returncode == 0, r.stderr
        rows[node] = {ln.split(":")[0]: int(ln.split(":")[2]) for ln in r.stdout.splitlines()}
    assert rows["lab-controller"]["researcher"] == rows["lab-login-0"]["researcher"] == 1900000
    for node, accounts in rows.items():
        for name, uid in accounts.items():
            if 100 <= uid < 65534 or name in ("munge", "slurm", "mysql", "sshd", "researcher"):
                assert 1900000 <= uid < 1901000 and uid not in host, (node, name, uid)
    st = os.stat(user_home(lab.path))
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (1900000, 0o700)
    assert stat.S_IMODE(os.stat(os.path.join(lab.path, "lab")).st_mode) == 0o700


def _ended_job(lab, jid: str, timeout: float) -> dict:
    """scontrol's fields of job JID once it has ended (whatever the way)."""
    said: list[dict] = [{}]

    def ended() -> dict | None:
        out = lab.slurm("scontrol", "show", "-o", "job", jid).stdout
        said[0] = job = dict(tok.split("=", 1) for tok in out.split() if "=" in tok)
        return job if job.get("JobState") in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL") else None

    return until(ended, timeout, lambda _: f"the end of job {jid}: {said[0]}", interval=0.2)


def _wait_done(lab, job: str, timeout: float = 120) -> None:
    until(lambda: lab.slurm("squeue", "-h", "-j", job, "-o", "%T", check=False).stdout.strip()
          not in ("PENDING", "RUNNING", "COMPLETING", "CONFIGURING"), timeout, f"the end of job {job}")


def test_the_controller_keeps_accounting_and_sacct_reports_finished_jobs(lab):
    """slurmdbd and MariaDB run on the lab's controller by default: sacct reports a finished
    job's state and exit code; ctk status says accounting is up. The database password is
    0400 in the deployment's secrets and reaches only the controller's tmpfs."""
    rc, st = lab.status()
    assert rc == 0 and st["accounting"] == "up", st
    job = lab.slurm("sbatch", "--parsable", "-N2", "-p", "debug", "-o", "/dev/null",
                    "--wrap", "srun true; exit 3").stdout.strip()
    _wait_done(lab, job)
    assert sacct_line(lab, job) == "FAILED|3:0"
    secrets = os.path.join(lab.path, "lab", "secrets")
    assert os.stat(os.path.join(secrets, "mariadb.password")).st_mode & 0o777 == 0o400
    assert os.stat(os.path.join(secrets, "slurmdbd.conf")).st_mode & 0o777 == 0o600
    password = open(os.path.join(secrets, "mariadb.password")).read().strip()
    assert f"StoragePass={password}\n" in open(os.path.join(secrets, "slurmdbd.conf")).read()
    for dirpath, _, files in os.walk(os.path.join(lab.path, "lab", "etc")):
        for fn in files:
            assert password not in open(os.path.join(dirpath, fn), errors="replace").read(), fn
    r = lab.ctk("exec", lab.path, "labdebugnodeset-0", "--", "sh", "-c", "ls /run/ctk")
    assert r.returncode == 0 and "dbd" not in r.stdout.split(), r.stdout  # only the controller has it
    r = lab.ctk("exec", lab.path, "lab-controller", "--", "stat", "-c", "%a %U", "/run/ctk/dbd/slurmdbd.conf")
    assert r.stdout.strip() == "600 root", (r.stdout, r.stderr)


SUBMITIT_SCRIPT = """
import json, socket, sys, time
import submitit

def where(x):
    return socket.gethostname(), x * 2

ex = submitit.SlurmExecutor(folder="/home/researcher/submitit-check/%j")
ex.update_parameters(partition="debug", time=5, nodes=2, ntasks_per_node=1)
job = ex.submit(where, 21)
results = job.results()
# The state as sacct has it (submitit asks sacct; slurmdbd records a job's end a moment after it)
deadline = time.monotonic() + 60
while job.get_info(mode="force").get("State") != "COMPLETED" and time.monotonic() < deadline:
    time.sleep(1)
print(json.dumps({"job": job.job_id, "results": results, "state": job.state, "python": sys.executable}))
"""


def test_a_submitit_job_from_the_login_node_completes_with_no_accounting_warning(lab):
    """A real client of Slurm's accounting: submitit (pure Python, the version make test
    installs here, copied into the lab's user's home) submits a 2-node job from the login
    node, as the lab's user, with the image's JAX Python, collects both tasks' results, and
    reads the job's state from sacct: no "accounting storage is disabled" or "Bypassing sacct
    error" warning."""
    import importlib.util

    import submitit

    home = user_home(lab.path)
    shutil.copytree(os.path.dirname(importlib.util.find_spec("submitit").origin),
                    os.path.join(home, "pylib", "submitit"), dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("__pycache__"))
    with open(os.path.join(home, "submitit_check.py"), "w") as f:
        f.write(SUBMITIT_SCRIPT)
    login = [n["name"] for n in lab.status()[1]["nodes"] if n["role"] == "login"][0]
    r = lab.ctk("exec", "--user", "researcher", lab.path, login, "--", "env", "PYTHONPATH=/home/researcher/pylib",
                "/opt/ctk/jax/bin/python", "-W", "always", "/home/researcher/submitit_check.py", timeout=300)
    assert r.returncode == 0, (submitit.__version__, r.stdout, r.stderr)
    out = json.loads(r.stdout.strip().splitlines()[-1])
    computes = lab.slurm("sinfo", "-h", "-N", "-p", "debug", "-o", "%N").stdout.split()
    assert sorted(host for host, _ in out["results"]) == sorted(computes), out
    assert all(v == 42 for _, v in out["results"]) and out["python"] == "/opt/ctk/jax/bin/python", out
    assert out["state"] == "COMPLETED", out  # submitit's state comes from sacct
    assert "accounting" not in r.stderr.lower() and "sacct" not in r.stderr, r.stderr
    assert sacct_line(lab, out["job"]) == "COMPLETED|0:0"


def test_the_lab_stacks_jaxlib_accepts_every_xla_flag_the_templates_emit(lab):
    assert_jaxlib_accepts_template_xla_flags(lab, "labdebugnodeset-0")


def test_a_deployment_named_by_a_relative_path_works(lab):
    """`ctk deploy BP -o lab` then `ctk status lab`, `ctk exec lab ...` and `ctk job submit
    --deployment lab`, from the folder that holds it (as make demo does)."""
    parent, name = os.path.split(lab.path)

    def rel(*args):
        return subprocess.run([sys.executable, "-m", "ctk", *args], capture_output=True, text=True, cwd=parent,
                              env={**os.environ, **lab.env}, timeout=300)

    r = rel("status", name, "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["controller_reachable"], r.stdout + r.stderr
    r = rel("exec", name, "labdebugnodeset-1", "--", "hostname")
    assert r.returncode == 0 and r.stdout.strip() == "labdebugnodeset-1", r.stderr
    r = rel("job", "submit", "jax-train", "--deployment", name, "--set", "partition=debug", "--wait", "--", "true")
    assert r.returncode == 0, r.stderr


def test_redeploy_without_change_restarts_nothing(lab):
    before = lab.node_pids()
    r = lab.ctk("deploy", LAB, "-o", lab.path, "--json")
    res = json.loads(r.stdout)
    assert res["booted"] == [] and res["restarted"] == [] and len(res["kept"]) == 6
    assert lab.node_pids() == before


def test_killed_slurmd_shows_down_and_deploy_brings_it_back(lab):
    r = lab.ctk("exec", lab.path, "labdebugnodeset-1", "--", "pkill", "-x", "slurmd")
    assert r.returncode == 0
    def dead() -> tuple[int, dict] | None:
        rc, st = lab.status()
        node = [n for n in st["nodes"] if n["name"] == "labdebugnodeset-1"][0]
        return (rc, node) if node["dead_services"] else None

    rc, node = until(dead, 30, "ctk status naming the killed slurmd", interval=0.1)
    assert rc == 1 and node["dead_services"] == ["slurmd"] and not node["running"]
    assert "DEAD:slurmd" in lab.ctk("status", lab.path).stdout
    res = json.loads(lab.ctk("deploy", LAB, "-o", lab.path, "--json").stdout)
    assert res["restarted"] == ["labdebugnodeset-1"]
    rc, st = lab.status()
    assert rc == 0
    assert lab.slurm("srun", "-w", "labdebugnodeset-1", "hostname").stdout.strip() == "labdebugnodeset-1"


def test_pending_jobs_survive_a_slurmctld_restart(lab):
    # Hold a job so it stays pending, kill slurmctld, and let deploy bring the controller back.
    jid = lab.slurm("sbatch", "--parsable", "--hold", "--wrap", "sleep 1").stdout.strip()
    assert lab.slurm("squeue", "-h", "-j", jid, "-o", "%T").stdout.strip() == "PENDING"
    lab.ctk("exec", lab.path, "lab-controller", "--", "pkill", "-x", "slurmctld")
    # Gone once no slurmctld process is left (asked of the node: a Slurm command would retry its
    # controller for about 30 s before it gives up).
    until(lambda: lab.ctk("exec", lab.path, "lab-controller", "--", "pgrep", "-x", "slurmctld").returncode == 1,
          30, "the end of the killed slurmctld", interval=0.1)
    res = json.loads(lab.ctk("deploy", LAB, "-o", lab.path, "--json").stdout)
    assert res["restarted"] == ["lab-controller"]
    assert lab.slurm("squeue", "-h", "-j", jid, "-o", "%T").stdout.strip() == "PENDING"
    lab.slurm("scancel", jid)


def test_changed_partition_layout_is_reconfigured(lab, tmp_path):
    bp = tmp_path / "lab2.yaml"
    bp.write_text(open(LAB).read().replace('max_time: "2:00:00"', 'max_time: "3:00:00"'))
    before = lab.node_pids()
    res = json.loads(lab.ctk("deploy", str(bp), "-o", lab.path, "--json").stdout)
    assert res["reconfigured"] and res["restarted"] == [] and res["booted"] == []
    assert lab.node_pids() == before
    out = lab.slurm("scontrol", "show", "partition", "gpu").stdout
    assert "MaxTime=03:00:00" in out


def test_a_second_deploy_of_the_same_folder_waits_its_turn(lab):
    import fcntl
    with open(os.path.join(lab.path, ".ctk.lock"), "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        r = lab.ctk("deploy", LAB, "-o", lab.path)
    assert r.returncode == 2 and "another ctk command" in r.stderr


@pytest.mark.ct_fixtures
def test_hpc_slurm_fixture_deploys_scaled_down(lab_build, state, tmp_path_factory):
    lab = deploy(tmp_path_factory, state, "hpc", f"{FIXTURES}/examples/hpc-slurm.yaml",
                 "--vars", "project_id=demo-project,deployment_name=hpc", "--max-nodes", "2")
    try:
        assert any("capped to 2" in n for n in lab.result["notes"])
        rows = lab.slurm("sinfo", "-h", "-o", "%P %D %T").stdout.split("\n")
        parts = {r.split()[0]: (r.split()[1], r.split()[2]) for r in rows if r}
        # their nodes are all dynamic: powered down (idle~) until a job needs them
        assert parts == {"debug*": ("2", "idle~"), "compute": ("2", "idle~"), "h3": ("2", "idle~")}
        r = lab.ctk("show", f"{FIXTURES}/examples/hpc-slurm.yaml", "--vars", "project_id=p,deployment_name=hpc")
        assert "Not deployed on target local" in r.stdout and "modules/network/vpc" in r.stdout
    finally:
        lab.destroy()


@pytest.mark.ct_fixtures
def test_a3mega_fixture_schedules_8_gpus_and_refuses_9(lab_build, state, tmp_path_factory):
    lab = deploy(tmp_path_factory, state, "a3mega", f"{A3}/a3mega-slurm-blueprint.yaml",
                 "-d", f"{A3}/a3mega-slurm-deployment.yaml",
                 "--vars", "project_id=p,deployment_name=a3,disk_size_gb=100,a3mega_cluster_size=64",
                 # what the deployment file leaves empty (gcluster refuses a null var)
                 "--vars", "region=us-central1,zone=us-central1-a,network_name_system=sys-net,"
                 "subnetwork_name_system=sys-subnet,slurm_cluster_name=a3,a3mega_reservation_name=a3mega-res",
                 "--max-nodes", "2")
    try:
        # The batch job runs in the nodes, where only /home is shared: give it a folder there.
        jid = lab.slurm("sbatch", "--parsable", "-N1", "--gpus-per-node=8", "--chdir=/tmp", "--output=/dev/null",
                        "--wrap", "test \"$CUDA_VISIBLE_DEVICES\" = 0,1,2,3,4,5,6,7").stdout.strip()
        job = _ended_job(lab, jid, 20)
        # Scheduled on an emulated 8 x H100 node, ran, and saw all eight GPUs.
        assert (job.get("JobState"), job.get("ExitCode")) == ("COMPLETED", "0:0"), job
        assert job["NodeList"].startswith("a3a3meganodeset-")
        out = lab.slurm("srun", "-N1", "--gpus-per-node=8", "bash", "-c", "echo $CUDA_VISIBLE_DEVICES").stdout
        assert out.strip() == "0,1,2,3,4,5,6,7"
        r = lab.slurm("sbatch", "-N1", "--gpus-per-node=9", "--wrap", "true", check=False)
        assert r.returncode != 0 and "Requested node configuration is not available" in r.stderr
    finally:
        lab.destroy()


def test_ctk_env_runs_the_labs_own_slurm_commands_with_no_host_slurm(lab):
    """`eval "$(ctk env DIR)"` in a shell whose PATH holds no host Slurm command: srun runs in
    the login node as the lab's user, in the node's view of the current folder, and keeps its
    exit code; root's /root is refused to the user, and `ctk env --user root` runs as root."""
    from .conftest import without_host_slurm
    root = os.path.join(lab.path, "lab", "root")
    os.makedirs(os.path.join(root, "work"), exist_ok=True)
    work = os.path.join(user_home(lab.path), "work")
    os.makedirs(work, exist_ok=True)
    env = {**{k: v for k, v in os.environ.items() if k not in ("SLURM_CONF", "CTK_LAB_USER")},
           "PATH": without_host_slurm(os.environ["PATH"])}
    script = (f'eval "$({sys.executable} -m ctk env {lab.path})" && command -v srun && '
              'srun -N2 -p debug hostname && srun -N1 -p debug pwd && srun -N1 -p debug id -un && '
              'srun -N1 -p debug sh -c "exit 7"')
    r = subprocess.run(["/bin/bash", "-c", script], capture_output=True, text=True, env=env, timeout=120, cwd=work)
    assert r.returncode == 7, (r.stdout, r.stderr)
    out = r.stdout.split()
    assert out[0] == os.path.join(lab.path, "lab", "bin", "srun")
    debug = lab.slurm("sinfo", "-h", "-N", "-p", "debug", "-o", "%N").stdout.split()
    assert sorted(out[1:3]) == sorted(debug)[:2]
    assert out[3:5] == ["/home/researcher/work", "researcher"]
    r = subprocess.run(["/bin/bash", "-c", f'eval "$({sys.executable} -m ctk env {lab.path})" && srun -N1 pwd'],
                       capture_output=True, text=True, env=env, timeout=60, cwd=os.path.join(root, "work"))
    assert r.returncode == 125 and "cannot enter /root/work in the node as researcher" in r.stderr, r.stderr
    assert "CTK_LAB_USER=root" in r.stderr
    r = subprocess.run(["/bin/bash", "-c", f'eval "$({sys.executable} -m ctk env {lab.path} --user root)" && '
                        'srun -N1 -p debug pwd && srun -N1 -p debug id -un'],
                       capture_output=True, text=True, env=env, timeout=60, cwd=os.path.join(root, "work"))
    assert (r.returncode, r.stdout.split()) == (0, ["/root/work", "root"]), r.stderr
    # A folder the nodes do not share: srun says which are shared (exit 2); squeue runs anyway.
    r = subprocess.run(["/bin/bash", "-c", f'eval "$({sys.executable} -m ctk env {lab.path})" && srun -N1 hostname'],
                       capture_output=True, text=True, env=env, timeout=60, cwd="/")
    assert r.returncode == 2 and "is not shared with the lab's nodes" in r.stderr and "/root on the nodes" in r.stderr, r.stderr
    r = subprocess.run(["/bin/bash", "-c", f'eval "$({sys.executable} -m ctk env {lab.path})" && squeue -h -o %i'],
                       capture_output=True, text=True, env=env, timeout=60, cwd="/")
    assert r.returncode == 0, r.stderr


def _nothing_left(lab, n, pids):
    """No process, mount or network of the lab is left."""
    for pid in pids:
        assert not os.path.exists(f"/proc/{pid}")
    assert os.path.join(lab.path, "lab") not in open("/proc/mounts").read()
    cmdlines = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                cmdlines.append(open(f"/proc/{p}/cmdline", "rb").read().decode(errors="replace"))
            except OSError:
                pass
    assert not [c for c in cmdlines if lab.path in c.replace("\0", " ")]
    # its network: the bridge, each node's namespace and veth
    assert not os.path.exists(f"/sys/class/net/ctkbr{n}")
    assert not [x for x in os.listdir("/run/netns") if x.startswith(f"ctk-{n}-")]
    assert not [x for x in os.listdir("/sys/class/net") if x.startswith(f"ctk{n}v")]


def test_a_daemon_that_dies_as_the_lab_comes_up_is_named_with_its_last_errors(lab_build, state, tmp_path_factory):
    """slurmctld refusing its saved state (another cluster's: CLUSTER NAME MISMATCH) stops the
    deploy at once, naming the node, the daemon and its fatal line, not after the ready timeout;
    nothing the deploy started is left running, and with the state fixed the next deploy works."""
    lab = deploy(tmp_path_factory, state, "dies", LAB)
    try:
        assert lab.ctk("destroy", lab.path).returncode == 0
        name = os.path.join(lab.path, "lab", "slurmctld", "clustername")
        real = open(name).read()
        with open(name, "w") as f:
            f.write("other" + real[real.index("|"):] if "|" in real else "other\n")
        t0 = time.monotonic()
        r = lab.ctk("deploy", LAB, "-o", lab.path)
        took = time.monotonic() - t0
        print(f"a deploy whose slurmctld dies at start fails in {took:.1f} s")
        assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
        # exited (status 1), or lingering after its fatal line (seen with 26.05)
        assert re.search(r"slurmctld on lab-controller exited (with status 1|after a fatal error) while the lab came up",
                         r.stderr), r.stderr
        assert "fatal: CLUSTER NAME MISMATCH" in r.stderr and "slurmctld.log" in r.stderr, r.stderr
        _nothing_left(lab, None, [])
        with open(name, "w") as f:
            f.write(real)
        r = lab.ctk("deploy", LAB, "-o", lab.path)
        assert r.returncode == 0, r.stderr[-3000:]
    finally:
        lab.ctk("destroy", "--purge", lab.path)


def test_destroy_keeps_users_data_for_the_next_deploy_and_purge_deletes_it(lab_build, state, tmp_path_factory):
    """`ctk destroy` stops every process, mount and network of the lab and keeps what users made:
    a file in /home, the accounting database (sacct still lists an earlier job), the controller's
    state (job ids go on). Another cluster's blueprint is refused (exit 2) before anything changes,
    running or not; with -w it replaces the lab, the data kept; --purge deletes it all."""
    lab = deploy(tmp_path_factory, state, "gone", LAB)
    ldir = os.path.join(lab.path, "lab")
    try:
        n = json.load(open(os.path.join(ldir, "state.json")))["n"]
        assert os.path.exists(f"/sys/class/net/ctkbr{n}") and any(x.startswith(f"ctk-{n}-") for x in os.listdir("/run/netns"))
        as_user = ("exec", "--user", "researcher", lab.path, "lab-login-0", "--")
        r = lab.ctk(*as_user, "sh", "-c", "echo mine > /home/researcher/work.txt")
        assert r.returncode == 0, r.stderr
        first = lab.slurm("sbatch", "--parsable", "--wrap", "true", "-o", "/dev/null").stdout.strip()
        until(lambda: lab.slurm("sacct", "-n", "-X", "-j", first, "-o", "state").stdout.strip() == "COMPLETED", 120,
              f"job {first} COMPLETED in accounting", interval=0.2)
        # the nodes know which cluster they are: the id that keys ctk's registry of its jobs
        ident = json.load(open(os.path.join(ldir, "identity.json")))
        r = lab.ctk(*as_user, "cat", "/etc/slurm/ctk-cluster.json")
        assert json.loads(r.stdout) == {"cluster": "lab", "id": ident["id"]}, r.stderr
        r = lab.ctk("job", "submit", "jax-train", "--set", "partition=debug", "--deployment", lab.path, "--wait",
                    "--", "true")
        assert r.returncode == 0, r.stderr
        by_ctk = r.stdout.strip()
        pids = [int(p) for p in lab.node_pids().values()]
        r = lab.ctk("destroy", lab.path)
        assert r.returncode == 0, r.stderr
        assert f"{ldir}/home  /home of every node" in r.stdout and "the accounting database" in r.stdout, r.stdout
        _nothing_left(lab, n, pids)
        assert sorted(os.listdir(ldir)) == ["home", "identity.json", "root", "slurmctld", "slurmdbd"]

        t0 = time.monotonic()
        r = lab.ctk("deploy", HEALTH, "-o", lab.path)
        print(f"another cluster's deploy into the destroyed lab's folder refused in {time.monotonic() - t0:.2f} s")
        assert r.returncode == 2 and f"{lab.path} keeps the data of cluster 'lab'" in r.stderr, r.stderr
        assert sorted(os.listdir(ldir)) == ["home", "identity.json", "root", "slurmctld", "slurmdbd"]

        r = lab.ctk("deploy", LAB, "-o", lab.path)
        assert r.returncode == 0, r.stderr[-3000:]
        r = lab.ctk(*as_user, "cat", "/home/researcher/work.txt")
        assert r.stdout == "mine\n", r.stderr
        assert lab.slurm("sacct", "-n", "-X", "-j", first, "-o", "state").stdout.strip() == "COMPLETED"
        second = lab.slurm("sbatch", "--parsable", "--wrap", "true", "-o", "/dev/null").stdout.strip()
        assert int(second) > int(first)
        # the same cluster again: the same registry, its job still listed with its end
        assert json.load(open(os.path.join(ldir, "identity.json")))["id"] == ident["id"]
        listed = json.loads(lab.ctk("job", "list", "--deployment", lab.path, "--json").stdout)
        assert [(x["id"], x["state"]) for x in listed] == [(by_ctk, "COMPLETED")]

        t0 = time.monotonic()
        r = lab.ctk("deploy", HEALTH, "-o", lab.path)
        print(f"another cluster's deploy into the running lab's folder refused in {time.monotonic() - t0:.2f} s")
        assert r.returncode == 2 and f"{lab.path} runs cluster 'lab'" in r.stderr, r.stderr
        assert lab.status()[1]["deployment"] == "lab"
        r = lab.ctk("deploy", HEALTH, "-o", lab.path, "-w")
        assert r.returncode == 0, r.stderr[-3000:]
        assert "replaced cluster lab: stopped the lab of cluster lab" in r.stdout, r.stdout
        assert f"kept the saved state of cluster lab's controller in {ldir}/slurmctld.lab" in r.stdout, r.stdout
        rc, st = lab.status()
        assert st["deployment"] == "health" and "lab-login-0" not in [x["name"] for x in st["nodes"]]
        # another cluster in the folder: a registry of its own, with none of the old cluster's jobs
        assert json.load(open(os.path.join(ldir, "identity.json")))["id"] != ident["id"]
        r = lab.ctk("job", "list", "--deployment", lab.path)
        assert r.returncode == 0 and r.stdout == "(no jobs)\n", (r.stdout, r.stderr)
        r = lab.ctk("job", "submit", "jax-train", "--deployment", lab.path, "--", "true")
        assert r.returncode == 0, r.stderr
        r = lab.ctk("exec", "--user", "researcher", lab.path, "health-controller", "--", "cat", "/home/researcher/work.txt")
        assert r.stdout == "mine\n", r.stderr

        n = json.load(open(os.path.join(ldir, "state.json")))["n"]
        pids = [int(p) for p in lab.node_pids().values()]
        r = lab.ctk("destroy", "--purge", lab.path)
        assert r.returncode == 0 and "deleted (--purge):" in r.stdout and f"{ldir}/slurmctld.lab" in r.stdout, r.stdout
        assert "ctk's registry of the lab's jobs" in r.stdout, r.stdout
        assert os.listdir(os.path.join(lab.path + ".xdg", "ctk", "clusters")) == [f"lab-{ident['id']}"]
        _nothing_left(lab, n, pids)
        assert not os.path.exists(ldir)
    finally:
        lab.ctk("destroy", "--purge", lab.path)  # a failure above leaves no lab running


def test_jax_smoke_template_all_reduces_across_two_nodes(lab):
    """The jax-smoke template, rendered for the lab and submitted with the lab's sbatch: two
    JAX processes on two nodes find each other through Slurm and agree on one all-reduce."""
    r = lab.ctk("job", "render", "jax-smoke", "--nodes", "2", "--deployment", lab.path, "--set", "partition=debug")
    assert r.returncode == 0, r.stderr
    home = os.path.join(lab.path, "lab", "home")
    script = os.path.join(home, "smoke.sbatch")
    with open(script, "w") as f:
        f.write(r.stdout)
    jid = lab.slurm("sbatch", "--parsable", "--chdir=/home", "/home/smoke.sbatch").stdout.strip()
    job = _ended_job(lab, jid, 120)
    out = open(os.path.join(home, f"jax-smoke-{jid}.out")).read()
    assert job.get("JobState") == "COMPLETED", (job, out, open(os.path.join(home, f"jax-smoke-{jid}.err")).read())
    lines = [ln for ln in out.splitlines() if ln.startswith("ctk-smoke ")]
    assert len(lines) == 2
    fields = [dict(kv.split("=") for kv in ln.split()[1:]) for ln in lines]
    assert sorted(f["process"] for f in fields) == ["0", "1"]
    assert all(f["process_count"] == "2" and f["device_count"] == "2" and f["reduced"] == "2" for f in fields)


def test_job_submit_wait_runs_jax_smoke_and_logs_show_both_processes(lab):
    """`ctk job submit --wait` follows jax-smoke to its end; `ctk job logs` prints its stdout.
    No command given: the template runs the stack's Python of the lab's nodes."""
    r = lab.ctk("job", "submit", "jax-smoke", "--deployment", lab.path, "--nodes", "2", "--set", "partition=debug",
                "--wait")
    assert r.returncode == 0, (r.stdout, r.stderr)
    jid = r.stdout.strip()
    assert jid.isdigit() and "COMPLETED" in r.stderr
    out = lab.ctk("job", "logs", jid, "--deployment", lab.path).stdout
    fields = [dict(kv.split("=") for kv in ln.split()[1:]) for ln in out.splitlines() if ln.startswith("ctk-smoke ")]
    assert sorted(f["process"] for f in fields) == ["0", "1"]
    assert all(f["process_count"] == "2" and f["reduced"] == "2" for f in fields)
    script = os.path.join(user_home(lab.path), ".ctk-jobs")  # the lab's user's, readable by it alone
    names = [n for n in os.listdir(script) if n.startswith("jax-smoke-") and n.endswith(".sbatch")]
    assert names and stat.S_IMODE(os.stat(script).st_mode) == 0o700
    for n in names + [f"jax-smoke-{jid}.out"]:
        st = os.stat(os.path.join(script, n))
        assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (1900000, 0o600), (n, st)
    listed = lab.ctk("job", "list", "--deployment", lab.path, "--json")
    assert jid in [x["id"] for x in json.loads(listed.stdout)]


def test_python3_in_a_plain_batch_job_is_the_stacks(lab):
    """A script ctk did not write: `srun python3` in it imports jax (the jax role's TaskProlog
    puts the stack's venv first on PATH in every task, the batch script included)."""
    home = os.path.join(lab.path, "lab", "home")
    with open(os.path.join(home, "plain.sh"), "w") as f:
        f.write("#!/bin/bash\n#SBATCH -N2 -p debug -o /home/plain-%j.out\n"
                "python3 -c 'import jax; print(\"batch\", jax.__version__)'\n"
                "srun python3 -c 'import jax, socket; print(\"task\", socket.gethostname(), jax.__version__)'\n")
    jid = lab.slurm("sbatch", "--parsable", "--wait", "/home/plain.sh", timeout=180).stdout.strip().split(";")[0]
    out = open(os.path.join(home, f"plain-{jid}.out")).read()
    from ctk.stacks import load_stacks
    version = load_stacks()["jax-cpu"].jax  # the default lab: Debian 13, jax 0.12
    assert f"batch {version}" in out.splitlines(), out
    tasks = [ln.split() for ln in out.splitlines() if ln.startswith("task ")]
    assert len({t[1] for t in tasks}) == 2 and all(t[2] == version for t in tasks), out


def test_job_submit_wait_exits_with_the_jobs_exit_code(lab):
    r = lab.ctk("job", "submit", "jax-train", "--deployment", lab.path, "--set", "partition=debug",
                "--wait", "--", "bash", "-c", "exit 3")
    assert r.returncode == 3, (r.stdout, r.stderr)


def test_job_api_cancel_and_status_of_several_jobs(lab, monkeypatch):
    from ctk.jobs import Job, submit
    monkeypatch.setenv("XDG_STATE_HOME", lab.env["XDG_STATE_HOME"])  # the registry `lab.ctk` reads
    job = submit("jax-train", {"partition": "debug"}, lab.path, command=["sleep", "300"])
    assert isinstance(job, Job) and job.id.isdigit()
    with contextlib.suppress(AssertionError):  # still pending on a busy machine is fine too
        until(lambda: job.state != "PENDING", 10, f"job {job.id} leaving PENDING", interval=0.1)
    assert job.state in ("PENDING", "RUNNING")
    other = submit("jax-train", {"partition": "debug"}, lab.path, command=["true"])
    assert other.wait(timeout=60) == "COMPLETED"
    job.cancel()
    assert job.wait(timeout=30) == "CANCELLED"
    r = lab.ctk("job", "status", job.id, other.id, "--deployment", lab.path, "--json")
    assert r.returncode == 0, r.stderr
    assert {x["id"]: x["state"] for x in json.loads(r.stdout)} == {job.id: "CANCELLED", other.id: "COMPLETED"}
    r = lab.ctk("job", "status", "999999", "--deployment", lab.path)
    assert r.returncode == 2 and "not submitted through ctk" in r.stderr


def _listening(pid: int) -> set[tuple[str, int]]:
    """(address, port) of every listening TCP socket in the network namespace of PID."""
    import ipaddress
    out = set()
    for table in (f"/proc/{pid}/net/tcp", f"/proc/{pid}/net/tcp6"):
        for line in open(table).read().splitlines()[1:]:
            f = line.split()
            if f[3] != "0A":  # LISTEN
                continue
            hexaddr, hexport = f[1].split(":")
            raw = bytes.fromhex(hexaddr)
            # /proc/net prints each 32-bit word in host (little-endian) order
            raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
            out.add((str(ipaddress.ip_address(raw)), int(hexport, 16)))
    return out


def _interfaces(pid: int) -> set[str]:
    return {ln.split(":")[0].strip() for ln in open(f"/proc/{pid}/net/dev").read().splitlines()[2:]}


def test_every_lab_daemon_and_srun_listen_only_on_their_nodes_address(lab):
    """slurmctld, slurmdbd, each slurmd, each sshd and an srun inside a batch job: none on 0.0.0.0 or ::.
    Each node has its own network namespace, so its sockets are in its own /proc/PID/net. The
    controller's slurmdbd listens on the node's address too; its MariaDB only on the node's own
    loopback, which nothing outside the node reaches."""
    state = json.load(open(os.path.join(lab.path, "lab", "state.json")))
    first = lab.slurm("sinfo", "-h", "-N", "-p", "debug", "-o", "%N").stdout.split()[0]
    job = lab.slurm("sbatch", "--parsable", "-N1", "-w", first, "-p", "debug", "-o", "/dev/null",
                    "--wrap", "srun sleep 60").stdout.strip()
    try:
        until(lambda: f"{job}.0" in lab.slurm("squeue", "-h", "-s", "-j", job, "-o", "%i").stdout.split(), 60,
              lambda _: f"srun's step of job {job}: {lab.slurm('squeue', '-j', job, check=False).stdout}")
        seen = {}
        dbd = json.load(open(os.path.join(lab.path, "lab", "state.json")))["accounting"]
        assert dbd
        conf = open(os.path.join(lab.path, "lab", "etc", "slurm", "slurm.conf")).read()
        dbd_port = int(re.search(r"^AccountingStoragePort=(\d+)$", conf, re.M).group(1))
        for node in state["nodes"]:
            pid = int(open(os.path.join(lab.path, "lab", "nodes", node["name"], "pid")).read())
            socks = _listening(pid)
            assert _interfaces(pid) == {"lo", "eth0"}, node["name"]
            if node["role"] == "controller":  # slurmdbd on its address; MariaDB on its own loopback
                assert {(node["addr"], dbd_port), ("127.0.0.1", 3306)} <= socks, socks
                socks -= {("127.0.0.1", 3306)}
            seen[node["name"]] = socks
            assert socks, f"{node['name']} listens on nothing"
            for addr, port in socks:
                assert addr not in ("0.0.0.0", "::"), f"{node['name']} listens on {addr}:{port}"
                assert addr == node["addr"], f"{node['name']} ({node['addr']}) listens on {addr}:{port}"
            # slurmctld, slurmd or sshd on the node's own address and port
            assert (node["addr"], node["port"]) in socks, (node["name"], node["role"], socks)
        # srun listens on ephemeral ports of the node its batch script runs on, beside slurmd
        assert len(seen[first]) > 1, seen[first]
    finally:
        lab.slurm("scancel", job, check=False)


def _alive(pid: int) -> bool:
    return os.path.exists(f"/proc/{pid}")


def test_a_lab_whose_folder_was_removed_is_found_again(lab_build, state, tmp_path_factory):
    lab = deploy(tmp_path_factory, state, "removed", LAB)
    n = json.load(open(os.path.join(lab.path, "lab", "state.json")))["n"]
    pids = [int(p) for p in lab.node_pids().values()]
    shutil.rmtree(lab.path)
    assert all(_alive(p) for p in pids)
    r = lab.ctk("status", lab.path)
    assert r.returncode == 2 and "no such deployment folder" in r.stderr
    # A new deploy into the same folder stops the old lab first (its addresses are this lease's).
    r = lab.ctk("deploy", LAB, "-o", lab.path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "whose folder was removed" in r.stderr
    assert not any(_alive(p) for p in pids)
    # Removed again: `ctk destroy --lease N` stops it and frees the lease.
    pids = [int(p) for p in lab.node_pids().values()]
    shutil.rmtree(lab.path)
    r = lab.ctk("destroy", "--lease", str(n))
    assert r.returncode == 0 and f"lease {n}" in r.stdout, r.stderr
    assert not any(_alive(p) for p in pids)
    r = lab.ctk("destroy", lab.path)
    assert r.returncode == 2 and "no such deployment folder" in r.stderr


def test_status_lists_the_nodes_an_interrupted_deploy_left_running(lab_build, state, tmp_path):
    import signal
    path = str(tmp_path / "killed")
    proc = subprocess.Popen([sys.executable, "-m", "ctk", "deploy", LAB,
                             "-o", path, "-q"], env={**os.environ, "CTK_STATE_DIR": state},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    nodes_dir = os.path.join(path, "lab", "nodes")

    def with_pids() -> list[str]:
        return sorted(x for x in (os.listdir(nodes_dir) if os.path.isdir(nodes_dir) else [])
                      if os.path.exists(os.path.join(nodes_dir, x, "pid")))

    # the controller has booted, the rest has not finished: the kill lands mid-deploy or the test fails
    until(lambda: with_pids() or proc.poll() is not None, 120, "the first node's boot", interval=0.02)
    assert proc.poll() is None, "the deploy ended before the kill: nothing was interrupted"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    # A node whose boot had started runs in its own session: it survives the kill and writes
    # its pid a moment later: until two looks 3 s apart see the same nodes.
    last: list[list[str] | None] = [None]

    def settled() -> bool:
        now = with_pids()
        same, last[0] = now == last[0], now
        return same

    until(settled, 60, "the nodes whose boot had started, writing their pids", interval=3)
    lab = Lab(path, state)
    try:
        running = [x for x in os.listdir(nodes_dir) if os.path.exists(os.path.join(nodes_dir, x, "pid"))]
        assert running
        r = lab.ctk("status", path, "--json")
        st = json.loads(r.stdout)
        assert r.returncode == 1 and st["interrupted"] is True
        up = sorted(x["name"] for x in st["nodes"] if x["running"])
        assert up == sorted(running), (running, st["nodes"])
        assert "a deploy did not complete" in lab.ctk("status", path).stdout
    finally:
        r = lab.ctk("destroy", path)
    assert r.returncode == 0, r.stderr
    assert set(os.listdir(os.path.join(path, "lab"))) <= {"home", "root", "slurmctld", "slurmdbd", "identity.json"}


def _nodeinits(path):
    """{node name: number of its nodeinit processes (a node's monitor and PID 1: 2)}."""
    out = {}
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            argv = open(f"/proc/{p}/cmdline", "rb").read().decode(errors="replace").split("\0")
        except OSError:
            continue
        if "ctk.sandbox.nodeinit" in argv and argv[-2].startswith(os.path.join(path, "lab", "nodes") + "/"):
            name = argv[-2].split("/")[-2]
            out[name] = out.get(name, 0) + 1
    return out


def test_deploys_killed_at_random_moments_each_then_deployed_again_leave_one_node_each(lab_build, state, tmp_path):
    """`ctk deploy` SIGKILLed (with its process group) at 7 random moments of a deploy (new ones
    each run; CTK_KILL_SEED replays a run's), each time followed by a deploy to the end: every
    such deploy succeeds, with exactly one process tree (monitor and PID 1) per node and
    accounting up; destroy then leaves no process, mount
    or network. A node a killed deploy left booting is found (its monitor's pid) and replaced,
    never booted twice."""
    import random
    import signal
    seed = int(os.environ.get("CTK_KILL_SEED") or time.time())
    rnd = random.Random(seed)
    path = str(tmp_path / "killed")
    lab = Lab(path, state)
    argv = [sys.executable, "-m", "ctk", "deploy", LAB, "-o", path, "-q", "--max-nodes", "1"]
    try:
        r = lab.ctk(*argv[3:], timeout=300)
        assert r.returncode == 0, r.stderr[-3000:]
        # how long a deploy like the killed ones (every node to boot, the lab's data there) takes:
        # the shorter of two (one slowed by a build beside it drew moments past the end of the
        # next ones: 4 of 10 landed once), and the kills fall in its first 80 %
        durations = []
        for _ in range(2):
            assert lab.ctk("destroy", path).returncode == 0
            t0 = time.monotonic()
            r = lab.ctk(*argv[3:], timeout=300)
            assert r.returncode == 0, r.stderr[-3000:]
            durations.append(time.monotonic() - t0)
        window = 0.8 * min(durations)
        moments: list[float] = []
        landed: list[bool] = []
        for i in range(7):
            # from a stopped lab (its data kept), so that the killed deploy has every node to boot
            assert lab.ctk("destroy", path).returncode == 0
            proc = subprocess.Popen(argv, env={**os.environ, "CTK_STATE_DIR": state}, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL, start_new_session=True)
            moment = round(rnd.uniform(0.2, window), 2)
            moments.append(moment)
            time.sleep(moment)
            landed.append(proc.poll() is None)  # a deploy that had ended is no kill mid-deploy
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:  # the deploy, and every process of its group, had ended
                pass
            proc.wait()
            if not landed[-1]:  # one that ended before its kill must have deployed the lab
                assert proc.returncode == 0, (seed, moments, proc.returncode)
            if i % 3 == 2:  # sometimes the next deploy comes once the nodes the killed one started are up
                time.sleep(rnd.uniform(0, 2))
            r = lab.ctk(*argv[3:], timeout=300)
            assert r.returncode == 0, (seed, moments, r.stderr[-3000:])
            names = [x["name"] for x in lab.status()[1]["nodes"]]
            counts = _nodeinits(path)
            assert counts == dict.fromkeys(names, 2), (seed, moments, counts)
            rc, st = lab.status()
            assert rc == 0 and st["accounting"] == "up", (seed, moments, st)
        print(f"killed at {moments} s of a {min(durations):.1f} s deploy (CTK_KILL_SEED={seed}); "
              f"{sum(landed)} of them while it ran")
        # only a kill that lands while the deploy runs tests anything: most of them must
        assert sum(landed) >= 4, (seed, moments, landed)
        n = json.load(open(os.path.join(path, "lab", "state.json")))["n"]
        pids = [int(p) for p in lab.node_pids().values()]
        r = lab.ctk("destroy", "--purge", path)
        assert r.returncode == 0, r.stderr
        _nothing_left(lab, n, pids)
        assert _nodeinits(path) == {}
    finally:
        lab.ctk("destroy", "--purge", path)  # a failure above leaves no lab running


AUTH_SLURM = os.path.join(os.path.dirname(__file__), "blueprints", "auth-slurm-13.yaml")


def test_auth_slurm_lab_runs_a_two_node_job_with_no_munge(state, tmp_path_factory):
    """enable_slurm_auth on Debian 13 (Slurm 24.11): AuthType=auth/slurm; slurmctld, slurmd and
    the login node's sackd read the lab's slurm.key (0400, in the deployment's secrets, on the
    nodes' tmpfs, in no image layer); no munged runs; a 2-node job runs."""
    lab = deploy(tmp_path_factory, state, "authslurm", AUTH_SLURM)
    try:
        conf = open(os.path.join(lab.path, "lab", "etc", "slurm", "slurm.conf")).read()
        assert "AuthType=auth/slurm\n" in conf and "CredType=cred/slurm\n" in conf
        key = os.path.join(lab.path, "lab", "secrets", "slurm.key")
        assert os.stat(key).st_mode & 0o777 == 0o400 and os.path.getsize(key) == 1024
        assert not os.path.exists(os.path.join(lab.path, "lab", "secrets", "munge.key"))
        out = lab.slurm("srun", "-N2", "hostname").stdout.split()
        assert sorted(out) == sorted(lab.slurm("sinfo", "-h", "-N", "-o", "%N").stdout.split())
        # slurmdbd authenticates with the same key: accounting has the job. This lab keeps a
        # finished job 2 s (MinJobAge); once slurmctld 24.11 has forgotten it, sacct has its end.
        job = lab.slurm("sbatch", "--parsable", "-N1", "-o", "/dev/null", "--wrap", "exit 4").stdout.strip()
        wait_forgotten(lab, job)
        assert sacct_line(lab, job) == "FAILED|4:0"
        version = lab.slurm("sinfo", "-V").stdout
        assert version.startswith(("slurm-wlm 24.11", "slurm 24.11")), version
        names = []
        for node in os.listdir(os.path.join(lab.path, "lab", "nodes")):
            pid = open(os.path.join(lab.path, "lab", "nodes", node, "pid")).read().strip()
            ns = os.readlink(f"/proc/{pid}/ns/pid")
            for p in filter(str.isdigit, os.listdir("/proc")):
                try:
                    if os.readlink(f"/proc/{p}/ns/pid") == ns:
                        names.append((node, open(f"/proc/{p}/comm").read().strip()))
                except OSError:
                    pass
        comms = {c for _, c in names}
        assert "munged" not in comms and {"slurmctld", "slurmd", "sackd"} <= comms, names
        with open(key, "rb") as f:
            secret = f.read()
        image = json.load(open(os.path.join(state, "images", "slurm-debian-13.json")))
        for layer in image["layers"]:
            root = os.path.join(state, "layers", layer)
            for dirpath, _, files in os.walk(root):
                for fn in files:
                    p = os.path.join(dirpath, fn)
                    assert fn != "slurm.key", p
                    if os.path.isfile(p) and not os.path.islink(p) and os.path.getsize(p) == 1024:
                        assert open(p, "rb").read() != secret, p
    finally:
        lab.destroy()


HEALTH = os.path.join(os.path.dirname(__file__), "blueprints", "health.yaml")
# A stand-in for nvidia-smi (this machine has no GPU): lists as many GPUs as /etc/ctk-test-gpus says.
STAND_IN_NVIDIA_SMI = """#!/bin/sh
n=$(cat /etc/ctk-test-gpus)
i=0
while [ "$i" -lt "$n" ]; do echo "GPU $i: NVIDIA H100 80GB HBM3 (UUID: GPU-stand-in-$i)"; i=$((i + 1)); done
"""


def _node_line(lab, node):
    return lab.slurm("scontrol", "show", "node", "-o", node).stdout


def _wait_node(lab, node, done, timeout=90):
    said = [""]

    def check() -> str | None:
        said[0] = line = _node_line(lab, node)
        return line if done(line) else None

    return until(check, timeout, lambda _: f"node {node}: {said[0]}", interval=1)


def test_health_check_drains_a_node_whose_stand_in_nvidia_smi_lists_7_of_8_gpus_and_returns_it(
        lab_build, state, tmp_path_factory):
    """slurmd runs ctk's health check (HealthCheckProgram, every 5 s here) on a real node whose
    NodeName line promises 8 GPUs: with a stand-in nvidia-smi listing 7 the node is drained with
    the reason, which scontrol and sinfo -R show; listing 8 again, it is back in service."""
    lab = deploy(tmp_path_factory, state, "health", HEALTH)
    try:
        conf = open(os.path.join(lab.path, "lab", "etc", "slurm", "slurm.conf")).read()
        assert "HealthCheckProgram=/usr/lib/ctk/healthcheck\n" in conf and "HealthCheckNodeState=ANY\n" in conf
        node = lab.slurm("sinfo", "-h", "-N", "-o", "%N").stdout.split()[0]
        assert "Gres=gpu:h100:8" in _node_line(lab, node)
        # The count first, then the stand-in moved into place whole: the check runs every 5 s and
        # must never meet a half-made one (it once ran between two steps and saw 0 GPUs).
        cmd = (f"echo 7 > /etc/ctk-test-gpus && printf %s {shlex.quote(STAND_IN_NVIDIA_SMI)} > /usr/local/bin/.nvidia-smi "
               "&& chmod 755 /usr/local/bin/.nvidia-smi && mv /usr/local/bin/.nvidia-smi /usr/local/bin/nvidia-smi")
        r = lab.ctk("exec", lab.path, node, "--", "sh", "-c", cmd)
        assert r.returncode == 0, r.stderr
        line = _wait_node(lab, node, lambda ln: "DRAIN" in ln)
        assert "Reason=ctk-healthcheck: nvidia-smi lists 7 GPUs, the node promises 8" in line, line
        assert "nvidia-smi lists 7 GPUs" in lab.slurm("sinfo", "-R", "-h", "-o", "%E").stdout
        r = lab.ctk("exec", lab.path, node, "--", "sh", "-c", "echo 8 > /etc/ctk-test-gpus")
        assert r.returncode == 0
        line = _wait_node(lab, node, lambda ln: "DRAIN" not in ln)
        assert re.search(r"State=(IDLE|MIXED|ALLOCATED)\b", line), line
        out = lab.slurm("srun", "-N1", "-w", node, "hostname").stdout.strip()
        assert out == node
    finally:
        lab.destroy()
