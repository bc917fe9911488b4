"""ctk stack list / lock: the software stacks (images/stacks.yaml) and their lock files."""

from __future__ import annotations

import sys

from ..errors import EXIT_OK
from .common import Parser, progress_of, show_help


def add_parsers(sub) -> None:
    st = sub.add_parser("stack", help="list the software stacks and (re)make their lock files",
                        description="A stack (images/stacks.yaml) pins jax and its frameworks; each is "
                        "locked per Python version it lists: the exact version and sha256 hashes of "
                        "every package of its closure (locks/STACK/pyX.Y.txt beside the catalog), "
                        "which image builds install with pip --require-hashes. "
                        "Exit codes: 0 done, 1 a stack does not resolve, 2 bad arguments.")
    st.set_defaults(run=lambda args: show_help(st))
    ssub = st.add_subparsers(dest="stack_cmd", metavar="SUBCOMMAND", parser_class=Parser)
    p = ssub.add_parser("list", help="stacks, their Python versions and the state of each lock",
                        description="Each stack's accelerator, jax, Python versions, and for each of "
                        "those its lock: ok, stale (the pins changed since) or missing.")
    p.add_argument("--json", action="store_true", help="machine-readable list")
    p.set_defaults(run=list_)
    p = ssub.add_parser("lock", help="resolve stacks with uv into lock files",
                        description="Resolve a stack (default: every stack) for each Python version it "
                        "lists (or only --python) with `uv pip compile --generate-hashes` for x86_64 "
                        "Linux, and write its lock atomically. Progress goes to stderr.")
    p.add_argument("name", nargs="?", help="the stack to lock (default: all)")
    p.add_argument("--python", metavar="X.Y", help="lock only for this Python version")
    p.add_argument("-o", "--out", metavar="DIR",
                   help="write the locks under DIR/STACK/ (default: the locks folder beside the catalog)")
    p.add_argument("--transformer-engine", metavar="VERSION", dest="te",
                   help="lock the stack (a CUDA one) with this Transformer Engine release, into "
                        "locks/STACK/pyX.Y-teVERSION.txt, for images that set transformer_engine")
    p.add_argument("-q", "--quiet", action="store_true", help="print only the result")
    p.set_defaults(run=lock)


def list_(args) -> int:
    from ..stacks.commands import list_text

    sys.stdout.write(list_text(args.json))
    return EXIT_OK


def lock(args) -> int:
    from ..stacks.commands import lock as lock_stacks

    for r in lock_stacks(args.name, args.python, args.out, progress_of(args), args.te):
        print(f"{r.stack} python {r.python}: {r.path} ({r.packages} packages, "
              f"{'written' if r.changed else 'unchanged'})")
    return EXIT_OK
