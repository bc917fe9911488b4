"""Role slurm: controller, compute and client binaries; directories owned by slurm."""

import pytest


@pytest.fixture(autouse=True)
def _only_with_slurm(roles):
    if "slurm" not in roles:
        pytest.skip("image has no slurm role")


def test_slurm_packages(host):
    for pkg in ("slurmctld", "slurmd", "slurm-client"):
        assert host.package(pkg).is_installed, pkg


def test_slurm_user_and_directories(host):
    assert host.user("slurm").exists
    for d in ("/var/spool/slurmctld", "/var/spool/slurmd", "/var/log/slurm"):
        f = host.file(d)
        assert f.is_directory and f.user == "slurm", d
    assert host.file("/etc/slurm").is_directory


def test_no_cluster_config_in_the_image(host):
    # slurm.conf comes from the cluster at bring-up, never from the image.
    assert not host.file("/etc/slurm/slurm.conf").exists
