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
    env = ansible_env.strategy_env()
    assert env["ANSIBLE_STRATEGY"] == "mitogen_linear"
    assert os.path.isfile(os.path.join(env["ANSIBLE_STRATEGY_PLUGINS"], "mitogen_linear.py"))
    assert ansible_env.strategy_env(ANSIBLE_PLAYBOOK) == env


def test_linear_turns_it_off(monkeypatch):
    monkeypatch.setenv(ansible_env.STRATEGY_ENV, "linear")
    assert ansible_env.strategy_env() == {}


def test_another_ansible_playbook_gets_ansibles_own_strategy(monkeypatch, tmp_path):
    """Mitogen's plugins live in ctk's environment: an ansible-playbook of another Python could
    not import them, so it runs without."""
    monkeypatch.delenv(ansible_env.STRATEGY_ENV, raising=False)
    other = tmp_path / "ansible-playbook"
    other.write_text("#!/bin/sh\n")
    other.chmod(0o755)
    assert ansible_env.strategy_env(str(other)) == {}


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


def test_image_build_refuses_an_unknown_strategy_before_it_makes_anything(tmp_path):
    state = tmp_path / "state"
    env = {**os.environ, "CTK_STATE_DIR": str(state), ansible_env.STRATEGY_ENV: "fast"}
    bp = os.path.join(os.path.dirname(ansible_env.__file__), "data", "blueprints", "lab.yaml")
    r = subprocess.run([sys.executable, "-m", "ctk", "image", "build", bp], capture_output=True, text=True,
                       env=env, timeout=120)
    assert r.returncode == EXIT_USAGE, r.stderr
    assert "CTK_ANSIBLE_STRATEGY='fast'" in r.stderr and "Traceback" not in r.stderr
    layers = state / "layers"
    assert not layers.exists() or not any(layers.iterdir())


def module_parents(tmp_path, strategy: str) -> list[int]:
    """Run a play of three tasks over a local connection the way ctk runs ansible-playbook (its
    environment for STRATEGY); the parent pid each task's shell saw."""
    play = [{"hosts": "localhost", "gather_facts": False, "tasks": [
        {"name": f"task {i}", "ansible.builtin.command": "sh -c 'echo $PPID'", "register": f"r{i}",
         "changed_when": False} for i in range(3)] + [
        {"name": "report", "ansible.builtin.debug": {"msg": "PARENTS {{ [r0.stdout, r1.stdout, r2.stdout] | to_json }}"}}]}]
    (tmp_path / "play.yml").write_text(json.dumps(play))
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env[ansible_env.STRATEGY_ENV] = strategy
    old = os.environ.get(ansible_env.STRATEGY_ENV)
    os.environ[ansible_env.STRATEGY_ENV] = strategy
    try:
        env.update(ansible_env.strategy_env(ANSIBLE_PLAYBOOK))
    finally:
        if old is None:
            del os.environ[ansible_env.STRATEGY_ENV]
        else:
            os.environ[ansible_env.STRATEGY_ENV] = old
    env.update(ANSIBLE_NOCOLOR="1", ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"), HOME=str(tmp_path))
    r = subprocess.run([ANSIBLE_PLAYBOOK, "-c", "local", "-i", "localhost,", "play.yml",
                        "-e", f"ansible_python_interpreter={sys.executable}"],
                       capture_output=True, text=True, env=env, cwd=tmp_path, timeout=240)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    line = next(ln for ln in r.stdout.splitlines() if "PARENTS " in ln)
    return [int(p) for p in json.loads(line.split("PARENTS ", 1)[1].rstrip('"').replace('\\"', '"'))]


def test_mitogen_runs_every_task_in_one_python_and_linear_in_one_each(tmp_path):
    """The command module's shell's parent is the Python that ran the module: one for the whole
    play under Mitogen, a new one for each task under Ansible's own strategy."""
    (tmp_path / "m").mkdir()
    (tmp_path / "l").mkdir()
    assert len(set(module_parents(tmp_path / "m", "mitogen"))) == 1
    assert len(set(module_parents(tmp_path / "l", "linear"))) == 3
