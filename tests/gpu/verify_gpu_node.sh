#!/usr/bin/env bash
# On a real GPU host (a node booted from a ctk GPU image, or any machine with an NVIDIA driver
# and a JAX venv with a CUDA plugin): prove the driver, the GPUs, JAX on them, a bf16 matmul
# rate, ctk's health check, train.py's step time with and without the jax-train template's
# XLA flags, and MaxText's step on the GPUs with the maxtext template's flags, with its MFU (where
# PYTHON has maxtext: an image of a maxtext-cuda12 stack). Prints one line per check and exits 1
# if any fails.
#
#   tests/gpu/verify_gpu_node.sh [--python PYTHON] [--gpus N] [--healthcheck PATH] [--train PATH]
#
# PYTHON defaults to the image's venv (/opt/ctk/jax/bin/python), else python3. N defaults to
# what nvidia-smi lists. The health check defaults to the image's (/usr/lib/ctk/healthcheck),
# else the copy in this checkout; train.py to the checkout's sbatch/examples/train.py.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
python=/opt/ctk/jax/bin/python
[ -x "$python" ] || python=python3
gpus=""
healthcheck=/usr/lib/ctk/healthcheck
[ -x "$healthcheck" ] || healthcheck="$root/toolkit/ctk/data/ansible/roles/slurm/files/ctk-healthcheck"
train="$root/toolkit/ctk/data/sbatch/examples/train.py"
while [ $# -gt 0 ]; do
  case "$1" in
    --python) python=$2; shift 2 ;;
    --gpus) gpus=$2; shift 2 ;;
    --healthcheck) healthcheck=$2; shift 2 ;;
    --train) train=$2; shift 2 ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "verify_gpu_node.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

failed=0
pass() { printf 'PASS %s\n' "$*"; }
fail() { printf 'FAIL %s\n' "$*"; failed=1; }

# 1. The driver is loaded (its kernel module answers in /proc), and nvidia-smi lists the GPUs.
if [ -r /proc/driver/nvidia/version ]; then
  pass "driver loaded: $(head -n1 /proc/driver/nvidia/version)"
else
  fail "no NVIDIA driver loaded (/proc/driver/nvidia/version absent)"
fi
if listed=$(nvidia-smi -L 2>&1); then
  n=$(printf '%s\n' "$listed" | grep -c '^GPU ')
  pass "nvidia-smi lists $n GPU(s): $(printf '%s\n' "$listed" | head -n1)"
  [ -n "$gpus" ] || gpus=$n
  driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | sort -u | tr '\n' ' ')
  pass "driver version $driver"
else
  fail "nvidia-smi failed: $listed"
  [ -n "$gpus" ] || gpus=0
fi
if [ -r /etc/ctk/nvidia-driver.json ]; then
  pass "image record: $(tr -d '\n' < /etc/ctk/nvidia-driver.json | cut -c1-160)"
fi

# 2. JAX sees the GPUs, and a bf16 matmul reaches a plausible rate (an H100 or H200 does several
# hundred TFLOP/s; below 10 the GPU is not being used, or badly).
out=$("$python" - "$gpus" <<'PY' 2>&1
import sys, time
import jax, jax.numpy as jnp
want = int(sys.argv[1])
devs = jax.devices()
gpu = [d for d in devs if d.platform == "gpu"]
print(f"jax {jax.__version__}: {len(gpu)} GPU device(s): {gpu[0].device_kind if gpu else devs}")
if len(gpu) != want or not gpu:
    print(f"FAILED: jax sees {len(gpu)} GPUs, nvidia-smi {want}")
    sys.exit(1)
n = 8192
a = jnp.ones((n, n), jnp.bfloat16)
b = jnp.ones((n, n), jnp.bfloat16)
f = jax.jit(lambda a, b: a @ b)
f(a, b).block_until_ready()
reps = 20
t0 = time.perf_counter()
for _ in range(reps):
    c = f(a, b)
c.block_until_ready()
dt = time.perf_counter() - t0
tflops = 2 * n ** 3 * reps / dt / 1e12
print(f"bf16 matmul {n}x{n} on {gpu[0].device_kind}: {tflops:.0f} TFLOP/s ({dt / reps * 1e3:.2f} ms each)")
if tflops < 10:
    print("FAILED: below 10 TFLOP/s")
    sys.exit(1)
PY
)
rc=$?
while IFS= read -r line; do
  if [ $rc -eq 0 ]; then pass "$line"; else fail "$line"; fi
done <<< "$(printf '%s\n' "$out" | grep -v '^WARNING\|^I0000\|^W0000' | tail -n 4)"

# 3. ctk's health check, as slurmd would run it, against the GPUs found.
# (The checkout's copy is not executable: git keeps the role's file at mode 644, Ansible sets 755.)
hc_cmd=("$healthcheck"); [ -x "$healthcheck" ] || hc_cmd=(python3 "$healthcheck")
if hc=$("${hc_cmd[@]}" --gpus "$gpus" 2>&1); then pass "health check: $hc"; else fail "health check: $hc"; fi

# 4. train.py with and without the jax-train template's XLA flags (the GPU variant's, at its
# default combine threshold): milliseconds per step, timed between the step lines train.py prints
# (from the 50th to the last), so that start-up and compilation are not in the figure. (Timing a
# short run against a long one, as this did first, gave -1.22 ms/step on an H200: the start-up's
# noise is larger than 200 steps of this small model.)
flags="--xla_gpu_enable_latency_hiding_scheduler=true --xla_gpu_all_reduce_combine_threshold_bytes=134217728"
flags="$flags --xla_gpu_all_gather_combine_threshold_bytes=134217728 --xla_gpu_reduce_scatter_combine_threshold_bytes=134217728"
flags="$flags --xla_gpu_enable_pipelined_all_gather=true --xla_gpu_enable_pipelined_reduce_scatter=true"
flags="$flags --xla_gpu_enable_pipelined_all_reduce=true"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
steps=550
run_train() {  # XLA_FLAGS -> "MS_PER_STEP" or "ERR ..."
  rm -rf "$tmp/ckpt"
  set -o pipefail
  XLA_FLAGS="$1" "$python" "$train" --steps "$steps" --checkpoint-every 100000 --checkpoint-dir "$tmp/ckpt" 2>"$tmp/train.err" |
    python3 -c '
import sys, time
first, warm = 50, None
last = n = 0
for line in sys.stdin:
    if line.startswith("step="):
        n = int(line.split()[0].split("=")[1])
        if n == first:
            warm = time.perf_counter()
        elif n > first:
            last = time.perf_counter()
if warm is None or n <= first or last <= warm:
    print(f"ERR only {n} step lines")
else:
    print(f"{(last - warm) / (n - first) * 1000:.3f}")
' || echo "ERR train.py failed: $(tail -n 3 "$tmp/train.err")"
}
for label in "without" "with"; do
  f=""; [ "$label" = "with" ] && f=$flags
  if [ ! -r "$train" ]; then fail "no train.py at $train"; break; fi
  ms=$(run_train "$f")
  case "$ms" in
    ERR*) fail "train.py $label the template's XLA flags: $ms" ;;
    *) pass "train.py $label the template's XLA flags: $ms ms/step (steps 50 to $steps)" ;;
  esac
done

# 5. MaxText's own training step on every GPU of the node, one process, with the maxtext
# template's GPU XLA flags (tests/unit/test_maxtext_template.py checks they are the template's):
# a 1B-parameter llama2-style model on synthetic data; the median of MaxText's TFLOP/s/device
# from step 5 on, and the MFU against the GPU's dense bf16 peak (H100 and H200: 989 TFLOP/s).
maxtext_flags="--xla_gpu_enable_latency_hiding_scheduler=true --xla_gpu_enable_triton_gemm=false"
maxtext_flags="$maxtext_flags --xla_gpu_enable_highest_priority_async_stream=true"
maxtext_flags="$maxtext_flags --xla_gpu_all_reduce_combine_threshold_bytes=134217728"
maxtext_flags="$maxtext_flags --xla_gpu_all_gather_combine_threshold_bytes=134217728"
maxtext_flags="$maxtext_flags --xla_gpu_reduce_scatter_combine_threshold_bytes=67108864"
maxtext_flags="$maxtext_flags --xla_gpu_enable_pipelined_all_gather=true --xla_gpu_enable_pipelined_reduce_scatter=true"
maxtext_flags="$maxtext_flags --xla_gpu_enable_pipelined_all_reduce=true --xla_gpu_enable_while_loop_double_buffering=true"
maxtext_flags="$maxtext_flags --xla_disable_hlo_passes=rematerialization"
if ! "$python" -c 'import maxtext' 2>/dev/null; then
  printf 'SKIP maxtext: %s has no maxtext (an image of the maxtext-cuda12 stack has it)\n' "$python"
else
  config=$("$python" -c 'import maxtext, os; print(os.path.join(os.path.dirname(maxtext.__file__), "configs", "base.yml"))')
  XLA_FLAGS="$maxtext_flags" XLA_PYTHON_CLIENT_MEM_FRACTION=0.85 "$python" -m maxtext.trainers.pre_train.train "$config" \
    hardware=gpu run_name=verify base_output_directory="$tmp/maxtext" dataset_type=synthetic steps=30 \
    enable_checkpointing=false enable_tensorboard=false per_device_batch_size=4 max_target_length=2048 \
    base_emb_dim=2048 base_num_query_heads=16 base_num_kv_heads=16 base_mlp_dim=8192 base_num_decoder_layers=16 \
    head_dim=128 vocab_size=32768 > "$tmp/maxtext.log" 2>&1
  rc=$?
  out=$("$python" - "$tmp/maxtext.log" <<'PY'
import re, statistics, sys
import jax
text = open(sys.argv[1], errors="replace").read()
rows = [(int(s), float(t), float(loss)) for s, t, loss in
        re.findall(r"completed step: (\d+), seconds: [0-9.]+, TFLOP/s/device: ([0-9.]+),.*? loss: ([0-9.]+)", text)]
late = [t for s, t, _ in rows if s >= 5]
if not late:
    print("FAILED: no step lines after step 5")
    sys.exit(1)
kind = jax.devices()[0].device_kind
peak = 989.0 if ("H100" in kind or "H200" in kind) else None
tf = statistics.median(late)
mfu = f", MFU {tf / peak * 100:.1f} % of {peak:.0f}" if peak else ""
print(f"maxtext on {jax.device_count()} x {kind}: {tf:.1f} TFLOP/s/device{mfu}; loss {rows[0][2]:.3f} -> {rows[-1][2]:.3f}")
PY
)
  if [ $rc -eq 0 ] && [ -n "$out" ] && [ "${out#FAILED}" = "$out" ]; then
    pass "$out"
  else
    fail "maxtext (rc $rc): ${out:-} $(tail -n 3 "$tmp/maxtext.log")"
  fi
fi

exit $failed
