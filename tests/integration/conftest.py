"""Shared by the integration tests: one lab image per session, built the way users build it."""

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time

import pytest

from ctk import paths
from ctk.images.base import ensure_base
from ctk.images.build import build_image
from ctk.images.store import Store
from ctk.locks import lock_file
from ctk.model import ImageSpec
from ctk.progress import Progress

from .slurm_releases import HostSlurm, NodeSlurm

LAB = os.path.join(paths.BLUEPRINTS, "lab.yaml")
SLURM_ROLES = ["common", "munge", "slurm"]
# Where a rendered slurm.conf is tried: this machine's Slurm, and the Slurm of each base's image.
# "BASE@RELEASE": the base with a slurm_release of ctk.model.SLURM_ARCHIVES (Debian forky's 26.05)
SLURM_RELEASES = ("host", "debian-13", "debian-13@26.05")
IMAGE_TOOLS = ("debootstrap", "packer", "unshare")


def ctk(*args, env=None, timeout=1800):
    return subprocess.run([sys.executable, "-m", "ctk", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=timeout)


def run_dir(config) -> str:
    """A folder of this test run shared by all its pytest processes: pytest's base temp folder,
    or with pytest-xdist the one above the workers' own (each worker has a basetemp of its own)."""
    base = config._tmp_path_factory.getbasetemp()
    return str(base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base)


@pytest.fixture(scope="session")
def state(request):
    """A fresh layer store for this test run (CTK_STATE_DIR), one for all its workers: the first
    to build an image builds it, the others wait on the store's lock and find it cached;
    CTK_TEST_STATE_DIR reuses one across runs when iterating locally."""
    if os.environ.get("CTK_TEST_STATE_DIR"):
        return os.environ["CTK_TEST_STATE_DIR"]
    path = os.path.join(run_dir(request.config), "ctk-state")
    os.makedirs(path, exist_ok=True)
    return path


@pytest.fixture(scope="session")
def lab_build(request, state):
    """`ctk image build blueprints/lab.yaml` into the fresh store: builds and verifies. Run once
    for the test run: with several workers, the first one's result (what it built, its profile)
    is every worker's (kept in the run's folder; the others wait for it)."""
    done = os.path.join(run_dir(request.config), "lab-build.json")
    with lock_file(done + ".lock"):
        if not os.path.exists(done):
            r = ctk("image", "build", LAB, "--json", env={"CTK_STATE_DIR": state})
            assert r.returncode == 0, r.stderr[-3000:]
            with open(done + ".tmp", "w") as f:
                f.write(r.stdout)
            os.rename(done + ".tmp", done)
        result = json.loads(open(done).read())[0]
    start_accel_builds(state)  # the GPU and TPU images reuse its base, common, munge and slurm layers
    start_soak(state)  # the elastic lab boots from the same image
    return result


SLURM_COMMANDS = ("sbatch", "srun", "salloc", "squeue", "sinfo", "scontrol", "scancel", "sacct")


def without_host_slurm(path: str) -> str:
    """PATH minus every folder that holds a host Slurm command."""
    return os.pathsep.join(d for d in path.split(os.pathsep)
                           if d and not any(os.path.exists(os.path.join(d, c)) for c in SLURM_COMMANDS))


LAB_USER = "researcher"  # the lab's user when the blueprint names none
USER_HOME = f"/home/{LAB_USER}"


def user_home(deployment_dir: str) -> str:
    """The lab's user's home on this machine (/home/researcher in the nodes)."""
    return os.path.join(deployment_dir, "lab", "home", LAB_USER)


def lab_env(deployment_dir: str, user: str | None = None) -> dict:
    """The environment `eval "$(ctk env DIR [--user USER])"` makes, with no host Slurm command
    left on PATH."""
    r = ctk("env", deployment_dir, *(["--user", user] if user else []))
    assert r.returncode == 0, r.stderr
    m = re.fullmatch(r"export PATH=(\S+):\"\$PATH\"\n" + (rf"export CTK_LAB_USER={user}\n" if user else ""), r.stdout)
    assert m, r.stdout
    env = {k: v for k, v in os.environ.items() if k not in ("SLURM_CONF", "CTK_LAB_USER")}
    env["PATH"] = m.group(1) + os.pathsep + without_host_slurm(os.environ["PATH"])
    if user:
        env["CTK_LAB_USER"] = user
    return env


@pytest.fixture(scope="session")
def slurm_image(state):
    """slurm_image(BASE): the name of an image of roles common, munge and slurm on BASE (no
    stack), built into the session's store on first use; slurm_image("BASE@RELEASE"): the same
    with that slurm_release. Its timings are printed at the end (shown with -s, or with -rA as
    the last teardown's output)."""
    built: dict[str, str] = {}
    timings: list[str] = []

    def get(name: str) -> str:
        base, _, release = name.partition("@")
        if name not in built:
            missing = [t for t in IMAGE_TOOLS if not shutil.which(t, path="/usr/sbin:/usr/bin:/sbin:/bin")]
            if missing:
                pytest.skip(f"{', '.join(missing)} not installed: cannot build a {base} image")
            store, progress = Store(state), Progress(quiet=True)
            t0 = time.monotonic()
            with store.lock():  # another worker may be building in the same store
                ensure_base(store, base, progress)
            t1 = time.monotonic()
            spec = ImageSpec(name=f"slurm-{base}" + (f"-{release}" if release else ""), module_id="slurm_image",
                             base=base, roles=SLURM_ROLES, slurm_release=release)
            r = build_image(spec, store, progress)
            timings.append(f"  {name}: base {t1 - t0:.1f} s, roles {', '.join(SLURM_ROLES)} {r.seconds:.1f} s "
                           f"(built: {', '.join(r.built) or 'none'}; cached: {', '.join(r.cached) or 'none'})")
            built[name] = r.image
            if name == "debian-13":
                start_accel_builds(state)  # they reuse its base, common, munge and slurm layers
        return built[name]

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


# The Debian 12 lab's image (its own debootstrap, roles and jax 0.10 stack: nothing to share with
# the session's Debian 13 layers) is built the same way, from the start of the session, in a
# store of its own; its test runs just before the accelerator images' and waits for it.
LAB_12 = os.path.join(os.path.dirname(__file__), "blueprints", "lab-debian-12.yaml")
LAB_12_TEST = "test_a_debian_12_lab_still_deploys_and_runs_jax_smoke"
_lab12: dict = {}


class Background:
    """A command of this test run started once, by whichever pytest process asks first (with
    pytest-xdist, any worker), in a session of its own; every process reads how it ended from
    its folder: `pid` (its process group), `rc` (its exit status, once it has ended)."""

    def __init__(self, folder: str):
        self.folder = folder
        self.rc_path = os.path.join(folder, "rc")

    def start(self, argv: list[str], env: dict, log: str | None = None, first=None) -> bool:
        """Start ARGV (after calling FIRST) unless this run has started it already; True if this
        call did."""
        os.makedirs(self.folder, exist_ok=True)
        try:
            os.close(os.open(os.path.join(self.folder, "started"), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return False
        try:
            if first:
                first()
            out = open(log, "ab") if log else subprocess.DEVNULL
            proc = subprocess.Popen(["sh", "-c", '"$@"; echo $? > "$0.tmp" && mv "$0.tmp" "$0"', self.rc_path,
                                     *argv], env=env, start_new_session=True, stdout=out, stderr=subprocess.STDOUT)
        except BaseException:  # no process will write its status: the waiting workers must not wait
            with open(self.rc_path, "w") as f:
                f.write("-1\n")
            raise
        with open(os.path.join(self.folder, "pid"), "w") as f:
            f.write(str(proc.pid))
        return True

    def started(self) -> bool:
        return os.path.exists(os.path.join(self.folder, "started"))

    def since(self) -> float:
        """Seconds since it started."""
        return time.time() - os.stat(os.path.join(self.folder, "started")).st_mtime

    def wait(self) -> int:
        """Its exit status, once it has ended (a test's own timeout bounds the wait)."""
        while not os.path.exists(self.rc_path):
            time.sleep(1)
        return int(open(self.rc_path).read().strip() or -1)

    def stop(self, timeout: float = 180) -> None:
        """SIGTERM to its process group if it still runs; wait for the group to go."""
        if os.path.exists(self.rc_path):
            return
        try:
            pgid = int(open(os.path.join(self.folder, "pid")).read())
            os.killpg(pgid, 15)
        except (OSError, ValueError):
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.5)


def _background_build(bg: Background, state: str, blueprints, logs: str, first=None, then: str = "") -> bool:
    """`ctk image build` of each blueprint in turn into STATE, at the lowest CPU and I/O priority,
    once in this run; each one's --json result and log go to LOGS/NAME.json and LOGS/NAME.log.
    THEN: a shell command run after them, if all were built."""
    script = " && ".join(
        [f"{sys.executable} -m ctk image build {bp} --json > {logs}/{os.path.basename(bp)}.json "
         f"2> {logs}/{os.path.basename(bp)}.log" for bp in blueprints] + ([then] if then else []))

    def prepare():
        os.makedirs(logs, exist_ok=True)
        if first:
            first()
    return bg.start(["nice", "-n", "19", "ionice", "-c", "3", "sh", "-c", script],
                    env={**os.environ, "CTK_STATE_DIR": state}, first=prepare)


def _background_results(bg: Background, logs: str, blueprints) -> dict:
    """Wait for a background build; {blueprint file name: its result}, or the test fails with
    the log of the build that failed."""
    rc = bg.wait()
    out = {}
    for bp in map(os.path.basename, blueprints):
        path = os.path.join(logs, f"{bp}.json")
        text = open(path).read() if os.path.exists(path) else ""
        if not text.strip():
            log_path = os.path.join(logs, f"{bp}.log")
            log = open(log_path).read() if os.path.exists(log_path) else "(no log)"
            pytest.fail(f"ctk image build {bp} failed (rc {rc}):\n{log[-4000:]}")
        out[bp] = json.loads(text)[0]
    return out


def pytest_collection_finish(session):
    if session.config.option.collectonly:
        return  # nothing runs: no background work either
    shared = run_dir(session.config)
    if any(item.name == SOAK_TEST for item in session.items):  # selected (not -k'd away)
        _soak.update(wanted=True, seconds=session.config.getoption("soak_seconds"),
                     out=os.path.join(shared, "ctk-soak"), bg=Background(os.path.join(shared, "ctk-soak", "bg")))
    tools = all(shutil.which(t, path="/usr/sbin:/usr/bin:/sbin:/bin") for t in IMAGE_TOOLS)
    if tools and any(item.name == LAB_12_TEST for item in session.items):
        state = os.path.join(shared, "ctk-lab12-state")
        logs = os.path.join(state, "builds")
        _lab12.update(state=state, logs=logs, bg=Background(os.path.join(shared, "ctk-lab12-bg")))
        _background_build(_lab12["bg"], state, [LAB_12], logs)
    if not any(item.nodeid.split("::")[0].endswith(ACCEL_MODULE) for item in session.items):
        return
    if not tools:
        return  # the module skips, saying why
    _accel["state"] = os.environ.get("CTK_TEST_STATE_DIR") or os.path.join(shared, "ctk-accel-state")
    _accel["bg"] = Background(os.path.join(shared, "ctk-accel-bg"))


def link_layers(src: str, dst: str, keys=None) -> None:
    """Hard-link SRC store's finished layers (those of KEYS, or all) into DST: layers never
    change once committed, so two stores can share them."""
    a, b = Store(src), Store(dst)
    for key in keys if keys is not None else os.listdir(a.layers):
        if a.has(key) and not os.path.exists(b.layer_dir(key)):
            subprocess.run(["cp", "-al", a.layer_dir(key), b.layer_dir(key)], check=True)


@pytest.fixture(scope="session")
def debian12_base(state):
    """The key of the debian-12 base layer in the session store: linked from the Debian 12 lab's
    background store when that build has made it (it does so first), else made here (mmdebstrap,
    else debootstrap). A base already there is taken without the store's lock, which another
    worker's build may hold for minutes."""
    from ctk.images.base import base_key, chosen_base_key
    store = Store(state)
    key = chosen_base_key(store, "debian-12")
    if store.has(key):
        return key
    with store.lock():
        if "state" in _lab12 and os.path.isdir(_lab12["state"]):
            link_layers(_lab12["state"], state, [base_key("debian-12")])
        return ensure_base(store, "debian-12", Progress(quiet=True))


@pytest.fixture(scope="session")
def lab12_store():
    """The store the Debian 12 lab's image was built into in the background, once it is built."""
    if "bg" not in _lab12 or not _lab12["bg"].started():
        pytest.fail("the Debian 12 lab image's background build did not start (see pytest_collection_finish)")
    r = _background_results(_lab12["bg"], _lab12["logs"], [LAB_12])[os.path.basename(LAB_12)]
    print(f"\nDebian 12 lab image built in the background: {', '.join(r['built']) or 'cached'} in "
          f"{r['seconds']:.0f} s; waited until {_lab12['bg'].since():.0f} s after it started")
    return _lab12["state"]


def start_accel_builds(seed_from: str | None = None) -> None:
    """Start the background builds (once), first linking SEED_FROM's finished layers in."""
    if "state" not in _accel or _accel["bg"].started():
        return
    state = _accel["state"]

    def seed():  # finished layers only (a layer is renamed into place with its meta.json)
        if seed_from and os.path.realpath(seed_from) != os.path.realpath(state):
            link_layers(seed_from, state)
    # Once built, the store's wheelhouse (3.4 GB of CUDA 12 wheels, installed in the jax layer)
    # is not read again in this run: it goes, unless the store is one kept across runs.
    prune = "" if os.environ.get("CTK_TEST_STATE_DIR") else f"rm -rf {shlex.quote(os.path.join(state, 'wheelhouse'))}"
    _background_build(_accel["bg"], state, [os.path.join(paths.BLUEPRINTS, bp) for bp in ACCEL_BLUEPRINTS],
                      os.path.join(state, "accel-builds"), first=seed, then=prune)


# The elastic lab's soak (soak.py): at least 5 minutes of training jobs under random preemption,
# run in the background from the moment the lab's image is built, at a low CPU priority (its
# nodes and jobs inherit it), in a lab of its own. Its test runs near the end and reads the result.
SOAK_TEST = "test_the_soak_ends_every_job_completed_with_the_uninterrupted_loss"
_soak: dict = {}


def start_soak(state: str) -> None:
    if "wanted" not in _soak or _soak["bg"].started():
        return
    out = _soak["out"]
    os.makedirs(out, exist_ok=True)
    _soak["bg"].start(["nice", "-n", "10", sys.executable, os.path.join(os.path.dirname(__file__), "soak.py"),
                       "--out", out, "--seconds", str(_soak["seconds"])],
                      env={**os.environ, "CTK_STATE_DIR": state}, log=os.path.join(out, "soak.log"))


def soak_result() -> dict:
    """The soak's result.json, once it has ended (its log in the failure otherwise)."""
    if "bg" not in _soak or not _soak["bg"].started():
        pytest.fail("the soak did not start (it starts when the lab image is built, see start_soak)")
    rc = _soak["bg"].wait()
    path = os.path.join(_soak["out"], "result.json")
    log = open(os.path.join(_soak["out"], "soak.log"), errors="replace").read()
    if not os.path.exists(path):
        pytest.fail(f"the soak left no result (rc {rc}):\n{log[-4000:]}")
    res = json.load(open(path))
    print(f"\nsoak ran in the background for {_soak['bg'].since():.0f} s (rc {rc}); log:\n{log[-1500:]}")
    return res


def pytest_collection_modifyitems(config, items):
    """The tests of the background work go last (the soak's, the Debian 12 lab's, then the
    accelerator images'), so nothing else waits for them."""
    items.sort(key=lambda item: 3 if item.nodeid.split("::")[0].endswith(ACCEL_MODULE)
               else 2 if item.name == LAB_12_TEST else 1 if item.name == SOAK_TEST else 0)


def pytest_sessionfinish(session):
    """What the run started in the background and still runs is stopped at its end: by the one
    pytest process (with pytest-xdist, the controller, once every worker is done; the soak
    destroys its lab on SIGTERM)."""
    if hasattr(session.config, "workerinput"):
        return
    shared = run_dir(session.config)
    for folder in ("ctk-accel-bg", "ctk-lab12-bg", os.path.join("ctk-soak", "bg")):
        Background(os.path.join(shared, folder)).stop()


@pytest.fixture(scope="session")
def accel_images(state):
    """{blueprint: its `ctk image build --json` result}, and the store they are in, once the
    background builds are done; a failed build fails the test with its log."""
    if "state" not in _accel:
        pytest.fail("no store for the accelerator images (see pytest_collection_finish)")
    start_accel_builds(state)
    out = _background_results(_accel["bg"], os.path.join(_accel["state"], "accel-builds"), ACCEL_BLUEPRINTS)
    waited = _accel["bg"].since()
    print(f"\naccelerator images built in the background in {waited:.0f} s: "
          + "; ".join(f"{bp}: built {', '.join(r['built']) or 'none'} in {r['seconds']:.0f} s" for bp, r in out.items()))
    return {"state": _accel["state"], "results": out}
