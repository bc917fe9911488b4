"""Golden trees: `ctk create` of each blueprint in blueprints/ and of several Cluster Toolkit
fixtures, compared file by file against checked-in expected folders (tests/golden/).

For fixtures, expanded.yaml and gcp/blueprint.yaml are compared by their SHA-256 digests rather
than stored in full: the fixtures' text (startup scripts and all) stays in ../shared, not copied
into this repository. The gcp target's roles tarball (gcp/ctk-roles.tar.gz, reproducible byte for
byte) is compared by its digest in every case.
Regenerate after an intended change with CTK_UPDATE_GOLDEN=1 and review the diff.
"""

import glob
import hashlib
import os
import shutil

import pytest

from conftest import FIXTURES, ROOT
from ctk import paths
from ctk.cli import main

GOLDEN = os.path.join(ROOT, "tests", "golden")
VARS = "project_id=demo-project,deployment_name=demo"
ML = "examples/machine-learning"

CASES = {
    os.path.basename(p)[:-5]: (p, []) for p in sorted(glob.glob(os.path.join(paths.BLUEPRINTS, "*.yaml")))
}
CASES.update({
    "ct-hpc-slurm": (f"{FIXTURES}/examples/hpc-slurm.yaml", ["--vars", VARS]),
    "ct-ml-slurm": (f"{FIXTURES}/examples/ml-slurm.yaml", ["--vars", VARS]),
    "ct-hpc-slurm6-tpu": (f"{FIXTURES}/community/examples/hpc-slurm6-tpu.yaml", ["--vars", VARS]),
    # The vars these deployment files leave empty are given, as gcluster requires.
    "ct-a3mega": (f"{FIXTURES}/{ML}/a3-megagpu-8g/a3mega-slurm-blueprint.yaml",
                  ["--vars", VARS, "--vars", "disk_size_gb=100,a3mega_cluster_size=128",
                   "--vars", "region=us-central1,zone=us-central1-a,network_name_system=sys-net,"
                   "subnetwork_name_system=sys-subnet,slurm_cluster_name=demo,a3mega_reservation_name=a3mega-res",
                   "-d", f"{FIXTURES}/{ML}/a3-megagpu-8g/a3mega-slurm-deployment.yaml"]),
    "ct-a3ultra": (f"{FIXTURES}/{ML}/a3-ultragpu-8g/a3ultra-slurm-blueprint.yaml",
                   ["--vars", VARS + ",a3u_cluster_size=4",
                    "--vars", "region=europe-west1,zone=europe-west1-b,a3u_reservation_name=a3u-res",
                    "-d", f"{FIXTURES}/{ML}/a3-ultragpu-8g/a3ultra-slurm-deployment.yaml"]),
})


DIGESTED = ("expanded.yaml", os.path.join("gcp", "blueprint.yaml"))  # for fixtures
TARBALL = os.path.join("gcp", "ctk-roles.tar.gz")


def tree(root: str, digest_expanded: bool) -> dict[str, str]:
    """The folder's files by relative path; gcp/packer/ansible/ (a verbatim copy of the
    repository's roles, checked separately) is left out."""
    out = {}
    for dirpath, dirs, files in os.walk(root):
        if os.path.relpath(dirpath, root) == os.path.join("gcp", "packer") and "ansible" in dirs:
            dirs.remove("ansible")
        for f in files:
            p = os.path.join(dirpath, f)
            rel = os.path.relpath(p, root)
            data = open(p, "rb").read()
            if (digest_expanded and rel in DIGESTED) or rel == TARBALL:
                out[rel + ".sha256"] = hashlib.sha256(data).hexdigest() + "\n"
            else:
                out[rel] = data.decode("utf-8")
    return out


@pytest.mark.parametrize("case", [
    pytest.param(c, marks=pytest.mark.ct_fixtures) if c.startswith("ct-") else c for c in sorted(CASES)])
def test_create_matches_golden_tree(case, tmp_path, capsys):
    bp, args = CASES[case]
    out = tmp_path / "dep"
    rc = main(["create", bp, "-o", str(out), *args])
    assert rc == 0, capsys.readouterr().err
    got = tree(str(out), digest_expanded=case.startswith("ct-"))
    gold_dir = os.path.join(GOLDEN, case)
    if os.environ.get("CTK_UPDATE_GOLDEN"):
        shutil.rmtree(gold_dir, ignore_errors=True)
        for rel, text in got.items():
            os.makedirs(os.path.dirname(os.path.join(gold_dir, rel)), exist_ok=True)
            with open(os.path.join(gold_dir, rel), "w") as f:
                f.write(text)
    want = tree(gold_dir, digest_expanded=False)
    assert sorted(got) == sorted(want)
    for rel in want:
        assert got[rel] == want[rel], f"{case}/{rel} differs from the golden copy"


def test_enough_golden_cases():
    assert sum(1 for c in CASES if c.startswith("ct-")) >= 4 and "lab" in CASES


def test_the_gcp_targets_packer_folders_and_their_roles(tmp_path, capsys):
    """The gcp target's images get Packer folders (checked by `packer validate -syntax-only`
    inside create) and a copy of the roles they run."""
    import filecmp
    import json
    out = tmp_path / "dep"
    assert main(["create", CASES["gcp-jax"][0], "-o", str(out), "--vars", "project_id=demo"]) == 0
    folder = out / "gcp" / "packer" / "jax-cuda"
    assert sorted(os.listdir(folder)) == ["ansible-vars.json", "image.auto.pkrvars.json", "image.pkr.hcl",
                                          "versions.pkr.hcl"]
    v = json.loads((folder / "image.auto.pkrvars.json").read_text())
    assert (v["project_id"], v["source_image_family"], v["source_image_project_id"]) == \
        ("demo", "slurm-gcp-6-12-debian-12", ["schedmd-slurm-public"])
    a = json.loads((folder / "ansible-vars.json").read_text())
    assert a["ctk_roles"] == ["common", "jax"] and a["jax_stack"] == "jax-cuda12-0.10"
    cmp = filecmp.dircmp(paths.ANSIBLE, out / "gcp" / "packer" / "ansible")
    assert not cmp.left_only and not cmp.right_only and not cmp.diff_files
