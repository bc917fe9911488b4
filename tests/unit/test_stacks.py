"""images/stacks.yaml and the rules a stack must keep (ctk.stacks)."""

from __future__ import annotations

import dataclasses
import textwrap

import pytest

from ctk.errors import UserError
from ctk.model import BASE_PYTHON
from ctk.stacks import (
    JAX_REQUIRES_PYTHON,
    LIBTPU_FOR_JAX,
    MIN_DRIVER,
    Stack,
    check_stack,
    get_stack,
    load_stacks,
    newest_for,
)
from ctk.stacks.catalog import EXACT_VERSION_RE, normalize

BASE_PINS = {"flax": "0.12.8", "optax": "0.2.8", "orbax-checkpoint": "0.12.8", "grain": "0.2.18",
             "chex": "0.1.92"}
FRAMEWORKS = ("flax", "optax", "orbax-checkpoint", "grain", "chex")


def stacks_file(write, body: str) -> str:
    return write("stacks:\n" + textwrap.indent(textwrap.dedent(body), "  "), "stacks.yaml")


def refused(stack: Stack) -> str:
    with pytest.raises(UserError) as e:
        check_stack(stack)
    return str(e.value)


def cpu(**over) -> Stack:
    s = Stack(name="mine", accelerator="cpu", pythons=["3.11"],
              pins={"jax": "0.10.2", "jaxlib": "0.10.2", **BASE_PINS}, file="my-stacks.yaml")
    return dataclasses.replace(s, **over)


def cuda12(**over) -> Stack:
    pins = {"jax": "0.10.2", "jaxlib": "0.10.2", "jax-cuda12-plugin[with-cuda]": "0.10.2",
            "jax-cuda12-pjrt": "0.10.2", **BASE_PINS}
    return dataclasses.replace(cpu(accelerator="cuda12", pins=pins, min_driver="525.60.13"), **over)


def tpu(libtpu="0.0.42.1", jax="0.10.2", **over) -> Stack:
    pins = {"jax": jax, "jaxlib": jax, "libtpu": libtpu, **BASE_PINS}
    return dataclasses.replace(cpu(accelerator="tpu", pins=pins), **over)


# ---------------------------------------------------------------- the shipped file

def test_shipped_stacks_load_and_pass():
    stacks = load_stacks()
    assert {"jax-cpu", "jax-cuda12", "jax-cuda13", "jax-tpu", "jax-cpu-0.10", "jax-cuda12-0.10",
            "jax-tpu-0.10"} <= set(stacks)
    for s in stacks.values():
        check_stack(s)  # raises on any broken rule
        # Locked only for Pythons some base has, and that its jax supports.
        assert s.pythons and set(s.pythons) <= set(BASE_PYTHON.values()), s.name
        assert all(not s.too_new_for(py) for py in s.pythons), s.name
        assert s.exclude_newer, f"{s.name}: without exclude_newer its locks cannot be remade as they are"
        for name, version in s.pins.items():
            assert isinstance(version, str) and EXACT_VERSION_RE.match(version), (s.name, name, version)


def test_shipped_cpu_stack_pins_the_whole_set():
    for name in ("jax-cpu", "jax-cpu-0.10"):
        s = load_stacks()[name]
        assert s.accelerator == "cpu" and s.min_driver is None
        assert {normalize(n) for n in s.pins} == {"jax", "jaxlib", *FRAMEWORKS}
        assert s.pins["jax"] == s.pins["jaxlib"]
        assert s.requirements()[:2] == [f"jax=={s.pins['jax']}", f"jaxlib=={s.pins['jax']}"]


def test_shipped_stacks_are_todays_jax_and_the_newest_for_python_3_11():
    stacks = load_stacks()
    for name in ("jax-cpu", "jax-cuda12", "jax-cuda13", "jax-tpu"):
        s = stacks[name]
        assert s.jax == "0.12.0.1" and s.pythons == ["3.12", "3.13"], name
    for name in ("jax-cpu-0.10", "jax-cuda12-0.10", "jax-tpu-0.10"):
        assert stacks[name].jax == "0.10.2" and stacks[name].pythons == ["3.11"]
    # Python 3.11 is what Debian 12 has; 0.10.2 is the last jax for it.
    assert JAX_REQUIRES_PYTHON["0.10.2"] == "3.11" and JAX_REQUIRES_PYTHON["0.11.0"] == "3.12"


def test_shipped_gpu_and_tpu_stacks_follow_their_jax():
    stacks = load_stacks()
    for suffix, jax, libtpu in (("", "0.12.0.1", "0.0.50"), ("-0.10", "0.10.2", "0.0.42")):
        cpu, gpu, tp = stacks[f"jax-cpu{suffix}"], stacks[f"jax-cuda12{suffix}"], stacks[f"jax-tpu{suffix}"]
        assert gpu.version("jax") == tp.version("jax") == cpu.version("jax") == jax
        assert gpu.version("jax-cuda12-plugin") == jax and gpu.version("jax-cuda12-pjrt") == jax
        assert gpu.min_driver == "525.60.13"
        assert LIBTPU_FOR_JAX[jax] == f"{libtpu}.*"  # from that jax's METADATA
        assert tp.version("libtpu").startswith(libtpu + ".")
        # The same framework pins on every accelerator: a job moves between stacks unchanged.
        for name in FRAMEWORKS:
            assert gpu.version(name) == tp.version(name) == cpu.version(name)
    c13 = stacks["jax-cuda13"]
    assert c13.version("jax-cuda13-plugin") == c13.version("jax-cuda13-pjrt") == "0.12.0.1"
    assert c13.min_driver == MIN_DRIVER["cuda13"] == "580"


def test_maxtext_stacks_are_the_jax_stacks_plus_maxtext_and_its_training_imports():
    stacks = load_stacks()
    for acc in ("cpu", "cuda12", "tpu"):
        mt, plain = stacks[f"maxtext-{acc}"], stacks[f"jax-{acc}"]
        assert mt.accelerator == acc and mt.pythons == ["3.12", "3.13"]  # maxtext needs Python >= 3.12
        assert {k: v for k, v in mt.pins.items() if k in plain.pins} == plain.pins
        assert mt.pins["maxtext"] == "0.2.5"
        for needed in ("pydantic", "omegaconf", "aqtp", "tokamax", "ml-collections", "sentencepiece", "tiktoken"):
            assert needed in mt.pins, (acc, needed)


def test_newest_stack_for_each_python():
    stacks = load_stacks()
    assert newest_for(stacks, "cpu", "3.11").name == "jax-cpu-0.10"
    assert newest_for(stacks, "cpu", "3.13").name == "jax-cpu"
    assert newest_for(stacks, "cuda12", "3.12").name == "jax-cuda12"
    # the maxtext stacks are on the same jax, but an image that names no stack gets the plain one
    assert newest_for(stacks, "tpu", "3.13").name == "jax-tpu"
    assert newest_for(stacks, "cuda13", "3.11") is None  # no CUDA 13 stack for Debian 12
    assert newest_for(stacks, "cpu", "3.9") is None


def test_a_stack_says_why_it_does_not_fit_a_python():
    s = load_stacks()["jax-cpu"]
    assert s.supports("3.13") and not s.supports("3.11")
    assert s.too_new_for("3.11") and not s.too_new_for("3.14")
    assert s.misfit("3.11") == "stack jax-cpu (jax 0.12.0.1) needs Python >= 3.12"
    assert load_stacks()["jax-cpu-0.10"].misfit("3.13") == "stack jax-cpu-0.10 (jax 0.10.2) is locked for Python 3.11 only"


def test_get_stack_names_what_there_is():
    assert get_stack("jax-cpu").name == "jax-cpu"
    with pytest.raises(UserError, match=r"no stack named 'jax-cpus' \(did you mean 'jax-cpu'\?\)"):
        get_stack("jax-cpus")


# ---------------------------------------------------------------- rules

def test_good_crafted_stacks_pass():
    check_stack(cpu())
    check_stack(cuda12())
    check_stack(cuda12(min_driver="535.104.05"))
    check_stack(cuda12(min_driver="550"))
    check_stack(tpu())
    check_stack(tpu(libtpu="0.0.42"))
    check_stack(tpu(jax="0.7.2", libtpu="0.0.23"))  # that release pins one exact libtpu


def test_jax_and_jaxlib_must_match():
    msg = refused(cpu(pins={**cpu().pins, "jaxlib": "0.10.1"}))
    assert "my-stacks.yaml" in msg and "stack 'mine'" in msg
    assert "jax 0.10.2 and jaxlib 0.10.1 differ" in msg


def test_jax_and_jaxlib_are_required():
    pins = dict(cpu().pins)
    del pins["jaxlib"]
    assert "jax and jaxlib must both be pinned" in refused(cpu(pins=pins))


def test_cuda_plugins_must_carry_the_jax_version():
    s = cuda12()
    msg = refused(dataclasses.replace(s, pins={**s.pins, "jax-cuda12-pjrt": "0.10.1"}))
    assert "jax-cuda12-pjrt 0.10.1 does not match jax 0.10.2" in msg
    pins = {k: v for k, v in s.pins.items() if not k.startswith("jax-cuda12-plugin")}
    assert "jax-cuda12-plugin is not pinned" in refused(dataclasses.replace(s, pins=pins))


def test_cuda12_driver_floor():
    msg = refused(cuda12(min_driver="525.60.12"))
    assert "min_driver 525.60.12 is below 525.60.13" in msg and "stack 'mine'" in msg
    assert "below 525.60.13" in refused(cuda12(min_driver="470.82.01"))
    assert "min_driver is missing" in refused(cuda12(min_driver=None))
    assert "is not a driver version" in refused(cuda12(min_driver="latest"))


def test_cuda13_driver_floor():
    pins = {"jax": "0.10.2", "jaxlib": "0.10.2", "jax-cuda13-plugin": "0.10.2", "jax-cuda13-pjrt": "0.10.2"}
    ok = cpu(accelerator="cuda13", pins=pins, min_driver="580.65.06")
    check_stack(ok)
    check_stack(dataclasses.replace(ok, min_driver=MIN_DRIVER["cuda13"]))
    assert "min_driver 575.57.08 is below 580" in refused(dataclasses.replace(ok, min_driver="575.57.08"))
    assert "min_driver 535 is below 580" in refused(dataclasses.replace(ok, min_driver="535"))


def test_libtpu_must_be_the_one_jax_was_released_with():
    msg = refused(tpu(libtpu="0.0.41"))
    assert "libtpu 0.0.41 is not the libtpu jax 0.10.2 was released with (0.0.42.*)" in msg
    assert "0.0.42.*" in refused(tpu(libtpu="0.0.420"))  # a prefix of the digits is not a match
    assert "0.0.23" in refused(tpu(jax="0.7.2", libtpu="0.0.23.1"))
    pins = {k: v for k, v in tpu().pins.items() if k != "libtpu"}
    assert "libtpu is not pinned" in refused(tpu(pins=pins))


def test_tpu_stack_with_a_jax_ctk_does_not_know_is_refused():
    msg = refused(tpu(jax="0.99.0", libtpu="0.0.99"))
    assert "ctk does not know which libtpu jax 0.99.0 requires" in msg
    assert "LIBTPU_FOR_JAX" in msg


def test_wheels_of_another_accelerator_are_refused():
    assert "libtpu is a tpu wheel, but the stack's accelerator is cpu" in refused(
        cpu(pins={**cpu().pins, "libtpu": "0.0.42.1"}))
    msg = refused(tpu(pins={**tpu().pins, "jax_cuda12_plugin": "0.10.2"}))
    assert "jax_cuda12_plugin is a cuda12 wheel" in msg
    assert "uses no NVIDIA driver" in refused(cpu(min_driver="550"))


def test_pins_must_be_exact_versions():
    msg = refused(cpu(pins={**cpu().pins, "flax": ">=0.12"}))
    assert "flax: '>=0.12' is not an exact version" in msg
    assert "is not an exact version" in refused(cpu(pins={**cpu().pins, "optax": "0.2.*"}))
    assert "is pinned twice" in refused(cpu(pins={**cpu().pins, "Orbax_Checkpoint": "0.12.8"}))


def test_python_versions_must_be_ones_the_jax_release_supports():
    msg = refused(cpu(pythons=["3.10", "3.11"]))
    assert "python 3.10: jax 0.10.2 needs Python >= 3.11" in msg
    assert "python 3.11: jax 0.12.0.1 needs Python >= 3.12" in refused(
        cpu(pins={**cpu().pins, "jax": "0.12.0.1", "jaxlib": "0.12.0.1"}))
    assert "python lists no Python version" in refused(cpu(pythons=[]))
    assert "python lists a version twice" in refused(cpu(pythons=["3.11", "3.11"]))
    check_stack(cpu(pythons=["3.11", "3.12", "3.13"]))


def test_exclude_newer_must_be_a_utc_time():
    check_stack(cpu(exclude_newer="2026-12-01T00:00:00Z"))
    check_stack(cpu(exclude_newer="2026-12-01"))
    assert "exclude_newer 'last week' is not a UTC time" in refused(cpu(exclude_newer="last week"))


def test_unknown_accelerator_gets_a_hint():
    msg = refused(cpu(accelerator="tpus"))
    assert "my-stacks.yaml" in msg and "unknown accelerator 'tpus'" in msg and "did you mean 'tpu'" in msg


# ---------------------------------------------------------------- the file format

def test_errors_name_file_line_and_stack(write):
    path = stacks_file(write, """
        good:
          accelerator: cpu
          python: "3.11"
          pins: {jax: "0.10.2", jaxlib: "0.10.2"}
        bad-tpu:
          accelerator: tpu
          python: "3.11"
          pins: {jax: "0.10.2", jaxlib: "0.10.2", libtpu: "0.0.40"}
        bad-gpu:
          accelerator: cuda12
          python: "3.11"
          min_driver: "450.80.02"
          pins: {jax: "0.10.2", jaxlib: "0.10.2", jax-cuda12-plugin: "0.10.2", jax-cuda12-pjrt: "0.10.2"}
    """)
    with pytest.raises(UserError) as e:
        load_stacks(path)
    msg = str(e.value)
    # Both broken stacks are reported, each at its own line.
    assert f"{path}:7:3: error: stack 'bad-tpu': libtpu 0.0.40 is not the libtpu" in msg
    assert f"{path}:11:3: error: stack 'bad-gpu': min_driver 450.80.02 is below 525.60.13" in msg
    assert "stack 'good'" not in msg
    # Loading without the check gives the stacks as written.
    assert set(load_stacks(path, check=False)) == {"good", "bad-tpu", "bad-gpu"}


def test_python_is_one_version_or_a_list(write):
    path = stacks_file(write, """
        one:
          accelerator: cpu
          python: "3.11"
          pins: {jax: "0.10.2", jaxlib: "0.10.2"}
        two:
          accelerator: cpu
          python: ["3.11", "3.13"]
          exclude_newer: "2026-12-01T00:00:00Z"
          pins: {jax: "0.10.2", jaxlib: "0.10.2"}
    """)
    stacks = load_stacks(path)
    assert stacks["one"].pythons == ["3.11"] and stacks["one"].exclude_newer is None
    assert stacks["two"].pythons == ["3.11", "3.13"] and stacks["two"].exclude_newer == "2026-12-01T00:00:00Z"


def test_unquoted_versions_are_refused(write):
    path = stacks_file(write, """
        s:
          accelerator: cpu
          python: 3.10
          pins: {jax: 0.10, jaxlib: "0.10"}
    """)
    with pytest.raises(UserError) as e:
        load_stacks(path)
    msg = str(e.value)
    assert "python '3.1' is not a 3.N version" in msg  # YAML read 3.10 as the number 3.1
    assert 'quote it: python: ["3.11"]' in msg
    assert "jax: '0.1' is not an exact version" in msg


def test_structure_errors(write):
    path = stacks_file(write, """
        s:
          acelerator: cpu
          python: "3.11"
          pins: {jax: "0.10.2", jaxlib: "0.10.2"}
        t:
          accelerator: cpu
          python: "3.11"
          pins: []
    """)
    with pytest.raises(UserError) as e:
        load_stacks(path)
    msg = str(e.value)
    assert "stack 's': unknown key 'acelerator'" in msg and "did you mean 'accelerator'" in msg
    assert "stack 's': 'accelerator' is required" in msg
    assert "stack 't': pins must be a mapping" in msg


def test_file_without_stacks_key(write):
    path = write("jax-cpu:\n  accelerator: cpu\n", "stacks.yaml")
    with pytest.raises(UserError, match="expected a top-level 'stacks:' mapping"):
        load_stacks(path)


def test_missing_file():
    with pytest.raises(UserError, match="no such file"):
        load_stacks("/nonexistent/stacks.yaml")
