"""ctk's example training job: a small MLP trained data-parallel across processes, with orbax
checkpoints, that picks up where it left off after a Slurm requeue.

Launched one task per node (`srun python3 train.py ARGS`); under Slurm with several tasks,
jax.distributed.initialize() finds the cluster by itself. For tests without Slurm, set
JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES and JAX_PROCESS_ID in every process.

Each step's global batch depends only on (seed, step), so an interrupted and resumed run ends
with exactly the same final line as an uninterrupted one (given the same process count).
Process 0 prints `step=N loss=L` per step and `train: final step=N loss=L` at the end.
"""

import argparse
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

IN_DIM, HIDDEN = 16, 32
_TEACHER = np.random.default_rng(20240601)  # the fixed function the MLP learns
TEACHER_W = _TEACHER.normal(size=(IN_DIM,)) / np.sqrt(IN_DIM)
TEACHER_V = _TEACHER.normal(size=(IN_DIM,)) / np.sqrt(IN_DIM)


def _count(min_value):
    def parse(text):
        value = int(text)
        if value < min_value:
            raise argparse.ArgumentTypeError(f"must be >= {min_value}, got {value}")
        return value
    return parse


def _seconds(text):
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--steps", type=_count(1), default=100, help="optimizer updates in total")
    p.add_argument("--checkpoint-dir", required=True,
                   help="checkpoint directory (shared by all nodes; created if missing)")
    p.add_argument("--checkpoint-every", type=_count(1), default=10,
                   help="save every K steps (and always at the last step)")
    p.add_argument("--keep", type=_count(1), default=3, help="checkpoints to keep")
    p.add_argument("--batch-size", type=_count(1), default=64,
                   help="global batch size; must divide by the process count")
    p.add_argument("--lr", type=float, default=1e-2, help="adam learning rate")
    p.add_argument("--seed", type=int, default=0, help="seed for the initial weights and the data")
    p.add_argument("--sleep", type=_seconds, default=0.0,
                   help="seconds to sleep after each step (to make a run easy to interrupt)")
    return p, p.parse_args(argv)


def distributed_mode():
    """Returns ('slurm' | 'local' | 'single', process count) from the environment."""
    env = os.environ
    if "SLURM_JOB_ID" in env and int(env.get("SLURM_NTASKS", "1")) > 1:
        return "slurm", int(env["SLURM_NTASKS"])
    if all(env.get(k) for k in ("JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES", "JAX_PROCESS_ID")):
        return "local", int(env["JAX_NUM_PROCESSES"])
    return "single", 1


def global_batch(seed, step, batch_size):
    """The batch of `step`: a function of (seed, step) only, never of the process layout."""
    rng = np.random.default_rng([seed, step])
    x = rng.normal(size=(batch_size, IN_DIM))
    y = np.sin(x @ TEACHER_W) + 0.5 * np.tanh(x @ TEACHER_V) + 0.05 * rng.normal(size=batch_size)
    return x.astype(np.float32), y.astype(np.float32)[:, None]


def init_params(seed):
    k1, k2 = jax.random.split(jax.random.PRNGKey(seed))
    return {"w1": jax.random.normal(k1, (IN_DIM, HIDDEN)) / np.sqrt(IN_DIM),
            "b1": jnp.zeros((HIDDEN,)),
            "w2": jax.random.normal(k2, (HIDDEN, 1)) / np.sqrt(HIDDEN),
            "b2": jnp.zeros((1,))}


def loss_fn(params, x, y):
    hidden = jnp.tanh(x @ params["w1"] + params["b1"])
    return jnp.mean((hidden @ params["w2"] + params["b2"] - y) ** 2)


def main(argv=None) -> None:
    parser, args = parse_args(argv)
    try:
        mode, nproc = distributed_mode()
    except ValueError as exc:
        parser.error(f"bad SLURM_NTASKS / JAX_NUM_PROCESSES in the environment: {exc}")
    if args.batch_size % nproc:
        parser.error(f"--batch-size {args.batch_size} must be divisible by the process count {nproc}")

    try:  # CPU nodes: cross-process collectives need gloo (affects only the CPU backend)
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    except (AttributeError, ValueError):
        pass
    try:
        if mode == "slurm":
            jax.distributed.initialize()  # Slurm detection (honours an exported JAX_COORDINATOR_ADDRESS)
        elif mode == "local":
            jax.distributed.initialize(coordinator_address=os.environ["JAX_COORDINATOR_ADDRESS"],
                                       num_processes=nproc,
                                       process_id=int(os.environ["JAX_PROCESS_ID"]),
                                       cluster_detection_method="deactivate")
    except (RuntimeError, ValueError) as exc:
        sys.exit(f"train: error: jax.distributed.initialize() failed ({mode} mode): {exc}")
    rank, nproc = jax.process_index(), jax.process_count()
    is_main = rank == 0

    def log(msg):
        if is_main:
            print(msg, flush=True)

    if "CTK_RESTART_COUNT" in os.environ:
        log(f"train: restart {os.environ['CTK_RESTART_COUNT']}")

    # One mesh axis over every device of every process: the batch is split along it, the
    # parameters and optimizer state are replicated, and XLA all-reduces the gradients.
    mesh = Mesh(np.array(jax.devices()), ("data",))
    replicated, data_sharding = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))
    tx = optax.adam(args.lr)

    def make_state():  # the checkpointed pytree; `loss` is the loss of the last step taken
        params = init_params(args.seed)
        return {"params": params, "opt_state": tx.init(params), "loss": jnp.float32(jnp.nan)}

    @jax.jit
    def train_step(state, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(state["params"], x, y)  # mean over global batch
        updates, opt_state = tx.update(grads, state["opt_state"], state["params"])
        return {"params": optax.apply_updates(state["params"], updates),
                "opt_state": opt_state, "loss": loss}

    ckpt_dir = os.path.abspath(args.checkpoint_dir)
    try:
        os.makedirs(ckpt_dir, exist_ok=True)
    except OSError as exc:
        sys.exit(f"train: error: cannot create --checkpoint-dir {ckpt_dir}: {exc}")
    mgr = ocp.CheckpointManager(ckpt_dir, options=ocp.CheckpointManagerOptions(max_to_keep=args.keep))

    start = mgr.latest_step()  # only finished checkpoints count; a save cut short is ignored
    if start is None:
        start = 0
        state = jax.jit(make_state, out_shardings=replicated)()
        log("train: starting from step 0")
    else:
        # Restore straight into replicated global arrays of the right shapes and dtypes.
        target = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=replicated),
                              jax.eval_shape(make_state))
        state = mgr.restore(start, args=ocp.args.StandardRestore(target))
        log(f"train: resumed from step {start}")

    def host_loss():  # replicated scalar: every process holds the global mean locally
        return float(np.asarray(state["loss"].addressable_data(0)))

    local = args.batch_size // nproc
    rows = slice(rank * local, (rank + 1) * local)  # this process's contiguous slice
    step = start
    for step in range(start + 1, args.steps + 1):
        x, y = global_batch(args.seed, step, args.batch_size)
        xg = jax.make_array_from_process_local_data(data_sharding, x[rows], x.shape)
        yg = jax.make_array_from_process_local_data(data_sharding, y[rows], y.shape)
        state = train_step(state, xg, yg)
        log(f"step={step} loss={host_loss()!r}")  # repr: exact, equal floats print equal
        # Slurm preempts or requeues with SIGTERM (KillWait seconds before SIGKILL); JAX's
        # preemption notifier catches it and every process agrees on the step to stop at.
        preempted = mgr.reached_preemption(step)
        if preempted or step % args.checkpoint_every == 0 or step == args.steps:
            mgr.save(step, args=ocp.args.StandardSave(state), force=True)  # every process takes part
        if preempted:
            mgr.wait_until_finished()
            mgr.close()
            log(f"train: preempted at step {step}: checkpoint saved, exiting")
            sys.exit(143)  # 128 + SIGTERM: ended by the signal, after a clean checkpoint
        if args.sleep:
            time.sleep(args.sleep)
    if step > args.steps:
        log(f"train: note: the checkpoint is at step {step}, beyond --steps {args.steps}")
    mgr.wait_until_finished()  # saves are asynchronous: let the last one commit
    mgr.close()
    log(f"train: final step={step} loss={host_loss()!r}")
    if jax.distributed.is_initialized():
        jax.distributed.shutdown()


if __name__ == "__main__":
    main()
