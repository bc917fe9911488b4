"""Image builds as cached layers: the base, then one layer per Ansible role.

A layer's key hashes everything that shapes it: the key of the layer below, the role's files,
the playbook that applies it, and the role's variables (for the jax role, the stack's pins and
the whole text of its lock for the base's Python, so editing a lock rebuilds that layer).
A build re-runs only the layers whose key changed and those above them; an unchanged image is
a pure cache hit that runs neither Packer nor Ansible.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from .. import ansible_env, paths
from ..errors import Failure, UserError
from ..model import JAX_VENV, ImageSpec
from ..progress import Progress
from ..runner import CommandError, run
from ..stacks import Lock, Stack, get_stack, image_lock, pip_target_args
from ..stacks import te as te_
from ..stacks.drivers import cuda_toolkit
from ..stacks.lock import uv_bin
from ..stacks.rolevars import role_variables
from . import buildnode, overlay, packer
from .accounts import renumber
from .base import SUITES, apt_checks_valid_until, chosen_base_key, ensure_base
from .store import Store

LAYER_VERSION = 2  # bump when the way layers are built changes
KNOWN_ROLES = ("common", "munge", "slurm", "jax")
# Roles built into the layer of the role before them rather than a layer of their own: munge is
# one small package and a folder, and a layer of its own cost more in fixed costs (a build node,
# Packer's and Ansible's start, the connection, the facts, the commit: about 4 s) than its
# install (about 2 s). Such a layer is named after its roles ("common+munge").
JOINS_THE_LAYER_BELOW = ("munge",)


class ImageBuildError(Failure):
    """A layer failed to build: names the image, the role, the task and its output."""


@dataclass
class LayerPlan:
    role: str  # the layer's name: its role's, or its roles' joined by "+"
    key: str
    parent: str
    variables: dict
    # The wheelhouse folder of the Transformer Engine JAX extension this (jax) layer installs,
    # built there once per (release, CUDA toolkit, Python); None without Transformer Engine.
    te_wheels: str | None = None
    roles: tuple[str, ...] = ()  # the roles it applies, in order (default: its name)

    def __post_init__(self) -> None:
        if not self.roles:
            self.roles = (self.role,)


@dataclass
class BuildResult:
    image: str
    layers: list[str]  # keys, bottom first
    built: list[str] = field(default_factory=list)  # roles whose layers ran
    cached: list[str] = field(default_factory=list)  # roles taken from the cache
    seconds: float = 0.0
    # Where the time went, per step that ran: "base", "wheels" (the lock's downloads) and each
    # built layer, by its name (its role's, or its roles' joined by "+"): {"seconds": ..., and
    # for a role layer "boot" (the build node), "packer_start", "ansible_start", "tasks",
    # "slowest_tasks", "teardown" (stop the node, scrub, renumber, commit)}.
    profile: dict[str, dict] = field(default_factory=dict)


def _files_digest(paths_: list[str]) -> str:
    h = hashlib.sha256()
    for top in paths_:
        files = [top] if os.path.isfile(top) else sorted(
            p for p in glob.glob(os.path.join(top, "**"), recursive=True) if os.path.isfile(p))
        for p in files:
            h.update(os.path.relpath(p, paths.ansible_dir()).encode() + b"\0")
            with open(p, "rb") as f:
                h.update(f.read())
            h.update(b"\0")
    return h.hexdigest()


def layer_groups(roles: list[str]) -> list[list[str]]:
    """The image's roles, in order, grouped into its layers: each role its own layer, but for
    those of JOINS_THE_LAYER_BELOW, which join the layer of the role before them (never jax's,
    whose layer starts from a venv made beside the others)."""
    groups: list[list[str]] = []
    for role in roles:
        if role in JOINS_THE_LAYER_BELOW and groups and groups[-1][-1] != "jax":
            groups[-1].append(role)
        else:
            groups.append([role])
    return groups


def plan_layers(spec: ImageSpec, base_key: str, stack: Stack) -> list[LayerPlan]:
    """Every role layer of the image, bottom first, with its key (reads the stack's lock)."""
    out: list[LayerPlan] = []
    lock = image_lock(spec, stack)
    parent = base_key
    playbook = os.path.join(paths.ansible_dir(), "layer.yml")
    for roles in layer_groups(list(spec.roles)):
        variables: dict = {}
        role_dirs = []
        for role in roles:
            role_dir = os.path.join(paths.ansible_dir(), "roles", role)
            if not os.path.isdir(role_dir):
                raise UserError(f"image '{spec.name}': no Ansible role '{role}' (looked in {role_dir})")
            role_dirs.append(role_dir)
            own = role_variables(spec, role, stack, lock)
            clash = sorted(k for k in own if k in variables and variables[k] != own[k])
            if clash:  # roles sharing a layer share one set of variables
                raise Failure(f"image '{spec.name}': roles {', '.join(roles)} share a layer but give "
                              f"{', '.join(clash)} different values")
            variables.update(own)
        if variables.get("slurm_release") and not apt_checks_valid_until():
            variables["slurm_apt_check_valid_until"] = False  # as this machine's apt (images.base)
        name = "+".join(roles)
        # Every layer's play runs tasks of the common role (its package installs, and the
        # bootstrap outside build nodes), so its task files shape them all.
        digest = _files_digest(role_dirs + [playbook, os.path.join(paths.ansible_dir(), "roles", "common", "tasks")])
        desc = {"parent": parent, "role": name, "files": digest, "vars": variables, "version": LAYER_VERSION}
        key = f"{name}-" + hashlib.sha256(json.dumps(desc, sort_keys=True).encode()).hexdigest()[:16]
        te_wheels = None
        if name == "jax" and lock is not None and lock.te:
            toolkit = cuda_toolkit(spec.base)
            te_wheels = te_.wheel_key(lock.te, toolkit.version if toolkit else "none", lock.python)
        out.append(LayerPlan(name, key, parent, variables, te_wheels, tuple(roles)))
        parent = key
    return out


WHEELHOUSE_IN_NODE = "/run/ctk-wheelhouse"


def wheelhouse(store: Store) -> str:
    path = os.path.join(store.root, "wheelhouse")
    os.makedirs(path, exist_ok=True)
    return path


class LockMismatch(Failure):
    """A downloaded wheel's sha256 is not one its lock records."""


def prefetch_wheels(store: Store, lock: Lock, progress: Progress) -> None:
    """Download the exact files of a stack's lock (for its Python, on x86_64 Linux) on the build
    host into the store's wheelhouse, each checked against the lock's hashes; files already there
    are not fetched again. The jax layer then installs from it with no index, so a rebuild after
    one pin change fetches only what changed."""
    progress.task(f"fetching the {len(lock.versions)} wheels of {lock.stack}'s lock for Python "
                  f"{lock.python} into {wheelhouse(store)}")
    with tempfile.TemporaryDirectory(dir=store.root, prefix=".lock-") as tmp:
        req = os.path.join(tmp, f"{lock.stack}-py{lock.python}.txt")
        with open(req, "w") as f:
            f.write(lock.text)  # exactly the text the layer's key was made of
        try:
            run([sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "--quiet",
                 "--require-hashes", "--no-deps", *pip_target_args(lock.python),
                 "--dest", wheelhouse(store), "-r", req],
                what=f"downloading the wheels of {lock.path} failed")
        except CommandError as e:
            if "DO NOT MATCH THE HASHES" in e.tail:
                raise LockMismatch(
                    f"stack {lock.stack}: a wheel does not match its sha256 in {lock.path}; "
                    "refusing to install it\n" + _hash_lines(e.tail).replace(req, str(lock.path)),
                    hint=f"if the lock was edited, remake it: ctk stack lock {lock.stack} --python "
                         f"{lock.python}; else check the index pip downloads from (pip.conf, PIP_INDEX_URL)"
                ) from None
            raise


def _hash_lines(tail: str) -> str:
    """pip's lines about the mismatching files (name, expected and got hashes)."""
    lines = tail.splitlines()
    for i, ln in enumerate(lines):
        if "DO NOT MATCH THE HASHES" in ln:
            return "\n".join(x for x in lines[i + 1:] if x.strip())
    return tail


def host_ca_bundle() -> str | None:
    """The CA bundle pip must trust wherever ctk runs it for an image or a host (this machine's,
    which holds a TLS-inspecting proxy's CA where there is one): PIP_CERT, else the system's."""
    bundle = os.environ.get("PIP_CERT") or "/etc/ssl/certs/ca-certificates.crt"
    return bundle if os.path.isfile(bundle) else None


TE_WHEELS_IN_NODE = "/run/ctk-te-wheels"
UV_IN_NODE = "/run/ctk-uv"
# apt's configuration in build nodes (APT_CONFIG; read before /etc/apt's own): dpkg unpacks
# without an fsync per file (see layer.yml).
APT_BUILD_CONF = os.path.join(paths.IMAGES, "apt-build.conf")


def _uv_for_nodes() -> str | None:
    """ctk's own uv binary (its `uv` dependency's), lent read-only to build nodes; None where it
    is missing or CTK_IMAGE_INSTALLER=pip asks for pip (then the jax role installs with pip)."""
    want = os.environ.get("CTK_IMAGE_INSTALLER", "uv")
    if want not in ("uv", "pip"):
        raise UserError(f"CTK_IMAGE_INSTALLER={want}: expected uv or pip",
                        hint="unset it to install the jax layer's lock with uv (the default)")
    if want == "pip":
        return None
    try:
        return uv_bin()
    except Failure:
        return None


def te_wheel_dir(store: Store, key: str) -> str:
    """Where the store keeps one built Transformer Engine JAX extension (see stacks.te)."""
    return os.path.join(wheelhouse(store), "built", key)


def _build_time_inputs(store: Store, te_wheels: str | None = None) -> tuple[dict, dict, list[dict]]:
    """What a build node gets from this machine that must not shape (or enter) a layer: the
    host's CA bundle (for pip behind a TLS-intercepting proxy), the store's wheelhouse, and for
    a jax layer with Transformer Engine the wheelhouse folder its JAX extension is built into
    (writable: the first build leaves the wheel there). All sit under the node's /run, a tmpfs,
    so none becomes part of a layer.

    Returns (run_files, extra Ansible vars, bind mounts)."""
    pip_args = []
    run_files = {"ctk/apt-build.conf": {"src": APT_BUILD_CONF, "mode": "0644"}}
    bundle = host_ca_bundle()
    if bundle:
        run_files["ctk/ca-bundle.crt"] = {"src": bundle, "mode": "0644"}
        pip_args.append("--cert /run/ctk/ca-bundle.crt")
    extra = {"pip_extra_args": " ".join(pip_args), "jax_wheelhouse": WHEELHOUSE_IN_NODE,
             "ctk_build_environment": {"APT_CONFIG": "/run/ctk/apt-build.conf"},
             "ctk_build_node": True}  # a base's python3 and python3-apt: layer.yml skips the bootstrap
    binds = [{"src": wheelhouse(store), "dest": WHEELHOUSE_IN_NODE, "ro": True}]
    uv = _uv_for_nodes()
    if uv:  # the jax role installs the lock with it from the wheelhouse (the same venv, faster)
        extra["jax_uv"] = UV_IN_NODE
        binds.append({"src": uv, "dest": UV_IN_NODE, "ro": True})
    if te_wheels:
        os.makedirs(te_wheel_dir(store, te_wheels), exist_ok=True)
        extra["jax_te_wheel_dir"] = TE_WHEELS_IN_NODE
        binds.append({"src": te_wheel_dir(store, te_wheels), "dest": TE_WHEELS_IN_NODE, "ro": False})
    return run_files, extra, binds


def _scrub_upper(upper: str) -> None:
    """Drop what a login leaves behind; it is not part of the role's work. (Only through real
    folders: a link the node wrote never leads the host's deletes out of the upper dir.)"""
    for rel in ("var/log/wtmp", "var/log/wtmp.db", "var/log/lastlog", "var/log/btmp", "root/.ansible",
                "root/.ssh/known_hosts",
                "etc/hostname"):  # the build node's name, which nodeinit writes
        p = overlay.real_path(upper, rel)
        if p is None:
            continue
        if os.path.isdir(p):
            shutil.rmtree(p)
        elif os.path.isfile(p):
            os.unlink(p)


def _apply_role(store: Store, node: buildnode.BuildNode, roles: tuple[str, ...] | list[str], variables: dict,
                work: str, log_path: str, progress: Progress, te_wheels: str | None = None) -> packer.BuildLog:
    """Packer + Ansible: apply a layer's roles, in order (install phase), to a running build node."""
    run_files_vars = _build_time_inputs(store, te_wheels)[1]
    vars_file = os.path.join(work, f"vars-{'+'.join(roles)}.json")
    with open(vars_file, "w") as f:
        json.dump({"ctk_roles": list(roles), "ctk_phase": "install", **variables, **run_files_vars}, f)
    roles_path = os.path.join(paths.ansible_dir(), "roles")
    with ansible_env.strategy_env() as strategy:
        return packer.build(
            os.path.join(paths.IMAGES, "layer.pkr.hcl"),
            {"host": node.addr, "port": node.port, "private_key_file": node.private_key,
             "playbook_file": os.path.join(paths.ansible_dir(), "layer.yml"),
             "extra_arguments": ["-e", f"@{vars_file}", "-e", "ansible_python_interpreter=/usr/bin/python3",
                                 "-e", f"ansible_port={node.port}"],
             "ansible_env_vars": ["ANSIBLE_HOST_KEY_CHECKING=False", "ANSIBLE_REMOTE_TMP=/tmp/.ansible",
                                  "ANSIBLE_NOCOLOR=1", "ANSIBLE_RETRY_FILES_ENABLED=False",
                                  # modules are fed to the node's python over the open connection,
                                  # not copied into a temporary folder first: fewer round trips a task
                                  "ANSIBLE_PIPELINING=True",
                                  f"ANSIBLE_ROLES_PATH={roles_path}",
                                  *(f"{k}={v}" for k, v in strategy.items())]},
            os.path.join(work, f"packer-{'+'.join(roles)}"), on_task=progress.task,
            env=packer.packer_env(os.path.dirname(sys.executable)), log_path=log_path)


def _log_path_name(store: Store, image: str, role: str) -> str:
    return os.path.join(store.root, "logs", f"{image}-{role}.log")


def _log_path(store: Store, image: str, role: str) -> str:
    path = _log_path_name(store, image, role)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if os.path.exists(path):
        os.unlink(path)
    return path


def _seed_venv(store: Store, lp: LayerPlan) -> tuple[str, str] | None:
    """(key, venv path) of the newest jax layer built over the same layers below, if any:
    starting from its venv, a pin change reinstalls only the changed packages (and the role
    removes what the new lock no longer names)."""
    if lp.role != "jax":
        return None
    donors = []
    for key in store.all_layers():
        meta = store.meta(key)
        venv = overlay.real_path(store.layer_root(key), JAX_VENV)
        if meta.get("role") == "jax" and meta.get("parent") == lp.parent and venv is not None and \
                os.path.lexists(os.path.join(venv, "bin", "python")):
            donors.append((meta.get("created", ""), key, venv))
    return max(donors)[1:] if donors else None


def _seed_tree(source_root: str, tree: str, lowers: list[str], move: bool = False) -> bool:
    """TREE: a lower dir holding the venv of SOURCE_ROOT (at JAX_VENV), its folders above it as
    the topmost of LOWERS (the node's other lower dirs) that has them has them. The venv is
    hard-linked (the kernel copies up what the role changes, so the source is never written), or
    moved where MOVE (a scratch folder's). False, and no TREE, where SOURCE_ROOT has no venv
    reached through real folders."""
    venv = overlay.real_path(source_root, JAX_VENV)
    if venv is None or not os.path.isdir(venv):
        return False
    os.makedirs(tree)
    rel = JAX_VENV.strip("/")
    parent = tree
    for part in os.path.dirname(rel).split("/"):
        parent = os.path.join(parent, part)
        os.mkdir(parent)
        above = os.path.relpath(parent, tree)
        meta_from = next((p for p in (overlay.real_path(lower, above) for lower in lowers)
                          if p is not None and os.path.isdir(p)), os.path.join(source_root, above))
        overlay.copy_dir_meta(meta_from, parent)
    if move:
        os.rename(venv, os.path.join(tree, rel))
    else:
        overlay.hardlink_tree(venv, os.path.join(tree, rel))
    return True


# A second build node, for the venv made beside the layers below the jax layer.
BESIDE_ADDR = "127.0.250.2"


def _beside_dir(store: Store, lp: LayerPlan) -> str:
    """The work folder of the venv made beside (a ".build" folder: Store.reap() stops and removes
    what an interrupted build left of it)."""
    return os.path.join(store.tmp, f"{lp.key}.venv.build")


class BesideCancelled(Failure):
    """The build stopped before the venv made beside it was needed."""


def _timed_venv_beside(store: Store, image: str, lp: LayerPlan, base: str, wheels: Future | None,
                       cancel: threading.Event) -> tuple[float, str]:
    t0 = time.monotonic()
    root = _venv_beside(store, image, lp, base, wheels, cancel)
    return time.monotonic() - t0, root


def _venv_beside(store: Store, image: str, lp: LayerPlan, base: str, wheels: Future | None,
                 cancel: threading.Event) -> str:
    """The jax role, with the jax layer's own variables, applied in a node of the base alone while
    the layers below the jax layer build (the venv needs nothing of theirs but the base's Python):
    returns the node's upper dir, whose venv then seeds the jax layer, where the role runs again
    and finds the venv already holding its lock. Everything else of this run is thrown away.
    CANCEL set (the build below failed) stops it before its node boots; _cancel_beside stops a
    running node."""
    log_path = _log_path(store, image, "jax-venv")
    try:
        if wheels is not None:
            wheels.result()
        work = _beside_dir(store, lp)
        shutil.rmtree(work, ignore_errors=True)
        os.makedirs(work)
        run_files, _, binds = _build_time_inputs(store)
        if cancel.is_set():
            raise BesideCancelled("the build stopped first")
        node = buildnode.boot(store.lowerdirs([base]), work, run_files=run_files, binds=binds,
                              hostname="ctk-build-venv", addr=BESIDE_ADDR)
        try:
            if cancel.is_set():
                raise BesideCancelled("the build stopped first")
            _apply_role(store, node, lp.roles, lp.variables, work, log_path, Progress(quiet=True))
        finally:
            node.stop()
        return node.upper
    except Exception as e:
        with open(log_path, "a") as f:
            f.write(f"\nctk: the venv made beside the layers below stopped: {e}\n")
        raise


def _cancel_beside(store: Store, lp: LayerPlan, cancel: threading.Event) -> None:
    """Stop the venv made beside LP: no node boots for it any more, a running one is stopped
    (its role then fails, and the build does not wait for it to finish)."""
    cancel.set()
    buildnode.stop_in(_beside_dir(store, lp))


WHEELS_READY_IN_NODE = "/run/ctk-ready/wheels"
# The role's wait ends with the download, which has its own timeouts (pip's, uv's): the role's
# own limit is only for a build host that is gone.
WHEELS_READY_TIMEOUT = 7 * 24 * 3600
_WHEELS_WAIT_TASK = "Wait for the build host to finish downloading the lock's wheels"
_WHEELS_CHECK_TASK = "Check that the build host has them all"


def _wheels_ready_marker(wheels: Future, path: str) -> None:
    """Once the download of WHEELS ends, write PATH (atomically): "ok", or "failed" and why, for
    the jax role's wait (jax_wheels_ready)."""
    def done(f: Future) -> None:
        exc = f.exception()
        text = "ok\n" if exc is None else f"failed: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}\n"
        tmp = path + ".tmp"
        with open(tmp, "w") as fh:
            fh.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    wheels.add_done_callback(done)


def _start_from_beside(beside: Future, wheels: Future | None, seed_tree: str, lowers: list[str], store: Store,
                       image: str, progress: Progress) -> tuple[tuple | None, list[str], dict]:
    """The jax layer's start from the venv made beside the layers below (BESIDE): its seed, its
    lower dirs (SEED_TREE first) and what the profile says of it. A failed head start only
    costs the time it would have saved: the layer then makes its own venv, unless the wheels'
    download itself failed, which is the build's error."""
    t_wait = time.monotonic()
    try:
        seconds, root = beside.result()
        said = {"seconds": round(seconds, 2), "waited": round(time.monotonic() - t_wait, 2)}
        if not _seed_tree(root, seed_tree, lowers, move=True):
            raise Failure(f"no venv at {JAX_VENV} in {root}")
        progress.task(f"starting from the venv made beside the layers below ({seconds:.1f} s)")
        return ("beside", seed_tree), [seed_tree] + lowers, said
    except Exception as e:  # noqa: BLE001 (a failed head start only costs the time it would have saved)
        if wheels is not None and wheels.done() and wheels.exception() is not None:
            wheels.result()  # the download failed: that is the build's error, not a note
        why = str(e).splitlines()[0] if str(e) else repr(e)
        progress.say(f"note: the venv made beside the layers below failed ({why}); "
                     f"the jax layer makes its own (log: {_log_path_name(store, image, 'jax-venv')})")
        shutil.rmtree(seed_tree, ignore_errors=True)
        return None, lowers, {"failed": why}


def _start_from_layer(seed: tuple | None, seed_tree: str, lowers: list[str], store: Store,
                      progress: Progress) -> tuple[tuple | None, list[str]]:
    """A layer's start from the venv of an earlier jax layer (SEED: its key first), hard-linked
    into SEED_TREE: the seed (None where it could not be) and the lower dirs."""
    if not seed:
        return None, lowers
    t_seed = time.monotonic()
    if not _seed_tree(store.layer_root(seed[0]), seed_tree, lowers):
        return None, lowers
    progress.task(f"starting from the venv of layer {seed[0]} (hard-linked, {time.monotonic() - t_seed:.1f} s)")
    return seed, [seed_tree] + lowers


def _wait_for_wheels(wheels: Future, work: str, binds: list[dict], extra: dict) -> list[dict]:
    """Where the wheels' download (WHEELS) is still running, the node waits for it: a folder
    bound into the node gets its marker once it ends (EXTRA gets the role's variables for it).
    The binds with that folder; a finished download's error is raised here."""
    if wheels.done():
        wheels.result()  # raises what the download raised
        return binds
    ready = os.path.join(work, "ready")
    os.makedirs(ready, mode=0o755)
    extra["jax_wheels_ready"] = WHEELS_READY_IN_NODE
    extra["jax_wheels_ready_timeout"] = WHEELS_READY_TIMEOUT
    _wheels_ready_marker(wheels, os.path.join(ready, os.path.basename(WHEELS_READY_IN_NODE)))
    return binds + [{"src": ready, "dest": os.path.dirname(WHEELS_READY_IN_NODE), "ro": True}]


def _build_layer(store: Store, image: str, lp: LayerPlan, lower_keys: list[str], progress: Progress,
                 wheels: Future | None = None, beside: Future | None = None) -> dict:
    """Build one role's layer; returns its profile (see BuildResult.profile). WHEELS, for the jax
    layer, is the download of its lock's wheels, which may still be running: the role waits for it
    after the node's start and its first tasks (and the profile says for how long, in
    "wheels_waited")."""
    work = store.scratch(f"{lp.key}.build")
    t0 = time.monotonic()
    run_files, extra_vars, binds = _build_time_inputs(store, lp.te_wheels)
    extra: dict = {}
    seed_tree = os.path.join(work, "seed")
    venv_beside = None
    if beside is not None:  # the venv made beside the layers below: the layer starts from it
        seed, lowers, venv_beside = _start_from_beside(beside, wheels, seed_tree, store.lowerdirs(lower_keys),
                                                       store, image, progress)
    else:
        seed, lowers = _start_from_layer(_seed_venv(store, lp), seed_tree, store.lowerdirs(lower_keys), store,
                                         progress)
    if wheels is not None:
        binds = _wait_for_wheels(wheels, work, binds, extra)
    node = buildnode.boot(lowers, work, run_files=run_files, binds=binds)
    booted = time.monotonic()
    log_path = _log_path(store, image, lp.role)
    try:
        log = _apply_role(store, node, lp.roles, {**lp.variables, **extra}, work, log_path, progress, lp.te_wheels)
    except packer.PackerError as e:
        if wheels is not None and e.task.endswith((_WHEELS_WAIT_TASK, _WHEELS_CHECK_TASK)) and \
                wheels.done() and wheels.exception() is not None:
            wheels.result()  # the download's own error says more than the role's wait
        raise ImageBuildError(f"image '{image}', layer '{lp.role}': {e}\n(full log: {log_path})") from None
    finally:
        applied = time.monotonic()
        node.stop()
    upper = node.upper
    _scrub_upper(upper)
    renumber(upper)  # the accounts this layer made take numbers no host account has
    if seed:  # the layer is the seed with the role's changes applied
        overlay.apply_upper(upper, seed_tree, store.lowerdirs(lower_keys))
        overlay.copy_dir_meta(upper, seed_tree)
        upper = seed_tree
    end = time.monotonic()  # the commit below is two renames
    profile = {"seconds": round(end - t0, 2), "boot": round(booted - t0, 2), **log.profile(),
               "teardown": round(end - applied, 2)}
    if wheels is not None:
        profile["wheels_waited"] = round(log.span(f"jax: {_WHEELS_WAIT_TASK}") or 0.0, 2)
    if lp.role == "jax":
        profile["installer"] = "uv" if "jax_uv" in extra_vars else "pip"
        if seed:
            profile["seeded_from"] = seed[0]
    if beside is not None:
        profile["venv_beside"] = venv_beside
    meta = {"kind": "role", "role": lp.role, "roles": list(lp.roles), "parent": lp.parent, "vars": lp.variables,
            "seconds": round(end - t0, 1), "profile": profile}
    if lp.te_wheels:
        meta["te_wheels"] = lp.te_wheels
    store.commit(lp.key, upper, meta)
    shutil.rmtree(work, ignore_errors=True)
    return profile


def rerun_roles(name: str, store: Store | None = None, progress: Progress | None = None) -> dict:
    """Apply every role of a built image again, with the variables its layer was built with,
    in a node booted from the finished image (its changes are thrown away). Returns
    {layer: (ok, changed)} from each layer's play's recap (a layer is named after its roles,
    "common+munge"); idempotent roles report changed=0."""
    store = store or Store()
    progress = progress or Progress()
    rec = store.built_image(name)
    work = store.scratch(f"rerun-{name}")
    te_wheels = next((store.meta(k).get("te_wheels") for k in rec["layers"][1:] if store.meta(k).get("te_wheels")), None)
    run_files, _, binds = _build_time_inputs(store, te_wheels)
    node = buildnode.boot(store.lowerdirs(rec["layers"]), work, run_files=run_files, binds=binds)
    out = {}
    try:
        for key in rec["layers"][1:]:
            meta = store.meta(key)
            log = _apply_role(store, node, meta.get("roles") or [meta["role"]], meta["vars"], work,
                              _log_path(store, name, f"rerun-{meta['role']}"), progress, meta.get("te_wheels"))
            out[meta["role"]] = (log.ok, log.changed)
    finally:
        node.stop()
        shutil.rmtree(work, ignore_errors=True)
    return out


def _te_record(store: Store, version: str, layers: list[LayerPlan]) -> dict:
    """The image's Transformer Engine: its release, and the build of its JAX extension (the
    wheel, its size, the seconds it took, from the wheelhouse's build.json)."""
    key = next(lp.te_wheels for lp in layers if lp.te_wheels)
    out: dict[str, object] = {"version": version, "wheels": key}
    d = te_wheel_dir(store, key)
    try:
        with open(os.path.join(d, "build.json")) as f:
            out["build"] = json.load(f)
    except (OSError, ValueError):
        pass
    out["wheel"] = next((n for n in sorted(os.listdir(d)) if n.endswith(".whl")), None) if os.path.isdir(d) else None
    return out


def current_layers(spec: ImageSpec, store: Store) -> list[str]:
    """The layer keys a build of SPEC would record now (its base's, then each role's): an image
    recorded with others was built by another ctk's roles or stack (a few ms: no build)."""
    base = chosen_base_key(store, spec.base)
    return [base] + [lp.key for lp in plan_layers(spec, base, get_stack(spec.stack))]


def build_image(spec: ImageSpec, store: Store | None = None, progress: Progress | None = None,
                stacks_path: str | None = None) -> BuildResult:
    """Build (or take from the cache) every layer of an image; record the image."""
    store = store or Store()
    progress = progress or Progress()
    stack = get_stack(spec.stack, stacks_path)
    # Planned before any work: a stack without a lock for the base's Python stops the build here,
    # as does an unknown CTK_IMAGE_INSTALLER.
    lock = image_lock(spec, stack)
    ansible_env.strategy()
    _uv_for_nodes()
    layers = plan_layers(spec, chosen_base_key(store, spec.base), stack)
    t0 = time.monotonic()
    # Every layer cached: nothing to build, so no lock to wait for (a build of another image in
    # the same store may hold it for minutes); committed layers never change.
    result = _from_cache(spec, store, progress, stack, lock, layers)
    if result is not None:
        result.seconds = time.monotonic() - t0
        return result
    why = ansible_env.fallback()
    if why:
        progress.say(f"note: {why}: Ansible's own strategy runs the roles, about a quarter slower "
                     f"(set {ansible_env.STRATEGY_ENV}=linear to choose it and silence this note)")
    with store.lock():
        reaped = store.reap()  # what a build killed part-way left running and half-written
        if reaped:
            progress.say(f"note: stopped {len(reaped)} process(es) an interrupted build of this store left running")
        # The lock's wheels download on a thread while the layers below the jax layer build; a
        # failed build waits for it, so that its pip is done with the wheelhouse before the lock goes.
        # The jax layer's venv may be made meanwhile too, beside them (_venv_beside); its folder
        # goes once the build ends, whichever way.
        try:
            with ThreadPoolExecutor(max_workers=2, thread_name_prefix="ctk-image") as pool:
                wheels = None
                if lock is not None and any(lp.role == "jax" and not store.has(lp.key) for lp in layers):
                    wheels = pool.submit(_timed, prefetch_wheels, store, lock, progress)
                result = _build_layers(spec, store, progress, stack, lock, layers, wheels, pool)
        finally:
            for lp in layers:
                shutil.rmtree(_beside_dir(store, lp), ignore_errors=True)
    result.seconds = time.monotonic() - t0
    return result


def _timed(fn, *args) -> float:
    """Run FN(*ARGS); the seconds it took."""
    t0 = time.monotonic()
    fn(*args)
    return time.monotonic() - t0


def _build_layers(spec: ImageSpec, store: Store, progress: Progress, stack: Stack, lock: Lock | None,
                  layers: list[LayerPlan], wheels: Future | None, pool: ThreadPoolExecutor) -> BuildResult:
    """The base and each layer of the image, in the store (whose lock the caller holds); the
    image's record saved."""
    t_base, base_cached = time.monotonic(), store.has(chosen_base_key(store, spec.base))
    base = ensure_base(store, spec.base, progress)
    result = BuildResult(spec.name, [base])
    if not base_cached:
        result.profile["base"] = {"seconds": round(time.monotonic() - t_base, 2),
                                  "tool": store.meta(base).get("tool", "debootstrap")}
    beside, cancel = None, threading.Event()
    jax = next((i for i, lp in enumerate(layers) if lp.role == "jax" and not store.has(lp.key)), None)
    if jax is not None and lock is not None and not layers[jax].te_wheels and \
            any(not store.has(lp.key) for lp in layers[:jax]) and _seed_venv(store, layers[jax]) is None:
        progress.say("==> the jax venv: made beside the layers below it, in a node of the base")
        beside = pool.submit(_timed_venv_beside, store, spec.name, layers[jax], base, wheels, cancel)
    try:
        _build_each(spec, store, progress, layers, result, wheels, beside)
    except BaseException:
        if beside is not None and jax is not None:
            _cancel_beside(store, layers[jax], cancel)  # the pool's shutdown then waits for no role
        raise
    _save_record(spec, store, stack, lock, layers, result)
    return result


def _from_cache(spec: ImageSpec, store: Store, progress: Progress, stack: Stack, lock: Lock | None,
                layers: list[LayerPlan]) -> BuildResult | None:
    """The image recorded from its cached base and layers, where the store has every one of
    them; None where something is to be built (under the store's lock)."""
    base = chosen_base_key(store, spec.base)
    if spec.base not in SUITES:
        return None
    with store.removal_lock(shared=True):  # ctk image gc removes no layer meanwhile
        if not store.has(base) or not all(store.has(lp.key) for lp in layers):
            return None
        result = BuildResult(spec.name, [base])
        for lp in layers:
            progress.say(f"==> layer {lp.role}: cached ({lp.key})")
            result.cached.extend(lp.roles)
            result.layers.append(lp.key)
        _save_record(spec, store, stack, lock, layers, result)
    return result


def _save_record(spec: ImageSpec, store: Store, stack: Stack, lock: Lock | None, layers: list[LayerPlan],
                 result: BuildResult) -> None:
    """The image's record in the store: its layers, spec and stack (what its venv must hold)."""
    record = {"name": stack.name, "accelerator": stack.accelerator, "pins": dict(stack.pins)}
    if lock is not None:  # what the venv must hold, exactly: image verification checks it
        record.update(python=lock.python, lock=lock.versions)
        if lock.te:
            record["lock"] = {**lock.versions, te_.SOURCE_DIST: lock.te}
            record["transformer_engine"] = _te_record(store, lock.te, layers)
    store.save_image(spec.name, {"name": spec.name, "layers": result.layers, "spec": vars(spec),
                                 "stack": record})


def _build_each(spec: ImageSpec, store: Store, progress: Progress, layers: list[LayerPlan], result: BuildResult,
                wheels: Future | None, beside: Future | None) -> None:
    """Each layer of LAYERS from the cache or built, in order, into RESULT."""
    for lp in layers:
        if store.has(lp.key):
            progress.say(f"==> layer {lp.role}: cached ({lp.key})")
            result.cached.extend(lp.roles)
        else:
            with progress.step(f"layer {lp.role} ({lp.key})"):
                layer_wheels = wheels if lp.role == "jax" else None
                layer_beside = beside if lp.role == "jax" else None
                result.profile[lp.role] = _build_layer(store, spec.name, lp, result.layers, progress, layer_wheels,
                                                       layer_beside)
                if layer_wheels is not None:
                    result.profile["wheels"] = {"seconds": round(layer_wheels.result(), 2),
                                                "waited": result.profile[lp.role].pop("wheels_waited")}
                if layer_beside is not None:
                    result.profile["venv_beside"] = result.profile[lp.role].pop("venv_beside")
            result.built.extend(lp.roles)
        result.layers.append(lp.key)
