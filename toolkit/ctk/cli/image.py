"""ctk image build / test / list / export / gc."""

from __future__ import annotations

import json
import sys

from .. import ansible_env
from ..errors import EXIT_OK
from .common import BlueprintRef, Parser, blueprint_args, progress_of, show_help


def add_parsers(sub) -> None:
    img = sub.add_parser("image", help="build, test, list and export node images",
                         description="Node images are built locally as cached layers (debootstrap base, "
                         "then one layer per Ansible role, each applied by Packer over SSH into a build "
                         "node). Layers live under $CTK_STATE_DIR (default /var/lib/ctk).")
    img.set_defaults(run=lambda args: show_help(img))
    isub = img.add_subparsers(dest="image_cmd", metavar="SUBCOMMAND", parser_class=Parser)
    p = isub.add_parser("build", help="build the blueprint's images (cached layers), then verify them")
    blueprint_args(p)
    p.add_argument("--only", metavar="NAME", help="build only this image")
    how = p.add_mutually_exclusive_group()
    how.add_argument("--no-verify", action="store_true", help="skip the testinfra and functional checks")
    how.add_argument("--verify", action="store_true",
                     help="verify again even if the image's layers passed the same checks before (which "
                     "are otherwise not run again: the store keeps the pass, by layer keys and checks)")
    p.add_argument("-q", "--quiet", action="store_true", help="print only the result")
    p.add_argument("--json", action="store_true", help="machine-readable result")
    p.set_defaults(run=build)
    p = isub.add_parser("test", help="verify built images: testinfra suites and functional checks (always run)")
    blueprint_args(p)
    p.add_argument("--only", metavar="NAME", help="test only this image")
    p.add_argument("-q", "--quiet", action="store_true", help="print only the result")
    p.set_defaults(run=test)
    p = isub.add_parser("list", help="images in the layer store")
    p.add_argument("--json", action="store_true", help="machine-readable list")
    p.set_defaults(run=list_)
    p = isub.add_parser("export", help="export a built image as a folder, tar.zst, OCI archive or ext4 disk")
    p.add_argument("name", help="image name (see ctk image list)")
    p.add_argument("--format", required=True, choices=["dir", "tar", "oci", "ext4"], help="output format")
    p.add_argument("-o", "--out", required=True, metavar="PATH", help="where to write it")
    p.add_argument("-w", "--overwrite", action="store_true", help="replace PATH if it exists")
    p.add_argument("--push", metavar="REF",
                   help="oci only: also push the image to a registry, REF = HOST[:PORT]/NAME[:TAG] "
                        "(buildah push; credentials from `buildah login HOST`)")
    p.add_argument("--no-tls-verify", action="store_true",
                   help="with --push: a registry over plain HTTP or with a certificate not trusted here")
    p.add_argument("-q", "--quiet", action="store_true", help="print only the result")
    p.set_defaults(run=export)
    p = isub.add_parser("gc", help="remove layers no image uses, and leftovers of interrupted builds")
    p.add_argument("--dry-run", action="store_true", help="only list what would be removed")
    p.set_defaults(run=gc)




def list_(args) -> int:
    from ..images import commands

    sys.stdout.write(commands.list_images(args.json))
    return EXIT_OK


def gc(args) -> int:
    from ..images import commands

    removed = commands.gc(args.dry_run)
    print(("would remove" if args.dry_run else "removed") + f" {len(removed)} item(s)")
    for r in removed:
        print(f"  {r}")
    return EXIT_OK


def export(args) -> int:
    from ..images.export import export_image

    print(export_image(args.name, args.format, args.out, progress=progress_of(args), overwrite=args.overwrite,
                       push=args.push, tls_verify=not args.no_tls_verify))
    return EXIT_OK


def build(args) -> int:
    from ..images import commands

    ansible_env.strategy()  # a wrong CTK_ANSIBLE_STRATEGY stops the build before the store is made
    dep = BlueprintRef.of(args).process().deployment
    res = commands.build(dep, args.only, not args.no_verify, progress_of(args), verify_again=args.verify)
    if args.json:
        print(json.dumps(res, indent=2))
    elif args.quiet:
        for r in res:
            print(f"{r['image']}: built {','.join(r['built']) or '-'}; cached {','.join(r['cached']) or '-'}")
    return EXIT_OK


def test(args) -> int:
    from ..images import commands

    dep = BlueprintRef.of(args).process().deployment
    for r in commands.test(dep, args.only, progress_of(args)):
        print(f"{r['image']}: {r['summary']}")
    return EXIT_OK
