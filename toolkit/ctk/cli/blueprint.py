"""ctk validate / expand / show / create: a blueprint in, a report or a deployment folder out."""

from __future__ import annotations

import json
import os
import sys

from ..errors import EXIT_OK
from .common import BlueprintRef, blueprint_args, warn


def add_parsers(sub) -> None:
    p = sub.add_parser("validate", help="check a blueprint; report every error with file:line:col",
                       description="Load, expand and validate a blueprint. All errors are reported at "
                       "once; exit 2 if there is any.")
    blueprint_args(p)
    p.add_argument("--json", action="store_true", help="machine-readable result")
    p.set_defaults(run=validate)

    p = sub.add_parser("expand", help="print the expanded blueprint",
                       description="Resolve vars, expressions and `use` wiring; print the result as YAML.")
    blueprint_args(p)
    p.add_argument("-o", "--out", metavar="FILE", help="write to FILE instead of stdout")
    p.set_defaults(run=expand)

    p = sub.add_parser("show", help="tables of images, partitions, nodesets, unsupported modules")
    blueprint_args(p)
    p.add_argument("--json", action="store_true", help="print the Deployment model as JSON")
    p.add_argument("--target", default=None,
                   help="target the report is for (default: the blueprint's own: local, ssh or gcp)")
    p.set_defaults(run=show)

    p = sub.add_parser("create", help="write the deployment folder",
                       description="Write the deployment folder (expanded blueprint, deployment.json, "
                       "slurm.conf and friends) atomically.")
    blueprint_args(p)
    p.add_argument("-o", "--out", metavar="DIR", help="folder to write (default: ./DEPLOYMENT_NAME)")
    p.add_argument("-w", "--overwrite", action="store_true", help="replace an existing deployment folder")
    p.set_defaults(run=create)


def validate(args) -> int:
    planned = BlueprintRef.of(args).process(warnings=False)
    dep = planned.deployment
    if args.json:
        print(json.dumps({"ok": True, "errors": [], "warnings": [w.to_dict() for w in planned.warnings]}, indent=2))
    else:
        warn(planned)
        counts = [(sum(1 for _ in planned.expanded.blueprint.modules()), "module"), (len(dep.partitions), "partition"),
                  (len(dep.nodesets), "nodeset")]
        print(f"{args.blueprint}: ok ({', '.join(f'{n} {w}' + ('s' if n != 1 else '') for n, w in counts)})")
    return EXIT_OK


def expand(args) -> int:
    from .. import atomic
    from ..yamlout import dump

    text = dump(BlueprintRef.of(args).process().expanded.to_blueprint())
    if args.out:
        atomic.write_file(args.out, text)
    else:
        sys.stdout.write(text)
    return EXIT_OK


def show(args) -> int:
    if args.target is not None:
        from ..errors import UserError, did_you_mean
        from ..targets import REGISTRY

        if args.target not in REGISTRY:
            close = did_you_mean(args.target, REGISTRY)
            raise UserError(f"--target {args.target}: no such target",
                            hint=f"{close + ' ' if close else ''}targets: {', '.join(REGISTRY)}")
    planned = BlueprintRef.of(args).process()
    dep = planned.deployment
    if args.json:
        print(json.dumps(dep.to_dict(), indent=2))
    else:
        from ..render.report import show as report
        from ..target_registry import of_source

        own = any(of_source(em.module.source) == dep.target for em in planned.expanded.modules)
        sys.stdout.write(report(dep, args.target or dep.target, target_module=own))
    return EXIT_OK


def create(args) -> int:
    from ..targets.folder import create as create_folder

    planned = BlueprintRef.of(args).process()
    out = args.out or os.path.join(".", planned.deployment.deployment_name)
    for note in create_folder(planned.expanded, planned.deployment, out, args.overwrite):
        print(note, file=sys.stderr)
    print(f"created deployment folder {out}")
    return EXIT_OK
