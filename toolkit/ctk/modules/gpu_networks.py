"""The GPU networks of Google Cloud's GPU machines, as Cluster Toolkit's machine-learning examples
build them for Slurm: what the gcp target's hand-off adds for a nodeset of each machine type.

Facts from Cluster Toolkit's examples/machine-learning (v1.95; the A3 Mega and A3 Ultra
blueprints are in ../shared/fixtures/cluster-toolkit and tests/unit/test_gpu_networks.py holds
this table against them):

- A3 High (a3-highgpu-8g), GPUDirect-TCPX: 4 GPU networks from
  one `modules/network/multivpc` (10.0.0.0/9 split into /20 subnetworks), the primary network at
  MTU 8244 on 172.16.0.0/16 (clear of the GPU networks' range), and slurm-gcp's
  receive-datapath manager (RxDM) as the partition's prolog and epilog
  (`receive-data-path-manager`, linked as start-rxdm / stop-rxdm).
- A3 Mega (a3-megagpu-8g), GPUDirect-TCPXO: the same with 8 GPU networks and the Mega's RxDM
  (`receive-data-path-manager-mega`, linked as rxdm), which also puts the TCPXO NCCL plugin in
  /var/lib/tcpxo/lib64; slurmd waits for the NICs' aperture devices (/dev/aperture_devices).
- A3 Ultra (a3-ultragpu-8g) and A4 (a4-highgpu-8g), RDMA over RoCE: a second gVNIC network
  ("net-1", MTU 8896, 192.168.64.0/18) and one `modules/network/gpu-rdma-vpc` on the zone's
  `-vpc-roce` network profile with 8 subnetworks (192.168.128.0/18), as the nodeset's
  additional_networks; the primary network at MTU 8896; Google's gIB NCCL plugin (apt package
  nccl-gib, 1.1.0) with /usr/local/gib/scripts/set_nccl_env.sh sourced by every login shell.
- A4X (a4x-highgpu-4g): as A3 Ultra with 4 RDMA subnetworks and net-1 on 192.168.64.0/19 (its
  CPUs are Arm: the gcp target refuses it for the x86-64 images ctk builds; the entry serves
  Cluster Toolkit's own nodesets).
- RxDM runs in Docker containers (with NVIDIA's container toolkit) on the node; TCPXO's also
  needs the dmabuf-import-helper kernel module, TCPX's the NIC topology file
  /opt/tcpdirect_benchmark/gpu_rxq_configuration.textproto. The examples' images carry them;
  ctk's do not yet, so ctk stages RxDM behind a check that lets a job run without it (and says
  why in the node's log) where they are missing.
- a3-edgegpu-8g is not wired: slurm-gcp's RxDM runs on a3-highgpu-8g only.
- A4X Max (a4x-maxgpu-4g-metal) is not wired: its example lists 8 MRDMA NICs by hand on an
  IPv6-only `-vpc-roce-metal` profile and changes the primary network (IPv6 ULA, MTU 4096), and
  its plugin comes from a container; ctk says so and its jobs use the primary network.
"""

from __future__ import annotations

from dataclasses import dataclass

MULTIVPC = "modules/network/multivpc"
RDMA_VPC = "modules/network/gpu-rdma-vpc"

# The ranges the examples give (their vars sys_net_range, net1_range, rdma_net_range).
GPUNETS_RANGE = "10.0.0.0/9"
GPUNETS_CIDR_SUFFIX = 20
PRIMARY_RANGE_WITH_GPUNETS = "172.16.0.0/16"
RDMA_RANGE = "192.168.128.0/18"

# slurm-gcp's prolog/epilog scripts, which Cluster Toolkit's examples fetch from its master branch:
# ctk fetches them from one commit of it (2026-08-06) and checks each file's SHA-256.
SLURM_GCP_COMMIT = "13fd92b615c030b9ba62e4a87d610bcc7af72b75"
PROLOG_PATH = "tools/prologs-epilogs/"
PROLOG_URL = f"https://raw.githubusercontent.com/GoogleCloudPlatform/slurm-gcp/{SLURM_GCP_COMMIT}/{PROLOG_PATH}"
PROLOG_SHA256 = {
    "receive-data-path-manager": "3dcfa18302fbdd25b180bdb8e14c6d962263a4faf8da124734510de62fae7bc0",
    "receive-data-path-manager-mega": "62025cc0df67d942a9d723f11a3efada4d419ffcda0d04e7788790f72199864b",
}
# What RxDM needs on the node beyond Docker: transport -> [(shell test, what it is)].
RXDM_NEEDS: dict[str, tuple[tuple[str, str], ...]] = {
    "gpudirect-tcpx": (("test -f /opt/tcpdirect_benchmark/gpu_rxq_configuration.textproto",
                        "the NIC topology file /opt/tcpdirect_benchmark/gpu_rxq_configuration.textproto"),),
    "gpudirect-tcpxo": (("modinfo import-helper", "the dmabuf-import-helper kernel module"),
                        ("test -d /dev/aperture_devices", "the NICs' aperture devices (/dev/aperture_devices, a udev rule)")),
}
# What RxDM needs on every node: its containers run with `docker run --gpus`.
RXDM_NEEDS_ALL = (("command -v docker", "Docker"),
                  ("command -v nvidia-container-cli", "NVIDIA's container toolkit (nvidia-container-cli)"))
# The external prolog/epilog folder slurm-gcp's controller shares with the nodes.
SLURM_ADM = "/opt/apps/adm/slurm"
# The controller's slurm.conf template that gives prologs the time RxDM's start takes.
LONG_PROLOG_TPL = ("../_modules/embedded/community/modules/scheduler/schedmd-slurm-gcp-v6-controller/etc/"
                   "long-prolog-slurm.conf.tpl")
NCCL_GIB_VERSION = "1.1.0"
# The ids of the modules the hand-off adds for them (the first three take a suffix where a
# deployment has two sets): a blueprint's own module may not take one.
MODULE_IDS = ("ctk_gpunets", "ctk_gpu_net1", "ctk_gpu_rdma", "ctk_rdma_startup", "ctk_controller_startup")


def reserved_id(module_id: str) -> bool:
    """Whether MODULE_ID is, or may be, one the hand-off gives a module of its own."""
    return module_id in MODULE_IDS or module_id.startswith(tuple(f"{i}_" for i in MODULE_IDS[:3]))


@dataclass(frozen=True)
class GpuNetwork:
    """What a GPU machine's nodes need on Google Cloud for their GPU network."""

    transport: str  # gpudirect-tcpx | gpudirect-tcpxo | rdma (the jobs' `network`)
    gpu_nics: int  # GPU networks (multivpc network_count) or RDMA subnetworks
    primary_mtu: int  # MTU of the primary network
    rxdm: str = ""  # slurm-gcp's RxDM script (TCPX, TCPXO)
    rxdm_links: tuple[str, str] = ("", "")  # its prolog and epilog names in the partition's folders
    second_nic_range: str = ""  # RDMA: the second gVNIC network's subnetwork

    @property
    def multivpc(self) -> bool:
        return self.transport in ("gpudirect-tcpx", "gpudirect-tcpxo")


_TCPX = GpuNetwork("gpudirect-tcpx", 4, 8244, "receive-data-path-manager", ("start-rxdm", "stop-rxdm"))
_RDMA8 = GpuNetwork("rdma", 8, 8896, second_nic_range="192.168.64.0/18")

BY_MACHINE: dict[str, GpuNetwork] = {
    "a3-highgpu-8g": _TCPX,
    "a3-megagpu-8g": GpuNetwork("gpudirect-tcpxo", 8, 8244, "receive-data-path-manager-mega", ("rxdm", "rxdm")),
    "a3-ultragpu-8g": _RDMA8,
    "a4-highgpu-8g": _RDMA8,
    "a4x-highgpu-4g": GpuNetwork("rdma", 4, 8896, second_nic_range="192.168.64.0/19"),
}

# Machines with a GPU network ctk does not build: machine type -> why, for the warning.
NOT_WIRED: dict[str, str] = {
    "a3-edgegpu-8g": "slurm-gcp's receive-datapath manager runs on a3-highgpu-8g only",
    "a4x-maxgpu-4g-metal": "its 8 MRDMA NICs sit on an IPv6-only -vpc-roce-metal network profile that ctk does "
                           "not build yet",
}


def of_machine(machine_type: str) -> GpuNetwork | None:
    """The GPU network Cluster Toolkit's examples give MACHINE_TYPE's nodes; None: none (or none
    ctk builds)."""
    return BY_MACHINE.get(machine_type.strip().lower())


def built_for(machine_type: str, network: str) -> GpuNetwork | None:
    """The GPU network a nodeset of MACHINE_TYPE gets built when its jobs' NETWORK (as planned) is
    its machine's own; None when it gets none (tcp, opted out, or a machine ctk does not wire)."""
    g = of_machine(machine_type)
    return g if g is not None and network == g.transport else None
