"""Functional checks inside a node booted from the image: munge round trip, slurmd -C, JAX."""

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
    assert "CpuDevice" in out
