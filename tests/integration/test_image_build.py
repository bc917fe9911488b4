"""The image pipeline for real: debootstrap, then Packer driving Ansible over SSH into build
nodes, one cached layer per role; testinfra and functional checks in a booted node.

One lab image is built per test session into a fresh state dir (CTK_STATE_DIR)."""

import json
import os
import re
import shutil
import stat
import subprocess
import sys
import time

import pytest
import yaml

from ctk import paths
from ctk.images.build import ImageBuildError, build_image
from ctk.images.packer import parse_record
from ctk.images.store import Store
from ctk.images.verify import verify_image
from ctk.model import BASE_PYTHON, ImageSpec
from ctk.progress import Progress

pytestmark = pytest.mark.integration
for tool in ("debootstrap", "packer", "unshare"):
    if not shutil.which(tool, path="/usr/sbin:/usr/bin:/sbin:/bin"):
        pytest.skip(f"{tool} is not installed", allow_module_level=True)

from .conftest import LAB, ctk, link_layers  # noqa: E402 (after the skips above: nothing to import without the tools)
from .labtools import until  # noqa: E402 (as above)


def test_lab_image_builds_and_verifies(lab_build):
    """The lab image's layers: the jax layer is the lab's own; common, munge and slurm may
    already be cached, built by slurm_image("debian-13") for an earlier test (same base, same
    roles and variables, so the same keys)."""
    assert lab_build["image"] == "lab"
    assert lab_build["cached"] + lab_build["built"] == ["common", "munge", "slurm", "jax"]
    assert "jax" in lab_build["built"]
    assert "passed" in lab_build["verified"] and "failed" not in lab_build["verified"]
    # Where the time went: each layer built (munge in the common layer: "common+munge"), the
    # wheels fetched beside the layers below, the checks.
    prof = lab_build["profile"]
    layers = [k for k in prof if k not in ("base", "wheels", "venv_beside", "verify")]
    assert [role for name in layers for role in name.split("+")] == lab_build["built"], prof
    assert set(layers) <= {"common+munge", "slurm", "jax"}, layers
    assert "wheels" in prof and prof["verify"]["cached"] is False
    for name in layers:
        p = prof[name]
        assert p["seconds"] >= p["boot"] + p["tasks"] > 0, p
        assert p["task_count"] == len(p["slowest_tasks"]) or len(p["slowest_tasks"]) == 6, p
    assert prof["jax"]["installer"] == "uv"
    slowest = dict(prof["jax"]["slowest_tasks"])
    if prof["jax"].get("seeded_from") == "beside":  # the venv was made beside the layers below it
        assert prof["venv_beside"]["seconds"] > 0 and len(lab_build["built"]) > 1, prof
    else:
        assert "jax: Install the lock into the venv with uv, hashes required" in slowest, slowest
    assert all(secs >= 0 for secs in slowest.values())


@pytest.mark.parametrize("release", ["debian-13", "debian-13@26.05"])
def test_debian_13_image_builds_and_verifies(slurm_image, lab_build, state, release):
    """Base debian-13 (Python 3.13) with roles common, munge and slurm, its own Slurm 24.11 or
    forky's 26.05 (slurm_release), verified in a node booted from it: its release, packages,
    munge -n | unmunge, slurmd -C, slurmctld, slurmd and the clients, and for 26.05 that nothing
    but Slurm's packages came from forky. (Its layers are the lab image's lowest ones, same
    keys: test_roles_are_idempotent_on_the_built_image applies those roles again.)"""
    name = slurm_image(release)
    store = Store(state)
    assert store.image(name)["spec"]["base"] == "debian-13"
    lab = store.image("lab")["layers"]
    if release.endswith("@26.05"):  # the lab's Slurm
        assert store.image(name)["layers"] == lab[:3]  # base, common+munge, slurm
    else:
        assert store.image(name)["layers"][:2] == lab[:2] and store.image(name)["layers"][2] != lab[2]
    v = verify_image(name, store, Progress(quiet=True))
    # skipped: the JAX and CUDA checks (no jax role), and on 24.11 the check of forky's packages
    assert v.passed > 0 and v.skipped == (2 if release.endswith("@26.05") else 3) and not v.cached, v.summary
    assert store.verified(name)["layers"] == store.image(name)["layers"]  # the pass is on record
    assert verify_image(name, store, Progress(quiet=True), again=False).cached


def test_second_build_is_a_pure_cache_hit(lab_build, state, tmp_path):
    # No Packer, no Ansible on PATH: if the build tried to run either, it would fail.
    bare = tmp_path / "bin"
    bare.mkdir()
    for tool in ("unshare", "mount", "debootstrap", "du"):
        p = shutil.which(tool, path="/usr/sbin:/usr/bin:/sbin:/bin")
        if p:
            (bare / tool).symlink_to(p)
    # Verification on, as users run it: the image passed the same checks when it was built, so
    # no node boots (no ssh, no pytest on PATH either) and the pass on record stands.
    r = ctk("image", "build", LAB, "--json", env={"CTK_STATE_DIR": state, "PATH": str(bare)})
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)[0]
    assert res["built"] == [] and res["cached"] == ["common", "munge", "slurm", "jax"]
    assert res["layers"] == lab_build["layers"]
    assert res["verification_cached"] is True and "(cached: verified " in res["verified"], res
    assert "passed" in res["verified"]


def test_changing_a_pin_and_relocking_rebuilds_only_the_jax_layer(lab_build, state, tmp_path):
    """A user's own catalog (CTK_STACKS): one pin changed, the stack relocked with
    `ctk stack lock`, the image rebuilt: the new lock's text is in the jax layer's key alone."""
    shutil.copy(os.path.join(paths.IMAGES, "stacks.yaml"), tmp_path / "stacks.yaml")
    shutil.copytree(os.path.join(paths.IMAGES, "locks"), tmp_path / "locks")
    stacks = yaml.safe_load(open(tmp_path / "stacks.yaml"))
    # the default base and stack, and the lab's Slurm
    spec = ImageSpec(name="lab-chex", module_id="lab_image", slurm_release="26.05")
    py = BASE_PYTHON[spec.base]
    pins = stacks["stacks"][spec.stack]["pins"]
    assert pins["chex"] != "0.1.91"
    pins["chex"] = "0.1.91"  # an older chex that works with the same jax
    (tmp_path / "stacks.yaml").write_text(yaml.safe_dump(stacks))
    env = {"CTK_STACKS": str(tmp_path / "stacks.yaml")}
    r = ctk("stack", "list", env=env)
    row = next(ln for ln in r.stdout.splitlines() if ln.startswith(f"{spec.stack} "))
    assert f"{py} stale" in row, r.stdout
    r = ctk("stack", "lock", spec.stack, env=env)
    assert r.returncode == 0, r.stderr
    lock = (tmp_path / "locks" / spec.stack / f"py{py}.txt").read_text()
    assert "\nchex==0.1.91 " in lock
    r = build_image(spec, Store(state), Progress(quiet=True), stacks_path=str(tmp_path / "stacks.yaml"))
    assert r.built == ["jax"] and r.cached == ["common", "munge", "slurm"]
    # The changed wheel downloaded while the jax layer's node started: the layer waited for
    # the rest of it, if at all, at the install.
    assert 0 <= r.profile["wheels"]["waited"] <= r.profile["jax"]["seconds"], r.profile
    # It started from an earlier jax layer's venv over the same layers (hard-linked, the kernel
    # copying up what changed): that layer still holds its own chex, and the new one only the new.
    donor = r.profile["jax"]["seeded_from"]
    assert donor.startswith("jax-") and donor != r.layers[-1], r.profile
    def chex(key):
        site = os.path.join(Store(state).layer_root(key), "opt/ctk/jax/lib", f"python{py}", "site-packages")
        return sorted(n for n in os.listdir(site) if n.startswith("chex-"))
    assert chex(r.layers[-1]) == ["chex-0.1.91.dist-info"]
    assert chex(donor) and chex(donor) != ["chex-0.1.91.dist-info"]
    assert r.layers[:-1] == lab_build["layers"][:-1] and r.layers[-1] != lab_build["layers"][-1]
    # The venv holds the new lock exactly (verification compares pip's list with it).
    v = verify_image("lab-chex", Store(state), Progress(quiet=True))
    assert v.passed > 0, v.summary


def test_failing_role_is_named_and_never_cached(lab_build, state, tmp_path, monkeypatch):
    ansible = tmp_path / "ansible"
    shutil.copytree(paths.ANSIBLE, ansible)
    tasks = ansible / "roles" / "flaky" / "tasks"
    tasks.mkdir(parents=True)
    (tasks / "main.yml").write_text(
        "- name: Write a marker\n  ansible.builtin.copy:\n    dest: /etc/flaky-marker\n    content: ok\n    mode: '0644'\n"
        "- name: Fail on purpose\n  ansible.builtin.command: /bin/false\n  changed_when: false\n"
        "  when: not (flaky_fixed | default(false))\n")
    monkeypatch.setenv("CTK_ANSIBLE_DIR", str(ansible))
    store = Store(state)
    before = set(store.all_layers())
    spec = ImageSpec(name="flaky", module_id="x", roles=["common", "munge", "flaky"])
    with pytest.raises(ImageBuildError) as e:
        build_image(spec, store, Progress(quiet=True))
    msg = str(e.value)
    assert "layer 'flaky'" in msg and "task 'Fail on purpose'" in msg and "/bin/false" in msg
    # (Other tests may add layers of their own to the session's store meanwhile.)
    new = {k: store.meta(k).get("role") for k in set(store.all_layers()) - before}
    assert "flaky" not in new.values(), f"a failed build cached {new}"
    assert store.image("flaky") is None
    # Fixed, the next build resumes from the last good layer: only the flaky layer runs.
    (tasks / "main.yml").write_text((tasks / "main.yml").read_text().replace(
        "not (flaky_fixed | default(false))", "false"))
    r = build_image(spec, store, Progress(quiet=True))
    assert r.built == ["flaky"] and r.cached == ["common", "munge"]


def test_a_download_failing_while_the_jax_layer_builds_stops_it_with_its_own_error(lab_build, state, tmp_path,
                                                                                    monkeypatch):
    """The lock's wheels download while the jax layer's node starts; the role waits for them
    before it installs. A download that fails meanwhile fails the layer at that wait, the build
    reports the download's own error, and no jax layer or image is kept."""
    from ctk.errors import Failure
    from ctk.images import build as build_mod
    ansible = tmp_path / "ansible"
    shutil.copytree(paths.ANSIBLE, ansible)
    defaults = ansible / "roles" / "jax" / "defaults" / "main.yml"  # a jax layer of its own (a new key)
    defaults.write_text(defaults.read_text() + f"\n# {os.urandom(4).hex()}\n")
    monkeypatch.setenv("CTK_ANSIBLE_DIR", str(ansible))

    from ctk.waiting import poll
    log_path = os.path.join(state, "logs", "lab-nowheels-jax.log")

    def role_waits():
        return os.path.exists(log_path) and "Wait for the build host to finish downloading" in open(log_path).read()

    def download_fails_late(store, lock, progress):
        poll(role_waits, timeout=300, interval=0.2)  # the node is up and the role at its wait
        raise Failure("downloading the wheels failed: the index is unreachable (on purpose)")

    monkeypatch.setattr(build_mod, "prefetch_wheels", download_fails_late)
    store = Store(state)
    before = set(store.all_layers())
    spec = ImageSpec(name="lab-nowheels", module_id="lab_image")
    with pytest.raises(Failure) as e:
        build_image(spec, store, Progress(quiet=True))
    assert "the index is unreachable (on purpose)" in str(e.value) and not isinstance(e.value, ImageBuildError)
    log = open(log_path).read()
    assert "Wait for the build host to finish downloading the lock's wheels" in log  # the role did wait
    assert "Check that the build host has them all" in log and "Install the lock into the venv" not in log
    from ctk.images.base import chosen_base_key
    from ctk.stacks import get_stack
    plan = build_mod.plan_layers(spec, chosen_base_key(store, spec.base), get_stack(spec.stack))
    jax_key = next(lp.key for lp in plan if lp.role == "jax")
    assert jax_key not in before and not store.has(jax_key), f"a failed build cached {jax_key}"
    assert store.image("lab-nowheels") is None
    assert not [d for d in os.listdir(store.tmp) if d.endswith(".venv.build")], os.listdir(store.tmp)


def test_the_jax_venv_is_made_beside_the_layers_below_and_a_failure_there_costs_only_time(lab_build, state,
                                                                                           tmp_path, monkeypatch):
    """With layers below it to build, the jax layer's venv is made meanwhile in a second node of
    the base; the jax layer starts from it and the image passes verification (its venv holds the
    lock exactly). Where that fails, the jax layer makes its own venv and the build goes on."""
    ansible = tmp_path / "ansible"
    shutil.copytree(paths.ANSIBLE, ansible)
    monkeypatch.setenv("CTK_ANSIBLE_DIR", str(ansible))
    common = ansible / "roles" / "common" / "defaults" / "main.yml"

    def new_common():  # a common layer of its own (a new key), so there is a layer below to build
        common.write_text(common.read_text() + f"\n# {os.urandom(4).hex()}\n")

    store = Store(state)
    # The session's lab build, into an empty store, had every layer to build: its venv was made
    # beside them and it was verified. A store kept across runs (CTK_TEST_STATE_DIR) had the lab
    # cached: an image of its own is built and verified then.
    if lab_build["built"] == ["common", "munge", "slurm", "jax"]:
        name, profile, layers, verified = "lab", lab_build["profile"], lab_build["layers"], lab_build["verified"]
    else:
        name = "lab-beside"
        new_common()
        r = build_image(ImageSpec(name=name, module_id="lab_image", roles=["common", "jax"]), store,
                        Progress(quiet=True))
        profile, layers = r.profile, r.layers
        verified = verify_image(name, store, Progress(quiet=True)).summary
        assert r.built == ["common", "jax"], r
    assert profile["jax"]["seeded_from"] == "beside" and profile["venv_beside"]["seconds"] > 0, profile
    # the scratch of its layers and of the venv beside is gone (other workers' builds have their own)
    assert not [d for d in os.listdir(store.tmp) if d.split(".")[0] in layers and d.endswith(".build")], \
        os.listdir(store.tmp)
    # The jax layer's own run found the lock installed: uv installed nothing there.
    jax_log = open(os.path.join(state, "logs", f"{name}-jax.log")).read()
    lines = [",".join(rec[1]) for rec in map(parse_record, jax_log.splitlines()) if rec]
    task = next(i for i, line in enumerate(lines) if "TASK [jax : Install the lock into the venv with uv, hashes required]" in line)
    status = next(line for line in lines[task + 1:] if re.search(r"\b(ok|changed|skipping|fatal): \[", line))
    assert re.search(r"\bok: \[", status), status
    assert "passed" in verified and "failed" not in verified, verified

    # The same with the role failing in the node beside (and only there): the build still passes.
    tasks = ansible / "roles" / "jax" / "tasks" / "install.yml"
    tasks.write_text(tasks.read_text().replace(
        "---\n", "---\n- name: Fail in the node beside\n  ansible.builtin.command: /bin/false\n"
                  "  changed_when: false\n  when: ansible_facts['hostname'] == 'ctk-build-venv'\n\n", 1))
    new_common()
    r = build_image(ImageSpec(name="lab-beside", module_id="lab_image", roles=["common", "jax"]), store,
                    Progress(quiet=True))
    assert r.built == ["common", "jax"], r
    assert "task 'Fail in the node beside'" in r.profile["venv_beside"]["failed"], r.profile
    assert "seeded_from" not in r.profile["jax"], r.profile
    assert "jax: Install the lock into the venv with uv, hashes required" in dict(r.profile["jax"]["slowest_tasks"])
    v = verify_image("lab-beside", store, Progress(quiet=True))
    assert v.passed > 0 and "failed" not in v.summary, v.summary


def test_a_layer_below_failing_stops_the_venv_made_beside_it(lab_build, state, tmp_path, monkeypatch):
    """The common layer fails while the jax venv is being made beside it (a role that would take
    ten minutes there): the build stops at once with the common layer's error, the node beside is
    stopped, and nothing of either is left in the store."""
    ansible = tmp_path / "ansible"
    shutil.copytree(paths.ANSIBLE, ansible)
    monkeypatch.setenv("CTK_ANSIBLE_DIR", str(ansible))
    slow = ansible / "roles" / "jax" / "tasks" / "install.yml"
    slow.write_text(slow.read_text().replace(
        "---\n", "---\n- name: Take ten minutes in the node beside\n  ansible.builtin.command: sleep 600\n"
                  "  changed_when: false\n  when: ansible_facts['hostname'] == 'ctk-build-venv'\n\n", 1))
    common = ansible / "roles" / "common" / "tasks" / "install.yml"
    common.write_text(common.read_text().replace(
        "---\n", "---\n- name: Wait for the node beside, then fail\n  ansible.builtin.shell: sleep 3; exit 1\n"
                  "  changed_when: false\n\n", 1))
    store = Store(state)
    before = set(store.all_layers())
    t0 = time.monotonic()
    spec = ImageSpec(name="lab-below-fails", module_id="lab_image", roles=["common", "jax"])
    with pytest.raises(ImageBuildError) as e:
        build_image(spec, store, Progress(quiet=True))
    took = time.monotonic() - t0
    assert "layer 'common'" in str(e.value) and "Wait for the node beside, then fail" in str(e.value)
    assert took < 300, f"the build waited {took:.0f} s for the role beside"  # the role beside takes 600 s
    venv_log = open(os.path.join(state, "logs", "lab-below-fails-jax-venv.log")).read()
    assert "ctk: the venv made beside the layers below stopped" in venv_log
    assert store.leftovers() == [], "a build node still runs"
    # The node beside leaves nothing (the failed layer's own work folder stays for its log's
    # reader, until the next build of the store reaps it).
    assert not [d for d in os.listdir(store.tmp) if d.endswith(".venv.build")], os.listdir(store.tmp)
    # Neither layer is in the store (other workers' builds may add theirs meanwhile: the store is shared).
    from ctk.images import build as build_mod
    from ctk.images.base import chosen_base_key
    from ctk.stacks import get_stack
    plan = build_mod.plan_layers(spec, chosen_base_key(store, spec.base), get_stack(spec.stack))
    keys = [lp.key for lp in plan if lp.role in ("common", "jax")]
    assert len(keys) == 2 and not set(keys) & before, keys
    assert not [k for k in keys if store.has(k)], "a failed build cached a layer"


def test_roles_are_idempotent_on_the_built_image(lab_build, state):
    """Each role applied a second time, over SSH into a node booted from the finished image,
    changes nothing."""
    from ctk.images.build import rerun_roles
    recaps = rerun_roles("lab", Store(state), Progress(quiet=True))
    assert set(recaps) == {"common+munge", "slurm", "jax"}  # a play a layer
    for role, (ok, changed) in recaps.items():
        assert ok > 0 and changed == 0, f"role {role}: changed={changed} on a second run"


def test_exports(slurm_image, state, tmp_path):
    """Every export format of a built image (the Slurm image: the formats do not depend on what the
    image holds, and it is the smallest one the session has)."""
    image = slurm_image("debian-13")
    env = {"CTK_STATE_DIR": state}
    r = ctk("image", "export", image, "--format", "tar", "-o", str(tmp_path / "img.tar.zst"), env=env)
    assert r.returncode == 0, r.stderr
    names = subprocess.run(f"zstd -dc {tmp_path}/img.tar.zst | tar -t", shell=True, capture_output=True,
                           text=True, check=True).stdout.split()
    assert "./usr/sbin/slurmd" in names and "./usr/sbin/munged" in names
    r = ctk("image", "export", image, "--format", "ext4", "-o", str(tmp_path / "img.ext4"), env=env)
    assert r.returncode == 0, r.stderr
    fsck = subprocess.run(["e2fsck", "-fn", str(tmp_path / "img.ext4")], capture_output=True, text=True)
    assert fsck.returncode == 0, fsck.stdout
    listing = subprocess.run(["debugfs", "-R", "ls -l /usr/sbin", str(tmp_path / "img.ext4")],
                             capture_output=True, text=True).stdout
    assert "slurmctld" in listing
    r = ctk("image", "export", image, "--format", "dir", "-o", str(tmp_path / "imgdir"), env=env)
    assert r.returncode == 0 and (tmp_path / "imgdir" / "etc" / "munge").is_dir()
    if shutil.which("buildah"):
        r = ctk("image", "export", image, "--format", "oci", "-o", str(tmp_path / "img.oci.tar"), env=env)
        assert r.returncode == 0, r.stderr
        index = subprocess.run(["tar", "-xOf", str(tmp_path / "img.oci.tar"), "index.json"],
                               capture_output=True, text=True, check=True).stdout
        assert json.loads(index)["manifests"]

        def blob(digest):
            return json.loads(subprocess.run(["tar", "-xOf", str(tmp_path / "img.oci.tar"),
                                              "blobs/sha256/" + digest.split(":", 1)[1]],
                                             capture_output=True, text=True, check=True).stdout)

        config = blob(blob(json.loads(index)["manifests"][0]["digest"])["config"]["digest"])
        # an image with no JAX venv (this one) gets no PATH of ctk's; one with a venv has it first
        # (tests/unit/test_shell_programs.py checks that script)
        assert not any("/opt/ctk/jax" in e for e in config["config"].get("Env") or []), config["config"]
        assert config["config"]["Labels"]["org.opencontainers.image.title"] == f"ctk-{image}", config["config"]
        _push_to_a_registry(image, env, tmp_path)
    # nothing left mounted from the store or the exports (a lab running meanwhile has mounts
    # of its own, its network namespaces under /run/netns among them)
    left = [ln for ln in open("/proc/mounts") if state in ln or str(tmp_path) in ln]
    assert not left, left


def _push_to_a_registry(image, env, tmp_path):
    """--push: the exported image in a registry (Debian's docker-registry, the CNCF
    distribution registry, on a free local port, over plain HTTP), with the archive's config."""
    import socket
    import urllib.request

    assert shutil.which("docker-registry"), "docker-registry is not installed (make sysdeps installs it)"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    conf = tmp_path / "registry.yml"
    conf.write_text(f"version: 0.1\nlog: {{level: error}}\nstorage: {{filesystem: {{rootdirectory: {tmp_path}/registry}}}}\n"
                    f"http: {{addr: 127.0.0.1:{port}}}\n")
    reg = subprocess.Popen(["docker-registry", "serve", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}/v2"
    try:
        def up():
            try:
                return urllib.request.urlopen(base + "/", timeout=2).status == 200
            except OSError:
                return reg.poll() is not None
        until(up, 30, "the registry's /v2/")
        assert reg.poll() is None, reg.stderr.read()
        ref = f"127.0.0.1:{port}/ctk/{image}:1"
        out = tmp_path / "pushed.oci.tar"
        r = ctk("image", "export", image, "--format", "oci", "-o", str(out), "--push", ref, "--no-tls-verify", env=env)
        assert r.returncode == 0, r.stderr
        tags = json.load(urllib.request.urlopen(f"{base}/ctk/{image}/tags/list", timeout=10))
        assert tags["tags"] == ["1"], tags
        req = urllib.request.Request(f"{base}/ctk/{image}/manifests/1",
                                     headers={"Accept": "application/vnd.oci.image.manifest.v1+json"})
        pushed = json.load(urllib.request.urlopen(req, timeout=10))
        index = json.loads(subprocess.run(["tar", "-xOf", str(out), "index.json"], capture_output=True, text=True,
                                          check=True).stdout)
        archived = json.loads(subprocess.run(["tar", "-xOf", str(out), "blobs/sha256/"
                                              + index["manifests"][0]["digest"].split(":", 1)[1]],
                                             capture_output=True, text=True, check=True).stdout)
        assert pushed["config"]["digest"] == archived["config"]["digest"], (pushed, archived)
        assert [x["size"] for x in pushed["layers"]] and len(pushed["layers"]) == len(archived["layers"])
    finally:
        reg.terminate()
        reg.wait(timeout=30)


def _pids_with(text: str) -> dict[int, bytes]:
    """{pid: its /proc stat's start time} of every process whose command line holds TEXT."""
    out = {}
    for pid in (d for d in os.listdir("/proc") if d.isdigit()):
        if int(pid) == os.getpid():
            continue
        try:  # the words of a command line are NUL-separated
            if text.encode() in open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" "):
                out[int(pid)] = open(f"/proc/{pid}/stat", "rb").read().rsplit(b")", 1)[1].split()[19]
        except OSError:
            pass
    return out


def _alive(pid: int, start: bytes) -> bool:
    try:
        return open(f"/proc/{pid}/stat", "rb").read().rsplit(b")", 1)[1].split()[19] == start
    except OSError:
        return False


def test_a_build_killed_during_a_layer_leaves_nothing_running_after_the_next(lab_build, state, tmp_path, monkeypatch):
    """SIGKILL of a build in the middle of a role: its build node (PID 1, sshd, the task), packer
    and ansible stay behind; the next build of the store stops every one of them (checked by
    pid) before it builds the layer, and the store keeps no partial layer."""
    ansible = tmp_path / "ansible"
    shutil.copytree(paths.ANSIBLE, ansible)
    tasks = ansible / "roles" / "slow" / "tasks"
    tasks.mkdir(parents=True)
    (tasks / "main.yml").write_text(f"- name: Take a while ({os.urandom(4).hex()}, a layer of its own)\n"
                                    "  ansible.builtin.command: sleep 4321\n  changed_when: false\n"
                                    "  when: not (slow_fixed | default(false))\n")
    monkeypatch.setenv("CTK_ANSIBLE_DIR", str(ansible))
    # A store of its own (the session's base and common+munge layers linked in): every process with the
    # store's tmp folder on its command line is this test's, whatever other tests build meanwhile.
    store = Store(str(tmp_path / "store"))
    link_layers(state, store.root, Store(state).image("lab")["layers"][:2])
    state = store.root
    code = ("import sys\nfrom ctk.images.build import build_image\nfrom ctk.images.store import Store\n"
            "from ctk.model import ImageSpec\nfrom ctk.progress import Progress\n"
            "build_image(ImageSpec(name='slow', module_id='x', roles=['common', 'munge', 'slow']), Store(sys.argv[1]), "
            "Progress(quiet=True))\n")
    build = subprocess.Popen([sys.executable, "-c", code, state], env={**os.environ, "CTK_ANSIBLE_DIR": str(ansible)},
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        def started() -> bool:
            assert build.poll() is None, "the build ended before its slow layer started"
            return bool(_pids_with("sleep 4321"))

        until(started, 300, "the slow layer's start")
        left = {**_pids_with(os.path.realpath(store.tmp)), **_pids_with("sleep 4321")}
    except BaseException:  # a build left running would hold the store's lock for every later test
        build.kill()
        build.wait()
        with store.lock():
            store.reap()
        raise
    build.kill()
    build.wait()
    time.sleep(1)
    assert any(_alive(p, s) for p, s in left.items())  # what a killed build leaves behind
    assert _pids_with("ctk.sandbox.nodeinit " + os.path.realpath(store.tmp)), left  # the build node runs on
    (tasks / "main.yml").write_text((tasks / "main.yml").read_text().replace("not (slow_fixed | default(false))",
                                                                              "false"))
    r = build_image(ImageSpec(name="slow", module_id="x", roles=["common", "munge", "slow"]), store,
                    Progress(quiet=True))
    assert r.built == ["slow"] and r.cached == ["common", "munge"]
    assert not [p for p, s in left.items() if _alive(p, s)], "a process of the killed build is still running"
    assert all(store.has(k) for k in os.listdir(store.layers)), "a layer without its meta.json"
    assert not [d for d in os.listdir(store.tmp) if d.endswith(".build")]
    assert stat.S_IMODE(os.stat(store.root).st_mode) == 0o700
