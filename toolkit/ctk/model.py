"""The Deployment model: what a blueprint describes, after expansion, in ctk's own terms.

Everything downstream (slurm.conf rendering, image builds, targets, jobs) reads this model;
nothing downstream re-reads YAML. It round-trips through JSON (deployment.json).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from .target_registry import Traits, resolve, settings_type, traits

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

# The Python each base OS ships as /usr/bin/python3: the interpreter an image's JAX venv is made
# from, so the one its stack must be locked for. The one table of it; stacks, planning and image
# builds read it here.
JAX_VENV = "/opt/ctk/jax"  # where the jax role puts the stack's venv (its jax_venv default)
JAX_TASK_PROLOG = "/usr/lib/ctk/jax-task-prolog"  # the jax role's Slurm TaskProlog (jax_task_prolog)
HEALTH_CHECK = "/usr/lib/ctk/healthcheck"  # the slurm role's node health check (slurm_health_check)
OCI_RUNTIME = "/usr/lib/ctk/oci-runtime"  # the slurm role's OCI runtime for Slurm's containers (slurm_oci_runtime)


@dataclass(frozen=True)
class Base:
    """A base OS an image is built on, and what its distribution's own packages bring: the
    Slurm release (slurm-wlm, or EPEL's slurm) and the python3 every role and stack runs on.
    (On the gcp target, slurm-gcp's images bring their own Slurm instead.)"""

    name: str  # as blueprints spell it (ctk/image's `base`)
    distribution: str  # Ansible's and testinfra's name for it, lowercased
    release: str  # the distribution's major version: "13", "24.04", "9"
    slurm: tuple[int, int]  # (major, minor): (24, 11) is Slurm 24.11
    python: tuple[int, int]  # (3, 13) is Python 3.13

    @property
    def slurm_release(self) -> str:
        """As Slurm spells it: "24.11", "22.05"."""
        return slurm_text(self.slurm)

    @property
    def python_release(self) -> str:
        major, minor = self.python
        return f"{major}.{minor}"


# Debian's are checked against its archive; Ubuntu's (slurm-wlm) and Rocky's (EPEL 9) are
# those archives' published versions, which this project's machines cannot reach.
BASES: dict[str, Base] = {b.name: b for b in (
    Base("debian-12", "debian", "12", slurm=(22, 5), python=(3, 11)),
    Base("debian-13", "debian", "13", slurm=(24, 11), python=(3, 13)),
    Base("ubuntu-22.04", "ubuntu", "22.04", slurm=(21, 8), python=(3, 10)),
    Base("ubuntu-24.04", "ubuntu", "24.04", slurm=(23, 11), python=(3, 12)),
    Base("rocky-9", "rocky", "9", slurm=(22, 5), python=(3, 9)),
)}
DEFAULT_BASE = "debian-13"

# Slurm releases an image can ask for (ctk/image's `slurm_release`) besides its base's own: the
# bases that can take each, and the Debian suite its packages come from. Debian forky's 26.05 runs
# on Debian 13 (its packages need glibc >= 2.38 and hwloc >= 2.15: trixie has glibc 2.41, and
# hwloc 2.16 in trixie-backports); only Slurm's own packages and one library come from forky.
SLURM_ARCHIVES: dict[str, dict[str, str]] = {"26.05": {"debian-13": "forky"}}


def slurm_text(release: tuple[int, int]) -> str:
    """As Slurm spells it: "24.11", "22.05"."""
    return f"{release[0]}.{release[1]:02d}"


def parse_release(text: str) -> tuple[int, int] | None:
    """(26, 5) from "26.05"; None for what is no Slurm release."""
    m = re.fullmatch(r"(\d+)\.(\d\d)", text)
    return (int(m.group(1)), int(m.group(2))) if m else None


# Slurm's major releases before its 6-month cycle (from 24.05: every May and November).
_EARLIER_RELEASES = ((20, 2), (20, 11), (21, 8), (22, 5), (23, 2), (23, 11))


def releases_after(old: tuple[int, int], new: tuple[int, int]) -> int:
    """How many major releases NEW is after OLD (0: the same; 1: the next one)."""
    def index(r: tuple[int, int]) -> float:
        if r in _EARLIER_RELEASES:
            return _EARLIER_RELEASES.index(r) - len(_EARLIER_RELEASES)  # 23.11 is -1: 24.05 is 0
        return (r[0] - 24) * 2 + (1 if r[1] >= 11 else 0)
    return int(index(new) - index(old))


def slurm_change_refusal(old: tuple[int, int], new: tuple[int, int]) -> str | None:
    """Why a cluster whose daemons ran Slurm OLD cannot move to NEW in place (its saved state and
    accounting database kept), or None where it can. SchedMD's rule: slurmdbd and slurmctld take
    the state and records of the previous two major releases, three from 24.11 on; never of a
    later release."""
    if new < old:
        return (f"Slurm {slurm_text(old)} wrote the controller's saved state and the accounting database; "
                f"Slurm {slurm_text(new)} cannot read them (Slurm never goes back a release)")
    window = 3 if new >= (24, 11) else 2
    if releases_after(old, new) > window:
        return (f"Slurm {slurm_text(new)} reads the saved state and accounting records of at most {window} "
                f"releases back, and {slurm_text(old)} is {releases_after(old, new)} releases back (SchedMD's "
                "upgrade rule): upgrade in steps")
    return None
BASE_PYTHON = {name: b.python_release for name, b in BASES.items()}  # "debian-13" -> "3.13"


def base_python(base: str) -> str | None:
    """The Python version a base OS ships ("3.11"), or None for a base ctk does not know."""
    return BASE_PYTHON.get(base)


CONTAINER_IMAGE = "ctk/container-image"  # the module source of a container image
CONTAINER_ROLES = ["common", "jax"]  # a container image's roles unless it names its own
CONTAINERS_DIR = "/var/lib/ctk/containers"  # where a lab's nodes have each container image's OCI bundle


@dataclass
class ImageSpec:
    """A node image, or a container image (source CONTAINER_IMAGE: jobs run in it through
    Slurm's OCI support, srun --container): base OS, ordered Ansible roles, one software stack."""

    name: str
    module_id: str
    base: str = DEFAULT_BASE
    roles: list[str] = field(default_factory=lambda: ["common", "munge", "slurm", "jax"])
    stack: str = "jax-cpu"  # the newest CPU stack for the default base's Python (3.13)
    extra_playbooks: list[str] = field(default_factory=list)
    source: str = ""  # module source that declared it
    # Transformer Engine's release, built into the image's JAX venv against its CUDA toolkit
    # (a CUDA stack's opt-in); None: none.
    transformer_engine: str | None = None
    # The pyxis role's files where a node lacks enroot or pyxis: {"enroot_packages": [{url,
    # sha256}, ...], "source": {url, sha256}} (the ctk/image setting `pyxis`).
    pyxis: dict = field(default_factory=dict)
    # The Slurm release of the image when it is not its base's own (SLURM_ARCHIVES: "26.05");
    # "": the base's.
    slurm_release: str = ""

    @property
    def slurm(self) -> tuple[int, int] | None:
        """(major, minor) of the image's Slurm; None for a base ctk does not know."""
        if self.slurm_release:
            return parse_release(self.slurm_release)
        base = BASES.get(self.base)
        return base.slurm if base else None

    @property
    def python(self) -> str | None:
        """The interpreter of the image's stack (None: the image has no JAX venv)."""
        return f"{JAX_VENV}/bin/python" if "jax" in self.roles else None


@dataclass
class Nodeset:
    """A group of identical compute nodes (Slurm NodeName line)."""

    name: str  # Slurm nodeset name, e.g. "debugnodeset"
    module_id: str
    machine_type: str
    node_prefix: str  # hostnames are f"{node_prefix}-{i}"
    cpus: int
    memory_mb: int  # Slurm RealMemory
    node_count_static: int = 0
    node_count_dynamic_max: int = 0
    gpu_type: str | None = None  # Slurm gres type, e.g. "h100"
    gpu_count: int = 0
    tpu_type: str | None = None  # e.g. "v5p-8" (TPU nodesets)
    tpu_chips_per_host: int = 0
    features: list[str] = field(default_factory=list)
    node_conf: dict[str, Any] = field(default_factory=dict)  # extra NodeName parameters
    network: str = "tcp"  # tcp | gpudirect-tcpx | gpudirect-tcpxo | rdma
    image: str | None = None
    spot: bool = False  # Spot or preemptible VMs (enable_spot_vm, preemptible): they can be taken back
    # Flex-start capacity (Cluster Toolkit's dws_flex): the most seconds a node runs before the
    # capacity is taken back (dws_flex.max_run_duration); None: not flex-start.
    flex_max_run_duration: int | None = None
    # Existing machines (the ssh target): the nodes' names, one per host of the nodeset, in
    # the order the blueprint lists them. Empty: names are made from node_prefix.
    hostnames: list[str] = field(default_factory=list)

    @property
    def node_count(self) -> int:
        return self.node_count_static + self.node_count_dynamic_max

    def node_names(self) -> list[str]:
        if self.hostnames:
            return list(self.hostnames)
        return [f"{self.node_prefix}-{i}" for i in range(self.node_count)]


@dataclass
class Partition:
    name: str
    module_id: str
    nodesets: list[str]  # Nodeset.name values
    is_default: bool = False
    exclusive: bool = True
    max_time: str | None = None  # Slurm MaxTime, e.g. "UNLIMITED" or "2-00:00:00"
    oversubscribe: str | None = None  # Slurm OverSubscribe
    conf: dict[str, Any] = field(default_factory=dict)  # extra PartitionName parameters
    # Idle seconds before a dynamic node is powered down (Slurm's SuspendTime of the partition;
    # -1: never). Cluster Toolkit's partition default is 300.
    suspend_time: int = 300


@dataclass
class Controller:
    module_id: str
    machine_type: str = "c2-standard-4"
    hostname: str = "controller"
    image: str | None = None
    slurm_conf: dict[str, Any] = field(default_factory=dict)  # extra slurm.conf parameters
    # Slurm's own authentication (AuthType=auth/slurm, CredType=cred/slurm, a shared
    # slurm.key) instead of munge: Cluster Toolkit's enable_slurm_auth.
    slurm_auth: bool = False
    # Slurm's accounting: slurmdbd and its database on the controller (slurm-gcp's default).
    accounting: bool = True
    # Power saving (Cluster Toolkit's cloud_parameters, slurm-gcp's defaults): seconds a resumed
    # node may take to register, seconds a suspended one takes to power down, nodes per minute
    # (0: no limit).
    resume_timeout: int = 300
    suspend_timeout: int = 300
    resume_rate: int = 0
    suspend_rate: int = 0
    # A backup slurmctld (Cluster Toolkit's enable_backup_controller), sharing the saved state.
    backup: bool = False


@dataclass
class Login:
    module_id: str
    name: str
    machine_type: str = "n2-standard-2"
    count: int = 1
    image: str | None = None

    def node_names(self) -> list[str]:
        return [f"{self.name}-{i}" for i in range(self.count)]


@dataclass
class SharedFs:
    module_id: str
    local_mount: str
    remote_mount: str = ""
    fs_type: str = "nfs"
    source: str = ""


@dataclass
class SshHost:
    """An existing machine of the ssh target (one entry of a ctk/target/ssh module's hosts).

    `name` is the node's name in the cluster: its Slurm NodeName (computes), SlurmctldHost
    (the controller) and /etc/hosts name. `key` is the path of an SSH private key on this
    machine; ctk passes the path to ssh and never reads or copies the key."""

    name: str
    host: str  # address or DNS name ssh connects to (also the node's NodeAddr)
    role: str  # controller | compute | login
    port: int = 22
    user: str = "root"
    key: str | None = None  # absolute path; None: ssh's own defaults (agent, ~/.ssh)
    nodeset: str = ""  # computes: Nodeset.name
    slurmd_port: int | None = None  # computes: slurmd's port (default 6818)
    slurmctld_port: int | None = None  # the controller: slurmctld's port (default 6817)
    service_manager: str = "systemd"  # systemd | direct (no systemd: start-stop-daemon)


@dataclass
class Unsupported:
    """A module the model does not cover: kept for the gcp target, listed elsewhere."""

    module_id: str
    source: str
    group: str
    reason: str  # "not modelled" | "remote source"


# How a nodeset becomes one a preemption can hit (ctk preempt, chaos): said where there is none.
NO_SPOT_HINT = "mark a nodeset enable_spot_vm: true (preemptible: true on Cluster Toolkit's TPU nodesets)"


S = TypeVar("S", bound="TargetSettings")
D = TypeVar("D", bound="DataclassInstance")


def from_fields(cls: type[D], d: dict[str, Any]) -> D:
    """A CLS (a dataclass) of the values in D, a dict as asdict wrote it, perhaps by an earlier
    ctk: the keys CLS does not have are left out, its fields D lacks take their defaults."""
    known = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in d.items() if k in known})


@dataclass
class TargetSettings:
    """A target's own settings (its target module's), Deployment.settings: each target has a
    dataclass of its own, which ctk.target_registry names."""

    @classmethod
    def from_dict(cls: type[S], d: dict[str, Any]) -> S:
        """Its fields' values in D (as to_dict wrote them); keys it does not have are left out."""
        return from_fields(cls, d)


@dataclass
class LabSettings(TargetSettings):
    """How the local target rehearses a cloud (a ctk/target/local module's settings)."""

    # Mean seconds between random preemptions of the lab's powered-up Spot nodes (exponential
    # intervals); 0: none. `ctk deploy --chaos` overrides it.
    chaos_interval: float = 0.0
    chaos_seed: int | None = None  # the preemptions' random seed; None: a new one each deploy
    # Seconds between a preemption's notice and the SIGTERM of the node's processes (Google
    # Cloud gives Spot VMs 30 s).
    preemption_notice: float = 30.0
    # Seconds a flex-start (dws_flex) nodeset's resumed nodes wait for their capacity.
    flex_start_delay: float = 30.0
    # Seconds a flex-start node runs on the lab before its capacity is taken back; None: the
    # nodeset's max_run_duration (at least 600 s, as Cluster Toolkit requires).
    flex_run_duration: float | None = None
    # Seconds a powered-up node takes to boot before its daemons start (a cloud VM takes about a
    # minute): a rehearsal of ResumeTimeout, and the time `ctk status` shows it powering up.
    boot_delay: float = 0.0
    # The lab's ordinary user account, the same on every node, owning /home/USER: `ctk job` and
    # `ctk env`'s commands run as it unless told otherwise (root stays for admins).
    user: str = "researcher"
    user_uid: int = 1_900_000


# The numbers of every account of the lab that is not root: uids and gids that no host account
# uses (Debian gives out 100-999 to system accounts and 1000-59999 to people; subordinate ranges
# start at 100000 in steps of 65536 and rarely reach this far), below 2097151, the largest uid a
# ustar header holds. The lab's user takes the first by default; an image's service accounts
# (munge, slurm, mysql, sshd, ...) are renumbered into SERVICE_IDS as each layer is built.
LAB_IDS = range(1_900_000, 1_901_000)
SERVICE_IDS = range(1_900_100, 1_901_000)


@dataclass
class SshSettings(TargetSettings):
    """Where the ssh target deploys: the machines a ctk/target/ssh module lists."""

    hosts: list[SshHost] = field(default_factory=list)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SshSettings:
        return SshSettings([SshHost(**x) for x in d.get("hosts", [])])


@dataclass
class GcpSettings(TargetSettings):
    """Where the gcp target deploys (a ctk/target/gcp module's settings); None: not given, so
    the blueprint's vars or gcluster's --vars give it."""

    project_id: str | None = None
    region: str | None = None
    zone: str | None = None
    image_machine_type: str | None = None  # the VMs that build the images
    image_disk_size: int | float | None = None  # GB


def _settings_from_dict(target: str, d: dict[str, Any]) -> TargetSettings:
    """A deployment.json's target settings: its `settings`, or the fields an earlier ctk kept
    them in (lab, ssh_hosts, gcp)."""
    kind = resolve(settings_type(target))
    # Each type takes its own fields from the old ones.
    raw = d["settings"] if "settings" in d else {**d.get("lab", {}), **d.get("gcp", {}), "hosts": d.get("ssh_hosts", [])}
    settings = kind.from_dict(raw)
    assert isinstance(settings, TargetSettings), settings
    return settings


@dataclass
class Deployment:
    deployment_name: str
    blueprint_name: str
    slurm_cluster_name: str
    target: str = "local"  # local | ssh | gcp (a ctk/target/ssh or ctk/target/gcp module is present)
    images: list[ImageSpec] = field(default_factory=list)
    containers: list[ImageSpec] = field(default_factory=list)  # container images (ctk/container-image)
    nodesets: list[Nodeset] = field(default_factory=list)
    partitions: list[Partition] = field(default_factory=list)
    controller: Controller | None = None
    logins: list[Login] = field(default_factory=list)
    shared_fs: list[SharedFs] = field(default_factory=list)
    unsupported: list[Unsupported] = field(default_factory=list)
    # Its target's own settings (its target module's): one type per target, named in
    # ctk.target_registry; a target's code asks for them with settings_of.
    settings: TargetSettings = field(default_factory=lambda: LabSettings())

    @property
    def traits(self) -> Traits:
        """What its target does with it (ctk.target_registry): what every layer asks, never
        the target's name."""
        return traits(self.target)

    def settings_of(self, kind: type[S]) -> S:
        """Its target's settings, which a target's own code knows to be a KIND."""
        if not isinstance(self.settings, kind):
            raise TypeError(f"deployment {self.deployment_name} is on the {self.target} target, whose "
                            f"settings are {type(self.settings).__name__}, not {kind.__name__}")
        return self.settings

    def nodeset(self, name: str) -> Nodeset:
        for ns in self.nodesets:
            if ns.name == name:
                return ns
        raise KeyError(name)

    def image_of(self, ns: Nodeset) -> ImageSpec | None:
        """The image a nodeset's nodes boot: the one it names, else the deployment's only one."""
        return self.image_named(ns.image)

    def image_named(self, name: str | None) -> ImageSpec | None:
        """The image of that name; for None (a node that names none), the deployment's only one."""
        if name:
            return next((img for img in self.images if img.name == name), None)
        return self.images[0] if len(self.images) == 1 else None

    def node_images(self) -> list[ImageSpec]:
        """The images the controller, compute and login nodes boot, in declaration order (a node
        that names none boots the deployment's only image)."""
        used = {self.controller.image if self.controller else None, *(ns.image for ns in self.nodesets),
                *(lg.image for lg in self.logins)}
        return [img for img in self.images if img.name in used or (len(self.images) == 1 and None in used)]

    def slurm(self) -> tuple[int, int] | None:
        """The Slurm release of the nodes' images (one per cluster: the plan checks it); None
        where no node boots an image of ctk's (slurm-gcp's bring their own)."""
        releases = [img.slurm for img in self.node_images()
                    if img.source == "ctk/image" and "slurm" in img.roles and img.slurm is not None]
        return min(releases) if releases else None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Deployment:
        d = dict(d)
        # Fields an older ctk wrote and this one no longer has (an image's `cloud`) are dropped.
        d["images"] = [from_fields(ImageSpec, x) for x in d.get("images", [])]
        d["containers"] = [from_fields(ImageSpec, x) for x in d.get("containers", [])]
        d["nodesets"] = [Nodeset(**x) for x in d.get("nodesets", [])]
        d["partitions"] = [Partition(**x) for x in d.get("partitions", [])]
        d["controller"] = Controller(**d["controller"]) if d.get("controller") else None
        d["logins"] = [Login(**x) for x in d.get("logins", [])]
        d["shared_fs"] = [SharedFs(**x) for x in d.get("shared_fs", [])]
        d["unsupported"] = [Unsupported(**x) for x in d.get("unsupported", [])]
        d["settings"] = _settings_from_dict(d.get("target", "local"), d)
        for old in ("lab", "ssh_hosts", "gcp"):  # where an earlier ctk kept them, side by side
            d.pop(old, None)
        return cls(**d)
