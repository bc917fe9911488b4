"""Folding an overlayfs upper dir into the tree below it, for a layer built over a seed.

A jax layer rebuilt after a pin change starts from the venv of an earlier build of the same layer
(its "donor"): the donor's venv, hard-linked into a seed tree, is the build node's topmost lower
dir, so the kernel copies up whatever the role changes and the donor's files are never written.
Afterwards the node's upper dir (what the role changed) is applied to the seed tree, which then
holds the whole layer: unchanged files stay links to the donor's (layers are never written once
committed), changed and new ones are the upper's. The folded tree is a layer over the same layers
the node's lowers had below the seed, so overlayfs's marks stay in it where they hide something of
those: a whiteout of a path one of them has replaces whatever the seed had there (the others go
with what they deleted), and an opaque folder keeps its mark.

Only what overlayfs writes with its defaults is understood: whiteouts (a 0/0 character device)
and opaque dirs (trusted.overlay.opaque). An upper written with redirect_dir or metacopy on is
refused rather than folded wrong.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat

from ..errors import Failure
from ..runner import run

_OPAQUE = "trusted.overlay.opaque"
_UNSUPPORTED = ("trusted.overlay.redirect", "trusted.overlay.metacopy")


class OverlayError(Failure):
    """An upper dir that cannot be folded (an overlayfs feature ctk does not fold)."""


def hardlink_tree(src: str, dst: str) -> None:
    """DST: a copy of the tree SRC whose folders are new and whose files are hard links to SRC's
    (SRC and DST on one filesystem). Nothing of SRC changes but its files' link counts."""
    run(["cp", "-a", "--link", "--no-target-directory", src, dst], what=f"linking {src} to {dst}")


def _xattr(path: str, name: str) -> bytes | None:
    try:
        return os.getxattr(path, name, follow_symlinks=False)
    except OSError as e:
        if e.errno in (errno.ENODATA, errno.ENOTSUP, errno.EOPNOTSUPP):
            return None
        raise


def _is_whiteout(st: os.stat_result) -> bool:
    return stat.S_ISCHR(st.st_mode) and st.st_rdev == 0


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    elif os.path.lexists(path):
        os.unlink(path)


def _check_supported(path: str) -> None:
    for name in _UNSUPPORTED:
        if _xattr(path, name) is not None:
            raise OverlayError(f"{path} has {name}: this kernel's overlayfs wrote it with a feature ctk "
                               "does not fold into a layer (redirect_dir or metacopy)",
                               hint="turn the overlay module's redirect_dir and metacopy off, or remove the "
                                    "jax layers of this store so the layer is built without a seed")


def _check_moved_tree(top: str, rel: str, below: list[str]) -> None:
    """Every entry of a folder moved in whole (at REL) is one ctk can keep as it is; its
    whiteouts stay only where they hide something BELOW (under an opaque folder, nothing)."""
    for d, _dirs, files in os.walk(top):
        _check_supported(d)
        for n in files:
            p = os.path.join(d, n)
            st = os.lstat(p)
            if _is_whiteout(st):
                if not _below_has(below, os.path.join(rel, os.path.relpath(p, top)), top, p):
                    os.unlink(p)
            elif not stat.S_ISLNK(st.st_mode):
                _check_supported(p)


def _below_has(below: list[str], rel: str, top: str | None = None, path: str | None = None) -> bool:
    """Whether a lower dir of BELOW has REL, seen through the folders above it (a folder marked
    opaque between the moved tree's TOP and PATH hides them all)."""
    if top is not None and path is not None:
        d = os.path.dirname(path)
        while True:
            if _xattr(d, _OPAQUE) == b"y":
                return False
            if d == top:
                break
            d = os.path.dirname(d)
    return any(real_path(b, rel, link_ok=True) is not None for b in below)


def real_path(top: str, rel: str, link_ok: bool = False) -> str | None:
    """TOP/REL where each folder on the way below TOP is a folder and REL itself exists, none of
    them a symbolic link (a tree a build node wrote may hold links that point into the host's
    own files), REL itself one only where LINK_OK; None otherwise."""
    path = top
    parts = [x for x in rel.split("/") if x]
    for i, part in enumerate(parts):
        path = os.path.join(path, part)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return None
        last = i == len(parts) - 1
        if (stat.S_ISLNK(st.st_mode) and not (last and link_ok)) or (not last and not stat.S_ISDIR(st.st_mode)):
            return None
    return path


def copy_dir_meta(src: str, dst: str) -> None:
    """DST's owner, mode and times: SRC's (its extended attributes stay DST's)."""
    st = os.lstat(src)
    os.chown(dst, st.st_uid, st.st_gid)
    os.chmod(dst, stat.S_IMODE(st.st_mode))
    os.utime(dst, ns=(st.st_atime_ns, st.st_mtime_ns))


def apply_upper(upper: str, tree: str, below: list[str], _rel: str = "") -> None:
    """Apply overlayfs's upper dir UPPER to TREE, the topmost lower dir it was written over
    (UPPER's entries are moved, so UPPER is spent): TREE, mounted over BELOW (the lower dirs that
    were below it, top first), then shows what the mount showed. Whiteouts of what BELOW has and
    opaque folders are kept (they hide what lies below TREE)."""
    for name in sorted(os.listdir(upper)):
        src, dst, rel = os.path.join(upper, name), os.path.join(tree, name), os.path.join(_rel, name)
        st = os.lstat(src)
        if _is_whiteout(st):
            _remove(dst)
            if _below_has(below, rel):
                os.rename(src, dst)
        elif stat.S_ISDIR(st.st_mode):
            _check_supported(src)
            if _xattr(src, _OPAQUE) == b"y" or not (os.path.isdir(dst) and not os.path.islink(dst)):
                _remove(dst)
                os.rename(src, dst)
                _check_moved_tree(dst, rel, below)
            else:
                apply_upper(src, dst, below, rel)
                copy_dir_meta(src, dst)
        else:
            if not stat.S_ISLNK(st.st_mode):
                _check_supported(src)
            if os.path.isdir(dst) and not os.path.islink(dst):
                shutil.rmtree(dst)
            os.replace(src, dst)
