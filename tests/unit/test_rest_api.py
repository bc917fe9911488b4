"""The lab's REST API as it is planned: slurmrestd on the controller of a lab on Slurm 24.11 or
later, auth/jwt's key on the controller's tmpfs only, slurm.conf's AuthAltTypes, and what `ctk
status` says of it. (The API itself answers in tests/integration/test_rest_api.py.)"""

from __future__ import annotations

import os

from ctk import paths
from ctk.plan import process
from ctk.targets.base import Status
from ctk.targets.local import files, plan_lab
from ctk.targets.local.plan import JWT_KEY_IN_NODE, REST_PORT, rest_url

LAB = os.path.join(paths.BLUEPRINTS, "lab.yaml")
D12 = os.path.join(os.path.dirname(__file__), "..", "integration", "blueprints", "lab-debian-12.yaml")


def test_the_controller_alone_runs_slurmrestd_and_holds_the_jwt_key(tmp_path):
    plan = plan_lab(process(LAB).deployment, 3)
    specs = {x.role: files.node_spec(plan, x, str(tmp_path), ["/lower"]) for x in plan.nodes}
    ctl = specs["controller"]
    (svc,) = [s for s in ctl.services if s.name == "slurmrestd"]
    assert svc.argv[:5] == ["/usr/sbin/slurmrestd", "-a", "rest_auth/jwt", "-s", "openapi/slurmctld"]
    assert svc.argv[5:9] == ["-u", "slurmrestd", "-g", "slurmrestd"]  # never root (SlurmUser here)
    assert svc.argv[-1] == f"{plan.controller.addr}:{REST_PORT}" and svc.env["SLURM_JWT"] == "daemon"
    assert [s.name for s in ctl.services].index("slurmrestd") > [s.name for s in ctl.services].index("slurmctld")
    key = ctl.run_files[JWT_KEY_IN_NODE]
    assert key == {"src": str(tmp_path / "secrets" / "jwt_hs256.key"), "mode": "0400", "owner": "root"}
    for role in ("compute", "login"):  # a job, or a login, never sees the key that makes anyone's token
        assert JWT_KEY_IN_NODE not in specs[role].run_files
        assert not any(s.name == "slurmrestd" for s in specs[role].services)
    conf = files.lab_files(plan, str(tmp_path))["etc/slurm/slurm.conf"].splitlines()
    assert "AuthAltTypes=auth/jwt" in conf and f"AuthAltParameters=jwt_key=/run/{JWT_KEY_IN_NODE}" in conf
    assert rest_url(plan) == f"http://{plan.controller.addr}:6820"


def test_a_debian_12_lab_has_no_rest_api(tmp_path):
    plan = plan_lab(process(D12).deployment, 3)
    assert rest_url(plan) is None
    assert "AuthAltTypes" not in files.lab_files(plan, str(tmp_path))["etc/slurm/slurm.conf"]
    ctl = files.node_spec(plan, plan.controller, str(tmp_path), ["/lower"])
    assert not any(s.name == "slurmrestd" for s in ctl.services) and JWT_KEY_IN_NODE not in ctl.run_files


def test_the_jwt_key_is_made_once_root_only(tmp_path):
    files.cluster_secrets(str(tmp_path), False, False, True)
    key = tmp_path / "secrets" / "jwt_hs256.key"
    first = key.read_bytes()
    assert len(first) == 64 and key.stat().st_mode & 0o777 == 0o400
    assert (tmp_path / "secrets").stat().st_mode & 0o777 == 0o700
    files.cluster_secrets(str(tmp_path), False, False, True)
    assert key.read_bytes() == first  # tokens issued before a redeploy stay good


def test_status_names_the_url_and_how_to_get_a_token():
    st = Status("lab", "local", True, [], rest_url="http://198.18.4.1:6820", rest="up")
    text = st.render("/tmp/lab")
    assert "REST API (slurmrestd): http://198.18.4.1:6820 up" in text
    assert "`scontrol token`" in text and "X-SLURM-USER-TOKEN" in text and "http://198.18.4.1:6820/openapi/v3" in text
    down = Status("lab", "local", True, [], rest_url="http://198.18.4.1:6820", rest="down")
    assert "http://198.18.4.1:6820 DOWN" in down.render("/tmp/lab")
    assert down.to_dict()["rest"] == "down" and down.to_dict()["rest_url"] == "http://198.18.4.1:6820"


MLAB = os.path.join(os.path.dirname(__file__), "..", "integration", "blueprints", "metrics-lab.yaml")


def test_the_metrics_role_runs_an_exporter_on_every_node_and_prometheus_on_the_controller(tmp_path):
    from ctk.targets.local.plan import PROMETHEUS_CONF_IN_NODE, metrics_url

    plan = plan_lab(process(MLAB).deployment, 3)
    specs = {x.name: (x, files.node_spec(plan, x, str(tmp_path), ["/lower"])) for x in plan.nodes}
    for x, spec in specs.values():
        (exp,) = [s for s in spec.services if s.name == "node-exporter"]
        assert exp.argv == ["/usr/bin/prometheus-node-exporter", f"--web.listen-address={x.addr}:9100"]
        assert exp.user == "prometheus"  # not root
        assert any(s.name == "prometheus" for s in spec.services) == (x.role == "controller")
    assert metrics_url(plan) == f"http://{plan.controller.addr}:9090"
    conf = files.lab_files(plan, str(tmp_path))["etc/prometheus.yml"]
    ctl = f"{plan.controller.addr}:{plan.controller.port}"
    for what in ("jobs", "nodes", "partitions", "scheduler", "jobs-users-accts"):
        assert f"    metrics_path: /metrics/{what}\n    static_configs:\n      - targets: ['{ctl}']" in conf
    for x in plan.nodes:
        assert f"      - targets: ['{x.addr}:9100']\n        labels: {{node: {x.name}}}" in conf
    ctl_spec = specs[plan.controller.name][1]
    assert ctl_spec.run_files[PROMETHEUS_CONF_IN_NODE]["src"] == str(tmp_path / "etc" / "prometheus.yml")
    # a lab without the role has neither
    plain = plan_lab(process(LAB).deployment, 3)
    assert metrics_url(plain) is None and "etc/prometheus.yml" not in files.lab_files(plain, str(tmp_path))
    assert not any(s.name == "node-exporter" for s in files.node_spec(plain, plain.controller, str(tmp_path), []).services)


def test_the_grafana_dashboard_is_importable_json_on_prometheus():
    import json

    from ctk import paths as p

    dash = json.load(open(p.GRAFANA_DASHBOARD))
    assert dash["title"] and dash["uid"] == "ctk-slurm" and dash["panels"]
    assert {t["datasource"]["type"] for panel in dash["panels"] for t in panel["targets"]} == {"prometheus"}
    assert len({panel["id"] for panel in dash["panels"]}) == len(dash["panels"])
