"""The pyxis role as a blueprint asks for it: which images may have it, the files it installs
where nodes lack NVIDIA's enroot or pyxis (checked at their line), the variables each target
gives the role, and the container runtime jobs then use. Unknown roles are refused at their line."""

from __future__ import annotations

import io
import json
import os
import tarfile

import pytest

from ctk import paths
from ctk.blueprint import BlueprintErrors
from ctk.cli import main
from ctk.jobs.templates import cluster_facts
from ctk.plan import process
from ctk.targets import ssh

SHA = "a" * 64
GOOD_FILES = f"""\
      pyxis:
        enroot_packages:
        - {{url: "https://github.com/NVIDIA/enroot/releases/download/v3.5.0/enroot_3.5.0-1_amd64.deb", sha256: {SHA}}}
        - {{url: "https://github.com/NVIDIA/enroot/releases/download/v3.5.0/enroot+caps_3.5.0-1_amd64.deb", sha256: {SHA}}}
        source: {{url: "https://github.com/NVIDIA/pyxis/archive/refs/tags/v0.20.0.tar.gz", sha256: {SHA}}}
"""

SSH = """\
blueprint_name: pyxis-unit
vars:
  deployment_name: pyxisunit
deployment_groups:
- group: image
  modules:
  - id: node_image
    source: ctk/image
    settings:
      name: nodes
      roles: {roles}
{files}- group: cluster
  modules:
  - id: debug_nodeset
    source: ctk/slurm/nodeset
    use: [node_image]
    settings:
      node_count_static: 1
  - id: debug_partition
    source: ctk/slurm/partition
    use: [debug_nodeset]
    settings:
      partition_name: debug
      is_default: true
  - id: controller
    source: ctk/slurm/controller
    use: [node_image, debug_partition]
  - id: machines
    source: ctk/target/ssh
    settings:
      hosts:
      - {{name: ctl, host: 10.1.0.1, key: id_test, role: controller}}
      - {{name: node-a, host: 10.1.0.2, key: id_test, role: compute}}
"""

WITH_PYXIS = "[common, munge, slurm, pyxis, jax]"


@pytest.fixture
def bp(tmp_path):
    (tmp_path / "id_test").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nx\n-----END OPENSSH PRIVATE KEY-----\n")
    (tmp_path / "id_test").chmod(0o600)
    (tmp_path / "id_test.pub").write_text("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIPublicPart test\n")

    def _bp(roles: str = WITH_PYXIS, files: str = GOOD_FILES, text: str | None = None) -> str:
        p = tmp_path / "bp.yaml"
        p.write_text(text if text is not None else SSH.format(roles=roles, files=files))
        return str(p)
    return _bp


def errors(path: str) -> list[str]:
    with pytest.raises(BlueprintErrors) as e:
        process(path)
    return [f"{x.pos.line}:{x.pos.col} {x.message} | {x.hint}" for x in e.value.errors]


def test_an_unknown_role_is_refused_at_its_place_in_the_list(bp):
    got = errors(bp(roles="[common, munge, slurm, pyxsi, jax]", files=""))
    assert got == ["11:37 image 'nodes': no role 'pyxsi' | did you mean 'pyxis'?"], got


def test_the_ssh_targets_hosts_get_the_files_to_install(bp, tmp_path):
    dep = process(bp()).deployment
    inv = ssh.inventory(dep, str(tmp_path / "ssh"))
    hosts = {n: v for g in inv["all"]["children"].values() for n, v in g["hosts"].items()}
    node = hosts["node-a"]
    assert node["ctk_roles"] == ["common", "munge", "slurm", "pyxis", "jax"]
    assert [f["url"].rsplit("/", 1)[1] for f in node["pyxis_enroot_packages"]] == [
        "enroot_3.5.0-1_amd64.deb", "enroot+caps_3.5.0-1_amd64.deb"]
    assert node["pyxis_source"] == {"url": "https://github.com/NVIDIA/pyxis/archive/refs/tags/v0.20.0.tar.gz",
                                    "sha256": SHA}


def test_jobs_on_nodes_with_the_pyxis_role_use_pyxis_and_others_slurms_own(bp):
    dep = process(bp()).deployment
    assert cluster_facts(dep, None)["container_runtime"] == "pyxis"
    dep = process(bp(roles="[common, munge, slurm, jax]", files="")).deployment
    assert cluster_facts(dep, None)["container_runtime"] == "oci"


@pytest.mark.parametrize("files,want", [
    ("      pyxis: {enroot_packages: [{url: 'http://example.org/e.deb', sha256: " + SHA + "}]}\n",
     ["12:39 pyxis.enroot_packages.0.url: 'http://example.org/e.deb' is not an https URL"]),
    ("      pyxis: {source: {url: 'https://example.org/p.tar.gz', sha256: ABC}}\n",
     ["12:69 pyxis.source.sha256: not a sha256 (64 lower-case hex digits)"]),
    ("      pyxis: {source: {url: 'https://example.org/p.tar.gz'}}\n",
     ["12:23 pyxis.source: a file is {url, sha256}"]),
    ("      pyxis: {enroot_pakages: []}\n",
     ["12:15 pyxis: no key 'enroot_pakages'"]),
    ("      pyxis: {enroot_packages: https://example.org/e.deb}\n",
     ["12:32 pyxis.enroot_packages: a list of {url, sha256}"]),
])
def test_a_bad_file_is_refused_at_its_line_and_column(bp, files, want):
    got = [e.split(" | ")[0] for e in errors(bp(files=files))]
    assert got == want, got


def test_the_files_without_the_role_are_refused(bp):
    got = errors(bp(roles="[common, munge, slurm, jax]"))
    assert got == ["12:7 image 'nodes': the pyxis setting is for the pyxis role, which is not in its roles"
                   " | add pyxis to roles, or leave the setting out"], got


def test_the_lab_refuses_the_pyxis_role_it_has_slurms_own_containers(tmp_path, capsys):
    text = open(os.path.join(paths.BLUEPRINTS, "maxtext-lab.yaml")).read()
    p = tmp_path / "lab.yaml"
    p.write_text(text.replace("roles: [common, munge, slurm, jax]\n      stack: maxtext-cpu\n\n",
                              "roles: [common, munge, slurm, pyxis, jax]\n      stack: maxtext-cpu\n\n", 1))
    assert main(["validate", str(p)]) == 2
    err = capsys.readouterr().err
    assert "the pyxis role is not for the local target" in err and "Traceback" not in err
    # a container image is no node: no pyxis in it, on any target
    p.write_text(text.replace("      roles: [common, munge, slurm, jax]\n\n- group: cluster",
                              "      roles: [common, pyxis, jax]\n\n- group: cluster", 1))
    assert main(["validate", str(p)]) == 2
    assert "container image 'maxtext-cpu': the pyxis role is for nodes" in capsys.readouterr().err


def test_on_google_cloud_the_role_finds_slurm_gcps_configuration_folder(tmp_path, capsys):
    text = open(os.path.join(paths.BLUEPRINTS, "gcp-jax.yaml")).read()
    p = tmp_path / "gcp.yaml"
    p.write_text(text.replace("      name: jax-cuda\n      base: debian-12\n      roles: [common, jax]",
                              "      name: jax-cuda\n      base: debian-12\n      roles: [common, pyxis, jax]", 1))
    out = tmp_path / "dep"
    assert main(["create", str(p), "-o", str(out), "--vars", "project_id=demo-project"]) == 0, capsys.readouterr().err
    with tarfile.open(out / "gcp" / "ctk-roles.tar.gz") as tar:
        got = json.load(io.TextIOWrapper(tar.extractfile("images/jax-cuda.json")))
        assert "ansible/roles/pyxis/tasks/install.yml" in tar.getnames()
    assert got["ctk_roles"] == ["common", "pyxis", "jax"]
    # slurm-gcp's images carry enroot and pyxis: nothing to install, only to configure
    assert (got["pyxis_slurm_etc"], got["pyxis_enroot_packages"], got["pyxis_source"]) == ("/usr/local/etc/slurm", [], {})
    assert cluster_facts(process(str(p), ["project_id=demo-project"]).deployment, None)["container_runtime"] == "pyxis"


