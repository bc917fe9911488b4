"""Slurm's own containers on the lab, for real: a ctk/container-image built from the lab's
stack (its base and common layers shared with the node image), mounted read-only as an OCI
bundle in every compute node, and run by `srun --container` through runc, rootless, as the
lab's user: two processes on two nodes talk through jax.distributed inside the container."""

import json
import os
import shutil
import subprocess

import pytest

from .conftest import LAB, ctk, lab_env, user_home
from .labtools import deploy

pytestmark = pytest.mark.integration
for tool in ("slurmctld", "packer", "debootstrap"):
    if not shutil.which(tool, path="/usr/sbin:/usr/bin:/sbin:/bin"):
        pytest.skip(f"{tool} is not installed", allow_module_level=True)

BUNDLE = "/var/lib/ctk/containers/jax-cpu"
# The lab image's roles: every layer is the lab image's, from the session's cache (a container
# image of the default roles, common and jax, builds a jax layer of its own: about 40 s here,
# twice that beside the rest of the suite; run 3 of 2026-12-06 built it with only that layer
# new). What is tested is Slurm's containers, which the roles inside do not change.
CONTAINER_MODULE = """
  - id: jax_container
    source: ctk/container-image
    settings:
      name: jax-cpu
      stack: jax-cpu
      roles: [common, munge, slurm, jax]
      slurm_release: "26.05"
"""

# Run in the container by both tasks: jax.distributed from Slurm's environment, one allgather
# across the nodes, and what the container is (its os-release, its jax, no Slurm of its own).
DIST = """\
import os, socket
import jax
jax.distributed.initialize()
import jax.numpy as jnp
from jax.experimental import multihost_utils
gathered = multihost_utils.process_allgather(jnp.array([jax.process_index()]))
release = dict(line.split("=", 1) for line in open("/etc/os-release").read().splitlines() if "=" in line)
open(f"/home/{os.environ['USER']}/written-by-{jax.process_index()}", "w").close()
print("ctk-container", socket.gethostname(), jax.process_index(), jax.process_count(), jax.__version__,
      release["PRETTY_NAME"].strip('"').replace(" ", "_"), ",".join(str(int(v)) for v in gathered.ravel()),
      os.path.exists("/etc/slurm/slurm.conf"), os.getuid(), flush=True)
"""


@pytest.fixture(scope="module")
def blueprint(tmp_path_factory):
    text = open(LAB).read()
    last = '      slurm_release: "26.05"\n'  # the last setting of the lab's image module
    assert last in text
    bp = tmp_path_factory.mktemp("bp") / "lab-containers.yaml"
    bp.write_text(text.replace(last, last + CONTAINER_MODULE, 1)
                  .replace("deployment_name: lab", "deployment_name: clab"))
    return str(bp)


@pytest.fixture(scope="module")
def built(lab_build, state, blueprint):
    r = ctk("image", "build", blueprint, "--only", "jax-cpu", "--json", env={"CTK_STATE_DIR": state})
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout)[0]


@pytest.fixture(scope="module")
def lab(built, state, blueprint, tmp_path_factory):
    lab = deploy(tmp_path_factory, state, "clab", blueprint)
    lab.blueprint = blueprint
    script = os.path.join(user_home(lab.path), "dist.py")
    with open(script, "w") as f:
        f.write(DIST)
    os.chown(script, 1900000, 1900000)
    yield lab
    lab.destroy()


def srun_as_user(lab, *argv, timeout=180):
    return subprocess.run(["srun", *argv], capture_output=True, text=True, timeout=timeout,
                          env=lab_env(lab.path), cwd=user_home(lab.path))


def test_the_container_image_is_built_from_the_node_images_layers_and_verified(built, lab_build):
    """Nothing is built again: its layers are the lab image's, and so is their verification."""
    assert built["image"] == "jax-cpu" and built["built"] == [], built
    assert set(built["cached"]) >= {"common", "munge", "slurm", "jax"}, (built, lab_build)
    assert "verified" in built, built


def test_two_nodes_run_jax_distributed_inside_the_container(lab):
    r = srun_as_user(lab, "-p", "debug", "-N2", f"--container={BUNDLE}", "python3", "dist.py")
    assert r.returncode == 0, r.stderr[-3000:]
    rows = sorted(line.split()[1:] for line in r.stdout.splitlines() if line.startswith("ctk-container "))
    from ctk.stacks import load_stacks
    version = load_stacks()["jax-cpu"].jax
    assert [row[:3] for row in rows] == [["clabdebugnodeset-0", "0", "2"], ["clabdebugnodeset-1", "1", "2"]], r.stdout
    for host, _, _, jax_version, release, gathered, has_slurm, uid in rows:
        print("container on", host, "jax", jax_version, "os", release)
        assert jax_version == version and release.startswith("Debian_GNU/Linux"), rows
        assert gathered == "0,1", rows  # each process saw both: the allgather crossed the nodes
        assert has_slurm == "False", rows  # the container's tree, not the node's (which has Slurm)
        assert uid == "0", rows  # root of the container's user namespace...
    for i in (0, 1):  # ...which is the lab's user outside it, on the shared /home
        st = os.stat(os.path.join(user_home(lab.path), f"written-by-{i}"))
        assert (st.st_uid, st.st_gid) == (1900000, 1900000)


def test_a_container_cannot_write_its_image_or_see_the_nodes_secrets(lab):
    r = srun_as_user(lab, "-p", "debug", "-N1", f"--container={BUNDLE}", "sh", "-c",
                     "touch /usr/bin/x 2>&1; ls /etc/munge/munge.key /run/ctk 2>&1; cat /proc/self/uid_map")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "Read-only file system" in r.stdout, r.stdout
    # the node's munge key is not there (the image's own /etc/munge has none, and is munge's alone)
    assert ("munge.key': No such file" in r.stdout or "munge.key': Permission denied" in r.stdout), r.stdout
    assert "/run/ctk': No such file" in r.stdout, r.stdout
    assert r.stdout.split()[-3:] == ["0", "1900000", "1"], r.stdout  # one id mapped: the user's


def test_a_state_folder_another_user_made_is_refused_with_why(lab):
    """Another account of the node could make /tmp/ctk-oci-UID before the user's first
    container, to read or change runc's state: the runtime refuses the folder and says so."""
    node = "clabdebugnodeset-1"
    r = lab.ctk("exec", lab.path, node, "--", "sh", "-c", "rm -rf /tmp/ctk-oci-1900000 && mkdir -m 777 /tmp/ctk-oci-1900000")
    assert r.returncode == 0, r.stderr
    try:
        r = srun_as_user(lab, "-p", "debug", "-N1", "-w", node, f"--container={BUNDLE}", "true")
        assert r.returncode != 0 and "not a folder of uid 1900000 alone" in r.stderr, r.stderr
    finally:
        lab.ctk("exec", lab.path, node, "--", "rm", "-rf", "/tmp/ctk-oci-1900000")
    r = srun_as_user(lab, "-p", "debug", "-N1", "-w", node, f"--container={BUNDLE}", "true")
    assert r.returncode == 0, r.stderr[-3000:]


def test_ctk_job_submit_runs_the_container_template_on_slurms_own_containers(lab):
    """`ctk job submit container --set image=NAME`: the runtime is the lab's (oci), said in the
    job's log; an image the lab does not have is refused before sbatch, naming those it has."""
    r = lab.ctk("job", "submit", "container", "--deployment", lab.path, "--nodes", "2", "--set", "image=jax-cpu",
                "--set", "partition=debug", "--wait", "--", "python3", "/home/researcher/dist.py")
    assert r.returncode == 0, r.stderr[-3000:]
    jid = r.stdout.strip()
    out = lab.ctk("job", "logs", jid, "--deployment", lab.path).stdout
    assert sorted(line.split()[2] for line in out.splitlines() if line.startswith("ctk-container ")) == ["0", "1"], out
    err = open(os.path.join(user_home(lab.path), ".ctk-jobs", f"container-{jid}.err")).read()
    assert "ctk: container runtime oci (srun --container, runc), bundle /var/lib/ctk/containers/jax-cpu" in err, err
    r = lab.ctk("job", "submit", "container", "--deployment", lab.path, "--set", "image=jax-gpu", "--", "true")
    assert r.returncode == 2 and "no container image of that name" in r.stderr and "jax-cpu" in r.stderr, r.stderr


def test_a_deploy_rolls_out_the_image_this_ctk_builds_not_an_older_record(lab, state, blueprint):
    """An image recorded with other layers than this ctk's roles and locks make (an earlier
    ctk built it) is rebuilt by the deploy, not booted: here the container image's record
    names its layers but the last, all in the store, which a deploy used to take as they were."""
    path = os.path.join(state, "images", "jax-cpu.json")
    with open(path) as f:
        rec = json.load(f)
    wrong = rec["layers"][:-1]  # the layers below its jax layer, all in the store
    assert wrong and rec["layers"] != wrong
    with open(path, "w") as f:
        json.dump(dict(rec, layers=wrong), f)
    r = lab.ctk("deploy", "-q", lab.blueprint, "-o", lab.path)
    assert r.returncode == 0, r.stderr[-3000:]
    with open(path) as f:
        assert json.load(f)["layers"] == rec["layers"]
    r = srun_as_user(lab, "-p", "debug", "-N1", f"--container={BUNDLE}", "sh", "-c", "test ! -e /etc/slurm/slurm.conf")
    assert r.returncode == 0, r.stderr[-3000:]


def test_a_batch_step_runs_in_the_container_and_a_cancelled_one_leaves_nothing(lab):
    """`sbatch --container`: the batch script itself runs in the container (Slurm binds it under
    /tmp/slurm, on the container's own /tmp). A job cancelled while its container runs: Slurm
    stops and deletes the container as root, which the runtime does as the job's user, where
    its state is; no process and no runc state stay on the node."""
    home = user_home(lab.path)
    with open(os.path.join(home, "in-container.sh"), "w") as f:
        f.write("#!/bin/bash\n#SBATCH -p debug -N1 -w clabdebugnodeset-0 -o /home/researcher/batch-%j.out\n"
                f"#SBATCH --container={BUNDLE}\n"
                "test -e /etc/slurm/slurm.conf && echo node || echo container\npython3 -c 'import jax; print(jax.__version__)'\n")
    os.chown(os.path.join(home, "in-container.sh"), 1900000, 1900000)
    env = lab_env(lab.path)
    r = subprocess.run(["sbatch", "--parsable", "--wait", "in-container.sh"], capture_output=True, text=True,
                       env=env, cwd=home, timeout=180)
    assert r.returncode == 0, r.stderr
    out = open(os.path.join(home, f"batch-{r.stdout.strip().split(';')[0]}.out")).read()
    assert out.splitlines()[0] == "container", out

    r = subprocess.run(["sbatch", "--parsable", "-p", "debug", "-N1", "-w", "clabdebugnodeset-0",
                        f"--container={BUNDLE}", "--wrap", "sleep 600"], capture_output=True, text=True,
                       env=env, cwd=home, timeout=60)
    assert r.returncode == 0, r.stderr
    job = r.stdout.strip().split(";")[0]

    def in_node(cmd):
        return lab.ctk("exec", lab.path, "clabdebugnodeset-0", "--", "sh", "-c", cmd).stdout

    from .labtools import until
    until(lambda: "sleep 600" in in_node("ps -eo args"), 60, "the container's sleep on the node")
    lab.slurm("scancel", job)
    until(lambda: "sleep 600" not in in_node("ps -eo args"), 60, "the cancelled container's sleep gone")
    until(lambda: not in_node("find /tmp/ctk-oci-1900000 -name state.json").strip(),
          60, lambda _: "runc's state of the cancelled container removed: " + in_node("find /tmp/ctk-oci-1900000"))
    # the adapted configs of ended containers go at the next run: only that one's is left
    r = srun_as_user(lab, "-p", "debug", "-N1", "-w", "clabdebugnodeset-0", f"--container={BUNDLE}", "true")
    assert r.returncode == 0, r.stderr[-3000:]
    left = in_node("ls /tmp/ctk-oci-1900000/bundles").split()
    assert len(left) == 1 and left[0].startswith("clabdebugnodeset-0.researcher.") and left[0].endswith(".0.0"), left
