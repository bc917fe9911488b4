"""Errors as data: a position in a file, a message, a hint; many collected at once."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ..errors import UserError, did_you_mean  # noqa: F401 - re-exported: blueprint code names them here


@dataclass(frozen=True)
class Pos:
    """A place in a source file; line and column are 1-based."""

    file: str
    line: int
    col: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


@dataclass
class BlueprintError:
    message: str
    pos: Pos | None = None
    hint: str = ""

    def render(self, sources: dict[str, str] | None = None) -> str:
        """`file:line:col: message`, the source line, a caret under the column, the hint."""
        head = f"{self.pos}: error: {self.message}" if self.pos else f"error: {self.message}"
        out = [head]
        if self.pos and sources is not None:
            text = sources.get(self.pos.file)
            if text is not None:
                lines = text.splitlines()
                if 1 <= self.pos.line <= len(lines):
                    src = lines[self.pos.line - 1].replace("\t", " ")
                    out.append(f"  {src}")
                    out.append("  " + " " * (self.pos.col - 1) + "^")
        if self.hint:
            out.append(f"  hint: {self.hint}")
        return "\n".join(out)

    def to_dict(self) -> dict:
        d: dict[str, str | int | None] = {"message": self.message, "hint": self.hint or None}
        if self.pos:
            d.update(file=self.pos.file, line=self.pos.line, col=self.pos.col)
        return d


class BlueprintErrors(UserError):
    """One or more blueprint errors, reported together."""

    def __init__(self, errors: Iterable[BlueprintError], sources: dict[str, str] | None = None):
        self.errors = list(errors)
        self.sources = sources or {}
        super().__init__(self.render())

    def render(self) -> str:
        return "\n".join(e.render(self.sources) for e in self.errors)

    def __str__(self) -> str:
        return self.render()

    def to_dict(self) -> dict:
        return {"kind": self.kind, "message": f"{len(self.errors)} error(s) in the blueprint", "hint": None,
                "exit_code": self.exit_code, "errors": [e.to_dict() for e in self.errors]}


class Collector:
    """Gathers errors during a pass so that all of them are reported at once."""

    def __init__(self):
        self.errors: list[BlueprintError] = []

    def add(self, message: str, pos: Pos | None = None, hint: str = "") -> None:
        self.errors.append(BlueprintError(message, pos, hint))

    def __bool__(self) -> bool:
        return bool(self.errors)

    def raise_if_any(self, sources: dict[str, str] | None = None) -> None:
        if self.errors:
            # Stable order: by file position, unpositioned last.
            def key(e):
                return (e.pos is None, e.pos.file if e.pos else "", e.pos.line if e.pos else 0,
                        e.pos.col if e.pos else 0)
            raise BlueprintErrors(sorted(self.errors, key=key), sources)
