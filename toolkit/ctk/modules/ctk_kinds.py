"""ctk's own module kinds: a small, closed vocabulary mapped one-to-one onto the model.

Sources start with `ctk/`. Every input is declared; an unknown setting is an error.
"""

from __future__ import annotations

import dataclasses

from ..model import BASES, CONTAINER_ROLES, DEFAULT_BASE
from ..target_registry import target_kinds
from . import cluster_toolkit
from .schema import Input, ModuleKind, Output

IMAGE_BASES = tuple(BASES)


def _in(name, type_="any", default=None, doc="", required=False) -> Input:
    return Input(name=name, type=type_, default=default, doc=doc, required=required)


IMAGE = ModuleKind(
    source="ctk/image",
    role="image",
    doc="A node image: a base OS, Ansible roles applied in order, and one software stack.",
    inputs=(
        _in("name", "string", None, "Image name; nodesets, controller and login refer to it.", required=True),
        _in("base", "string", DEFAULT_BASE, "Base OS: " + ", ".join(IMAGE_BASES) + "."),
        _in("roles", "list(string)", ["common", "munge", "slurm", "jax"], "Ansible roles, applied in this order."),
        _in("stack", "string", None, "Software stack from images/stacks.yaml (ctk stack list); it must be "
            "locked for the base's Python. null: the newest CPU stack for the base's Python."),
        _in("extra_playbooks", "list(string)", [], "Refused for now: no image build of ctk's runs them yet."),
        _in("transformer_engine", "string", None, "Transformer Engine release (e.g. \"2.20.2\") built into the "
            "JAX venv of a CUDA stack, against the cuda role's toolkit; null: none."),
        _in("pyxis", "object", None, "With the pyxis role, where the nodes lack NVIDIA's enroot or pyxis: the "
            "files to install, each {url, sha256}: {enroot_packages: [the enroot and enroot+caps .debs], source: "
            "pyxis's release tarball}; null: the nodes have them (slurm-gcp's images)."),
        _in("slurm_release", "string", None, "The image's Slurm release when not its base's own: \"26.05\" on "
            "debian-13 (Debian forky's packages, pinned to Slurm's own); null: the base's (debian-13: 24.11)."),
    ),
    outputs=(Output("image", "The image name, for an `image` input."),),
)

CONTAINER_IMAGE = ModuleKind(
    source="ctk/container-image",
    role="container-image",
    doc="A container image of a stack: a base OS and Ansible roles (the JAX venv of the stack), built and "
        "cached layer by layer like the node images. Jobs run in it with Slurm's own containers "
        "(srun --container, the container template); ctk image export --format oci writes it.",
    inputs=(
        _in("name", "string", None, "Image name; the container template's image setting names it.", required=True),
        _in("base", "string", DEFAULT_BASE, "Base OS: " + ", ".join(IMAGE_BASES) + "."),
        _in("roles", "list(string)", list(CONTAINER_ROLES), "Ansible roles, applied in this order."),
        _in("stack", "string", None, "Software stack from images/stacks.yaml (ctk stack list); it must be "
            "locked for the base's Python. null: the newest CPU stack for the base's Python."),
        _in("slurm_release", "string", None, "With the slurm role: the Slurm release of its client commands "
            "when not the base's own, as the nodes' ctk/image has it (\"26.05\" on debian-13); null: the base's."),
    ),
    outputs=(Output("image", "The image name."),),
)

def _from_ct_nodeset(name: str, doc: str) -> Input:
    """Input NAME of Cluster Toolkit's nodeset (its type and default), with ctk's DOC."""
    inp = cluster_toolkit.NODESET.input(name)
    assert inp is not None, name
    return dataclasses.replace(inp, doc=doc)


NODESET = ModuleKind(
    source="ctk/slurm/nodeset",
    role="nodeset",
    doc="A group of identical compute nodes (a Slurm NodeName line).",
    inputs=(
        _in("name", "string", None, "Nodeset name; null: the module id without underscores."),
        _in("machine_type", "string", "n2-standard-2", "GCE machine type; sets CPUs, memory and GPUs."),
        _in("node_count_static", "number", 0, "Nodes always up."),
        _in("node_count_dynamic_max", "number", 0, "Most nodes powered up on demand."),
        _in("features", "list(string)", [], "Slurm node features."),
        _in("node_conf", "map(any)", {}, "Extra NodeName parameters."),
        _in("image", "string", None, "Image the nodes boot (a ctk/image name)."),
        _in("tpu_type", "string", None, "TPU slice type (v4-8, v5p-8, v5litepod-8, v6e-8): the nodes are TPU VMs, "
            "one per host of the slice; null: machine_type's VMs."),
        _in("gpu_network", "string", None,
            "GPU network transport (tcp, gpudirect-tcpx, gpudirect-tcpxo, rdma); null: from the machine type."),
        _in("enable_spot_vm", "bool", False, "Spot VMs: cheaper, and taken back at 30 s notice (preempted)."),
        _from_ct_nodeset("enable_placement", "On Google Cloud: create the nodes under a compact placement policy "
                         "(Cluster Toolkit's default, true); false where a reservation places them. The lab ignores it."),
        _from_ct_nodeset("placement_max_distance", "On Google Cloud: the largest distance (1, 2 or 3; A3 machines "
                         "2 or 3) the placement policy allows; null: Compute Engine's choice. Needs enable_placement."),
        _from_ct_nodeset("reservation_name", "On Google Cloud: the SPECIFIC reservation the nodes consume (NAME, or "
                         "projects/P/reservations/NAME, optionally /reservationBlocks/B); \"\": none. Not with "
                         "dws_flex. The lab ignores it."),
        _in("dws_flex", "object", {"enabled": False},
            "Flex-start capacity (Dynamic Workload Scheduler), as Cluster Toolkit's nodeset: {enabled (default "
            "true when given), max_run_duration (seconds a node may run, 600-604800; default 604800), "
            "use_job_duration, use_bulk_insert}. Not with enable_spot_vm."),
    ),
    outputs=(Output("nodeset", "The nodeset, for a partition's nodeset input."),),
)

def _as_cluster_toolkit(name: str, doc: str = "") -> Input:
    """Input NAME of Cluster Toolkit's partition, which ctk's means the same (its type and
    default declared once, there); DOC: what ctk says of it instead."""
    inp = cluster_toolkit.PARTITION.input(name)
    assert inp is not None, name
    return dataclasses.replace(inp, doc=doc) if doc else inp


PARTITION = ModuleKind(
    source="ctk/slurm/partition",
    role="partition",
    doc="A Slurm partition over one or more nodesets.",
    inputs=(
        _in("partition_name", "string", None, "Partition name.", required=True),
        _as_cluster_toolkit("nodeset", "Nodesets in the partition (via use)."),
        _as_cluster_toolkit("is_default", "Default partition for jobs that name none."),
        _as_cluster_toolkit("exclusive", "Whole nodes per job."),
        _in("max_time", "string", None, "MaxTime, e.g. 'UNLIMITED' or '2-00:00:00'."),
        _in("oversubscribe", "string", None, "OverSubscribe, e.g. 'NO', 'YES:4'."),
        _in("partition_conf", "map(any)", {}, "Extra PartitionName parameters."),
        _as_cluster_toolkit("suspend_time",
                            "Idle seconds before a dynamic node is powered down (SuspendTime; -1: never)."),
        _as_cluster_toolkit("resume_timeout",
                            "Seconds a resumed node may take to register before Slurm marks it DOWN (ResumeTimeout, "
                            "1-65535); null: the controller's cloud_parameters (on the gcp target, Cluster Toolkit's "
                            "300)."),
        _as_cluster_toolkit("suspend_timeout",
                            "Seconds a suspended node may take to power down (SuspendTimeout, 1-65535); null: the "
                            "controller's cloud_parameters (on the gcp target, Cluster Toolkit's 120)."),
    ),
    outputs=(Output("partitions", "The partition, for the controller's partitions input."),),
)

CONTROLLER = ModuleKind(
    source="ctk/slurm/controller",
    role="controller",
    doc="The Slurm controller (slurmctld).",
    inputs=(
        _in("machine_type", "string", "c2-standard-4", "Machine type of the controller."),
        _in("partitions", "list(object)", [], "Partitions (via use)."),
        _in("login_nodes", "list(object)", [], "Login groups (via use)."),
        _in("image", "string", None, "Image the controller boots."),
        _in("slurm_conf", "map(any)", {}, "Extra slurm.conf parameters."),
        _in("network_storage", "list(object)", [], "Shared file systems (via use)."),
        _in("enable_slurm_auth", "bool", False,
            "Authenticate with Slurm's own auth/slurm (a slurm.key, Slurm >= 23.11) instead of munge."),
        _in("enable_backup_controller", "bool", False,
            "A second slurmctld on a node of its own, sharing the first's saved state (Cluster Toolkit's setting): it "
            "takes over within SlurmctldTimeout when the first stops answering, and hands back when it returns."),
        _in("accounting", "bool", True,
            "Keep Slurm's accounting: slurmdbd with a MariaDB database on the controller, so sacct and "
            "sreport work. false: none (finished jobs are then known from a job completion log)."),
        _in("cloud_parameters", "object", {},
            "Power saving, as Cluster Toolkit's controller: {resume_timeout (default 300), suspend_timeout "
            "(300), resume_rate, suspend_rate (nodes per minute; 0, the default: no limit)}."),
    ),
    outputs=(),
)

LOGIN = ModuleKind(
    source="ctk/slurm/login",
    role="login",
    doc="A group of login nodes.",
    inputs=(
        _in("name_prefix", "string", "login", "Hostname prefix of the group."),
        _in("machine_type", "string", "n2-standard-2", "Machine type of the login nodes."),
        _in("num_instances", "number", 1, "Login nodes in the group."),
        _in("image", "string", None, "Image the login nodes boot."),
    ),
    outputs=(Output("login_nodes", "The group, for the controller's login_nodes input."),),
)

SHARED_FS = ModuleKind(
    source="ctk/storage/shared-fs",
    role="shared-fs",
    doc="A file system shared by all nodes.",
    inputs=(
        _in("local_mount", "string", None, "Mount point on the nodes.", required=True),
        _in("remote_mount", "string", "", "Export path on the server."),
        _in("fs_type", "string", "nfs", "File system type."),
    ),
    outputs=(Output("network_storage", "The mount, for network_storage inputs."),),
)

# The keys of the object settings ctk's kinds read (as Cluster Toolkit's modules name them).
DWS_FLEX_KEYS = {"enabled": "bool", "max_run_duration": "number", "use_job_duration": "bool",
                 "use_bulk_insert": "bool"}
CLOUD_PARAMETERS_KEYS = {"resume_timeout": "number", "suspend_timeout": "number", "resume_rate": "number",
                         "suspend_rate": "number"}

# ctk's kinds, the targets' own (one module each, named in ctk.target_registry) among them.
KINDS: dict[str, ModuleKind] = {k.source: k for k in (IMAGE, CONTAINER_IMAGE, NODESET, PARTITION, CONTROLLER, LOGIN, SHARED_FS,
                                                      *target_kinds())}
