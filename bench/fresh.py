"""Fast from nothing: what a new machine pays before its first job, measured side by side.

    .venv/bin/python bench/fresh.py [--old REF] [--rounds N] [--demo] [--unit] [--keep]

1. The lab image from an empty store (`ctk image build blueprints/lab.yaml --json`, verification
   on, an empty wheelhouse, pip's cache off): this checkout and REF's ctk (a git worktree of it,
   run with the same venv, building its own blueprints/lab.yaml) in turn, A B A B, with the ratio
   pair by pair; the steps of the last new build (base, each layer, the wheels, verification)
   from its --json profile.
2. The no-op rebuild with verification (the pass on record), 5 runs.
3. make demo's venv: `python -m venv` then `pip install -e .[test]`, against the same with uv
   installing (uv itself installed by pip first), in turn, pip's and uv's caches off.
4. --unit: the fast tier, `make test-unit` (its venv already made), its wall time.
5. --demo: `make demo` in a fresh clone with an empty image store and no venv; the phases from
   the lines make prints (set-up: apt and the venv; image; deploy; the jobs). It leaves no lab
   running (ctk destroy --purge at the end).

Targets (issue "Fast from nothing"): make demo <= 90 s without the apt-get of packages already
installed; the lab image from an empty store <= 60 s; no-op rebuild <= 1 s.
Root, Debian's packer and mmdebstrap (or debootstrap), and the network to PyPI and Debian's
archive, as the image build itself needs.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAB = os.path.join(ROOT, "blueprints", "lab.yaml")
# The last commit before issue 24's layer work (per-layer profile, uv, prefetch, unsafe dpkg I/O).
DEFAULT_OLD = "4a2d620"
SCRATCH = "/var/tmp"  # on disk, as /var/lib/ctk is


def run_build(toolkit: str, state: str, *flags: str, blueprint: str = LAB) -> tuple[float, dict]:
    """`ctk image build` of BLUEPRINT (the lab's) with ctk from TOOLKIT into STATE: (seconds,
    its --json)."""
    env = {**os.environ, "CTK_STATE_DIR": state, "PYTHONPATH": toolkit, "PIP_NO_CACHE_DIR": "1"}
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "ctk", "image", "build", blueprint, "--json", *flags],
                       capture_output=True, text=True, env=env, cwd=SCRATCH)
    dt = time.monotonic() - t0
    if r.returncode != 0:
        sys.exit(f"bench: ctk image build ({toolkit}) failed:\n{r.stderr[-3000:]}")
    return dt, json.loads(r.stdout)[0]


def fresh_store() -> str:
    return tempfile.mkdtemp(prefix="ctk-bench-store-", dir=SCRATCH)


def worktree(ref: str) -> str:
    path = tempfile.mkdtemp(prefix="ctk-bench-old-", dir=SCRATCH)
    subprocess.run(["git", "-C", ROOT, "worktree", "add", "--detach", "-q", path, ref], check=True)
    return path


def drop_worktree(path: str) -> None:
    subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", path], check=False)
    shutil.rmtree(path, ignore_errors=True)


def spread(xs: list[float]) -> str:
    return f"median {statistics.median(xs):6.1f} (min {min(xs):.1f}, max {max(xs):.1f}, n={len(xs)})"


def image_from_nothing(old_ref: str, rounds: int, keep: bool) -> None:
    old = worktree(old_ref)
    new_t, old_t, ratios, last = [], [], [], {}
    try:
        for i in range(rounds):
            pair = {}
            # each ctk builds its own lab blueprint (an older ctk may not know a newer one's
            # settings: slurm_release came after 4a2d620)
            for label, tree in (("new", ROOT), ("old", old)):
                store = fresh_store()
                try:
                    pair[label], out = run_build(os.path.join(tree, "toolkit"), store,
                                                 blueprint=os.path.join(tree, "blueprints", "lab.yaml"))
                    if label == "new":
                        last = out
                finally:
                    if not keep:
                        shutil.rmtree(store, ignore_errors=True)
                print(f"  round {i + 1}: {label} {pair[label]:6.1f} s", flush=True)
            new_t.append(pair["new"])
            old_t.append(pair["old"])
            ratios.append(pair["new"] / pair["old"])
    finally:
        drop_worktree(old)
    print(f"lab image from an empty store, this checkout: {spread(new_t)} s   (target <= 60 s)")
    print(f"lab image from an empty store, {old_ref}:      {spread(old_t)} s")
    print(f"new / old, pair by pair:                       {', '.join(f'{r:.2f}' for r in ratios)}")
    print("steps of the last new build (seconds):")
    for step, p in last.get("profile", {}).items():
        extra = {k: v for k, v in p.items() if k not in ("seconds", "slowest_tasks")}
        print(f"  {step:8} {p['seconds']:6.1f}  {json.dumps(extra)}")
        for name, secs in p.get("slowest_tasks", [])[:2]:
            print(f"           {secs:6.1f}  {name}")


def noop_rebuild() -> None:
    store = fresh_store()
    try:
        run_build(os.path.join(ROOT, "toolkit"), store)
        times = [run_build(os.path.join(ROOT, "toolkit"), store)[0] for _ in range(5)]
    finally:
        shutil.rmtree(store, ignore_errors=True)
    print(f"no-op rebuild with verification on record: {spread(times)} s   (target <= 1 s)")


def venvs(rounds: int) -> None:
    env = {**os.environ, "PIP_NO_CACHE_DIR": "1", "UV_NO_CACHE": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    py = shutil.which("python3") or sys.executable
    ways = {
        "pip": ["sh", "-c", '"$0" -m venv "$1" && "$1/bin/pip" install -q -e ".[test]"', py],
        "uv": ["sh", "-c", '"$0" -m venv "$1" && "$1/bin/pip" install -q uv && '
               '"$1/bin/uv" pip install -q --python "$1/bin/python" -e ".[test]"', py],
    }
    got: dict[str, list[float]] = {k: [] for k in ways}
    for _ in range(rounds):
        for name, argv in ways.items():
            d = tempfile.mkdtemp(prefix="ctk-bench-venv-", dir=SCRATCH)
            t0 = time.monotonic()
            r = subprocess.run(argv + [os.path.join(d, "venv")], cwd=ROOT, env=env, capture_output=True, text=True)
            got[name].append(time.monotonic() - t0)
            shutil.rmtree(d, ignore_errors=True)
            if r.returncode != 0:
                sys.exit(f"bench: the {name} venv failed:\n{r.stderr[-2000:]}")
    for name, ts in got.items():
        print(f"venv with ctk[test], {name:3}: {spread(ts)} s")
    print(f"uv / pip, pair by pair: {', '.join(f'{u / p:.2f}' for u, p in zip(got['uv'], got['pip']))}")


def unit_tier() -> None:
    """`make test-unit` as users run it (its venv already made): pytest-xdist on every core."""
    t0 = time.monotonic()
    r = subprocess.run(["make", "-s", "test-unit"], cwd=ROOT, capture_output=True, text=True)
    dt = time.monotonic() - t0
    summary = next((x for x in reversed(r.stdout.strip().splitlines()) if " in " in x), "?")
    print(f"make test-unit: {dt:6.1f} s   ({summary})   (target <= 60 s)")


DEMO_PHASES = (  # (name, the first line of make's output that starts it)
    ("set-up (apt, venv)", None),
    ("image", ".venv/bin/ctk image build"),
    ("deploy", ".venv/bin/ctk deploy"),
    ("jobs", "==> a 2-node job"),
)


def demo(keep: bool) -> None:
    clone = tempfile.mkdtemp(prefix="ctk-bench-demo-", dir=SCRATCH)
    store = fresh_store()
    subprocess.run(["git", "clone", "-q", ROOT, clone], check=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("VIRTUAL_ENV")}
    env.update(CTK_STATE_DIR=store, PIP_NO_CACHE_DIR="1")
    marks = [(DEMO_PHASES[0][0], time.monotonic())]
    log = []
    proc = subprocess.Popen(["make", "demo"], cwd=clone, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        log.append(line)
        for name, start in DEMO_PHASES[1:]:
            if start and line.startswith(start) and all(m[0] != name for m in marks):
                marks.append((name, time.monotonic()))
    rc = proc.wait()
    end = time.monotonic()
    try:
        subprocess.run([os.path.join(clone, ".venv", "bin", "ctk"), "destroy", "lab", "--purge"],
                       cwd=clone, env=env, capture_output=True)
    finally:
        if not keep:
            shutil.rmtree(clone, ignore_errors=True)
            shutil.rmtree(store, ignore_errors=True)
    if rc != 0:
        sys.exit("bench: make demo failed:\n" + "".join(log[-40:]))
    print(f"make demo in a fresh clone, empty store, no venv: {end - marks[0][1]:6.1f} s   (target <= 90 s)")
    for (name, t), nxt in zip(marks, [m[1] for m in marks[1:]] + [end]):
        print(f"  {name:20} {nxt - t:6.1f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--old", default=DEFAULT_OLD, metavar="REF", help=f"the ctk to compare with (default {DEFAULT_OLD})")
    ap.add_argument("--rounds", type=int, default=2, help="pairs of image builds and of venvs (default 2)")
    ap.add_argument("--demo", action="store_true", help="also time make demo in a fresh clone")
    ap.add_argument("--unit", action="store_true", help="also time the fast tier")
    ap.add_argument("--only", choices=("image", "noop", "venv"), help="run one part only")
    ap.add_argument("--keep", action="store_true", help="keep the stores and the clone")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench/fresh.py: image builds need root (run it as root)")
    parts = [args.only] if args.only else ["image", "noop", "venv"]
    if "image" in parts:
        image_from_nothing(args.old, args.rounds, args.keep)
    if "noop" in parts:
        noop_rebuild()
    if "venv" in parts:
        venvs(args.rounds)
    if args.unit:
        unit_tier()
    if args.demo:
        demo(args.keep)


if __name__ == "__main__":
    main()
