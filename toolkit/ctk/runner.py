"""The one place ctk runs external commands: streams output, keeps a tail, raises one error."""

from __future__ import annotations

import collections
import os
import subprocess
from collections.abc import Callable, Mapping, Sequence

from .errors import Failure


class CommandError(Failure):
    """A command failed: what ran, its exit code and the last lines it printed."""

    def __init__(self, argv: Sequence[str], returncode: int, tail: str, what: str = ""):
        self.argv = list(argv)
        self.returncode = returncode
        self.tail = tail
        head = what or f"command failed: {' '.join(self.argv[:6])}{' ...' if len(self.argv) > 6 else ''}"
        super().__init__(f"{head} (exit {returncode})\n{tail}")


def run(argv: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: str | None = None,
        on_line: Callable[[str], None] | None = None, tail_lines: int = 40, what: str = "",
        log_path: str | None = None, timeout: float | None = None) -> list[str]:
    """Run argv, calling on_line for each output line (stdout and stderr merged).

    Returns the tail of the output; raises CommandError on a non-zero exit."""
    tail: collections.deque[str] = collections.deque(maxlen=tail_lines)
    log = open(log_path, "a", buffering=1) if log_path else None  # line by line: a log can be followed
    proc = None
    try:
        proc = subprocess.Popen(list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                errors="replace", env=dict(env) if env is not None else None, cwd=cwd,
                                stdin=subprocess.DEVNULL, bufsize=1)
        assert proc.stdout is not None
        for line in proc.stdout:
            line = line.rstrip("\n")
            tail.append(line)
            if log:
                try:
                    log.write(line + "\n")
                except OSError as e:  # a full disk names no file: the log it was for
                    raise OSError(e.errno, e.strerror, log_path) from None
            if on_line:
                on_line(line)
        rc = proc.wait(timeout=timeout)
    finally:
        if proc is not None and proc.poll() is None:  # we stop reading: the command stops too
            proc.kill()
            proc.wait()
        if log:
            try:
                log.close()
            except OSError:
                pass
    if rc != 0:
        raise CommandError(argv, rc, "\n".join(tail), what)
    return list(tail)


def which(program: str, extra_paths: Sequence[str] = ("/usr/sbin", "/sbin")) -> str | None:
    for d in os.environ.get("PATH", "").split(os.pathsep) + list(extra_paths):
        p = os.path.join(d, program)
        if os.access(p, os.X_OK):
            return p
    return None
