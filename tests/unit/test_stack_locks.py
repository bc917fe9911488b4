"""Locked stacks: every shipped stack has a lock per Python it lists, in step with its pins;
images pick the lock for their base's Python; a stack that needs a newer Python than the base
is refused at the blueprint line; `ctk stack list / lock` (the parts that need no network)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ctk import paths
from ctk.cli import main
from ctk.errors import UserError
from ctk.images.build import plan_layers
from ctk.model import BASE_PYTHON, ImageSpec
from ctk.plan import process
from ctk.stacks import (
    image_lock,
    load_stacks,
    lock_problems,
    lock_state,
    pip_target_args,
    read_lock,
)
from ctk.stacks.catalog import normalize
from ctk.stacks.commands import check_locks
from ctk.stacks.lock import LOCK_PLATFORM, lock_path, parse_header, parse_versions

REPO = Path(__file__).resolve().parents[2]
CATALOG = Path(paths.IMAGES) / "stacks.yaml"


@pytest.fixture
def catalog_copy(tmp_path) -> Path:
    """A copy of the shipped catalog and its locks, to edit."""
    shutil.copy(CATALOG, tmp_path / "stacks.yaml")
    shutil.copytree(CATALOG.parent / "locks", tmp_path / "locks")
    return tmp_path / "stacks.yaml"


# ---------------------------------------------------------------- the shipped locks

def test_every_stack_is_locked_for_every_python_it_lists_at_its_pins():
    """Fails when a pin is edited and the stack not relocked (run `ctk stack lock NAME`)."""
    for stack in load_stacks().values():
        for py in stack.pythons:
            lock = read_lock(stack, py)  # raises if the file is missing
            assert lock.path == CATALOG.parent / "locks" / stack.name / f"py{py}.txt"
            versions = parse_versions(lock.text)
            for name, version in stack.pins.items():
                assert versions.get(normalize(name)) == version, \
                    f"{lock.path}: {name} is locked at {versions.get(normalize(name))}, pinned to {version}: " \
                    f"run `ctk stack lock {stack.name} --python {py}`"
            assert parse_header(lock.text) == {"stack": stack.name, "python": py, "platform": LOCK_PLATFORM,
                                               "exclude-newer": stack.exclude_newer}
            assert lock_problems(stack, lock) == [] and lock_state(stack, py) == "ok"
    assert check_locks() == []


def test_every_locked_package_has_hashes_and_one_exact_version():
    for stack in load_stacks().values():
        for py in stack.pythons:
            text = read_lock(stack, py).text
            reqs = [ln for ln in text.splitlines() if ln and not ln.startswith(("#", " "))]
            assert len(reqs) == len(parse_versions(text)) >= len(stack.pins)
            # Each requirement is followed by its hashes (pip --require-hashes needs every one).
            lines = text.splitlines()
            for i, ln in enumerate(lines):
                if ln in reqs:
                    assert ln.endswith(" \\") and lines[i + 1].strip().startswith("--hash=sha256:"), ln


def test_the_lock_closure_holds_what_jax_needs():
    versions = parse_versions(read_lock(load_stacks()["jax-cpu"], "3.13").text)
    assert {"jax", "jaxlib", "numpy", "scipy", "ml-dtypes", "opt-einsum"} <= set(versions)
    cuda = parse_versions(read_lock(load_stacks()["jax-cuda13"], "3.13").text)
    assert cuda["jax-cuda13-plugin"] == cuda["jax-cuda13-pjrt"] == "0.12.0.1"
    assert any(n.startswith("nvidia-") for n in cuda)  # [with-cuda]: the CUDA libraries as wheels
    tpu = parse_versions(read_lock(load_stacks()["jax-tpu-0.10"], "3.11").text)
    assert tpu["libtpu"] == "0.0.42.1"


def test_a_changed_pin_makes_its_lock_stale(catalog_copy):
    text = catalog_copy.read_text()
    catalog_copy.write_text(text.replace('chex: "0.1.92"', 'chex: "0.1.91"', 1))  # the first stack
    stacks = load_stacks(catalog_copy)
    first = next(iter(stacks.values()))
    for py in first.pythons:
        assert lock_state(first, py) == "stale"
        assert "chex is pinned to 0.1.91 but locked at 0.1.92" in lock_problems(first, read_lock(first, py))
    os.unlink(lock_path(first, first.pythons[0]))
    assert lock_state(first, first.pythons[0]) == "missing"


def test_locks_live_beside_the_catalog_they_belong_to(catalog_copy):
    s = load_stacks(catalog_copy)["jax-cpu-0.10"]
    assert lock_path(s, "3.11") == catalog_copy.parent / "locks" / "jax-cpu-0.10" / "py3.11.txt"
    assert lock_path(s, "3.11", "/elsewhere") == Path("/elsewhere/jax-cpu-0.10/py3.11.txt")


def test_pip_downloads_the_wheels_a_lock_was_made_for():
    args = pip_target_args("3.13")
    assert args[:4] == ["--python-version", "3.13", "--implementation", "cp"]
    plats = [args[i + 1] for i, a in enumerate(args) if a == "--platform"]
    # Every manylinux glibc up to the lock's, as pip takes each --platform literally.
    assert plats[0] == "manylinux_2_31_x86_64" and "manylinux_2_27_x86_64" in plats
    assert "manylinux2014_x86_64" in plats and "manylinux_2_32_x86_64" not in plats


# ---------------------------------------------------------------- images and their locks

def _spec(base="debian-12", stack="jax-cpu-0.10", roles=("common", "munge", "slurm", "jax")):
    return ImageSpec(name="img", module_id="img", base=base, stack=stack, roles=list(roles))


def test_an_image_installs_its_stacks_lock_for_its_base_python():
    stacks = load_stacks()
    assert image_lock(_spec(), stacks["jax-cpu-0.10"]).python == "3.11"
    assert image_lock(_spec("debian-13", "jax-cpu"), stacks["jax-cpu"]).python == "3.13"
    assert image_lock(_spec("ubuntu-24.04", "jax-cuda12"), stacks["jax-cuda12"]).python == "3.12"
    assert image_lock(_spec(roles=("common", "munge")), stacks["jax-cpu"]) is None  # no jax role


def test_an_image_whose_stack_has_no_lock_names_the_command(catalog_copy):
    stack = load_stacks(catalog_copy)["jax-cpu-0.10"]
    os.unlink(lock_path(stack, "3.11"))
    with pytest.raises(UserError) as e:
        image_lock(_spec(), stack)
    assert "stack jax-cpu-0.10 has no lock for Python 3.11" in e.value.message
    assert "ctk stack lock jax-cpu-0.10 --python 3.11" in e.value.hint


def test_an_image_whose_stacks_lock_is_out_of_date_names_the_command(catalog_copy):
    catalog_copy.write_text(catalog_copy.read_text().replace('flax: "0.12.8"', 'flax: "0.12.7"'))
    with pytest.raises(UserError) as e:
        image_lock(_spec(), load_stacks(catalog_copy)["jax-cpu-0.10"])
    assert e.value.message.startswith("stack jax-cpu-0.10: its lock for Python 3.11 (")
    assert e.value.message.endswith("is out of date: flax is pinned to 0.12.7 but locked at 0.12.8")
    assert e.value.hint == "remake it: ctk stack lock jax-cpu-0.10 --python 3.11"


def test_an_image_whose_stack_needs_a_newer_python_is_refused():
    with pytest.raises(UserError) as e:
        image_lock(_spec(stack="jax-cpu"), load_stacks()["jax-cpu"])
    assert e.value.message == ("image 'img': stack jax-cpu (jax 0.12.0.1) needs Python >= 3.12; "
                               "base debian-12 has Python 3.11")


def test_an_image_build_without_the_lock_stops_before_any_work(catalog_copy, tmp_path, monkeypatch, capsys):
    """`ctk image build` of a blueprint whose stack has no lock for its base's Python: exit 2,
    naming the stack and the command, and nothing built (not even the base)."""
    os.unlink(catalog_copy.parent / "locks" / "jax-cpu" / "py3.13.txt")
    monkeypatch.setenv("CTK_STACKS", str(catalog_copy))
    monkeypatch.setenv("CTK_STATE_DIR", str(tmp_path / "state"))
    assert main(["image", "build", os.path.join(paths.BLUEPRINTS, "lab.yaml")]) == 2
    err = capsys.readouterr().err
    assert "error: stack jax-cpu has no lock for Python 3.13" in err
    assert "hint: make it: ctk stack lock jax-cpu --python 3.13" in err
    assert os.listdir(tmp_path / "state" / "layers") == []


def test_the_jax_layer_key_follows_the_lock_text(catalog_copy):
    stack = load_stacks(catalog_copy)["jax-cpu-0.10"]
    before = plan_layers(_spec(), "base-0", stack)
    path = lock_path(stack, "3.11")
    text = path.read_text()
    first_hash = text.index("--hash=sha256:") + len("--hash=sha256:")
    path.write_text(text[:first_hash] + "0" * 64 + text[first_hash + 64:])
    after = plan_layers(_spec(), "base-0", stack)
    assert [lp.key for lp in after[:-1]] == [lp.key for lp in before[:-1]]
    assert after[-1].role == "jax" and after[-1].key != before[-1].key
    assert after[-1].variables["jax_stack_locks"] == {"3.11": path.read_text()}


def test_a_stack_locked_with_transformer_engine_holds_its_wheels_and_names_its_source():
    """The stack and Transformer Engine as one closure: the stack's pins, TE's two wheels at its
    release, what its JAX extension needs to build; the extension itself as a source with its
    sha256 in the header (PyPI has no wheel of it). An image that asks for TE installs this lock,
    and the jax role is told what to build."""
    from ctk.stacks import te
    stack = load_stacks()["jax-cuda12"]
    spec = ImageSpec(name="img", module_id="img", base="debian-13", stack="jax-cuda12",
                     roles=["common", "nvidia_driver", "cuda", "jax"], transformer_engine="2.20.2")
    lock = image_lock(spec, stack)
    assert lock.path == CATALOG.parent / "locks" / "jax-cuda12" / "py3.13-te2.20.2.txt" and lock.te == "2.20.2"
    v = lock.versions
    assert v["transformer-engine"] == v["transformer-engine-cu12"] == "2.20.2"
    assert {"pybind11", "setuptools", "nvidia-cudnn-frontend", "nvidia-cudnn-cu12", "nvidia-nccl-cu12"} <= set(v)
    assert te.SOURCE_DIST not in v  # built, not downloaded as a wheel
    plain = read_lock(stack, "3.13").versions
    assert {k: v[k] for k in plain} == plain  # the stack's closure is not moved by adding TE
    [src] = lock.sources
    assert src.startswith("transformer-engine-jax==2.20.2 --hash=sha256:") and len(src.split(":")[-1]) == 64
    assert parse_header(lock.text)["transformer-engine"] == "2.20.2"
    [jax_layer] = [lp for lp in plan_layers(spec, "base-0", stack) if lp.role == "jax"]
    assert jax_layer.variables["jax_transformer_engine"] == {"version": "2.20.2", "sources": {"3.13": src}}
    without = plan_layers(ImageSpec(**{**vars(spec), "transformer_engine": None}), "base-0", stack)
    assert without[-1].key != jax_layer.key and "jax_transformer_engine" not in without[-1].variables


def test_a_transformer_engine_lock_that_lost_its_source_is_stale(catalog_copy):
    stack = load_stacks(catalog_copy)["jax-cuda12"]
    path = lock_path(stack, "3.13", te="2.20.2")
    path.write_text("".join(ln for ln in path.read_text().splitlines(True) if not ln.startswith("# source:")))
    assert lock_state(stack, "3.13", "2.20.2") == "stale"
    assert lock_problems(stack, read_lock(stack, "3.13", "2.20.2")) == [
        "the lock names no source of transformer-engine-jax 2.20.2"]


def test_the_default_images_stacks_fit_their_bases():
    """The model's default image, the local target's and the ssh target's fallback: each stack
    is locked for its base's Python (moving a default base means moving its stack too)."""
    from ctk.model import Deployment, SshHost
    from ctk.targets.local import DEFAULT_IMAGE
    from ctk.targets.ssh import host_image

    stacks = load_stacks()
    fallback = host_image(Deployment("d", "b", "c"), SshHost("h", "10.0.0.1", "compute"))
    for spec in (ImageSpec(name="x", module_id="x"), DEFAULT_IMAGE, fallback):
        assert stacks[spec.stack].supports(BASE_PYTHON[spec.base]), (spec.base, spec.stack)
        image_lock(spec, stacks[spec.stack])


# ---------------------------------------------------------------- blueprints pick stacks

IMAGE_BP = """\
blueprint_name: stacks
vars:
  deployment_name: stacks
deployment_groups:
- group: image
  modules:
  - id: img
    source: ctk/image
    settings:
      name: img
{settings}
"""


def _planned(write, settings: str) -> ImageSpec:
    exp = process(write(IMAGE_BP.format(settings=settings)))
    return exp.deployment.images[0]


@pytest.mark.parametrize("base,stack", [("debian-12", "jax-cpu-0.10"), ("ubuntu-24.04", "jax-cpu"),
                                        ("debian-13", "jax-cpu")])
def test_an_image_that_names_no_stack_gets_the_newest_for_its_python(write, base, stack):
    assert _planned(write, f"      base: {base}").stack == stack


def test_an_image_without_the_jax_role_needs_no_stack_for_its_python(write):
    img = _planned(write, "      base: rocky-9\n      roles: [common, munge, slurm]")
    assert img.base == "rocky-9" and "jax" not in img.roles


@pytest.mark.ct_fixtures
def test_a_cluster_toolkit_image_whose_python_no_stack_is_for_gets_no_jax_and_a_warning():
    from conftest import FIXTURES

    exp = process(os.path.join(FIXTURES, "community/examples/hpc-build-slurm-image.yaml"),
                  ["project_id=demo,deployment_name=demo"])
    img = exp.deployment.images[0]
    assert img.base == "rocky-9" and "jax" not in img.roles
    assert [w.message for w in exp.warnings] == [
        "image my-custom-slurm: no cpu stack is for Python 3.9, the Python of base rocky-9, so it gets no JAX venv"]


def test_ctk_validate_refuses_a_jax_012_stack_on_debian_12(tmp_path):
    """The real command line (the console script pip installed), as a user runs it."""
    bp = tmp_path / "bp.yaml"
    bp.write_text(IMAGE_BP.format(settings="      base: debian-12\n      stack: jax-cpu"))
    ctk = Path(sys.executable).parent / "ctk"
    argv = [str(ctk)] if ctk.exists() else [sys.executable, "-m", "ctk"]
    r = subprocess.run(argv + ["validate", str(bp)], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(REPO / "toolkit")})
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr
    lines = r.stderr.splitlines()
    assert lines[0] == (f"{bp}:12:14: error: stack jax-cpu (jax 0.12.0.1) needs Python >= 3.12; "
                        "base debian-12 has Python 3.11")
    assert lines[1:3] == ["        stack: jax-cpu", "               ^"]
    assert lines[3] == "  hint: use stack jax-cpu-0.10 (jax 0.10.2), the newest cpu stack for Python 3.11"


# ---------------------------------------------------------------- ctk stack list / lock (offline parts)

def test_stack_list_json(capsys):
    assert main(["stack", "list", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["catalog"] == str(CATALOG)
    rows = {r["name"]: r for r in out["stacks"]}
    assert rows["jax-cpu"]["python"] == ["3.12", "3.13"] and rows["jax-cpu"]["jax"] == "0.12.0.1"
    assert rows["jax-cpu-0.10"]["locks"]["3.11"]["state"] == "ok"
    assert all(v["state"] == "ok" for r in rows.values() for v in r["locks"].values())


def test_stack_list_table(capsys, catalog_copy, monkeypatch):
    monkeypatch.setenv("CTK_STACKS", str(catalog_copy))  # a site's own catalog
    os.unlink(catalog_copy.parent / "locks" / "jax-tpu" / "py3.12.txt")
    assert main(["stack", "list"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == ["NAME", "ACCEL", "JAX", "PYTHON", "LOCKS"]
    assert [ln for ln in table if ln.startswith("jax-tpu ")][0].split()[3:] == ["3.12,3.13", "3.12", "missing,",
                                                                              "3.13", "ok"]


@pytest.mark.parametrize("argv,message,hint", [
    (["jax-cpux"], "no stack named 'jax-cpux'", "did you mean 'jax-cpu'?"),
    (["jax-cpu", "--python", "3.11"], "stack jax-cpu (jax 0.12.0.1) needs Python >= 3.12", "older jax"),
    (["jax-cpu-0.10", "--python", "3.13"], "is locked for Python 3.11 only", "ctk stack lock jax-cpu-0.10 --python 3.13"),
    (["--python", "3.9"], "no stack is for Python 3.9", "python list"),
    (["--python", "three"], "--python 'three' is not a 3.N version", "--python 3.13"),
])
def test_stack_lock_refuses_bad_input_with_exit_2(capsys, tmp_path, argv, message, hint):
    assert main(["stack", "lock", *argv, "-o", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and hint in err.split("hint:", 1)[1]
    assert list(tmp_path.iterdir()) == []  # nothing written
