"""An OSError reaches the user as a ctk failure (exit 1, no traceback) naming the path, or where
the system gave none, the step of ctk it happened in, with what to do."""

import errno
import os
import subprocess

import pytest

from ctk import atomic
from ctk.cli import main
from ctk.errors import EXIT_FAIL, os_failure
from ctk.paths import BLUEPRINTS


def test_the_message_names_the_path_the_code_and_a_hint():
    f = os_failure(OSError(errno.EACCES, "Permission denied", "/var/lib/ctk/layers"))
    assert f.exit_code == EXIT_FAIL
    assert f.message == "Permission denied (EACCES): /var/lib/ctk/layers" and "root (sudo)" in f.hint
    f = os_failure(OSError(errno.EXDEV, "Invalid cross-device link", "/a", None, "/b"))
    assert f.message == "Invalid cross-device link (EXDEV): /a -> /b" and f.hint == ""


def test_without_a_path_it_names_the_step_of_ctk():
    def write_somewhere():
        raise OSError(errno.ENOSPC, "No space left on device")

    try:
        write_somewhere()
    except OSError as e:
        f = os_failure(e)
    assert f.message.startswith("No space left on device (ENOSPC): no path given by the system")
    assert "df -h" in f.hint


@pytest.fixture
def full_disk(tmp_path):
    d = tmp_path / "full"
    d.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(d)], check=True)
    try:
        fd = os.open(d / "fill", os.O_WRONLY | os.O_CREAT)
        try:
            while True:
                os.write(fd, b"\0" * 4096)
        except OSError:
            pass
        finally:
            os.close(fd)
        yield d
    finally:
        subprocess.run(["umount", str(d)], check=True)


@pytest.mark.root  # mounts a small tmpfs
def test_a_full_disk_names_the_file_and_leaves_nothing_half_written(full_disk, capsys):
    out = full_disk / "dep"
    assert main(["create", os.path.join(BLUEPRINTS, "lab.yaml"), "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert f"No space left on device (ENOSPC): {out}/" in err and "Traceback" not in err, err
    assert sorted(os.listdir(full_disk)) == ["fill"]  # no folder, no staging folder left
    with pytest.raises(OSError) as e:
        atomic.write_file(str(full_disk / "state.json"), "x" * 100000)
    assert e.value.filename == str(full_disk / "state.json")
    assert sorted(os.listdir(full_disk)) == ["fill"]
