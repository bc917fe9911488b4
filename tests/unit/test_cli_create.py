"""The CLI around the engine: help, exit codes, expand/show output, and `create`'s atomicity."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import yaml

from conftest import ROOT
from ctk import paths
from ctk.cli import main
from ctk.targets import folder as deployfolder

LAB = os.path.join(paths.BLUEPRINTS, "lab.yaml")
ENV = {**os.environ, "PYTHONPATH": os.path.join(ROOT, "toolkit")}


def ctk(*args, **kw):
    return subprocess.run([sys.executable, "-m", "ctk", *args], capture_output=True, text=True, env=ENV,
                          timeout=60, **kw)


def test_help_explains_every_command():
    r = ctk("--help")
    assert r.returncode == 0
    for cmd in ("validate", "expand", "show", "create"):
        assert cmd in r.stdout
    assert "Exit codes" in r.stdout
    r = ctk("validate", "--help")
    assert "--vars" in r.stdout and "--json" in r.stdout


def test_bad_flag_exits_2_with_hint():
    r = ctk("validate", LAB, "--nope")
    assert r.returncode == 2 and "unrecognized arguments: --nope" in r.stderr and "--help" in r.stderr


def test_validate_ok_and_json(capsys):
    assert main(["validate", LAB]) == 0
    assert "ok (7 modules, 2 partitions, 2 nodesets)" in capsys.readouterr().out
    assert main(["validate", LAB, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"ok": True, "errors": [], "warnings": []}


def test_expand_writes_a_blueprint_that_validates_again(tmp_path, capsys):
    out = tmp_path / "expanded.yaml"
    assert main(["expand", LAB, "-o", str(out)]) == 0
    exp = yaml.safe_load(out.read_text())
    ctl = exp["deployment_groups"][1]["modules"][-1]
    assert ctl["settings"]["partitions"] == ["$(debug_partition.partitions)", "$(gpu_partition.partitions)"]
    assert exp["vars"]["labels"] == {"ghpc_blueprint": "ctk-lab", "ghpc_deployment": "lab"}
    assert main(["validate", str(out)]) == 0


def test_show_json_is_the_model(capsys):
    assert main(["show", LAB, "--json"]) == 0
    model = json.loads(capsys.readouterr().out)
    assert [p["name"] for p in model["partitions"]] == ["debug", "gpu"]
    gpu = [n for n in model["nodesets"] if n["name"] == "gpunodeset"][0]
    assert (gpu["gpu_type"], gpu["gpu_count"]) == ("h100", 8)


def test_create_refuses_to_overwrite_without_w(tmp_path, capsys):
    out = tmp_path / "lab"
    assert main(["create", LAB, "-o", str(out)]) == 0
    before = (out / "deployment.json").read_text()
    assert main(["create", LAB, "-o", str(out), "--vars", "deployment_name=other"]) == 2
    assert "pass -w" in capsys.readouterr().err
    assert (out / "deployment.json").read_text() == before
    assert main(["create", LAB, "-o", str(out), "-w", "--vars", "deployment_name=other"]) == 0
    assert json.loads((out / "deployment.json").read_text())["deployment_name"] == "other"
    assert sorted(os.listdir(tmp_path)) == ["lab"]  # no staging folders left


def test_create_refuses_a_folder_that_is_not_a_deployment(tmp_path, capsys):
    (tmp_path / "precious").mkdir()
    (tmp_path / "precious" / "thesis.tex").write_text("years of work")
    assert main(["create", LAB, "-o", str(tmp_path / "precious"), "-w"]) == 2
    assert (tmp_path / "precious" / "thesis.tex").read_text() == "years of work"


def test_failure_mid_write_leaves_previous_folder(tmp_path, monkeypatch):
    out = tmp_path / "lab"
    assert main(["create", LAB, "-o", str(out)]) == 0
    before = {f: (out / f).read_text() for f in ("deployment.json", "expanded.yaml")}
    real = deployfolder.artifacts

    def half_then_fail(exp, dep):
        files = real(exp, dep)
        files["zzz/boom"] = None  # writing None fails after the other files are written
        return files
    monkeypatch.setattr(deployfolder, "artifacts", half_then_fail)
    with pytest.raises(TypeError):
        main(["create", LAB, "-o", str(out), "-w", "--vars", "deployment_name=changed"])
    assert {f: (out / f).read_text() for f in before} == before
    assert sorted(os.listdir(tmp_path)) == ["lab"]


def test_kill_during_create_leaves_old_or_new_never_half(tmp_path):
    out = tmp_path / "lab"
    assert ctk("create", LAB, "-o", str(out)).returncode == 0
    old = (out / "deployment.json").read_text()
    for delay in (0.05, 0.15, 0.3):
        p = subprocess.Popen([sys.executable, "-m", "ctk", "create", LAB, "-o", str(out), "-w",
                              "--vars", "deployment_name=killed"], env=ENV,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(delay)
        p.send_signal(signal.SIGKILL)
        p.wait()
        text = (out / "deployment.json").read_text()
        data = json.loads(text)  # never half-written
        assert text == old or data["deployment_name"] == "killed"
        assert sorted(os.listdir(out)) == sorted(["cluster", "deployment.json", "expanded.yaml"])
    # The next create cleans up what a killed writer left beside the folder.
    assert ctk("create", LAB, "-o", str(out), "-w").returncode == 0
    assert sorted(os.listdir(tmp_path)) == ["lab"]


def test_show_lists_container_images_apart_from_node_images(tmp_path, capsys):
    text = open(LAB).read().replace('      slurm_release: "26.05"\n', '      slurm_release: "26.05"\n\n  - id: jax_container\n'
                                    "    source: ctk/container-image\n    settings:\n      name: jax-cpu\n", 1)
    bp = tmp_path / "lab-containers.yaml"
    bp.write_text(text)
    assert main(["show", str(bp)]) == 0
    out = capsys.readouterr().out
    images, containers = out.split("Container images")
    assert "common,munge,slurm,jax" in images
    assert not any(line.startswith("jax-cpu ") for line in images.splitlines())  # not a node image
    assert "jax-cpu  debian-13  jax-cpu  common,jax" in containers.split("\n\n")[0]
    assert main(["show", str(bp), "--json"]) == 0
    model = json.loads(capsys.readouterr().out)
    assert [(c["name"], c["roles"], c["source"]) for c in model["containers"]] == [
        ("jax-cpu", ["common", "jax"], "ctk/container-image")]
    assert [i["name"] for i in model["images"]] == ["lab"]
