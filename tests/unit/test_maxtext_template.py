"""The maxtext template: what it hands MaxText on each accelerator, the settings it refuses,
its container branch, and its launcher (run here with stand-in jax and maxtext modules: the
real MaxText trains on the lab in tests/integration/test_maxtext.py)."""

import ast
import os
import re
import shlex
import subprocess
import sys

import pytest

from ctk.cli import main
from ctk.errors import UserError
from ctk.jobs import templates

SMALL = ["base_emb_dim=128", "base_num_decoder_layers=2"]


def render(params, command=SMALL):
    return templates.render("maxtext", params, command)


def srun_words(script):
    line = next(x for x in script.splitlines() if x.startswith("srun "))
    return shlex.split(line)


def settings(script):
    line = next(x for x in script.splitlines() if x.startswith("CTK_SETTINGS=("))
    return shlex.split(line[len("CTK_SETTINGS=("):-1])


def test_cpu_two_nodes_one_process_each_with_synthetic_data():
    s = render({"nodes": 2, "steps": 30, "checkpoint_period": 10})
    assert "#SBATCH --nodes=2" in s and "#SBATCH --ntasks-per-node=1" in s and "--gpus-per-node" not in s
    assert settings(s) == ["run_name=${CTK_RUN_NAME}", "base_output_directory=${CTK_OUTPUT}", "hardware=cpu",
                           "steps=30", "enable_checkpointing=true", "checkpoint_period=10", "dataset_type=synthetic",
                           *SMALL]
    words = srun_words(s)
    assert words[:2] == ["srun", "--kill-on-bad-exit=1"] and words[2:] == [
        "python3", "-c", "$CTK_MAXTEXT_PY", "base.yml", "${CTK_SETTINGS[@]}"]
    assert 'CTK_RUN_NAME="${SLURM_JOB_NAME:-maxtext}-${SLURM_JOB_ID}"' in s
    assert 'CTK_OUTPUT="${HOME}/maxtext"' in s and "export CTK_ACCELERATOR=cpu" in s
    assert "XLA_FLAGS" not in s and "LIBTPU_INIT_ARGS" not in s and "CTK_CONTAINER" not in s


def test_named_run_and_output_folder_are_kept_verbatim():
    s = render({"run_name": "llama-small", "base_output_directory": "/shared/runs", "model_name": "llama2-7b",
                "per_device_batch_size": 2.0})
    assert "CTK_RUN_NAME=llama-small" in s and "CTK_OUTPUT=/shared/runs" in s
    assert "model_name=llama2-7b" in settings(s) and "per_device_batch_size=2.0" in settings(s)


def test_gpu_one_process_drives_all_the_nodes_gpus_with_maxtexts_flags():
    s = render({"accelerator": "gpu", "nodes": 2, "gpus_per_node": 8, "network": "rdma"})
    assert "#SBATCH --ntasks-per-node=1" in s and "#SBATCH --gpus-per-node=8" in s
    assert "export JAX_LOCAL_DEVICE_IDS=0,1,2,3,4,5,6,7" in s
    flags = re.search(r"^export XLA_FLAGS=(.*)$", s, re.M).group(1)
    for f in ("--xla_gpu_enable_latency_hiding_scheduler=true", "--xla_gpu_enable_while_loop_double_buffering=true",
              "--xla_gpu_all_gather_combine_threshold_bytes=134217728",
              "--xla_gpu_reduce_scatter_combine_threshold_bytes=67108864",
              "--xla_disable_hlo_passes=rematerialization"):
        assert f in flags
    assert "hardware=gpu" in settings(s) and "set_nccl_env.sh" in s and "XLA_PYTHON_CLIENT_MEM_FRACTION=0.85" in s
    assert "XLA_FLAGS" not in render({"accelerator": "gpu", "xla_tuned": False})
    assert "--xla_foo=1" in render({"accelerator": "gpu", "xla_tuned": False, "xla_flags": "--xla_foo=1"})


def test_tpu_multislice_passes_num_slices_to_maxtext():
    s = render({"accelerator": "tpu", "nodes": 4, "num_slices": 2, "tpu_type": "v5p-16"})
    assert "--xla_tpu_enable_ag_backward_pipelining=true" in s and "MEGASCALE_NUM_SLICES=2" in s
    assert "num_slices=2" in settings(s) and "hardware=tpu" in settings(s)
    assert "MEGASCALE_SLICE_ID" in " ".join(srun_words(s))
    assert "num_slices=" not in " ".join(settings(render({"accelerator": "tpu", "nodes": 2})))


def test_a_dataset_goes_to_maxtexts_grain_pipeline_with_its_tokenizer():
    s = render({"dataset": "/shared/c4/*.array_record", "tokenizer_path": "/shared/tok.model",
                "dataset_format": "arrayrecord"})
    got = settings(s)
    assert "dataset_type=grain" in got and "grain_train_files=/shared/c4/*.array_record" in got
    assert "grain_file_type=arrayrecord" in got and "tokenizer_path=/shared/tok.model" in got
    assert "dataset_type=synthetic" not in got


@pytest.mark.parametrize("params,command,expect", [
    ({}, ["python3", "train.py"], '"python3" is not one'),
    ({}, ["=1"], '"=1" is not one'),
    ({}, ["Base-Emb=1"], "is not one"),
    ({}, ["steps=5"], "--set steps=VALUE"),
    ({}, ["hardware=gpu"], "--set accelerator=VALUE"),
    ({}, ["dataset_type=hf"], "--set dataset=VALUE"),
    ({"dataset": "/d/*.ar"}, SMALL, "--set tokenizer_path=PATH"),
    ({"accelerator": "tpu", "nodes": 3, "num_slices": 2}, SMALL, "equal slices"),
])
def test_refused_settings_name_the_parameter(params, command, expect):
    with pytest.raises(UserError) as e:
        render(params, command)
    assert expect in str(e.value), e.value


def test_no_command_trains_the_configs_model():
    assert settings(render({}, []))[-1] == "dataset_type=synthetic"


def test_in_a_container_image_of_the_deployment(tmp_path, capsys):
    facts = {"container_runtime": "oci", "container_images": ["maxtext-cpu"]}
    s = render(dict(facts, image="maxtext-cpu"))
    assert "CTK_CONTAINER=(--container=/var/lib/ctk/containers/maxtext-cpu)" in s
    words = srun_words(s)
    # the container's own python3 (its venv is first on the bundle's PATH), not the node's
    assert words[2:5] == ["${CTK_CONTAINER[@]}", "python3", "-c"]
    with pytest.raises(UserError, match="no container image of that name"):
        render(dict(facts, image="other"))
    pyxis = render({"image": "nvcr.io#nvidia/jax:25.04-py3", "runtime": "pyxis", "accelerator": "gpu"})
    assert "--container-image='nvcr.io#nvidia/jax:25.04-py3'" in pyxis
    # what the job sets reaches the container over the image's own values (NVIDIA's set XLA_FLAGS)
    passed = re.search(r"--container-env=(\S+)\)", pyxis).group(1).split(",")
    assert {"JAX_COORDINATOR_ADDRESS", "CTK_ACCELERATOR", "XLA_FLAGS", "JAX_LOCAL_DEVICE_IDS"} <= set(passed)


def test_cli_refusal_exits_2_without_traceback(capsys):
    assert main(["job", "render", "maxtext", "--", "python3", "train.py"]) == 2
    err = capsys.readouterr().err
    assert "KEY=VALUE" in err and "Traceback" not in err


# ---- the launcher, with stand-in modules --------------------------------------------------

STAND_IN_JAX = """
import ast
import os
class _Config:
    def update(self, k, v):
        print("jax.config", k, v)
config = _Config()
class _Distributed:
    def initialize(self):
        print("jax.distributed.initialize")
distributed = _Distributed()
"""
STAND_IN_TRAIN = """
import sys
print("train argv", sys.argv)
"""


def launcher(script):
    return re.search(r"<<'CTK_PY_END'\n(.*?)\nCTK_PY_END\n", script, re.S).group(1)


@pytest.fixture
def stand_ins(tmp_path):
    (tmp_path / "jax").mkdir()
    (tmp_path / "jax" / "__init__.py").write_text(STAND_IN_JAX)
    pkg = tmp_path / "maxtext"
    (pkg / "trainers" / "pre_train").mkdir(parents=True)
    (pkg / "configs" / "gpu").mkdir(parents=True)
    for d in (pkg, pkg / "trainers", pkg / "trainers" / "pre_train"):
        (d / "__init__.py").write_text("")
    (pkg / "trainers" / "pre_train" / "train.py").write_text(STAND_IN_TRAIN)
    (pkg / "configs" / "base.yml").write_text("")
    (pkg / "configs" / "gpu" / "a.yml").write_text("")
    return tmp_path


def run_launcher(stand_ins, config, accelerator="cpu", cwd=None):
    py = launcher(render({}))
    env = dict(os.environ, PYTHONPATH=str(stand_ins), CTK_ACCELERATOR=accelerator)
    return subprocess.run([sys.executable, "-c", py, config, "steps=3"], capture_output=True, text=True, env=env,
                          cwd=cwd or stand_ins)


@pytest.mark.parametrize("config,found", [("base.yml", "maxtext/configs/base.yml"),
                                          ("gpu/a.yml", "maxtext/configs/gpu/a.yml")])
def test_launcher_finds_maxtexts_own_configs(stand_ins, config, found, tmp_path_factory):
    r = run_launcher(stand_ins, config, cwd=tmp_path_factory.mktemp("elsewhere"))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[:2] == ["jax.config jax_cpu_collectives_implementation gloo", "jax.distributed.initialize"]
    argv = ast.literal_eval(lines[2][len("train argv "):])
    # as `python -m maxtext.trainers.pre_train.train CONFIG ...` would see it
    assert argv[0].endswith("maxtext/trainers/pre_train/train.py") and argv[1].endswith(found)
    assert argv[2:] == ["steps=3"]


def test_launcher_prefers_the_users_file_and_sets_cpu_collectives_only_on_cpu(stand_ins, tmp_path_factory):
    here = tmp_path_factory.mktemp("run")
    (here / "base.yml").write_text("")
    r = run_launcher(stand_ins, "base.yml", accelerator="gpu", cwd=here)
    assert r.returncode == 0, r.stderr
    assert "jax_cpu_collectives_implementation" not in r.stdout
    assert "train.py', 'base.yml', 'steps=3']" in r.stdout


@pytest.mark.parametrize("config", ["nope.yml", "/abs/nope.yml"])
def test_launcher_names_a_missing_config(stand_ins, config):
    r = run_launcher(stand_ins, config)
    assert r.returncode == 1 and f"ctk: MaxText config {config}: no such file here nor under" in r.stderr
    assert "Traceback" not in r.stderr


def test_the_gpu_checks_maxtext_flags_are_the_templates():
    """tests/gpu/verify_gpu_node.sh times MaxText with the flags it spells out: the template's."""
    from conftest import ROOT

    text = open(os.path.join(ROOT, "tests", "gpu", "verify_gpu_node.sh")).read()
    spelled = " ".join(re.findall(r'^maxtext_flags="(?:\$maxtext_flags )?([^"]*)"$', text, re.M)).split()
    rendered = re.search(r"^export XLA_FLAGS=(.*)$", render({"accelerator": "gpu"}), re.M).group(1)
    assert spelled == shlex.split(rendered)[0].split()


# ---- a requeued run whose last run got to its end ------------------------------------------

def run_name_block(script: str, home, restart: int) -> subprocess.CompletedProcess:
    """The rendered script from its run name to MaxText's environment, run by bash as the job's
    first node would (the run's name and folder from Slurm's environment and HOME), then `echo
    TRAIN` where MaxText would start."""
    lines = script.splitlines()
    start = next(i for i, x in enumerate(lines) if x.startswith("CTK_RUN_NAME="))
    end = next(i for i, x in enumerate(lines) if x.startswith("export CTK_ACCELERATOR="))
    body = "set -euo pipefail\n" + "\n".join(lines[start:end]) + "\necho TRAIN\n"
    env = dict(os.environ, HOME=str(home), SLURM_JOB_ID="7", SLURM_JOB_NAME="maxtext", CTK_RESTART_COUNT=str(restart))
    return subprocess.run(["bash", "-c", body], capture_output=True, text=True, env=env)


def checkpoint(home, step: int, committed: bool = True) -> None:
    d = home / "maxtext" / "maxtext-7" / "checkpoints" / str(step)
    d.mkdir(parents=True)
    if committed:
        (d / "commit_success.txt").write_text("")


def test_a_requeued_run_whose_last_run_saved_its_final_step_ends_without_training(tmp_path):
    s = render({"nodes": 2, "steps": 30, "checkpoint_period": 10})
    for step in (0, 10, 20, 29):
        checkpoint(tmp_path, step)
    r = run_name_block(s, tmp_path, restart=1)
    assert r.returncode == 0 and "TRAIN" not in r.stdout, (r.stdout, r.stderr)
    assert ("ctk: MaxText run maxtext-7 already completed its 30 steps (its checkpoint at step 29): "
            "nothing left to train") in r.stderr


@pytest.mark.parametrize("steps,restart,committed", [
    (30, 1, False),   # step 29's folder without its commit: MaxText resumes from 20
    (31, 1, True),    # a step left to train
    (30, 0, True),    # a new job reusing the run's name: MaxText's own error says what to do
])
def test_a_run_with_steps_left_or_a_first_run_trains(tmp_path, steps, restart, committed):
    s = render({"nodes": 2, "steps": steps, "checkpoint_period": 10})
    checkpoint(tmp_path, 20)
    checkpoint(tmp_path, 29, committed=committed)
    r = run_name_block(s, tmp_path, restart=restart)
    assert r.returncode == 0 and r.stdout == "TRAIN\n", (r.stdout, r.stderr)


def test_a_requeued_run_with_no_checkpoint_yet_trains(tmp_path):
    r = run_name_block(render({"nodes": 2, "steps": 30}), tmp_path, restart=2)
    assert r.returncode == 0 and r.stdout == "TRAIN\n", r.stderr
