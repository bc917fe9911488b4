"""Atomic file and folder writes: readers see the old content or the new, never half of it."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import shutil
import tempfile

_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def write_file(path: str, data: str | bytes, mode: int = 0o644) -> None:
    """Write via a temp file in the same folder, fsync, then rename over `path`."""
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", dir=d)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException as e:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(e, OSError) and e.filename is None:  # a write or fsync: name the file it was for
            raise OSError(e.errno, e.strerror, path) from None
        raise


def write_if_changed(path: str, text: str | bytes, mode: int = 0o644) -> bool:
    """Write atomically unless the file already holds exactly this text (or bytes) and mode."""
    data = text.encode() if isinstance(text, str) else text
    try:
        with open(path, "rb") as f:
            same = f.read() == data
        if same and (os.stat(path).st_mode & 0o777) == mode:
            return False
    except FileNotFoundError:
        pass
    write_file(path, text, mode)
    return True


def _exchange(a: str, b: str) -> bool:
    """Swap two paths in one step (Linux renameat2 RENAME_EXCHANGE); False if unsupported."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    rc = fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    return rc == 0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def staging_dir(final: str) -> str:
    """A fresh, empty folder beside `final` to build its new content in.

    Its name carries our pid, so folders left by a killed writer are recognised and removed."""
    parent = os.path.dirname(os.path.abspath(final)) or "."
    os.makedirs(parent, exist_ok=True)
    prefix = f".{os.path.basename(os.path.abspath(final))}.new-"
    for name in os.listdir(parent):
        if name.startswith(prefix):
            pid = name[len(prefix):].split("-", 1)[0]
            if pid.isdigit() and not _alive(int(pid)):
                shutil.rmtree(os.path.join(parent, name), ignore_errors=True)
    return tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-", dir=parent)


def replace_dir(staged: str, final: str) -> None:
    """Put the fully written folder `staged` in place of `final` (which may not exist)."""
    if not os.path.exists(final):
        os.rename(staged, final)
        return
    if _exchange(staged, final):
        shutil.rmtree(staged)  # now holds the old content
        return
    old = staged + ".old"
    os.rename(final, old)
    os.rename(staged, final)
    shutil.rmtree(old)
