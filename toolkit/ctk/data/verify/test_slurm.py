"""Role slurm: controller, compute and client binaries of its base's Slurm release, the
accounting daemon and its database server; directories owned by slurm."""

import re

import pytest


@pytest.fixture(autouse=True)
def _only_with_slurm(roles):
    if "slurm" not in roles:
        pytest.skip("image has no slurm role")


def test_slurm_packages(host):
    for pkg in ("slurmctld", "slurmd", "slurm-client"):
        assert host.package(pkg).is_installed, pkg


def test_accounting_packages(host):
    """slurmdbd and MariaDB (slurm_accounting, on by default): what the lab's controller runs."""
    for pkg in ("slurmdbd", "mariadb-server"):
        assert host.package(pkg).is_installed, pkg
    for cmd in ("mariadbd", "mariadb-install-db", "mariadb"):
        assert host.exists(cmd), cmd


def test_slurm_release_of_its_base(host, base):
    for cmd in ("slurmctld -V", "slurmd -V"):
        out = host.check_output(cmd)  # "slurm-wlm 24.11.5"
        found = re.search(r"\b(\d+\.\d+)\.\d+", out)
        assert found and found.group(1) == base.slurm_release, f"{cmd}: {out}"
    # The clients print their version only once they have read a slurm.conf: the package's.
    # So does slurmdbd, from its slurmdbd.conf.
    for pkg in ("slurm-client", "slurmdbd"):
        version = host.package(pkg).version  # "24.11.5-4+deb13u1"
        assert version.startswith(base.slurm_release + "."), (pkg, version)


def test_slurm_user_and_directories(host):
    assert host.user("slurm").exists
    for d in ("/var/spool/slurmctld", "/var/spool/slurmd", "/var/log/slurm"):
        f = host.file(d)
        assert f.is_directory and f.user == "slurm", d
    assert host.file("/etc/slurm").is_directory


def test_no_cluster_config_in_the_image(host):
    # slurm.conf comes from the cluster at bring-up, never from the image.
    assert not host.file("/etc/slurm/slurm.conf").exists
