"""An image whose base and layers are all in the store is recorded at once, without waiting for
the store's lock (another image's build may hold it for minutes); one with a layer to build
waits for it."""

import json
import os
import threading

import pytest

from ctk.errors import Failure
from ctk.images import build
from ctk.images.base import chosen_base_key
from ctk.images.store import Store
from ctk.model import ImageSpec
from ctk.progress import Progress
from ctk.stacks import get_stack


def _commit_fake(store: Store, key: str) -> None:
    os.makedirs(os.path.join(store.layers, key, "root"), exist_ok=True)
    with open(os.path.join(store.layers, key, "meta.json"), "w") as f:
        json.dump({"kind": "test"}, f)


def test_a_cached_image_is_recorded_while_another_build_holds_the_lock(tmp_path):
    store = Store(str(tmp_path / "store"))
    spec = ImageSpec(name="cached", module_id="img", roles=["common", "munge"])
    base = chosen_base_key(store, spec.base)
    layers = build.plan_layers(spec, base, get_stack(spec.stack))
    for key in [base, *(lp.key for lp in layers)]:
        _commit_fake(store, key)

    held, release, done = threading.Event(), threading.Event(), {}

    def other_build():
        with store.lock():
            held.set()
            release.wait(30)

    t = threading.Thread(target=other_build)
    t.start()
    try:
        assert held.wait(10)
        r = build.build_image(spec, store, Progress(quiet=True))  # would block until release
        done["lock_still_held"] = not release.is_set()
    finally:
        release.set()
        t.join()
    assert done == {"lock_still_held": True}
    assert (r.built, r.cached) == ([], ["common", "munge"]) and r.layers == [base, *(lp.key for lp in layers)]
    assert store.image("cached")["layers"] == r.layers


def test_an_image_with_a_layer_to_build_is_not_taken_from_the_cache(tmp_path):
    store = Store(str(tmp_path / "store"))
    spec = ImageSpec(name="half", module_id="img", roles=["common", "munge", "slurm"])  # 2 layers
    base = chosen_base_key(store, spec.base)
    layers = build.plan_layers(spec, base, get_stack(spec.stack))
    for key in [base, layers[0].key]:
        _commit_fake(store, key)
    stack = get_stack(spec.stack)
    assert build._from_cache(spec, store, Progress(quiet=True), stack, None, layers) is None
    assert store.image("half") is None
    # nor one whose base this machine cannot build (the locked path says why)
    other = ImageSpec(name="rocky", module_id="img", base="rocky-9", roles=["common"])
    assert build._from_cache(other, store, Progress(quiet=True), stack, None, layers[:1]) is None


def test_a_cached_image_is_not_recorded_while_gc_removes_layers(tmp_path):
    """ctk image gc holds the removal lock while it decides and removes: the record waits for it,
    then finds what gc left (here it removed a layer: the image goes to the locked build path)."""
    store = Store(str(tmp_path / "store"))
    spec = ImageSpec(name="cached", module_id="img", roles=["common"])
    base = chosen_base_key(store, spec.base)
    layers = build.plan_layers(spec, base, get_stack(spec.stack))
    for key in [base, layers[0].key]:
        _commit_fake(store, key)
    held, out = threading.Event(), {}

    def record():
        held.wait(10)
        out["result"] = build._from_cache(spec, store, Progress(quiet=True), get_stack(spec.stack), None, layers)

    t = threading.Thread(target=record)
    with store.removal_lock():
        t.start()
        held.set()
        t.join(0.5)
        assert t.is_alive()  # waiting for gc
        store.remove_layer(layers[0].key)
    t.join(10)
    assert out == {"result": None} and store.image("cached") is None


@pytest.mark.parametrize("roles, layers", [
    (["common", "munge", "slurm", "jax"], [["common", "munge"], ["slurm"], ["jax"]]),
    (["munge", "slurm"], [["munge"], ["slurm"]]),  # nothing below it to join
    (["common", "jax", "munge"], [["common"], ["jax"], ["munge"]]),  # never jax's layer
    (["common", "slurm", "pyxis", "jax"], [["common"], ["slurm"], ["pyxis"], ["jax"]]),
])
def test_munge_joins_the_layer_of_the_role_before_it(roles, layers):
    assert build.layer_groups(roles) == layers


def test_the_lab_images_layers_are_named_after_their_roles(tmp_path):
    spec = ImageSpec(name="lab", module_id="img", roles=["common", "munge", "slurm", "jax"])
    plan = build.plan_layers(spec, "base-x", get_stack(spec.stack))
    assert [(lp.role, lp.roles) for lp in plan] == [("common+munge", ("common", "munge")), ("slurm", ("slurm",)),
                                                    ("jax", ("jax",))]
    assert plan[0].key.startswith("common+munge-") and plan[1].parent == plan[0].key


def test_roles_sharing_a_layer_must_agree_on_their_variables(monkeypatch):
    spec = ImageSpec(name="lab", module_id="img", roles=["common", "munge", "slurm", "jax"])
    given = {"common": {"x": 1, "y": 2}, "munge": {"x": 1, "z": 3}}
    monkeypatch.setattr(build, "role_variables", lambda spec, role, stack, lock: dict(given.get(role, {})))
    assert build.plan_layers(spec, "base-x", get_stack(spec.stack))[0].variables == {"x": 1, "y": 2, "z": 3}
    given["munge"]["y"] = 5
    with pytest.raises(Failure, match="roles common, munge share a layer but give y different values"):
        build.plan_layers(spec, "base-x", get_stack(spec.stack))
