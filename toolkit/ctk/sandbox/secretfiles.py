"""Secret files (munge and Slurm keys, SSH keys, the database password) in a deployment folder,
made and checked without following a link: a deploy must never write a key where a planted
symlink points, nor trust a key that another user owns or may read.

Every folder from BASE (the deployment's lab/ or ssh/ folder, made by ctk) down to the secret
is opened with O_NOFOLLOW from the one above it and must be a folder owned by the user running
ctk; secret folders are 0700 and secrets are created with O_EXCL | O_NOFOLLOW at their final
mode. A pre-existing secret must be a regular file of that user with no group or other bits.
"""

from __future__ import annotations

import os
import stat

from ..errors import UserError

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
FIX_HINT = "remove it (ctk deploy makes a new one), or make it root's and 0400: chown root: FILE; chmod 0400 FILE"


def _refuse(path: str, why: str, hint: str = FIX_HINT) -> UserError:
    return UserError(f"{path}: {why}; ctk does not use it as a secret", hint=hint.replace("FILE", path))


def _check_dir(fd: int, path: str) -> None:
    st = os.fstat(fd)
    if st.st_uid != os.geteuid():
        raise _refuse(path, f"the folder is owned by uid {st.st_uid}, not by the user running ctk",
                      "remove it: ctk deploy makes its secret folders itself")


def open_dir(base: str, rel: str, create: bool = True) -> int:
    """An fd of the folder BASE/REL, each component opened without following a link, made 0700
    where missing (CREATE) and set to 0700 (REL's folders hold secrets); BASE itself may not be
    a link either. UserError on a link, a non-folder or a folder another user owns."""
    try:
        st = os.lstat(base)
    except FileNotFoundError:
        if not create:
            raise
        os.makedirs(base, 0o700)
        st = os.lstat(base)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise _refuse(base, "is a symlink or not a folder", "remove it: ctk deploy makes the folder")
    fd = os.open(base, _DIR)
    path = base
    try:
        _check_dir(fd, base)
        for part in [p for p in rel.split("/") if p and p != "."]:
            if part == "..":
                raise ValueError(f"{rel}: no '..' in a secret's folder")
            path = os.path.join(path, part)
            try:
                nxt = os.open(part, _DIR, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                os.mkdir(part, 0o700, dir_fd=fd)
                nxt = os.open(part, _DIR, dir_fd=fd)
            except OSError as e:  # ELOOP: a symlink; ENOTDIR: a file
                raise _refuse(path, f"is a symlink or not a folder ({e.strerror})",
                              "remove it: ctk deploy makes its secret folders itself") from None
            os.close(fd)
            fd = nxt
            _check_dir(fd, path)
            os.fchmod(fd, 0o700)
    except BaseException:
        os.close(fd)
        raise
    return fd


def check_file(dir_fd: int, name: str, path: str) -> bool:
    """Whether the secret NAME exists in DIR_FD's folder: True if it is a regular file of the
    user running ctk that no one else may read or write; UserError if it is anything else."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    if stat.S_ISLNK(st.st_mode):
        raise _refuse(path, "is a symlink")
    if not stat.S_ISREG(st.st_mode):
        raise _refuse(path, "is not a regular file")
    if st.st_uid != os.geteuid():
        raise _refuse(path, f"is owned by uid {st.st_uid}, not by the user running ctk")
    if st.st_mode & 0o077:
        raise _refuse(path, f"is readable or writable by others (mode {stat.S_IMODE(st.st_mode):04o})")
    return True


def ensure(base: str, rel: str, make, mode: int = 0o400) -> str:
    """The secret BASE/REL holding the bytes MAKE() returns, made once at MODE (its folders 0700);
    a pre-existing one is checked (check_file). Its path."""
    folder, name = os.path.split(rel)
    fd = open_dir(base, folder)
    path = os.path.join(base, rel)
    try:
        if not check_file(fd, name, path):
            out = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=fd)
            with os.fdopen(out, "wb") as f:
                f.write(make())
    finally:
        os.close(fd)
    return path


def check_tree(base: str, rel: str) -> None:
    """Refuse (UserError, nothing changed) a planted link, a foreign folder or a bad secret
    anywhere in BASE/REL, before a deploy starts anything; a missing folder is fine."""
    try:
        fd = open_dir(base, rel, create=False)
    except FileNotFoundError:
        return
    try:
        _walk(fd, os.path.join(base, rel))
    finally:
        os.close(fd)


def _walk(fd: int, path: str) -> None:
    for name in sorted(os.listdir(fd)):
        p = os.path.join(path, name)
        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        if stat.S_ISDIR(st.st_mode):
            sub = os.open(name, _DIR, dir_fd=fd)
            try:
                _check_dir(sub, p)
                _walk(sub, p)
            finally:
                os.close(sub)
        elif not name.endswith(".pub"):  # public keys are not secrets
            check_file(fd, name, p)
