"""The one wait/poll helper, on the monotonic clock (a changed wall clock never ends a wait)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class TimedOut(Exception):
    """`poll` gave up; `last` is the last value the check returned."""

    def __init__(self, last):
        self.last = last
        super().__init__("timed out")


def poll(check: Callable[[], T], timeout: float, interval: float = 0.1, *,
         max_interval: float | None = None) -> T:
    """Call CHECK until it returns something truthy and return that, or raise TimedOut after
    TIMEOUT seconds. The interval grows by half each round up to MAX_INTERVAL (default: fixed)."""
    deadline = time.monotonic() + timeout
    delay = interval
    while True:
        last = check()
        if last:
            return last
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimedOut(last)
        time.sleep(min(delay, left))
        if max_interval:
            delay = min(delay * 1.5, max_interval)
