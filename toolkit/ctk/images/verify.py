"""Proving an image works before any node boots it: testinfra suites per role and functional
checks (munge round trip, slurmd -C, jax.devices()), run inside a node booted from the image."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sys
import time
from dataclasses import dataclass

from .. import paths
from ..errors import Failure
from ..locks import lock_file
from ..progress import Progress
from ..runner import CommandError, run
from . import buildnode
from .store import Store


class ImageVerifyError(Failure):
    """A built image failed its checks."""


@dataclass
class VerifyResult:
    image: str
    passed: int
    skipped: int
    summary: str
    cached: bool = False  # the image's layers passed these same checks before: not run again


def checks_digest() -> str:
    """A digest of the checks themselves (every file of the verify suites, and this module):
    a change of the checks verifies every image again."""
    h = hashlib.sha256()
    files = [os.path.abspath(__file__)]
    for d, dirs, names in os.walk(paths.VERIFY):
        dirs[:] = sorted(x for x in dirs if x != "__pycache__")
        files += [os.path.join(d, n) for n in sorted(names) if not n.endswith(".pyc")]
    for f in files:
        h.update(os.path.relpath(f, paths.VERIFY).encode() + b"\0")
        with open(f, "rb") as fh:
            h.update(hashlib.sha256(fh.read()).digest())
    return h.hexdigest()


# The checks wait on the node (one command each) far more than they compute: three pytest
# workers take the lab image's 22 checks from 5.7 s to 4.5 s here, on 2 cores. Each worker keeps
# one SSH connection open (testinfra's paramiko backend; paramiko comes with Fabric) and runs every
# command on a channel of it: the OpenSSH client, even multiplexed, was a process a command, and
# took 7.1 s.
VERIFY_WORKERS = 3


def _workers() -> list[str]:
    """pytest-xdist's arguments for the checks (none where it is not installed)."""
    try:
        import xdist  # noqa: F401  (a dependency of ctk; only asked whether it is there)
    except ImportError:
        return []
    return ["-n", str(VERIFY_WORKERS)]


# What names an image, not what it holds: an image that differs from a verified one only in these
# (ctk-local and the lab image, a blueprint's image module renamed) has the same checks to pass.
_NAMING = ("name", "module_id", "source")


def _what_is_checked(rec: dict) -> dict:
    """Of image record REC, what its checks read or depend on: its layers, its spec but for its
    names, its stack (pins and lock)."""
    spec = {k: v for k, v in (rec.get("spec") or {}).items() if k not in _NAMING}
    return {"layers": rec.get("layers"), "spec": spec, "stack": rec.get("stack")}


def cached_verification(name: str, store: Store) -> VerifyResult | None:
    """The image's earlier passed verification, if it was of the same layers by the same checks;
    or another image's of the same layers, spec and stack (under another name), which is then
    recorded as this one's too."""
    rec = store.image(name)
    if rec is None:
        return None
    digest = checks_digest()
    done = store.verified(name)
    if done is not None and done.get("layers") == rec["layers"] and done.get("checks") == digest:
        return VerifyResult(name, int(done.get("passed", 0)), int(done.get("skipped", 0)),
                            f"{done.get('summary', '')} (cached: verified {done.get('at', '?')})", cached=True)
    checked = _what_is_checked(rec)
    for other in store.verified_names():
        done = store.verified(other)
        if other == name or done is None or done.get("checks") != digest or done.get("checked") != checked:
            continue
        store.save_verified(name, {**done, "as": done.get("as") or other})
        return VerifyResult(name, int(done.get("passed", 0)), int(done.get("skipped", 0)),
                            f"{done.get('summary', '')} (cached: verified {done.get('at', '?')} as image "
                            f"{done.get('as') or other}, of the same layers)", cached=True)
    return None


def verify_image(name: str, store: Store | None = None, progress: Progress | None = None,
                 again: bool = True) -> VerifyResult:
    """Run the image's checks in a node booted from it; unless AGAIN, an earlier pass of the
    same layers by the same checks stands (the record is kept in the store)."""
    store = store or Store()
    progress = progress or Progress()
    # One verification of an image at a time: a second `ctk image build` of the same image waits
    # here, then takes the first one's pass (its node and work folder are the first one's).
    with lock_file(os.path.join(store.tmp, f"verify-{name}.lock")):
        if not again:
            cached = cached_verification(name, store)
            if cached:
                return cached
        return _verify(name, store, progress)


def _verify(name: str, store: Store, progress: Progress) -> VerifyResult:
    rec = store.built_image(name)  # under the lock: a build may have changed it until then
    store.forget_verified(name)  # a failed run below leaves no pass on record
    checks = checks_digest()
    work = store.scratch(f"verify-{name}")
    record = os.path.join(work, "image.json")
    with open(record, "w") as f:
        json.dump(rec, f)
    suites = [os.path.join(paths.VERIFY, f"test_{r}.py") for r in rec["spec"]["roles"]
              if os.path.exists(os.path.join(paths.VERIFY, f"test_{r}.py"))]
    suites.append(os.path.join(paths.VERIFY, "test_functional.py"))
    with progress.step(f"verify image {name} ({len(suites)} suites)"):
        node = buildnode.boot(store.lowerdirs(rec["layers"]), work)
        try:
            ssh_config = os.path.join(work, "ssh_config")
            with open(ssh_config, "w") as f:
                f.write(f"Host {node.addr}\n  Port {node.port}\n  User root\n  IdentityFile {node.private_key}\n"
                        "  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n  LogLevel ERROR\n")
            # No bytecode written into the installed package, which may be read-only; and the
            # checks' pytest is a session of its own, whatever pytest-xdist worker runs ctk.
            env = {**{k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST_")},
                   "CTK_IMAGE_RECORD": record, "PYTHONDONTWRITEBYTECODE": "1"}
            # The suites' own pytest.ini: no configuration above the installed package applies.
            ini = os.path.join(paths.VERIFY, "pytest.ini")
            try:
                tail = run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-c", ini,
                            "--rootdir", paths.VERIFY, f"--hosts=paramiko://root@{node.addr}",
                            f"--ssh-config={ssh_config}", *_workers(), *suites],
                           env=env, cwd=paths.VERIFY, on_line=progress.task, tail_lines=60)
            except CommandError as e:
                raise ImageVerifyError(f"image '{name}' failed verification:\n{e.tail}") from None
        finally:
            node.stop()
            shutil.rmtree(work, ignore_errors=True)
    summary = next((ln for ln in reversed(tail) if re.search(r"\d+ passed", ln)), tail[-1] if tail else "")
    passed_m, skipped_m = re.search(r"(\d+) passed", summary), re.search(r"(\d+) skipped", summary)
    passed = int(passed_m.group(1)) if passed_m else 0
    skipped = int(skipped_m.group(1)) if skipped_m else 0
    store.save_verified(name, {"layers": rec["layers"], "checks": checks, "checked": _what_is_checked(rec),
                               "passed": passed, "skipped": skipped,
                               "summary": summary.strip(), "at": time.strftime("%Y-%m-%d %H:%M:%S")})
    return VerifyResult(name, passed, skipped, summary.strip())
