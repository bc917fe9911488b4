"""Targets are found by name; a folder that is not a deployment is refused with exit 2."""

import json

import pytest

from ctk import targets
from ctk.cli import main
from ctk.errors import UserError


def test_registry_names_the_local_ssh_and_gcp_targets():
    assert type(targets.get("local")).__name__ == "LocalTarget"
    assert type(targets.get("ssh")).__name__ == "SshTarget"
    assert type(targets.get("gcp")).__name__ == "GcpTarget"
    assert [targets.get(n).name for n in ("local", "ssh", "gcp")] == ["local", "ssh", "gcp"]


def test_an_unknown_target_is_a_user_error():
    with pytest.raises(UserError) as e:
        targets.get("lokal")
    assert e.value.hint == "did you mean 'local'?"


@pytest.mark.parametrize("cmd", ["status", "destroy", "env", "exec"])
def test_a_folder_that_is_not_a_deployment_exits_2(cmd, tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("not a deployment\n")
    argv = [cmd, str(tmp_path)] + (["node0", "--", "true"] if cmd == "exec" else [])
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {tmp_path} is not a ctk deployment folder (no deployment.json)\n  hint: ")


def test_a_missing_folder_exits_2(tmp_path, capsys):
    assert main(["status", str(tmp_path / "nope")]) == 2
    assert "no such deployment folder" in capsys.readouterr().err


def test_errors_print_as_json_with_json(tmp_path, capsys):
    assert main(["status", str(tmp_path / "nope"), "--json"]) == 2
    out = json.loads(capsys.readouterr().out)
    assert out == {"ok": False, "error": {"kind": "usage", "message": f"{tmp_path / 'nope'}: no such deployment folder",
                                          "hint": "create one with 'ctk deploy BLUEPRINT -o DIR'", "exit_code": 2}}


def test_destroy_needs_a_folder_or_a_lease(capsys):
    assert main(["destroy"]) == 2
    assert "give a deployment folder or --lease N" in capsys.readouterr().err


def test_a_deployment_folder_names_its_target(tmp_path):
    (tmp_path / "deployment.json").write_text(json.dumps({"target": "ssh"}))
    assert targets.of_folder(str(tmp_path)).name == "ssh"
    (tmp_path / "deployment.json").write_text(json.dumps({"target": "local"}))
    assert targets.of_folder(str(tmp_path)).name == "local"


def test_lab_wrappers_are_valid_python_and_say_when_the_lab_is_down(tmp_path):
    """A wrapped Slurm command of a lab that is not running exits 1 and names the node."""
    import subprocess
    import sys

    from ctk.targets import local

    text = local.wrapper(str(tmp_path / "dep" / "lab"), "lab-login-0", "sbatch", sys.executable, "researcher")
    compile(text, "sbatch", "exec")
    path = tmp_path / "sbatch"
    path.write_text(text)
    path.chmod(0o755)
    r = subprocess.run([str(path), "--wrap", "true"], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 1 and "the lab's node lab-login-0 is not running" in r.stderr, r.stderr
