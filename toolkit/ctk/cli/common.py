"""What every command group of the command line shares: the parser class, blueprint flags."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import EXIT_USAGE

if TYPE_CHECKING:
    from ..plan import Planned


class Parser(argparse.ArgumentParser):
    def error(self, message):  # usage errors exit 2 with a hint, like every other bad input
        self.print_usage(sys.stderr)
        print(f"{self.prog}: error: {message}\n  hint: run '{self.prog} --help'", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)


def blueprint_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("blueprint", help="blueprint YAML file (Cluster Toolkit format)")
    p.add_argument("--vars", action="append", default=[], metavar="K=V[,K=V]",
                   help="set deployment variables (repeatable; values are YAML: lists and maps allowed)")
    p.add_argument("-d", "--deployment-file", metavar="FILE",
                   help="deployment file with vars (overridden by --vars)")


@dataclass(frozen=True)
class BlueprintRef:
    """A blueprint and the variables given for it."""

    path: str
    vars: tuple[str, ...] = ()
    deployment_file: str | None = None

    @classmethod
    def of(cls, args) -> BlueprintRef:
        return cls(args.blueprint, tuple(args.vars), args.deployment_file)

    def process(self, warnings: bool = True) -> Planned:
        """Load, expand, validate and plan it; its warnings go to stderr."""
        from ..plan import process

        planned = process(self.path, list(self.vars), self.deployment_file)
        if warnings:
            warn(planned)
        return planned


def warn(planned: Planned) -> None:
    for w in planned.warnings:
        print(w.render(planned.sources).replace(": error: ", ": warning: ", 1), file=sys.stderr)


def show_help(parser) -> int:
    """A command group given without its subcommand: its help, exit 0."""
    parser.print_help()
    raise SystemExit(0)


def progress_of(args):
    """Progress lines on stderr, unless -q or --json."""
    from ..progress import Progress

    return Progress(quiet=getattr(args, "quiet", False) or getattr(args, "json", False))
