"""ctk runs ansible-playbook with Mitogen's strategy (toolkit/ctk/ansible_env.py): the variables
it sets make the installed ansible-core really run its tasks in one Python on the node, a bad
CTK_ANSIBLE_STRATEGY is refused before any work, and linear turns it off."""

import json
import os
import subprocess
import sys

import pytest

from ctk import ansible_env
from ctk.errors import EXIT_USAGE, UserError

ANSIBLE_PLAYBOOK = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")


def test_mitogen_is_the_default_and_comes_from_ctks_own_environment(monkeypatch):
    monkeypatch.delenv(ansible_env.STRATEGY_ENV, raising=False)
    with ansible_env.strategy_env() as env, ansible_env.strategy_env(ANSIBLE_PLAYBOOK) as env2:
        assert env["ANSIBLE_STRATEGY"] == "mitogen_linear"
        assert os.path.isfile(os.path.join(env["ANSIBLE_STRATEGY_PLUGINS"], "mitogen_linear.py"))
        assert {k: v for k, v in env2.items() if k != "TMPDIR"} == {k: v for k, v in env.items() if k != "TMPDIR"}
        # Mitogen's socket goes in a folder of its own, that no other user can enter
        st = os.stat(env["TMPDIR"])
        assert st.st_uid == os.getuid() and st.st_mode & 0o777 == 0o700
        # ... with room left in a Unix socket's path (107 bytes) for Mitogen's socket's name
        assert len(os.path.join(env["TMPDIR"], "mitogen_unix_0123456789abcdef.sock")) <= 107
        assert env["ANSIBLE_TIMEOUT"] == "30"
    assert not os.path.exists(env["TMPDIR"])


def test_linear_turns_it_off(monkeypatch):
    monkeypatch.setenv(ansible_env.STRATEGY_ENV, "linear")
    with ansible_env.strategy_env() as env:
        assert env == {}
    assert ansible_env.fallback() is None  # asked for: nothing to say


def test_without_mitogen_ansibles_own_strategy_runs_and_says_why(monkeypatch):
    monkeypatch.delenv(ansible_env.STRATEGY_ENV, raising=False)
    assert ansible_env.fallback() is None and ansible_env.fallback(ANSIBLE_PLAYBOOK) is None
    monkeypatch.setattr(ansible_env, "mitogen_strategy_dir", lambda: None)
    with ansible_env.strategy_env() as env:
        assert env == {}
    why = ansible_env.fallback()
    assert why is not None and "Mitogen is not installed" in why and "pip install" in why


def test_another_ansible_playbook_gets_ansibles_own_strategy(monkeypatch, tmp_path):
    """Mitogen's plugins live in ctk's environment: an ansible-playbook of another Python could
    not import them, so it runs without."""
    monkeypatch.delenv(ansible_env.STRATEGY_ENV, raising=False)
    other = tmp_path / "ansible-playbook"
    other.write_text("#!/bin/sh\n")
    other.chmod(0o755)
    with ansible_env.strategy_env(str(other)) as env:
        assert env == {}
    why = ansible_env.fallback(str(other))
    assert why is not None and str(other) in why and "not the ansible-playbook beside ctk" in why


@pytest.mark.parametrize("value", ["Mitogen", "free", "mitogen_linear", "linear "])
def test_an_unknown_strategy_is_refused_naming_the_variable(monkeypatch, value):
    monkeypatch.setenv(ansible_env.STRATEGY_ENV, value)
    if value.strip() == "linear":
        assert ansible_env.strategy() == "linear"  # spaces around a value are forgiven
        return
    with pytest.raises(UserError) as e:
        ansible_env.strategy()
    assert "CTK_ANSIBLE_STRATEGY" in str(e.value) and "mitogen" in e.value.hint
    assert e.value.exit_code == EXIT_USAGE


@pytest.mark.parametrize("command", [["image", "build"], ["deploy"]])
def test_build_and_deploy_refuse_an_unknown_strategy_before_they_make_anything(tmp_path, command):
    state, out = tmp_path / "state", tmp_path / "lab"
    env = {**os.environ, "CTK_STATE_DIR": str(state), ansible_env.STRATEGY_ENV: "fast"}
    bp = os.path.join(os.path.dirname(ansible_env.__file__), "data", "blueprints", "lab.yaml")
    argv = [sys.executable, "-m", "ctk", *command, bp] + (["-o", str(out)] if command == ["deploy"] else [])
    r = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == EXIT_USAGE, r.stderr
    assert "CTK_ANSIBLE_STRATEGY='fast'" in r.stderr and "Traceback" not in r.stderr
    assert not state.exists() and not out.exists()


def module_parents(tmp_path, strategy: str, monkeypatch) -> tuple[list[int], list[str]]:
    """Run a play of three tasks over a local connection the way ctk runs ansible-playbook (its
    environment for STRATEGY): the parent pid each task's shell saw, and the Unix sockets in
    ansible-playbook's TMPDIR meanwhile."""
    play = [{"hosts": "localhost", "gather_facts": False, "tasks": [
        {"name": f"task {i}", "ansible.builtin.command": "sh -c 'echo $PPID'", "register": f"r{i}",
         "changed_when": False} for i in range(3)] + [
        {"name": "sockets", "ansible.builtin.find": {"paths": "{{ lookup('env', 'TMPDIR') }}", "file_type": "any",
                                                     "patterns": "*.sock"}, "register": "socks"},
        {"name": "report", "ansible.builtin.debug": {
            "msg": "REPORT {{ {'parents': [r0.stdout, r1.stdout, r2.stdout],"
                   " 'sockets': socks.files | map(attribute='path') | list} | to_json }}"}}]}]
    (tmp_path / "play.yml").write_text(json.dumps(play))
    monkeypatch.setenv(ansible_env.STRATEGY_ENV, strategy)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(ANSIBLE_NOCOLOR="1", ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"), HOME=str(tmp_path),
               TMPDIR=str(tmp_path))
    with ansible_env.strategy_env(ANSIBLE_PLAYBOOK) as strategy_vars:
        r = subprocess.run([ANSIBLE_PLAYBOOK, "-c", "local", "-i", "localhost,", "play.yml",
                            "-e", f"ansible_python_interpreter={sys.executable}"],
                           capture_output=True, text=True, env={**env, **strategy_vars}, cwd=tmp_path, timeout=240)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    line = next(ln for ln in r.stdout.splitlines() if "REPORT " in ln)
    msg = json.loads(line.split('"msg": ', 1)[1])  # the debug line: "msg": "REPORT {...}"
    report = json.loads(msg.split("REPORT ", 1)[1])
    return [int(p) for p in report["parents"]], report["sockets"]


def test_mitogen_runs_every_task_in_one_python_and_linear_in_one_each(tmp_path, monkeypatch):
    """The command module's shell's parent is the Python that ran the module: one for the whole
    play under Mitogen, a new one for each task under Ansible's own strategy. Mitogen's socket is
    in the private folder ctk gave it (the play's find looks in ansible-playbook's TMPDIR)."""
    (tmp_path / "m").mkdir()
    (tmp_path / "l").mkdir()
    parents, sockets = module_parents(tmp_path / "m", "mitogen", monkeypatch)
    assert len(set(parents)) == 1
    assert len(sockets) == 1 and os.path.basename(os.path.dirname(sockets[0])).startswith("ctk-ansible-")
    parents, sockets = module_parents(tmp_path / "l", "linear", monkeypatch)
    assert len(set(parents)) == 3 and sockets == []
