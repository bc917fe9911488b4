"""The slurm role's srun (files/ctk-srun): pyxis's container options rewritten for Slurm's own
containers, every other call passed on unchanged. Run here against a stand-in srun that prints
what it got (NeMo-Run's real jobs go through the lab's in tests/integration/test_nemo_run.py)."""

import json
import os
import subprocess
import sys

import pytest

from conftest import load_program
from ctk import paths

PATH = os.path.join(paths.ANSIBLE, "roles", "slurm", "files", "ctk-srun")

# The shape of `srun --help` (Slurm 24.11), a few options of each kind.
HELP = """Usage: srun [OPTIONS(0)... [executable(0) [args(0)...]]]

Parallel run options:
  -A, --account=name          the account
      --compress[=library]    optional value
      --container             the bundle
  -D, --chdir=path            the folder
  -e, --error=err             stderr
  -H, --hold                  no value
  -K, --kill-on-bad-exit      no value
  -N, --nodes=N               nodes
  -o, --output=out            stdout
      --wait=sec              seconds
"""

STAND_IN = """#!/usr/bin/env python3
import json, os, sys
if sys.argv[1:] == ["--help"]:
    sys.stdout.write(open(os.environ["HELP_FILE"]).read())
    sys.exit(0)
print(json.dumps({"argv": sys.argv[1:], "env": {k: v for k, v in os.environ.items() if k.startswith("CTK_CONTAINER")}}))
"""


SHIM = load_program(PATH, "ctk_srun")


@pytest.fixture
def node(tmp_path):
    """A stand-in srun, the shim pointed at it, and a slurm.conf folder with an oci.conf."""
    stand_in = tmp_path / "srun"
    stand_in.write_text(STAND_IN)
    stand_in.chmod(0o755)
    (tmp_path / "help.txt").write_text(HELP)
    conf = tmp_path / "etc"
    conf.mkdir()
    (conf / "slurm.conf").write_text("")
    (conf / "oci.conf").write_text("")
    shim = tmp_path / "ctk-srun"
    shim.write_text(open(PATH).read().replace('SRUN = "/usr/bin/srun"', f'SRUN = "{stand_in}"'))
    shim.chmod(0o755)
    env = {"PATH": "/usr/bin:/bin", "HELP_FILE": str(tmp_path / "help.txt"), "SLURM_CONF": str(conf / "slurm.conf")}
    return shim, env, conf


def srun(node, *args):
    shim, env, _ = node
    r = subprocess.run([sys.executable, str(shim), *args], capture_output=True, text=True, env=env)
    return r.returncode, (json.loads(r.stdout) if r.returncode == 0 and r.stdout else None), r.stderr


def test_nemo_runs_call_becomes_slurms_container_with_the_mounts_and_workdir_for_the_runtime(node):
    rc, got, err = srun(node, "--output", "/home/u/log-%j.out", "--container-image", "maxtext-cpu",
                        "--container-mounts", "/home/u/exp:/nemo_run", "--container-workdir", "/nemo_run/code",
                        "--container-env", "A,B", "--no-container-mount-home", "--wait=60", "--kill-on-bad-exit=1",
                        "bash", "/nemo_run/scripts/run.sh", "--container-image", "x")
    assert rc == 0, err
    assert got["argv"] == ["--container=/var/lib/ctk/containers/maxtext-cpu", "--output", "/home/u/log-%j.out",
                           "--wait=60", "--kill-on-bad-exit=1", "bash", "/nemo_run/scripts/run.sh",
                           "--container-image", "x"]  # the command's own arguments are its own
    assert got["env"] == {"CTK_CONTAINER_MOUNTS": "/home/u/exp:/nemo_run", "CTK_CONTAINER_WORKDIR": "/nemo_run/code"}


def test_the_equals_forms_and_a_bundle_folder(node):
    rc, got, err = srun(node, "-N2", "--container-image=/srv/bundle", "--container-mounts=/a:/b:ro", "hostname")
    assert rc == 0, err
    assert got["argv"] == ["--container=/srv/bundle", "-N2", "hostname"]
    assert got["env"] == {"CTK_CONTAINER_MOUNTS": "/a:/b:ro"}


@pytest.mark.parametrize("args", [
    ["-N", "2", "hostname"],
    ["--hold", "python3", "x.py", "--container-image", "y"],  # a program's arguments, not srun's
    ["-o", "--container-image", "cmd"],  # an option's value that looks like pyxis's
    ["--container=/srv/b", "true"],  # Slurm's own option
])
def test_every_other_call_goes_to_srun_unchanged(node, args):
    rc, got, err = srun(node, *args)
    assert rc == 0 and got == {"argv": args, "env": {}}, err


def test_without_oci_conf_pyxis_options_go_to_srun_as_they_are(node):
    (node[2] / "oci.conf").unlink()
    args = ["--container-image", "nvcr.io#nvidia/jax:25.04-py3", "python3"]
    rc, got, _ = srun(node, *args)
    assert rc == 0 and got["argv"] == args  # pyxis, where it is installed, takes them


def test_where_pyxis_is_loaded_its_options_go_to_srun_as_they_are(node):
    (node[2] / "plugstack.conf.d").mkdir()
    (node[2] / "plugstack.conf.d" / "pyxis.conf").write_text("required /usr/local/lib/slurm/spank_pyxis.so\n")
    args = ["--container-image", "nvcr.io#nvidia/jax:25.04-py3", "--container-mounts", "/a:/b", "python3"]
    rc, got, _ = srun(node, *args)
    assert rc == 0 and got == {"argv": args, "env": {}}


@pytest.mark.parametrize("args,said", [
    (["--container-image", "nvcr.io#nvidia/jax:25.04-py3", "true"], "an image for enroot"),
    (["--container-image", "docker://ubuntu", "true"], "an image for enroot"),
    (["--container-name", "keep", "--container-image", "a", "true"], "--container-name: a pyxis option"),
    (["--container-save", "/x.sqsh", "--container-image", "a", "true"], "--container-save: a pyxis option"),
    (["--container-mounts", "/a:/b", "true"], "go with --container-image"),
    (["--container-image", "a", "--container-workdir", "code", "true"], "not an absolute path"),
    (["--container-image"], "needs a value"),
])
def test_what_cannot_be_done_is_refused_with_exit_2(node, args, said):
    rc, _, err = srun(node, *args)
    assert rc == 2 and said in err and "Traceback" not in err, err


def test_help_parsing_knows_which_options_take_a_value():
    short, long = SHIM.options_with_values(HELP)
    assert {"--account", "--chdir", "--error", "--nodes", "--output", "--wait", "--container"} <= long
    assert not {"--hold", "--kill-on-bad-exit", "--compress"} & long
    assert short == {"-A", "-D", "-e", "-N", "-o"}
