"""Functional checks inside a node booted from the image: munge round trip, slurmd -C, JAX."""

import json
import shlex

import pytest


def test_munge_round_trip(host, roles):
    if "munge" not in roles:
        pytest.skip("image has no munge role")
    # A throwaway key in /run (tmpfs): the check proves the daemon works, the image gets no key.
    host.check_output("install -d -o munge -g munge -m 0700 /run/ctk-verify && "
                      "dd if=/dev/urandom of=/run/ctk-verify/munge.key bs=1024 count=1 status=none && "
                      "chown munge:munge /run/ctk-verify/munge.key && chmod 0400 /run/ctk-verify/munge.key && "
                      "install -d -o munge -g munge -m 0755 /run/munge")
    host.check_output("runuser -u munge -- munged --key-file=/run/ctk-verify/munge.key")
    try:
        out = host.run("munge -n | unmunge")
        assert out.rc == 0, out.stderr
        assert "STATUS:          Success (0)" in out.stdout
    finally:
        host.run("pkill -x munged")


def test_slurmd_reports_this_node(host, roles):
    if "slurm" not in roles:
        pytest.skip("image has no slurm role")
    out = host.check_output("slurmd -C")
    assert out.startswith("NodeName=") and "CPUs=" in out and "RealMemory=" in out


def test_jax_sees_devices(host, roles):
    if "jax" not in roles:
        pytest.skip("image has no jax role")
    out = host.check_output("/opt/ctk/jax/bin/python -c 'import jax; print(jax.devices())'")
    assert "CpuDevice" in out or "CudaDevice" in out or "TpuDevice" in out


CUDA_CHECK = """
import importlib.metadata as md, json, jax
out = {"plugin": md.version("jax-cuda%(major)s-plugin"), "pjrt": md.version("jax-cuda%(major)s-pjrt"),
       "backend": jax.default_backend()}
try:
    out["gpus"] = len(jax.devices("gpu"))
except RuntimeError as e:  # no GPU (and no driver loaded) on the machine that builds images
    out["gpus"], out["why"] = 0, str(e).splitlines()[0]
print(json.dumps(out))
"""


def test_a_cuda_stack_imports_jax_with_its_cuda_plugin(host, image, roles):
    """jax and its CUDA plugin import; without a GPU (image builders have none) jax says so and
    runs on the CPU, which is expected and reported, not an error."""
    acc = image["stack"].get("accelerator", "")
    if "jax" not in roles or not acc.startswith("cuda"):
        pytest.skip("image has no CUDA stack")
    r = host.run("/opt/ctk/jax/bin/python -c {}".format(shlex.quote(CUDA_CHECK % {"major": acc[len("cuda"):]})))
    assert r.rc == 0, r.stderr
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["plugin"] == out["pjrt"] == image["stack"]["pins"]["jax"], out
    if out["gpus"] == 0:
        assert out["backend"] == "cpu", out
        print(f"no GPU on this machine, as expected: {out.get('why')}")
