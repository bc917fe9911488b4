"""What a process in a node may do as root: the capability bounding set every node process gets
(daemons, jobs, `ctk exec`, the lab's Slurm commands), no_new_privs, and the system calls that
set them (ctypes: the standard library has none of them).

Kept: what sshd, slurmd and its job steps, munged, MariaDB, apt and dpkg need (owners and modes
of files, switching users, signals in the node, chroot for sshd's privilege separation, which
cannot leave a node whose root was pivoted). Dropped, among the rest: CAP_SYS_ADMIN (mount,
namespaces, bpf), CAP_NET_ADMIN, CAP_SYS_MODULE, CAP_SYS_PTRACE, CAP_SYS_RAWIO, CAP_MKNOD (a
node would make a device node of the host's disk), CAP_DAC_READ_SEARCH (open_by_handle_at opens
any file of a file system a bind mount shares with the host), CAP_NET_RAW, CAP_SYS_BOOT,
CAP_SYS_TIME. Build nodes (and the bare machines the ssh target's tests configure) keep
CAP_SETFCAP, since package scripts (ping's) set file capabilities, which no_new_privs keeps from
taking effect; and CAP_SYS_PTRACE, since start-stop-daemon, as root, reads /proc/PID/exe of a
daemon that runs as its own user (slurmctld as slurm) to know it runs. Their PID namespace holds
it to the node's own processes.
"""

from __future__ import annotations

import ctypes
import os

NAMES = ("chown", "dac_override", "dac_read_search", "fowner", "fsetid", "kill", "setgid", "setuid",
         "setpcap", "linux_immutable", "net_bind_service", "net_broadcast", "net_admin", "net_raw",
         "ipc_lock", "ipc_owner", "sys_module", "sys_rawio", "sys_chroot", "sys_ptrace", "sys_pacct",
         "sys_admin", "sys_boot", "sys_nice", "sys_resource", "sys_time", "sys_tty_config", "mknod",
         "lease", "audit_write", "audit_control", "setfcap", "mac_override", "mac_admin", "syslog",
         "wake_alarm", "block_suspend", "audit_read", "perfmon", "bpf", "checkpoint_restore")
NODE = ("chown", "dac_override", "fowner", "fsetid", "kill", "setgid", "setuid", "setpcap",
        "net_bind_service", "sys_chroot", "audit_write")
BUILD = NODE + ("setfcap", "sys_ptrace")

PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
_CAP_V3 = 0x20080522


class _Header(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _Data(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


_libc = ctypes.CDLL(None, use_errno=True)


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def last_cap() -> int:
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            return int(f.read())
    except (OSError, ValueError):
        return len(NAMES) - 1


def numbers(names: tuple[str, ...] | list[str]) -> set[int]:
    return {NAMES.index(n) for n in names}


def confine(keep: tuple[str, ...] | list[str]) -> None:
    """Limit this process and everything it starts to the capabilities KEEP, for good: the
    bounding set, the permitted and effective sets, no inheritable or ambient ones, and
    no_new_privs (a setuid binary or file capabilities never add any)."""
    want = numbers(keep)
    for cap in range(last_cap() + 1):
        if cap not in want:
            _check(_libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0), f"dropping capability {cap}")
    _libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)  # EINVAL on kernels without ambient caps
    mask = [0, 0]
    for cap in want:
        mask[cap // 32] |= 1 << (cap % 32)
    data = (_Data * 2)(*[_Data(m, m, 0) for m in mask])
    _check(_libc.capset(ctypes.byref(_Header(_CAP_V3, 0)), data), "capset")
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")


def bounding_set(pid: int | str = "self") -> set[int]:
    """The capability bounding set of a process (from /proc/PID/status)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("CapBnd:"):
                bits = int(line.split()[1], 16)
                return {i for i in range(64) if bits >> i & 1}
    return set()
