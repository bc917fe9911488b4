"""Reading what ansible-playbook prints: the PLAY RECAP lines (ok / changed / unreachable /
failed per host), the one parser both image builds (through Packer) and the ssh target use."""

from __future__ import annotations

import re

RECAP_LINE = re.compile(r"^\s*(\S+)\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)
FIELDS = ("ok", "changed", "unreachable", "failed")


def recap_line(line: str) -> tuple[str, dict[str, int]] | None:
    """One recap line as (host, counts); None for any other line."""
    m = RECAP_LINE.search(line)
    return (m.group(1), dict(zip(FIELDS, map(int, m.groups()[1:])))) if m else None


def parse_recap(text: str) -> dict[str, dict[str, int]]:
    """host -> {ok, changed, unreachable, failed} from the last PLAY RECAP in TEXT."""
    i = text.rfind("PLAY RECAP")
    if i < 0:
        return {}
    return {m.group(1): dict(zip(FIELDS, map(int, m.groups()[1:]))) for m in RECAP_LINE.finditer(text[i:])}
