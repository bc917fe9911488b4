"""Every shell program ctk writes or runs, clean under shellcheck (the sbatch templates have
their own test in test_job_templates.py; shell files in the repository are checked by `make
lint`): the lab's power and readiness scripts, its database services, the node's preemption
notice, the identity probe run over SSH, the image exports, the build VM's install script on
Google Cloud, and the jax role's templates as Ansible renders them."""

import os
import subprocess

import jinja2
import pytest
import yaml

from ctk import paths
from ctk.connect import base as connect_base
from ctk.images import export
from ctk.render import gcluster
from ctk.targets import labagent, labclient, local

JAX_ROLE = os.path.join(paths.ansible_dir(), "roles", "jax")


def _role_template(name: str) -> str:
    """A jax role template rendered with the role's defaults, as Ansible's template module would
    (ansible_managed is Ansible's own variable)."""
    with open(os.path.join(JAX_ROLE, "defaults", "main.yml")) as f:
        defaults = yaml.safe_load(f)
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(os.path.join(JAX_ROLE, "templates")),
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    return env.get_template(name).render(ansible_managed="Ansible managed", **defaults)


def _programs():
    for op in ("resume", "suspend"):
        yield f"lab power script ({op})", "sh", local.power_script(op)
    yield "lab PrologSlurmctld (nodes ready)", "sh", local.ready_script(300)
    yield "lab MariaDB service", "sh", local.MARIADB_SCRIPT
    yield "lab slurmdbd service", "sh", local.SLURMDBD_SCRIPT
    yield "node preemption notice", "sh", labagent.PREEMPTED_SCRIPT
    yield "private file writer over SSH", "sh", labclient.PRIVATE_WRITE_SCRIPT
    yield "private file writer, then sbatch, in a lab node", "sh", labclient.PRIVATE_WRITE_AND_RUN
    yield "cluster identity probe", "sh", connect_base._IDENTITY_SH
    yield "gcluster build VM install script", "bash", gcluster.install_script("lab")
    for fmt in export.FORMATS:
        yield f"image export ({fmt})", "sh", export.export_script("lab", fmt, "/srv/out/.lab.tmp-1",
                                                                  "/var/lib/ctk/scratch/export-lab-1")
    yield "image export (oci, a stack's PATH)", "sh", export.export_script(
        "jax-cpu", "oci", "/srv/out/.jax.tmp-1", "/var/lib/ctk/scratch/export-jax-1", "/opt/ctk/jax/bin:/usr/bin:/bin")
    yield "image export (oci, pushed to a registry)", "sh", export.export_script(
        "jax-cpu", "oci", "/srv/out/.jax.tmp-1", "/var/lib/ctk/scratch/export-jax-1", "", "localhost:5000/ctk/jax:1",
        tls_verify=False)
    yield "jax role: /etc/profile.d/ctk-jax.sh", "sh", _role_template("ctk-jax.sh.j2")
    yield "jax role: TaskProlog", "sh", _role_template("task-prolog.j2")


PROGRAMS = list(_programs())


@pytest.mark.parametrize("what,dialect,text", PROGRAMS, ids=[p[0] for p in PROGRAMS])
def test_shellcheck_passes(what, dialect, text):
    r = subprocess.run(["shellcheck", "-s", dialect, "-f", "gcc", "-"], input=text, text=True, capture_output=True)
    assert r.returncode == 0 and not r.stdout.strip(), f"{what}:\n{r.stdout}{r.stderr}\n---\n{text}"
    r = subprocess.run([dialect, "-n"], input=text, text=True, capture_output=True)
    assert r.returncode == 0, f"{what}: {r.stderr}"


def test_the_tar_export_fails_when_tar_does(tmp_path):
    """The tar export's archive comes from tar itself (-I zstd), so a tar that fails (here: a
    tree that is not there) fails the export: through a pipe into zstd, sh's status was zstd's,
    and the truncated archive would have been kept as the export."""
    out = tmp_path / "out.tar.zst"
    script = export.export_script("lab", "tar", str(out), str(tmp_path))
    r = subprocess.run(["sh", "-c", f"set -eu\nROOT={tmp_path}/no-such-root\n{script}"], capture_output=True, text=True)
    assert r.returncode != 0, r.stdout + r.stderr
    assert "no-such-root" in r.stderr, r.stderr
    (tmp_path / "root").mkdir()
    (tmp_path / "root" / "f").write_text("x")
    r = subprocess.run(["sh", "-c", f"set -eu\nROOT={tmp_path}/root\n{script}"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    listing = subprocess.run(["tar", "-I", "zstd", "-tf", str(out)], capture_output=True, text=True, check=True).stdout
    assert "./f" in listing.split(), listing
