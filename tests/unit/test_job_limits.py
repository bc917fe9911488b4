"""A job Slurm would queue and never start is refused before sbatch runs: the script's
requests (its #SBATCH lines, then sbatch's own options) against the partitions as sinfo
reports them. Pure: the lines below are sinfo's real format (tests/integration/test_jobs.py
checks a real lab)."""

import pytest

from ctk.cli import main
from ctk.errors import UserError
from ctk.jobs import limits, templates

# sinfo -h -a -o '%P|%l|%D|%c|%m|%G' of a lab: debug (default, no limit), gpu (2 h, 8 H100),
# the gpu nodes in two lines (two states).
SINFO = """debug*|infinite|2|2|7680|(null)
gpu|2:00:00|1|208|1872000|gpu:h100:8(S:0-1)
gpu|2:00:00|1|208|1872000|gpu:h100:8(S:0-1)
"""


def parts():
    return limits.parse_sinfo(SINFO)


def test_sinfo_lines_become_partitions_with_their_limits():
    p = parts()
    assert p["debug"].default and p["debug"].max_minutes is None and p["debug"].nodes == 2
    g = p["gpu"]
    assert (g.max_minutes, g.nodes, g.gpus, g.gpu_nodes, g.memory_mb) == (120, 2, 8, 2, 1872000)


@pytest.mark.parametrize("text,minutes", [("30", 30), ("30:30", 30.5), ("2:00:00", 120), ("1-00", 1440),
                                          ("1-2:30", 1590), ("1-00:00:30", 1440.5), ("infinite", None),
                                          ("UNLIMITED", None)])
def test_slurm_times_in_minutes(text, minutes):
    assert limits.parse_minutes(text) == minutes


def script(*lines):
    return "#!/bin/bash\n" + "".join(f"#SBATCH {x}\n" for x in lines) + "srun true\n#SBATCH --time=99:00:00\n"


def test_the_request_is_read_from_sbatch_lines_then_the_command_line():
    req = limits.request(script("--partition=gpu", "-N 2", "--time=03:00:00", "--gpus-per-node=h100:4"),
                         ["--time=01:00:00"])
    assert req.options == {"partition": "gpu", "nodes": "2", "time": "01:00:00", "gpus-per-node": "h100:4"}


@pytest.mark.parametrize("lines,extra,message", [
    (["--partition=gpu", "--time=03:00:00"], [],
     "time 03:00:00 (--time): partition gpu allows at most 02:00:00 (its MaxTime)"),
    (["--partition=gpu", "--gpus-per-node=16"], [], "16 GPUs per node: the nodes of partition gpu have at most 8"),
    (["--partition=debug", "--gres=gpu:1"], [], "1 GPUs per node: the nodes of partition debug have no GPUs"),
    (["--nodes=3"], [], "3 nodes (--nodes): partition debug has 2"),
    (["--partition=gpu"], ["--mem=2000G"], "2048000 MB of memory per node (--mem): the nodes of partition gpu "
                                           "have at most 1872000 MB"),
    (["--partition=gpu", "--time=UNLIMITED"], [], "time UNLIMITED (--time): partition gpu allows at most 02:00:00"),
])
def test_a_job_no_partition_would_start_is_refused_with_the_limit(lines, extra, message):
    with pytest.raises(UserError) as e:
        limits.check(script(*lines), extra, parts())
    assert e.value.message.startswith("Slurm would queue this job and never start it: ")
    assert message in e.value.message
    assert "debug* (2 nodes, no time limit)" in e.value.hint and "gpu (2 nodes, MaxTime 02:00:00, 8 GPUs per node)" \
        in e.value.hint


def test_an_unknown_partition_is_refused_naming_the_partitions():
    with pytest.raises(UserError) as e:
        limits.check(script("--partition=gpus"), [], parts())
    assert e.value.message == "partition 'gpus' (--partition): the cluster has no such partition"


@pytest.mark.parametrize("lines", [["--partition=gpu", "--time=2:00:00", "--gpus-per-node=8", "-N", "2"],
                                   ["--partition=gpu,debug", "--time=03:00:00"],  # debug has no limit
                                   ["--time=100-00:00:00"]])
def test_a_job_a_partition_can_start_passes(lines):
    limits.check(script(*lines), [], parts())


def test_nothing_is_checked_when_sinfo_does_not_answer():
    limits.check(script("--partition=nowhere", "--nodes=999"), [], {})


def test_reasons_that_never_go_away_are_named():
    assert limits.never_starts("DependencyNeverSatisfied")
    assert limits.never_starts("PartitionTimeLimit")
    assert limits.never_starts("Resources") is None and limits.never_starts("Priority") is None
    assert limits.never_starts("") is None


def test_gpus_on_a_template_run_without_gpus_are_refused_not_dropped(capsys):
    assert main(["job", "render", "jax-train", "--set", "gpus_per_node=8"]) == 2
    err = capsys.readouterr().err
    assert "--set gpus_per_node=8: GPUs go with accelerator=gpu, and accelerator is cpu" in err
    out = templates.render("jax-train", {"gpus_per_node": "8", "accelerator": "gpu"}, ["python3", "t.py"])
    assert "#SBATCH --gpus-per-node=8" in out
