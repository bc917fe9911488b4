"""How ctk reaches a Slurm cluster's commands and files: this machine's own Slurm, or a login
host over SSH (a lab on this machine is a kind of the first, in ctk.targets.local).

Both kinds answer the same few questions, so everything above (scheduler, api, commands) is
written once:

- `run(argv)`: run a Slurm command (sbatch, squeue, scontrol, scancel, sacct) on the cluster;
- `put_script(text, name)`: store a batch script where `run(["sbatch", ...])` reads it, readable by
  its owner only (0600 in a 0700 folder: a script may hold a token); its path; `remove(path)`;
- `jobs_dir`: the folder, as the cluster sees it, where scripts and relative logs live;
- `read(path, offset, missing=b"")`: a log file's bytes from OFFSET (MISSING while it does not
  exist);
- `forgotten(ids)`: final states of jobs that squeue no longer lists (accounting, or the
  lab's job completion log), as {id: (state, exit code)};
- `identity()`: which cluster it is ({cluster, id} from the file ctk puts beside slurm.conf on
  every node of a cluster it made; else Slurm's own ClusterName and controller), so that
  every way of reaching one cluster finds the same `registry_dir`, where the local registry
  of the cluster's jobs lives (jobs.jsonl), and a new cluster on the same host and port
  does not inherit the jobs of the one before.

A `HereCluster` is the Slurm cluster this machine submits to (a login node: its own
sbatch, squeue, ... and SLURM_CONF if set), with scripts in ~/.ctk-jobs on the shared home.
An `SshCluster` is
`user@host[:port]`: Fabric runs the commands there and SFTP moves the files, as if typed
on the login node.
"""

from __future__ import annotations

import io
import json
import os
import re
import shlex
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..errors import Failure, UserError

JOBS_SUBDIR = ".ctk-jobs"
NODE_HOME = "/home"
NODE_JOBS_DIR = f"{NODE_HOME}/{JOBS_SUBDIR}"


class SlurmError(Failure):
    """A Slurm command failed or the cluster did not answer: exit 1, not a usage error."""


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str


def script_name(name: str) -> str:
    stamp = time.strftime("%Y%m%dT%H%M%S") + f"{time.time() % 1:.6f}"[1:]
    safe = re.sub(r"[^A-Za-z0-9_.+-]", "_", name) or "job"
    return f"{safe}-{stamp}-{os.getpid()}"


def parse_kv_line(line: str) -> dict[str, str]:
    """`Key=Value Key=Value ...` (scontrol -o, jobcomp/filetxt) as a dict."""
    return dict(tok.split("=", 1) for tok in line.split() if "=" in tok)


def exit_of(text: str) -> int | None:
    """Slurm's ExitCode `N:S` as a shell-style code (a signal S gives 128+S); None if unreadable."""
    code, _, sig = (text or "").partition(":")
    try:
        code_i, sig_i = int(code), int(sig or 0)
    except ValueError:
        return None
    return code_i if code_i or not sig_i else 128 + sig_i


# Beside slurm.conf on every node of a cluster ctk deployed: {"cluster": NAME, "id": HEX},
# the id made once per cluster (a new one for a new cluster in the same place).
IDENTITY_FILE = "ctk-cluster.json"
# One shell line, the same on a login node over SSH and here: ctk's identity file, else the
# cluster's name and controller from slurm.conf, else (a configless node) from the controller.
_IDENTITY_SH = ('c="${SLURM_CONF:-/etc/slurm/slurm.conf}"; cat "${c%/*}/' + IDENTITY_FILE + '" 2>/dev/null'
                ' || grep -iE "^[[:space:]]*(ClusterName|SlurmctldHost)[[:space:]]*=" "$c" 2>/dev/null'
                ' || scontrol show config 2>/dev/null | grep -E "^(ClusterName|SlurmctldHost)"')
_SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")
_SAFE_ID = re.compile(r"[0-9a-f]{8,64}")


def parse_identity(text: str) -> dict[str, str] | None:
    """{cluster, id} from ctk's identity file, or {cluster, controller} from slurm.conf's or
    `scontrol show config`'s ClusterName and (first) SlurmctldHost lines; None if TEXT says
    neither, or says it in names no folder may carry (the text comes from the cluster, which
    may be hostile)."""
    text = (text or "").strip()
    if text.startswith("{"):
        try:
            d = json.loads(text)
        except ValueError:
            return None
        if (isinstance(d, dict) and isinstance(d.get("cluster"), str) and isinstance(d.get("id"), str)
                and _SAFE_NAME.fullmatch(d["cluster"]) and _SAFE_ID.fullmatch(d["id"])):
            return {"cluster": d["cluster"], "id": d["id"]}
        return None
    conf: dict[str, str] = {}
    for line in text.splitlines():
        k, sep, v = line.split("#", 1)[0].partition("=")
        key = re.sub(r"\[\d+\]$", "", k.strip().lower())  # scontrol's SlurmctldHost[0]
        if sep and key in ("clustername", "slurmctldhost"):
            conf.setdefault(key, v.strip().split("(", 1)[0].strip())
    name, ctl = conf.get("clustername", ""), conf.get("slurmctldhost", "")
    if _SAFE_NAME.fullmatch(name) and _SAFE_NAME.fullmatch(ctl):
        return {"cluster": name, "controller": ctl}
    return None


def next_identity(held: dict | None, cluster: str) -> dict[str, str]:
    """{cluster, id} for a deploy of CLUSTER where HELD was (an identity, or None): its id while
    the cluster stays the same, else a new one (a new cluster starts with a registry of its own)."""
    import uuid

    old = (held or {}).get("id")
    if held and held.get("cluster") == cluster and isinstance(old, str) and _SAFE_ID.fullmatch(old):
        return {"cluster": cluster, "id": old}
    return {"cluster": cluster, "id": uuid.uuid4().hex}


def registry_home(ident: dict[str, str]) -> str:
    """The registry folder of the cluster IDENT names (see parse_identity)."""
    leaf = f"{ident['cluster']}-{ident['id']}" if ident.get("id") else f"{ident['cluster']}@{ident['controller']}"
    return os.path.join(_state_home(), "ctk", "clusters", leaf)


class Cluster:
    key: str = ""
    jobs_dir: str = NODE_JOBS_DIR
    _registry_dir: str | None = None

    def identity(self) -> dict[str, str] | None:
        """Which cluster this is (see parse_identity): one command on the cluster."""
        r = self.run(["/bin/sh", "-c", _IDENTITY_SH])
        return parse_identity(r.stdout) if r.returncode == 0 else None

    def fallback_registry_dir(self) -> str:
        """Where the registry lives when the cluster says nothing of itself."""
        return os.path.join(_state_home(), "ctk", "unnamed", re.sub(r"[^A-Za-z0-9_.@-]", "_", self.key.strip("/")))

    @property
    def registry_dir(self) -> str:
        """The folder of this cluster's job registry, found once (by identity) per object."""
        if self._registry_dir is None:
            ident = self.identity()
            self._registry_dir = registry_home(ident) if ident else self.fallback_registry_dir()
        return self._registry_dir

    @registry_dir.setter
    def registry_dir(self, value: str) -> None:
        self._registry_dir = value

    def run(self, argv: Sequence[str], timeout: float = 30, stdin: str | None = None) -> Result:
        raise NotImplementedError

    def put_script(self, text: str, name: str) -> str:
        raise NotImplementedError

    def remove(self, path: str) -> None:
        """Delete a script put_script stored (its submission failed); no error if it is gone."""
        raise NotImplementedError

    def put_and_run(self, text: str, name: str, argv_for: Callable[[str], list[str]],
                    timeout: float = 30) -> tuple[str, Result]:
        """Store TEXT as a new script (put_script) and run argv_for(its path) (sbatch): (path,
        the result). The script is removed again when the command fails or never answers, so
        none stays behind for a job that does not exist. A cluster whose every command costs a
        process of its own does both in one."""
        path = self.put_script(text, name)
        try:
            r = self.run(argv_for(path), timeout=timeout)
        except BaseException:
            self.remove(path)
            raise
        if r.returncode != 0:
            self.remove(path)
        return path, r

    def read(self, path: str, offset: int = 0, missing: bytes | None = b"") -> bytes | None:
        raise NotImplementedError

    def forgotten(self, ids: Sequence[str]) -> dict[str, tuple[str, int | None]]:
        return self._sacct(ids)

    def deployment_dir(self) -> str | None:
        return None

    def chdir_for(self, host_dir: str) -> str | None:
        """The folder of the cluster that is HOST_DIR (a folder of this machine), where a job
        submitted from there runs; None where this machine's folders are not the cluster's."""
        return None

    def shared_folders(self) -> list[tuple[str, str]] | None:
        """(folder here, the same folder on the cluster) that are shared, where ctk knows them."""
        return None

    def close(self) -> None:
        pass

    def _sacct(self, ids: Sequence[str]) -> dict[str, tuple[str, int | None]]:
        """One sacct call for IDS; {} where the cluster keeps no accounting."""
        if not ids:
            return {}
        r = self.run(["sacct", "-n", "-P", "-X", "-j", ",".join(ids), "-o", "JobIDRaw,State,ExitCode"])
        if r.returncode != 0:
            return {}
        out: dict[str, tuple[str, int | None]] = {}
        for line in r.stdout.splitlines():
            f = line.strip().split("|")
            if len(f) >= 3 and f[0] in ids:
                out[f[0]] = (f[1].split()[0] if f[1] else "UNKNOWN", exit_of(f[2]))  # "CANCELLED by 0"
        return out


def _state_home() -> str:
    return os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")


_NAME_A_CLUSTER = "--deployment DIR (a deployment ctk made) or --host USER@HOST (a login node over SSH)"
# What Slurm's commands say when they find neither a slurm.conf nor a configless controller.
_NO_CONFIG = re.compile(r"Could not establish a configuration source|DNS SRV lookup failed")


class HereCluster(Cluster):
    """The cluster this machine is a submit host of: Slurm's commands as they are here."""

    def __init__(self, jobs_dir: str | None = None):
        conf = os.environ.get("SLURM_CONF") or "/etc/slurm/slurm.conf"
        self.conf = os.path.abspath(conf)
        self.key = f"here:{self.conf}"
        self.jobs_dir = os.path.abspath(jobs_dir or os.path.join(os.path.expanduser("~"), JOBS_SUBDIR))

    def __repr__(self) -> str:
        return f"HereCluster({self.conf!r})"

    def check(self) -> HereCluster:
        import shutil

        if not shutil.which("sbatch"):
            raise UserError("this machine has no Slurm commands (sbatch is not on PATH), and no cluster was named",
                            hint=_NAME_A_CLUSTER)
        if os.environ.get("SLURM_CONF") and not os.path.isfile(self.conf):
            # Slurm's commands would wait for a controller that no file names
            raise UserError(f"this machine has no Slurm cluster configured: SLURM_CONF={self.conf} does not "
                            "exist, and no cluster was named", hint=_NAME_A_CLUSTER)
        return self

    def _env(self) -> dict[str, str]:
        return dict(os.environ)

    def chdir_for(self, host_dir: str) -> str | None:
        """Here, a submit host of the cluster: the folder itself (sbatch's own default)."""
        return host_dir

    def run(self, argv: Sequence[str], timeout: float = 30, stdin: str | None = None) -> Result:
        try:
            # umask 077: sbatch hands it to the job (SLURM_UMASK), so its logs are its user's alone
            r = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, env=self._env(),
                               input=stdin, stdin=None if stdin is not None else subprocess.DEVNULL,
                               preexec_fn=lambda: os.umask(0o077))
        except FileNotFoundError:
            raise UserError(f"{argv[0]}: not installed on this machine") from None
        except subprocess.TimeoutExpired:
            raise SlurmError(f"{argv[0]}: no answer from the cluster within {timeout:.0f}s") from None
        if r.returncode != 0 and _NO_CONFIG.search(r.stderr or ""):
            # no slurm.conf here, and no DNS SRV record of a configless controller either
            raise UserError(f"this machine has no Slurm cluster configured (no {self.conf}, and {argv[0]} "
                            "found no controller through DNS), and no cluster was named", hint=_NAME_A_CLUSTER)
        return Result(r.returncode, r.stdout, r.stderr)

    def host_path(self, path: str) -> str | None:
        """Where the cluster's PATH lies on this machine (here: the same place)."""
        return path if path.startswith("/") else os.path.join(self.jobs_dir, path)

    def put_script(self, text: str, name: str) -> str:
        d = self.host_path(self.jobs_dir)
        assert d is not None
        os.makedirs(d, mode=0o700, exist_ok=True)
        base = script_name(name)
        for i in range(1000):
            fname = f"{base}{'' if i == 0 else f'-{i}'}.sbatch"
            try:
                fd = os.open(os.path.join(d, fname), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            except FileExistsError:
                continue
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            return os.path.join(d, fname)  # sbatch runs on this machine
        raise SlurmError(f"cannot name a new script in {d}")

    def remove(self, path: str) -> None:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass

    def read(self, path: str, offset: int = 0, missing: bytes | None = b"") -> bytes | None:
        hp = self.host_path(path)
        if hp is None:
            return missing
        try:
            with open(hp, "rb") as f:
                f.seek(offset)
                return f.read()
        except FileNotFoundError:
            return missing


class SshCluster(Cluster):
    """A login node reached over SSH with Fabric: `user@host[:port]` or a Host of the SSH
    config (~/.ssh/config, or SSH_CONFIG given). Scripts go to ~/.ctk-jobs on the login node,
    which is expected to be on the cluster's shared home."""

    def __init__(self, host: str, identity: str | None = None, ssh_config: str | None = None,
                 connect_timeout: float = 15, known_hosts: str | None = None, deployment: str | None = None):
        import fabric
        import paramiko

        if not re.fullmatch(r"(?:[^@\s]+@)?[A-Za-z0-9_.:\[\]-]+", host or ""):
            raise UserError(f"--host {host!r}: expected USER@HOST[:PORT] or a Host of your SSH config")
        if ssh_config is not None and not os.path.isfile(ssh_config):
            raise UserError(f"--ssh-config {ssh_config}: no such file")
        if identity is not None and not os.path.isfile(identity):
            raise UserError(f"--identity {identity}: no such file")
        cfg = fabric.Config(runtime_ssh_path=ssh_config) if ssh_config else fabric.Config()
        kwargs = {"key_filename": [identity]} if identity else {}
        self.conn = fabric.Connection(host, config=cfg, connect_timeout=connect_timeout, connect_kwargs=kwargs)
        # Fabric accepts any host key by default. Check the keys ssh would check: the user's
        # known_hosts and the config's UserKnownHostsFile; refuse unknown hosts where the
        # config says StrictHostKeyChecking yes.
        c = self.conn.client
        files = [os.path.expanduser("~/.ssh/known_hosts"), *_as_list(self.conn.ssh_config.get("userknownhostsfile"))]
        for f in files + ([known_hosts] if known_hosts else []):
            f = os.path.expanduser(f)
            if os.path.isfile(f):
                c.load_host_keys(f)
        if known_hosts or str(self.conn.ssh_config.get("stricthostkeychecking", "")).lower() == "yes":
            c.set_missing_host_key_policy(paramiko.RejectPolicy())
        self.host = host
        self.key = f"ssh://{self.conn.user}@{self.conn.host}:{self.conn.port}"
        self._deployment = deployment
        self._sftp = None
        self._home: str | None = None

    def __repr__(self) -> str:
        return f"SshCluster({self.key!r})"

    def deployment_dir(self) -> str | None:
        return self._deployment

    def _open(self):
        import paramiko

        try:
            self.conn.open()
        except paramiko.BadHostKeyException as e:
            raise SlurmError(f"--host {self.host}: the host key does not match the known one ({e})") from None
        except paramiko.SSHException as e:
            raise SlurmError(f"--host {self.host}: {e}", hint="is its key in known_hosts?") from None
        except (OSError, EOFError) as e:
            raise SlurmError(f"--host {self.host}: cannot connect: {e}") from None

    @property
    def sftp(self):
        if self._sftp is None:
            self._open()
            self._sftp = self.conn.sftp()
        return self._sftp

    @property
    def jobs_dir(self) -> str:  # type: ignore[override]
        if self._home is None:
            self._home = self.sftp.normalize(".")
        return f"{self._home.rstrip('/')}/{JOBS_SUBDIR}"

    def run(self, argv: Sequence[str], timeout: float = 30, stdin: str | None = None) -> Result:
        self._open()
        try:
            # umask 077: sbatch hands it to the job (SLURM_UMASK), so its logs are its user's alone
            r = self.conn.run("umask 077; " + shlex.join(argv), hide=True, warn=True, timeout=timeout,
                              in_stream=io.StringIO(stdin) if stdin is not None else False)
        except Exception as e:  # noqa: BLE001 - invoke's CommandTimedOut and connection errors
            if type(e).__name__ == "CommandTimedOut":
                raise SlurmError(f"{argv[0]} on {self.host}: no answer within {timeout:.0f}s") from None
            raise SlurmError(f"{argv[0]} on {self.host}: {e}") from None
        if r.return_code == 127 and "not found" in r.stderr:
            raise SlurmError(f"{argv[0]}: not installed on {self.host}")
        return Result(r.return_code, r.stdout, r.stderr)

    def put_script(self, text: str, name: str) -> str:
        d = self.jobs_dir
        try:
            self.sftp.stat(d)
        except FileNotFoundError:
            self.sftp.mkdir(d, 0o700)
        path = f"{d}/{script_name(name)}.sbatch"
        with self.sftp.open(path, "wb") as f:
            f.chmod(0o600)  # before the text goes in
            f.write(text.encode("utf-8"))
        return path

    def remove(self, path: str) -> None:
        try:
            self.sftp.remove(path)
        except FileNotFoundError:
            pass

    def read(self, path: str, offset: int = 0, missing: bytes | None = b"") -> bytes | None:
        p = path if path.startswith("/") else f"{self.jobs_dir}/{path}"
        try:
            with self.sftp.open(p, "rb") as f:
                f.seek(offset)
                return f.read()
        except FileNotFoundError:
            return missing

    def close(self) -> None:
        self.conn.close()


def _as_list(v) -> list[str]:
    if v is None:
        return []
    return list(v) if isinstance(v, (list, tuple)) else str(v).split()
