"""Command line: arguments are parsed here, one module per command group (blueprint, cluster,
image, job, stack); each command turns its flags into typed values and calls one function of the
packages below. Imports are lazy, so `ctk job submit` loads only what a submit needs."""

from __future__ import annotations

import importlib
import json
import sys

from .. import __version__
from ..errors import EXIT_USAGE, CtkError
from .common import Parser

# The command groups, in the order `ctk --help` lists them, and the commands of each.
GROUPS = {
    "blueprint": ("validate", "expand", "show", "create"),
    "cluster": ("deploy", "status", "destroy", "exec", "preempt", "env"),
    "job": ("job",),
    "image": ("image",),
    "stack": ("stack",),
}
_GROUP_OF = {cmd: group for group, cmds in GROUPS.items() for cmd in cmds}


def build_parser(command: str | None = None) -> Parser:
    """The parser of every command, or with COMMAND (a known first word) of its group only:
    `ctk job submit` neither imports nor builds the parsers of the other groups."""
    ap = Parser(prog="ctk", description="Slurm cluster images and jobs for AI/ML training, "
                "from Cluster Toolkit blueprints.",
                epilog="Exit codes: 0 success, 1 failure while running, 2 bad input (blueprint, flags).")
    ap.add_argument("--version", action="version", version=f"ctk {__version__}")
    sub = ap.add_subparsers(dest="cmd", metavar="COMMAND", parser_class=Parser)
    for group in [_GROUP_OF[command]] if command in _GROUP_OF else GROUPS:
        importlib.import_module(f"{__name__}.{group}").add_parsers(sub)
    return ap


def _report(e: CtkError, as_json: bool) -> int:
    """Print an error the user can act on: JSON on stdout with --json, else text on stderr."""
    from ..blueprint.errors import BlueprintErrors

    if as_json:
        if isinstance(e, BlueprintErrors):  # the shape `ctk validate --json` has always had
            print(json.dumps({"ok": False, "errors": [x.to_dict() for x in e.errors]}, indent=2))
        else:
            print(json.dumps({"ok": False, "error": e.to_dict()}, indent=2))
    elif isinstance(e, BlueprintErrors):
        print(e.render(), file=sys.stderr)
        n = len(e.errors)
        print(f"{n} error{'s' if n != 1 else ''}", file=sys.stderr)
    else:
        print(f"error: {e}", file=sys.stderr)
    return e.exit_code


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    command = None
    if argv[:1] == ["job"] and "--" in argv:  # ctk job render ... -- CMD: CMD is the user's, verbatim
        i = argv.index("--")
        argv, command = argv[:i], argv[i + 1:]
    ap = build_parser(argv[0] if argv else None)
    args = ap.parse_args(argv)
    if command is not None:
        args.command = command
    if not args.cmd:
        ap.print_help()
        return EXIT_USAGE
    as_json = bool(getattr(args, "json", False))
    try:
        return args.run(args)
    except CtkError as e:
        return _report(e, as_json)
    except OSError as e:  # a path the user named that cannot be read or written, a full disk
        from ..errors import os_failure
        return _report(os_failure(e), as_json)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
