"""Folding a real overlayfs upper dir into its hard-linked seed (ctk.images.overlay): the folded
tree is what the mount showed, and the tree the seed's links point to is never written."""

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
"""


def test_a_folded_upper_is_what_the_mount_showed_and_the_donor_is_untouched(tmp_path):
    donor, seed, upper, work, mnt = (str(tmp_path / n) for n in ("donor", "seed", "upper", "work", "mnt"))
    build_donor(donor)
    before = manifest(donor)
    overlay.hardlink_tree(donor, seed)
    assert os.stat(os.path.join(seed, "venv/lib/edit.txt")).st_ino == os.stat(os.path.join(donor, "venv/lib/edit.txt")).st_ino
    for d in (upper, work, mnt):
        os.makedirs(d)
    seen = str(tmp_path / "seen")
    script = (f"set -eu\nmount --make-rprivate /\n"
              f"mount -t overlay overlay -o lowerdir={shlex.quote(seed)},upperdir={shlex.quote(upper)},"
              f"workdir={shlex.quote(work)} {shlex.quote(mnt)}\n"
              f"ROOT={shlex.quote(mnt)}\n{ROLE}\ncp -a {shlex.quote(mnt)} {shlex.quote(seen)}\n")
    subprocess.run(["unshare", "--mount", "sh", "-c", script], check=True)
    # The upper holds overlayfs's own marks: a whiteout, an opaque folder.
    whiteout = os.lstat(os.path.join(upper, "venv/lib/pkg_old"))
    assert stat.S_ISCHR(whiteout.st_mode) and whiteout.st_rdev == 0
    assert os.getxattr(os.path.join(upper, "venv/lib/gone_dir"), "trusted.overlay.opaque") == b"y"

    overlay.apply_upper(upper, seed)
    assert manifest(seed) == manifest(seen)
    assert not os.path.exists(os.path.join(seed, "venv/lib/gone_dir/x"))
    assert manifest(donor) == before  # no write reached the donor through its links
    for d, dirs, files in os.walk(seed):
        for n in dirs + files:
            p = os.path.join(d, n)
            assert not stat.S_ISCHR(os.lstat(p).st_mode), f"a whiteout left in the folded tree: {p}"
            if not os.path.islink(p):
                assert not [x for x in os.listxattr(p, follow_symlinks=False) if x.startswith("trusted.overlay.opaque")], p
    # Unchanged files are still the donor's (links), changed ones are new files.
    keep = os.path.join("venv/lib/pkg_keep/k.py")
    assert os.stat(os.path.join(seed, keep)).st_ino == os.stat(os.path.join(donor, keep)).st_ino
    edit = "venv/lib/edit.txt"
    assert os.stat(os.path.join(seed, edit)).st_ino != os.stat(os.path.join(donor, edit)).st_ino


def test_an_upper_written_with_redirects_is_refused(tmp_path):
    upper, tree = tmp_path / "upper", tmp_path / "tree"
    (upper / "moved").mkdir(parents=True)
    (tree / "moved").mkdir(parents=True)
    os.setxattr(upper / "moved", "trusted.overlay.redirect", b"/elsewhere")
    with pytest.raises(overlay.OverlayError) as e:
        overlay.apply_upper(str(upper), str(tree))
    assert "trusted.overlay.redirect" in str(e.value) and "redirect_dir" in str(e.value)
