"""MaxText, for real, on the MaxText lab (ctk/data/blueprints/maxtext-lab.yaml): its own
training entry point on two CPU nodes through the maxtext template, from the maxtext-cpu stack
(jax 0.12.0.1, maxtext 0.2.5), bare and in the container image built from the same layers;
requeued mid-run, it resumes from MaxText's checkpoint and ends where an uninterrupted run
ends.

And NeMo-Run (the real nemo-run package, unmodified) on the same lab, as its users run it: an
Experiment whose SlurmExecutor reaches the login node over NeMo-Run's own SSH tunnel (Fabric, and
rsync for the experiment's files) and asks for a container image, pyxis-style. ctk's srun takes
pyxis's --container-image, --container-mounts and --container-workdir to Slurm's own
containers: two processes on two nodes run jax.distributed inside the lab's container image,
with NeMo-Run's experiment folder mounted where NeMo-Run puts it (/nemo_run)."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap

import pytest

from ctk import paths

from .conftest import user_home
from .labtools import deploy, until

pytestmark = pytest.mark.integration
for tool in ("slurmctld", "packer", "debootstrap", "rsync"):
    if not shutil.which(tool, path="/usr/sbin:/usr/bin:/sbin:/bin"):
        pytest.skip(f"{tool} is not installed", allow_module_level=True)

BLUEPRINT = os.path.join(paths.BLUEPRINTS, "maxtext-lab.yaml")
STEPS, PERIOD = 30, 10
# A small llama2-style decoder (MaxText's base.yml) that trains in a few seconds on two CPUs.
SMALL = ["max_target_length=128", "base_emb_dim=128", "base_num_query_heads=2", "base_num_kv_heads=2",
         "base_mlp_dim=256", "base_num_decoder_layers=2", "head_dim=64", "vocab_size=1024",
         "async_checkpointing=false", "enable_tensorboard=false", "learning_rate=1e-3", "attention=dot_product"]
PARAMS = {"nodes": 2, "steps": STEPS, "checkpoint_period": PERIOD, "per_device_batch_size": 1.0}
STEP_RE = re.compile(r"completed step: (\d+), seconds: [0-9.]+, .*? loss: ([0-9.]+), .*?perplexity: ([0-9.]+)")


@pytest.fixture(scope="module")
def lab(lab_build, state, tmp_path_factory):
    lab = deploy(tmp_path_factory, state, "maxtext", BLUEPRINT)
    yield lab
    lab.destroy()


def submit(lab, **params):
    from ctk.jobs import submit as submit_job
    return submit_job("maxtext", dict(PARAMS, **params), lab.path, command=SMALL)


def steps_of(job) -> list[tuple[int, str, str]]:
    """(step, loss, perplexity) of every `completed step` line MaxText logged, both processes'."""
    return [(int(m.group(1)), m.group(2), m.group(3)) for m in STEP_RE.finditer(job.logs(stderr=True))]


def wait_ended(lab, job, timeout=300):
    """Follow JOB to its end; a requeued job held by Slurm for 120 s (BeginTime) is let start at
    once, as an admin would with scontrol update."""
    seen: list[str] = []

    def ended():
        info = lab.slurm("scontrol", "show", "-o", "job", job.id).stdout
        st, reason = re.search(r"JobState=(\S+)", info).group(1), re.search(r"Reason=(\S+)", info).group(1)
        if not seen or seen[-1] != st:
            seen.append(st)
        if st == "PENDING" and reason == "BeginTime":
            lab.slurm("scontrol", "update", f"JobId={job.id}", "StartTime=now")
        return st if st in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT") else None

    st = until(ended, timeout, lambda _: f"the end of job {job.id}; its states: {seen}\n"
               f"{job.logs(stderr=True)[-3000:]}", interval=1)
    return st, seen


def trouble(job, limit=6000) -> str:
    """What a failed run's logs say went wrong: its last run's (a requeued job's logs hold every
    run) from the first traceback on, or its last 40 lines (MaxText logs its whole config
    first, which a plain tail of the logs is full of), each line cut to 400 characters."""
    lines = [ln[:400] for ln in job.logs(stderr=True).splitlines()]
    last_run = max((i for i, ln in enumerate(lines) if ln.startswith("ctk: MaxText run ")), default=0)
    first = next((i for i in range(last_run, len(lines)) if "Traceback" in lines[i]), max(0, len(lines) - 40))
    return "\n".join(lines[first:])[-limit:]


def final(job):
    rows = steps_of(job)
    last = [r for r in rows if r[0] == STEPS - 1]
    assert len(last) == 2 and last[0][1:] == last[1][1:], rows[-6:]  # both processes, one loss
    return last[0]


@pytest.fixture(scope="module")
def uninterrupted(lab):
    job = submit(lab)
    st, _ = wait_ended(lab, job)
    assert st == "COMPLETED", trouble(job)
    return job


def test_maxtext_trains_on_two_nodes_and_its_loss_falls(lab, uninterrupted):
    err = uninterrupted.logs(stderr=True)
    assert "Jax distributed system is already initialized" in err  # the template's, from Slurm
    assert "Num_devices: 2," in err, err[-3000:]  # one CPU device on each of the two nodes
    rows = steps_of(uninterrupted)
    first = [r for r in rows if r[0] == 0]
    last = final(uninterrupted)
    print("maxtext on 2 nodes: step 0 loss", first[0][1], "; step", last[0], "loss", last[1])
    assert float(last[1]) < float(first[0][1]) / 2, rows
    ckpts = os.path.join(user_home(lab.path), "maxtext", f"maxtext-{uninterrupted.id}", "checkpoints")
    assert {"0", "10", "20"} <= set(os.listdir(ckpts)), os.listdir(ckpts)


def training_processes(job_id: str) -> list[int]:
    """The host's pids of job JOB_ID's MaxText processes (the lab's nodes are namespaces of this
    machine: its root sees their processes)."""
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if b"maxtext.trainers.pre_train.train" not in f.read():
                    continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                if f"\0SLURM_JOB_ID={job_id}\0".encode() in b"\0" + f.read():
                    pids.append(int(pid))
        except OSError:
            continue
    return pids


def test_requeued_mid_run_it_resumes_from_its_checkpoint_and_ends_the_same(lab, uninterrupted):
    job = submit(lab, preemptible=True)
    marker = os.path.join(user_home(lab.path), "maxtext", f"maxtext-{job.id}", "checkpoints", str(PERIOD),
                          "commit_success.txt")
    frozen: list[int] = []

    def freeze_at_the_checkpoint():
        # the nodes stop as a preempted VM stops, the moment the checkpoint is there
        if os.path.exists(marker):
            frozen.extend(training_processes(job.id))
            for pid in frozen:
                os.kill(pid, signal.SIGSTOP)
            return True
        return job.state in ("COMPLETED", "FAILED")

    until(freeze_at_the_checkpoint, 180, f"MaxText's checkpoint at step {PERIOD}", interval=0.1)
    assert len(frozen) >= 2, (frozen, trouble(job))  # one process a node at least
    lab.slurm("scontrol", "requeue", job.id)
    # JAX takes the requeue's SIGTERM (its preemption notice), so MaxText would train on until
    # Slurm's SIGKILL, KillWait later: on a busy machine it reached its last step and saved it
    # first, and the requeued run had nothing to resume (the template then ends the job:
    # tests/unit/test_maxtext_template.py). Here the nodes are gone: the run resumes mid-way.
    for pid in frozen:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    st, seen = wait_ended(lab, job)
    assert st == "COMPLETED" and "PENDING" in seen, f"states {seen}; the logs:\n{trouble(job)}"
    err = job.logs(stderr=True)
    assert "(restart 0)" in err and "(restart 1)" in err, err[-3000:]
    assert "nothing left to train" not in err, trouble(job)
    restored = [int(s) for s in re.findall(r"restoring from this run's directory step (\d+)", err)]
    assert restored and all(PERIOD <= s < STEPS for s in restored), restored
    print("maxtext requeued mid-run: the second run restored step(s)", restored)
    assert [r[0] for r in steps_of(job)].count(0) == 2  # step 0 ran once (two processes), not again
    assert final(job) == final(uninterrupted)


def test_the_same_run_in_the_container_image_ends_the_same(lab, uninterrupted):
    job = submit(lab, image="maxtext-cpu")
    st, _ = wait_ended(lab, job)
    err = job.logs(stderr=True)
    assert st == "COMPLETED", err[-4000:]
    assert "ctk: container runtime oci (srun --container, runc), bundle /var/lib/ctk/containers/maxtext-cpu" in err
    assert final(job) == final(uninterrupted)


# ---- NeMo-Run -------------------------------------------------------------------------

# Run on this machine, as a NeMo-Run user would run it: the executor, the tunnel, an inline
# script, and the experiment followed to its end. Both tasks write to one file (srun --output):
# each line goes in one write(2), or the two lines interleave (as print's pieces did once).
CLIENT = textwrap.dedent("""
    import json, sys
    import nemo_run as run

    ssh, image = json.loads(sys.argv[1]), sys.argv[2] or None
    tunnel = run.SSHTunnel(host=ssh["host"], port=ssh["port"], user=ssh["user"], identity=ssh["identity"],
                           job_dir=f"/home/{ssh['user']}/nemo-run")
    executor = run.SlurmExecutor(account="", partition="debug", nodes=2, ntasks_per_node=1, time="00:10:00",
                                 tunnel=tunnel, container_image=image, packager=run.Packager())
    inline = ("python3 -c 'import jax, os, socket; jax.distributed.initialize(); "
              "rel = dict(l.split(\\"=\\", 1) for l in open(\\"/etc/os-release\\").read().split(\\"\\\\n\\") if \\"=\\" in l); "
              "os.write(1, (\\" \\".join(map(str, [\\"nemo-dist\\", socket.gethostname(), jax.process_index(), "
              "jax.process_count(), jax.__version__, os.getcwd(), os.path.isdir(\\"/nemo_run/scripts\\"), "
              "os.path.exists(\\"/etc/slurm/slurm.conf\\")])) + \\"\\\\n\\").encode())'")
    with run.Experiment("ctk-nemo", executor=executor) as exp:
        exp.add(run.Script(inline=inline), name="dist")
        exp.run(detach=False, tail_logs=False)
    # leaving the experiment waited for its job
    print("ctk-status " + json.dumps({k: str(v) for k, v in exp.status(return_dict=True).items()}), flush=True)
""")


def run_client(lab, tmp_path, image):
    """NeMo-Run in a process of its own, HOME in TMP_PATH (its ~/.nemo_run). ssh and rsync
    verify the login node's host key with the lab's known_hosts, as a user's known_hosts
    would after a first `ssh -F DIR/lab/ssh_config LOGIN` (OpenSSH reads ~/.ssh from the
    account, not from HOME: the test's ssh adds the file on its command line)."""
    _, st = lab.status()
    ssh = next(x for x in st["nodes"] if x["role"] == "login")["ssh"]
    bindir = tmp_path / "bin"
    bindir.mkdir()
    known = os.path.join(lab.path, "lab", "known_hosts")
    (bindir / "ssh").write_text(f'#!/bin/sh\nexec /usr/bin/ssh -o UserKnownHostsFile={known} "$@"\n')
    (bindir / "ssh").chmod(0o755)
    env = dict(os.environ, HOME=str(tmp_path), PATH=f"{bindir}:{os.environ['PATH']}")
    return subprocess.run([sys.executable, "-c", CLIENT, json.dumps(ssh), image], capture_output=True, text=True,
                          env=env, timeout=600, cwd=tmp_path)


def nemo_logs(lab) -> str:
    """Every log NeMo-Run's job wrote in the lab user's nemo-run folder."""
    out = []
    for root, _, files in os.walk(os.path.join(user_home(lab.path), "nemo-run")):
        out += [open(os.path.join(root, f), errors="replace").read() for f in files if f.endswith((".out", ".err", ".log"))]
    return "\n".join(out)


def test_nemo_run_submits_a_containerized_two_node_job_over_its_ssh_tunnel(lab, tmp_path):
    r = run_client(lab, tmp_path, "maxtext-cpu")
    logs = nemo_logs(lab)
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-3000:], logs[-3000:])
    status = json.loads(next(ln for ln in r.stdout.splitlines() if ln.startswith("ctk-status "))[len("ctk-status "):])
    assert "SUCCEEDED" in json.dumps(status), (status, logs[-3000:])
    rows = sorted(ln.split()[1:] for ln in logs.splitlines() if ln.startswith("nemo-dist "))
    assert [r[:3] for r in rows] == [["maxtextlabdebugnodeset-0", "0", "2"],
                                    ["maxtextlabdebugnodeset-1", "1", "2"]], logs[-3000:]
    for _, _, _, jax_version, cwd, has_scripts, has_slurm in rows:
        assert jax_version == "0.12.0.1"
        # NeMo-Run's folder at /nemo_run, its workdir /nemo_run/code: the pyxis options took effect
        assert cwd == "/nemo_run/code" and has_scripts == "True", rows
        assert has_slurm == "False", rows  # the container image's tree, not the node's


def test_an_enroot_image_reference_is_refused_with_a_reason(lab, tmp_path):
    r = run_client(lab, tmp_path, "nvcr.io#nvidia/jax:25.04-py3")
    logs = nemo_logs(lab)
    status = [ln for ln in r.stdout.splitlines() if ln.startswith("ctk-status ")]
    assert status and "FAILED" in status[0], (r.stdout[-2000:], r.stderr[-2000:])
    assert "srun (ctk): --container-image nvcr.io#nvidia/jax:25.04-py3: an image for enroot" in logs, logs[-3000:]
    assert "--container-image NAME, one of: maxtext-cpu" in logs
