"""Software stacks: pinned JAX / jaxlib / CUDA plugin / libtpu sets and their compatibility rules."""

from .catalog import (
    ACCELERATORS,
    DEFAULT_PATH,
    LIBTPU_FOR_JAX,
    MIN_DRIVER,
    Stack,
    check_stack,
    get_stack,
    load_stacks,
    normalize,
)

__all__ = [
    "ACCELERATORS", "DEFAULT_PATH", "LIBTPU_FOR_JAX", "MIN_DRIVER", "Stack",
    "check_stack", "get_stack", "load_stacks", "normalize",
]
