"""ctk's multi-node smoke test: one all-reduce (psum) over every device of every process.

Each process prints the process count, the global device count, the reduced value (the
device count, every device contributing 1) and the all-reduce's wall time.
"""

import time

import jax
import jax.numpy as jnp
from jax.experimental import multihost_utils


def main() -> None:
    try:  # CPU nodes: cross-process collectives need gloo (affects only the CPU backend)
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    except (AttributeError, ValueError):
        pass
    jax.distributed.initialize()  # finds Slurm (or a TPU pod) by itself
    n_local = jax.local_device_count()
    ones = jnp.ones((n_local,), dtype=jnp.float32)
    allreduce = jax.pmap(lambda x: jax.lax.psum(x, "all"), axis_name="all")
    allreduce(ones).block_until_ready()  # compile and warm up
    multihost_utils.sync_global_devices("ctk-smoke")
    t0 = time.perf_counter()
    total = allreduce(ones).block_until_ready()
    elapsed = time.perf_counter() - t0
    print(f"ctk-smoke process={jax.process_index()} process_count={jax.process_count()} "
          f"device_count={jax.device_count()} local_devices={n_local} "
          f"reduced={float(total[0]):g} seconds={elapsed:.6f}", flush=True)
    ok = int(total[0]) == jax.device_count()
    jax.distributed.shutdown()
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
