"""The two errors every other ctk error derives from.

- `UserError`: the input is wrong (a flag, a blueprint, a folder that is not a deployment).
  The command line prints the message and the hint and exits 2, without a traceback.
- `Failure`: the input was fine but the work failed (a daemon that did not start, a command
  that exited non-zero, a cluster that did not answer). Exit 1, without a traceback.

Both carry a message and an optional hint; `str(e)` is what the command line prints after
"error: ", and `to_dict()` is what `--json` prints.
"""

from __future__ import annotations

from collections.abc import Iterable

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2
# `ctk job submit --wait`: the job's own result, apart from ctk's failure (1) and refusal (2).
EXIT_JOB_FAILED = 3  # the job ran and failed (a non-zero exit code, out of memory)
EXIT_JOB_ENDED = 4  # it ended otherwise: cancelled, its time limit, a node failure, preempted
EXIT_JOB_NEVER_STARTS = 5  # it pends for a reason that never goes away on its own (still queued)


class CtkError(Exception):
    """A message for the user, an optional hint, and the exit code the command ends with."""

    exit_code = EXIT_FAIL
    kind = "failure"

    def __init__(self, message: str = "", hint: str = ""):
        self.message = message
        self.hint = hint
        super().__init__(message)

    def __str__(self) -> str:
        return f"{self.message}\n  hint: {self.hint}" if self.hint else self.message

    def to_dict(self) -> dict:
        return {"kind": self.kind, "message": self.message, "hint": self.hint or None,
                "exit_code": self.exit_code}


class UserError(CtkError):
    """A mistake in the user's input: exit 2."""

    exit_code = EXIT_USAGE
    kind = "usage"


class Failure(CtkError):
    """Work that failed while running: exit 1."""

    exit_code = EXIT_FAIL
    kind = "failure"


_OS_HINTS = {
    "ENOSPC": "free space on that filesystem (df -h shows it); ctk's images and labs live under "
              "CTK_STATE_DIR (default /var/lib/ctk), which may point at a bigger disk",
    "EDQUOT": "your disk quota is used up there: free some, or write elsewhere",
    "EACCES": "ctk cannot write or read there as this user: labs and images need root (sudo), "
              "other files a folder you own",
    "EPERM": "the operation is not permitted there: labs and images need root (sudo)",
    "EROFS": "that filesystem is mounted read-only: write elsewhere (-o DIR, CTK_STATE_DIR)",
    "EMFILE": "too many open files: raise the limit (ulimit -n) and run it again",
}


def os_failure(e: OSError) -> Failure:
    """An OSError as the user reads it: what went wrong, on which path (or, where the system did
    not say, in which step of ctk), and what to do; exit 1 (the input was fine)."""
    import errno as errno_
    import os
    import traceback

    code = errno_.errorcode.get(e.errno or 0, "")
    what = e.strerror or str(e)
    if e.filename is not None:
        where = os.fsdecode(e.filename) + (f" -> {os.fsdecode(e.filename2)}" if e.filename2 is not None else "")
    else:  # a write to an open file or socket: the system names no path; say where ctk was
        frames = [f for f in traceback.extract_tb(e.__traceback__) if "/ctk/" in f.filename.replace(os.sep, "/")]
        f = frames[-1] if frames else None
        where = (f"no path given by the system, in {f.name} ({os.path.basename(f.filename)}:{f.lineno})"
                 if f else "no path given by the system")
    return Failure(f"{what} ({code or e.errno}): {where}", hint=_OS_HINTS.get(code, ""))


def did_you_mean(name: str, candidates: Iterable[str]) -> str:
    """A hint naming the closest candidate, or '' when nothing is close."""
    import difflib  # here: every command imports this module, few need a hint

    close = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.6)
    return f"did you mean '{close[0]}'?" if close else ""
