"""What the `ctk image ...` commands do (cli.py only parses their arguments)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time

from ..errors import UserError
from ..model import Deployment, ImageSpec
from ..progress import Progress
from .build import build_image, plan_layers
from .store import Store
from .verify import verify_image


def select(dep: Deployment, only: str | None) -> list[ImageSpec]:
    images = dep.images + dep.containers
    if not images:
        raise UserError("the blueprint declares no image (a ctk/image, ctk/container-image or "
                        "modules/packer/custom-image module)")
    if not dep.traits.builds_images_here:
        raise UserError(f"the {dep.target} target's images are built on Google Cloud, on slurm-gcp's images: "
                        "gcluster runs their Packer builds",
                        hint="ctk create BP writes DIR/gcp/blueprint.yaml; then gcluster deploy DIR/gcp/blueprint.yaml")
    if only:
        images = [i for i in images if i.name == only]
        if not images:
            raise UserError(f"--only {only!r}: no such image (the blueprint has: "
                            f"{', '.join(i.name for i in dep.images + dep.containers)})")
    return images


def build(dep: Deployment, only: str | None, verify: bool, progress: Progress, verify_again: bool = False
          ) -> list[dict]:
    """Build the images (cached layers), then verify each, unless VERIFY is off: an image whose
    layers passed the same checks before is not verified again, unless VERIFY_AGAIN."""
    images = select(dep, only)  # bad input first: exit 2 before the store is touched
    store = Store()
    out = []
    for spec in images:
        r = build_image(spec, store, progress)
        entry: dict[str, object] = {"image": r.image, "built": r.built, "cached": r.cached,
                                    "seconds": round(r.seconds, 1), "layers": r.layers, "profile": r.profile}
        if verify:
            t0 = time.monotonic()
            v = verify_image(spec.name, store, progress, again=verify_again)
            entry["verified"] = v.summary
            entry["verification_cached"] = v.cached
            r.profile["verify"] = {"seconds": round(time.monotonic() - t0, 2), "cached": v.cached}
        progress.say(f"image {r.image}: {len(r.built)} layer(s) built, {len(r.cached)} cached, "
                     f"{r.seconds:.1f}s" + (f"; verified ({entry['verified']})" if verify else ""))
        out.append(entry)
    return out


def test(dep: Deployment, only: str | None, progress: Progress) -> list[dict]:
    images = select(dep, only)
    store = Store()
    return [vars(verify_image(spec.name, store, progress)) for spec in images]


def _du(path: str) -> int:
    try:
        return int(subprocess.run(["du", "-sb", path], capture_output=True, text=True).stdout.split()[0])
    except (IndexError, ValueError):
        return 0


def list_images(as_json: bool) -> str:
    store = Store()
    rows = []
    for name in store.image_names():
        rec = store.image(name)
        assert rec is not None  # listed just now; an image's record is replaced whole, never removed
        size = sum(_du(store.layer_root(k)) for k in rec["layers"] if store.has(k))
        complete = all(store.has(k) for k in rec["layers"])
        rows.append({"name": name, "base": rec["spec"]["base"], "stack": rec["stack"]["name"],
                     "roles": rec["spec"]["roles"], "layers": rec["layers"], "size_mb": size // 2**20,
                     "complete": complete})
    if as_json:
        return json.dumps(rows, indent=2) + "\n"
    if not rows:
        return f"no images in {store.root}\n"
    lines = [f"{'IMAGE':<16} {'BASE':<10} {'STACK':<12} {'SIZE':>8}  LAYERS"]
    for r in rows:
        lines.append(f"{r['name']:<16} {r['base']:<10} {r['stack']:<12} {r['size_mb']:>6}MB  "
                     + " ".join(r["layers"]) + ("" if r["complete"] else "  (incomplete: rebuild)"))
    return "\n".join(lines) + "\n"


def gc(dry_run: bool) -> list[str]:
    """Remove layers no image uses (and leftovers of interrupted builds)."""
    store = Store()
    with store.lock(), store.removal_lock():
        if not dry_run:  # first: a leftover build node runs from files gc would remove
            store.reap(orphans_too=True)
        used: set[str] = set()
        for n in store.image_names():
            rec = store.image(n)
            assert rec is not None  # listed just now; an image's record is replaced whole, never removed
            used.update(rec["layers"])
        unused = [k for k in store.all_layers() if k not in used]
        stale = [os.path.join(store.layers, d) for d in os.listdir(store.layers)
                 if not store.has(d)] + [os.path.join(store.tmp, d) for d in os.listdir(store.tmp)]
        if not dry_run:
            for k in unused:
                store.remove_layer(k)
            for p in stale:
                shutil.rmtree(p, ignore_errors=True)
    return unused + [os.path.basename(p) for p in stale]


__all__ = ["build", "test", "list_images", "gc", "plan_layers"]
