"""Google Cloud machine types and TPU slice types, as figures ctk can plan with.

A `MachineType` gives what a Slurm NodeName line needs: vCPUs, memory in MB
(published GB x 1024, rounded), and the GPUs it carries as a gres type. GPU gres
type names are short and lowercase:

    t4, p4, p100, v100    older cards attachable to N1 VMs
    a100                  A100 40GB (a2-highgpu-*, a2-megagpu-16g)
    a100-80gb             A100 80GB (a2-ultragpu-*)
    h100                  H100 80GB (a3-highgpu-*, and a3-megagpu-8g's "Mega" variant)
    h200                  H200 141GB (a3-ultragpu-8g)
    b200                  B200 (a4-highgpu-8g, and a4x-highgpu-4g's GB200 superchip)
    b300                  B300 (a4x-maxgpu-4g-metal's GB300 superchip)
    l4                    L4 24GB (g2-standard-*, g2-custom-*)
    rtxpro6000            RTX PRO 6000 Blackwell Server Edition 96GB (g4-standard-*; the three
                          smallest carry a vGPU slice of one: 1/8, 1/4, 1/2, one device to Slurm)

`network` names the NCCL transport family of the machine's GPU network:
"tcp" (plain sockets), "gpudirect-tcpx" (a3-highgpu-8g, a3-edgegpu-8g), "gpudirect-tcpxo"
(a3-megagpu-8g), "rdma" (RoCE: a3-ultragpu-8g, a4-highgpu-8g, a4x-highgpu-4g, a4x-maxgpu-4g-metal).

Figures are those Compute Engine publishes for each machine series (the machine family
pages: general-purpose, compute- and HPC-optimized, GPU machine types); memory in GB as
those pages give it (C4's 7 GB for c4-standard-2 is 3.75 GB x 2, rounded down).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# The NCCL transports of the GPU networks (a MachineType's `network`; the jobs' `network`).
NETWORKS = ("tcp", "gpudirect-tcpx", "gpudirect-tcpxo", "rdma")


@dataclass(frozen=True)
class MachineType:
    name: str
    cpus: int
    memory_mb: int
    gpu_type: str | None = None  # Slurm gres type, see the module doc
    gpu_count: int = 0
    gpu_model: str = ""  # human name, e.g. "NVIDIA H100 80GB (Mega)"
    network: str = "tcp"  # tcp | gpudirect-tcpx | gpudirect-tcpxo | rdma

    @property
    def memory_gb(self) -> float:
        return self.memory_mb / 1024


def _mb(gb: float) -> int:
    return int(round(gb * 1024))


# NVIDIA's GPU architecture of each gres type: the drivers and kernel modules a GPU runs on
# follow from it (ctk.stacks.drivers.GENERATION_NEEDS). Every gres type below has one.
GENERATIONS: dict[str, str] = {
    "t4": "Turing", "p4": "Pascal", "p100": "Pascal", "v100": "Volta", "a100": "Ampere", "a100-80gb": "Ampere",
    "h100": "Hopper", "h200": "Hopper", "b200": "Blackwell", "b300": "Blackwell", "l4": "Ada Lovelace",
    "rtxpro6000": "Blackwell",
}

# GCE accelerator type name -> (gres type, human name). CT's `guest_accelerator`
# and custom-image's `accelerator_type` use the GCE names.
ACCELERATORS: dict[str, tuple[str, str]] = {
    "nvidia-tesla-t4": ("t4", "NVIDIA T4 16GB"),
    "nvidia-tesla-p4": ("p4", "NVIDIA P4 8GB"),
    "nvidia-tesla-p100": ("p100", "NVIDIA P100 16GB"),
    "nvidia-tesla-v100": ("v100", "NVIDIA V100 16GB"),
    "nvidia-tesla-a100": ("a100", "NVIDIA A100 40GB"),
    "nvidia-a100-80gb": ("a100-80gb", "NVIDIA A100 80GB"),
    "nvidia-h100-80gb": ("h100", "NVIDIA H100 80GB"),
    "nvidia-h100-mega-80gb": ("h100", "NVIDIA H100 80GB (Mega)"),
    "nvidia-h200-141gb": ("h200", "NVIDIA H200 141GB"),
    "nvidia-b200": ("b200", "NVIDIA B200 180GB"),
    "nvidia-gb200": ("b200", "NVIDIA GB200 (B200 GPU)"),
    "nvidia-gb300": ("b300", "NVIDIA GB300 (B300 GPU)"),
    "nvidia-l4": ("l4", "NVIDIA L4 24GB"),
    "nvidia-rtx-pro-6000": ("rtxpro6000", "NVIDIA RTX PRO 6000 Blackwell 96GB"),
}


def gpu_generation(gres: str) -> str | None:
    """NVIDIA's architecture of a gres type ("h100" -> "Hopper"); None for a type ctk does not know."""
    return GENERATIONS.get(gres)


def accelerator_gpu(gce_name: str) -> tuple[str, str] | None:
    """(gres type, human name) for a GCE accelerator type, e.g. 'nvidia-l4' -> ('l4', ...)."""
    return ACCELERATORS.get(gce_name.strip().lower())


def _gpu(name, cpus, mem_gb, accel, count, network="tcp", share="") -> MachineType:
    gres, human = ACCELERATORS[accel]
    return MachineType(name, cpus, _mb(mem_gb), gres, count, f"{human} ({share} vGPU)" if share else human,
                       network)


# Accelerator-optimized machine types have fixed shapes: list them all.
_GPU_MACHINES: dict[str, MachineType] = {m.name: m for m in (
    # A2 Standard: A100 40GB, 12 vCPU and 85 GB per GPU
    _gpu("a2-highgpu-1g", 12, 85, "nvidia-tesla-a100", 1),
    _gpu("a2-highgpu-2g", 24, 170, "nvidia-tesla-a100", 2),
    _gpu("a2-highgpu-4g", 48, 340, "nvidia-tesla-a100", 4),
    _gpu("a2-highgpu-8g", 96, 680, "nvidia-tesla-a100", 8),
    _gpu("a2-megagpu-16g", 96, 1360, "nvidia-tesla-a100", 16),
    # A2 Ultra: A100 80GB, 12 vCPU and 170 GB per GPU
    _gpu("a2-ultragpu-1g", 12, 170, "nvidia-a100-80gb", 1),
    _gpu("a2-ultragpu-2g", 24, 340, "nvidia-a100-80gb", 2),
    _gpu("a2-ultragpu-4g", 48, 680, "nvidia-a100-80gb", 4),
    _gpu("a2-ultragpu-8g", 96, 1360, "nvidia-a100-80gb", 8),
    # A3 High: H100 80GB, 26 vCPU and 234 GB per GPU; only the 8-GPU shape has GPUDirect-TCPX
    _gpu("a3-highgpu-1g", 26, 234, "nvidia-h100-80gb", 1),
    _gpu("a3-highgpu-2g", 52, 468, "nvidia-h100-80gb", 2),
    _gpu("a3-highgpu-4g", 104, 936, "nvidia-h100-80gb", 4),
    _gpu("a3-highgpu-8g", 208, 1872, "nvidia-h100-80gb", 8, "gpudirect-tcpx"),
    _gpu("a3-edgegpu-8g", 208, 1872, "nvidia-h100-80gb", 8, "gpudirect-tcpx"),
    _gpu("a3-megagpu-8g", 208, 1872, "nvidia-h100-mega-80gb", 8, "gpudirect-tcpxo"),
    _gpu("a3-ultragpu-8g", 224, 2952, "nvidia-h200-141gb", 8, "rdma"),
    _gpu("a4-highgpu-8g", 224, 3968, "nvidia-b200", 8, "rdma"),
    # A4X: two Grace CPUs (Arm) and four Blackwell GPUs per machine; A4X Max is bare metal
    _gpu("a4x-highgpu-4g", 140, 884, "nvidia-gb200", 4, "rdma"),
    _gpu("a4x-maxgpu-4g-metal", 144, 960, "nvidia-gb300", 4, "rdma"),
    # G4: RTX PRO 6000, 7.5 GB per vCPU (rounded down); the three smallest share one GPU
    _gpu("g4-standard-6", 6, 22, "nvidia-rtx-pro-6000", 1, share="1/8"),
    _gpu("g4-standard-12", 12, 45, "nvidia-rtx-pro-6000", 1, share="1/4"),
    _gpu("g4-standard-24", 24, 90, "nvidia-rtx-pro-6000", 1, share="1/2"),
    _gpu("g4-standard-48", 48, 180, "nvidia-rtx-pro-6000", 1),
    _gpu("g4-standard-96", 96, 360, "nvidia-rtx-pro-6000", 2),
    _gpu("g4-standard-192", 192, 720, "nvidia-rtx-pro-6000", 4),
    _gpu("g4-standard-384", 384, 1440, "nvidia-rtx-pro-6000", 8),
    # G2: L4, the GPU count is not proportional to the size
    _gpu("g2-standard-4", 4, 16, "nvidia-l4", 1),
    _gpu("g2-standard-8", 8, 32, "nvidia-l4", 1),
    _gpu("g2-standard-12", 12, 48, "nvidia-l4", 1),
    _gpu("g2-standard-16", 16, 64, "nvidia-l4", 1),
    _gpu("g2-standard-24", 24, 96, "nvidia-l4", 2),
    _gpu("g2-standard-32", 32, 128, "nvidia-l4", 1),
    _gpu("g2-standard-48", 48, 192, "nvidia-l4", 4),
    _gpu("g2-standard-96", 96, 384, "nvidia-l4", 8),
)}

# G2 custom shapes (g2-custom-CPUS-MB): the vCPUs of a g2-standard type, with memory in that
# type's custom range (GB); the GPUs are those of the standard type.
_G2_CUSTOM_GB: dict[int, tuple[int, int]] = {
    4: (16, 32), 8: (32, 54), 12: (48, 54), 16: (54, 64), 24: (96, 108), 32: (96, 128),
    48: (192, 216), 96: (384, 432),
}

# Fixed one-off shapes.
_FIXED: dict[str, tuple[int, float]] = {
    "h3-standard-88": (88, 352),
    # H4D: one thread per core (SMT off), so 192 vCPUs are 192 cores
    "h4d-standard-192": (192, 720),
    "h4d-highmem-192": (192, 1488),
    "h4d-highmem-192-lssd": (192, 1488),
    "e2-micro": (2, 1),  # shared-core: 2 vCPUs time-sliced
    "e2-small": (2, 2),
    "e2-medium": (2, 4),
    # bare metal
    "c3-standard-192-metal": (192, 768),
    "c3-highcpu-192-metal": (192, 512),
    "c3-highmem-192-metal": (192, 1536),
    "c4-standard-288-metal": (288, 1080),
    "c4-standard-288-lssd-metal": (288, 1080),
    "c4-highmem-288-metal": (288, 2232),
    "c4-highmem-288-lssd-metal": (288, 2232),
    "c4d-standard-384-metal": (384, 1536),
    "c4d-highcpu-384-metal": (384, 768),
    "c4d-highmem-384-metal": (384, 3072),
    "c4a-highmem-96-metal": (96, 768),
    # shapes whose memory is not the series' ratio times the vCPUs
    "n2-highmem-128": (128, 864),
    "c3d-highcpu-30": (30, 59),
    "c3d-highcpu-60": (60, 118),
    "c3d-highcpu-90": (90, 177),
    "c3d-highcpu-180": (180, 354),
    "c3d-highcpu-360": (360, 708),
}


def _series(series: str, cls: str, gb_per_cpu: float, sizes, lssd=()) -> dict[str, tuple[int, float]]:
    """Shapes of one series and class whose memory is GB-per-vCPU x vCPUs, rounded down to a
    whole GB (as Compute Engine lists them); `lssd`: the sizes that also come as -lssd."""
    out = {f"{series}-{cls}-{n}": (n, float(int(gb_per_cpu * n))) for n in sizes}
    out.update({f"{series}-{cls}-{n}-lssd": (n, float(int(gb_per_cpu * n))) for n in lssd})
    return out


_C4 = (2, 4, 8, 16, 24, 32, 48, 96, 144, 192, 288)
_C4D = (2, 4, 8, 16, 32, 48, 64, 96, 192, 384)
_C4A = (1, 2, 4, 8, 16, 32, 48, 64, 72)
_N4 = (2, 4, 8, 16, 32, 48, 64, 80)
_N4D = (2, 4, 8, 16, 32, 48, 64, 80, 96)
_N4A = (1, 2, 4, 8, 16, 32, 48, 64)

# Series listed shape by shape (their sizes follow no single vCPU list): name -> (vCPUs, GB).
_LISTED: dict[str, tuple[int, float]] = {
    **_series("c4", "standard", 3.75, _C4, lssd=_C4[1:]),
    **_series("c4", "highcpu", 2, _C4),
    **_series("c4", "highmem", 7.75, _C4, lssd=_C4[1:]),
    **_series("c4d", "standard", 3.875, _C4D, lssd=_C4D[2:]),
    **_series("c4d", "highcpu", 1.875, _C4D),
    **_series("c4d", "highmem", 7.875, _C4D, lssd=_C4D[2:]),
    **_series("c4a", "standard", 4, _C4A, lssd=_C4A[2:]),
    **_series("c4a", "highcpu", 2, _C4A),
    **_series("c4a", "highmem", 8, _C4A, lssd=_C4A[2:]),
    **_series("n4", "standard", 4, _N4),
    **_series("n4", "highcpu", 2, _N4),
    **_series("n4", "highmem", 8, _N4),
    **_series("n4d", "standard", 4, _N4D),
    **_series("n4d", "highcpu", 2, _N4D),
    **_series("n4d", "highmem", 8, _N4D),
    **_series("n4a", "standard", 4, _N4A),
    **_series("n4a", "highcpu", 2, _N4A),
    **_series("n4a", "highmem", 8, _N4A),
    **_series("t2a", "standard", 4, (1, 2, 4, 8, 16, 32, 48)),
    **_series("t2d", "standard", 4, (1, 2, 4, 8, 16, 32, 48, 60)),
    **_FIXED,
}

# (series, class) -> (GB per vCPU, allowed vCPU counts)
_PREDEFINED: dict[tuple[str, str], tuple[float, tuple[int, ...]]] = {
    ("n1", "standard"): (3.75, (1, 2, 4, 8, 16, 32, 64, 96)),
    ("n1", "highmem"): (6.5, (2, 4, 8, 16, 32, 64, 96)),
    ("n1", "highcpu"): (0.9, (2, 4, 8, 16, 32, 64, 96)),
    ("n2", "standard"): (4, (2, 4, 8, 16, 32, 48, 64, 80, 96, 128)),
    ("n2", "highmem"): (8, (2, 4, 8, 16, 32, 48, 64, 80, 96)),  # n2-highmem-128: _FIXED
    ("n2", "highcpu"): (1, (2, 4, 8, 16, 32, 48, 64, 80, 96)),
    ("n2d", "standard"): (4, (2, 4, 8, 16, 32, 48, 64, 80, 96, 128, 224)),
    ("n2d", "highmem"): (8, (2, 4, 8, 16, 32, 48, 64, 80, 96)),
    ("n2d", "highcpu"): (1, (2, 4, 8, 16, 32, 48, 64, 80, 96, 128, 224)),
    ("c2", "standard"): (4, (4, 8, 16, 30, 60)),
    ("c2d", "standard"): (4, (2, 4, 8, 16, 32, 56, 112)),
    ("c2d", "highmem"): (8, (2, 4, 8, 16, 32, 56, 112)),
    ("c2d", "highcpu"): (2, (2, 4, 8, 16, 32, 56, 112)),
    ("c3", "standard"): (4, (4, 8, 22, 44, 88, 176)),
    ("c3", "highmem"): (8, (4, 8, 22, 44, 88, 176)),
    ("c3", "highcpu"): (2, (4, 8, 22, 44, 88, 176)),
    ("c3d", "standard"): (4, (4, 8, 16, 30, 60, 90, 180, 360)),
    ("c3d", "highmem"): (8, (4, 8, 16, 30, 60, 90, 180, 360)),
    ("c3d", "highcpu"): (2, (4, 8, 16)),  # the larger ones are listed in _FIXED
    ("e2", "standard"): (4, (2, 4, 8, 16, 32)),
    ("e2", "highmem"): (8, (2, 4, 8, 16)),
    ("e2", "highcpu"): (1, (2, 4, 8, 16, 32)),
}

_PREDEFINED_RE = re.compile(r"^([a-z0-9]+)-(standard|highmem|highcpu)-(\d+)(-lssd)?$")
# custom-CPUS-MB (N1) or SERIES-custom-CPUS-MB, optionally with -ext (extended memory)
_CUSTOM_RE = re.compile(r"^(?:(n1|n2|n2d|e2|c2d|c3|c3d)-)?custom-(\d+)-(\d+)(-ext)?$")
_G2_CUSTOM_RE = re.compile(r"^g2-custom-(\d+)-(\d+)$")


def lookup_machine(name: str) -> MachineType | None:
    """Figures for a GCE machine type, or None when ctk does not know it."""
    if not isinstance(name, str):
        return None
    n = name.strip().lower()
    if n in _GPU_MACHINES:
        return _GPU_MACHINES[n]
    if n in _LISTED:
        cpus, gb = _LISTED[n]
        return MachineType(n, cpus, _mb(gb))
    m = _G2_CUSTOM_RE.match(n)
    if m:
        cpus, mem_mb = int(m.group(1)), int(m.group(2))
        lo, hi = _G2_CUSTOM_GB.get(cpus, (0, -1))
        if lo * 1024 <= mem_mb <= hi * 1024 and mem_mb % 256 == 0:
            std = _GPU_MACHINES[f"g2-standard-{cpus}"]
            return MachineType(n, cpus, mem_mb, std.gpu_type, std.gpu_count, std.gpu_model, std.network)
        return None
    m = _PREDEFINED_RE.match(n)
    if m:
        series, cls, cpus, lssd = m.group(1), m.group(2), int(m.group(3)), m.group(4)
        if lssd and series not in ("c3", "c3d"):
            return None
        shape = _PREDEFINED.get((series, cls))
        if shape and cpus in shape[1]:
            return MachineType(n, cpus, _mb(shape[0] * cpus))
        return None
    m = _CUSTOM_RE.match(n)
    if m:
        cpus, mem_mb = int(m.group(2)), int(m.group(3))
        if cpus >= 1 and mem_mb >= 256:
            return MachineType(n, cpus, mem_mb)
    return None


# Series whose CPUs are Arm (Google Axion: c4a, n4a; Ampere Altra: t2a; NVIDIA Grace: a4x).
ARM_SERIES = ("c4a", "n4a", "t2a", "a4x")


def is_arm(name: str) -> bool:
    """Whether machine type NAME has Arm CPUs (an x86-64 image cannot boot on it)."""
    return isinstance(name, str) and name.strip().lower().split("-", 1)[0] in ARM_SERIES


def known_machine_types() -> list[str]:
    """Every predefined machine type name lookup_machine() knows (not custom ones)."""
    names = set(_GPU_MACHINES) | set(_LISTED)
    for (series, cls), (_, sizes) in _PREDEFINED.items():
        names.update(f"{series}-{cls}-{c}" for c in sizes)
    return sorted(names)


def known_series() -> list[str]:
    """The machine series lookup_machine() knows ("a2", "c4d", "n1", ...), for hints."""
    return sorted({n.split("-", 1)[0] for n in known_machine_types()})


# --- TPUs -----------------------------------------------------------------------------
#
# Naming, per the Cloud TPU docs (system architecture, v2/v3/v4/v5p/v5e/v6e pages):
# - v2, v3, v4, v5p: "vX-N" counts TensorCores, 2 per chip; every TPU VM (host)
#   holds 4 chips. v4-8 = 4 chips on 1 host; v4-16 = 8 chips on 2; v5p-8 = 4 chips, 1 host.
# - v5e (API name "v5litepod") and v6e: "vX-N" counts chips, 1 TensorCore per chip.
#   Slices of 1, 4 or 8 chips run on one VM holding all of them; larger slices
#   (16..256 chips) use VMs of 4 chips each: v6e-16 = 4 hosts, v5litepod-256 = 64.
# "hosts" here means TPU VMs, i.e. Slurm nodes, not the physical 8-chip boards
# the v5e/v6e tables also count.


@dataclass(frozen=True)
class TpuType:
    name: str  # canonical accelerator type, e.g. "v5litepod-16"
    generation: str  # v2 | v3 | v4 | v5e | v5p | v6e
    chips: int
    hosts: int
    chips_per_host: int
    cores_per_chip: int

    @property
    def cores(self) -> int:
        return self.chips * self.cores_per_chip


# generation -> (API prefix, suffix counts cores?, cores per chip, largest suffix)
_TPU_GENERATIONS: dict[str, tuple[str, bool, int, int]] = {
    "v2": ("v2", True, 2, 512),
    "v3": ("v3", True, 2, 2048),
    "v4": ("v4", True, 2, 8192),
    "v5p": ("v5p", True, 2, 12288),
    "v5e": ("v5litepod", False, 1, 256),
    "v6e": ("v6e", False, 1, 256),
}

# Spellings of a generation seen in the TPU API, CT's accelerator_config.version,
# and GKE's cloud.google.com/gke-tpu-accelerator label.
_TPU_ALIASES: dict[str, str] = {
    "v2": "v2", "v3": "v3", "v4": "v4", "v5p": "v5p", "v5e": "v5e", "v6e": "v6e",
    "v5litepod": "v5e", "v5lite": "v5e", "v5-lite": "v5e",
    "tpu-v4-podslice": "v4", "tpu-v5p-slice": "v5p", "tpu-v5-lite-podslice": "v5e",
    "tpu-v5-lite-device": "v5e", "tpu-v6e-slice": "v6e", "tpu-v3-slice": "v3",
    "tpu-v3-device": "v3", "tpu-v2-device": "v2",
}

_CHIP_COUNTED_SIZES = (1, 4, 8, 16, 32, 64, 128, 256)
_TPU_NAME_RE = re.compile(r"^([a-z0-9-]+?)-(\d+)$")
_TOPOLOGY_RE = re.compile(r"^\d+(x\d+){1,2}$")


def _tpu_from_chips(gen: str, chips: int) -> TpuType | None:
    prefix, counts_cores, cores_per_chip, largest = _TPU_GENERATIONS[gen]
    if counts_cores:
        if chips < 4 or chips % 4 or chips * cores_per_chip > largest:
            return None
        per_host = 4
    else:
        if chips not in _CHIP_COUNTED_SIZES:
            return None
        per_host = chips if chips <= 8 else 4
    suffix = chips * cores_per_chip if counts_cores else chips
    return TpuType(f"{prefix}-{suffix}", gen, chips, chips // per_host, per_host, cores_per_chip)


def lookup_tpu(node_type: str, topology: str | None = None) -> TpuType | None:
    """A TPU slice from its accelerator type ("v4-8", "v5litepod-16", "v6e-16", ...).

    Also takes a bare generation as CT's `accelerator_config.version` or GKE name it
    ("V4", "V5LITEPOD", "tpu-v6e-slice") together with a topology ("2x2x1", "4x4").
    """
    if not isinstance(node_type, str):
        return None
    n = node_type.strip().lower().replace("_", "-")
    gen = _TPU_ALIASES.get(n)
    if gen is not None:
        if not topology or not _TOPOLOGY_RE.match(topology.strip().lower()):
            return None
        chips = 1
        for d in topology.strip().lower().split("x"):
            chips *= int(d)
        return _tpu_from_chips(gen, chips)
    m = _TPU_NAME_RE.match(n)
    if not m:
        return None
    gen = _TPU_ALIASES.get(m.group(1))
    if gen is None:
        return None
    count = int(m.group(2))
    _, counts_cores, cores_per_chip, _ = _TPU_GENERATIONS[gen]
    if counts_cores:
        if count % cores_per_chip:
            return None
        count //= cores_per_chip
    return _tpu_from_chips(gen, count)
