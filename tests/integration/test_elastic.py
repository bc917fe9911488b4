"""The elastic lab for real (blueprints/elastic-lab.yaml): dynamic nodes that slurmctld powers up
for a job through the lab's agent and down after SuspendTime, a Spot node preempted by `ctk
preempt` under a training job that requeues and ends as if never interrupted, and the soak: jobs
on the Spot and flex-start partitions for at least 5 minutes while random Spot nodes are
preempted (run in the background from the start of the session, see conftest.py)."""

import json
import os
import shutil
import time

import pytest

from ctk import paths
from ctk.targets.labagent import read_events
from ctk.targets.local import status_local

from .conftest import user_home
from .labtools import (
    check_resumed,
    deploy,
    final_line,
    submit_preemptible,
    train_cmd,
    until,
    wait_for_step,
)

pytestmark = pytest.mark.integration
for tool in ("slurmctld", "packer", "debootstrap", "unshare"):
    if not shutil.which(tool, path="/usr/sbin:/usr/bin:/sbin:/bin"):
        pytest.skip(f"{tool} is not installed", allow_module_level=True)

ELASTIC = os.path.join(paths.BLUEPRINTS, "elastic-lab.yaml")
TRAIN = os.path.join(paths.SBATCH, "examples", "train.py")
ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL")


@pytest.fixture(scope="module")
def elab(lab_build, state, tmp_path_factory):
    lab = deploy(tmp_path_factory, state, "elastic", ELASTIC)
    shutil.copy(TRAIN, os.path.join(user_home(lab.path), "train.py"))
    yield lab
    lab.destroy()


def power(lab) -> dict[str, tuple[str, bool, str]]:
    """{node: (power state, daemons up, Slurm state)} of the lab's dynamic nodes, as ctk status
    reports them."""
    return {x.name: (x.power, x.running, x.slurm_state) for x in status_local(lab.path).nodes if x.power}


def job_info(lab, jid: str) -> dict:
    out = lab.slurm("scontrol", "show", "-o", "job", jid, check=False).stdout
    return dict(tok.split("=", 1) for tok in out.split() if "=" in tok)


def test_a_3_node_job_boots_powered_down_nodes_which_power_down_after_suspend_time(elab):
    before = power(elab)
    dyn = sorted(n for n in before if "dyn" in n)
    assert len(dyn) == 4 and all(before[n][:2] == ("off", False) for n in dyn), before
    st = json.loads(elab.ctk("status", elab.path, "--json").stdout)
    assert {x["name"]: x["power"] for x in st["nodes"] if x["name"] in dyn} == dict.fromkeys(dyn, "off")
    t_submit = time.time()
    jid = elab.slurm("sbatch", "--parsable", "-N3", "-p", "dynamic", "-o", "/root/dyn-%j.out",
                     "--wrap", "srun hostname; sleep 3").stdout.strip()
    seen: dict[str, list[str]] = {n: ["off"] for n in dyn}
    job_states, nodelist, ended_at = [], None, None

    def watch() -> bool:
        nonlocal nodelist, ended_at
        for n, (pw, _, _) in power(elab).items():
            if n in seen and seen[n][-1] != pw:
                seen[n].append(pw)
        info = job_info(elab, jid)
        js = info.get("JobState", "GONE")
        if not job_states or job_states[-1] != js:
            job_states.append(js)
        if info.get("NodeList") not in (None, "(null)"):
            nodelist = info["NodeList"]
        if js in ENDED and ended_at is None:
            ended_at = time.time()
        return bool(ended_at and nodelist and all(seen[n][-1] == "off" for n in seen))

    until(watch, 150, lambda _: f"the job's end and its nodes powered down: job {job_states}, power {seen}",
          interval=0.1)
    assert job_states[-1] == "COMPLETED" and "RUNNING" in job_states, job_states
    used = elab.slurm("scontrol", "show", "hostnames", nodelist).stdout.split()
    assert len(used) == 3 and set(used) <= set(dyn)
    out = open(os.path.join(elab.path, "lab", "root", f"dyn-{jid}.out")).read().split()
    assert sorted(out) == sorted(used)
    # ctk status showed each step: powered down, powering up, up, powering down, powered down
    for n in used:
        steps = [s for s in seen[n] if s in ("off", "powering-up", "on", "powering-down")]
        assert steps[0] == "off" and "on" in steps and steps[-1] == "off", seen
        assert steps.index("powering-down") > steps.index("on"), seen
    # the lab's nodes take boot_delay (3 s) to boot: each was seen powering up that long
    assert all("powering-up" in seen[n] for n in used), seen
    (unused,) = set(dyn) - set(used)
    assert seen[unused] == ["off"]
    # the agent booted them after the submission and stopped them once SuspendTime (20 s) had passed
    events = [e for e in read_events(os.path.join(elab.path, "lab", "power")) if e["epoch"] >= t_submit]
    booted = {e["node"]: e["epoch"] for e in events if e["event"] == "booted"}
    stopped = {e["node"]: e["epoch"] for e in events if e["event"] == "stopped" and e.get("why") == "suspend"}
    assert set(booted) == set(used) and set(stopped) == set(used), events
    assert all(booted[n] - t_submit >= 3 for n in used), (t_submit, booted)
    assert all(stopped[n] - ended_at >= 19 for n in used), (ended_at, stopped)
    assert not any(power(elab)[n][1] for n in used)  # their daemons are gone with them


def test_a_lab_whose_agent_died_says_so_and_heals_on_the_next_deploy(elab):
    """With the agent killed, ctk status says it is down and what that stops; a dynamic node Slurm
    then holds DOWN and powered down (as after ResumeTimeout with no one to boot it) is put right
    by the agent the next deploy starts, at its first look: a job on every dynamic node runs."""
    import signal

    pdir = os.path.join(elab.path, "lab", "power")
    pid = int(open(os.path.join(pdir, "agent.pid")).read())
    os.kill(pid, signal.SIGKILL)

    def gone() -> bool:
        try:
            return open(f"/proc/{pid}/stat").read().split()[2] == "Z"
        except FileNotFoundError:
            return True

    until(gone, 30, f"the end of the killed agent {pid}", interval=0.05)
    r = elab.ctk("status", elab.path)
    assert "preempts Spot nodes): down" in r.stdout and "no dynamic node powers up or down" in r.stdout, r.stdout
    assert f"ctk deploy BLUEPRINT -o {elab.path}` starts it again" in r.stdout, r.stdout
    dyn = sorted(n for n in power(elab) if "dyn" in n)
    stuck = dyn[0]
    elab.slurm("scontrol", "update", f"NodeName={stuck}", "State=DOWN", "Reason=no one booted it")
    assert power(elab)[stuck][2].startswith("down") and power(elab)[stuck][2].endswith("~"), power(elab)
    t0 = time.time()
    r = elab.ctk("deploy", ELASTIC, "-o", elab.path)
    assert r.returncode == 0, r.stderr[-3000:]
    jid = elab.slurm("sbatch", "--parsable", f"-N{len(dyn)}", "-p", "dynamic", "-o", "/dev/null",
                     "--wrap", "srun true").stdout.strip()
    until(lambda: job_info(elab, jid).get("JobState", "GONE") in ENDED, 150,
          lambda _: f"the job's end: {job_info(elab, jid)}, power {power(elab)}")
    assert job_info(elab, jid)["JobState"] == "COMPLETED", job_info(elab, jid)
    healed = [e for e in read_events(pdir) if e["epoch"] >= t0 and e["event"] == "resynced"]
    assert [(e["node"], e["action"]) for e in healed][:1] == [(stuck, "powered down again")], healed


def test_train_on_two_spot_nodes_survives_ctk_preempt_with_the_same_final_step_and_loss(elab):
    # the uninterrupted run, on the static debug nodes (the same 2 processes)
    r = elab.ctk("job", "submit", "jax-train", "--deployment", elab.path, "--nodes", "2", "--set", "partition=debug",
                 "--wait", *train_cmd("ckpt-plain", 40, 0))
    assert r.returncode == 0, r.stderr
    expected = final_line(elab.ctk("job", "logs", r.stdout.strip(), "--deployment", elab.path).stdout)
    t0 = time.time()
    # 1 s a step: the preemption lands mid-run even when the machine is busy (at 0.4 s, a run
    # finished its 40 steps before a preemption slowed by a build beside it landed)
    job = submit_preemptible(elab, "ckpt-spot", 40, 1.0, partition="spot")
    wait_for_step(job, 8, timeout=180)
    nodes_ = elab.slurm("scontrol", "show", "hostnames", job_info(elab, job.id)["NodeList"]).stdout.split()
    assert len(nodes_) == 2 and all("spot" in n for n in nodes_)
    victim = nodes_[1]
    r = elab.ctk("preempt", elab.path, victim, "--notice", "5", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == [{"node": victim, "state": "notice", "detail": "SIGTERM in 5 s"}]
    # The notice, as a job on the node reads it (the metadata server's instance/preempted)
    seen = elab.ctk("exec", "--user", "researcher", elab.path, victim, "--", "cat", "/run/ctk/preempted")
    assert (seen.returncode, seen.stdout) == (0, "TRUE\n"), (seen.stdout, seen.stderr)
    until(lambda: any(e["event"] == "down" and e.get("node") == victim and e["epoch"] >= t0
                      for e in read_events(os.path.join(elab.path, "lab", "power"))),
          60, f"the preempted node {victim} down", interval=0.2)
    assert job.wait(timeout=400) == "COMPLETED", job.logs(stderr=True)[-3000:]
    check_resumed(job, 40, expected, lost_node_after=8)
    assert job.exit_code() == 0 and job_info(elab, job.id).get("Restarts") == "1"
    events = [e for e in read_events(os.path.join(elab.path, "lab", "power")) if e["epoch"] >= t0]
    mine = [e["event"] for e in events if e.get("node") == victim and e.get("by") == "ctk-preempt"]
    assert mine == ["notice", "sigterm", "down"], events
    sigterm = next(e for e in events if e["event"] == "sigterm" and e.get("node") == victim)
    assert sigterm["jobs"] == [job.id]
    notice = next(e for e in events if e["event"] == "notice" and e.get("node") == victim)
    assert 4.9 <= sigterm["epoch"] - notice["epoch"] < 9
    # not a Spot node, or powered down: refused, exit 2
    r = elab.ctk("preempt", elab.path, "elasticlabdebugnodeset-0")
    assert r.returncode == 2 and "not a Spot or preemptible node" in r.stderr and "elasticlabspot-[0-3]" in r.stderr
    r = elab.ctk("preempt", elab.path, "elasticlabspot-9")
    assert r.returncode == 2 and "no node 'elasticlabspot-9'" in r.stderr and "Traceback" not in r.stderr
