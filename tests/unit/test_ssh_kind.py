"""The ssh target's module kind (ctk/target/ssh): its validation errors, the model it plans,
and the files `ctk deploy` writes for it (inventory, slurm.conf) before any SSH happens."""

import json
import os
import stat
import subprocess
import sys

import pytest

from ctk import paths
from ctk.blueprint import BlueprintErrors
from ctk.cli import main
from ctk.model import Deployment, LabSettings
from ctk.plan import process
from ctk.targets import ssh

HEAD = """\
blueprint_name: ssh-unit
vars:
  deployment_name: sshunit
deployment_groups:
- group: cluster
  modules:
  - id: debug_nodeset
    source: ctk/slurm/nodeset
    settings:
      node_count_static: {static}
  - id: debug_partition
    source: ctk/slurm/partition
    use: [debug_nodeset]
    settings:
      partition_name: debug
      is_default: true
  - id: controller
    source: ctk/slurm/controller
    use: [debug_partition]
  - id: machines
    source: ctk/target/ssh
    settings:
      hosts:
"""

GOOD_HOSTS = """\
      - {name: ctl, host: 10.1.0.1, key: id_test, role: controller, slurmctld_port: 7817}
      - {name: node-a, host: 10.1.0.2, key: id_test, role: compute, nodeset: debug_nodeset, slurmd_port: 7818}
      - {name: node-b, host: 10.1.0.3, port: 2222, user: admin, key: id_test, role: compute, nodeset: debugnodeset}
      - {name: login-0, host: login.example.org, role: login}
"""

PRIVATE = "-----BEGIN OPENSSH PRIVATE KEY-----\nc2VjcmV0LWtleS1ib2R5LW5ldmVyLWNvcGllZA==\n-----END OPENSSH PRIVATE KEY-----\n"


@pytest.fixture
def bp(tmp_path):
    (tmp_path / "id_test").write_text(PRIVATE)
    (tmp_path / "id_test").chmod(0o600)
    (tmp_path / "id_test.pub").write_text("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIPublicPart test\n")

    def _bp(hosts: str, static: int = 2, extra: str = "") -> str:
        p = tmp_path / "bp.yaml"
        p.write_text(HEAD.format(static=static) + hosts + extra)
        return str(p)
    return _bp


def errors(path: str) -> list[str]:
    with pytest.raises(BlueprintErrors) as e:
        process(path)
    return [f"{x.pos.line}:{x.pos.col} {x.message}" if x.pos else x.message for x in e.value.errors]


def test_a_good_inventory_plans_the_ssh_target(bp):
    dep = process(bp(GOOD_HOSTS)).deployment
    assert dep.target == "ssh"
    assert [h.name for h in dep.settings.hosts] == ["ctl", "node-a", "node-b", "login-0"]
    a, b = dep.settings.hosts[1], dep.settings.hosts[2]
    assert (a.nodeset, a.slurmd_port, a.port, a.user) == ("debugnodeset", 7818, 22, "root")
    assert (b.nodeset, b.slurmd_port, b.port, b.user) == ("debugnodeset", None, 2222, "admin")
    assert os.path.isabs(a.key) and a.key.endswith("id_test")
    assert dep.settings.hosts[3].key is None and dep.settings.hosts[3].service_manager == "systemd"
    ns = dep.nodeset("debugnodeset")
    assert ns.node_names() == ["node-a", "node-b"] and ns.hostnames == ["node-a", "node-b"]
    assert dep.controller.hostname == "ctl"
    assert Deployment.from_dict(json.loads(json.dumps(dep.to_dict()))) == dep


@pytest.mark.parametrize("addr", ["10.1.0.9", "login-1.example.org", "::1", "fd00::9", "fe80::1%eth0", "node7"])
def test_a_host_address_can_be_a_dns_name_or_an_ipv4_or_ipv6_address(bp, addr):
    dep = process(bp(GOOD_HOSTS + f"      - {{name: x, host: '{addr}', role: login}}\n")).deployment
    assert dep.settings.hosts[-1].host == addr


def test_without_the_module_the_target_stays_local(tmp_path):
    p = tmp_path / "bp.yaml"
    p.write_text(HEAD.format(static=2).split("  - id: machines")[0])
    dep = process(str(p)).deployment
    assert dep.target == "local" and dep.settings == LabSettings()
    assert dep.nodeset("debugnodeset").node_names() == ["sshunitdebugnodeset-0", "sshunitdebugnodeset-1"]


@pytest.mark.parametrize("host, want", [
    ("{name: x, host: 10.1.0.9, role: master}", "unknown role 'master'"),
    ("{name: x, host: 10.1.0.9, role: compute, nodeset: nope}", "no nodeset 'nope'"),
    ("{name: x, host: 10.1.0.9, role: compute, nodeset: debug_nodeset, key: missing_key}",
     "key file 'missing_key' does not exist"),
    ("{name: x, host: 10.1.0.9, role: compute, nodeset: debug_nodeset, key: id_test.pub}", "is a public key"),
    ("{name: node-a, host: 10.1.0.9, role: login}", "name 'node-a' is used by host 2 too"),
    ("{name: x, host: 10.1.0.9, role: login, colour: blue}", "unknown key 'colour'"),
    ("{name: x_y, host: 10.1.0.9, role: login}", "invalid name 'x_y'"),
    ("{name: x, role: login}", "needs host"),
    # what ssh would take as an option, a login or a second word
    ("{name: x, host: '-oProxyCommand=touch${IFS}/tmp/ctk-pwned', role: login}", "invalid host '-oProxyCommand"),
    ("{name: x, host: 'root@10.1.0.9', role: login}", "invalid host 'root@10.1.0.9'"),
    ("{name: x, host: '10.1.0.9 -p 2222', role: login}", "invalid host '10.1.0.9 -p 2222'"),
    ("{name: x, host: '10.1.0.9:2222', role: login}", "invalid host '10.1.0.9:2222'"),
    ("{name: x, host: ':', role: login}", "invalid host ':'"),
    ("{name: \"x\\n\", host: 10.1.0.9, role: login}", "invalid name 'x\\n'"),  # a line of slurm.conf
    ("{name: x, host: 10.1.0.9, role: login, user: \"admin\\n\"}", "invalid user 'admin\\n'"),
    ("{name: x, host: 10.1.0.9, role: login, port: 99999}", "invalid port 99999"),
    ("{name: x, host: 10.1.0.9, role: login, slurmd_port: 7000}", "slurmd_port is for compute hosts"),
    ("{name: x, host: 10.1.0.9, role: compute, nodeset: debug_nodeset, slurmctld_port: 7000}",
     "slurmctld_port is for the controller host"),
    ("{name: x, host: 10.1.0.9, role: login, nodeset: debug_nodeset}", "only compute hosts belong to a nodeset"),
    ("{name: x, host: 10.1.0.9, role: login, service_manager: upstart}", "unknown service_manager 'upstart'"),
    ("{name: x, host: 10.1.0.2, role: login}", "10.1.0.2:22 is listed twice (also as 'node-a')"),
    ("{name: x, host: 10.1.0.9, role: controller}", "lists 2 controllers"),
    ("just-a-name", "must be a mapping"),
])
def test_each_bad_host_is_a_positioned_error(bp, host, want):
    errs = errors(bp(GOOD_HOSTS + f"      - {host}\n"))
    assert len(errs) == 1 and want in errs[0], errs
    line, col = errs[0].split(" ", 1)[0].split(":")
    # The bad entry (line 28), or the hosts list (line 24) for a count of controllers.
    assert (int(line), int(col) >= 9) == ((24, False) if "controllers" in want else (28, True))


def test_every_error_is_reported_at_once_with_file_line_col(bp, capsys):
    path = bp("""\
      - {name: ctl, host: 10.1.0.1, key: nokey, role: controler}
      - {name: node-a, host: 10.1.0.2, role: compute, nodeset: debug_nodest}
""")
    assert main(["validate", path]) == 2
    err = capsys.readouterr().err
    assert f"{path}:24:42: error: ssh host 1 (ctl): key file 'nokey' does not exist" in err
    assert f"{path}:24:55: error: ssh host 1 (ctl): unknown role 'controler'" in err
    assert "did you mean 'controller'?" in err
    assert f"{path}:25:64: error: ssh host 2 (node-a): no nodeset 'debug_nodest'" in err
    assert "did you mean 'debug_nodeset'?" in err
    assert err.rstrip().endswith("3 errors")


def test_a_nodeset_with_more_nodes_than_hosts(bp):
    errs = errors(bp(GOOD_HOSTS, static=3))
    assert errs == ["10:26 nodeset 'debugnodeset' has 3 static nodes but the ssh target lists 2 compute "
                    "host(s) for it"]


def test_no_controller_no_hosts_two_modules(bp):
    assert errors(bp("      - {name: n, host: 10.1.0.2, role: compute, nodeset: debug_nodeset}\n", static=1)) == [
        "24:7 the ssh target lists no controller"]
    assert errors(bp("        []\n")) == ["24:9 the ssh target lists no hosts"]
    twice = bp(GOOD_HOSTS, extra="  - id: more\n    source: ctk/target/ssh\n    settings:\n      hosts: []\n")
    assert errors(twice) == ["28:9 a blueprint has one ssh target module"]


def test_a_compute_host_of_the_only_nodeset_needs_no_nodeset(bp):
    dep = process(bp("""\
      - {name: ctl, host: 10.1.0.1, role: controller}
      - {name: n0, host: 10.1.0.2, role: compute}
""", static=1)).deployment
    assert dep.nodeset("debugnodeset").node_names() == ["n0"]


def test_ctk_show_lists_the_hosts(bp, capsys):
    assert main(["show", bp(GOOD_HOSTS)]) == 0
    out = capsys.readouterr().out
    assert "Hosts (target ssh)" in out and "admin@10.1.0.3:2222" in out


# ---- the files deploy writes -------------------------------------------------------------

@pytest.fixture
def written(bp, tmp_path):
    dep = process(bp(GOOD_HOSTS)).deployment
    out = tmp_path / "dep"
    state, changed = ssh.write_files(dep, str(out))
    return dep, str(out), state, changed


def test_inventory_is_0600_and_holds_key_paths_not_keys(written):
    dep, out, state, changed = written
    sdir = os.path.join(out, "ssh")
    inv_path = os.path.join(sdir, "inventory.yml")
    assert stat.S_IMODE(os.stat(inv_path).st_mode) == 0o600
    inv = json.load(open(inv_path))
    hosts = {n: v for g in inv["all"]["children"].values() for n, v in g["hosts"].items()}
    assert set(inv["all"]["children"]) == {"controller", "compute", "login"}
    assert hosts["node-a"]["ansible_ssh_private_key_file"] == dep.settings.hosts[1].key
    assert "ansible_ssh_private_key_file" not in hosts["login-0"]
    assert hosts["node-b"]["ansible_user"] == "admin" and hosts["node-b"]["ansible_become"] is True
    assert hosts["ctl"]["ansible_become"] is False
    assert hosts["node-a"]["slurm_node_name"] == "node-a" and "slurm_node_name" not in hosts["ctl"]
    assert (hosts["ctl"]["slurm_flavour"], hosts["node-b"]["slurm_flavour"]) == ("controller", "compute")
    assert hosts["node-a"]["ctk_roles"] == ["common", "munge", "slurm", "jax"]
    # The blueprint's image is on the default base (debian-13, Python 3.13): the newest CPU stack
    # for it; the host's Python is known only on the host, so every lock of the stack goes along.
    assert hosts["node-a"]["jax_stack"] == "jax-cpu" and "jax" in hosts["node-a"]["jax_stack_pins"]
    assert set(hosts["node-a"]["jax_stack_locks"]) == {"3.12", "3.13"}
    assert "--hash=sha256:" in hosts["node-a"]["jax_stack_locks"]["3.13"]
    v = inv["all"]["vars"]
    assert v["ctk_manage_services"] is True and v["munge_strip_package_key"] is False
    assert v["common_remove_ssh_host_keys"] is False
    assert v["munge_key_src"] == os.path.join(sdir, "secrets", "munge.key")
    assert v["ctk_hosts"] == [{"name": "ctl", "addr": "10.1.0.1"}, {"name": "node-a", "addr": "10.1.0.2"},
                              {"name": "node-b", "addr": "10.1.0.3"}]  # the DNS-named login stays with DNS
    key = os.path.join(sdir, "secrets", "munge.key")
    assert stat.S_IMODE(os.stat(key).st_mode) == 0o400
    assert stat.S_IMODE(os.stat(os.path.dirname(key)).st_mode) == 0o700
    secrets = [open(key, "rb").read()[:48], b"c2VjcmV0LWtleS1ib2R5"]
    for root, _, files in os.walk(out):
        for f in files:
            p = os.path.join(root, f)
            if p != key:
                data = open(p, "rb").read()
                assert not any(s in data for s in secrets), p
    assert sorted(h["name"] for h in state["hosts"]) == ["ctl", "login-0", "node-a", "node-b"]
    assert "inventory.yml" in changed


def test_ansible_reads_the_inventory(written):
    _, out, _, _ = written
    exe = os.path.join(os.path.dirname(sys.executable), "ansible-inventory")
    if not os.access(exe, os.X_OK):
        pytest.skip("ansible-inventory not installed")
    r = subprocess.run([exe, "-i", os.path.join(out, "ssh", "inventory.yml"), "--list"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert sorted(got["compute"]["hosts"]) == ["node-a", "node-b"]
    assert got["_meta"]["hostvars"]["node-b"]["ansible_port"] == 2222


def test_the_stop_inventory_reaches_the_hosts_and_nothing_more(written):
    dep, out, _, _ = written
    inv = ssh.stop_inventory(dep.settings.hosts, os.path.join(out, "ssh"))
    hosts = {n: v for g in inv["all"]["children"].values() for n, v in g["hosts"].items()}
    assert hosts["node-b"] == {"ansible_host": "10.1.0.3", "ansible_port": 2222, "ansible_user": "admin",
                               "ansible_become": True, "slurm_flavour": "compute",
                               "ctk_service_manager": "systemd",
                               "ansible_ssh_private_key_file": dep.settings.hosts[2].key,
                               "ansible_ssh_extra_args": "-o IdentitiesOnly=yes"}
    assert inv["all"]["vars"]["ctk_manage_services"] is True and "munge_key_src" not in inv["all"]["vars"]


def test_slurm_conf_has_the_hosts_addresses_and_ports(written):
    _, out, _, _ = written
    conf = open(os.path.join(out, "ssh", "etc", "slurm", "slurm.conf")).read()
    assert "SlurmctldHost=ctl(10.1.0.1)\n" in conf and "SlurmctldPort=7817\n" in conf
    assert "SlurmdPort=6818\n" in conf and "SlurmUser=slurm\n" in conf
    assert "NodeName=node-a NodeAddr=10.1.0.2 NodeHostname=node-a Port=7818 " in conf
    assert "NodeName=node-b NodeAddr=10.1.0.3 NodeHostname=node-b CPUs=" in conf
    # One slurmd per machine: the pid files the roles' direct starts and Debian's units expect.
    assert "SlurmdPidFile=/run/slurmd.pid\n" in conf and "SlurmctldPidFile=/run/slurmctld.pid\n" in conf
    assert "SlurmdSpoolDir=/var/spool/slurmd\n" in conf and "%n" not in conf
    # Slurm ranges are numeric only: letter-suffixed names are listed, not folded into node-[a-b].
    assert "\nPartitionName=debug Nodes=node-a,node-b Default=YES " in conf
    host = open(os.path.join(out, "ssh", "host", "slurm.conf")).read()
    assert f"AuthInfo=socket={os.path.join(out, 'ssh', 'host-munge', 'munge.sock')}\n" in host
    assert open(os.path.join(out, "ssh", "etc", "hosts")).read() == (
        "10.1.0.1 ctl\n10.1.0.2 node-a\n10.1.0.3 node-b\n")


def test_rewriting_unchanged_files_changes_nothing(written):
    dep, out, _, _ = written
    key = open(os.path.join(out, "ssh", "secrets", "munge.key"), "rb").read()
    _, changed = ssh.write_files(dep, out)
    assert changed == []
    assert open(os.path.join(out, "ssh", "secrets", "munge.key"), "rb").read() == key  # made once


def test_ctk_create_renders_the_hosts_slurm_conf(bp, tmp_path):
    out = tmp_path / "created"
    assert main(["create", bp(GOOD_HOSTS), "-o", str(out)]) == 0
    conf = (out / "cluster" / "slurm" / "slurm.conf").read_text()
    assert "NodeName=node-a NodeAddr=10.1.0.2" in conf
    assert json.loads((out / "deployment.json").read_text())["target"] == "ssh"


def test_create_refuses_to_replace_a_deployed_ssh_folder(bp, tmp_path, capsys):
    path = bp(GOOD_HOSTS)
    out = tmp_path / "deployed"
    assert main(["create", path, "-o", str(out)]) == 0
    (out / "ssh").mkdir()
    (out / "ssh" / "state.json").write_text("{}")
    assert main(["create", path, "-o", str(out), "-w"]) == 2
    assert "deployed from it over SSH" in capsys.readouterr().err


def test_site_playbook_parses():
    exe = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
    if not os.access(exe, os.X_OK):
        pytest.skip("ansible-playbook not installed")
    site = os.path.join(paths.ANSIBLE, "site.yml")
    r = subprocess.run([exe, "--syntax-check", "-i", "localhost,", site, "-e", "ctk_phase=stop"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
