"""The program behind a lab's wrapped Slurm commands (lab/bin/sbatch, srun, squeue, ...; see
targets/local/commands.py): it runs the lab's own COMMAND in the lab's client node, arguments
verbatim, in the node's view of the current folder, as the lab's user ($CTK_LAB_USER=root: as
root), through sandbox.enter.

Each wrapped command is a few fixed lines that call main() with the path of the lab's
wrapper.json, written by ctk beside them in lab/bin (root's, in the 0700 lab/):

    {"lab": LAB_DIR, "node": CLIENT_NODE, "user": LAB_USER,
     "shared": [[HOST_DIR, NODE_DIR], ...]}

The file is read as data only. Nothing here needs more than the standard library and
sandbox.enter, so a wrapped command starts fast and in any Python that can import ctk.
"""

from __future__ import annotations

import json
import os
import sys

USER_ENV = "CTK_LAB_USER"  # names the account the lab's commands run as (default: the lab's user)
# The commands whose working directory is the job's: they need a folder the nodes share.
NEED_CWD = ("sbatch", "srun", "salloc")
# The environment a wrapped command passes into the node: Slurm's own input variables.
PASSED_ENV = ("SLURM_", "SBATCH_", "SRUN_", "SALLOC_", "SQUEUE_", "SINFO_", "SACCT_", "SCONTROL_", "SCANCEL_")


class _Failed(Exception):
    def __init__(self, msg: str, code: int):
        super().__init__(msg)
        self.code = code


def read_config(path: str) -> tuple[str, str, str, list[tuple[str, str]]]:
    """(lab folder, node, user, shared folders as (host, node)) from the lab's wrapper.json."""
    try:
        with open(path, encoding="utf-8") as f:
            cfg = json.load(f)
        lab, node, user, shared = cfg["lab"], cfg["node"], cfg["user"], cfg["shared"]
        pairs = [(host, there) for host, there in shared]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise _Failed(f"cannot read the lab's {path}: {e} (ctk env or ctk deploy writes it again)", 125) from None
    if not (all(isinstance(x, str) for x in (lab, node, user)) and all(
            isinstance(h, str) and isinstance(t, str) and h.startswith("/") and t.startswith("/") for h, t in pairs)
            and lab.startswith("/") and node and "/" not in node and node not in (".", "..")):
        raise _Failed(f"the lab's {path} is not one ctk wrote (ctk env or ctk deploy writes it again)", 125)
    return lab, node, user, pairs


def node_pid(lab: str, node: str) -> int | None:
    """The pid of NODE's init (sandbox/nodeinit.py) while it runs, else None."""
    try:
        with open(os.path.join(lab, "nodes", node, "pid")) as f:
            pid = f.read().strip()
        with open("/proc/" + pid + "/cmdline", "rb") as f:
            up = pid.isdigit() and b"ctk.sandbox.nodeinit" in f.read()
    except (OSError, ValueError):
        return None
    return int(pid) if up else None


def node_cwd(command: str, args: list[str], user: str, shared: list[tuple[str, str]]) -> str | None:
    """The current folder as the node sees it (None: the user's home); a command that needs one
    and has no --chdir fails outside the shared folders."""
    try:
        here = os.path.realpath(os.getcwd())
    except OSError:
        here = ""
    wd = next((there + here[len(host):] for host, there in shared if here == host or here.startswith(host + "/")), None)
    need = command in NEED_CWD
    if wd is None and need and not any(a in ("-D", "--chdir") or a.startswith(("--chdir=", "-D")) for a in args):
        raise _Failed("the current folder " + (here or "(deleted)") + " is not shared with the lab's nodes. Shared: "
                      + "; ".join(h + " (" + t + " on the nodes)" for h, t in shared) + ". cd into one, or give --chdir", 2)
    if not need and wd and wd.startswith("/root") and user != "root":
        wd = None  # a command that reads no files of the folder: from the user's home
    return wd


def run(config_path: str, command: str, args: list[str]) -> int:
    """Run COMMAND ARGS in the lab's client node; its exit status."""
    lab, node, user, shared = read_config(config_path)
    user = os.environ.get(USER_ENV) or user
    pid = node_pid(lab, node)
    if pid is None:
        raise _Failed("the lab's node " + node + " is not running (ctk status " + os.path.dirname(lab)
                      + " shows it; ctk deploy brings it back)", 1)
    wd = node_cwd(command, args, user, shared)
    env = {k: v for k, v in os.environ.items() if k.startswith(PASSED_ENV) and k != "SLURM_CONF"}
    if os.environ.get("TERM"):
        env["TERM"] = os.environ["TERM"]
    # Imported once the node is known to be up (a lab that is down answers without it), and
    # here rather than at the top: targets.labclient imports USER_ENV from this module, and
    # `ctk job` has no use for ctypes.
    from .enter import EnterError, enter

    try:
        return enter(pid, [command, *args], user=user, cwd=wd, env=env)
    except EnterError as e:
        root = wd is not None and wd.startswith("/root") and user != "root"
        raise _Failed(str(e) + ((" (root's /root is not the lab's user's: cd into " + os.path.join(lab, "home", user)
                                 + ", or " + USER_ENV + "=root)") if root else ""), 125) from None


def main(config_path: str, command: str, args: list[str]) -> int:
    """A wrapped command's whole life: its exit status, or its error on stderr and the status
    that goes with it (1: the node is down, 2: no shared folder, 125: not started)."""
    try:
        return run(config_path, command, args)
    except _Failed as e:
        sys.stderr.write(command + ": " + str(e) + "\n")
        return e.code
