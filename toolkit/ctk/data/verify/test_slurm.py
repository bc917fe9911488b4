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


def test_slurm_release_of_its_base_or_the_one_it_asked_for(host, base, image):
    """The base's own Slurm, or the image's slurm_release (26.05 on debian-13: forky's)."""
    release = image["spec"].get("slurm_release") or base.slurm_release
    for cmd in ("slurmctld -V", "slurmd -V"):
        out = host.check_output(cmd)  # "slurm-wlm 24.11.5"
        found = re.search(r"\b(\d+\.\d+)\.\d+", out)
        assert found and found.group(1) == release, f"{cmd}: {out}"
    # The clients print their version only once they have read a slurm.conf: the package's.
    # So does slurmdbd, from its slurmdbd.conf.
    for pkg in ("slurm-client", "slurmdbd"):
        version = host.package(pkg).version  # "24.11.5-4+deb13u1"
        assert version.startswith(release + "."), (pkg, version)


def test_slurm_user_and_directories(host):
    assert host.user("slurm").exists
    for d in ("/var/spool/slurmctld", "/var/spool/slurmd", "/var/log/slurm"):
        f = host.file(d)
        assert f.is_directory and f.user == "slurm", d
    assert host.file("/etc/slurm").is_directory


def test_no_cluster_config_in_the_image(host):
    # slurm.conf comes from the cluster at bring-up, never from the image.
    assert not host.file("/etc/slurm/slurm.conf").exists


def test_only_slurms_packages_come_from_a_newer_suite(host, image):
    """With a slurm_release from a newer suite (forky), its pin lets Slurm's packages and the
    library Debian 13 lacks come from it, and nothing else: glibc, Python and every other
    package stay the base's (hwloc comes from the base's backports)."""
    if not image["spec"].get("slurm_release"):
        pytest.skip("the image runs its base's own Slurm")
    out = host.check_output("python3 -c %s", NEWER_SUITE)
    newer = sorted(out.split())
    allowed = re.compile(r"(slurm.*|libslurm.*|sackd|libpmi0t64|libpmi2-0t64|libllhttp9\.4)")
    assert "slurmctld" in newer and "slurmd" in newer, newer
    assert [p for p in newer if not allowed.fullmatch(p)] == [], newer


# The installed packages whose installed version apt finds only in the newer suite's lists.
NEWER_SUITE = """
import apt
cache = apt.Cache()
for p in cache:
    if p.is_installed:
        suites = {o.codename for o in p.installed.origins if o.archive != "now"}
        if suites == {"forky"}:
            print(p.name)
"""
