"""What the integration tests of labs share: a deployed lab (Lab, deploy), waits on its Slurm
(its accounting, its forgotten jobs), the check that the stack's jaxlib takes every XLA flag the
templates emit, and train.py's jobs followed through a requeue. Test modules import these from
here, never from one another."""

import json
import os
import re
import shlex
import shutil
import subprocess

from ctk.waiting import TimedOut, poll
from diskwatch import mountpoints  # tests/ is on sys.path (tests/conftest.py)

from .conftest import USER_HOME, ctk, lab_env

PY = "/opt/ctk/jax/bin/python"


def until(check, timeout: float, what, interval: float = 0.5):
    """The first truthy value CHECK returns within TIMEOUT seconds (ctk.waiting.poll, the one
    wait of ctk and its tests); else a failed assert saying WHAT was awaited (a string, or a
    function of the last value CHECK returned, called then) and that value."""
    try:
        return poll(check, timeout, interval)
    except TimedOut as e:
        said = what(e.last) if callable(what) else f"{what}; last: {e.last!r}"
        raise AssertionError(f"not within {timeout:g} s: {said}"[:6000]) from None


class Lab:
    def __init__(self, path, state):
        self.path, self.state = str(path), state
        # ctk's job registries (keyed by cluster) go beside the folder, not into root's home
        self.env = {"CTK_STATE_DIR": state, "XDG_STATE_HOME": self.path + ".xdg"}

    def ctk(self, *args, timeout=600):
        return ctk(*args, env=self.env, timeout=timeout)

    def slurm(self, *argv, check=True, timeout=60):
        """The lab's own Slurm command, through the wrappers `ctk env --user root` puts on PATH
        (an admin's), with no host Slurm command on PATH, from the lab's shared /root."""
        r = subprocess.run(list(argv), capture_output=True, text=True, env=lab_env(self.path, "root"), timeout=timeout,
                           cwd=os.path.join(self.path, "lab", "root"))
        if check:
            assert r.returncode == 0, f"{argv}: {r.stderr}"
        return r

    def destroy(self):
        """`ctk destroy`, then, once it has stopped everything, the test's folder of the lab (its
        accounting database alone is ~150 MB; a run deploys a dozen labs). Nothing still mounted
        under it is gone through: the folder then stays."""
        r = self.ctk("destroy", self.path)
        top = os.path.dirname(self.path)
        mounted = any(m.startswith(top + "/") for m in mountpoints())
        if r.returncode == 0 and not mounted:
            shutil.rmtree(top, ignore_errors=True)
        return r

    def status(self):
        r = self.ctk("status", self.path, "--json")
        return r.returncode, json.loads(r.stdout)

    def node_pids(self):
        return {n: open(os.path.join(self.path, "lab", "nodes", n, "pid")).read()
                for n in os.listdir(os.path.join(self.path, "lab", "nodes"))}


def deploy(tmp_path_factory, state, name, *args):
    lab = Lab(tmp_path_factory.mktemp(name) / "dep", state)
    r = lab.ctk("deploy", *args, "-o", lab.path, "--json")
    assert r.returncode == 0, r.stderr[-3000:]
    lab.result = json.loads(r.stdout)
    return lab


def wait_forgotten(lab, job: str, timeout: float = 180) -> None:
    """Until slurmctld no longer lists JOB in any state (MinJobAge after its end)."""
    until(lambda: not lab.slurm("squeue", "-h", "--states=all", "-j", job, "-o", "%i", check=False).stdout.strip(),
          timeout, f"slurmctld forgetting job {job}", interval=2)


def sacct_line(lab, job: str, timeout: float = 60) -> str:
    """State|ExitCode of JOB in accounting, once slurmdbd has its end."""
    said = [""]

    def ended() -> str | None:
        said[0] = out = lab.slurm("sacct", "-n", "-P", "-X", "-j", job, "-o", "State,ExitCode").stdout.strip()
        return out if out and not out.startswith(("RUNNING", "PENDING", "COMPLETING")) else None

    return until(ended, timeout, lambda _: f"the end of job {job} in accounting; sacct says {said[0]!r}")


GOLDEN = os.path.join(os.path.dirname(os.path.dirname(__file__)), "golden")


XLA_CHECK = "import jax, jax.numpy as jnp; print(float(jnp.arange(4.0).sum()))"


def template_xla_flags() -> list[str]:
    """Every XLA flag any template emits, for every nodeset of the GPU deployments ctk has
    goldens of (the lab, the GPU lab, Cluster Toolkit's A3 Mega and A3 Ultra examples)."""
    from ctk.jobs import templates

    # a bundle's folder: the container template takes it on any cluster (pyxis's images only on
    # slurm-gcp's, which these deployments are not)
    required = {"array": {"sweep": ["--lr=0.1", "--lr=0.2"]}, "container": {"image": "/var/lib/ctk/containers/jax"}}
    flags: set[str] = set()
    for name in templates.list_templates():
        for dep_name in ("lab", "gpu-lab", "ct-a3mega", "ct-a3ultra"):
            dep = templates.load_deployment(os.path.join(GOLDEN, dep_name))
            for ns in dep.nodesets:
                command = ["base_emb_dim=128"] if name == "maxtext" else ["python3", "train.py"]
                script = templates.render(name, dict(required.get(name, {})), command, dep, ns.name)
                for m in re.finditer(r"^export XLA_FLAGS=(.*)$", script, re.M):
                    flags.update(shlex.split(m.group(1))[0].split())
    return sorted(flags)


def assert_jaxlib_accepts_template_xla_flags(lab, node: str) -> None:
    """The node's stack's jaxlib (CPU) starts with every template XLA flag set: an unknown one
    aborts XLA ("Unknown flag in XLA_FLAGS"), and the CPU build checks the --xla_gpu_ names too,
    as a made-up flag shows."""
    flags = template_xla_flags()
    assert "--xla_gpu_enable_latency_hiding_scheduler=true" in flags and len(flags) >= 7, flags
    run = ["env", "JAX_PLATFORMS=cpu", "XLA_FLAGS=" + " ".join(flags), "/opt/ctk/jax/bin/python", "-c", XLA_CHECK]
    r = lab.ctk("exec", lab.path, node, "--", *run)
    assert r.returncode == 0 and r.stdout.strip().splitlines()[-1] == "6.0", (r.stdout, r.stderr[-2000:])
    bad = run[:2] + ["XLA_FLAGS=--xla_gpu_no_such_flag_ctk=true"] + run[3:]
    r = lab.ctk("exec", lab.path, node, "--", *bad)
    assert r.returncode != 0 and "xla_gpu_no_such_flag_ctk" in r.stderr, (r.stdout, r.stderr[-2000:])


# ---- train.py's jobs ----

def train_cmd(ckpt, steps, sleep):
    return ["--", PY, f"{USER_HOME}/train.py", "--steps", str(steps), "--checkpoint-every", "5",
            "--checkpoint-dir", f"{USER_HOME}/{ckpt}", "--sleep", str(sleep)]


def final_line(text):
    lines = [ln for ln in text.splitlines() if ln.startswith("train: final ")]
    assert len(lines) == 1, text[-3000:]
    return lines[0]


def uninterrupted(lab, ckpt, steps):
    """The final line of train.py's STEPS on 2 nodes of the debug partition, never interrupted."""
    r = lab.ctk("job", "submit", "jax-train", "--deployment", lab.path, "--nodes", "2", "--set", "partition=debug",
                "--wait", *train_cmd(ckpt, steps, 0))
    assert r.returncode == 0, r.stderr
    return final_line(lab.ctk("job", "logs", r.stdout.strip(), "--deployment", lab.path).stdout)


def submit_preemptible(lab, ckpt, steps, sleep, **params):
    from ctk.jobs import submit
    return submit("jax-train", {"nodes": 2, "partition": "debug", "preemptible": True, **params}, lab.path,
                  command=train_cmd(ckpt, steps, sleep)[1:])


def wait_for_step(job, step, timeout=120):
    def reached() -> bool:
        if re.search(rf"^step={step} ", job.logs(), re.M):
            return True
        assert job.state not in ("COMPLETED", "FAILED", "CANCELLED"), job.logs(stderr=True)[-3000:]
        return False

    until(reached, timeout, lambda _: f"step={step} in the log:\n{job.logs()[-2000:]}{job.logs(stderr=True)[-2000:]}",
          interval=0.2)


def check_resumed(job, steps, expected_final, lost_node_after=None):
    """The job ran twice and its second run resumed from a checkpoint of the first: the one saved
    on SIGTERM, whose line names the step. With LOST_NODE_AFTER (a node was lost once the log
    had reached that step) the step is at least that one, and the line may be missing: the
    tasks' output comes back through srun, which the requeue of a job with a lost node can stop
    before the last lines arrive (seen here: a checkpoint at step 59, the log's last step 57)."""
    out = job.logs()
    assert "train: restart 0" in out and "train: restart 1" in out, out[-3000:]
    m = re.search(r"^train: resumed from step (\d+)$", out, re.M)
    assert m and 0 < int(m.group(1)) < steps, out[-3000:]
    if lost_node_after is None:
        assert re.search(rf"^train: preempted at step {m.group(1)}: checkpoint saved", out, re.M), out[-3000:]
    else:
        assert int(m.group(1)) >= lost_node_after, out[-3000:]
    # both runs' lines are in the log (--open-mode=append); the last run ends like the uninterrupted one
    assert out.count("train: starting from step 0") == 1
    assert final_line(out) == expected_final
    return int(m.group(1))
