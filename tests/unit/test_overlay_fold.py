"""Folding a real overlayfs upper dir into its hard-linked seed (ctk.images.overlay): the folded
tree, mounted over the lower dirs that were below the seed, shows what the mount showed, and the
tree the seed's links point to is never written."""

import hashlib
import os
import shlex
import stat
import subprocess

import pytest

from ctk.images import overlay

pytestmark = pytest.mark.root


def manifest(top: str) -> dict:
    """Every path under TOP: its type, mode, owner and content (or link target)."""
    out = {}
    for d, dirs, files in os.walk(top):
        for n in dirs + files:
            p = os.path.join(d, n)
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode):
                what = "link:" + os.readlink(p)
            elif stat.S_ISDIR(st.st_mode):
                what = "dir"
            else:
                what = "file:" + hashlib.sha256(open(p, "rb").read()).hexdigest()[:16]
            out[os.path.relpath(p, top)] = (what, stat.S_IMODE(st.st_mode), st.st_uid)
    return out


def build_donor(top: str) -> None:
    for d in ("venv/bin", "venv/lib/pkg_old", "venv/lib/pkg_keep/sub", "venv/lib/gone_dir/x", "venv/share"):
        os.makedirs(os.path.join(top, d))
    files = {"venv/bin/python": "py", "venv/lib/pkg_old/a.py": "old a", "venv/lib/pkg_keep/k.py": "keep",
             "venv/lib/pkg_keep/sub/s.py": "sub", "venv/lib/gone_dir/x/y.py": "y", "venv/lib/edit.txt": "v1",
             "venv/lib/becomes_dir": "file", "venv/share/doc": "doc"}
    for rel, text in files.items():
        with open(os.path.join(top, rel), "w") as f:
            f.write(text)
    os.symlink("python", os.path.join(top, "venv/bin/python3"))


def build_bottom(top: str) -> None:
    """A layer below the seed (as the base and the layers below the jax layer are): the role
    deletes some of its files and a folder, and makes one of its folders again."""
    for d in ("etc/gone.d", "etc/remade.d", "etc/kept.d", "venv/lib"):
        os.makedirs(os.path.join(top, d))
    for rel, text in {"etc/gone": "g", "etc/gone.d/a": "a", "etc/remade.d/old": "o", "etc/kept.d/k": "k",
                      "etc/kept": "kept", "venv/lib/from_below.txt": "below"}.items():
        with open(os.path.join(top, rel), "w") as f:
            f.write(text)


# What a role does to the mounted tree: an in-place write (the hard-linked file is copied up
# first), deletions (whiteouts), a folder deleted and made again (opaque), a file that becomes a
# folder and a folder that becomes a file, new files, a changed mode, a changed link.
ROLE = """
set -eu
cd "$ROOT/venv"
printf v2 >> lib/edit.txt
rm -r lib/pkg_old
mkdir lib/pkg_new && printf new > lib/pkg_new/n.py
rm -r lib/gone_dir && mkdir lib/gone_dir && printf fresh > lib/gone_dir/only.py
rm lib/becomes_dir && mkdir lib/becomes_dir && printf inside > lib/becomes_dir/f
rm -r share && printf now-a-file > share
chmod 0700 lib/pkg_keep/sub
ln -sfn python3.13 bin/python3
printf meta > lib/pkg_keep/METADATA
rm lib/from_below.txt
cd "$ROOT/etc"
rm gone && rm -r gone.d
rm -r remade.d && mkdir remade.d && printf new > remade.d/new
printf more >> kept.d/k
"""


def mount_script(lowers: list[str], upper: str | None, work: str | None, mnt: str) -> str:
    opts = "lowerdir=" + ":".join(shlex.quote(x) for x in lowers)
    opts += f",upperdir={shlex.quote(upper)},workdir={shlex.quote(work)}" if upper else ""
    return f"mount -t overlay overlay -o {opts} {shlex.quote(mnt)}\n"


def test_a_folded_upper_is_what_the_mount_showed_and_the_donor_is_untouched(tmp_path):
    donor, seed, bottom, upper, work, mnt = (str(tmp_path / n) for n in ("donor", "seed", "bottom", "upper", "work", "mnt"))
    build_donor(donor)
    build_bottom(bottom)
    before, bottom_before = manifest(donor), manifest(bottom)
    overlay.hardlink_tree(donor, seed)
    assert os.stat(os.path.join(seed, "venv/lib/edit.txt")).st_ino == os.stat(os.path.join(donor, "venv/lib/edit.txt")).st_ino
    for d in (upper, work, mnt):
        os.makedirs(d)
    seen = str(tmp_path / "seen")
    script = ("set -eu\nmount --make-rprivate /\n" + mount_script([seed, bottom], upper, work, mnt) +
              f"ROOT={shlex.quote(mnt)}\n{ROLE}\ncp -a {shlex.quote(mnt)} {shlex.quote(seen)}\n")
    subprocess.run(["unshare", "--mount", "sh", "-c", script], check=True)
    # The upper holds overlayfs's own marks: whiteouts, opaque folders.
    for rel in ("venv/lib/pkg_old", "etc/gone", "etc/gone.d", "venv/lib/from_below.txt"):
        whiteout = os.lstat(os.path.join(upper, rel))
        assert stat.S_ISCHR(whiteout.st_mode) and whiteout.st_rdev == 0, rel
    for rel in ("venv/lib/gone_dir", "etc/remade.d"):
        assert os.getxattr(os.path.join(upper, rel), "trusted.overlay.opaque") == b"y", rel

    overlay.apply_upper(upper, seed, [bottom])
    # The folded tree over the layer below it is the mount the role saw.
    folded = str(tmp_path / "folded")
    script = ("set -eu\nmount --make-rprivate /\n" + mount_script([seed, bottom], None, None, mnt) +
              f"cp -a {shlex.quote(mnt)} {shlex.quote(folded)}\n")
    subprocess.run(["unshare", "--mount", "sh", "-c", script], check=True)
    assert manifest(folded) == manifest(seen)
    assert not os.path.exists(os.path.join(folded, "etc/gone")) and not os.path.exists(os.path.join(folded, "etc/remade.d/old"))
    assert not os.path.exists(os.path.join(seed, "venv/lib/gone_dir/x"))
    # What hides the layer below stays in the folded tree; the donor and that layer are unwritten.
    gone = os.lstat(os.path.join(seed, "etc/gone"))
    assert stat.S_ISCHR(gone.st_mode) and gone.st_rdev == 0
    assert os.getxattr(os.path.join(seed, "etc/remade.d"), "trusted.overlay.opaque") == b"y"
    # ... and only that: a whiteout of what the seed alone had goes with it (a reader of the
    # layer's own tree, as verification and the next build's seed are, never meets it).
    for rel in ("venv/lib/pkg_old", "venv/share/doc"):
        assert not os.path.lexists(os.path.join(seed, rel)), rel
    assert manifest(donor) == before  # no write reached the donor through its links
    assert manifest(bottom) == bottom_before
    # Unchanged files are still the donor's (links), changed ones are new files.
    keep = os.path.join("venv/lib/pkg_keep/k.py")
    assert os.stat(os.path.join(seed, keep)).st_ino == os.stat(os.path.join(donor, keep)).st_ino
    edit = "venv/lib/edit.txt"
    assert os.stat(os.path.join(seed, edit)).st_ino != os.stat(os.path.join(donor, edit)).st_ino


def test_real_path_refuses_a_link_on_the_way(tmp_path):
    (tmp_path / "tree/opt/ctk/jax").mkdir(parents=True)
    (tmp_path / "host").mkdir()
    os.symlink(str(tmp_path / "host"), tmp_path / "tree/etc")
    (tmp_path / "host/x").write_text("host's")
    assert overlay.real_path(str(tmp_path / "tree"), "opt/ctk/jax") == str(tmp_path / "tree/opt/ctk/jax")
    assert overlay.real_path(str(tmp_path / "tree"), "etc/x") is None  # through a link
    assert overlay.real_path(str(tmp_path / "tree"), "etc") is None  # a link itself
    assert overlay.real_path(str(tmp_path / "tree"), "opt/nothing") is None
    assert overlay.real_path(str(tmp_path / "tree"), "etc", link_ok=True) == str(tmp_path / "tree/etc")


def test_an_upper_written_with_redirects_is_refused(tmp_path):
    upper, tree = tmp_path / "upper", tmp_path / "tree"
    (upper / "moved").mkdir(parents=True)
    (tree / "moved").mkdir(parents=True)
    os.setxattr(upper / "moved", "trusted.overlay.redirect", b"/elsewhere")
    with pytest.raises(overlay.OverlayError) as e:
        overlay.apply_upper(str(upper), str(tree), [])
    assert "trusted.overlay.redirect" in str(e.value) and "redirect_dir" in str(e.value)
