"""Role jax: the stack's venv at /opt/ctk/jax holding exactly its lock (the pins and their whole
closure, nothing else), on PATH."""

import json
import re

import pytest


@pytest.fixture(autouse=True)
def _only_with_jax(roles):
    if "jax" not in roles:
        pytest.skip("image has no jax role")


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name.split("[")[0]).lower()


def _installed(host) -> dict:
    out = host.check_output("/opt/ctk/jax/bin/python -m pip list --format=json --disable-pip-version-check")
    return {_norm(p["name"]): p["version"] for p in json.loads(out)}


def test_venv_has_exact_pins(host, image):
    installed = _installed(host)
    for name, version in image["stack"]["pins"].items():
        assert installed.get(_norm(name)) == version, f"{name}: {installed.get(_norm(name))} != {version}"


def test_venv_holds_the_lock_and_nothing_else(host, image):
    lock = image["stack"].get("lock")
    if lock is None:
        pytest.skip("the image was built before stacks were locked")
    installed = _installed(host)
    for own in ("pip", "setuptools", "wheel"):  # what `python -m venv` puts in every venv
        if own not in lock:
            installed.pop(own, None)
    assert installed == lock
    assert host.file("/opt/ctk/jax/ctk-stack.lock.txt").exists
    py = host.check_output("/opt/ctk/jax/bin/python -c 'import sys; print(\"%d.%d\" % sys.version_info[:2])'")
    assert py == image["stack"]["python"]
    assert host.run("/opt/ctk/jax/bin/python -m pip check --disable-pip-version-check").rc == 0


def test_profile_puts_venv_on_path(host):
    f = host.file("/etc/profile.d/ctk-jax.sh")
    assert f.exists and "/opt/ctk/jax/bin" in f.content_string
    assert "/opt/ctk/jax/bin" in host.check_output("bash -lc 'echo $PATH'")


def test_slurm_task_prolog_puts_venv_first_on_path(host):
    """slurm.conf's TaskProlog: every task of a job, the batch script included, gets the venv."""
    f = host.file("/usr/lib/ctk/jax-task-prolog")
    assert f.exists and f.mode == 0o755
    out = host.check_output("env PATH=/usr/bin:/bin /usr/lib/ctk/jax-task-prolog")
    assert out.strip() == "export PATH=/opt/ctk/jax/bin:/usr/bin:/bin"
    assert host.check_output("env PATH=/opt/ctk/jax/bin:/bin /usr/lib/ctk/jax-task-prolog").strip() == ""


def test_a_tpu_stack_has_its_libtpu_and_its_flags(host, image):
    pins = image["stack"]["pins"]
    if "libtpu" not in pins:
        pytest.skip("not a TPU stack")
    assert _installed(host)["libtpu"] == pins["libtpu"]
    f = host.file("/etc/profile.d/ctk-libtpu.sh")
    assert f.exists and "--xla_tpu_enable_async_collective_fusion=true" in f.content_string
    out = host.check_output("bash -lc 'echo $LIBTPU_INIT_ARGS'")
    assert "--xla_tpu_overlap_compute_collective_tc=true" in out
    assert host.check_output("LIBTPU_INIT_ARGS=--mine bash -lc 'echo $LIBTPU_INIT_ARGS'") == "--mine"


def test_transformer_engine_loads_on_the_venvs_cuda_runtime(host, image):
    """An image with Transformer Engine: its JAX extension (built by the jax role against the
    image's CUDA toolkit) is installed and loads on its own, without jax having loaded its CUDA
    libraries first, and every CUDA library the process maps is the venv's, not the toolkit's."""
    te = image["stack"].get("transformer_engine")
    if not te:
        pytest.skip("the image has no Transformer Engine")
    assert _installed(host)["transformer-engine-jax"] == te["version"]
    script = ("import re, transformer_engine.jax, transformer_engine_jax\n"
              "maps = open('/proc/self/maps').read()\n"
              "print('\\n'.join(sorted(set(re.findall(r'\\S*/lib(?:cublas|cudart|nccl|cudnn)\\.so\\S*', maps)))))\n")
    libs = host.check_output("/opt/ctk/jax/bin/python -c %s", script).split()
    assert {"libcublas", "libcudart", "libnccl", "libcudnn"} <= {p.rsplit("/", 1)[1].split(".so")[0] for p in libs}, libs
    assert all(p.startswith("/opt/ctk/jax/") for p in libs), libs
