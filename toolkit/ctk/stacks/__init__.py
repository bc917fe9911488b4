"""Software stacks: pinned JAX / jaxlib / CUDA plugin / libtpu sets, their compatibility rules,
and their lock files (the whole closure, per Python version, with hashes)."""

from .catalog import (
    ACCELERATORS,
    DEFAULT_PATH,
    JAX_REQUIRES_PYTHON,
    LIBTPU_FOR_JAX,
    MIN_DRIVER,
    Stack,
    check_stack,
    get_stack,
    load_stacks,
    newest_for,
    normalize,
    python_tuple,
)
from .lock import (
    LOCK_PLATFORM,
    Lock,
    compile_lock,
    current_lock,
    image_lock,
    jax_role_vars,
    lock_problems,
    lock_state,
    pip_target_args,
    read_lock,
    write_lock,
)

__all__ = [
    "ACCELERATORS", "DEFAULT_PATH", "JAX_REQUIRES_PYTHON", "LIBTPU_FOR_JAX", "LOCK_PLATFORM", "MIN_DRIVER",
    "Lock", "Stack", "check_stack", "compile_lock", "current_lock", "get_stack", "image_lock", "jax_role_vars",
    "load_stacks", "lock_problems", "lock_state", "newest_for", "normalize", "pip_target_args", "python_tuple",
    "read_lock", "write_lock",
]
