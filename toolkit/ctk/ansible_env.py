"""How ctk runs ansible-playbook faster: Mitogen's strategy, for the image builds (through
Packer) and the ssh target alike.

Ansible's own linear strategy starts a new Python process on the node for every task and hands it
the module as a zip, whose Python has to compile Ansible's module_utils from source each time (a
zip import keeps no bytecode): 0.27 CPU s a task that changes nothing here, even over a local
connection, and a lab image runs over 100 tasks. Mitogen's strategy keeps one interpreter on the
node for the whole play, over the same SSH connection, and runs each module in it with the
imports already done: 0.07 CPU s a task (bench/ansible_strategy.py).
What the modules do is the same; only how they get to the node changes.

CTK_ANSIBLE_STRATEGY=linear runs Ansible's own strategy instead (to tell a Mitogen problem from
a role's); ctk does the same by itself where Mitogen is not installed beside the ansible-playbook
it runs.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator

from .errors import UserError

STRATEGY_ENV = "CTK_ANSIBLE_STRATEGY"
STRATEGIES = ("mitogen", "linear")


def strategy() -> str:
    """The strategy asked for (CTK_ANSIBLE_STRATEGY, default mitogen); a UserError naming the
    variable when it holds anything else (commands call this before they start any work)."""
    value = os.environ.get(STRATEGY_ENV, "").strip() or "mitogen"
    if value not in STRATEGIES:
        raise UserError(f"environment variable {STRATEGY_ENV}={value!r} is not a strategy ctk knows",
                        hint=f"set it to {' or '.join(STRATEGIES)}, or unset it (mitogen)")
    return value


def mitogen_strategy_dir() -> str | None:
    """The folder of Mitogen's strategy plugins in ctk's own environment, if installed there."""
    spec = importlib.util.find_spec("ansible_mitogen")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = os.path.join(list(spec.submodule_search_locations)[0], "plugins", "strategy")
    return path if os.path.isfile(os.path.join(path, "mitogen_linear.py")) else None


def fallback(ansible_playbook: str | None = None) -> str | None:
    """Why Ansible's own strategy runs where Mitogen's was asked for (the default), or None
    where Mitogen's runs (or linear was asked for): ANSIBLE_PLAYBOOK as in strategy_env."""
    if strategy() == "linear":
        return None
    ours = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
    if mitogen_strategy_dir() is None:
        return "Mitogen is not installed beside ctk (pip install 'mitogen>=0.3.54,<0.4')"
    if not os.access(ours, os.X_OK):
        return f"ctk's environment has no ansible-playbook ({ours})"
    if os.path.realpath(ansible_playbook or ours) != os.path.realpath(ours):
        return f"{ansible_playbook} is not the ansible-playbook beside ctk ({ours}), which Mitogen's strategy needs"
    return None


@contextlib.contextmanager
def strategy_env(ansible_playbook: str | None = None) -> Iterator[dict[str, str]]:
    """The ANSIBLE_* variables that make ansible-playbook use Mitogen's linear strategy, or {}
    for Ansible's own, for the length of the with block. Mitogen is used only with the
    ansible-playbook of ctk's own environment (beside this Python), which imports the same
    ansible_mitogen this process finds: ANSIBLE_PLAYBOOK is the program that will run, None for
    the one first on a PATH that starts with that folder (as Packer's does).

    Mitogen's multiplexer listens on a Unix socket in TMPDIR, through which a process can run
    commands on the nodes: TMPDIR is a folder of its own (mode 0700, removed after the block),
    so no other user of the host can reach the socket, however short the moment before Mitogen
    narrows its mode."""
    plugins = mitogen_strategy_dir()
    if strategy() == "linear" or plugins is None or fallback(ansible_playbook) is not None:
        yield {}
        return
    # 0700; a Unix socket's path has room for 107 bytes, and Mitogen adds about 30 to this one
    tmp = tempfile.gettempdir()
    private = tempfile.mkdtemp(prefix="ctk-ansible-", dir=tmp if len(tmp) <= 48 else "/tmp")
    try:
        # Mitogen's timeout covers the login and the start of the node's Python too, not only
        # the TCP connect (Ansible's default, 10 s)
        yield {"ANSIBLE_STRATEGY_PLUGINS": plugins, "ANSIBLE_STRATEGY": "mitogen_linear", "TMPDIR": private,
               "ANSIBLE_TIMEOUT": "30"}
    finally:
        shutil.rmtree(private, ignore_errors=True)
