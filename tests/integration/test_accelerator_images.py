"""The GPU and TPU lab images for real, on a machine with neither: built by `ctk image build`
(in the background, see conftest.accel_images) and verified in a node booted from each image,
then checked here from the outside (their layers) and deployed as labs.

The GPU image carries a kernel, Debian's NVIDIA driver with its module built by DKMS for that
kernel, and the jax-cuda12 stack; the TPU image the jax-tpu stack with its libtpu."""

import json
import os
import re
import shutil
import subprocess

import pytest

from ctk import paths
from ctk.images.store import Store
from ctk.stacks import load_stacks
from ctk.stacks.drivers import image_driver

from .conftest import IMAGE_TOOLS, ctk, lab_env, user_home

# Its tests wait for the background builds (a kernel's DKMS build, GBs of CUDA wheels): longer
# than the 900 s a test gets elsewhere, on a slow machine.
pytestmark = [pytest.mark.integration, pytest.mark.timeout(2700)]
for tool in (*IMAGE_TOOLS, "slurmctld", "modinfo"):
    if not shutil.which(tool, path="/usr/sbin:/usr/bin:/sbin:/bin"):
        pytest.skip(f"{tool} is not installed", allow_module_level=True)

GPU_LAB = os.path.join(paths.BLUEPRINTS, "gpu-lab.yaml")
TPU_LAB = os.path.join(paths.BLUEPRINTS, "tpu-lab.yaml")


def _verified(result) -> dict:
    """pytest's summary of the image's verification ("41 passed, 6 skipped in 9.1s") as counts."""
    return {k: int(n) for n, k in re.findall(r"(\d+) (passed|failed|skipped|error)", result["verified"])}


def test_the_gpu_lab_image_builds_and_verifies(accel_images):
    r = accel_images["results"]["gpu-lab.yaml"]
    assert r["image"] == "gpu-lab" and "nvidia_driver" in r["cached"] + r["built"]
    counts = _verified(r)
    assert counts.get("passed", 0) >= 25 and not counts.get("failed") and not counts.get("error"), r["verified"]


def _layer_file(state, image, rel):
    """RELPATH as the image has it: from its topmost layer that holds it."""
    rec = json.load(open(os.path.join(state, "images", f"{image}.json")))
    store = Store(state)
    rels = [rel, "usr/" + rel] if rel.startswith(("lib/", "bin/", "sbin/")) else [rel]  # merged /usr
    for key in reversed(rec["layers"]):
        for r in rels:
            p = os.path.join(store.layer_root(key), r)
            if os.path.lexists(p) and not os.path.islink(p):
                return p
    return None


def test_the_gpu_image_holds_a_module_built_for_its_own_kernel(accel_images):
    """From the layers, with this machine's modinfo: the module's vermagic is the image's kernel
    (not this machine's), and its version the driver the role pins."""
    state = accel_images["state"]
    record = json.load(open(_layer_file(state, "gpu-lab", "etc/ctk/nvidia-driver.json")))
    assert record["version"] == image_driver("debian-13").version
    [kernel] = record["kernels"]
    assert kernel != os.uname().release
    assert _layer_file(state, "gpu-lab", f"boot/vmlinuz-{kernel}")
    ko = _layer_file(state, "gpu-lab", record["modules"][0].lstrip("/"))
    assert ko, record
    modinfo = shutil.which("modinfo", path="/usr/sbin:/usr/bin:/sbin:/bin")
    out = subprocess.run([modinfo, "-F", "vermagic", ko], capture_output=True, text=True, check=True).stdout
    assert out.split()[0] == kernel
    out = subprocess.run([modinfo, "-F", "version", ko], capture_output=True, text=True, check=True).stdout
    assert out.strip() == record["version"]
    blacklist = open(_layer_file(state, "gpu-lab", "etc/modprobe.d/ctk-blacklist-nouveau.conf")).read()
    assert "blacklist nouveau" in blacklist.splitlines()


def test_the_tpu_lab_image_builds_with_the_libtpu_its_jax_pins(accel_images):
    r = accel_images["results"]["tpu-lab.yaml"]
    counts = _verified(r)
    assert counts.get("passed", 0) >= 20 and not counts.get("failed"), r["verified"]
    stack = load_stacks()["jax-tpu"]
    lock = json.load(open(os.path.join(accel_images["state"], "images", "tpu-lab.json")))["stack"]["lock"]
    assert lock["libtpu"] == stack.version("libtpu") and lock["jax"] == stack.jax


@pytest.mark.parametrize("blueprint", [GPU_LAB, TPU_LAB], ids=["gpu-lab", "tpu-lab"])
def test_the_accelerator_labs_deploy_and_run_a_two_node_job(accel_images, blueprint, tmp_path):
    """Both labs deploy locally from their images (the accelerators are absent: GPUs are gres
    counts, TPU hosts plain nodes) and run jax-smoke on the 2 debug nodes."""
    env = {"CTK_STATE_DIR": accel_images["state"]}
    dep = str(tmp_path / "lab")
    r = ctk("deploy", blueprint, "-o", dep, "--json", env=env, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    try:
        r = ctk("job", "submit", "jax-smoke", "--deployment", dep, "--nodes", "2", "--wait", env=env, timeout=300)
        assert r.returncode == 0, (r.stdout, r.stderr[-3000:])
        out = ctk("job", "logs", r.stdout.strip(), "--deployment", dep, env=env).stdout
        assert out.count("process_count=2") == 2, out
        part, want = ("gpu", "gpu:h100:8") if blueprint == GPU_LAB else ("tpu", "(null)")
        r = subprocess.run(["sinfo", "-h", "-p", part, "-o", "%D %G"], capture_output=True, text=True,
                           env=lab_env(dep), cwd=user_home(dep))
        assert r.stdout.split() == ["2", want], (r.stdout, r.stderr)
    finally:
        ctk("destroy", dep, env=env)
