"""The two errors every other ctk error derives from.

- `UserError`: the input is wrong (a flag, a blueprint, a folder that is not a deployment).
  The command line prints the message and the hint and exits 2, without a traceback.
- `Failure`: the input was fine but the work failed (a daemon that did not start, a command
  that exited non-zero, a cluster that did not answer). Exit 1, without a traceback.

Both carry a message and an optional hint; `str(e)` is what the command line prints after
"error: ", and `to_dict()` is what `--json` prints.
"""

from __future__ import annotations

from typing import Iterable

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


def did_you_mean(name: str, candidates: Iterable[str]) -> str:
    """A hint naming the closest candidate, or '' when nothing is close."""
    import difflib  # here: every command imports this module, few need a hint

    close = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.6)
    return f"did you mean '{close[0]}'?" if close else ""
