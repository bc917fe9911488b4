"""Golden trees: `ctk create` of each blueprint in blueprints/ and of several Cluster Toolkit
fixtures, compared file by file against checked-in expected folders (tests/golden/).

For fixtures, expanded.yaml is compared by its SHA-256 digest rather than stored in full: the
fixtures' text (startup scripts and all) stays in ../shared, not copied into this repository.
Regenerate after an intended change with CTK_UPDATE_GOLDEN=1 and review the diff.
"""

import glob
import hashlib
import os
import shutil

import pytest

from conftest import FIXTURES, ROOT
from ctk.cli import main

GOLDEN = os.path.join(ROOT, "tests", "golden")
VARS = "project_id=demo-project,deployment_name=demo"
ML = "examples/machine-learning"

CASES = {
    os.path.basename(p)[:-5]: (p, []) for p in sorted(glob.glob(os.path.join(ROOT, "blueprints", "*.yaml")))
}
CASES.update({
    "ct-hpc-slurm": (f"{FIXTURES}/examples/hpc-slurm.yaml", ["--vars", VARS]),
    "ct-ml-slurm": (f"{FIXTURES}/examples/ml-slurm.yaml", ["--vars", VARS]),
    "ct-hpc-slurm6-tpu": (f"{FIXTURES}/community/examples/hpc-slurm6-tpu.yaml", ["--vars", VARS]),
    "ct-a3mega": (f"{FIXTURES}/{ML}/a3-megagpu-8g/a3mega-slurm-blueprint.yaml",
                  ["--vars", VARS, "--vars", "disk_size_gb=100,a3mega_cluster_size=128",
                   "-d", f"{FIXTURES}/{ML}/a3-megagpu-8g/a3mega-slurm-deployment.yaml"]),
    "ct-a3ultra": (f"{FIXTURES}/{ML}/a3-ultragpu-8g/a3ultra-slurm-blueprint.yaml",
                   ["--vars", VARS + ",a3u_cluster_size=4",
                    "-d", f"{FIXTURES}/{ML}/a3-ultragpu-8g/a3ultra-slurm-deployment.yaml"]),
})


def tree(root: str, digest_expanded: bool) -> dict[str, str]:
    out = {}
    for dirpath, _, files in os.walk(root):
        for f in files:
            p = os.path.join(dirpath, f)
            rel = os.path.relpath(p, root)
            text = open(p, encoding="utf-8").read()
            if digest_expanded and rel == "expanded.yaml":
                out["expanded.yaml.sha256"] = hashlib.sha256(text.encode()).hexdigest() + "\n"
            else:
                out[rel] = text
    return out


@pytest.mark.parametrize("case", sorted(CASES))
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
