"""The layer store under the state dir (default /var/lib/ctk; CTK_STATE_DIR overrides).

    layers/<key>/root        the layer's files (an overlay upper dir, or the base tree)
    layers/<key>/meta.json   what built it, when, how long it took
    images/<name>.json       an image: its layer keys, bottom first, and its spec
    verified/<name>.json     the image's last passed verification: of which layers, by which checks

A layer enters the store only complete: it is built under a temporary name and renamed into
place, so a failed or killed build never leaves a broken layer behind.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from contextlib import contextmanager

from .. import atomic
from ..errors import UserError
from ..locks import lock_file


def state_dir() -> str:
    return os.environ.get("CTK_STATE_DIR", "/var/lib/ctk")


class Store:
    def __init__(self, root: str | None = None):
        self.root = root or state_dir()
        self.layers = os.path.join(self.root, "layers")
        self.images = os.path.join(self.root, "images")
        self.tmp = os.path.join(self.root, "tmp")
        self.verified_dir = os.path.join(self.root, "verified")
        # root's alone: layers hold setuid binaries, and a node's upper dir what its root wrote
        os.makedirs(self.root, mode=0o700, exist_ok=True)
        if os.stat(self.root).st_mode & 0o077 and os.stat(self.root).st_uid == os.geteuid():
            os.chmod(self.root, 0o700)
        for d in (self.layers, self.images, self.tmp, self.verified_dir):
            os.makedirs(d, exist_ok=True)

    @contextmanager
    def lock(self):
        """One build at a time per store."""
        with lock_file(os.path.join(self.root, ".lock")):
            yield

    @contextmanager
    def removal_lock(self, shared: bool = False):
        """Held whole by what removes layers (gc, exclusive), and shared by what records an image
        of cached layers without the build lock: no layer goes between its check and its record."""
        with lock_file(os.path.join(self.root, ".removal-lock"), shared=shared):
            yield

    def layer_dir(self, key: str) -> str:
        return os.path.join(self.layers, key)

    def layer_root(self, key: str) -> str:
        return os.path.join(self.layers, key, "root")

    def has(self, key: str) -> bool:
        return os.path.exists(os.path.join(self.layers, key, "meta.json"))

    def meta(self, key: str) -> dict:
        with open(os.path.join(self.layers, key, "meta.json")) as f:
            return json.load(f)

    def commit(self, key: str, tree: str, meta: dict) -> None:
        """Move a finished tree into the store as layer `key`."""
        staging = os.path.join(self.tmp, f"{key}.{os.getpid()}")
        shutil.rmtree(staging, ignore_errors=True)
        os.makedirs(staging)
        os.rename(tree, os.path.join(staging, "root"))
        with open(os.path.join(staging, "meta.json"), "w") as f:
            json.dump({**meta, "key": key, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}, f,
                      indent=2)
        final = self.layer_dir(key)
        if os.path.exists(final):  # an incomplete leftover (no meta.json) from a killed build
            shutil.rmtree(final)
        os.rename(staging, final)

    def scratch(self, name: str) -> str:
        """A fresh work folder under the store (same filesystem as the layers: renames work)."""
        path = os.path.join(self.tmp, name)
        shutil.rmtree(path, ignore_errors=True)
        os.makedirs(path)
        return path

    def save_image(self, name: str, record: dict) -> None:
        atomic.write_file(os.path.join(self.images, f"{name}.json"), json.dumps(record, indent=2) + "\n")

    def image(self, name: str) -> dict | None:
        try:
            with open(os.path.join(self.images, f"{name}.json")) as f:
                return json.load(f)
        except FileNotFoundError:
            return None

    def built_image(self, name: str) -> dict:
        """Image NAME's record; a UserError naming the images there are if it was never built."""
        rec = self.image(name)
        if rec is None:
            raise UserError(f"no image '{name}' in {self.root} (built images: {', '.join(self.image_names()) or 'none'})",
                            hint="ctk image build BLUEPRINT")
        return rec

    def verified(self, name: str) -> dict | None:
        """The record of image NAME's last passed verification, or None."""
        try:
            with open(os.path.join(self.verified_dir, f"{name}.json")) as f:
                rec = json.load(f)
        except (OSError, ValueError):
            return None
        return rec if isinstance(rec, dict) else None

    def verified_names(self) -> list[str]:
        """The images with a passed verification on record."""
        try:
            return sorted(f[:-5] for f in os.listdir(self.verified_dir) if f.endswith(".json"))
        except FileNotFoundError:
            return []

    def save_verified(self, name: str, record: dict) -> None:
        atomic.write_file(os.path.join(self.verified_dir, f"{name}.json"), json.dumps(record, indent=2) + "\n")

    def forget_verified(self, name: str) -> None:
        try:
            os.unlink(os.path.join(self.verified_dir, f"{name}.json"))
        except FileNotFoundError:
            pass

    def image_names(self) -> list[str]:
        return sorted(f[:-5] for f in os.listdir(self.images) if f.endswith(".json"))

    def lowerdirs(self, keys: list[str]) -> list[str]:
        """Overlay lowerdir list for layers given bottom first: topmost first."""
        return [self.layer_root(k) for k in reversed(keys)]

    def all_layers(self) -> list[str]:
        return sorted(k for k in os.listdir(self.layers) if self.has(k))

    def remove_layer(self, key: str) -> None:
        shutil.rmtree(self.layer_dir(key), ignore_errors=True)

    def leftovers(self, orphans_too: bool = False) -> list[int]:
        """Processes a dead build of this store left running: a layer's build node (its PID 1 and
        monitor, whose spec lies in tmp/KEY.build/), its packer and ansible-playbook, a base's
        debootstrap, found by the store's tmp/*.build paths on their command lines. Only layer
        and base builds use those folders, and only under the store's lock: whoever holds the lock
        knows every such process is a leftover. ORPHANS_TOO: also the nodes of a verification or
        a rerun (tmp/verify-*, tmp/rerun-*) whose ctk process is gone (their monitor's parent is
        PID 1)."""
        tmp = os.path.realpath(self.tmp) + "/"
        me = os.getpid()
        out = []
        for pid in (int(d) for d in os.listdir("/proc") if d.isdigit()):
            if pid == me:
                continue
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    argv = f.read().decode(errors="replace").split("\0")
                ppid = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            paths = [a[a.index(tmp):] for a in argv if tmp in a]
            if not paths:
                continue
            name = paths[0][len(tmp):].split("/", 1)[0]
            if name.endswith(".build") or (orphans_too and ppid == 1 and "ctk.sandbox.nodeinit" in argv
                                           and name.startswith(("verify-", "rerun-"))):
                out.append(pid)
        return sorted(out)

    def reap(self, orphans_too: bool = False) -> list[int]:
        """Stop what leftovers() finds (SIGTERM, SIGKILL after 15 s: a node's PID 1 takes its
        whole PID namespace with it), then drop layers without meta.json and the leftovers' work
        folders. Call under lock(). Returns the pids stopped."""
        from ..sandbox.proc import terminate

        pids = self.leftovers(orphans_too)
        stopped = [pid for pid in pids if terminate(pid)]
        for d in os.listdir(self.layers):
            if not self.has(d):
                shutil.rmtree(os.path.join(self.layers, d), ignore_errors=True)
        for d in os.listdir(self.tmp):
            if d.endswith(".build"):
                shutil.rmtree(os.path.join(self.tmp, d), ignore_errors=True)
        return stopped
