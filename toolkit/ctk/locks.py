"""The one file-lock helper: flock(2) on a file, held for a `with` block.

Locks are advisory and die with the process holding them, so a killed ctk command never leaves
a stale lock behind."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager


class Busy(Exception):
    """Raised by a non-blocking lock that another process holds."""


@contextmanager
def held(fd: int, *, shared: bool = False, wait: bool = True) -> Iterator[int]:
    """Hold an flock on the open file FD for the block (shared: readers only)."""
    op = (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | (0 if wait else fcntl.LOCK_NB)
    try:
        fcntl.flock(fd, op)
    except BlockingIOError:
        raise Busy() from None
    try:
        yield fd
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)


@contextmanager
def lock_file(path: str, *, shared: bool = False, wait: bool = True, mode: int = 0o600) -> Iterator[int]:
    """Open (creating) PATH and hold an flock on it for the block; yields the descriptor.
    With wait=False, raises Busy at once when another process holds it."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, mode)
    try:
        with held(fd, shared=shared, wait=wait):
            yield fd
    finally:
        os.close(fd)
