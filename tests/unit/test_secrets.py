"""Secrets of a deployment folder: never written through a link, never taken from another user."""

import os
import stat
import subprocess
import sys

import pytest

from ctk.errors import UserError
from ctk.sandbox import secretfiles
from ctk.sandbox.daemons import ensure_munge_key
from ctk.sandbox.sshd import keypair

pytestmark = pytest.mark.root  # owners other than root need root to make


def _outside(tmp_path):
    d = tmp_path / "outside"
    d.mkdir(mode=0o755)
    (d / "marker").write_text("kept")
    os.chmod(d, 0o755)
    return d


def _unchanged(d):
    assert sorted(os.listdir(d)) == ["marker"] and (d / "marker").read_text() == "kept"
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o755


def test_a_fresh_key_is_0400_in_a_0700_folder(tmp_path):
    key = ensure_munge_key(str(tmp_path / "lab" / "secrets" / "munge.key"))
    assert stat.S_IMODE(os.stat(key).st_mode) == 0o400 and os.path.getsize(key) == 1024
    assert stat.S_IMODE(os.stat(os.path.dirname(key)).st_mode) == 0o700
    before = open(key, "rb").read()
    assert ensure_munge_key(key) == key and open(key, "rb").read() == before  # made once


def test_a_planted_secrets_link_is_refused_and_nothing_outside_changes(tmp_path):
    out = _outside(tmp_path)
    (tmp_path / "lab").mkdir()
    os.symlink(out, tmp_path / "lab" / "secrets")
    with pytest.raises(UserError, match="secrets: is a symlink"):
        ensure_munge_key(str(tmp_path / "lab" / "secrets" / "munge.key"))
    with pytest.raises(UserError, match="is a symlink"):
        secretfiles.check_tree(str(tmp_path / "lab"), "secrets")
    with pytest.raises(UserError, match="is a symlink"):
        keypair(str(tmp_path / "lab" / "secrets" / "id_ed25519"))
    _unchanged(out)


def test_a_planted_lab_folder_link_is_refused(tmp_path):
    out = _outside(tmp_path)
    os.symlink(out, tmp_path / "lab")
    with pytest.raises(UserError, match="lab: is a symlink"):
        secretfiles.check_tree(str(tmp_path / "lab"), "secrets")
    _unchanged(out)


def test_a_planted_key_link_is_refused(tmp_path):
    out = _outside(tmp_path)
    d = tmp_path / "lab" / "secrets"
    d.mkdir(parents=True, mode=0o700)
    os.symlink(out / "marker", d / "munge.key")
    with pytest.raises(UserError, match="munge.key: is a symlink"):
        ensure_munge_key(str(d / "munge.key"))
    _unchanged(out)


@pytest.mark.parametrize("owner, mode, why", [(65534, 0o400, "owned by uid 65534"),
                                              (0, 0o444, r"readable or writable by others \(mode 0444\)"),
                                              (0, 0o640, "mode 0640")])
def test_a_foreign_or_readable_key_is_refused(tmp_path, owner, mode, why):
    d = tmp_path / "lab" / "secrets"
    d.mkdir(parents=True, mode=0o700)
    key = d / "munge.key"
    key.write_bytes(b"k" * 1024)
    os.chown(key, owner, 0)
    os.chmod(key, mode)
    with pytest.raises(UserError, match=why) as e:
        ensure_munge_key(str(key))
    assert str(key) in str(e.value) and "chmod 0400" in e.value.hint
    with pytest.raises(UserError, match=why):
        secretfiles.check_tree(str(tmp_path / "lab"), "secrets")
    assert (os.stat(key).st_uid, stat.S_IMODE(os.stat(key).st_mode)) == (owner, mode)  # left as it was


def test_a_foreign_secrets_folder_is_refused(tmp_path):
    d = tmp_path / "lab" / "secrets"
    d.mkdir(parents=True, mode=0o755)
    os.chown(d, 65534, 65534)
    with pytest.raises(UserError, match="owned by uid 65534"):
        secretfiles.check_tree(str(tmp_path / "lab"), "secrets")
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o755


def test_deploy_refuses_a_planted_secrets_link_with_exit_2_before_anything_starts(tmp_path):
    from ctk import paths

    out = _outside(tmp_path)
    dep = tmp_path / "dep"
    (dep / "lab").mkdir(parents=True)
    os.symlink(out, dep / "lab" / "secrets")
    env = {**os.environ, "CTK_STATE_DIR": str(tmp_path / "store"), "CTK_LEASE_DIR": str(tmp_path / "leases")}
    r = subprocess.run([sys.executable, "-m", "ctk", "deploy", os.path.join(paths.BLUEPRINTS, "lab.yaml"),
                        "-o", str(dep)], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert f"{dep}/lab/secrets: is a symlink" in r.stderr and "Traceback" not in r.stderr, r.stderr
    _unchanged(out)
    assert not os.path.exists(tmp_path / "store" / "layers") or not os.listdir(tmp_path / "store" / "layers")
    leases = tmp_path / "leases" / "leases.json"
    assert not leases.exists() or leases.read_text().strip() in ("{}", "")


def test_destroy_by_lease_refuses_a_lab_whose_folder_exists_unless_forced(tmp_path):
    from ctk.targets import leases

    env = {**os.environ, "CTK_LEASE_DIR": str(tmp_path / "leases")}
    dep = tmp_path / "someones-lab"
    dep.mkdir()
    os.environ["CTK_LEASE_DIR"] = env["CTK_LEASE_DIR"]
    try:
        # Destroying a lease removes lab N's network, host-wide: take the last number, which a
        # lab running beside the tests (the soak's, a developer's) would hardly hold.
        for i in range(leases.MAX_LEASES - 1):
            leases.lease(str(tmp_path / f"placeholder-{i}"))
        n = leases.lease(str(dep))
        assert n == leases.MAX_LEASES and not os.path.exists(f"/sys/class/net/ctkbr{n}")

        def destroy(*args):
            return subprocess.run([sys.executable, "-m", "ctk", "destroy", *args], capture_output=True, text=True,
                                  env=env, timeout=60)

        r = destroy("--lease", str(n))
        assert r.returncode == 2 and f"held by the lab in {dep}" in r.stderr and "--force" in r.stderr, r.stderr
        assert leases.number(str(dep)) == n  # still held
        r = destroy(str(dep), "--force")
        assert r.returncode == 2 and "--force goes with --lease" in r.stderr
        os.rmdir(dep)  # its folder gone: the lease is the only way to it
        r = destroy("--lease", str(n))
        assert r.returncode == 0, r.stderr
        assert leases.number(str(dep)) is None
        dep.mkdir()
        assert leases.lease(str(dep)) == n
        r = destroy("--lease", str(n), "--force")
        assert r.returncode == 0 and leases.number(str(dep)) is None, r.stderr
    finally:
        del os.environ["CTK_LEASE_DIR"]
