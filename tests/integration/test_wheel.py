"""ctk installs like any Python package: build the wheel, install it into a fresh venv (its
dependencies from the package index), and use it from a folder outside the repository. The
templates, roles, stacks, Packer files, blueprints and verification suites all come from the
installed package, never from this checkout."""

import filecmp
import glob
import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile

import pytest

from conftest import ROOT

pytestmark = pytest.mark.integration
if not shutil.which("git"):
    pytest.skip("git is not installed (the wheel is built from the checkout's files)", allow_module_level=True)

DATA = "toolkit/ctk/data/"


def _git_files() -> list[str]:
    """The checkout's files as git sees them: tracked, plus new ones not ignored."""
    r = subprocess.run(["git", "-C", ROOT, "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                       capture_output=True, text=True, check=True)
    return sorted({f for f in r.stdout.split("\0") if f and os.path.lexists(os.path.join(ROOT, f))})


def _copy_source(dst: str) -> None:
    """Copy the checkout's files (symlinks as symlinks): the build then writes no build/ or
    egg-info into the checkout, and no stale build output can slip into the wheel."""
    for rel in _git_files():
        src, out = os.path.join(ROOT, rel), os.path.join(dst, rel)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        if os.path.islink(src):
            os.symlink(os.readlink(src), out)
        elif os.path.isfile(src):
            shutil.copy2(src, out)


def _run(argv, **kw):
    r = subprocess.run(argv, capture_output=True, text=True, timeout=kw.pop("timeout", 600), **kw)
    assert r.returncode == 0, f"{argv} exited {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The wheel, a fresh venv with it installed, and an environment that knows nothing of the
    checkout (no PYTHONPATH, no CTK_* overrides, the venv's bin first on PATH)."""
    top = tmp_path_factory.mktemp("wheel")
    src, dist, venv = str(top / "src"), str(top / "dist"), str(top / "venv")
    _copy_source(src)
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", dist, src])
    wheel = glob.glob(os.path.join(dist, "ctk-*.whl"))
    assert len(wheel) == 1, os.listdir(dist)
    # A venv of its own (no system site-packages): every dependency is installed from the
    # index, as a user's `pip install` would, so a missing one shows up here.
    _run([sys.executable, "-m", "venv", venv])
    _run([os.path.join(venv, "bin", "python"), "-m", "pip", "install", "-q", wheel[0]])
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV") and not k.startswith("CTK_")}
    env["PATH"] = os.path.join(venv, "bin") + os.pathsep + env.get("PATH", "")
    work = top / "work"  # the user's folder: outside the repository
    work.mkdir()
    shutil.rmtree(src)
    return {"wheel": wheel[0], "venv": venv, "env": env, "cwd": str(work)}


def ctk(installed, *args, check=True):
    exe = os.path.join(installed["venv"], "bin", "ctk")
    r = subprocess.run([exe, *args], capture_output=True, text=True, env=installed["env"], cwd=installed["cwd"],
                       timeout=300)
    if check:
        assert r.returncode == 0, f"ctk {' '.join(args)} exited {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r


@pytest.fixture(scope="module")
def data(installed):
    """ctk.paths as the installed package sees it, and where ctk itself was imported from."""
    code = ("import json, ctk, ctk.paths as p; print(json.dumps({'ctk': ctk.__file__, 'ansible': p.ANSIBLE, "
            "'images': p.IMAGES, 'blueprints': p.BLUEPRINTS, 'sbatch': p.SBATCH, 'verify': p.VERIFY, "
            "'tests_image': p.TESTS_IMAGE, 'ansible_dir': p.ansible_dir()}))")
    r = _run([os.path.join(installed["venv"], "bin", "python"), "-c", code], env=installed["env"],
             cwd=installed["cwd"])
    return json.loads(r.stdout)


def repo_templates() -> set[str]:
    files = glob.glob(os.path.join(ROOT, "sbatch", "*.sbatch.j2"))
    return {os.path.basename(p)[: -len(".sbatch.j2")] for p in files if not os.path.basename(p).startswith("_")}


def test_the_wheel_carries_every_data_file_and_the_verification_suites(installed):
    with zipfile.ZipFile(installed["wheel"]) as z:
        names = set(z.namelist())
    expected = {"ctk/" + f[len("toolkit/ctk/"):] for f in _git_files() if f.startswith(DATA)}
    assert expected and not expected - names, sorted(expected - names)
    for suite in ("conftest.py", "pytest.ini", "test_common.py", "test_munge.py", "test_slurm.py", "test_jax.py",
                  "test_functional.py"):
        assert f"ctk/data/verify/{suite}" in names
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]


def test_ctk_and_its_data_come_from_the_new_venv(installed, data):
    site = glob.glob(os.path.join(installed["venv"], "lib", "python3*", "site-packages"))
    assert len(site) == 1
    site = os.path.realpath(site[0])
    for key, path in data.items():
        assert os.path.realpath(path).startswith(site + os.sep), (key, path)
        assert os.path.exists(path), (key, path)
    assert data["tests_image"] == data["verify"]
    assert os.path.isfile(os.path.join(data["verify"], "test_functional.py"))
    assert os.path.isfile(os.path.join(data["ansible"], "roles", "slurm", "tasks", "main.yml"))
    assert os.path.isfile(os.path.join(data["images"], "stacks.yaml"))
    # Verification runs pytest with testinfra: both are installed with ctk.
    _run([os.path.join(installed["venv"], "bin", "python"), "-c", "import pytest, testinfra"],
         env=installed["env"], cwd=installed["cwd"])


def test_job_templates_lists_every_template(installed, data):
    want = repo_templates()
    assert {"jax-train", "jax-smoke", "array", "container"} <= want
    text = ctk(installed, "job", "templates").stdout
    listed = {line.split(":")[0] for line in text.splitlines() if line and not line.startswith(" ")}
    assert listed == want
    tpls = json.loads(ctk(installed, "job", "templates", "--json").stdout)
    assert {t["name"] for t in tpls} == want
    for t in tpls:
        assert os.path.dirname(t["path"]) == data["sbatch"] and t["params"]


def test_job_render_from_the_installed_templates(installed):
    script = ctk(installed, "job", "render", "jax-smoke", "--nodes", "2").stdout
    sbatch = [line for line in script.splitlines() if line.startswith("#SBATCH ")]
    assert "#SBATCH --nodes=2" in sbatch and len(sbatch) > 1
    assert script.startswith("#!/bin/bash\n")


def test_validate_and_create_with_the_installed_blueprint(installed, data, tmp_path):
    lab = tmp_path / "lab.yaml"
    shutil.copy(os.path.join(data["blueprints"], "lab.yaml"), lab)
    assert ctk(installed, "validate", str(lab)).stdout.strip().endswith("ok (7 modules, 2 partitions, 2 nodesets)")
    dep = tmp_path / "dep"
    ctk(installed, "create", str(lab), "-o", str(dep))
    assert (dep / "deployment.json").is_file()
    assert glob.glob(str(dep / "*" / "slurm" / "slurm.conf"))


def test_create_copies_packer_and_ansible_files_from_the_installed_package(installed, data, tmp_path):
    # Marks in the installed copies (harmless: a comment and an empty file) show where the
    # deployment folder's Packer template and roles came from.
    hcl = os.path.join(data["images"], "gcp.pkr.hcl")
    with open(hcl, "a") as f:
        f.write("# copied from the installed ctk\n")
    mark = os.path.join(data["ansible"], "roles", "common", "installed-ctk-mark")
    open(mark, "w").close()
    bp = tmp_path / "gcp-jax.yaml"
    shutil.copy(os.path.join(data["blueprints"], "gcp-jax.yaml"), bp)
    dep = tmp_path / "dep"
    # The gcp target's images get Packer folders, the roles beside them and in the tarball.
    ctk(installed, "create", str(bp), "-o", str(dep), "--vars", "project_id=demo")
    assert (dep / "gcp" / "packer" / "jax-cpu" / "image.pkr.hcl").read_text() == open(hcl).read()
    assert (dep / "gcp" / "packer" / "ansible" / "roles" / "common" / "installed-ctk-mark").exists()
    cmp = filecmp.dircmp(data["ansible"], dep / "gcp" / "packer" / "ansible")
    assert not cmp.left_only and not cmp.right_only and not cmp.diff_files
    with tarfile.open(dep / "gcp" / "ctk-roles.tar.gz") as tar:
        assert "ansible/roles/common/installed-ctk-mark" in tar.getnames()
