"""The GPU networks of Google Cloud's GPU machines, as Cluster Toolkit's machine-learning examples
build them for Slurm: what the gcp target's hand-off adds for a nodeset of each machine type.

Facts from Cluster Toolkit's examples/machine-learning (v1.95; the A3 Mega and A3 Ultra
blueprints are in ../shared/fixtures/cluster-toolkit and tests/unit/test_gpu_networks.py holds
this table against them):

- A3 High (a3-highgpu-8g; a3-edgegpu-8g has the same NICs), GPUDirect-TCPX: 4 GPU networks from
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
- A4X (a4x-highgpu-4g): as A3 Ultra with 4 RDMA subnetworks and net-1 on 192.168.64.0/19.
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

# slurm-gcp's prolog/epilog scripts, fetched as Cluster Toolkit's examples fetch them.
PROLOG_URL = "https://raw.githubusercontent.com/GoogleCloudPlatform/slurm-gcp/master/tools/prologs-epilogs/"
# The external prolog/epilog folder slurm-gcp's controller shares with the nodes.
SLURM_ADM = "/opt/apps/adm/slurm"
# The controller's slurm.conf template that gives prologs the time RxDM's start takes.
LONG_PROLOG_TPL = ("../_modules/embedded/community/modules/scheduler/schedmd-slurm-gcp-v6-controller/etc/"
                   "long-prolog-slurm.conf.tpl")
NCCL_GIB_VERSION = "1.1.0"


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
    "a3-edgegpu-8g": _TCPX,
    "a3-megagpu-8g": GpuNetwork("gpudirect-tcpxo", 8, 8244, "receive-data-path-manager-mega", ("rxdm", "rxdm")),
    "a3-ultragpu-8g": _RDMA8,
    "a4-highgpu-8g": _RDMA8,
    "a4x-highgpu-4g": GpuNetwork("rdma", 4, 8896, second_nic_range="192.168.64.0/19"),
}

# Machines with a GPU network ctk does not build: machine type -> why, for the warning.
NOT_WIRED: dict[str, str] = {
    "a4x-maxgpu-4g-metal": "its 8 MRDMA NICs sit on an IPv6-only -vpc-roce-metal network profile that ctk does "
                           "not build yet",
}


def of_machine(machine_type: str) -> GpuNetwork | None:
    """The GPU network Cluster Toolkit's examples give MACHINE_TYPE's nodes; None: none (or none
    ctk builds)."""
    return BY_MACHINE.get(machine_type.strip().lower())
