"""tests/diskwatch.py: what an earlier, killed run left mounted in its folder is unmounted before a
new run; a run whose pytest still runs keeps its mounts."""

import os
import subprocess

import pytest

import diskwatch


def _mounted(path) -> bool:
    return str(path) in diskwatch.mountpoints()


@pytest.mark.root
def test_mounts_of_a_dead_run_go_and_those_of_a_live_run_stay(tmp_path):
    root = tmp_path / "pytest-of-someone"
    dead, live, unlocked = root / "pytest-7" / "x" / "proc", root / "pytest-8" / "y", root / "pytest-9" / "dev"
    for d in (dead, live, unlocked):
        d.mkdir(parents=True)
    gone = subprocess.run(["sh", "-c", "echo $$"], capture_output=True, text=True).stdout.strip()
    (root / "pytest-7" / ".lock").write_text(gone)  # its pytest was killed: the lock outlived it
    (root / "pytest-8" / ".lock").write_text(str(os.getpid()))
    try:
        for d in (dead, live, unlocked):
            subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "none", str(d)], check=True)
        done = diskwatch.unmount_leftovers(str(root))
        assert sorted(done) == sorted([str(dead), str(unlocked)])
        assert not _mounted(dead) and not _mounted(unlocked) and _mounted(live)
    finally:
        for d in (dead, live, unlocked):
            if _mounted(d):
                subprocess.run(["umount", "-l", str(d)])
