"""The layer store under the state dir (default /var/lib/ctk; CTK_STATE_DIR overrides).

    layers/<key>/root        the layer's files (an overlay upper dir, or the base tree)
    layers/<key>/meta.json   what built it, when, how long it took
    images/<name>.json       an image: its layer keys, bottom first, and its spec

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
from ..locks import lock_file


def state_dir() -> str:
    return os.environ.get("CTK_STATE_DIR", "/var/lib/ctk")


class Store:
    def __init__(self, root: str | None = None):
        self.root = root or state_dir()
        self.layers = os.path.join(self.root, "layers")
        self.images = os.path.join(self.root, "images")
        self.tmp = os.path.join(self.root, "tmp")
        for d in (self.layers, self.images, self.tmp):
            os.makedirs(d, exist_ok=True)

    @contextmanager
    def lock(self):
        """One build at a time per store."""
        with lock_file(os.path.join(self.root, ".lock")):
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

    def image_names(self) -> list[str]:
        return sorted(f[:-5] for f in os.listdir(self.images) if f.endswith(".json"))

    def lowerdirs(self, keys: list[str]) -> list[str]:
        """Overlay lowerdir list for layers given bottom first: topmost first."""
        return [self.layer_root(k) for k in reversed(keys)]

    def all_layers(self) -> list[str]:
        return sorted(k for k in os.listdir(self.layers) if self.has(k))

    def remove_layer(self, key: str) -> None:
        shutil.rmtree(self.layer_dir(key), ignore_errors=True)
