"""Which Slurm runs a rendered configuration: this machine's own (Debian 12: 22.05), or an
image's, run inside a node booted from the image (ctk.sandbox.node), so that a Debian 12 host
checks slurmctld 24.11 without installing it.

A node shares this machine's network and sees `shared` (a folder of this machine) at the same
path, so the files a test renders (slurm.conf and the state, spool, log and munge folders it
names) need no rewriting: the same text runs on either release.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from ctk.images.store import Store
from ctk.sandbox import daemons
from ctk.sandbox import node as nodes
from ctk.sandbox.daemons import DaemonError, Proc, ensure_munge_key, wait_for
from ctk.sandbox.proc import terminate

# What a slurmctld log says that is no complaint about the configuration: a first start (-c)
# finds no saved state; Slurm's default MailProg, /bin/mail, is neither in ctk's images nor on
# this machine; this machine's 22.05 cannot load its PMIx plugin (no libpmix installed here).
NOT_ABOUT_THE_CONFIG = re.compile(
    r"Could not open (job|reservation) state file|Trying backup state save file|"
    r"Configured MailProg is invalid|mpi/pmix|MPI: Cannot create context for mpi/pmix|"
    # slurmctld times its clock at start; on a busy machine (the accelerator images build
    # beside the tests) it logs this, whatever the configuration
    r"High latency for \d+ calls to gettimeofday|"
    # a socket option on one accepted connection (ctk sets no keepalive parameters); seen once
    # from slurmctld 24.11, as a test's client connected and went
    r"Unable to set keepalive interval: Operation not supported")


def config_complaints(log: str) -> list[str]:
    """The error, warning and deprecation lines of a slurmctld log that may be about its
    configuration: every one but those NOT_ABOUT_THE_CONFIG."""
    return [ln for ln in log.splitlines()
            if re.search(r"error|warning|fatal|deprecat|obsolete|unrecognized|ignor", ln, re.I)
            and not NOT_ABOUT_THE_CONFIG.search(ln)]


def slurm_version(text: str) -> tuple[int, int]:
    """(major, minor) from `slurmctld -V` ("slurm-wlm 24.11.5", EPEL's "slurm 22.05.9")."""
    m = re.search(r"\b(\d+)\.(\d+)\.\d+", text)
    if not m:
        raise ValueError(f"no Slurm version in {text!r}")
    return int(m.group(1)), int(m.group(2))


class HostSlurm:
    """The Slurm installed on this machine."""

    name = "host"

    def version(self) -> tuple[int, int]:
        return slurm_version(self.run(["slurmctld", "-V"], check=True).stdout)

    def run(self, argv: list[str], env: dict[str, str] | None = None, *, check: bool = False,
            timeout: float = 30) -> subprocess.CompletedProcess:
        return subprocess.run(argv, env={**os.environ, **(env or {})}, capture_output=True, text=True,
                              timeout=timeout, check=check)

    def start_munged(self, directory: str | os.PathLike) -> Proc:
        # pytest's tmp dirs are 0700, which munged's socket-directory check refuses unless forced.
        return daemons.start_munged(directory, force=True)

    def start_slurmctld(self, conf: str | os.PathLike, timeout: float = 30.0) -> Proc:
        return daemons.start_slurmctld(conf, clean=True, timeout=timeout)

    def start_slurmd(self, conf: str | os.PathLike, node_name: str, timeout: float = 60.0) -> Proc:
        return daemons.start_slurmd(conf, node_name, timeout=timeout)

    def stop(self) -> None:
        pass


class NodeProc(Proc):
    """A daemon started in a node with ctk.sandbox.enter, which forks once and the daemon replaces
    that child, so the daemon is its only child: stopping signals it."""

    def stop(self, timeout: float = 15.0) -> int | None:
        if self.popen.poll() is None:
            try:
                children = open(f"/proc/{self.pid}/task/{self.pid}/children").read().split()
            except OSError:
                children = []
            for child in children:
                terminate(int(child), timeout)
            self.popen.wait(5)  # nsenter ends with its child
        return self.popen.returncode


class NodeSlurm:
    """The Slurm of a built image, run inside one node booted from it."""

    def __init__(self, name: str, store: Store, image: str, shared: str | os.PathLike, work: str | os.PathLike):
        rec = store.image(image)
        if rec is None:
            raise DaemonError(f"no image {image!r} in {store.root}")
        self.name = name
        self.shared = str(Path(shared).resolve())
        # munged stamps a credential with the address its host name resolves to, and slurmctld
        # looks that address up again: "localhost" resolves in every image.
        self.spec = nodes.NodeSpec(hostname="localhost", state_dir=str(Path(work) / "node"),
                                   lowerdirs=store.lowerdirs(rec["layers"]),
                                   binds=[{"src": self.shared, "dest": self.shared}])
        nodes.boot(self.spec)

    def stop(self) -> None:
        nodes.stop(self.spec.state_dir)

    def _argv(self, argv: list[str], env: dict[str, str] | None) -> list[str]:
        return nodes.exec_argv(self.spec.state_dir, argv, env=env)

    def version(self) -> tuple[int, int]:
        return slurm_version(self.run(["slurmctld", "-V"], check=True).stdout)

    def run(self, argv: list[str], env: dict[str, str] | None = None, *, check: bool = False,
            timeout: float = 30) -> subprocess.CompletedProcess:
        return subprocess.run(self._argv(argv, env), capture_output=True, text=True, timeout=timeout,
                              check=check)

    def _start(self, name: str, argv: list[str], out: Path, env: dict[str, str] | None, logs: list[Path]) -> NodeProc:
        popen = daemons._spawn(name, self._argv(argv, env), out, None)
        return NodeProc(name, popen, logs=[*logs, out], env=dict(env or {}))

    def start_munged(self, directory: str | os.PathLike) -> Proc:
        d = Path(directory).resolve()
        d.mkdir(parents=True, exist_ok=True)
        key = ensure_munge_key(str(d / "key" / "munge.key"))
        sock, log = d / "munge.sock", d / "munged.log"
        proc = self._start("munged", ["munged", "--foreground", f"--key-file={key}", f"--socket={sock}",
                                      f"--pid-file={d / 'munged.pid'}", f"--seed-file={d / 'munged.seed'}",
                                      f"--log-file={log}", "--force"], d / "munged.out", None, [log])
        try:
            wait_for(self._argv(["munge", "-n", f"--socket={sock}"], None), 15, proc=proc)
        except DaemonError as e:
            proc.stop()
            raise DaemonError(f"munged did not start in node {self.name}:\n{e}") from None
        return proc

    def start_slurmctld(self, conf: str | os.PathLike, timeout: float = 30.0) -> Proc:
        conf = Path(conf).resolve()
        env = {"SLURM_CONF": str(conf)}
        log = Path(daemons._conf_value(conf, "SlurmctldLogFile") or conf.parent / "slurmctld.log")
        proc = self._start("slurmctld", ["slurmctld", "-D", "-c", "-f", str(conf)], log.parent / "slurmctld.out",
                           env, [log])
        try:
            wait_for(self._argv(["scontrol", "ping"], env), timeout, ok=lambda r: "UP" in r.stdout, proc=proc)
        except DaemonError as e:
            proc.stop()
            raise DaemonError(f"slurmctld did not start in node {self.name} with {conf}:\n{e}") from None
        return proc

    def start_slurmd(self, conf: str | os.PathLike, node_name: str, timeout: float = 60.0) -> Proc:
        conf = Path(conf).resolve()
        env = {"SLURM_CONF": str(conf)}
        spool = daemons._node_path(conf, "SlurmdSpoolDir", node_name)
        if spool is not None:
            spool.mkdir(parents=True, exist_ok=True)
        log = daemons._node_path(conf, "SlurmdLogFile", node_name) or conf.parent / f"slurmd-{node_name}.log"
        proc = self._start(f"slurmd {node_name}", ["slurmd", "-D", "-N", node_name, "-f", str(conf)],
                           log.parent / f"slurmd-{node_name}.out", env, [log])

        def registered(r: subprocess.CompletedProcess) -> bool:
            state = re.search(r"\bState=(\w+)", r.stdout)
            return bool(state) and state.group(1) in ("IDLE", "MIXED", "ALLOCATED")

        try:
            wait_for(self._argv(["scontrol", "show", "node", node_name], env), timeout, ok=registered, proc=proc)
        except DaemonError as e:
            proc.stop()
            raise DaemonError(f"slurmd {node_name} did not register in node {self.name}:\n{e}") from None
        return proc
