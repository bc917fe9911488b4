"""The gcp target's hand-off to Cluster Toolkit (DIR/gcp): a blueprint gcluster deploys, shaped
like Cluster Toolkit's image-builder example, and the roles tarball it stages. Deploying needs
Google Cloud credentials and does not run here; what is checked instead: the emitted blueprint
validates against Cluster Toolkit's module interfaces, no role that slurm-gcp's images already
bring is applied, the roles in the tarball pass Ansible's syntax check, and `ctk deploy` hands
the exact gcluster command to a stand-in gcluster."""

import json
import os
import stat
import subprocess
import sys
import tarfile

import pytest
import yaml
from test_golden import CASES

from conftest import FIXTURES
from ctk import paths
from ctk.cli import main
from ctk.modules import slurm_gcp

# tarfile's extraction filters came in Python 3.11.4 (Debian 12 has 3.11.2): where they exist,
# the safe one; the archive is ctk's own either way.
SAFE_EXTRACT = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}

GCP_JAX = os.path.join(paths.BLUEPRINTS, "gcp-jax.yaml")
VARS = "project_id=demo-project,deployment_name=demo"
# Blueprints whose deployment folder gets gcp/, with the arguments `ctk create` needs (the golden
# cases', for those that have one).
HANDOFFS = {
    "gcp-jax": CASES["gcp-jax"],
    "gcp-a3ultra": CASES["gcp-a3ultra"],
    "ct-ml-slurm": CASES["ct-ml-slurm"],
    "ct-image-builder": (f"{FIXTURES}/examples/image-builder.yaml", ["--vars", VARS]),
    "ct-a3mega": CASES["ct-a3mega"],
    "ct-a3ultra": CASES["ct-a3ultra"],
}
NEVER_ON_SLURM_GCP = {"munge", "slurm", "nvidia_driver", "cuda"}


def params():
    return [pytest.param(c, marks=pytest.mark.ct_fixtures) if c.startswith("ct-") else c for c in HANDOFFS]


def create(case, out, capsys):
    bp, args = HANDOFFS[case]
    rc = main(["create", bp, "-o", str(out), *args])
    assert rc == 0, capsys.readouterr().err
    return out / "gcp"


def members(gcp) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(gcp / "ctk-roles.tar.gz") as tar:
        return {m.name: m for m in tar.getmembers()}


def image_vars(gcp) -> dict[str, dict]:
    out = {}
    with tarfile.open(gcp / "ctk-roles.tar.gz") as tar:
        for m in tar.getmembers():
            if m.name.startswith("images/") and m.name.endswith(".json"):
                out[m.name[len("images/"):-len(".json")]] = json.load(tar.extractfile(m))
    return out


def runners(bp: dict) -> list[dict]:
    """Every runner written out (a runner may also be an expression, another module's output)."""
    return [r for g in bp["deployment_groups"] for m in g["modules"]
            for r in (m.get("settings") or {}).get("runners") or [] if isinstance(r, dict)]


@pytest.mark.parametrize("case", params())
def test_the_emitted_blueprint_validates_against_cluster_toolkits_modules(case, tmp_path, capsys):
    gcp = create(case, tmp_path / "dep", capsys)
    capsys.readouterr()
    rc = main(["validate", str(gcp / "blueprint.yaml"), "--vars", "project_id=demo-project", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["ok"] is True, out


@pytest.mark.parametrize("case", params())
def test_no_role_a_slurm_gcp_image_brings_is_applied(case, tmp_path, capsys):
    gcp = create(case, tmp_path / "dep", capsys)
    images = image_vars(gcp)
    assert images, "the tarball holds no image's variables"
    for name, v in images.items():
        assert "common" in v["ctk_roles"] and not NEVER_ON_SLURM_GCP & set(v["ctk_roles"]), (name, v["ctk_roles"])
    bp = yaml.safe_load((gcp / "blueprint.yaml").read_text())
    scripts = [r for r in runners(bp) if r.get("destination", "").startswith("ctk-image-")]
    # every image's roles run once, from the startup script its build uses
    assert sorted(r["destination"] for r in scripts) == sorted(f"ctk-image-{n}.sh" for n in images)
    for r in scripts:
        assert "ansible-playbook" in r["content"] and "ctk_phase=install" in r["content"]
    staged = [r for r in runners(bp) if r.get("source") == '$(ghpc_stage("ctk-roles.tar.gz"))']
    assert len(staged) == len(images)


def test_the_gcp_jax_blueprint_is_shaped_like_cluster_toolkits_image_builder(tmp_path, capsys):
    gcp = create("gcp-jax", tmp_path / "dep", capsys)
    assert sorted(os.listdir(gcp)) == ["README.md", "blueprint.yaml", "cluster-only.yaml", "ctk-roles.tar.gz", "packer"]
    # slurm-gcp writes slurm.conf on Google Cloud: ctk renders none for the gcp target
    assert not (tmp_path / "dep" / "cluster" / "slurm").exists()
    text = (gcp / "blueprint.yaml").read_text()
    bp = yaml.safe_load(text)
    groups = [g["group"] for g in bp["deployment_groups"]]
    assert groups == ["primary", "packer_jax_cpu", "packer_jax_cuda", "cluster"]
    primary = {m["id"]: m["source"] for m in bp["deployment_groups"][0]["modules"]}
    assert primary == {"network": "modules/network/vpc", "ctk_gpunets": "modules/network/multivpc",
                       "jax_cpu_script": "modules/scripts/startup-script",
                       "jax_cuda_script": "modules/scripts/startup-script"}
    for g in bp["deployment_groups"][1:3]:
        [m] = g["modules"]  # Cluster Toolkit allows one Packer module per group
        s = m["settings"]
        assert m["source"] == "modules/packer/custom-image" and m["kind"] == "packer"
        assert s["source_image_project_id"] == ["schedmd-slurm-public"]
        assert s["source_image_family"] == "slurm-gcp-6-12-debian-12"
        assert m["use"] == ["network", m["id"].replace("_build", "_script")]
    cluster = bp["deployment_groups"][3]["modules"]
    booting = [m for m in cluster if "instance_image" in m["settings"]]
    assert len(booting) == 4  # two nodesets, the login group, the controller
    for m in booting:
        s = m["settings"]
        assert s["instance_image_custom"] is True and s["allow_automatic_updates"] is False, m["id"]
        assert s["instance_image"] in ("$(vars.jax_cpu_image)", "$(vars.jax_cuda_image)"), m["id"]
    by_id = {m["id"]: m for m in cluster}
    assert by_id["a3mega_nodeset"]["settings"]["machine_type"] == "a3-megagpu-8g"
    assert by_id["a3mega_nodeset"]["settings"]["instance_image"] == "$(vars.jax_cuda_image)"
    assert by_id["a3mega_partition"]["settings"]["partition_conf"] == {"MaxTime": "2-00:00:00"}
    assert by_id["cpu_partition"]["settings"] == {"partition_name": "cpu", "is_default": True, "exclusive": False}
    assert by_id["controller"]["use"] == ["network", "cpu_partition", "a3mega_partition", "login"]
    assert bp["vars"]["jax_cuda_image"] == {"family": "jax-cuda", "project": "$(vars.project_id)"}
    images = image_vars(gcp)
    assert images["jax-cuda"]["jax_stack"] == "jax-cuda12-0.10"
    assert list(images["jax-cuda"]["jax_stack_locks"]) == ["3.11"]  # slurm-gcp's Debian 12: Python 3.11


@pytest.mark.ct_fixtures
def test_a_cluster_toolkit_image_build_is_kept_and_ctks_roles_run_after_it(tmp_path, capsys):
    gcp = create("ct-ml-slurm", tmp_path / "dep", capsys)
    bp = yaml.safe_load((gcp / "blueprint.yaml").read_text())
    original = yaml.safe_load(open(HANDOFFS["ct-ml-slurm"][0]))
    script = next(m for g in bp["deployment_groups"] for m in g["modules"] if m["id"] == "script")
    before = next(m for g in original["deployment_groups"] for m in g["modules"] if m["id"] == "script")
    n = len(before["settings"]["runners"])
    # its own runners first and unchanged, then ctk's two
    assert script["settings"]["runners"][:n] == before["settings"]["runners"]
    assert [r["type"] for r in script["settings"]["runners"][n:]] == ["data", "shell"]
    # every other module as written; the vars given to ctk are carried
    for g, g0 in zip(bp["deployment_groups"], original["deployment_groups"]):
        for m, m0 in zip(g["modules"], g0["modules"]):
            if m["id"] != "script":
                assert m == m0, m["id"]
    assert bp["vars"]["project_id"] == "demo-project" and bp["vars"]["deployment_name"] == "demo"


def test_the_roles_tarball_is_reproducible_and_holds_the_roles(tmp_path, capsys):
    a = create("gcp-jax", tmp_path / "a", capsys)
    b = create("gcp-jax", tmp_path / "b", capsys)
    assert (a / "ctk-roles.tar.gz").read_bytes() == (b / "ctk-roles.tar.gz").read_bytes()
    m = members(a)
    assert all(x.mtime == 0 and x.uid == 0 and x.gid == 0 and not x.uname for x in m.values())
    assert list(m) == sorted(m)
    files = set()
    for dirpath, dirs, names in os.walk(paths.ansible_dir()):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        rel = os.path.relpath(dirpath, paths.ansible_dir())
        files |= {os.path.normpath(os.path.join("ansible", rel, n)) for n in names if not n.endswith(".pyc")}
    assert {n for n, x in m.items() if x.isfile() and n.startswith("ansible/")} == files
    with tarfile.open(a / "ctk-roles.tar.gz") as tar:
        site = tar.extractfile("ansible/site.yml").read()
    assert site == open(os.path.join(paths.ansible_dir(), "site.yml"), "rb").read()


def test_the_roles_in_the_tarball_pass_ansibles_syntax_check(tmp_path, capsys):
    gcp = create("gcp-jax", tmp_path / "dep", capsys)
    root = tmp_path / "vm"
    with tarfile.open(gcp / "ctk-roles.tar.gz") as tar:
        tar.extractall(root, **SAFE_EXTRACT)
    playbook = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
    for image in ("jax-cpu", "jax-cuda"):
        r = subprocess.run([playbook, "--syntax-check", "-i", "localhost,", "-c", "local", str(root / "ansible" / "site.yml"),
                            "-e", f"@{root / 'images' / (image + '.json')}", "-e", "ctk_phase=install"],
                           capture_output=True, text=True, env={**os.environ, "ANSIBLE_NOCOLOR": "1"})
        assert r.returncode == 0, r.stdout + r.stderr
        assert "playbook: " in r.stdout


def test_the_facts_table_maps_bases_to_slurm_gcp_families():
    assert slurm_gcp.family_for("debian-12").family == "slurm-gcp-6-12-debian-12"
    assert slurm_gcp.family_for("rocky-9").family == "slurm-gcp-6-12-hpc-rocky-linux-9"
    assert slurm_gcp.family_for("ubuntu-22.04").family == "slurm-gcp-6-12-ubuntu-2204-lts-nvidia-570"
    assert slurm_gcp.family_for("debian-13") is None
    assert slurm_gcp.slurm_of("6.12") == slurm_gcp.slurm_of("6.12.1") == "25.11.4"
    assert slurm_gcp.slurm_of("6.11.0") == "25.11.2" and slurm_gcp.slurm_of("6.10.7") == "25.05.2"


# ---- what validate refuses on the gcp target ----------------------------------------------

def variant(tmp_path, *subs) -> str:
    text = open(GCP_JAX).read()
    for old, new in subs:
        assert old in text, old
        text = text.replace(old, new, 1)
    p = tmp_path / "bp.yaml"
    p.write_text(text)
    return str(p)


def line_of(path, needle, nth=1) -> int:
    hits = [i for i, ln in enumerate(open(path).read().splitlines(), 1) if needle in ln]
    return hits[nth - 1]


def validate(path, capsys):
    rc = main(["validate", path, "--json"])
    return rc, json.loads(capsys.readouterr().out)


def test_a_base_without_a_slurm_gcp_family_is_refused_with_the_list(tmp_path, capsys):
    bp = variant(tmp_path, ("base: debian-12", "base: debian-13"), ("stack: jax-cpu-0.10", "stack: jax-cpu"))
    rc, out = validate(bp, capsys)
    assert rc == 2
    [err] = [e for e in out["errors"] if "slurm-gcp" in e["message"]]
    assert err["line"] == line_of(bp, "base: debian-13") and "debian-13" in err["message"]
    for base, fam in slurm_gcp.FAMILIES.items():
        assert f"{base} ({fam.family})" in err["hint"]


def test_munge_and_slurm_asked_for_on_a_slurm_gcp_image_are_refused(tmp_path, capsys):
    bp = variant(tmp_path, ("roles: [common, jax]", "roles: [common, munge, slurm, jax]"))
    rc, out = validate(bp, capsys)
    assert rc == 2
    [err] = out["errors"]
    assert err["line"] == line_of(bp, "roles: [common, munge, slurm, jax]")
    assert "slurm-gcp-6-12-debian-12 already brings" in err["message"] and "munge, slurm" in err["hint"]


def test_the_default_roles_leave_out_what_the_image_brings(tmp_path, capsys):
    bp = variant(tmp_path, ("      roles: [common, jax]\n", ""))
    capsys.readouterr()
    assert main(["show", bp, "--json"]) == 0
    dep = json.loads(capsys.readouterr().out)
    assert [i["roles"] for i in dep["images"]] == [["common", "jax"], ["common", "jax"]]


def test_a_cuda13_stack_on_a_family_with_an_older_driver_is_refused(tmp_path, capsys):
    bp = variant(tmp_path, ("base: debian-12\n      roles: [common, jax]\n      stack: jax-cuda12-0.10",
                            "base: ubuntu-24.04\n      roles: [common, jax]\n      stack: jax-cuda13"))
    rc, out = validate(bp, capsys)
    assert rc == 2
    [err] = out["errors"]
    assert err["line"] == line_of(bp, "stack: jax-cuda13")
    assert "needs NVIDIA driver >= 580" in err["message"]
    assert "gets driver 570 from slurm-gcp-6-12-ubuntu-2404-lts-nvidia-570" in err["message"]
    assert "jax-cuda12" in err["hint"]


def test_one_target_per_blueprint(tmp_path, capsys):
    bp = variant(tmp_path, ("  - id: gcp\n    source: ctk/target/gcp\n",
                            "  - id: gcp\n    source: ctk/target/gcp\n  - id: gcp2\n    source: ctk/target/gcp\n"))
    rc, out = validate(bp, capsys)
    assert rc == 2 and any(e["message"] == "a blueprint has one gcp target module" for e in out["errors"])


# ---- ctk deploy / destroy ------------------------------------------------------------------

def test_deploy_without_gcluster_prints_the_commands(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    out = tmp_path / "dep"
    assert main(["deploy", GCP_JAX, "-o", str(out), "--json"]) == 0
    rec = json.loads(capsys.readouterr().out)
    assert rec["ran"] is False
    assert rec["commands"] == [f"gcluster deploy {out}/gcp/blueprint.yaml --vars project_id=YOUR_PROJECT "
                               f"-o {out}/gcp --auto-approve"]
    assert (out / "gcp" / "blueprint.yaml").exists()


def stand_in_gcluster(tmp_path) -> str:
    """A stand-in for gcluster (Google Cloud is not reachable here): it records its arguments."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tool = bin_dir / "gcluster"
    tool.write_text(f"#!/bin/sh\necho \"$@\" >> {tmp_path}/gcluster.log\n")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    return str(bin_dir)


def test_deploy_runs_gcluster_on_the_folder_with_a_stand_in_gcluster(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", stand_in_gcluster(tmp_path) + os.pathsep + os.environ["PATH"])
    out = tmp_path / "dep"
    assert main(["deploy", GCP_JAX, "-o", str(out), "--vars", "project_id=p1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ran"] is True
    log = (tmp_path / "gcluster.log").read_text().splitlines()
    assert log == [f"deploy {out}/gcp/blueprint.yaml -o {out}/gcp --auto-approve"]
    bp = yaml.safe_load((out / "gcp" / "blueprint.yaml").read_text())
    assert bp["vars"]["project_id"] == "p1"
    (out / "gcp" / "gcpjax").mkdir()  # what gcluster deploy leaves
    assert main(["destroy", str(out)]) == 0
    assert (tmp_path / "gcluster.log").read_text().splitlines()[1] == f"destroy {out}/gcp/gcpjax --auto-approve"


def test_deploy_with_gcluster_but_no_project_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", stand_in_gcluster(tmp_path) + os.pathsep + os.environ["PATH"])
    rc = main(["deploy", GCP_JAX, "-o", str(tmp_path / "dep")])
    assert rc == 2 and "project_id" in capsys.readouterr().err
    assert not (tmp_path / "gcluster.log").exists()


def test_image_build_of_a_gcp_blueprint_is_refused(capsys):
    assert main(["image", "build", GCP_JAX]) == 2
    err = capsys.readouterr().err
    assert "built on Google Cloud" in err and "gcluster deploy" in err


# ---- the other way: Packer folders and a cluster-only blueprint ---------------------------

def test_the_packer_folders_pass_a_full_packer_validate(tmp_path, capsys):
    """`packer validate` without -syntax-only: the googlecompute builder's and the Ansible
    provisioner's own checks, offline. Debian's Packer (1.6.6) cannot read versions.pkr.hcl's
    required_plugins, so packer_validate checks a copy without it there. Packer is installed by
    `make test` (SYS_PKGS): a missing one fails this test."""
    from ctk.targets.folder import packer_validate, packer_version
    assert packer_version() is not None, "packer is not on PATH (make test installs it)"
    out = tmp_path / "dep"
    assert main(["create", GCP_JAX, "-o", str(out), "--vars", "project_id=demo-project"]) == 0
    for image in ("jax-cpu", "jax-cuda"):
        r = packer_validate(str(out / "gcp" / "packer" / image), full=True)
        assert r.returncode == 0, r.stdout + r.stderr
    # the check can fail: without the roles the provisioner's playbook is not there
    os.rename(out / "gcp" / "packer" / "ansible", out / "gcp" / "packer" / "moved")
    r = packer_validate(str(out / "gcp" / "packer" / "jax-cpu"), full=True)
    assert r.returncode != 0 and "site.yml" in r.stdout + r.stderr


def test_the_packer_template_follows_cluster_toolkits_custom_image(tmp_path, capsys):
    out = tmp_path / "dep"
    assert main(["create", GCP_JAX, "-o", str(out)]) == 0
    folder = out / "gcp" / "packer" / "jax-cpu"
    hcl = (folder / "image.pkr.hcl").read_text()
    assert "use_iap                 = var.use_iap" in hcl and "userdel -r ${var.ssh_username}" in hcl
    assert "image_labels            = local.labels" in hcl and "labels                  = local.labels" in hcl
    versions = (folder / "versions.pkr.hcl").read_text()
    assert 'required_version = ">= 1.15.3, < 2.0.0"' in versions and "github.com/hashicorp/googlecompute" in versions


def test_the_cluster_only_blueprint_boots_the_images_the_packer_folders_build(tmp_path, capsys):
    out = tmp_path / "dep"
    assert main(["create", GCP_JAX, "-o", str(out)]) == 0
    bp = yaml.safe_load((out / "gcp" / "cluster-only.yaml").read_text())
    assert [g["group"] for g in bp["deployment_groups"]] == ["primary", "cluster"]
    assert [m["id"] for m in bp["deployment_groups"][0]["modules"]] == ["network", "ctk_gpunets"]  # the A3 Mega's
    for image, var in (("jax-cpu", "jax_cpu_image"), ("jax-cuda", "jax_cuda_image")):
        pk = json.loads((out / "gcp" / "packer" / image / "image.auto.pkrvars.json").read_text())
        assert bp["vars"][var] == {"name": pk["image_name"], "project": "$(vars.project_id)"}
        assert pk["image_name"].startswith(image + "-") and len(pk["image_name"]) == len(image) + 13
    assert bp["vars"]["jax_cpu_image"]["name"] != bp["vars"]["jax_cuda_image"]["name"]
    capsys.readouterr()
    rc = main(["validate", str(out / "gcp" / "cluster-only.yaml"), "--vars", "project_id=p", "--json"])
    assert rc == 0, capsys.readouterr().out


def test_create_says_when_packer_could_not_check_the_folders(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert main(["create", GCP_JAX, "-o", str(tmp_path / "dep")]) == 0
    err = capsys.readouterr().err
    assert "packer is not on PATH, so gcp/packer/*/ were not checked" in err


def test_every_golden_hand_off_is_checked_here():
    """Each golden deployment folder with a gcp/ is one of HANDOFFS, so the checks above (it
    validates; no role a slurm-gcp image brings) run over every golden hand-off."""
    golden = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "golden")
    with_gcp = {d for d in os.listdir(golden) if os.path.isdir(os.path.join(golden, d, "gcp"))}
    assert with_gcp and with_gcp <= set(HANDOFFS), with_gcp - set(HANDOFFS)
    assert {"gcp-jax", "ct-ml-slurm", "ct-a3mega"} <= with_gcp


def test_dcgm_on_a_slurm_gcp_image_needs_no_driver_role(tmp_path, capsys):
    """slurm-gcp's images carry the driver: dcgm, an accelerator role, goes on them as it is."""
    bp = variant(tmp_path, ("base: debian-12\n      roles: [common, jax]\n      stack: jax-cuda12-0.10",
                            "base: debian-12\n      roles: [common, dcgm, jax]\n      stack: jax-cuda12-0.10"))
    rc, out = validate(bp, capsys)
    assert rc == 0, out
    out_dir = tmp_path / "dep"
    assert main(["create", bp, "-o", str(out_dir)]) == 0
    assert image_vars(out_dir / "gcp")["jax-cuda"]["ctk_roles"] == ["common", "dcgm", "jax"]


def test_show_reports_what_the_hand_off_leaves_out(tmp_path, capsys):
    bp = variant(tmp_path, ("  - id: gcp\n    source: ctk/target/gcp\n",
                            "  - id: gcp\n    source: ctk/target/gcp\n"
                            "  - id: homefs\n    source: ctk/storage/shared-fs\n    settings: {local_mount: /home}\n"))
    capsys.readouterr()
    assert main(["show", bp]) == 0
    out = capsys.readouterr().out
    assert "Not in the gcp hand-off" in out and "homefs" in out and "ctk/target/gcp" not in out
    assert main(["show", GCP_JAX]) == 0
    assert "Not in the gcp hand-off" not in capsys.readouterr().out


def test_every_vm_boots_an_image_and_the_cluster_has_a_controller(tmp_path, capsys):
    """On Google Cloud each VM boots one of the blueprint's images: a module that names none where
    there are two, or no controller at all, is refused at its line (the hand-off would carry an
    empty instance_image that gcluster refuses)."""
    bp = variant(tmp_path, ("use: [cpu_image, cpu_partition, a3mega_partition, login]",
                            "use: [cpu_partition, a3mega_partition, login]"))
    rc, out = validate(bp, capsys)
    assert rc == 2
    [err] = out["errors"]
    assert err["message"] == ("module 'controller' boots no image: on Google Cloud each VM boots one of the "
                              "blueprint's images, and it has 2 (jax-cpu, jax-cuda)")
    assert err["line"] == line_of(bp, "- id: controller")
    assert err["hint"] == "add one of the image modules cpu_image, gpu_image to its use"
    text = open(GCP_JAX).read()
    no_controller = tmp_path / "noctl.yaml"
    no_controller.write_text(text[:text.index("  - id: controller\n")])
    rc, out = validate(str(no_controller), capsys)
    assert rc == 2
    [err] = out["errors"]
    assert "the gcp target needs a controller" in err["message"]
    assert err["line"] == line_of(str(no_controller), "source: ctk/target/gcp")


def test_a_gpu_nodeset_of_a_blueprint_without_images_is_refused(tmp_path, capsys):
    """Without a ctk image the VMs would boot Cluster Toolkit's default (slurm-gcp's Rocky Linux
    8, driver 550, no apt): fine for CPU nodes, not for GPU ones ctk sets networks and drivers
    up for."""
    text = open(GCP_JAX).read()
    cluster = text[text.index("- group: cluster\n"):].replace("    use: [cpu_image]\n", "").replace(
        "    use: [gpu_image]\n", "").replace("use: [cpu_image, cpu_partition", "use: [cpu_partition")
    bp = tmp_path / "noimages.yaml"
    bp.write_text(text[:text.index("- group: image\n")] + cluster)
    rc, out = validate(str(bp), capsys)
    assert rc == 2
    [err] = out["errors"]
    assert err["message"].startswith("nodeset module 'a3mega_nodeset' has GPUs and the blueprint no image")
    assert err["line"] == line_of(str(bp), "- id: a3mega_nodeset")
