"""Locked stacks for real: the wheels of a shipped lock downloaded the way an image build
fetches them (ctk's prefetch: pip download --require-hashes for the lock's Python and platform),
installed into fresh venvs the way the jax role installs them (pip install --require-hashes
--no-deps, no index), a lock with one altered hash refused, and `ctk stack lock` remaking a
shipped lock byte for byte.

Needs PyPI (pip's cache serves repeats). This machine's Python is 3.11, so the installs use the
3.11 CPU stack's lock.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ctk import paths
from ctk.images.build import LockMismatch, prefetch_wheels, wheelhouse
from ctk.images.store import Store
from ctk.progress import Progress
from ctk.stacks import load_stacks, read_lock
from ctk.stacks.lock import parse_versions

pytestmark = pytest.mark.integration

HOST_PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"
STACK = "jax-cpu-0.10"
CATALOG = Path(paths.IMAGES) / "stacks.yaml"


@pytest.fixture(scope="module")
def lock():
    stack = load_stacks()[STACK]
    if not stack.supports(HOST_PYTHON):
        pytest.skip(f"{STACK} is locked for Python {', '.join(stack.pythons)}; this machine has {HOST_PYTHON}")
    return read_lock(stack, HOST_PYTHON)


@pytest.fixture(scope="module")
def wheels(lock, tmp_path_factory) -> str:
    """The lock's wheels, fetched by ctk's prefetch into a fresh store's wheelhouse."""
    store = Store(str(tmp_path_factory.mktemp("store")))
    prefetch_wheels(store, lock, Progress(quiet=True))
    return wheelhouse(store)


def _pip_install_lock(venv: Path, lock_file: Path, wheels: str) -> subprocess.CompletedProcess:
    """What the jax role runs in a build node: the lock, every hash required, no index."""
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    return subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check",
                           "--require-hashes", "--no-deps", "--no-index", "--find-links", wheels,
                           "-r", str(lock_file)], capture_output=True, text=True, timeout=1800)


def _freeze(venv: Path) -> list[str]:
    return subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "freeze", "--disable-pip-version-check"],
                          capture_output=True, text=True, check=True).stdout.splitlines()


def test_the_prefetched_wheelhouse_holds_one_wheel_per_locked_package(lock, wheels):
    names = sorted(os.listdir(wheels))
    assert all(n.endswith(".whl") for n in names)
    assert len(names) == len(lock.versions)


def _uv_install_lock(venv: Path, lock_file: Path, wheels: str) -> subprocess.CompletedProcess:
    """What the jax role runs by default: uv, the lock, every hash required, no index."""
    from ctk.stacks.lock import uv_bin
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    return subprocess.run([uv_bin(), "pip", "install", "--python", str(venv / "bin" / "python"), "--require-hashes",
                           "--no-deps", "--no-index", "--find-links", wheels, "--compile-bytecode", "--link-mode",
                           "copy", "--no-config", "-r", str(lock_file)], capture_output=True, text=True, timeout=1800)


def test_installing_a_lock_with_uv_and_with_pip_gives_the_same_freeze(lock, wheels, tmp_path):
    """The jax role installs a lock with uv, or with pip where CTK_IMAGE_INSTALLER=pip: the same
    venv either way: the lock's packages at their locked versions, and nothing else."""
    freezes = []
    for name, install in (("uv", _uv_install_lock), ("pip", _pip_install_lock)):
        r = install(tmp_path / name, lock.path, wheels)
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
        freezes.append(_freeze(tmp_path / name))
    assert freezes[0] == freezes[1]
    # ... and it is the lock: every package of the closure at its locked version, nothing else.
    frozen = dict(line.split("==", 1) for line in freezes[0])
    assert {k.lower().replace("_", "-"): v for k, v in frozen.items()} == lock.versions
    out = subprocess.run([str(tmp_path / "uv" / "bin" / "python"), "-c", "import jax; print(jax.__version__)"],
                         capture_output=True, text=True, timeout=300)
    assert out.stdout.strip() == lock.versions["jax"], out.stderr[-2000:]


def _altered_copy(lock, wheels: str, tmp_path: Path, package: str) -> tuple[Path, str]:
    """A copy of the catalog whose lock for `package` records another sha256 for the very wheel
    the wheelhouse holds: one character of one hash changed."""
    shutil.copy(CATALOG, tmp_path / "stacks.yaml")
    wheel = next(n for n in os.listdir(wheels) if n.lower().startswith(package + "-"))
    good = hashlib.sha256(Path(wheels, wheel).read_bytes()).hexdigest()
    assert f"--hash=sha256:{good}" in lock.text
    bad = good[:-1] + ("0" if good[-1] != "0" else "1")
    path = tmp_path / "locks" / STACK / f"py{lock.python}.txt"
    path.parent.mkdir(parents=True)
    path.write_text(lock.text.replace(good, bad))
    return path, wheel


def test_a_lock_with_one_altered_hash_is_refused(lock, wheels, tmp_path):
    path, wheel = _altered_copy(lock, wheels, tmp_path, "chex")
    altered = read_lock(load_stacks(tmp_path / "stacks.yaml")[STACK], lock.python)
    assert altered.text != lock.text and altered.path == path
    # On the build host: ctk's prefetch refuses it with an error that says what and where.
    with pytest.raises(LockMismatch) as e:
        prefetch_wheels(Store(str(tmp_path / "store")), altered, Progress(quiet=True))
    msg = str(e.value)
    assert f"stack {STACK}: a wheel does not match its sha256 in {path}" in msg
    assert "chex" in msg and f"ctk stack lock {STACK} --python {lock.python}" in msg
    assert e.value.exit_code == 1
    # In a build node: pip, given the wheelhouse that holds the genuine wheel, installs nothing.
    r = _pip_install_lock(tmp_path / "venv", path, wheels)
    assert r.returncode != 0 and "DO NOT MATCH THE HASHES" in r.stdout + r.stderr
    assert not list((tmp_path / "venv").glob("lib/python*/site-packages/chex"))


def test_ctk_stack_lock_remakes_the_shipped_lock_byte_for_byte(tmp_path):
    """Stable while PyPI moves on: the stack's exclude_newer keeps later uploads out. (A file
    deleted from PyPI, or a release yanked, after that time would still change it.)"""
    ctk = Path(sys.executable).parent / "ctk"
    argv = [str(ctk)] if ctk.exists() else [sys.executable, "-m", "ctk"]
    r = subprocess.run(argv + ["stack", "lock", "jax-cpu", "--python", "3.13", "-o", str(tmp_path)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "==> lock jax-cpu for Python 3.13" in r.stderr  # progress on stderr
    made = tmp_path / "jax-cpu" / "py3.13.txt"
    shipped = Path(paths.IMAGES) / "locks" / "jax-cpu" / "py3.13.txt"
    n = len(parse_versions(shipped.read_text()))
    assert r.stdout == f"jax-cpu python 3.13: {made} ({n} packages, written)\n"
    assert made.read_bytes() == shipped.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["jax-cpu"]  # nothing else written


def test_a_stack_that_does_not_resolve_exits_1_and_leaves_its_lock_as_it_was(tmp_path):
    """A site's catalog (CTK_STACKS) with a pin PyPI does not have: uv's reason on stderr, exit 1,
    and the lock that was there is untouched (no temp file left beside it either)."""
    shutil.copy(CATALOG, tmp_path / "stacks.yaml")
    shutil.copytree(CATALOG.parent / "locks", tmp_path / "locks")
    text = (tmp_path / "stacks.yaml").read_text()
    start = text.index("  jax-cpu-0.10:")
    (tmp_path / "stacks.yaml").write_text(text[:start] + text[start:].replace('optax: "0.2.8"', 'optax: "9.9.9"', 1))
    before = (tmp_path / "locks" / STACK / "py3.11.txt").read_bytes()
    ctk = Path(sys.executable).parent / "ctk"
    argv = [str(ctk)] if ctk.exists() else [sys.executable, "-m", "ctk"]
    r = subprocess.run(argv + ["stack", "lock", STACK], capture_output=True, text=True, timeout=600,
                       env={**os.environ, "CTK_STACKS": str(tmp_path / "stacks.yaml")})
    assert r.returncode == 1, r.stderr
    assert "Traceback" not in r.stderr
    assert f"error: stack {STACK} cannot be resolved for Python 3.11" in r.stderr and "optax" in r.stderr
    assert r.stdout == ""
    assert (tmp_path / "locks" / STACK / "py3.11.txt").read_bytes() == before
    assert os.listdir(tmp_path / "locks" / STACK) == ["py3.11.txt"]
