"""The ssh target records each host's SSH key before Ansible runs (Mitogen's ssh enforces
known_hosts), with ssh's accept-new and the deployment's own known_hosts; a host whose key
changed stops the deploy with the file and the command that forgets the old key. A stand-in
`ssh` on PATH records how it was called (no host is reached)."""

import os

import pytest

from ctk.errors import Failure
from ctk.model import SshHost
from ctk.targets.ssh import learn_host_keys

FAKE_SSH = """#!/bin/sh
echo "$@" >> "{log}"
case "$*" in
  *changed.example*) echo "@@@ WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED! @@@" >&2
                     echo "Host key verification failed." >&2; exit 255 ;;
  *down.example*) echo "ssh: connect to host down.example port 22: Connection refused" >&2; exit 255 ;;
esac
exit 0
"""


@pytest.fixture
def fake_ssh(tmp_path, monkeypatch):
    log = tmp_path / "calls"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ssh").write_text(FAKE_SSH.format(log=log))
    (bin_dir / "ssh").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return log


def host(name: str, addr: str, port: int = 22) -> SshHost:
    return SshHost(name=name, host=addr, role="compute", port=port)


def test_every_host_is_reached_once_with_accept_new_and_the_deployments_known_hosts(tmp_path, fake_ssh):
    sdir = tmp_path / "ssh"
    sdir.mkdir()
    learn_host_keys(str(sdir), [host("a", "a.example"), host("b", "b.example", 2222), host("c", "down.example")])
    calls = fake_ssh.read_text().splitlines()
    assert len(calls) == 3  # an unreachable host is left to Ansible to report
    for line in calls:
        assert "StrictHostKeyChecking=accept-new" in line
        assert f"UserKnownHostsFile={sdir}/known_hosts" in line
    assert any("-p 2222" in c and "b.example" in c for c in calls)


def test_a_host_whose_key_changed_stops_the_deploy_naming_the_file_and_the_fix(tmp_path, fake_ssh):
    sdir = tmp_path / "ssh"
    sdir.mkdir()
    with pytest.raises(Failure) as e:
        learn_host_keys(str(sdir), [host("a", "a.example"), host("node-1", "changed.example", 2222)])
    assert "node-1" in e.value.message and f"{sdir}/known_hosts" in e.value.message
    assert f"ssh-keygen -R '[changed.example]:2222' -f {sdir}/known_hosts" in e.value.hint
