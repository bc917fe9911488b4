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

    from ctk.targets import local

    bindir = local.write_wrappers(str(tmp_path / "dep"), "lab-login-0", "researcher")
    path = tmp_path / "dep" / "lab" / "bin" / "sbatch"
    assert bindir == str(path.parent)
    compile(path.read_text(), "sbatch", "exec")
    r = subprocess.run([str(path), "--wrap", "true"], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 1 and "the lab's node lab-login-0 is not running" in r.stderr, r.stderr


def test_a_wrappers_text_holds_no_value_of_the_lab_and_a_foreign_config_is_refused(tmp_path):
    """The lab's values (node, user, folders) are data in bin/wrapper.json, never source: a
    node name that would be code stays a name; a wrapper.json ctk did not write is refused
    (exit 125) before anything is entered."""
    import subprocess

    from ctk.targets import local

    odd = "n'); import os; os.system('touch PWNED')  #\nx"
    local.write_wrappers(str(tmp_path / "dep"), odd, "researcher")
    text = (tmp_path / "dep" / "lab" / "bin" / "squeue").read_text()
    assert "PWNED" not in text and "researcher" not in text
    cfg = tmp_path / "dep" / "lab" / "bin" / local.WRAPPER_CONFIG
    assert json.loads(cfg.read_text())["node"] == odd
    squeue = str(tmp_path / "dep" / "lab" / "bin" / "squeue")
    r = subprocess.run([squeue], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 1 and "is not running" in r.stderr and not (tmp_path / "PWNED").exists(), r.stderr
    cfg.write_text(json.dumps({**json.loads(cfg.read_text()), "node": "../../elsewhere"}))
    r = subprocess.run([squeue], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 125 and "is not one ctk wrote" in r.stderr, r.stderr
    cfg.write_text("not json")
    r = subprocess.run([squeue], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 125 and "cannot read the lab's" in r.stderr, r.stderr


def test_show_with_an_unknown_target_exits_2_naming_the_targets(capsys):
    from ctk import paths

    lab = f"{paths.BLUEPRINTS}/lab.yaml"
    assert main(["show", lab, "--target", "banana"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --target banana: no such target\n") and "targets: local, ssh, gcp" in err
    assert main(["show", lab, "--target", "gpc"]) == 2
    assert "did you mean 'gcp'?" in capsys.readouterr().err
    assert main(["show", lab, "--target", "ssh"]) == 0


def test_status_names_the_real_folder_in_its_commands():
    from ctk.targets.base import NodeStatus, Status

    st = Status("lab", "local", True, [NodeStatus("login-0", "login", "198.18.4.9", True)],
                slurm_client="login-0", lab_user="researcher")
    text = st.render("/srv/my lab")
    assert "DIR" not in text
    assert "as researcher (home: /srv/my lab/lab/home/researcher)" in text
    assert "eval \"$(ctk env '/srv/my lab')\" puts sbatch" in text
