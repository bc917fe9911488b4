"""Progress for long work: each step with its duration; the current sub-task on a TTY."""

from __future__ import annotations

import contextlib
import sys
import time


class Progress:
    """Prints `==> step` lines with timings. On a TTY the current task is shown on one line
    that is rewritten in place; off a TTY (CI, pipes) output stays plain, one line per event.
    `quiet` prints nothing but what the caller prints itself."""

    def __init__(self, stream=None, quiet: bool = False):
        self.stream = stream or sys.stderr
        self.quiet = quiet
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self._status = False
        self.timings: list[tuple[str, float]] = []

    def _clear(self):
        if self._status:
            self.stream.write("\r\033[K")
            self._status = False

    def say(self, text: str) -> None:
        if self.quiet:
            return
        self._clear()
        self.stream.write(text + "\n")
        self.stream.flush()

    def task(self, text: str) -> None:
        """The sub-task now running (an Ansible task, a package being fetched)."""
        if self.quiet:
            return
        if self.tty:
            self._clear()
            width = 100
            self.stream.write("    " + text[:width])
            self._status = True
        else:
            self.stream.write("    " + text + "\n")
        self.stream.flush()

    @contextlib.contextmanager
    def step(self, name: str):
        self.say(f"==> {name}")
        t0 = time.monotonic()
        ok = False
        try:
            yield
            ok = True
        finally:
            dt = time.monotonic() - t0
            self.timings.append((name, dt))
            self.say(f"    {name}: {'done' if ok else 'FAILED'} in {dt:.1f}s")
