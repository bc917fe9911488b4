"""Role metrics: Prometheus's node exporter on every node and the server on the controller, from
the distribution's packages; neither starts at boot (the deployment starts them configured)."""

import pytest


@pytest.fixture(autouse=True)
def _only_with_metrics(roles):
    if "metrics" not in roles:
        pytest.skip("image has no metrics role")


def test_the_exporter_and_the_server_run(host):
    for cmd in ("prometheus-node-exporter --version", "prometheus --version", "promtool --version"):
        assert "version" in host.run(cmd).stdout + host.run(cmd).stderr, cmd
    assert host.user("prometheus").exists


def test_neither_starts_at_boot(host):
    for unit in ("prometheus", "prometheus-node-exporter"):
        assert not host.file(f"/etc/systemd/system/multi-user.target.wants/{unit}.service").exists, unit
