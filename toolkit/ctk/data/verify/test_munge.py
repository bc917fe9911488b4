"""Role munge: the daemon is installed, its directories are right, and no key is baked in."""

import pytest


@pytest.fixture(autouse=True)
def _only_with_munge(roles):
    if "munge" not in roles:
        pytest.skip("image has no munge role")


def test_munge_installed(host):
    assert host.package("munge").is_installed
    assert host.exists("munged") or host.file("/usr/sbin/munged").exists
    assert host.user("munge").exists


def test_no_key_in_the_image(host):
    # The key is a cluster secret: distributed at bring-up, never part of an image.
    assert not host.file("/etc/munge/munge.key").exists


def test_munge_directories(host):
    for d in ("/etc/munge", "/var/lib/munge", "/var/log/munge"):
        f = host.file(d)
        assert f.is_directory and f.user == "munge", d
    assert host.file("/etc/munge").mode & 0o077 == 0
