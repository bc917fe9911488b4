"""`ctk image export`'s refusals, before anything is read or written (the exports themselves run
for real in tests/integration/test_image_build.py)."""

import pytest

from ctk.cli import main
from ctk.images.export import PUSH_REF_RE


@pytest.mark.parametrize("argv,said", [
    (["--format", "tar", "-o", "x.tar", "--push", "localhost:5000/a"], "--push goes with --format oci"),
    (["--format", "oci", "-o", "x.tar", "--push", "jax"], "not a registry reference"),
    (["--format", "oci", "-o", "x.tar", "--push", "localhost:5000/a b"], "not a registry reference"),
    (["--format", "oci", "-o", "x.tar", "--push", "localhost:5000/A"], "not a registry reference"),
    (["--format", "oci", "-o", "x.tar", "--push", "host.example/a;rm -rf /"], "not a registry reference"),
])
def test_a_bad_push_is_refused_before_the_export(argv, said, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CTK_STATE_DIR", str(tmp_path / "store"))
    assert main(["image", "export", "no-such-image", *argv]) == 2
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err
    assert not (tmp_path / "x.tar").exists()


@pytest.mark.parametrize("ref", ["localhost:5000/ctk/jax", "us-docker.pkg.dev/proj/repo/jax:0.12",
                                 "registry.example.com/a/b@sha256:" + "0" * 64, "127.0.0.1:5000/jax:latest"])
def test_registry_references(ref):
    assert PUSH_REF_RE.match(ref)
