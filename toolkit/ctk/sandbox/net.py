"""Addresses and ports on this machine."""

from __future__ import annotations

import socket


def free_port(addr: str = "127.0.0.1") -> int:
    """A TCP port that was free on ADDR a moment ago (bind to port 0, read what was given)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((addr, 0))
        return s.getsockname()[1]
