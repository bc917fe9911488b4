"""Shared by the integration tests: one lab image per session, built the way users build it."""

import json
import os
import re
import shutil
import subprocess
import sys
import time

import pytest

from ctk import paths
from ctk.images.base import ensure_base
from ctk.images.build import build_image
from ctk.images.store import Store
from ctk.model import ImageSpec
from ctk.progress import Progress

from .slurm_releases import HostSlurm, NodeSlurm

LAB = os.path.join(paths.BLUEPRINTS, "lab.yaml")
SLURM_ROLES = ["common", "munge", "slurm"]
# Where a rendered slurm.conf is tried: this machine's Slurm, and the Slurm of each base's image.
SLURM_RELEASES = ("host", "debian-13")
IMAGE_TOOLS = ("debootstrap", "packer", "unshare")


def ctk(*args, env=None, timeout=1800):
    return subprocess.run([sys.executable, "-m", "ctk", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=timeout)


@pytest.fixture(scope="session")
def state(tmp_path_factory):
    """A fresh layer store for this session (CTK_STATE_DIR); CTK_TEST_STATE_DIR reuses one
    across sessions when iterating locally (then the first build may be a cache hit)."""
    if os.environ.get("CTK_TEST_STATE_DIR"):
        return os.environ["CTK_TEST_STATE_DIR"]
    return str(tmp_path_factory.mktemp("ctk-state"))


@pytest.fixture(scope="session")
def lab_build(state):
    """`ctk image build blueprints/lab.yaml` into the fresh store: builds and verifies."""
    r = ctk("image", "build", LAB, "--json", env={"CTK_STATE_DIR": state})
    assert r.returncode == 0, r.stderr[-3000:]
    start_accel_builds(state)  # the GPU and TPU images reuse its base, common, munge and slurm layers
    return json.loads(r.stdout)[0]


SLURM_COMMANDS = ("sbatch", "srun", "salloc", "squeue", "sinfo", "scontrol", "scancel", "sacct")


def without_host_slurm(path: str) -> str:
    """PATH minus every folder that holds a host Slurm command."""
    return os.pathsep.join(d for d in path.split(os.pathsep)
                           if d and not any(os.path.exists(os.path.join(d, c)) for c in SLURM_COMMANDS))


def lab_env(deployment_dir: str) -> dict:
    """The environment `eval "$(ctk env DIR)"` makes, with no host Slurm command left on PATH."""
    r = ctk("env", deployment_dir)
    assert r.returncode == 0, r.stderr
    m = re.fullmatch(r"export PATH=(\S+):\"\$PATH\"\n", r.stdout)
    assert m, r.stdout
    env = {k: v for k, v in os.environ.items() if k != "SLURM_CONF"}
    env["PATH"] = m.group(1) + os.pathsep + without_host_slurm(os.environ["PATH"])
    return env


@pytest.fixture(scope="session")
def slurm_image(state):
    """slurm_image(BASE): the name of an image of roles common, munge and slurm on BASE (no
    stack), built into the session's store on first use. Its timings are printed at the end
    (shown with -s, or with -rA as the last teardown's output)."""
    built: dict[str, str] = {}
    timings: list[str] = []

    def get(base: str) -> str:
        if base not in built:
            missing = [t for t in IMAGE_TOOLS if not shutil.which(t, path="/usr/sbin:/usr/bin:/sbin:/bin")]
            if missing:
                pytest.skip(f"{', '.join(missing)} not installed: cannot build a {base} image")
            store, progress = Store(state), Progress(quiet=True)
            t0 = time.monotonic()
            ensure_base(store, base, progress)
            t1 = time.monotonic()
            r = build_image(ImageSpec(name=f"slurm-{base}", module_id="slurm_image", base=base, roles=SLURM_ROLES),
                            store, progress)
            timings.append(f"  {base}: base {t1 - t0:.1f} s, roles {', '.join(SLURM_ROLES)} {r.seconds:.1f} s "
                           f"(built: {', '.join(r.built) or 'none'}; cached: {', '.join(r.cached) or 'none'})")
            built[base] = r.image
            if base == "debian-13":
                start_accel_builds(state)  # they reuse its base, common, munge and slurm layers
        return built[base]

    yield get
    if timings:
        print("\nctk slurm image builds:\n" + "\n".join(timings))


@pytest.fixture(scope="module", params=SLURM_RELEASES)
def slurm(request, tmp_path_factory):
    """A Slurm release to run rendered configurations with (slurm_releases.py): this machine's,
    then each base's, in a node booted from its slurm_image. The node sees pytest's whole tmp
    folder at the same path, so a test's files need no rewriting."""
    if request.param == "host":
        if not shutil.which("slurmctld", path="/usr/sbin:/usr/bin:/sbin:/bin"):
            pytest.skip("slurmctld is not installed on this machine (apt-get install slurm-wlm munge)")
        yield HostSlurm()
        return
    image = request.getfixturevalue("slurm_image")(request.param)
    release = NodeSlurm(request.param, Store(request.getfixturevalue("state")), image,
                        shared=tmp_path_factory.getbasetemp(),
                        work=tmp_path_factory.mktemp(f"node-{request.param}"))
    try:
        yield release
    finally:
        release.stop()


# ---- accelerator images, built in the background ------------------------------------------
# The GPU lab's image (a kernel, the NVIDIA driver's DKMS build, the CUDA 12 wheels) and the TPU
# lab's take minutes to build, mostly downloads, unpacking and one compiler run: they are built at
# the lowest CPU and I/O priority in their own store, beside the other tests. That store starts
# with the session store's finished layers (hard links: layers never change once committed), so
# the base and the common, munge and slurm layers the lab image has are not built twice; the
# build starts as soon as the session has them (or when its tests ask first). The tests that
# use the images run last and wait.
ACCEL_BLUEPRINTS = ("gpu-lab.yaml", "tpu-lab.yaml")
ACCEL_MODULE = "test_accelerator_images.py"
_accel: dict = {}


def pytest_collection_finish(session):
    if not any(item.nodeid.split("::")[0].endswith(ACCEL_MODULE) for item in session.items):
        return
    if any(not shutil.which(t, path="/usr/sbin:/usr/bin:/sbin:/bin") for t in IMAGE_TOOLS):
        return  # the module skips, saying why
    _accel["state"] = os.environ.get("CTK_TEST_STATE_DIR") or str(
        session.config._tmp_path_factory.mktemp("ctk-accel-state"))


def start_accel_builds(seed_from: str | None = None) -> None:
    """Start the background builds (once), first linking SEED_FROM's finished layers in."""
    if "state" not in _accel or "proc" in _accel:
        return
    state = _accel["state"]
    if seed_from and os.path.realpath(seed_from) != os.path.realpath(state):
        src, dst = Store(seed_from), Store(state)
        for key in os.listdir(src.layers):
            if src.has(key) and not os.path.exists(dst.layer_dir(key)):
                subprocess.run(["cp", "-al", src.layer_dir(key), dst.layer_dir(key)], check=True)
    logs = os.path.join(state, "accel-builds")
    os.makedirs(logs, exist_ok=True)
    script = " && ".join(
        f"{sys.executable} -m ctk image build {os.path.join(paths.BLUEPRINTS, bp)} --json > {logs}/{bp}.json 2> {logs}/{bp}.log"
        for bp in ACCEL_BLUEPRINTS)
    _accel.update(logs=logs, t0=time.monotonic(),
                  proc=subprocess.Popen(["nice", "-n", "19", "ionice", "-c", "3", "sh", "-c", script],
                                        env={**os.environ, "CTK_STATE_DIR": state}, start_new_session=True))


def pytest_collection_modifyitems(config, items):
    """The tests of the background builds go last, so nothing else waits for them."""
    items.sort(key=lambda item: item.nodeid.split("::")[0].endswith(ACCEL_MODULE))


def pytest_sessionfinish(session):
    proc = _accel.get("proc")
    if proc is not None and proc.poll() is None:
        os.killpg(proc.pid, 15)
        proc.wait()


@pytest.fixture(scope="session")
def accel_images(state):
    """{blueprint: its `ctk image build --json` result}, and the store they are in, once the
    background builds are done; a failed build fails the test with its log."""
    if "state" not in _accel:
        pytest.fail("no store for the accelerator images (see pytest_collection_finish)")
    start_accel_builds(state)
    rc = _accel["proc"].wait()
    waited = time.monotonic() - _accel["t0"]
    out = {}
    for bp in ACCEL_BLUEPRINTS:
        path = os.path.join(_accel["logs"], f"{bp}.json")
        text = open(path).read() if os.path.exists(path) else ""
        if not text.strip():
            log = open(os.path.join(_accel["logs"], f"{bp}.log")).read() if os.path.exists(
                os.path.join(_accel["logs"], f"{bp}.log")) else "(no log)"
            pytest.fail(f"ctk image build {bp} failed (rc {rc}):\n{log[-4000:]}")
        out[bp] = json.loads(text)[0]
    print(f"\naccelerator images built in the background in {waited:.0f} s: "
          + "; ".join(f"{bp}: built {', '.join(r['built']) or 'none'} in {r['seconds']:.0f} s" for bp, r in out.items()))
    return {"state": _accel["state"], "results": out}
