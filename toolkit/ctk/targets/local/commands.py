"""Reaching a running lab from the host: `ctk exec` (a command in one of its nodes) and `ctk
env` (lab/bin, the lab's Slurm commands, wrapped to run in its client node: the program is
sandbox/labwrapper.py, its values the lab's bin/wrapper.json)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys

from ... import atomic
from ...errors import UserError, did_you_mean
from ...render.hostlist import compress
from ...sandbox import labwrapper
from ...sandbox import node as nodes
from ..labclient import USER_ENV, client_node
from ..labstate import lab_dir, load_state

# The commands `ctk env` puts on PATH.
WRAPPED = ("sbatch", "srun", "salloc", "squeue", "sinfo", "scontrol", "scancel", "sacct", "sstat", "sprio",
           "sshare", "sacctmgr", "sreport", "sattach", "sbcast")
WRAPPER_CONFIG = "wrapper.json"  # in lab/bin: the lab's values for the wrapped commands


def wrapper(config: str, command: str, python: str) -> str:
    """A thin command, run by PYTHON, that runs the lab's COMMAND in its client node (the program
    is sandbox.labwrapper; the lab's values are in CONFIG, its wrapper.json). Nothing of the lab
    is in its text but the path of CONFIG, as a Python string literal."""
    # The folder that holds the ctk package this ctk runs from: the wrapper imports its labwrapper.
    pkg = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(labwrapper.__file__))))
    return f"""#!{python} -I
# Written by ctk: runs Slurm's `{command}` in a lab's client node, with the arguments as given, in
# the same folder as seen from the node, as the lab's user (${USER_ENV}=root: as root). The lab
# is the one of the wrapper.json named below; the program is ctk.sandbox.labwrapper.
import sys
sys.path.insert(0, {pkg!r})
from ctk.sandbox.labwrapper import main
sys.exit(main({config!r}, {command!r}, sys.argv[1:]))
"""


def wrapper_config(ldir: str, node: str, user: str) -> dict:
    """The lab's wrapper.json: its folder LDIR, the client NODE the commands run in, the lab's
    USER, and the folders the host shares with the nodes."""
    ldir = os.path.abspath(ldir)
    return {"lab": ldir, "node": node, "user": user,
            "shared": [[os.path.join(ldir, "home"), "/home"], [os.path.join(ldir, "root"), "/root"]]}


def write_wrappers(deployment_dir: str, client: str, user: str) -> str:
    """The lab's bin/ folder of wrapped Slurm commands and their wrapper.json (rewritten when they
    change); its path."""
    ldir = os.path.abspath(lab_dir(deployment_dir))
    bindir = os.path.join(ldir, "bin")
    os.makedirs(bindir, exist_ok=True)
    config = os.path.join(bindir, WRAPPER_CONFIG)
    atomic.write_if_changed(config, json.dumps(wrapper_config(ldir, client, user), indent=1) + "\n")
    for cmd in WRAPPED:
        path = os.path.join(bindir, cmd)
        atomic.write_if_changed(path, wrapper(config, cmd, sys.executable))
        os.chmod(path, 0o755)
    return bindir


def exec_local(deployment_dir: str, node: str, argv: list[str], user: str | None = None) -> int:
    """Run ARGV in NODE of the lab, as USER (root by default, from /); its exit status."""
    state = load_state(deployment_dir)
    if state is None:
        raise UserError(f"{deployment_dir} has no running lab")
    names = [x.name for x in state.nodes]
    if node not in names:
        raise UserError(f"no node {node!r} in {deployment_dir} ({did_you_mean(node, names) or 'nodes: ' + compress(names)})")
    sd = os.path.join(lab_dir(deployment_dir), "nodes", node)
    if nodes.node_pid(sd) is None:
        raise UserError(f"node {node} is not running", hint="ctk deploy again brings it back")
    return subprocess.call(nodes.exec_argv(sd, argv, user=user or "root", cwd=None if user else "/"))


def env_local(deployment_dir: str, user: str | None = None) -> str:
    """Shell exports that put the lab's Slurm commands (run in its login node, as the lab's user,
    or as USER) first on PATH."""
    state = load_state(deployment_dir)
    if state is None:
        raise UserError(f"{deployment_dir} has no running lab")
    bindir = write_wrappers(deployment_dir, client_node(state.nodes), state.user or "root")
    out = f"export PATH={shlex.quote(bindir)}:\"$PATH\"\n"
    if user:
        out += f"export {USER_ENV}={shlex.quote(user)}\n"
    return out

