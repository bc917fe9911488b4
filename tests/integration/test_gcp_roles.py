"""The gcp target's roles tarball, run as its build VM runs it, in Ansible's check mode, against
a build node of the matching base: ctk's Debian 12 tree with the Python an OS image carries
(python3, python3-apt, python3-venv, python3-packaging), standing in for slurm-gcp's Debian 12
image, which cannot be reached from here. Check mode reports what the install phase would change
and changes nothing; every task must pass, and neither munge nor slurm may be among them.

The pyxis role (NVIDIA's pyxis and enroot, which slurm-gcp's images carry and Debian does not)
runs on the same node: in check mode, and for real up to the checked download of its files.

Needs root, the session store's debian-12 base and an Ansible with community.general, as
test_roles.py does.
"""

from __future__ import annotations

import glob
import os
import shutil
import sys
import tarfile
from pathlib import Path

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import roles_helpers as rh

# tarfile's extraction filters came in Python 3.11.4 (Debian 12 has 3.11.2): where they exist,
# the safe one; the archive is ctk's own either way.
SAFE_EXTRACT = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}

from ctk import paths  # noqa: E402
from ctk.cli import main  # noqa: E402
from ctk.images.store import Store  # noqa: E402

pytestmark = pytest.mark.integration

GCP_JAX = os.path.join(paths.BLUEPRINTS, "gcp-jax.yaml")
# What an OS image ships that a debootstrap minbase tree lacks: Python, and what Ansible's apt
# and pip modules import.
OS_IMAGE_PYTHON = ["python3", "python3-apt", "python3-venv", "python3-packaging", "ca-certificates"]


@pytest.fixture(scope="module")
def node(debian12_base, state, tmp_path_factory):
    if os.geteuid() != 0:
        pytest.fail("needs root (chroot, mount)")
    work = tmp_path_factory.mktemp("ctk-gcp-roles")
    root = rh.copy_rootfs(Path(Store(state).layer_root(debian12_base)), work / "root")
    try:
        with rh.chroot_mounts(root):
            r = rh.chroot_run(root, ["sh", "-c", "apt-get update -qq && DEBIAN_FRONTEND=noninteractive "
                                     "apt-get install -y -qq --no-install-recommends " + " ".join(OS_IMAGE_PYTHON)],
                              timeout=900)
            assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
            # a TLS-inspecting proxy's CA on this host must be trusted in the tree too (https downloads)
            for crt in glob.glob("/usr/local/share/ca-certificates/*.crt"):
                shutil.copy(crt, root / "usr/local/share/ca-certificates")
            r = rh.chroot_run(root, ["update-ca-certificates"])
            assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
            yield root, work
    finally:
        rh.remove_rootfs(root)


@pytest.fixture(scope="module")
def tarball(node):
    _, work = node
    out = work / "dep"
    assert main(["create", GCP_JAX, "-o", str(out)]) == 0
    roles = work / "vm"
    with tarfile.open(out / "gcp" / "ctk-roles.tar.gz") as tar:
        tar.extractall(roles, **SAFE_EXTRACT)
    return roles


@pytest.mark.parametrize("image", ["jax-cpu", "jax-cuda"])
def test_the_tarballs_roles_pass_check_mode_on_a_debian_12_build_node(node, tarball, image):
    root, work = node
    import json
    extra = json.loads((tarball / "images" / f"{image}.json").read_text())
    extra.update(ctk_phase="install",
                 # a TLS-inspecting proxy's CA on this host must be trusted in the tree too
                 common_extra_ca_certs=sorted(glob.glob("/usr/local/share/ca-certificates/*.crt")))
    run = rh.run_playbook(str(tarball / "ansible" / "site.yml"), root, extra,
                          ansible_playbook=rh.find_ansible_playbook(), workdir=work, check=True)
    assert run.returncode == 0 and run.recap is not None and run.recap.failed == 0, run.output[-6000:]
    assert run.recap.changed > 0, "check mode reports the install phase's changes"
    roles_run = {line.split("[", 1)[1].split(" : ", 1)[0] for line in run.output.splitlines()
                 if line.startswith("TASK [") and " : " in line}
    assert roles_run == {"common", "jax"}, roles_run
    assert not (root / "opt" / "ctk" / "jax").exists(), "check mode changed the tree"


# ---- the pyxis role (NVIDIA's pyxis and enroot), on the same Debian 12 node ---------------------

# Stand-ins for NVIDIA's release files, which cannot be reached from here: real files on Debian's
# archive over https. Check mode asks for each (a HEAD request) and downloads nothing.
REACHABLE = "https://deb.debian.org/debian/dists/bookworm/Release"
SOME_SHA = "0" * 63 + "1"


def _pyxis_run(root, work, check, **extra):
    return rh.run_playbook("site.yml", root, {"ctk_phase": "install", "ctk_roles": ["pyxis"], **extra},
                           ansible_playbook=rh.find_ansible_playbook(), workdir=work, check=check)


def test_pyxis_role_without_enroot_or_files_stops_and_says_what_to_give(node):
    root, work = node
    run = _pyxis_run(root, work, check=True)
    assert run.returncode != 0 and run.recap is not None and run.recap.failed == 1, run.output[-4000:]
    assert "enroot is not installed on this node (/usr/bin/enroot)" in run.output
    assert "settings.pyxis.enroot_packages" in run.output and "settings.pyxis.source" in run.output


def test_pyxis_role_passes_check_mode_on_a_debian_12_node_and_changes_nothing(node):
    root, work = node
    run = _pyxis_run(root, work, check=True,
                     pyxis_enroot_packages=[{"url": REACHABLE, "sha256": SOME_SHA}],
                     pyxis_source={"url": REACHABLE, "sha256": SOME_SHA},
                     pyxis_slurm_etc="/usr/local/etc/slurm")
    assert run.returncode == 0 and run.recap is not None and run.recap.failed == 0, run.output[-6000:]
    changed = run.changed_tasks()
    for task in ("pyxis : Install enroot's dependencies (apt)",
                 "pyxis : Download enroot's packages, checked against their sha256",
                 "pyxis : Install pyxis's build tools, and Slurm's headers where the node has none (apt)",
                 "pyxis : Download pyxis's source, checked against its sha256",
                 "pyxis : Write enroot's configuration",
                 "pyxis : Load pyxis in Slurm (plugstack.conf.d/pyxis.conf)",
                 "pyxis : Include the plugstack folder in plugstack.conf"):
        assert task in changed, (task, changed)
    for gone in ("etc/enroot", "usr/local/etc/slurm/plugstack.conf.d", "etc/ctk/pyxis.json"):
        assert not (root / gone).exists(), f"check mode made /{gone}"
    # The one thing check mode makes: the empty download folder the checked downloads ask into.
    downloads = root / "var/cache/ctk/pyxis"
    assert sorted(p.name for p in downloads.iterdir()) == []
    assert downloads.stat().st_mode & 0o777 == 0o700


def test_pyxis_role_refuses_a_file_whose_sha256_differs(node):
    """For real, not in check mode: the downloads are checked before anything is installed, from
    them or by apt."""
    root, work = node
    run = _pyxis_run(root, work, check=False,
                     pyxis_enroot_packages=[{"url": REACHABLE, "sha256": SOME_SHA}],
                     pyxis_source={"url": REACHABLE, "sha256": SOME_SHA})
    assert run.returncode != 0 and run.recap is not None and run.recap.failed == 1, run.output[-4000:]
    assert "TASK [pyxis : Download enroot's packages, checked against their sha256]" in run.output
    assert "did not match " + SOME_SHA in run.output, run.output[-3000:]
    assert "(apt)]" not in run.output, run.output[-3000:]  # no package installed before the check
    assert not (root / "var/cache/ctk/pyxis/Release").exists()
    assert not (root / "etc/enroot/enroot.conf").exists() and not (root / "usr/bin/enroot").exists()
