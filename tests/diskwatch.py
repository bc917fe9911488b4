"""What a test run does to the disk it writes on, and what an earlier run left mounted there.

Image builds, labs and exports make tens of GB under pytest's temporary folder; a full disk fails
tests far from the cause (ENOSPC in whichever test writes next). The controller process samples
the free space of that folder's filesystem while the run goes on and reports, at the end, how
much there was at the start and the least there was during the run, so that a run which came
close can be seen before one fails.

An earlier run that was killed mid-test (a cut session, a CI timeout) may have left a chroot's
/proc, /sys or a bind of /dev mounted in its folder: pytest deletes old run folders, and deleting
through a bind of /dev deletes the host's device files. Before this run makes its folder, such
mounts are unmounted (lazily). The run's own folder does not exist yet, and the folder of a run
whose pytest still runs is left alone.
"""

from __future__ import annotations

import getpass
import os
import subprocess
import tempfile
import threading
import time

GIB = 1 << 30


def pytest_root() -> str:
    """pytest's folder of numbered run folders (TempPathFactory's: PYTEST_DEBUG_TEMPROOT or the
    system's temporary folder, then pytest-of-USER)."""
    temproot = os.environ.get("PYTEST_DEBUG_TEMPROOT") or tempfile.gettempdir()
    try:
        user = getpass.getuser()
    except (ImportError, KeyError, OSError):
        user = "unknown"
    return os.path.join(os.path.realpath(temproot), f"pytest-of-{user}")


def mountpoints() -> list[str]:
    with open("/proc/self/mountinfo") as f:
        # field 5 is the mount point, with spaces and the like written as octal escapes
        return [line.split()[4].encode().decode("unicode_escape") for line in f]


def _live(run: str) -> bool:
    """Whether the pytest process that made the run folder RUN still runs: pytest keeps its pid
    in RUN/.lock until it exits (a killed one leaves it, with a pid that is gone)."""
    try:
        pid = int(open(os.path.join(run, ".lock")).read().strip())
    except (OSError, ValueError):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def unmount_leftovers(root: str) -> list[str]:
    """Lazily unmount everything mounted under ROOT, deepest first, but in the folder of a run
    whose pytest still runs (a pytest started by a test, beside the run that started it); what
    was unmounted."""
    top = root.rstrip("/") + "/"
    def leftovers() -> list[str]:
        return [m for m in mountpoints() if m.startswith(top) and not _live(top + m[len(top):].split("/", 1)[0])]

    done = []
    for _ in range(8):  # mounts stacked on one path go one per round
        inside = leftovers()
        if not inside:
            break
        for m in sorted(set(inside), key=len, reverse=True):
            if subprocess.run(["umount", "-l", m], capture_output=True).returncode == 0:
                done.append(m)
    left = leftovers()
    if left:
        raise RuntimeError(f"still mounted under {root} after umount -l: {sorted(set(left))}; pytest would delete "
                           "through them: unmount them by hand")
    return done


class DiskWatch:
    def __init__(self, path: str, interval: float = 5.0):
        self.path, self.interval = path, interval
        self.start = self.low = self._free()
        self.low_at = 0.0
        self.t0 = time.monotonic()
        self.unmounted: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ctk-diskwatch", daemon=True)
        self._thread.start()

    def _free(self) -> int:
        st = os.statvfs(self.path)
        return st.f_bavail * st.f_frsize

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            free = self._free()
            if free < self.low:
                self.low, self.low_at = free, time.monotonic() - self.t0

    def pytest_terminal_summary(self, terminalreporter):
        self._stop.set()
        end = self._free()
        self.low = min(self.low, end)
        tr = terminalreporter
        tr.write_sep("-", "disk")
        for m in self.unmounted:
            tr.write_line(f"unmounted, left by an earlier run: {m}")
        tr.write_line(f"free on {self.path}'s filesystem: {self.start / GIB:.1f} GiB at the start, "
                      f"{self.low / GIB:.1f} GiB at the lowest ({self.low_at / 60:.0f} min in), "
                      f"{end / GIB:.1f} GiB at the end")


class Timeline:
    """CTK_TEST_TIMELINE=FILE: a line per test phase as the controller hears of it (seconds since
    the run began, the worker, the phase, its duration, the test), to see where a run's wall time
    goes: which worker idles, which module ends last."""

    def __init__(self, path: str):
        self.f = open(path, "w", buffering=1)
        self.t0 = time.monotonic()

    def pytest_runtest_logreport(self, report):
        worker = getattr(report, "node", None)
        gw = getattr(worker, "gateway", None)
        self.f.write(f"{time.monotonic() - self.t0:.1f}\t{getattr(gw, 'id', '-')}\t{report.when}\t"
                     f"{report.duration:.1f}\t{report.nodeid}\n")


def configure(config) -> None:
    """Called from the root conftest's pytest_configure, in the controller process only."""
    if hasattr(config, "workerinput"):
        return
    if os.environ.get("CTK_TEST_TIMELINE"):
        config.pluginmanager.register(Timeline(os.environ["CTK_TEST_TIMELINE"]), "ctk-timeline")
    root = pytest_root()
    unmounted = unmount_leftovers(root) if os.path.isdir(root) and os.geteuid() == 0 else []
    watch = DiskWatch(root if os.path.isdir(root) else os.path.dirname(root))
    watch.unmounted = unmounted
    config.pluginmanager.register(watch, "ctk-diskwatch")
