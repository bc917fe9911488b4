"""The ssh target: the blueprint's cluster on existing machines, configured over SSH by the
same Ansible roles the images are built with (ansible/site.yml, ansible-core only).

The machines are the hosts of the blueprint's ctk/target/ssh module (Deployment.ssh_hosts).
`ctk deploy` renders the cluster's files, runs site.yml in the install phase (packages, users,
directories: the roles each host's image lists) and then in the configure phase (/etc/hosts,
the munge key, /etc/slurm, and the daemons started: systemd, or start-stop-daemon on hosts
without it), then waits until every compute node is idle. Re-running it is idempotent: an
unchanged cluster reports changed=0 in both phases. Everything lives in the deployment folder:

    ssh/inventory.yml       hosts, addresses, users, key paths (0600; keys by path, never read)
    ssh/known_hosts         the hosts' SSH keys, accepted on first use
    ssh/etc/slurm/          slurm.conf, cgroup.conf, gres.conf as the hosts get them
    ssh/etc/hosts           the cluster's /etc/hosts entries (the common role writes them)
    ssh/secrets/munge.key   the cluster's munge key (0400, made once, never printed)
    ssh/host/slurm.conf     the same cluster for this machine's sbatch/srun (see env_ssh)
    ssh/logs/PHASE.log      the full output of each ansible-playbook run
    ssh/state.json          the hosts deployed to (ctk status / destroy read it)

`ctk status` asks the controller over SSH (sinfo there) and looks at each host's processes:
it needs nothing on this machine but ssh, wherever the hosts are. `ctk destroy` runs the
roles' stop phase: the daemons stop (and are disabled under systemd); packages, users, the
key and /etc/slurm stay on the machines.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field

from .. import atomic, paths
from ..ansible_env import strategy_env
from ..ansible_out import parse_recap
from ..connect.base import IDENTITY_FILE, next_identity, parse_identity
from ..errors import Failure, UserError, did_you_mean
from ..model import HEALTH_CHECK, Deployment, ImageSpec, SshHost, SshSettings
from ..progress import Progress
from ..render.slurmconf import (
    PROD_LOG_DIR,
    PROD_PID_DIR,
    PROD_SLURMCTLD_PORT,
    PROD_SLURMD_PORT,
    PROD_SPOOL_DIR,
    PROD_STATE_DIR,
    NodeLayout,
    render_cgroup_conf,
    render_gres_conf,
    render_oci_conf,
    render_slurm_conf,
)
from ..runner import CommandError, run
from ..sandbox.daemons import DaemonError, ensure_munge_key, ensure_munged, stop_munged
from ..stacks import current_lock, get_stack, jax_role_vars
from ..stacks.rolevars import pyxis_vars, slurm_release_vars
from .base import (
    SINFO_PARTITIONS,
    DeployOutcome,
    NodeStatus,
    Status,
    Target,
    parse_node_states,
    parse_partitions,
    read_state,
    wait_ready,
    write_state,
)

DEFAULT_ROLES = ["common", "munge", "slurm", "jax"]
PIP_CA_IN_HOST = "/run/ctk/pip-ca-bundle.crt"  # where site.yml puts ctk_pip_ca_bundle
DAEMONS = {"controller": ["munged", "slurmctld"], "compute": ["munged", "slurmd"], "login": ["munged"]}


def ssh_dir(deployment_dir: str) -> str:
    return os.path.join(os.path.abspath(deployment_dir), "ssh")


# ---- planning (pure) -------------------------------------------------------------------

def hosts(dep: Deployment) -> list[SshHost]:
    """The machines of an ssh-target deployment (its settings' hosts)."""
    return dep.settings_of(SshSettings).hosts


def controller_host(dep: Deployment) -> SshHost:
    return next(h for h in hosts(dep) if h.role == "controller")


def layout(dep: Deployment, host_munge_socket: str | None = None) -> NodeLayout:
    """Where the daemons listen: each node at its host's address, slurmd on its own port when
    the blueprint gives one (several nodes on one machine), Debian's paths, one slurmd per host."""
    ctl = controller_host(dep)
    computes = [h for h in hosts(dep) if h.role == "compute"]
    return NodeLayout(
        controller_addr=ctl.host, controller_port=ctl.slurmctld_port or PROD_SLURMCTLD_PORT,
        node_addr={h.name: h.host for h in computes},
        node_port={h.name: h.slurmd_port for h in computes if h.slurmd_port},
        state_dir=PROD_STATE_DIR, spool_dir=PROD_SPOOL_DIR, log_dir=PROD_LOG_DIR, pid_dir=PROD_PID_DIR,
        slurm_user="slurm", controller_host=ctl.name, slurmd_port=PROD_SLURMD_PORT,
        munge_socket=host_munge_socket, gpu_dev_dir="/dev", per_node_files=False, health_check=HEALTH_CHECK)


def etc_hosts(dep: Deployment) -> list[dict]:
    """/etc/hosts entries (ctk_hosts): the hosts given by address; names in DNS stay with DNS."""
    out = []
    for h in hosts(dep):
        try:
            ipaddress.ip_address(h.host)
        except ValueError:
            continue
        out.append({"name": h.name, "addr": h.host})
    return out


def host_image(dep: Deployment, h: SshHost) -> ImageSpec:
    """The image a host stands for: its roles and stack are what the host gets."""
    name = None
    if h.role == "controller" and dep.controller:
        name = dep.controller.image
    elif h.role == "compute" and h.nodeset:
        name = dep.nodeset(h.nodeset).image
    elif h.role == "login" and dep.logins:
        name = dep.logins[0].image
    images = {i.name: i for i in dep.images}
    if name in images:
        return images[name]
    if name is None and len(dep.images) == 1:
        return dep.images[0]
    return ImageSpec(name=name or "default", module_id="", roles=list(DEFAULT_ROLES))  # the default stack


def notes(dep: Deployment) -> list[str]:
    out = []
    if any(img.base != "debian-12" for img in dep.images):
        out.append("the ssh target keeps each machine's own OS (image bases are not installed)")
    if dep.logins and not any(h.role == "login" for h in hosts(dep)):
        out.append("login nodes come from the ssh target's hosts (role: login); it lists none")
    for h in hosts(dep):
        if "jax" not in host_image(dep, h).roles:
            out.append(f"{h.name}: its image has no jax role, so no JAX venv")
    return out


def _connection_vars(sdir: str) -> dict:
    """Variables of every host: how Ansible reaches it, and that it runs the daemons."""
    known_hosts = os.path.join(sdir, "known_hosts")
    return {
        "ansible_python_interpreter": "/usr/bin/python3",
        "ansible_ssh_common_args": " ".join([
            "-o", shlex.quote(f"UserKnownHostsFile={known_hosts}"), "-o", "StrictHostKeyChecking=accept-new",
            "-o", "BatchMode=yes", "-o", "ConnectTimeout=20"]),
        "ctk_manage_services": True,
        # The ssh target runs no slurmdbd yet, so its controller gets no database server.
        "slurm_accounting": False,
    }


def _host_vars(h: SshHost) -> dict:
    hv = {"ansible_host": h.host, "ansible_port": h.port, "ansible_user": h.user,
          "ansible_become": h.user != "root", "slurm_flavour": h.role, "ctk_service_manager": h.service_manager}
    if h.key:
        hv["ansible_ssh_private_key_file"] = h.key
        hv["ansible_ssh_extra_args"] = "-o IdentitiesOnly=yes"
    return hv


def _groups(all_vars: dict, host_vars: list[tuple[SshHost, dict]]) -> dict:
    groups: dict[str, dict] = {"controller": {}, "compute": {}, "login": {}}
    for h, hv in host_vars:
        groups[h.role][h.name] = hv
    return {"all": {"vars": all_vars, "children": {g: {"hosts": hs} for g, hs in groups.items() if hs}}}


def stop_inventory(hosts: list[SshHost], sdir: str) -> dict:
    """An inventory that is enough for the stop phase: how to reach each host, its flavour and
    service manager (what ctk destroy, and a deploy that drops hosts, stop)."""
    return _groups(_connection_vars(sdir), [(h, _host_vars(h)) for h in hosts])


def inventory(dep: Deployment, sdir: str) -> dict:
    """The Ansible inventory (YAML; written as JSON): key files by path only."""
    from ..images.build import (
        host_ca_bundle,  # the image builder: only a deploy needs it
    )

    bundle = host_ca_bundle()
    all_vars = {
        **_connection_vars(sdir),
        "ctk_hosts": etc_hosts(dep),
        "munge_key_src": os.path.join(sdir, "secrets", "munge.key"),
        "slurm_conf_dir": os.path.join(sdir, "etc", "slurm"),
        # Live machines: keep their SSH host keys, and keep the cluster's munge key in place
        # when the install phase runs again (a re-deploy changes nothing).
        "common_remove_ssh_host_keys": False,
        "munge_strip_package_key": False,
        "ctk_pip_ca_bundle": bundle or "",
        "pip_extra_args": f"--cert {PIP_CA_IN_HOST}" if bundle else "",
    }
    host_vars = []
    for h in hosts(dep):
        img = host_image(dep, h)
        hv = {**_host_vars(h),
              # Package scripts start daemons under systemd as usual; without it ctk alone does.
              "common_block_service_autostart": h.service_manager == "direct",
              "ctk_roles": list(img.roles)}
        if h.role == "compute":
            hv["slurm_node_name"] = h.name
        if "pyxis" in img.roles:
            hv.update(pyxis_vars(img))
        if "slurm" in img.roles:
            hv.update(slurm_release_vars(img))  # the role checks the host is a Debian that can take it
        if "jax" in img.roles:
            # A host keeps its own OS, so its Python is known only there: the role picks the
            # lock for the interpreter it finds among all of the stack's.
            stack = get_stack(img.stack)
            hv.update(jax_role_vars(stack, [current_lock(stack, py) for py in stack.pythons]))
        host_vars.append((h, hv))
    return _groups(all_vars, host_vars)


def ssh_files(dep: Deployment, sdir: str) -> dict[str, str]:
    """Every generated file of an ssh deployment but the key, by path relative to ssh/ (pure)."""
    lay = layout(dep)
    host_lay = layout(dep, os.path.join(sdir, "host-munge", "munge.sock"))
    files = {"etc/slurm/slurm.conf": render_slurm_conf(dep, layout=lay),
             "etc/slurm/cgroup.conf": render_cgroup_conf(dep, layout=lay),
             "etc/slurm/oci.conf": render_oci_conf(dep),
             "etc/hosts": "".join(f"{x['addr']} {x['name']}\n" for x in etc_hosts(dep)),
             "host/slurm.conf": render_slurm_conf(dep, layout=host_lay),
             "inventory.yml": json.dumps(inventory(dep, sdir), indent=1) + "\n"}
    files["host/cgroup.conf"] = files["etc/slurm/cgroup.conf"]
    if any(ns.gpu_count for ns in dep.nodesets):
        files["etc/slurm/gres.conf"] = render_gres_conf(dep, layout=lay)
        files["host/gres.conf"] = files["etc/slurm/gres.conf"]
    return files


# ---- SSH and Ansible ------------------------------------------------------------------------

def ssh_argv(sdir: str, h: dict | SshHost, command: str) -> list[str]:
    """ssh to a host as the inventory does (its key, user and port; this deployment's known_hosts)."""
    h = h if isinstance(h, dict) else asdict(h)
    argv = ["ssh", "-o", "BatchMode=yes", "-o", f"UserKnownHostsFile={os.path.join(sdir, 'known_hosts')}",
            "-o", "StrictHostKeyChecking=accept-new", "-o", "ConnectTimeout=10", "-p", str(h["port"])]
    if h.get("key"):
        argv += ["-i", h["key"], "-o", "IdentitiesOnly=yes"]
    return argv + [f"{h['user']}@{h['host']}", "--", command]


def _ssh(sdir: str, h, command: str, timeout: float = 30) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(ssh_argv(sdir, h, command), capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess([], 255, "", f"ssh timed out after {timeout:g}s")


def _ansible_env(sdir: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0",
               ANSIBLE_RETRY_FILES_ENABLED="False", ANSIBLE_PIPELINING="True",
               ANSIBLE_STDOUT_CALLBACK="ansible.builtin.default",
               ANSIBLE_ROLES_PATH=os.path.join(paths.ansible_dir(), "roles"),
               ANSIBLE_LOCAL_TEMP=os.path.join(sdir, ".ansible", "tmp"),
               ANSIBLE_SSH_CONTROL_PATH_DIR=os.path.join(os.path.expanduser("~"), ".ansible", "cp"))
    return env


def _ansible_playbook() -> str:
    exe = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
    return exe if os.access(exe, os.X_OK) else (shutil.which("ansible-playbook") or exe)


def run_phase(deployment_dir: str, phase: str, progress: Progress, inventory_file: str = "inventory.yml"
              ) -> dict[str, dict[str, int]]:
    """ansible-playbook site.yml over SSH in one phase; returns the recap per host."""
    sdir = ssh_dir(deployment_dir)
    log = os.path.join(sdir, "logs", f"{phase}.log")
    os.makedirs(os.path.dirname(log), exist_ok=True)
    if os.path.exists(log):
        os.unlink(log)
    lines: list[str] = []

    def on_line(line: str) -> None:
        lines.append(line)
        m = re.match(r"^(TASK|RUNNING HANDLER) \[(.*)\] \**$", line)
        if m:
            progress.task(f"{phase}: {m.group(2)}")

    argv = [_ansible_playbook(), "-i", os.path.join(sdir, inventory_file),
            os.path.join(paths.ansible_dir(), "site.yml"), "-e", f"ctk_phase={phase}"]
    try:
        with strategy_env(argv[0]) as mitogen_vars:
            run(argv, env={**_ansible_env(sdir), **mitogen_vars}, cwd=paths.ansible_dir(), on_line=on_line,
                log_path=log, tail_lines=60, what=f"ansible-playbook site.yml (phase {phase}) failed; full log: {log}")
    except CommandError as e:
        failed = [f"{h} (failed={r['failed']}, unreachable={r['unreachable']})"
                  for h, r in parse_recap("\n".join(lines)).items() if r["failed"] or r["unreachable"]]
        raise DaemonError(f"{e}" + (f"\nhosts that failed: {', '.join(failed)}" if failed else "")) from None
    return parse_recap("\n".join(lines))


# ---- side effects ---------------------------------------------------------------------------

def munge_key(sdir: str) -> str:
    """The cluster's munge key (1024 random bytes, 0400 in a 0700 folder), made once."""
    return ensure_munge_key(os.path.join(sdir, "secrets", "munge.key"))


def load_state(deployment_dir: str) -> dict | None:
    """The hosts deployed to (ssh/state.json), or None."""
    return read_state(ssh_dir(deployment_dir))


def slurm_on_controller(deployment_dir: str, state: dict, command: str, timeout: float = 30
                        ) -> subprocess.CompletedProcess:
    ctl = next(h for h in state["hosts"] if h["role"] == "controller")
    return _ssh(ssh_dir(deployment_dir), ctl, command, timeout=timeout)


def node_states(deployment_dir: str, state: dict) -> dict[str, str]:
    """Slurm's state of every node, as sinfo on the controller reports it ({} if unreachable)."""
    r = slurm_on_controller(deployment_dir, state, "sinfo -h -N -o '%N %T'", timeout=30)
    return parse_node_states(r.stdout) if r.returncode == 0 else {}


def _wait_ready(deployment_dir: str, state: dict, timeout: float, progress: Progress) -> None:
    wait_ready(lambda: node_states(deployment_dir, state),
               [h["name"] for h in state["hosts"] if h["role"] == "compute"], timeout, progress, 1.0,
               lambda states: DaemonError(f"nodes did not become idle in time: {states}",
                                          hint="ctk status shows each host's daemons; their logs are in "
                                          "/var/log/slurm"))


@dataclass
class SshDeployResult:
    deployment_dir: str
    hosts: list[str]
    changed: dict[str, dict[str, int]]  # phase -> host -> tasks changed
    files_changed: list[str]
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    timings: dict[str, float] = field(default_factory=dict)


def write_files(dep: Deployment, deployment_dir: str) -> tuple[dict, list[str]]:
    """Write ssh/ (the key once, every other file when it changed). Returns (the state
    deploy_ssh records in ssh/state.json once the hosts are reached, the files that changed)."""
    if not hosts(dep):
        raise UserError("the blueprint has no ctk/target/ssh module listing hosts")
    sdir = ssh_dir(deployment_dir)
    os.makedirs(sdir, exist_ok=True)
    munge_key(sdir)
    files = ssh_files(dep, sdir)
    ident = json.dumps(cluster_identity(sdir, dep)) + "\n"
    files[f"etc/slurm/{IDENTITY_FILE}"] = files[f"host/{IDENTITY_FILE}"] = ident
    changed = [rel for rel, text in files.items()
               if atomic.write_if_changed(os.path.join(sdir, rel), text, 0o600 if rel == "inventory.yml" else 0o644)]
    for rel in ("etc/slurm/gres.conf", "host/gres.conf"):
        if rel not in files and os.path.exists(os.path.join(sdir, rel)):
            os.unlink(os.path.join(sdir, rel))
            changed.append(rel)
    state = {"deployment": dep.deployment_name, "hosts": [asdict(h) for h in hosts(dep)], "notes": notes(dep)}
    return state, changed


def cluster_identity(sdir: str, dep: Deployment) -> dict[str, str]:
    """{cluster, id} of the hosts' cluster: the id made at its first deploy, kept while the
    blueprint's cluster name stays (next_identity)."""
    try:
        with open(os.path.join(sdir, "etc", "slurm", IDENTITY_FILE), encoding="utf-8") as f:
            old = parse_identity(f.read())
    except OSError:
        old = None
    return next_identity(old, dep.slurm_cluster_name)


def learn_host_keys(sdir: str, hs: list[SshHost]) -> None:
    """Record each host's SSH key in this deployment's known_hosts the first time ctk reaches it
    (ssh's accept-new): Mitogen's ssh enforces known_hosts (StrictHostKeyChecking yes), so Ansible
    over Mitogen reaches only hosts already in it. A key that changed stops the deploy here, with
    ssh's reason; an unreachable host is left to Ansible to report."""
    with ThreadPoolExecutor(max_workers=8, thread_name_prefix="ctk-hostkeys") as pool:
        results = list(pool.map(lambda h: _ssh(sdir, h, "true", timeout=30), hs))
    known_hosts = os.path.join(sdir, "known_hosts")
    for h, r in zip(hs, results):
        if r.returncode != 0 and ("IDENTIFICATION HAS CHANGED" in r.stderr or "Host key verification failed" in r.stderr):
            where = h.host if h.port == 22 else f"[{h.host}]:{h.port}"
            raise Failure(f"host '{h.name}' ({h.user}@{h.host} port {h.port}) has another SSH key than the one "
                          f"this deployment recorded in {known_hosts}: a reinstalled machine, or another machine "
                          "at its address", hint=f"if the machine was reinstalled, forget its old key: "
                          f"ssh-keygen -R '{where}' -f {known_hosts}; then deploy again")


def check_controller_hostname(deployment_dir: str, dep: Deployment) -> None:
    """slurmctld starts only on the machine SlurmctldHost names (its `hostname -s`): fail early,
    with the fix, when the controller host's name in the blueprint is not its hostname. An
    unreachable host is left to Ansible to report."""
    ctl = controller_host(dep)
    r = _ssh(ssh_dir(deployment_dir), ctl, "hostname -s; hostname", timeout=30)
    names = r.stdout.split()
    if r.returncode == 0 and names and ctl.name not in names:
        raise UserError(f"the controller host '{ctl.name}' ({ctl.user}@{ctl.host}) calls itself '{names[0]}'; "
                        "slurmctld runs only on the host its SlurmctldHost names",
                        hint=f"name it '{names[0]}' in the blueprint's ctk/target/ssh hosts")


def deploy_ssh(dep: Deployment, deployment_dir: str, progress: Progress | None = None,
               ready_timeout: float = 120.0) -> SshDeployResult:
    """Configure the blueprint's hosts over SSH into its cluster; idempotent."""
    progress = progress or Progress()
    t0 = time.monotonic()
    state, changed_files = write_files(dep, deployment_dir)
    for n in state["notes"]:
        progress.say(f"note: {n}")
    result = SshDeployResult(deployment_dir, [h.name for h in hosts(dep)], {}, changed_files, state["notes"])
    check_controller_hostname(deployment_dir, dep)
    # Hosts deployed before and no longer listed (or now at another address) are stopped first;
    # should that fail, the old state.json still lists them for the next try.
    kept = {(h.name, h.host, h.port) for h in hosts(dep)}
    dropped = [SshHost(**h) for h in (load_state(deployment_dir) or {}).get("hosts", [])
               if (h["name"], h["host"], h["port"]) not in kept]
    learn_host_keys(ssh_dir(deployment_dir), hosts(dep))
    if dropped:
        with progress.step(f"stopping the daemons on {len(dropped)} host(s) no longer in the blueprint"):
            result.changed["stop"] = {h: r["changed"] for h, r in stop_hosts(deployment_dir, dropped, progress).items()}
        result.notes.append("stopped the daemons on " + ", ".join(h.name for h in dropped)
                            + " (no longer in the blueprint; packages stay)")
    # From here on the hosts may run daemons of this deployment: status and destroy find them.
    write_state(ssh_dir(deployment_dir), state)
    for phase in ("install", "configure"):
        with progress.step(f"{phase} phase on {len(hosts(dep))} host(s) over SSH"):
            t = time.monotonic()
            recap = run_phase(deployment_dir, phase, progress)
            result.timings[phase] = round(time.monotonic() - t, 1)
        result.changed[phase] = {h: r["changed"] for h, r in recap.items()}
    with progress.step("waiting for every compute node to be idle"):
        t = time.monotonic()
        _wait_ready(deployment_dir, state, ready_timeout, progress)
        result.timings["ready"] = round(time.monotonic() - t, 1)
    result.seconds = time.monotonic() - t0
    return result


def stop_hosts(deployment_dir: str, hosts: list[SshHost], progress: Progress) -> dict[str, dict[str, int]]:
    """The roles' stop phase on `hosts` (an inventory of their own: ssh/inventory-stop.yml)."""
    sdir = ssh_dir(deployment_dir)
    learn_host_keys(sdir, hosts)
    atomic.write_file(os.path.join(sdir, "inventory-stop.yml"),
                      json.dumps(stop_inventory(hosts, sdir), indent=1) + "\n", 0o600)
    return run_phase(deployment_dir, "stop", progress, "inventory-stop.yml")


def _host_processes(sdir: str, h: dict) -> tuple[bool, set[str]]:
    """(reachable, names of the processes running there), from /proc over SSH."""
    r = _ssh(sdir, h, "cat /proc/[0-9]*/comm 2>/dev/null; echo ctk-ok", timeout=20)
    if r.returncode != 0 and "ctk-ok" not in r.stdout:
        return False, set()
    return True, {x.strip() for x in r.stdout.splitlines()}


def status_ssh(deployment_dir: str) -> Status:
    """Hosts (reachable, daemons) and partitions of an ssh deployment."""
    state = load_state(deployment_dir)
    if state is None:
        raise UserError(f"{deployment_dir} is not deployed",
                        hint=f"deploy it with: ctk deploy BLUEPRINT -o {deployment_dir}")
    sdir = ssh_dir(deployment_dir)
    with ThreadPoolExecutor(max_workers=8) as pool:
        procs = dict(zip([h["name"] for h in state["hosts"]],
                         pool.map(lambda h: _host_processes(sdir, h), state["hosts"])))
        slurm_states = node_states(deployment_dir, state)
    nodes = []
    for h in state["hosts"]:
        reachable, running = procs[h["name"]]
        dead = [d for d in DAEMONS[h["role"]] if d not in running] if reachable else []
        nodes.append(NodeStatus(h["name"], h["role"], h["host"], reachable and not dead, dead,
                                slurm_states.get(h["name"]) if h["role"] == "compute" else None,
                                ssh_port=h["port"], reachable=reachable))
    r = slurm_on_controller(deployment_dir, state, " ".join(shlex.quote(a) for a in SINFO_PARTITIONS))
    return Status(deployment=state["deployment"], target="ssh", controller_reachable=bool(slurm_states),
                  nodes=nodes, partitions=parse_partitions(r.stdout) if r.returncode == 0 else [],
                  notes=state.get("notes", []))


def destroy_ssh(deployment_dir: str, progress: Progress | None = None) -> list[str]:
    """Stop the cluster's daemons on every host (the roles' stop phase). Packages, users, the
    munge key and /etc/slurm stay on the machines; the deployment folder keeps its files (and
    the key, so a new deploy finds the same cluster)."""
    progress = progress or Progress(quiet=True)
    state = load_state(deployment_dir)
    if state is None:
        raise UserError(f"{deployment_dir} is not deployed (no ssh/state.json)")
    sdir = ssh_dir(deployment_dir)
    stop_hosts(deployment_dir, [SshHost(**h) for h in state["hosts"]], progress)
    stop_munged(os.path.join(sdir, "host-munge"))
    os.unlink(os.path.join(sdir, "state.json"))
    return [h["name"] for h in state["hosts"]]


def exec_ssh(deployment_dir: str, node: str, argv: list[str]) -> int:
    state = load_state(deployment_dir)
    if state is None:
        raise UserError(f"{deployment_dir} is not deployed")
    host = next((h for h in state["hosts"] if h["name"] == node), None)
    if host is None:
        names = [h["name"] for h in state["hosts"]]
        raise UserError(f"no host {node!r} in {deployment_dir} ({did_you_mean(node, names) or 'hosts: ' + ', '.join(names)})")
    return subprocess.call(ssh_argv(ssh_dir(deployment_dir), host, shlex.join(argv)))


def env_ssh(deployment_dir: str) -> str:
    """Exports that point this machine's Slurm commands at the cluster. Starts a munged here with
    the cluster's key (ssh/host-munge/) if none runs; the hosts must be able to reach this
    machine for srun (slurmd connects back to it)."""
    if load_state(deployment_dir) is None:
        raise UserError(f"{deployment_dir} is not deployed")
    sdir = ssh_dir(deployment_dir)
    ensure_munged(os.path.join(sdir, "host-munge"), os.path.join(sdir, "secrets", "munge.key"))
    return f"export SLURM_CONF={os.path.join(sdir, 'host', 'slurm.conf')}\n"


def job_cluster(deployment_dir: str):
    """The ssh target's cluster for `ctk job`: its login host (else the controller) over SSH,
    with the key and known_hosts that `ctk deploy` used."""
    from ..connect.base import SshCluster

    state = load_state(deployment_dir)
    if state is None:
        raise UserError(f"--deployment {deployment_dir}: not deployed yet", hint=f"ctk deploy BLUEPRINT -o {deployment_dir}")
    hosts = sorted(state["hosts"], key=lambda h: {"login": 0, "controller": 1}.get(h["role"], 2))
    h = hosts[0]
    return SshCluster(f"{h['user']}@{h['host']}:{h['port']}", identity=h.get("key"),
                      known_hosts=os.path.join(ssh_dir(deployment_dir), "known_hosts"),
                      deployment=os.path.abspath(deployment_dir))


class SshTarget(Target):
    name = "ssh"

    def folder_layout(self, dep: Deployment) -> NodeLayout | None:
        # The hosts are known: their addresses and ports go into the folder's slurm.conf.
        return layout(dep) if hosts(dep) else None

    def deploy(self, exp, dep: Deployment, deployment_dir: str, *, max_nodes: int | None,
               progress: Progress) -> DeployOutcome:
        if max_nodes:
            progress.say("note: --max-nodes is for the local target; the ssh target deploys every listed host")
        res = deploy_ssh(dep, deployment_dir, progress=progress)
        changed = {phase: sum(v.values()) for phase, v in res.changed.items()}
        return DeployOutcome([
            f"{dep.deployment_name}: {len(res.hosts)} host(s) configured over SSH in {res.seconds:.1f}s "
            f"(changed: install {changed.get('install', 0)}, configure {changed.get('configure', 0)})",
            f"status:   ctk status {deployment_dir}",
            f"stop it:  ctk destroy {deployment_dir}"], asdict(res))

    def overwrite_refusal(self, deployment_dir: str) -> UserError | None:
        if load_state(deployment_dir) is None:
            return None
        return UserError(f"{deployment_dir} has a cluster deployed from it over SSH (its munge key is there)",
                         hint=f"`ctk deploy` updates it in place; `ctk destroy {deployment_dir}` stops it first")

    def is_deployed(self, deployment_dir: str) -> bool:
        return load_state(deployment_dir) is not None

    def status(self, deployment_dir: str) -> Status:
        return status_ssh(deployment_dir)

    def destroy(self, deployment_dir: str, progress: Progress, purge: bool = False) -> str:
        if purge:
            raise UserError("--purge: the ssh target's data is on its hosts, which ctk never deletes",
                            hint=f"ctk destroy {deployment_dir} stops the daemons")
        stopped = destroy_ssh(deployment_dir, progress)
        return (f"destroyed {deployment_dir}: stopped the daemons on {len(stopped)} host(s) "
                "(packages, /etc/slurm and the munge key stay on them)")

    def exec(self, deployment_dir: str, node: str, argv: list[str], user: str | None = None) -> int:
        if user:
            raise UserError("ctk exec --user is for a lab's nodes; on an ssh target, ssh in as that user",
                            hint=f"ctk exec {deployment_dir} {node} -- sudo -u {user} ...")
        return exec_ssh(deployment_dir, node, argv)

    def env(self, deployment_dir: str, user: str | None = None) -> str:
        if user:
            raise UserError("ctk env --user: an ssh target's Slurm commands run as you, on this machine",
                            hint="leave out --user")
        return env_ssh(deployment_dir)

    def job_cluster(self, deployment_dir: str):
        return job_cluster(deployment_dir)
