"""A rolling image update on the local target, for real: a lab runs a 2-node training job, its
image gains a role (metrics), and `ctk deploy` again. The deploy returns at once; the compute
nodes are drained (no new job starts there) and reboot into the new image only once the job has
ended; the job ends as an uninterrupted run does, once, and a job submitted during the roll-out
runs on the new image. `ctk status` names each node's image build throughout."""

import json
import os
import re
import shutil

import pytest

from ctk import paths

from .conftest import user_home
from .labtools import deploy, final_line, train_cmd, uninterrupted, until, wait_for_step

pytestmark = pytest.mark.integration
for tool in ("slurmctld", "packer", "debootstrap", "unshare"):
    if not shutil.which(tool, path="/usr/sbin:/usr/bin:/sbin:/bin"):
        pytest.skip(f"{tool} is not installed", allow_module_level=True)

BLUEPRINT = os.path.join(os.path.dirname(__file__), "blueprints", "rollout-lab.yaml")
ROLES = "roles: [common, munge, slurm, jax]"
TRAIN = os.path.join(paths.SBATCH, "examples", "train.py")
STEPS = 60


@pytest.fixture(scope="module")
def rlab(lab_build, state, tmp_path_factory):
    lab = deploy(tmp_path_factory, state, "rollout", BLUEPRINT)
    shutil.copy(TRAIN, os.path.join(user_home(lab.path), "train.py"))
    yield lab
    lab.destroy()


def computes(lab) -> dict[str, dict]:
    rc, st = lab.status()
    assert rc in (0, 1), st
    return {x["name"]: x for x in st["nodes"] if x["role"] == "compute"}


def test_a_changed_image_rolls_out_over_a_running_training_job(rlab, tmp_path):
    lab = rlab
    expected = uninterrupted(lab, "ckpt-plain", STEPS)
    before = computes(lab)
    old = {x["image_version"] for x in before.values()}
    assert len(before) == 2 and len(old) == 1 and not any(x.get("rolling_to") for x in before.values()), before

    v2 = tmp_path / "rollout-v2.yaml"
    text = open(BLUEPRINT).read()
    assert ROLES in text
    v2.write_text(text.replace(ROLES, "roles: [common, munge, slurm, jax, metrics]"))
    r = lab.ctk("image", "build", str(v2), timeout=900)  # built first: the job must outlast the deploy
    assert r.returncode == 0, r.stderr[-3000:]

    from ctk.jobs import submit
    job = submit("jax-train", {"nodes": 2, "partition": "debug"}, lab.path,
                 command=train_cmd("ckpt-rolled", STEPS, 1.0)[1:])
    wait_for_step(job, 3)
    r = lab.ctk("deploy", str(v2), "-o", lab.path, "--json", timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(r.stdout)
    assert sorted(res["rolling"]) == sorted(before) and not set(res["restarted"]) & set(before), res
    assert job.state == "RUNNING", job.logs(stderr=True)[-2000:]

    during = computes(lab)
    new = {x["rolling_to"] for x in during.values()}
    assert len(new) == 1 and new != old, during
    for name, x in during.items():  # still on the old build, drained for the reboot
        assert x["image_version"] in old and x["slurm_state"].startswith("draining"), (name, x)
    text_status = lab.ctk("status", lab.path).stdout
    assert "roll-out under way: 2 node(s)" in text_status, text_status
    # The old image again before the roll-out reached the nodes: it is called off (their reboot
    # cancelled, no longer drained); the new one again: it goes on, as before.
    r = lab.ctk("deploy", BLUEPRINT, "-o", lab.path, "--json", timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(r.stdout)
    assert not res["rolling"] and set(before) <= set(res["kept"]), res
    back = computes(lab)
    assert all(not x.get("rolling_to") and not x["slurm_state"].startswith("drain") for x in back.values()), back
    r = lab.ctk("deploy", str(v2), "-o", lab.path, "--json", timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(r.stdout)
    assert sorted(res["rolling"]) == sorted(before) and not res["booted"], res
    assert job.state == "RUNNING", job.logs(stderr=True)[-2000:]

    # A job submitted now waits for the new image: the nodes are drained until they reboot.
    probe = lab.slurm("sbatch", "--parsable", "-N2", "-p", "debug", "-o", "/root/probe-%j.out", "--wrap",
                      "srun sh -c 'test -x /usr/bin/prometheus-node-exporter && echo new-image $(hostname)'")
    probe_id = probe.stdout.strip()

    until(lambda: job.state in ("COMPLETED", "FAILED", "CANCELLED"), 300, lambda _: f"the end of the training job "
          f"{job.id} ({job.state}):\n{job.logs()[-1500:]}", interval=1)
    assert job.state == "COMPLETED" and job.exit_code() == 0, job.logs(stderr=True)[-2000:]
    out = job.logs()
    assert final_line(out) == expected and out.count("train: starting from step 0") == 1, out[-3000:]

    def rolled():
        now = computes(lab)
        done = all(x.get("image_version") in new and not x.get("rolling_to") and x["slurm_state"] in ("idle", "mixed",
                   "allocated", "completing") for x in now.values())
        return now if done else None
    after = until(rolled, 180, lambda _: f"every compute node on {new}: {computes(lab)}", interval=1)
    assert all(x["running"] for x in after.values()), after

    def probe_done():
        st = lab.slurm("scontrol", "show", "-o", "job", probe_id).stdout
        m = re.search(r"JobState=(\S+)", st)
        return m.group(1) if m and m.group(1) in ("COMPLETED", "FAILED", "CANCELLED") else None
    assert until(probe_done, 120, f"the end of the probe job {probe_id}") == "COMPLETED"
    got = open(os.path.join(lab.path, "lab", "root", f"probe-{probe_id}.out")).read().split("\n")
    assert sorted(ln for ln in got if ln) == sorted(f"new-image {n}" for n in before), got

    # The training job ran once: accounting has one record of it (-D lists a requeued job's
    # every run), completed.
    acct = lab.slurm("sacct", "-n", "-P", "-X", "-D", "-j", job.id, "-o", "State").stdout.split()
    assert acct == ["COMPLETED"], acct
    events = [json.loads(ln) for ln in open(os.path.join(lab.path, "lab", "power", "events.log"))]
    rebooted = [e for e in events if e["event"] == "rebooted"]
    assert sorted(e["node"] for e in rebooted) == sorted(before) and all(e["image"] in new for e in rebooted), rebooted
