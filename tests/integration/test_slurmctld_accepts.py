"""The real slurmctld of every release ctk's images carry accepts what ctk renders: this
machine's (Debian 12: Slurm 22.05), debian-13's (Slurm 24.11) in a node booted from a
debian-13 image, and Slurm 26.05 (Debian forky's, slurm_release) in a node booted from a debian-13
image that asked for it (the `slurm` fixture, tests/integration/conftest.py).

A scaled-down a3mega cluster (4 GPU nodes, 2 debug nodes, plus an empty nodeset and
partition) is rendered with a NodeLayout, slurmctld is started on it with a private
munged, and sinfo/scontrol must report what was rendered, with no complaint in its log.
One test also starts two slurmd so the local-layout gres.conf/cgroup.conf and
config_overrides are exercised. Everything lives under pytest's tmp dir and uses loopback
addresses only.
"""

from __future__ import annotations

import json
import os
import pwd
import random
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from ctk.model import (
    BASES,
    Controller,
    Deployment,
    ImageSpec,
    Login,
    Nodeset,
    Partition,
    parse_release,
)
from ctk.render.hostlist import compress, expand
from ctk.render.slurmconf import (
    NodeLayout,
    render_cgroup_conf,
    render_gres_conf,
    render_slurm_conf,
)
from ctk.sandbox import daemons
from ctk.sandbox.daemons import Proc, free_tcp_port

from .slurm_releases import config_complaints

pytestmark = pytest.mark.integration

GPU_NODES = 4
DEBUG_NODES = 2


def scaled_a3mega() -> Deployment:
    return Deployment(
        deployment_name="a3mega-it",
        blueprint_name="a3mega-slurm",
        slurm_cluster_name="a3megait",
        nodesets=[
            Nodeset(
                name="a3meganodeset",
                module_id="a3mega_nodeset",
                machine_type="a3-megagpu-8g",
                node_prefix="a3mega",
                cpus=208,
                memory_mb=1916928,
                node_count_static=GPU_NODES,
                gpu_type="h100",
                gpu_count=8,
                node_conf={"CoresPerSocket": 52, "ThreadsPerCore": 2},
            ),
            Nodeset(
                name="debugnodeset",
                module_id="debug_nodeset",
                machine_type="n2-standard-2",
                node_prefix="debug",
                cpus=2,
                memory_mb=7552,
                node_count_dynamic_max=DEBUG_NODES,
                features=["debug"],
            ),
            Nodeset(
                name="sparenodeset",
                module_id="spare_nodeset",
                machine_type="n2-standard-4",
                node_prefix="spare",
                cpus=4,
                memory_mb=15000,
            ),
        ],
        partitions=[
            Partition(
                name="a3mega",
                module_id="a3mega_partition",
                nodesets=["a3meganodeset"],
                is_default=True,
                exclusive=False,
                conf={"OverSubscribe": "EXCLUSIVE", "ResumeTimeout": 900},
            ),
            Partition(
                name="debug",
                module_id="debug_partition",
                nodesets=["debugnodeset"],
                exclusive=False,
                max_time="2-00:00:00",
            ),
            Partition(name="spare", module_id="spare_partition", nodesets=["sparenodeset"]),
        ],
        controller=Controller(
            module_id="slurm_controller",
            hostname="a3mega-controller",
            slurm_conf={"PrologFlags": "Alloc", "SlurmctldTimeout": 300},
        ),
        logins=[Login(module_id="slurm_login", name="a3mega-login")],
    )


@dataclass
class Cluster:
    dep: Deployment
    root: Path
    conf: Path
    env: dict[str, str]
    slurmctld: Proc
    slurm: object  # the release it runs on (slurm_releases.HostSlurm or NodeSlurm)
    startup_log: str  # slurmctld's log once it answered

    def run(self, *cmd: str) -> str:
        r = self.slurm.run(list(cmd), self.env)
        assert r.returncode == 0, f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr}"
        return r.stdout

    def show(self, kind: str, name: str) -> dict[str, str]:
        """`scontrol show -o <kind> <name>` as a dict (values with spaces are not needed)."""
        out = self.run("scontrol", "show", "-o", kind, name)
        return dict(tok.split("=", 1) for tok in out.split() if "=" in tok)


@pytest.fixture(scope="module")
def cluster(slurm, tmp_path_factory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp(f"slurm-{slurm.name}")
    dirs = {name: root / name for name in ("state", "spool", "log", "run", "gpus")}
    for d in dirs.values():
        d.mkdir()
    for i in range(8):  # emulated GPUs for gres.conf File=
        (dirs["gpus"] / f"nvidia{i}").symlink_to("/dev/null")

    dep = scaled_a3mega()
    base, _, release = slurm.name.partition("@")
    if base in BASES:  # the nodes' image, as a lab's deployment has it (its Slurm shapes cgroup.conf)
        dep.images = [ImageSpec(name="node", module_id="node_image", base=base, roles=["common", "munge", "slurm"],
                                source="ctk/image", slurm_release=release)]
    node_names = [n for ns in dep.nodesets for n in ns.node_names()]
    layout = NodeLayout(
        controller_addr="127.0.0.1",
        controller_port=free_tcp_port(),
        node_addr=dict.fromkeys(node_names, "127.0.0.1"),
        node_port={name: free_tcp_port() for name in node_names},
        state_dir=str(dirs["state"]),
        spool_dir=str(dirs["spool"]),
        log_dir=str(dirs["log"]),
        pid_dir=str(dirs["run"]),
        slurm_user=pwd.getpwuid(os.geteuid()).pw_name,  # "root" when run as root
        slurmd_port=free_tcp_port(),
        munge_socket=str(root / "munge" / "munge.sock"),
        gpu_dev_dir=str(dirs["gpus"]),
    )
    conf = root / "slurm.conf"
    conf.write_text(render_slurm_conf(dep, layout=layout))
    (root / "gres.conf").write_text(render_gres_conf(dep, layout=layout))
    (root / "cgroup.conf").write_text(render_cgroup_conf(dep, layout=layout))

    started: list[Proc] = []
    try:
        started.append(slurm.start_munged(root / "munge"))
        ctld = slurm.start_slurmctld(conf)
        started.append(ctld)
        log = (root / "log" / "slurmctld.log").read_text()
        yield Cluster(dep=dep, root=root, conf=conf, env=ctld.env, slurmctld=ctld, slurm=slurm, startup_log=log)
    finally:
        for proc in reversed(started):
            proc.stop()


def test_release(cluster):
    """The node runs its base's Slurm (24.11 on debian-13), or the release its image asked for
    (debian-13@26.05), not this machine's."""
    base, _, release = cluster.slurm.name.partition("@")
    if base in BASES:
        assert cluster.slurm.version() == (parse_release(release) if release else BASES[base].slurm)
    assert re.search(r"\bslurmctld version \d+\.\d+", cluster.startup_log)


def test_partitions_node_counts_and_gres(cluster):
    out = cluster.run("sinfo", "-h", "-o", "%P|%a|%D|%G")
    rows = sorted(tuple(line.split("|")) for line in out.splitlines())
    assert rows == [
        ("a3mega*", "up", str(GPU_NODES), "gpu:h100:8"),
        ("debug", "up", str(DEBUG_NODES), "(null)"),
        ("spare", "inactive", "0", "(null)"),
    ]


def test_partition_settings(cluster):
    a3 = cluster.show("partition", "a3mega")
    assert a3["Nodes"] == f"a3mega-[0-{GPU_NODES - 1}]"
    assert a3["Default"] == "YES"
    if cluster.slurm.version() >= (26, 5):  # 26.05 shows OverSubscribe=EXCLUSIVE as a field of its own
        assert a3["Exclusive"] == "NODE" and a3["OverSubscribe"] == "NO"
    else:
        assert a3["OverSubscribe"] == "EXCLUSIVE"
    assert a3["MaxTime"] == "UNLIMITED"
    if "ResumeTimeout" in a3:
        assert a3["ResumeTimeout"] == "900"
    else:  # 24.11 shows it only where power saving is on; its JSON always has it
        shown = json.loads(cluster.run("scontrol", "show", "partition", "a3mega", "--json"))
        assert shown["partitions"][0]["timeouts"]["resume"] == {"set": True, "infinite": False, "number": 900}
    assert a3["TotalNodes"] == str(GPU_NODES)
    assert a3["TotalCPUs"] == str(208 * GPU_NODES)
    assert a3["DefMemPerCPU"] == str(1916928 // 208)  # a job that names no memory: a CPU's share

    debug = cluster.show("partition", "debug")
    assert debug["Nodes"] == f"debug-[0-{DEBUG_NODES - 1}]"
    assert debug["Default"] == "NO"
    assert debug["OverSubscribe"] == "NO"
    assert debug["MaxTime"] == "2-00:00:00"
    assert debug["DefMemPerCPU"] == str(7552 // 2)

    spare = cluster.show("partition", "spare")
    assert spare["State"] == "INACTIVE"
    assert spare["TotalNodes"] == "0"


def test_node_definitions(cluster):
    for i in range(GPU_NODES):
        node = cluster.show("node", f"a3mega-{i}")
        assert node["CPUTot"] == "208"
        assert node["Sockets"] == "2"
        assert node["CoresPerSocket"] == "52"
        assert node["ThreadsPerCore"] == "2"
        assert node["RealMemory"] == "1916928"
        assert node["Gres"] == "gpu:h100:8"
        assert node["NodeAddr"] == "127.0.0.1"
        assert node["Partitions"] == "a3mega"
    node = cluster.show("node", "debug-1")
    assert (node["CPUTot"], node["RealMemory"], node["AvailableFeatures"]) == ("2", "7552", "debug")
    # login nodes and empty nodesets are not Slurm nodes
    r = cluster.slurm.run(["scontrol", "show", "node", "a3mega-login-0"], cluster.env)
    assert r.returncode != 0


def test_global_settings(cluster):
    out = cluster.run("scontrol", "show", "config")
    config = {}
    for line in out.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            config[key.strip()] = value.strip()
    assert config["ClusterName"] == "a3megait"
    assert config["SelectType"] == "select/cons_tres"
    assert config["SelectTypeParameters"] == "CR_CORE_MEMORY"
    assert config["GresTypes"] == "gpu"
    assert config["ProctrackType"] == "proctrack/linuxproc"
    assert config["SchedulerType"] == "sched/backfill"
    assert config["ReturnToService"] == "2"
    assert config["SchedulerParameters"] == "bf_continue,salloc_wait_nodes"
    assert config["PrologFlags"] == "Alloc"  # from controller.slurm_conf
    assert config["SlurmctldTimeout"] == "300 sec"  # overridden by controller.slurm_conf


def test_no_config_complaints_in_log(cluster):
    """No error, warning or deprecation from reading the configuration (24.11 too)."""
    log = cluster.startup_log
    for complaint in ("Resetting CPUs", "match no Sockets", "Parse error", "unrecognized key", "fatal"):
        assert complaint not in log
    assert config_complaints(log) == []


def test_slurmd_registers_with_emulated_resources(cluster):
    """Two slurmd on this host: an 8-GPU a3mega node and a debug node become IDLE, with no
    complaint about the configuration in their logs.

    This exercises what slurmctld alone does not read: the layout cgroup.conf (slurmd
    loads the cgroup plugin even with proctrack/linuxproc), gres.conf File= links, and
    SlurmdParameters=config_overrides (the host is far smaller than an a3-megagpu-8g).
    """
    procs: list[Proc] = []
    try:
        for name in ("a3mega-0", "debug-0"):
            procs.append(cluster.slurm.start_slurmd(cluster.conf, name, timeout=60))
            log = (cluster.root / "log" / f"slurmd-{name}.log").read_text()
            assert config_complaints(log) == [], name
        assert cluster.show("node", "a3mega-0")["Gres"] == "gpu:h100:8"
        out = cluster.run(
            "srun", "-p", "a3mega", "-w", "a3mega-0", "--gpus-per-node=8", "-t", "1",
            "printenv", "SLURMD_NODENAME", "CUDA_VISIBLE_DEVICES",
        )
        assert out.split() == ["a3mega-0", "0,1,2,3,4,5,6,7"]
    finally:
        for proc in procs:
            proc.stop()


def test_hostlist_matches_scontrol(cluster):
    """compress/expand agree with Slurm's own hostlist code."""
    rng = random.Random(1234)
    cases = [
        ["n-0", "n-1", "n-3", "x-1"],
        ["n-007", "n-008"],
        ["n-3", "n-1", "n-07", "n-7", "n-8", "x", "n-09", "n-10"],
        ["n-9", "n-10", "n-08", "n-09", "n-10", "n-11"],
        [f"a3mega-{i}" for i in range(128)],
    ]
    for _ in range(20):
        cases.append(
            [f"{rng.choice(['a-', 'b-', 'gpu'])}{str(rng.randrange(0, 30)).zfill(rng.choice([1, 1, 2, 3]))}"
             for _ in range(rng.randrange(1, 12))]
        )
    for names in cases:
        expr = compress(names)
        assert cluster.run("scontrol", "show", "hostlist", ",".join(names)).strip() == expr
        assert cluster.run("scontrol", "show", "hostnames", expr).split() == expand(expr) == names


def test_start_errors_carry_the_log_tail(tmp_path, cluster):
    """A config slurmctld refuses gives a DaemonError quoting slurmctld's own words."""
    bad = tmp_path / "slurm.conf"
    text = cluster.conf.read_text().replace("ResumeTimeout=900", "NoSuchKey=1")
    # a fresh state/log dir and port so the running controller is not disturbed
    text = text.replace(str(cluster.root / "state"), str(tmp_path))
    text = text.replace(str(cluster.root / "log"), str(tmp_path))
    text = text.replace(str(cluster.root / "run"), str(tmp_path))
    text = re.sub(r"(?m)^SlurmctldPort=\d+$", f"SlurmctldPort={free_tcp_port()}", text)
    bad.write_text(text)
    with pytest.raises(daemons.DaemonError, match="slurmctld did not start") as exc:
        cluster.slurm.start_slurmctld(bad, timeout=20)
    assert "NoSuchKey" in str(exc.value)
