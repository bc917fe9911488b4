"""The pure parts of a lab node's isolation: its accounts, the paths nodeinit writes before the
pivot, the capability set, and the lab's user in the blueprint. (The nodes themselves are
tested for real in tests/integration/test_local_target.py.)"""

import os
import stat
import subprocess
import sys

import pytest

from ctk.images import accounts
from ctk.model import LAB_IDS, SERVICE_IDS
from ctk.sandbox import caps, nodeinit
from ctk.stacks.rolevars import SLURM_UID

PASSWD = """root:x:0:0:root:/root:/bin/bash
_apt:x:42:65534::/nonexistent:/usr/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin
systemd-network:x:998:998:systemd Network Management:/:/usr/sbin/nologin
munge:x:100:102::/nonexistent:/usr/sbin/nologin
slurm:x:64030:64030::/nonexistent:/usr/sbin/nologin
helper:x:101:65534::/nonexistent:/usr/sbin/nologin
"""
GROUP = """root:x:0:
users:x:100:
nogroup:x:65534:
systemd-network:x:998:
munge:x:102:
slurm:x:64030:
"""


def _tree(tmp_path):
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "passwd").write_text(PASSWD)
    (etc / "group").write_text(GROUP)
    os.chmod(etc / "passwd", 0o644)
    return tmp_path


@pytest.mark.root  # files owned by other users
def test_service_accounts_move_into_ctks_numbers_with_their_files(tmp_path):
    tree = _tree(tmp_path)
    key = tree / "etc" / "munge.key"
    key.write_text("k")
    os.chown(key, 100, 102)
    tool = tree / "tool"
    tool.write_text("#!/bin/sh\n")
    os.chown(tool, 64030, 64030)
    os.chmod(tool, 0o4755)  # chown clears setuid: renumbering must keep it
    moved = accounts.renumber(str(tree))
    assert moved["users"] == {"systemd-network": (998, 1_900_104), "munge": (100, 1_900_100),
                              "slurm": (64030, SLURM_UID), "helper": (101, 1_900_200)}
    assert moved["groups"]["munge"] == (102, 1_900_100) and "users" not in moved["groups"]
    rows = {ln.split(":")[0]: ln.split(":") for ln in (tree / "etc/passwd").read_text().splitlines()}
    assert rows["munge"][2:4] == ["1900100", "1900100"] and rows["_apt"][2] == "42" and rows["nobody"][2] == "65534"
    assert rows["helper"][3] == "65534"  # nogroup stays
    assert (os.stat(key).st_uid, os.stat(key).st_gid) == (1_900_100, 1_900_100)
    st = os.stat(tool)
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (SLURM_UID, 0o4755)
    assert stat.S_IMODE(os.stat(tree / "etc/passwd").st_mode) == 0o644
    assert accounts.renumber(str(tree)) == {"users": {}, "groups": {}}  # once is enough
    assert all(u in SERVICE_IDS for name, u, _ in accounts.image_accounts([str(tree)]) if 100 <= u < 65534 or
               name in ("munge", "slurm"))


def test_the_lab_user_and_services_take_numbers_apart():
    assert LAB_IDS.start == 1_900_000 and SERVICE_IDS.start > LAB_IDS.start and SERVICE_IDS.stop <= 2_097_151
    assert accounts.FIXED["slurm"] == SLURM_UID and all(v in SERVICE_IDS for v in accounts.FIXED.values())


def test_nodeinit_refuses_a_symlink_on_a_path_it_writes_before_the_pivot(tmp_path):
    (tmp_path / "etc").mkdir()
    os.symlink("/etc", tmp_path / "etc" / "slurm")
    with pytest.raises(OSError, match="symlink at /etc/slurm"):
        nodeinit.in_tree(str(tmp_path), "/etc/slurm", "dir")
    os.symlink("/", tmp_path / "home")
    with pytest.raises(OSError, match="symlink at /home"):
        nodeinit.in_tree(str(tmp_path), "home/user/x", "file")
    assert not os.path.exists("/home/user/x")
    p = nodeinit.in_tree(str(tmp_path), "var/spool/x", "file")
    assert os.path.isfile(p) and p.startswith(str(tmp_path))
    with pytest.raises(OSError):
        nodeinit.in_tree(str(tmp_path), "var/../..", "dir")


def test_the_labs_user_is_added_to_every_nodes_files(tmp_path):
    tree = _tree(tmp_path)
    (tree / "etc" / "shadow").write_text("root:*:19000:0:99999:7:::\nold:*:1::::::\n")
    (tree / "etc" / "passwd").write_text(PASSWD + "old:x:1900000:1900000::/home/old:/bin/sh\n")
    nodeinit.add_accounts(str(tree), [{"name": "researcher", "uid": 1_900_000, "home": "/home/researcher"}])
    passwd = (tree / "etc/passwd").read_text().splitlines()
    assert "researcher:x:1900000:1900000::/home/researcher:/bin/bash" in passwd
    assert not [ln for ln in passwd if ln.startswith("old:")]  # the same uid is taken over
    assert "researcher:x:1900000:" in (tree / "etc/group").read_text().splitlines()
    assert "researcher:*:19000:0:99999:7:::" in (tree / "etc/shadow").read_text().splitlines()


def test_node_capabilities_leave_out_what_reaches_the_host():
    keep = caps.numbers(caps.NODE)
    for name in ("sys_admin", "net_admin", "sys_module", "sys_ptrace", "mknod", "dac_read_search", "sys_rawio",
                 "net_raw", "sys_boot", "sys_time", "bpf", "perfmon", "setfcap"):
        assert caps.NAMES.index(name) not in keep, name
    assert caps.numbers(caps.BUILD) - keep == {caps.NAMES.index("setfcap"), caps.NAMES.index("sys_ptrace")}


@pytest.mark.root  # confining capabilities
def test_confine_drops_the_bounding_set_for_good():
    code = (f"import os, sys\nsys.path.insert(0, {os.path.dirname(os.path.dirname(os.path.dirname(caps.__file__)))!r})\nfrom ctk.sandbox import caps\ncaps.confine(caps.NODE)\n"
            "print(sorted(caps.bounding_set()))\n"
            "try:\n    os.mknod('/tmp/ctk-never', 0o600 | 0o060000, os.makedev(8, 0))\n    print('mknod ok')\n"
            "except PermissionError:\n    print('mknod refused')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines == [str(sorted(caps.numbers(caps.NODE))), "mknod refused"]


def test_entering_a_node_needs_no_import_from_the_host_after_it_joins():
    """`ctk exec` joins the node's mount namespace and then execs the program by PATH lookup
    (os.execvpe), whose first call imports warnings: the module must already be loaded by then,
    for the host's standard library is out of reach in the node (once, a change of imports
    elsewhere left it unloaded and every command run in a node failed)."""
    code = "import sys\nimport ctk.sandbox.enter\nprint('warnings' in sys.modules)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.stdout.strip() == "True", r.stdout + r.stderr
    # ... which a fresh interpreter has not loaded on its own: the check above means something
    r = subprocess.run([sys.executable, "-c", "import sys\nprint('warnings' in sys.modules)"],
                       capture_output=True, text=True)
    assert r.stdout.strip() == "False", r.stdout + r.stderr
