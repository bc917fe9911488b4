"""MariaDB and slurmdbd for the accounting tests: private servers on this machine, started as
ctk.sandbox.daemons starts munged and slurmctld (foreground children, returned once they
answer). ctk itself starts no accounting database; only these tests do."""

from __future__ import annotations

import os
import secrets
import subprocess
from pathlib import Path

from ctk.model import Deployment
from ctk.render.slurmconf import DbdLayout, render_slurmdbd_conf
from ctk.sandbox.daemons import DaemonError, Proc, _conf_value, _spawn, _which, wait_for


def start_mariadb(directory: str | os.PathLike, port: int, *, timeout: float = 60.0) -> tuple[Proc, str]:
    """A private MariaDB server for slurmdbd: data in ``directory``/db, listening on
    127.0.0.1:``port`` and a socket in ``directory``. Creates the database user ``slurm``
    with a random password, which is returned with the Proc (and never logged)."""
    d = Path(directory).resolve()
    d.mkdir(parents=True, exist_ok=True)
    sock, data = d / "mysqld.sock", d / "db"
    if not data.exists():
        r = subprocess.run([_which("mariadb-install-db"), "--no-defaults", f"--datadir={data}", "--user=root",
                            "--auth-root-authentication-method=socket", "--skip-test-db"],
                           capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            raise DaemonError(f"mariadb-install-db failed:\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
    log = d / "mariadbd.err"
    argv = [_which("mariadbd"), "--no-defaults", f"--datadir={data}", "--user=root", f"--socket={sock}",
            f"--port={port}", "--bind-address=127.0.0.1", f"--pid-file={d / 'mariadbd.pid'}",
            f"--log-error={log}", "--skip-log-bin", "--innodb-buffer-pool-size=32M"]
    proc = Proc("mariadbd", _spawn("mariadbd", argv, d / "mariadbd.out", None), logs=[log])
    client = [_which("mariadb"), "--no-defaults", f"--socket={sock}", "-uroot"]
    try:
        wait_for([*client, "-e", "SELECT 1"], timeout, proc=proc)
    except DaemonError:
        proc.stop()
        raise
    password = secrets.token_hex(16)
    sql = (f"CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '{password}';"
           f"ALTER USER 'slurm'@'127.0.0.1' IDENTIFIED BY '{password}';"
           "GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';")
    r = subprocess.run(client, input=sql, capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        proc.stop()
        raise DaemonError(f"cannot create the slurm database user: {r.stderr.strip()}")
    return proc, password


def write_slurmdbd_conf(path: str | os.PathLike, dep: Deployment, *, port: int, db_port: int, db_password: str,
                        munge_socket: str, log_dir: str | os.PathLike) -> Path:
    """slurmdbd.conf (0600: it holds the database password), as ctk renders it, for a slurmdbd
    on this machine's PORT that stores into the MariaDB on 127.0.0.1:DB_PORT. slurmdbd reads it
    from SLURM_CONF's folder."""
    p = Path(path)
    text = render_slurmdbd_conf(dep, DbdLayout(
        dbd_host="localhost", dbd_port=port, storage_host="127.0.0.1", storage_port=db_port,
        storage_user="slurm", storage_pass=db_password, log_file=str(Path(log_dir) / "slurmdbd.log"),
        pid_file=str(Path(log_dir) / "slurmdbd.pid"), auth_info=f"socket={munge_socket}"))
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(p, 0o600)
    return p


def start_slurmdbd(conf_dir: str | os.PathLike, cluster_name: str, *, timeout: float = 60.0) -> Proc:
    """slurmdbd on ``conf_dir``/slurmdbd.conf (next to slurm.conf, whose path is passed in
    SLURM_CONF), then the cluster registered with sacctmgr; returns once sacctmgr answers."""
    conf = Path(conf_dir).resolve() / "slurm.conf"
    env = {"SLURM_CONF": str(conf)}
    log_dir = Path(_conf_value(Path(conf_dir) / "slurmdbd.conf", "LogFile") or str(Path(conf_dir) / "x")).parent
    log_dir.mkdir(parents=True, exist_ok=True)
    proc = Proc("slurmdbd", _spawn("slurmdbd", [_which("slurmdbd"), "-D"], log_dir / "slurmdbd.out", env),
                logs=[log_dir / "slurmdbd.log", log_dir / "slurmdbd.out"], env=env)
    try:
        show = [_which("sacctmgr"), "-n", "-P", "show", "cluster", "format=cluster"]
        wait_for(show, timeout, env=env, proc=proc)  # slurmdbd answers
        subprocess.run([_which("sacctmgr"), "-i", "add", "cluster", cluster_name], capture_output=True,
                       env={**os.environ, **env}, timeout=30)  # already there: nothing to add
        wait_for(show, 10, env=env, proc=proc, ok=lambda r: cluster_name in r.stdout.split())
    except DaemonError:
        proc.stop()
        raise
    return proc
