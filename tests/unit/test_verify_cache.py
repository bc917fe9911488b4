"""A verified image is not verified again unless its layers or the checks change, or the user
asks; a failed verification leaves no pass on record."""

import os

import pytest

from ctk import paths
from ctk.images import verify
from ctk.images.store import Store


@pytest.fixture
def store(tmp_path):
    s = Store(str(tmp_path / "store"))
    s.save_image("lab", {"layers": ["b1", "c1", "j1"], "spec": {"roles": []}})
    return s


def record(store, **kw):
    rec = {"layers": ["b1", "c1", "j1"], "checks": verify.checks_digest(), "passed": 40, "skipped": 3,
           "summary": "40 passed, 3 skipped in 9.1s", "at": "2026-12-03 21:00:00", **kw}
    store.save_verified("lab", rec)


def test_a_pass_of_the_same_layers_by_the_same_checks_stands(store):
    assert verify.cached_verification("lab", store) is None  # never verified
    record(store)
    v = verify.cached_verification("lab", store)
    assert v.cached and (v.passed, v.skipped) == (40, 3)
    assert v.summary == "40 passed, 3 skipped in 9.1s (cached: verified 2026-12-03 21:00:00)"
    assert verify.verify_image("lab", store, again=False) == v  # no node booted: the record answers


def test_other_layers_or_other_checks_verify_again(store, monkeypatch):
    record(store, layers=["b1", "c1", "j0"])  # the jax layer was rebuilt since
    assert verify.cached_verification("lab", store) is None
    record(store, checks="0" * 64)  # ctk's checks changed since
    assert verify.cached_verification("lab", store) is None
    record(store)
    assert verify.cached_verification("lab", store) is not None
    monkeypatch.setattr(verify, "checks_digest", lambda: "1" * 64)
    assert verify.cached_verification("lab", store) is None
    store.save_verified("lab", ["not", "a", "record"])  # a damaged file is no pass
    assert store.verified("lab") is None


def test_a_pass_of_another_image_of_the_same_layers_spec_and_stack_stands_for_this_one(store):
    """ctk-local and the lab image (the same layers under two names): one verification serves both,
    and is recorded under the second name too; an image that differs in anything but its names
    (its roles, its stack's lock) is verified on its own."""
    spec = {"name": "lab", "module_id": "lab_image", "source": "ctk/image", "roles": ["common", "jax"],
            "slurm_release": "26.05"}
    stack = {"name": "jax-cpu", "lock": {"jax": "0.12.1"}}
    store.save_image("lab", {"layers": ["b1", "c1", "j1"], "spec": spec, "stack": stack})
    record(store, checked=verify._what_is_checked(store.image("lab")))
    same = {**spec, "name": "ctk-local", "module_id": "", "source": ""}
    store.save_image("ctk-local", {"layers": ["b1", "c1", "j1"], "spec": same, "stack": stack})
    v = verify.cached_verification("ctk-local", store)
    assert v.cached and (v.passed, v.skipped) == (40, 3)
    assert "as image lab, of the same layers" in v.summary
    assert store.verified("ctk-local")["as"] == "lab"
    assert verify.verify_image("ctk-local", store, again=False) == verify.cached_verification("ctk-local", store)
    for name, rec in (("other-roles", {"spec": {**same, "roles": ["common"]}, "stack": stack}),
                      ("other-lock", {"spec": same, "stack": {**stack, "lock": {"jax": "0.12.0"}}}),
                      ("other-layers", {"spec": same, "stack": stack, "layers": ["b1", "c1", "j2"]})):
        store.save_image(name, {"layers": ["b1", "c1", "j1"], **rec})
        assert verify.cached_verification(name, store) is None, name
    record(store, checked=verify._what_is_checked(store.image("lab")), checks="0" * 64)  # other checks
    store.forget_verified("ctk-local")
    assert verify.cached_verification("ctk-local", store) is None


def test_a_verification_that_fails_to_start_leaves_no_pass_on_record(store, monkeypatch):
    record(store)

    def boot(*a, **k):
        raise RuntimeError("no node")

    monkeypatch.setattr(verify.buildnode, "boot", boot)
    with pytest.raises(RuntimeError):
        verify.verify_image("lab", store, again=True)
    assert store.verified("lab") is None


def test_an_unknown_installer_is_refused_before_the_store_is_touched(tmp_path):
    """CTK_IMAGE_INSTALLER takes uv or pip: a typo exits 2 naming the variable, and no layer or
    base is made."""
    import os
    import subprocess
    import sys

    from ctk import paths
    state = tmp_path / "state"
    r = subprocess.run([sys.executable, "-m", "ctk", "image", "build", os.path.join(paths.BLUEPRINTS, "lab.yaml")],
                       capture_output=True, text=True,
                       env={**os.environ, "CTK_STATE_DIR": str(state), "CTK_IMAGE_INSTALLER": "pipp"})
    assert r.returncode == 2, r.stderr
    assert "CTK_IMAGE_INSTALLER=pipp: expected uv or pip" in r.stderr and "Traceback" not in r.stderr
    assert not (state / "layers").exists() or not os.listdir(state / "layers")


def test_the_wheels_marker_says_ok_or_why_the_download_failed(tmp_path):
    """What the jax role's wait reads (jax_wheels_ready): written once the download ends, whole."""
    from concurrent.futures import Future

    from ctk.images import build

    ok, bad = Future(), Future()
    build._wheels_ready_marker(ok, str(tmp_path / "ok"))
    build._wheels_ready_marker(bad, str(tmp_path / "bad"))
    assert not (tmp_path / "ok").exists()  # not before the download ends
    ok.set_result(1.5)
    bad.set_exception(RuntimeError("pip download failed: no route to the index\nmore lines"))
    assert (tmp_path / "ok").read_text() == "ok\n"
    assert (tmp_path / "bad").read_text() == "failed: pip download failed: no route to the index\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad", "ok"]  # no temporary file left
    # The role's wait task is the one the build's profile times.
    tasks = open(os.path.join(paths.ansible_dir(), "roles", "jax", "tasks", "install.yml")).read()
    assert f"- name: {build._WHEELS_WAIT_TASK}\n" in tasks and f"- name: {build._WHEELS_CHECK_TASK}\n" in tasks
