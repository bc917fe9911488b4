"""The elastic lab's pure parts: lab addresses (a /22 per lab), the plan of its cloud nodes, the
power-saving slurm.conf, the programs slurmctld runs, the memory check, --chaos's rates, power
states from sinfo's flags, and the agent's requests. The daemons themselves are exercised by
tests/integration/test_elastic.py."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import time

import pytest

from ctk import paths
from ctk.cli.cluster import chaos_rate
from ctk.errors import UserError
from ctk.plan import process
from ctk.sandbox import netns
from ctk.targets import labagent, local
from ctk.targets.base import power_state

ELASTIC = os.path.join(paths.BLUEPRINTS, "elastic-lab.yaml")
LAB = os.path.join(paths.BLUEPRINTS, "lab.yaml")


def elastic():
    return process(ELASTIC).deployment


# ---- addresses ----------------------------------------------------------------------------

def test_each_lab_has_a_22_of_1021_node_addresses_and_the_host_at_its_end():
    assert netns.addr(1, 1) == "198.18.4.1"
    assert netns.addr(1, 255) == "198.18.4.255"
    assert netns.addr(1, 256) == "198.18.5.0"
    assert netns.addr(1, netns.MAX_HOSTS) == "198.18.7.253"
    assert netns.addr(1, netns.HOST) == "198.18.7.254"
    assert netns.addr(2, 1) == "198.18.8.1"  # the next lab's block
    assert netns.addr(63, 1) == "198.18.252.1" and netns.subnet(63) == "198.18.252.0/22"
    for bad in ((0, 1), (64, 1), (1, 0), (1, netns.HOST + 1)):
        with pytest.raises(ValueError):
            netns.addr(*bad)
    addrs = {netns.addr(n, h) for n in (1, 2) for h in range(1, netns.HOST + 1)}
    assert len(addrs) == 2 * netns.HOST  # no two nodes (or hosts) of two labs share one


# ---- the plan -----------------------------------------------------------------------------

def test_dynamic_spot_and_flex_nodes_are_planned_as_such_and_share_slurmds_port():
    plan = local.plan_lab(elastic(), 3)
    by = {x.name: x for x in plan.nodes}
    assert not by["elasticlabdebugnodeset-0"].dynamic
    assert all(by[f"elasticlabdyn-{i}"].dynamic and not by[f"elasticlabdyn-{i}"].spot for i in range(4))
    assert all(by[f"elasticlabspot-{i}"].spot for i in range(4))
    assert by["elasticlabflex-0"].flex == 600 and by["elasticlabflex-0"].dynamic
    computes = [x for x in plan.nodes if x.role == "compute"]
    assert len({x.port for x in computes}) == 1 and len({x.addr for x in plan.nodes}) == len(plan.nodes)
    assert [x.host for x in plan.nodes] == list(range(1, len(plan.nodes) + 1))
    assert plan.needs_agent and len(plan.cloud_nodes) == 10
    assert not local.plan_lab(process(LAB).deployment, 3).needs_agent


def test_max_nodes_keeps_static_nodes_first_and_a_lab_stops_at_1021_nodes():
    dep = elastic()
    dep.nodesets[0].node_count_static, dep.nodesets[0].node_count_dynamic_max = 3, 5
    scaled, notes = local.scale(dep, 4)
    assert (scaled.nodesets[0].node_count_static, scaled.nodesets[0].node_count_dynamic_max) == (3, 1)
    assert any("8 nodes capped to 4" in n for n in notes)
    dep.nodesets[1].node_count_dynamic_max = 1020
    with pytest.raises(UserError, match="at most 1021"):
        local.plan_lab(dep, 3, max_nodes=2000)


def test_the_lab_slurm_conf_powers_cloud_nodes_and_only_them(tmp_path):
    plan = local.plan_lab(elastic(), 3)
    files = local.lab_files(plan, str(tmp_path))
    conf = files["etc/slurm/slurm.conf"]
    lines = conf.splitlines()
    cloud = [ln for ln in lines if ln.startswith("NodeName=") and ln.endswith("State=CLOUD")]
    assert len(cloud) == 10 and all("debugnodeset" not in ln for ln in cloud)
    for want in ("ResumeProgram=/etc/slurm/ctk-resume", "SuspendProgram=/etc/slurm/ctk-suspend",
                 "ResumeFailProgram=/etc/slurm/ctk-suspend", "PrologSlurmctld=/etc/slurm/ctk-nodes-ready",
                 "SuspendExcNodes=elasticlabdebugnodeset-[0-1]", "PrivateData=cloud", "ResumeTimeout=120",
                 "SuspendTimeout=10", "SuspendTime=20", "AuthInfo=cred_expire=30"):
        assert want in lines, want
    assert any(ln.startswith("SlurmctldParameters=idle_on_node_suspend") for ln in lines)
    parts = {ln.split()[0]: ln for ln in lines if ln.startswith("PartitionName=")}
    assert "SuspendTime" not in parts["PartitionName=debug"]
    assert "SuspendTime=20" in parts["PartitionName=dynamic"] and "SuspendTime=30" in parts["PartitionName=spot"]
    assert " Port=" not in conf  # every slurmd on SlurmdPort, each on its own address
    for script in ("ctk-resume", "ctk-suspend", "ctk-nodes-ready"):
        text = files[f"etc/slurm/{script}"]
        assert subprocess.run(["sh", "-n"], input=text, text=True).returncode == 0
    assert "timeout" not in files["etc/slurm/ctk-resume"] and "120" in files["etc/slurm/ctk-nodes-ready"]
    plain = local.lab_files(local.plan_lab(process(LAB).deployment, 3), str(tmp_path))
    assert "State=CLOUD" not in plain["etc/slurm/slurm.conf"] and "ResumeProgram" not in plain["etc/slurm/slurm.conf"]
    # no power scripts; the RebootProgram every lab has (the agent carries out Slurm's reboots)
    assert [k for k in plain if "ctk-" in k] == ["etc/slurm/ctk-reboot"]
    assert "RebootProgram=/etc/slurm/ctk-reboot" in plain["etc/slurm/slurm.conf"].splitlines()


def test_the_power_scripts_hand_requests_to_the_agent_whole(tmp_path):
    d = tmp_path / "spool"
    d.mkdir()
    script = local.power_script("resume").replace(local.POWER_DIR_IN_NODE, str(d))
    subprocess.run(["sh", "-c", script, "ctk-resume", "node-[1-3]"], check=True)
    (req,) = os.listdir(d)
    assert req.endswith(".resume") and not req.startswith(".")
    assert (d / req).read_text() == "resume node-[1-3]\n"


# ---- memory ---------------------------------------------------------------------------------

def test_a_lab_whose_static_nodes_do_not_fit_is_refused_and_one_whose_dynamic_ones_would_not_is_told(monkeypatch):
    plan = local.plan_lab(elastic(), 3)
    monkeypatch.setattr(local.plan, "available_mb", lambda: 700)
    with pytest.raises(UserError, match=r"always-up node\(s\) need about .* MB and this machine has 700 MB"):
        local.check_memory(plan, set())
    monkeypatch.setattr(local.plan, "available_mb", lambda: 900)
    notes = local.check_memory(plan, set())
    assert len(notes) == 1 and "10 dynamic node(s) need about 120 MB more" in notes[0]
    monkeypatch.setattr(local.plan, "available_mb", lambda: 64000)
    assert local.check_memory(plan, set()) == []
    monkeypatch.setattr(local.plan, "available_mb", lambda: None)
    assert local.check_memory(plan, set()) == []


# ---- CLI values, states -------------------------------------------------------------------------

@pytest.mark.parametrize("text,seconds", [("90s", 90), ("90", 90), ("5m", 300), ("1h", 3600), ("2/min", 30),
                                          ("4/h", 900), ("0", 0), ("off", 0)])
def test_chaos_takes_a_mean_interval_or_a_rate(text, seconds):
    assert chaos_rate(text) == seconds


@pytest.mark.parametrize("text", ["fast", "-5s", "0/min", "3/day", ""])
def test_chaos_refuses_what_is_neither(text):
    with pytest.raises(argparse.ArgumentTypeError):
        chaos_rate(text)


def test_deploy_chaos_on_a_lab_with_no_spot_node_is_refused_before_anything_is_made(tmp_path, capsys):
    from ctk.cli import main
    out = tmp_path / "dep"
    rc = main(["deploy", os.path.join(paths.BLUEPRINTS, "lab.yaml"), "-o", str(out), "--chaos", "1m"])
    err = capsys.readouterr().err
    assert rc == 2 and "--chaos: no nodeset of" in err and "is Spot or preemptible" in err, err
    assert "hint: mark a nodeset enable_spot_vm: true" in err and "Traceback" not in err
    assert not out.exists()


def test_deploy_chaos_is_a_usage_error_with_exit_2(capsys):
    from ctk.cli import main
    with pytest.raises(SystemExit) as e:
        main(["deploy", ELASTIC, "--chaos", "sometimes"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "argument --chaos: 'sometimes' is not a mean interval" in err and "Traceback" not in err


@pytest.mark.parametrize("state,running,power", [
    ("idle~", False, "off"), ("mixed#", False, "powering-up"), ("idle#", True, "powering-up"),
    ("idle%", True, "powering-down"), ("idle!", True, "powering-down"), ("down~", False, "off"),
    ("mixed", True, "on"), ("idle", True, "on"), (None, False, "off")])
def test_power_states_come_from_sinfos_flags(state, running, power):
    assert power_state(state, running) == power


def test_status_shows_each_nodes_power_and_capacity():
    from ctk.targets.base import NodeStatus, Status

    nodes = [NodeStatus("d-0", "compute", "198.18.4.2", True, slurm_state="idle"),
             NodeStatus("s-0", "compute", "198.18.4.3", False, slurm_state="idle#", power="powering-up", spot=True),
             NodeStatus("f-0", "compute", "198.18.4.4", True, slurm_state="mixed", power="on", flex=True),
             NodeStatus("y-0", "compute", "198.18.4.5", False, slurm_state="idle~", power="off")]
    rows = {ln.split()[0]: ln.split()[4:] for ln in Status("lab", "local", True, nodes).render("lab").splitlines()
            if ln.startswith(("d-0", "s-0", "f-0", "y-0", "NODE"))}
    assert rows == {"NODE": ["POWER", "SLURM"], "d-0": ["static", "idle"], "s-0": ["powering-up", "spot", "idle#"],
                    "f-0": ["on", "flex", "mixed"], "y-0": ["off", "idle~"]}


# ---- the agent's requests ---------------------------------------------------------------------

def _agent(tmp_path, **cfg):
    nodes = {"n-0": {"host": 2, "dynamic": True, "spot": True, "flex": None,
                     "spec": {"state_dir": str(tmp_path / "nodes" / "n-0")}},
             "f-0": {"host": 3, "dynamic": True, "spot": False, "flex": 600,
                     "spec": {"state_dir": str(tmp_path / "nodes" / "f-0")}},
             # a static node: the agent knows it for Slurm's reboots only
             "s-0": {"host": 4, "dynamic": False, "spot": False, "flex": None,
                     "spec": {"state_dir": str(tmp_path / "nodes" / "s-0")}}}
    path = tmp_path / "power" / "agent.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"deployment_dir": str(tmp_path), "n": 1, "nodes": nodes, "preemption_notice": 30,
                                "flex_start_delay": 15, "chaos_interval": 0, **cfg}))
    agent = labagent.Agent(str(path))
    agent.next_sync = float("inf")  # no lab's Slurm to ask
    return agent


def test_the_agent_reads_whole_requests_in_order_and_a_flex_node_waits_for_its_capacity(tmp_path):
    agent = _agent(tmp_path)
    labagent.request(agent.power, "resume", ["f-0", "x-9"])
    assert [f for f in os.listdir(agent.requests) if f.startswith(".")] == []
    agent.tick()
    assert os.listdir(agent.requests) == []  # consumed
    assert set(agent.capacity_at) == {"f-0"}  # x-9 is not the agent's: ignored
    events = labagent.read_events(agent.power)
    assert [(e["event"], e.get("node"), e.get("seconds")) for e in events] == [("waiting-for-capacity", "f-0", 15)]
    labagent.request(agent.power, "suspend", ["f-0"])
    agent.tick()
    assert agent.capacity_at == {}  # powered down before the capacity came
    labagent.request(agent.power, "preempt", ["n-0"], notice=1)
    agent.tick()
    assert agent.notices == {}  # n-0 is not running: nothing to preempt


def test_power_requests_leave_a_static_node_alone(tmp_path):
    """The agent knows every compute node (it carries out Slurm's reboots), but power requests
    are for dynamic and Spot nodes: a resume, suspend or preempt naming a static one does nothing."""
    agent = _agent(tmp_path)
    for op in ("resume", "suspend", "preempt"):
        labagent.request(agent.power, op, ["s-0"])
        agent.tick()
    assert agent.boot_at == {} and agent.capacity_at == {} and agent.notices == {} and agent.busy == set()
    assert labagent.read_events(agent.power) == []


def test_a_resumed_node_boots_boot_delay_after_the_request_and_not_if_suspended_first(tmp_path):
    agent = _agent(tmp_path, boot_delay=6)
    labagent.request(agent.power, "resume", ["n-0"])
    sent = time.time()
    agent.tick()
    (at, why), = agent.boot_at.values()
    assert list(agent.boot_at) == ["n-0"] and why == "resume"
    assert sent + 5 < at <= sent + 6.1  # the request's file name holds when it was sent
    assert agent.busy == set()  # nothing boots before its time
    labagent.request(agent.power, "suspend", ["n-0"])
    agent.tick()
    assert agent.boot_at == {}


def test_without_boot_delay_a_node_boots_in_the_second_after_the_request(tmp_path):
    # slurmctld takes a registration only from a node that booted after its resume request.
    agent = _agent(tmp_path)
    assert agent.boot_time(100.25) == 101.0 and agent.boot_time(100.0) == 101.0
    agent.boot_delay = 3
    assert agent.boot_time(100.25) == 103.25


def test_chaos_intervals_are_exponential_with_the_mean_and_seed_given(tmp_path):
    agent = _agent(tmp_path, chaos_interval=40, chaos_seed=7)
    gaps = [agent.rng.expovariate(1 / 40) for _ in range(4000)]
    assert 37 < sum(gaps) / len(gaps) < 43
    a, b = (_agent(tmp_path / d, chaos_interval=40, chaos_seed=7) for d in ("a", "b"))
    assert [a.rng.random() for _ in range(5)] == [b.rng.random() for _ in range(5)]  # one seed, one run
    c = _agent(tmp_path / "c", chaos_interval=40, chaos_seed=8)
    assert c.rng.random() != a.rng.random()
    assert labagent.read_events(agent.power)[0]["event"] == "chaos"


def test_sync_boots_a_node_slurm_powers_up_only_once_its_request_had_time_to_come(tmp_path):
    # slurmctld marks the node powering up (idle#) before its ResumeProgram writes the request: a
    # sync in between must not boot the node at once, which would skip boot_delay.
    agent = _agent(tmp_path, boot_delay=3)
    agent.slurm = lambda *argv: "n-0 idle#\nf-0 idle~\n"
    agent.running = lambda name: False
    booted: list[str] = []
    agent.submit = lambda name, fn, *args: booted.append(name) or True
    agent.sync()
    agent.sync()
    assert booted == [] and set(agent.powering_seen) == {"n-0"}
    labagent.request(agent.power, "resume", ["n-0"])
    agent.tick()  # the request came: its boot is boot_delay after it, and sync leaves it alone
    assert list(agent.boot_at) == ["n-0"] and booted == []
    agent.powering_seen["n-0"] = time.monotonic() - labagent.RESUME_GRACE
    agent.sync()
    assert booted == [] and agent.powering_seen == {}
    # a resume the agent never saw (it died after taking the request): booted after the grace
    agent.boot_at.clear()
    agent.sync()
    assert booted == []
    agent.powering_seen["n-0"] -= labagent.RESUME_GRACE
    agent.sync()
    assert booted == ["n-0"] and agent.powering_seen == {}
    assert [e["action"] for e in labagent.read_events(agent.power) if e["event"] == "resynced"] == ["booted"]
