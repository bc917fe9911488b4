"""images/stacks.yaml and the rules a stack must keep (ctk.stacks)."""

from __future__ import annotations

import dataclasses
import textwrap

import pytest

from ctk.errors import UserError
from ctk.stacks import LIBTPU_FOR_JAX, MIN_DRIVER, Stack, check_stack, get_stack, load_stacks
from ctk.stacks.catalog import EXACT_VERSION_RE, normalize

BASE_PINS = {"flax": "0.12.8", "optax": "0.2.8", "orbax-checkpoint": "0.12.8", "grain": "0.2.18",
             "chex": "0.1.92"}


def stacks_file(write, body: str) -> str:
    return write("stacks:\n" + textwrap.indent(textwrap.dedent(body), "  "), "stacks.yaml")


def refused(stack: Stack) -> str:
    with pytest.raises(UserError) as e:
        check_stack(stack)
    return str(e.value)


def cpu(**over) -> Stack:
    s = Stack(name="mine", accelerator="cpu", python="3.11",
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
    assert {"jax-cpu", "jax-cuda12", "jax-tpu"} <= set(stacks)
    for s in stacks.values():
        check_stack(s)  # raises on any broken rule
        assert s.python == "3.11"
        for name, version in s.pins.items():
            assert isinstance(version, str) and EXACT_VERSION_RE.match(version), (s.name, name, version)


def test_shipped_cpu_stack_pins_the_whole_set():
    s = load_stacks()["jax-cpu"]
    assert s.accelerator == "cpu" and s.min_driver is None
    assert {normalize(n) for n in s.pins} == {"jax", "jaxlib", "flax", "optax", "orbax-checkpoint",
                                             "grain", "chex"}
    assert s.pins["jax"] == s.pins["jaxlib"]
    assert s.requirements()[:2] == [f"jax=={s.pins['jax']}", f"jaxlib=={s.pins['jax']}"]


def test_shipped_gpu_and_tpu_stacks_follow_their_jax():
    stacks = load_stacks()
    gpu, tp = stacks["jax-cuda12"], stacks["jax-tpu"]
    jax = gpu.version("jax")
    assert gpu.version("jax-cuda12-plugin") == jax and gpu.version("jax-cuda12-pjrt") == jax
    assert gpu.min_driver == "525.60.13"
    assert tp.version("jax") == jax
    assert LIBTPU_FOR_JAX[jax] == "0.0.42.*"  # from jax 0.10.2's METADATA
    assert tp.version("libtpu").startswith("0.0.42")
    # The same framework pins everywhere: a job moves between stacks unchanged.
    for name in BASE_PINS:
        assert gpu.version(name) == tp.version(name) == stacks["jax-cpu"].version(name)


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
