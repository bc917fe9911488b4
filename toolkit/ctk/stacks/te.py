"""Transformer Engine: an opt-in of a CUDA stack (`transformer_engine: "2.20.2"` on a ctk/image).

`transformer-engine[jax]` is three distributions: `transformer-engine` (pure Python),
`transformer-engine-cuNN` (the prebuilt core library, a wheel per CUDA major) and
`transformer-engine-jax`, the JAX extension, which PyPI ships only as a source distribution:
it compiles at install time against a CUDA toolkit and the cuDNN, NCCL and XLA FFI headers of
the venv's jax. So an image with Transformer Engine gets:

- a lock of the stack and Transformer Engine together, `locks/STACK/pyX.Y-teV.txt`: the stack's
  pins, the two wheels at V, and what the JAX extension needs to build and to run, resolved as
  one closure (wheels only, like every lock), with the source distribution's sha256 in its
  header;
- the JAX extension built once per (Transformer Engine release, CUDA toolkit, Python) by the jax
  role in a build node that has the image's toolkit (the cuda role), into the store's wheelhouse,
  and installed from there into every image that asks for the same three.

What each release needs was read from its source distribution (setup.py, build_tools/jax.py,
pyproject.toml): the runtime requirements `jax`, `flax>=0.7.1`, `nvidia-cudnn-frontend>=1.25.0`,
`transformer_engine_cuNN==V`, and the build requirements `setuptools>=61.0` and
`pybind11[global]`; it finds nvcc through CUDA_HOME and reads the CUDA major from jax.
"""

from __future__ import annotations

from dataclasses import dataclass

SOURCE_DIST = "transformer-engine-jax"


@dataclass(frozen=True)
class Release:
    version: str
    requires: tuple[str, ...]  # besides the stack's pins; "{cuda}" is the stack's CUDA major
    build_requires: tuple[str, ...]


RELEASES = {
    "2.20.2": Release(
        "2.20.2",
        requires=("transformer-engine=={v}", "transformer-engine-cu{cuda}=={v}", "flax>=0.7.1",
                  "nvidia-cudnn-frontend>=1.25.0"),
        build_requires=("setuptools>=61.0", "pybind11[global]")),
}


def cuda_major(accelerator: str) -> int | None:
    """12 for a cuda12 stack, None for one that is not a CUDA stack."""
    return int(accelerator[len("cuda"):]) if accelerator.startswith("cuda") else None


def requirements(version: str, accelerator: str) -> list[str]:
    """What a lock of a stack with Transformer Engine VERSION adds to the stack's pins (every
    distribution but the source-built JAX extension, whose hash goes in the lock's header)."""
    r = RELEASES[version]
    cuda = cuda_major(accelerator)
    return [x.format(v=version, cuda=cuda) for x in r.requires + r.build_requires]


def wheel_key(version: str, toolkit: str, python: str) -> str:
    """The wheelhouse folder of one built JAX extension: release, CUDA toolkit, Python."""
    return f"{SOURCE_DIST}-{version}-cuda{toolkit}-py{python}"
