"""Module kinds ctk knows, looked up by a blueprint module's `source`."""

from __future__ import annotations

import re

from . import cluster_toolkit, ctk_kinds
from .schema import Input, ModuleKind, Output

ALL_KINDS: dict[str, ModuleKind] = {**cluster_toolkit.KINDS, **ctk_kinds.KINDS}

_REMOTE_RE = re.compile(r"^(git::|gcs::|s3::|hg::|https?://|git@|github\.com/|bitbucket\.org/)")
# The folders CT's own module paths start with.
_ROOTS = ("community/modules/", "modules/")


def is_remote(source: str) -> bool:
    """True for a source fetched from elsewhere (git, GitHub, GCS, HTTP)."""
    return isinstance(source, str) and bool(_REMOTE_RE.match(source.strip()))


def _module_path(source: str) -> str:
    """The in-repository path of a source: drops a remote's host and ?ref, and ./ ../ prefixes."""
    s = source.strip()
    if is_remote(s):
        s = s.split("?", 1)[0]
        if "//" in s.split("://", 1)[-1]:
            # go-getter subdirectory syntax: REPO//path/in/repo
            s = s.split("://", 1)[-1].split("//", 1)[1]
        else:
            return ""
    s = s.rstrip("/")
    while s.startswith(("./", "../")):
        s = s.split("/", 1)[1]
    return s


def lookup(source: str) -> ModuleKind | None:
    """The kind for a module source, or None when ctk does not know it.

    Exact sources come first; then a relative embedded path whose tail is a known CT
    source (`../modules/network/vpc`), then a git/GitHub source by its path part
    (`github.com/GoogleCloudPlatform/cluster-toolkit//modules/network/vpc?ref=v1.2`).
    """
    if not isinstance(source, str):
        return None
    s = source.strip()
    if s in ctk_kinds.KINDS:
        return ctk_kinds.KINDS[s]
    if s in cluster_toolkit.KINDS:
        return cluster_toolkit.KINDS[s]
    path = _module_path(s)
    if not path:
        return None
    if path in cluster_toolkit.KINDS:
        return cluster_toolkit.KINDS[path]
    for root in _ROOTS:
        # the tail starting at the first CT root folder, e.g. x/y/community/modules/... -> community/modules/...
        at = path.find(root)
        while at != -1:
            if at == 0 or path[at - 1] == "/":
                kind = cluster_toolkit.KINDS.get(path[at:])
                if kind is not None:
                    return kind
            at = path.find(root, at + 1)
    return None


__all__ = ["ALL_KINDS", "Input", "ModuleKind", "Output", "is_remote", "lookup"]
