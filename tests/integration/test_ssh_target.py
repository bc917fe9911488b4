"""The ssh target for real: three bare machines (lab nodes booted from the debian-12 base
layer alone, running nothing but sshd, each with its own hostname and loopback address in
127.0.240.0/24) become a Slurm cluster through `ctk deploy`, which applies ctk's Ansible roles
over SSH. Then a job runs across both computes from this machine, a second deploy changes
nothing, and `ctk destroy` stops every daemon.

The bare nodes share this machine's network stack, as the local target's nodes do, so each
slurmd gets its own port (the blueprint's slurmd_port); the nodes have no systemd, so the
blueprint sets service_manager: direct. The hosts install Debian's slurm and munge packages
with apt and the jax-cpu-0.10 stack's lock for their Python 3.11 with pip (hashes required,
through this machine's CA bundle), as a real machine would. About three minutes (half of it the first deploy).
"""

import json
import os
import shutil
import socket
import subprocess
import time

import pytest

from ctk.images import buildnode
from ctk.images.store import Store
from ctk.sandbox import node as nodes

from .conftest import ctk
from .labtools import until

pytestmark = pytest.mark.integration
for tool in ("debootstrap", "srun", "munged", "ssh", "unshare"):
    if not shutil.which(tool, path="/usr/sbin:/usr/bin:/sbin:/bin"):
        pytest.skip(f"{tool} is not installed", allow_module_level=True)

SUBNET = "127.0.240"  # this test's machines; lab leases and build nodes use other subnets
HOSTS = [("sshctl", "controller"), ("sshnode-0", "compute"), ("sshnode-1", "compute")]
DAEMONS = ("munged", "slurmctld", "slurmd")


def _free_ports(n: int, start: int = 16800) -> list[int]:
    """n ports free on every address (slurmd and slurmctld listen on all of them), below the
    ephemeral range and the lab leases' ports."""
    out = []
    port = start
    while len(out) < n:
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("0.0.0.0", port))
                out.append(port)
            except OSError:
                pass
        port += 1
    return out


def blueprint(machines, ports) -> str:
    ctl_port, *slurmd_ports = ports
    lines = []
    for i, (name, role) in enumerate(HOSTS):
        m = machines[name]
        extra = (f", slurmctld_port: {ctl_port}" if role == "controller" else
                 f", nodeset: debug_nodeset, slurmd_port: {slurmd_ports[i - 1]}")
        lines.append(f"      - {{name: {name}, host: {m.addr}, port: {m.port}, user: root, "
                     f"key: {m.private_key}, role: {role}{extra}}}")
    hosts = "\n".join(lines)
    return f"""\
blueprint_name: ssh-target-test
vars:
  deployment_name: sshtest
deployment_groups:
- group: image
  modules:
  - id: bare_image
    source: ctk/image
    settings:
      name: sshtest
      base: debian-12
      roles: [common, munge, slurm, jax]
      stack: jax-cpu-0.10
- group: cluster
  modules:
  - id: debug_nodeset
    source: ctk/slurm/nodeset
    use: [bare_image]
    settings:
      machine_type: n2-standard-2
      node_count_static: 2
  - id: debug_partition
    source: ctk/slurm/partition
    use: [debug_nodeset]
    settings:
      partition_name: debug
      is_default: true
      exclusive: false
  - id: controller
    source: ctk/slurm/controller
    use: [bare_image, debug_partition]
  - id: machines
    source: ctk/target/ssh
    settings:
      service_manager: direct
      hosts:
{hosts}
"""


def processes(machine) -> set[str]:
    r = nodes.run_in(machine.spec.state_dir, ["sh", "-c", "cat /proc/[0-9]*/comm 2>/dev/null"])
    return set(r.stdout.split())


class Cluster:
    def __init__(self, work, machines, state):
        self.work, self.machines = work, machines
        self.dir = str(work / "dep")
        self.bp = str(work / "bp.yaml")
        self.env = {"CTK_STATE_DIR": state}
        self.timings = {}

    def ctk(self, *args, timeout=1800):
        t0 = time.monotonic()
        r = ctk(*args, env=self.env, timeout=timeout)
        self.timings[" ".join(args[:1])] = round(time.monotonic() - t0, 1)
        return r

    def deploy(self):
        r = self.ctk("deploy", self.bp, "-o", self.dir, "--json")
        assert r.returncode == 0, r.stderr[-4000:]
        return json.loads(r.stdout)


@pytest.fixture(scope="module")
def bare(state, debian12_base, tmp_path_factory):
    """Three running bare machines; stopped at the end whatever happens."""
    store = Store(state)
    base = debian12_base
    work = tmp_path_factory.mktemp("ssh-target")
    home = work / "root-home"  # root's home, shared by the machines as a cluster's NFS home is
    home.mkdir(mode=0o700)
    machines = {}
    try:
        for i, (name, _) in enumerate(HOSTS):
            machines[name] = buildnode.boot(store.lowerdirs([base]), str(work / "machines" / name),
                                            hostname=name, addr=f"{SUBNET}.{i + 1}",
                                            binds=[{"src": str(home), "dest": "/root"}])
        yield work, machines
    finally:
        for m in machines.values():
            m.stop()


@pytest.fixture(scope="module")
def cluster(bare, state):
    work, machines = bare
    c = Cluster(work, machines, state)
    with open(c.bp, "w") as f:
        f.write(blueprint(machines, _free_ports(3)))
    c.first = c.deploy()
    yield c
    if os.path.exists(os.path.join(c.dir, "ssh", "state.json")):
        c.ctk("destroy", c.dir)
    print("ssh target timings:", c.first["timings"], c.timings)


def test_a_controller_named_unlike_its_hostname_is_refused(bare, state):
    work, machines = bare
    bp = work / "misnamed.yaml"
    bp.write_text(blueprint(machines, _free_ports(3)).replace("{name: sshctl,", "{name: headnode,"))
    r = ctk("deploy", str(bp), "-o", str(work / "misnamed"), env={"CTK_STATE_DIR": state}, timeout=120)
    assert r.returncode == 2, r.stderr[-3000:]
    assert "the controller host 'headnode'" in r.stderr and "name it 'sshctl'" in r.stderr
    assert not os.path.exists(work / "misnamed" / "ssh" / "logs")  # refused before any playbook ran
    assert not os.path.exists(work / "misnamed" / "ssh" / "state.json")


def test_deploy_configures_bare_machines(cluster):
    res = cluster.first
    assert sorted(res["hosts"]) == sorted(n for n, _ in HOSTS)
    assert all(res["changed"]["install"][n] > 0 for n, _ in HOSTS)
    running = {n: processes(m) for n, m in cluster.machines.items()}
    assert {"munged", "slurmctld"} <= running["sshctl"] and "slurmd" not in running["sshctl"]
    for n in ("sshnode-0", "sshnode-1"):
        assert {"munged", "slurmd"} <= running[n] and "slurmctld" not in running[n]


def test_status_reports_every_host_up(cluster):
    r = cluster.ctk("status", cluster.dir, "--json")
    st = json.loads(r.stdout)
    assert r.returncode == 0, r.stdout
    assert st["target"] == "ssh" and st["controller_reachable"]
    assert {n["name"]: n["slurm_state"] for n in st["nodes"] if n["role"] == "compute"} == {
        "sshnode-0": "idle", "sshnode-1": "idle"}
    assert st["partitions"][0]["partition"] == "debug" and st["partitions"][0]["nodes"] == 2


def test_srun_runs_on_both_computes_from_this_machine(cluster):
    r = cluster.ctk("env", cluster.dir)
    assert r.returncode == 0, r.stderr
    conf = r.stdout.strip().split("=", 1)[1]
    assert conf == os.path.join(cluster.dir, "ssh", "host", "slurm.conf")
    out = subprocess.run(["srun", "-N2", "--chdir=/tmp", "hostname"], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "SLURM_CONF": conf})
    assert out.returncode == 0, out.stderr
    assert sorted(out.stdout.split()) == ["sshnode-0", "sshnode-1"]


def test_exec_runs_a_command_on_a_host(cluster):
    r = cluster.ctk("exec", cluster.dir, "sshnode-1", "--", "hostname")
    assert r.returncode == 0 and r.stdout.strip() == "sshnode-1", r.stderr


def test_jobs_go_through_the_controller_over_ssh(cluster):
    """`ctk job --deployment` of an ssh-target deployment: Fabric to the controller (the
    blueprint has no login host) with the deployment's key and known_hosts."""
    r = cluster.ctk("job", "submit", "jax-train", "--deployment", cluster.dir, "--nodes", "2", "--wait",
                    "--", "hostname")
    assert r.returncode == 0, (r.stdout, r.stderr[-3000:])
    jid = r.stdout.strip()
    out = cluster.ctk("job", "logs", jid, "--deployment", cluster.dir).stdout
    assert sorted(out.split()) == ["sshnode-0", "sshnode-1"]
    rows = json.loads(cluster.ctk("job", "status", "--deployment", cluster.dir, "--json").stdout)
    assert [(x["id"], x["state"]) for x in rows] == [(jid, "COMPLETED")]
    assert rows[0]["stdout"] == f"/root/.ctk-jobs/jax-train-{jid}.out"


def test_the_jax_stack_was_pip_installed_on_the_hosts(cluster):
    r = cluster.ctk("exec", cluster.dir, "sshnode-0", "--", "/opt/ctk/jax/bin/python", "-c",
                    "import jax; print(jax.__version__, jax.devices()[0].platform)")
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["0.10.2", "cpu"]


def test_no_secret_in_any_file_ctk_wrote(cluster):
    sdir = os.path.join(cluster.dir, "ssh")
    assert os.stat(os.path.join(sdir, "inventory.yml")).st_mode & 0o777 == 0o600
    key = os.path.join(sdir, "secrets", "munge.key")
    assert os.stat(key).st_mode & 0o777 == 0o400
    secrets = [open(key, "rb").read()[:64]]
    for m in cluster.machines.values():
        body = open(m.private_key).read().splitlines()[1:-1]
        secrets += [line.encode() for line in body]
    for root, _, files in os.walk(cluster.dir):
        for f in files:
            p = os.path.join(root, f)
            if p == key or os.path.islink(p) or not os.path.isfile(p):
                continue
            data = open(p, "rb").read()
            assert not any(s in data for s in secrets), f"{p} holds a secret"


def test_a_second_deploy_changes_nothing_but_a_dead_slurmd(cluster):
    """Deploying again is a no-op (every host's install and configure phases change nothing, no
    file is rewritten) except for what is broken: a slurmd killed on one host is reported by
    `ctk status` and started again, the one change of that host's configure phase. (The roles'
    own idempotence, host by host, is test_roles' and test_image_build's.)"""
    m = cluster.machines["sshnode-1"]
    assert nodes.run_in(m.spec.state_dir, ["sh", "-c", "kill $(cat /run/slurmd.pid)"]).returncode == 0
    until(lambda: "slurmd" not in processes(m), 30, "the end of the killed slurmd", interval=0.1)
    r = cluster.ctk("status", cluster.dir, "--json")
    assert r.returncode == 1
    assert [n["dead_services"] for n in json.loads(r.stdout)["nodes"] if n["name"] == "sshnode-1"] == [["slurmd"]]
    again = cluster.deploy()
    assert again["changed"] == {"install": {n: 0 for n, _ in HOSTS},
                                "configure": {"sshctl": 0, "sshnode-0": 0, "sshnode-1": 1}}
    assert again["files_changed"] == []
    assert "slurmd" in processes(m)


def test_a_host_dropped_from_the_blueprint_is_stopped(cluster):
    text = open(cluster.bp).read()
    fewer = "\n".join(line for line in text.splitlines() if "{name: sshnode-1," not in line) + "\n"
    with open(cluster.bp, "w") as f:
        f.write(fewer.replace("node_count_static: 2", "node_count_static: 1"))
    res = cluster.deploy()
    assert res["hosts"] == ["sshctl", "sshnode-0"] and res["changed"]["stop"]["sshnode-1"] > 0
    assert not (processes(cluster.machines["sshnode-1"]) & set(DAEMONS))
    r = cluster.ctk("status", cluster.dir, "--json")
    st = json.loads(r.stdout)
    assert r.returncode == 0 and [n["name"] for n in st["nodes"]] == ["sshctl", "sshnode-0"]
    assert st["partitions"][0]["nodes"] == 1


def test_destroy_stops_every_daemon(cluster):
    r = cluster.ctk("destroy", cluster.dir)
    assert r.returncode == 0, r.stderr[-3000:]
    for name, m in cluster.machines.items():
        assert not (processes(m) & set(DAEMONS)), name
        assert nodes.run_in(m.spec.state_dir, ["test", "-x", "/usr/sbin/munged"]).returncode == 0  # packages stay
    r = cluster.ctk("status", cluster.dir)
    assert r.returncode == 2 and "not deployed" in r.stderr
