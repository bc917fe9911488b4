"""ctk job on the lab, for real: every template checked by slurmctld (sbatch --test-only),
train.py requeued mid-run (scontrol requeue; a killed slurmd on a 3-node lab) resuming from
its orbax checkpoint, submission through the login node over SSH, array task logs, and final
states from slurmctld's job completion log."""

import json
import os
import re
import shutil
import stat
import subprocess
import sys

import pytest

from ctk import paths

from .conftest import LAB, LAB_USER, USER_HOME, ctk, user_home
from .labtools import (
    check_resumed,
    deploy,
    submit_preemptible,
    uninterrupted,
    until,
    wait_for_step,
)

pytestmark = pytest.mark.integration
for tool in ("slurmctld", "packer", "debootstrap", "ssh"):
    if not shutil.which(tool, path="/usr/sbin:/usr/bin:/sbin:/bin"):
        pytest.skip(f"{tool} is not installed", allow_module_level=True)

PY = "/opt/ctk/jax/bin/python"
TRAIN = os.path.join(paths.SBATCH, "examples", "train.py")


def _with_train(lab):
    shutil.copy(TRAIN, os.path.join(user_home(lab.path), "train.py"))
    return lab


@pytest.fixture(scope="module")
def lab(lab_build, state, tmp_path_factory):
    lab = _with_train(deploy(tmp_path_factory, state, "jobs", LAB))
    yield lab
    lab.destroy()


@pytest.fixture(scope="module")
def lab3(lab_build, state, tmp_path_factory):
    """The lab with 3 debug nodes: a 2-node job still fits when one node is lost."""
    text = open(LAB).read().replace("node_count_static: 2", "node_count_static: 3", 1)
    bp = tmp_path_factory.mktemp("bp3") / "lab3.yaml"
    bp.write_text(text.replace("deployment_name: lab", "deployment_name: lab3"))
    lab = _with_train(deploy(tmp_path_factory, state, "lab3", str(bp)))
    yield lab
    lab.destroy()


def host_env(lab, tmp_path):
    """ctk's registry for login hosts goes under XDG_STATE_HOME: one per test."""
    return {**lab.env, "XDG_STATE_HOME": str(tmp_path / "xdg")}


# ---- sbatch --test-only for every template and accelerator variant -------------------------

VARIANTS = {
    "cpu": ["jax-train", "--nodes", "2", "--set", "partition=debug"],
    "cpu-preemptible": ["jax-train", "--nodes", "2", "--set", "preemptible=true",
                        "--set", "checkpoint_hook=[touch, /home/researcher/ckpt-now]"],
    "gpu-tcp": ["jax-train", "--nodes", "2", "--nodeset", "gpunodeset", "--set", "network=tcp"],
    "gpu-tcpx": ["jax-train", "--nodes", "2", "--nodeset", "gpunodeset", "--set", "network=gpudirect-tcpx"],
    "gpu-tcpxo": ["jax-train", "--nodes", "2", "--nodeset", "gpunodeset"],  # a3-mega's own network
    "gpu-rdma": ["jax-train", "--nodes", "2", "--nodeset", "gpunodeset", "--set", "network=rdma",
                 "--set", "preemptible=true"],
    "tpu": ["jax-train", "--nodes", "2", "--set", "accelerator=tpu", "--set", "tpu_type=v5p-8",
            "--set", "partition=debug"],
    "tpu-multislice": ["jax-train", "--nodes", "2", "--set", "accelerator=tpu", "--set", "tpu_type=v5p-8",
                       "--set", "num_slices=2", "--set", "partition=debug"],
    "smoke": ["jax-smoke", "--nodes", "2", "--set", "partition=debug"],
    "smoke-gpu": ["jax-smoke", "--nodes", "1", "--nodeset", "gpunodeset"],
    "array": ["array", "--set", "sweep=[--lr=0.1, --lr=0.2, --lr=0.3]", "--set", "max_parallel=2",
              "--set", "partition=debug"],
    "container": ["container", "--set", "image=/var/lib/ctk/containers/jax-cpu", "--set", "gpus_per_node=8",
                  "--set", "partition=gpu", "--set", "workdir=/home/researcher", "--set", "preemptible=true"],
    # the lab's nodes have Slurm's own containers; pyxis's options are still rendered on request
    "container-pyxis": ["container", "--set", "image=nvcr.io#nvidia/jax:24.04-py3", "--set", "runtime=pyxis",
                        "--set", "partition=gpu", "--set", "mounts=[/home:/home]"],
}


def test_every_template_variant_passes_sbatch_test_only_on_the_lab(lab):
    for name, args in VARIANTS.items():
        r = lab.ctk("job", "render", *args, "--deployment", lab.path, "--check", "--", "python3", "train.py")
        assert r.returncode == 0, (name, r.stderr)
        assert r.stdout.startswith("#!/bin/bash\n"), name
        assert re.search(r"sbatch --test-only: accepted: Job \d+ to start at .* on nodes ", r.stderr), (name, r.stderr)
    # the gpu variant really asks for GPUs a node in its script: 9 are more than the nodes have, and
    # ctk refuses them from the rendered #SBATCH lines before sbatch runs
    r = lab.ctk("job", "render", *VARIANTS["gpu-tcp"], "--set", "gpus_per_node=9", "--deployment", lab.path,
                "--check", "--", "python3", "train.py")
    assert r.returncode == 2 and "9 GPUs per node" in r.stderr and "at most 8" in r.stderr, r.stderr


# ---- train.py, requeued mid-run ----------------------------------------------------------


def wait_through_requeue(lab, job, timeout=240):
    """Follow the job to its end. Slurm holds a requeued batch job for 120 s (BeginTime); the
    test lets it start at once, as an admin would with scontrol update."""
    seen: list[str] = []

    def ended() -> str | None:
        info = lab.slurm("scontrol", "show", "-o", "job", job.id).stdout
        st = re.search(r"JobState=(\S+)", info).group(1)
        reason = re.search(r"Reason=(\S+)", info).group(1)
        if not seen or seen[-1] != st:
            seen.append(st)
        if st == "PENDING" and reason == "BeginTime":
            lab.slurm("scontrol", "update", f"JobId={job.id}", "StartTime=now")
        return st if st in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT") else None

    return until(ended, timeout, lambda _: f"the end of job {job.id}; its states: {seen}"), seen


@pytest.fixture(scope="module")
def plain40(lab):
    """The final line of train.py's 40 steps on 2 nodes, never interrupted."""
    line = uninterrupted(lab, "ckpt-plain", 40)
    assert line.startswith("train: final step=40 loss=")
    return line


def test_train_requeued_with_scontrol_resumes_from_its_checkpoint(lab, plain40):
    steps, expected = 40, plain40
    job = submit_preemptible(lab, "ckpt-requeue", steps, 0.3)
    wait_for_step(job, 8)
    lab.slurm("scontrol", "requeue", job.id)
    st, seen = wait_through_requeue(lab, job)
    assert st == "COMPLETED" and "PENDING" in seen, seen
    check_resumed(job, steps, expected)
    assert job.state == "COMPLETED" and job.exit_code() == 0


def test_usr2_runs_the_checkpoint_hook_then_requeues_the_job(lab, plain40):
    """What Slurm does 90 s before the time limit (--signal=B:USR2@90), sent now: the batch
    script's trap runs the hook and requeues; train.py checkpoints on the SIGTERM that follows."""
    marker = os.path.join(user_home(lab.path), "hook-ran")
    job = submit_preemptible(lab, "ckpt-usr2", 40, 0.3, checkpoint_hook=["touch", f"{USER_HOME}/hook-ran"])
    wait_for_step(job, 8)
    assert not os.path.exists(marker)
    lab.slurm("scancel", "--batch", "--signal=USR2", job.id)
    st, seen = wait_through_requeue(lab, job)
    assert st == "COMPLETED" and "PENDING" in seen, seen
    check_resumed(job, 40, plain40)
    assert os.path.exists(marker)
    assert "ctk: USR2 (restart 0): checkpoint, then requeue" in job.logs(stderr=True)


def test_train_survives_a_killed_slurmd_on_a_3_node_lab(lab3):
    lab, steps = lab3, 100
    expected = uninterrupted(lab, "ckpt-plain", steps)
    job = submit_preemptible(lab, "ckpt-nodefail", steps, 0.5)
    wait_for_step(job, 5)
    first = lab.slurm("squeue", "-h", "-j", job.id, "-o", "%N").stdout.strip()
    lost = lab.slurm("scontrol", "show", "hostnames", first).stdout.split()[1]  # not the batch host
    r = lab.ctk("exec", lab.path, lost, "--", "pkill", "-9", "-x", "slurmd")
    assert r.returncode == 0, r.stderr
    st, seen = wait_through_requeue(lab, job)
    assert st == "COMPLETED" and "PENDING" in seen, seen
    check_resumed(job, steps, expected, lost_node_after=5)
    assert lab.slurm("sinfo", "-h", "-n", lost, "-o", "%T").stdout.strip().startswith("down")
    second = lab.slurm("scontrol", "show", "-o", "job", job.id).stdout
    nodes = lab.slurm("scontrol", "show", "hostnames", re.search(r" NodeList=(\S+)", second).group(1)).stdout.split()
    assert lost not in nodes and len(nodes) == 2


# ---- the login node over SSH -------------------------------------------------------------

def test_submit_follow_logs_and_cancel_through_the_login_node_over_ssh(lab, tmp_path):
    env = host_env(lab, tmp_path)
    st = json.loads(lab.ctk("status", lab.path, "--json").stdout)
    login = next(x for x in st["nodes"] if x["role"] == "login")
    host = ["--host", login["name"], "--ssh-config", login["ssh"]["ssh_config"]]
    r = ctk("job", "submit", "jax-smoke", "--nodes", "2", "--set", "partition=debug", *host, "--wait",
            "--", PY, env=env, timeout=300)
    assert r.returncode == 0, (r.stdout, r.stderr)
    jid = r.stdout.strip()
    assert jid.isdigit() and "COMPLETED (exit code 0)" in r.stderr
    logs = ctk("job", "logs", jid, *host, env=env).stdout
    fields = [dict(kv.split("=") for kv in ln.split()[1:]) for ln in logs.splitlines() if ln.startswith("ctk-smoke ")]
    assert sorted(f["process"] for f in fields) == ["0", "1"] and {f["reduced"] for f in fields} == {"2"}
    # the script and the log are in the lab's user's home on the login node (shared by every node)
    root = os.path.join(user_home(lab.path), ".ctk-jobs")
    assert any(n.startswith("jax-smoke-") for n in os.listdir(root))
    out = os.stat(os.path.join(root, f"jax-smoke-{jid}.out"))
    assert (out.st_uid, stat.S_IMODE(out.st_mode)) == (1900000, 0o600)  # the user's alone, as its script

    r = ctk("job", "submit", "jax-train", "--set", "partition=debug", *host, "--", "bash", "-c",
            "echo started; sleep 300", env=env)
    assert r.returncode == 0, r.stderr
    sleeper = r.stdout.strip()
    until(lambda: "started" in ctk("job", "logs", sleeper, *host, env=env).stdout, 60, "the job's start")
    r = ctk("job", "cancel", sleeper, *host, env=env)
    assert r.returncode == 0, r.stderr
    r = ctk("job", "logs", sleeper, *host, "--follow", env=env, timeout=120)  # returns once the job ends
    assert r.returncode == 0 and "started" in r.stdout
    rows = json.loads(ctk("job", "status", jid, sleeper, *host, "--json", env=env).stdout)
    assert {x["id"]: x["state"] for x in rows} == {jid: "COMPLETED", sleeper: "CANCELLED"}
    listed = json.loads(ctk("job", "list", *host, "--json", env=env).stdout)
    assert [x["id"] for x in listed][-2:] == [jid, sleeper]
    mine = [x for x in listed if x["id"] in (jid, sleeper)]
    assert all(x["cluster"] == f"ssh://{LAB_USER}@{login['addr']}:{login['ssh']['port']}" for x in mine)
    # one registry for the cluster, however it is reached: --deployment lists the same jobs
    r = ctk("job", "list", "--deployment", lab.path, "--json", env=env)
    assert [x["id"] for x in json.loads(r.stdout)] == [x["id"] for x in listed], r.stderr
    r = ctk("job", "status", jid, "--deployment", lab.path, env=env)
    assert r.returncode == 0 and "COMPLETED" in r.stdout, r.stderr


def test_a_wrong_host_key_is_refused(lab, tmp_path):
    st = json.loads(lab.ctk("status", lab.path, "--json").stdout)
    login = next(x for x in st["nodes"] if x["role"] == "login")
    cfg = tmp_path / "ssh_config"
    bad = tmp_path / "known_hosts"
    other = os.path.join(lab.path, "lab", "secrets", "ssh", "id_ed25519.pub")  # a key, but not the host's
    bad.write_text(f"[{login['addr']}]:{login['ssh']['port']} " + " ".join(open(other).read().split()[:2]) + "\n")
    cfg.write_text(open(login["ssh"]["ssh_config"]).read().replace(os.path.join(lab.path, "lab", "known_hosts"), str(bad)))
    r = ctk("job", "list", "--host", login["name"], "--ssh-config", str(cfg), env=host_env(lab, tmp_path))
    assert r.returncode == 1 and "host key" in r.stderr  # list asks the cluster which it is
    r = ctk("job", "submit", "jax-train", "--host", login["name"], "--ssh-config", str(cfg), "--", "true",
            env=host_env(lab, tmp_path))
    assert r.returncode == 1 and "host key" in r.stderr and "Traceback" not in r.stderr, r.stderr


# ---- arrays and forgotten jobs -------------------------------------------------------------

def test_array_job_logs_per_task(lab):
    r = lab.ctk("job", "submit", "array", "--deployment", lab.path, "--set", "partition=debug",
                "--set", "sweep=[--lr=0.1, --lr=0.2 --bs=8, --name='a b']", "--wait", "--", "printf", "%s|")
    assert r.returncode == 0, r.stderr
    jid = r.stdout.strip()
    out = lab.ctk("job", "logs", jid, "--deployment", lab.path).stdout
    assert out == (f"==> {jid}_0 <==\n--lr=0.1|==> {jid}_1 <==\n--lr=0.2|--bs=8|"
                   f"==> {jid}_2 <==\n--name=a b|")
    assert lab.ctk("job", "logs", f"{jid}_1", "--deployment", lab.path).stdout == "--lr=0.2|--bs=8|"


def test_final_states_come_from_the_job_completion_log_once_slurm_forgets(lab):
    from ctk.jobs import submit
    from ctk.jobs.clusters import LocalCluster
    ok = submit("jax-train", {"partition": "debug"}, lab.path, command=["true"])
    bad = submit("jax-train", {"partition": "debug"}, lab.path, command=["bash", "-c", "exit 5"])
    assert ok.wait(timeout=60) == "COMPLETED" and bad.wait(timeout=60) == "FAILED"
    # what `ctk job status` falls back to after MinJobAge, read from slurmctld's own log
    assert LocalCluster(lab.path).forgotten([ok.id, bad.id, "999999"]) == {ok.id: ("COMPLETED", 0),
                                                                           bad.id: ("FAILED", 5)}


# ---- jobs that can never run ---------------------------------------------------------------

NEVER = [  # (what the job asks, a piece of the refusal)
    (["jax-train", "--nodeset", "gpunodeset", "--set", "time=03:00:00"],
     "time 03:00:00 (--time): partition gpu allows at most 02:00:00 (its MaxTime)"),
    (["jax-train", "--nodeset", "gpunodeset", "--set", "gpus_per_node=16"],
     "16 GPUs per node: the nodes of partition gpu have at most 8"),
    (["jax-train", "--set", "gpus_per_node=8"],
     "GPUs go with accelerator=gpu, and the nodes of nodeset debugnodeset have none"),
    (["array", "--set", "sweep=[a, b]", "--set", "partition=debug", "--set", "gpus_per_node=1"],
     "1 GPUs per node: the nodes of partition debug have no GPUs"),
    (["jax-train", "--nodes", "3", "--set", "partition=debug"], "3 nodes (--nodes): partition debug has 2"),
    (["jax-train", "--set", "partition=debg"], "partition 'debg' (--partition): the cluster has no such partition"),
]


def test_jobs_the_partitions_would_never_start_are_refused_before_sbatch(lab):
    """A time above MaxTime, more GPUs than a node has, GPUs on a CPU nodeset or partition, more
    nodes than the partition has, a partition that does not exist: exit 2 with the limit, before
    sbatch runs (nothing is queued, nothing registered). `render --check` refuses them alike."""
    def ids():
        return [j["id"] for j in json.loads(lab.ctk("job", "list", "--deployment", lab.path, "--json").stdout)]

    listed = ids()
    for args, message in NEVER:
        r = lab.ctk("job", "submit", *args, "--deployment", lab.path, "--", "true")
        assert r.returncode == 2 and message in r.stderr and "Traceback" not in r.stderr, (args, r.stderr)
    r = lab.ctk("job", "render", *NEVER[0][0], "--deployment", lab.path, "--check", "--", "true")
    assert r.returncode == 2 and NEVER[0][1] in r.stderr, r.stderr
    assert ids() == listed  # nothing registered (earlier jobs may change state meanwhile)


def test_a_submission_sbatch_refuses_leaves_no_script_and_says_why(lab):
    """The script and sbatch go into the lab's node in one entry: a job sbatch refuses (a --begin
    it cannot read) exits 1 with sbatch's own words, and its script is gone again; an accepted
    one's script stays, 0600 in the 0700 jobs folder."""
    jobs = os.path.join(user_home(lab.path), ".ctk-jobs")
    before = set(os.listdir(jobs)) if os.path.isdir(jobs) else set()
    r = lab.ctk("job", "submit", "jax-train", "--deployment", lab.path, "--set", "partition=debug",
                "--sbatch=--begin=not-a-time", "--", "true")
    assert r.returncode == 1 and "sbatch failed" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert "begin" in r.stderr.lower(), r.stderr  # sbatch's reason, passed on
    assert set(os.listdir(jobs)) == before
    r = lab.ctk("job", "submit", "jax-train", "--deployment", lab.path, "--set", "partition=debug",
                "--sbatch=--hold", "--", "true")
    assert r.returncode == 0, r.stderr
    jid = r.stdout.strip()
    new = [n for n in set(os.listdir(jobs)) - before if n.endswith(".sbatch")]
    assert len(new) == 1, new
    st = os.stat(os.path.join(jobs, new[0]))
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (1900000, 0o600)
    lab.ctk("job", "cancel", jid, "--deployment", lab.path)


def test_a_job_whose_dependency_can_never_be_met_says_so_and_wait_stops(lab):
    """--wait exits 3 for a job that failed (its own code printed) and 5, at once, for a job
    pending on a dependency that can never be satisfied, which `ctk job status` shows as its
    REASON; it stays queued until cancelled."""
    r = lab.ctk("job", "submit", "jax-train", "--deployment", lab.path, "--set", "partition=debug", "--wait",
                "--", "bash", "-c", "exit 7", timeout=300)
    assert r.returncode == 3 and "FAILED (exit code 7)" in r.stderr, (r.stdout, r.stderr)
    failed = r.stdout.strip()
    r = lab.ctk("job", "submit", "jax-train", "--deployment", lab.path, "--set", "partition=debug",
                f"--sbatch=--dependency=afterok:{failed}", "--wait", "--", "true", timeout=300)
    assert r.returncode == 5, (r.stdout, r.stderr)
    waiting = r.stdout.strip()
    assert f"job {waiting}: pending for DependencyNeverSatisfied, which never goes away on its own" in r.stderr
    r = lab.ctk("job", "status", waiting, "--deployment", lab.path)
    assert r.returncode == 0 and "PENDING" in r.stdout and "DependencyNeverSatisfied (never starts:" in r.stdout, r.stdout
    row = json.loads(lab.ctk("job", "status", waiting, "--deployment", lab.path, "--json").stdout)[0]
    assert row["reason"] == "DependencyNeverSatisfied" and row["never_starts"]
    assert lab.ctk("job", "cancel", waiting, "--deployment", lab.path).returncode == 0
    lines = lab.ctk("job", "list", "--deployment", lab.path).stdout.splitlines()
    assert lines[0].split()[:3] == ["ID", "STATE", "TEMPLATE"]
    assert any(ln.split()[:2] == [failed, "FAILED"] for ln in lines), lines


DP = """import os
print("ran", os.getcwd(), os.environ.get("CTK_T"), os.environ["SLURM_PROCID"], os.environ["SLURM_NTASKS"])
"""


def test_a_job_runs_in_the_folder_it_is_submitted_from_with_its_options(lab, tmp_path):
    """Submitted from a folder of the lab's shared /home, `-- python3 dp.py` runs there (its log
    lands there too) with --env, --ntasks-per-node and --time applied; from a folder the nodes
    do not share, a relative file is refused (exit 2) naming the shared folder; --chdir runs it
    anywhere the nodes see."""
    home = user_home(lab.path)
    proj = os.path.join(home, "proj")
    os.makedirs(proj, exist_ok=True)
    with open(os.path.join(proj, "dp.py"), "w") as f:
        f.write(DP)
    os.chown(proj, 1900000, 1900000)

    def submit(*args, cwd):
        return subprocess.run([sys.executable, "-m", "ctk", "job", "submit", "jax-train", "--deployment", lab.path,
                               "--set", "partition=debug", *args], capture_output=True, text=True, cwd=cwd,
                              env={**os.environ, **lab.env}, timeout=300)

    r = submit("--env", "CTK_T=hello", "--ntasks-per-node", "2", "--time", "00:20:00", "--wait", "--",
               "python3", "dp.py", cwd=proj)
    assert r.returncode == 0, (r.stdout, r.stderr)
    jid = r.stdout.strip()
    out = open(os.path.join(proj, f"jax-train-{jid}.out")).read()
    ran = sorted(ln for ln in out.splitlines() if ln.startswith("ran "))
    assert ran == ["ran /home/researcher/proj hello 0 2", "ran /home/researcher/proj hello 1 2"], out
    assert lab.ctk("job", "logs", jid, "--deployment", lab.path).stdout == out
    acct = lab.slurm("sacct", "-n", "-X", "-P", "-j", jid, "-o", "Timelimit,WorkDir").stdout.strip()
    assert acct == "00:20:00|/home/researcher/proj", acct

    r = submit("--", "python3", "dp.py", cwd=str(tmp_path))
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "the command names dp.py" in r.stderr and f"{lab.path}/lab/home (/home on the nodes)" in r.stderr
    r = submit("--chdir", "/home/researcher/proj", "--wait", "--", "python3", "dp.py", cwd=str(tmp_path))
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert "ran /home/researcher/proj None 0 1" in open(os.path.join(proj, f"jax-train-{r.stdout.strip()}.out")).read()


# ---- what a job used: sstat while it runs, sacct and ctk job efficiency once it ends ---------

# 300 MiB held and 3 s of CPU burnt, then the job says it is running and waits for the test.
# 3 s of CPU time, whatever else the machine runs (a wall-clock spin got 1 s of CPU on a busy one)
HOG = ("import os, time\nb = bytearray(300 << 20)\nend = time.process_time() + 3\nwhile time.process_time() < end: pass\n"
       "open('{tag}.running', 'w').close()\nwhile not os.path.exists('{tag}.stop'): time.sleep(0.1)\n")
MIB = 1 << 20


def _wait_for(path, what, timeout=120):
    until(lambda: os.path.exists(path), timeout, f"{what}: {path}", interval=0.2)


def _mib(text):
    from ctk.jobs.efficiency import mem_bytes
    return (mem_bytes(text) or 0) / MIB


def test_sstat_sacct_and_efficiency_report_what_a_job_used(lab, tmp_path):
    from ctk.jobs.efficiency import cpu_seconds
    root = os.path.join(lab.path, "lab", "root")  # the nodes' /root, where lab.slurm runs
    tag = f"hog-{tmp_path.name}"
    job = lab.slurm("sbatch", "--parsable", "--partition=debug", "--output=/dev/null",
                    "--wrap", f"python3 -c \"{HOG.format(tag=tag)}\"").stdout.strip()
    _wait_for(os.path.join(root, f"{tag}.running"), f"job {job}")
    node = lab.slurm("squeue", "-h", "-j", job, "-o", "%N").stdout.strip()

    # while it runs: sstat asks the node for the job's samples (JobAcctGatherType=jobacct_gather/linux)
    rows = [ln.split("|") for ln in lab.slurm("sstat", "-n", "-P", "-a", "-j", job, "-o",
                                              "JobID,MaxRSS,AveCPU,NTasks").stdout.splitlines()]
    batch = next(r for r in rows if r[0] == f"{job}.batch")
    assert _mib(batch[1]) >= 300 and cpu_seconds(batch[2]) >= 2 and batch[3] == "1", rows

    # a job that names no memory gets a CPU's share (DefMemPerCPU), not the whole node: a second
    # job starts on the same 2-CPU node while the first still runs
    lab.slurm("sbatch", f"--nodelist={node}", "--partition=debug", "--output=/dev/null",
              "--wrap", f"touch {tag}.second")
    _wait_for(os.path.join(root, f"{tag}.second"), "the second job on " + node)
    assert not os.path.exists(os.path.join(root, f"{tag}.stop"))

    open(os.path.join(root, f"{tag}.stop"), "w").close()
    said = [""]

    def recorded() -> dict | None:  # slurmdbd records the job's end a moment after it
        said[0] = out = lab.slurm("sacct", "-n", "-P", "-j", job, "-o", "JobID,State,TotalCPU,MaxRSS").stdout
        rows = {r[0]: r[1:] for r in (ln.split("|") for ln in out.splitlines())}
        return rows if rows.get(job, [""])[0] == "COMPLETED" and rows.get(f"{job}.batch", ["", "", ""])[2] else None

    rows = until(recorded, 120, lambda _: f"job {job}'s end and its batch step's MaxRSS in sacct: {said[0]!r}")
    # at least the CPU time sstat saw while it ran (the machine is shared: no more is promised)
    assert _mib(rows[f"{job}.batch"][2]) >= 300 and cpu_seconds(rows[job][1]) >= cpu_seconds(batch[2]), rows

    r = lab.ctk("job", "efficiency", job, "--deployment", lab.path, "--json")
    assert r.returncode == 0, r.stderr
    [eff] = json.loads(r.stdout)
    assert (eff["job"], eff["state"], eff["cpus"], eff["nodes"]) == (job, "COMPLETED", 1, 1)
    assert eff["mem_bytes"] == 4096 * MIB  # the debug nodes' 8192 MB / 2 CPUs
    assert eff["max_rss_bytes"] >= 300 * MIB and eff["cpu_s"] >= cpu_seconds(batch[2])
    assert 0 < eff["cpu_efficiency"] <= 1 and 0.07 < eff["mem_efficiency"] < 1
    text = lab.ctk("job", "efficiency", job, "--deployment", lab.path).stdout
    assert text.startswith(f"Job {job} (wrap): COMPLETED, exit code 0:0\n") and "Memory efficiency: " in text


# ---- Slurm's REST API (slurmrestd, JWT) ------------------------------------------------------

# Run in the login node, as the lab's user: a token from `scontrol token`, then the node listing
# from slurmrestd at the controller's address (Python's own HTTP client, as a script would).
REST_FROM_LOGIN = """
import json, subprocess, sys, urllib.request
out = subprocess.run(["scontrol", "token", "lifespan=300"], capture_output=True, text=True, check=True).stdout
token = out.strip().split("=", 1)[1]
req = urllib.request.Request(sys.argv[1] + "/slurm/v0.0.45/nodes/",
                             headers={"X-SLURM-USER-NAME": "researcher", "X-SLURM-USER-TOKEN": token})
print(json.dumps(sorted(n["name"] for n in json.load(urllib.request.urlopen(req, timeout=30))["nodes"])))
"""


def test_slurmrestd_answers_with_a_jwt_from_the_login_node_and_this_machine(lab):
    import urllib.error
    import urllib.request

    _, st = lab.status()
    url = st["rest_url"]
    assert st["rest"] == "up" and url.endswith(":6820"), st
    login = next(x["name"] for x in st["nodes"] if x["role"] == "login")
    r = subprocess.run([sys.executable, "-m", "ctk", "exec", "--user", LAB_USER, lab.path, login, "--",
                        "python3", "-c", REST_FROM_LOGIN, url], capture_output=True, text=True, env=lab.env, timeout=60)
    assert r.returncode == 0, r.stderr[-2000:]
    computes = sorted(x["name"] for x in st["nodes"] if x["role"] == "compute")
    assert json.loads(r.stdout) == computes
    # without a token, or with a forged one: refused
    try:
        urllib.request.urlopen(url + "/slurm/v0.0.45/nodes/", timeout=30)
        raise AssertionError("slurmrestd answered without a token")
    except urllib.error.HTTPError as e:
        assert e.code == 401
    token = lab.slurm("scontrol", "token", f"username={LAB_USER}", "lifespan=300").stdout.strip().split("=", 1)[1]
    head, body, _sig = token.split(".")
    # the user's token with a forged signature, and the user's own token for root: refused
    # (slurmctld checks the signature and the name; slurmrestd answers 511)
    for name, tok in (("root", f"{head}.{body}.AAAA"), ("root", token)):
        req = urllib.request.Request(url + "/slurm/v0.0.45/nodes/",
                                     headers={"X-SLURM-USER-NAME": name, "X-SLURM-USER-TOKEN": tok})
        try:
            urllib.request.urlopen(req, timeout=30)
            raise AssertionError(f"slurmrestd took {tok[-8:]} for {name}")
        except urllib.error.HTTPError as e:
            assert e.code in (401, 403, 511), e.code
    # from this machine: the OpenAPI document, then a job submitted through it that runs
    hdrs = {"X-SLURM-USER-NAME": LAB_USER, "X-SLURM-USER-TOKEN": token}
    doc = json.load(urllib.request.urlopen(urllib.request.Request(url + "/openapi/v3", headers=hdrs), timeout=30))
    assert "/slurm/v0.0.45/job/submit" in doc["paths"] and doc["info"]["x-slurm"]["release"].startswith("26.05.")
    job = {"job": {"script": "#!/bin/sh\nhostname\nsleep 5\n", "name": "rest-job", "partition": "debug",
                   "current_working_directory": USER_HOME, "environment": ["PATH=/usr/bin:/bin"],
                   "standard_output": f"{USER_HOME}/rest-%j.out"}}
    req = urllib.request.Request(url + "/slurm/v0.0.45/job/submit", data=json.dumps(job).encode(), method="POST",
                                 headers={**hdrs, "Content-Type": "application/json"})
    got = json.load(urllib.request.urlopen(req, timeout=30))
    assert got["errors"] == [] and got["job_id"] > 0, got
    jid = str(got["job_id"])
    row = lab.slurm("squeue", "-h", "-j", jid, "-o", "%u %j %T").stdout.split()
    assert row[:2] == [LAB_USER, "rest-job"] and row[2] in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING"), row
    until(lambda: lab.slurm("squeue", "-h", "-j", jid, check=False).stdout.strip() == "", 120,
          "the REST job's end")
    out = os.path.join(user_home(lab.path), f"rest-{jid}.out")
    assert open(out).read().strip() in computes
    assert lab.slurm("sacct", "-n", "-X", "-j", jid, "-o", "State").stdout.split() == ["COMPLETED"]


def test_slurmctlds_openmetrics_count_the_running_jobs(lab):
    """Slurm 26.05's metrics/openmetrics on slurmctld's own port (what Prometheus scrapes): the
    running jobs' count while two run, and the nodes, with no token (it serves counts only)."""
    import urllib.request

    conf = open(os.path.join(lab.path, "lab", "etc", "slurm", "slurm.conf")).read()
    assert "MetricsType=metrics/openmetrics\n" in conf
    host = re.search(r"^SlurmctldHost=\S+\((\S+)\)$", conf, re.M).group(1)
    port = re.search(r"^SlurmctldPort=(\d+)$", conf, re.M).group(1)

    def metric(path: str, name: str) -> dict[str, float]:
        text = urllib.request.urlopen(f"http://{host}:{port}/metrics/{path}", timeout=30).read().decode()
        return {ln.split()[0]: float(ln.split()[1]) for ln in text.splitlines()
                if ln.startswith(name) and not ln.startswith("#")}

    before = metric("jobs", "slurm_jobs_running")["slurm_jobs_running"]
    jobs = [lab.slurm("sbatch", "--parsable", "-N1", "-p", "debug", "-o", "/dev/null", "--wrap", "sleep 60").stdout.strip()
            for _ in range(2)]
    try:
        until(lambda: len(lab.slurm("squeue", "-h", "-t", "R", "-j", ",".join(jobs), "-o", "%i").stdout.split()) == 2,
              60, "both jobs running")
        running = lab.slurm("squeue", "-h", "-t", "R", "-o", "%i").stdout.split()
        assert metric("jobs", "slurm_jobs_running")["slurm_jobs_running"] == len(running) == before + 2
        nodes = metric("nodes", "slurm_node_cpus{")
        assert set(nodes) == {f'slurm_node_cpus{{node="{n}"}}' for n in
                              lab.slurm("sinfo", "-h", "-N", "-o", "%N").stdout.split()}
    finally:
        lab.slurm("scancel", *jobs, check=False)
