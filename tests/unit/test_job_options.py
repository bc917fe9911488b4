"""--time, --mem, --ntasks-per-node, --dependency, --env, --chdir and --sbatch of `ctk job
render/submit`: each an #SBATCH line after the template's (or an export), checked first, none
able to add a line or a word to the script."""

import pytest

from ctk.cli import main
from ctk.jobs import limits
from ctk.jobs.commands import relative_files
from ctk.jobs.options import JobOptions


def render(capsys, *args):
    assert main(["job", "render", "jax-train", *args, "--", "python3", "t.py"]) == 0
    return capsys.readouterr().out


def test_options_follow_the_templates_lines_and_win(capsys):
    out = render(capsys, "--time", "00:30:00", "--mem", "4G", "--ntasks-per-node", "2", "--dependency",
                 "afterok:12:13,afterany:14", "--chdir", "/home/researcher/proj", "--sbatch=--hold",
                 "--env", "WANDB_MODE=offline", "--env", "NOTE=it's $HOME")
    head = out.split("set -euo pipefail")[0]
    assert head.index("#SBATCH --time=01:00:00") < head.index("#SBATCH --time=00:30:00")
    for line in ("#SBATCH --mem=4G", "#SBATCH --ntasks-per-node=2", "#SBATCH --dependency=afterok:12:13,afterany:14",
                 "#SBATCH --chdir=/home/researcher/proj", "#SBATCH --hold", "export WANDB_MODE=offline",
                 """export NOTE='it'"'"'s $HOME'"""):
        assert line + "\n" in head, line
    req = limits.request(out)  # what sbatch reads: the last --time
    assert req.get("time") == "00:30:00" and req.get("ntasks-per-node") == "2"


@pytest.mark.parametrize("args,message", [
    (["--time", "1h"], "--time '1h': expected a Slurm time"),
    (["--mem", "4 G"], "--mem '4 G': expected a size per node"),
    (["--ntasks-per-node", "0"], "--ntasks-per-node 0: expected 1 to 4096"),
    (["--dependency", "afterok:12\n#SBATCH --x"], "--dependency 'afterok:12\\n#SBATCH --x': expected Slurm's"),
    (["--env", "PATH"], "--env 'PATH': expected NAME=VALUE"),
    (["--env", "A-B=1"], "'A-B' is not an environment variable name"),
    (["--chdir", "proj"], "--chdir 'proj': expected an absolute path"),
    (["--chdir", "/home/../etc"], "--chdir '/home/../etc': expected an absolute path"),
    (["--sbatch", "hold"], "--sbatch 'hold': an sbatch option"),
])
def test_bad_options_exit_2_naming_the_flag(capsys, args, message):
    assert main(["job", "render", "jax-train", *args, "--", "true"]) == 2
    err = capsys.readouterr().err
    assert message in err and "hint:" in err and "Traceback" not in err, err


def test_an_env_value_with_a_newline_stays_one_shell_word():
    script = JobOptions(env=("X=a\nrm -rf /",)).check().apply("#!/bin/bash\n#SBATCH -N 1\n\necho hi\n")
    assert "export X=$'a\\x0arm -rf /'\n" in script and script.endswith("echo hi\n")


def test_words_that_name_files_relative_to_the_jobs_folder():
    assert relative_files(["python3", "dp.py", "--steps", "5"]) == ["dp.py"]
    assert relative_files(["./run.sh"]) == ["./run.sh"]
    assert relative_files(["python3", "-m", "pkg.mod", "--config=cfg.yaml"]) == []
    assert relative_files(["python3", "/home/researcher/dp.py", "data/x.csv"]) == ["data/x.csv"]
    assert relative_files(["bash", "-c", "exit 3"]) == []
