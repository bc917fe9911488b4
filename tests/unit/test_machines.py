"""Machine type and TPU slice figures."""

import pytest

from ctk.blueprint import BlueprintErrors
from ctk.modules.machines import (
    accelerator_gpu,
    known_machine_types,
    known_series,
    lookup_machine,
    lookup_tpu,
)
from ctk.plan import process


def test_a3_mega_is_eight_h100_over_tcpxo():
    m = lookup_machine("a3-megagpu-8g")
    assert (m.cpus, m.memory_mb) == (208, 1872 * 1024)
    assert (m.gpu_type, m.gpu_count) == ("h100", 8)
    assert "Mega" in m.gpu_model
    assert m.network == "gpudirect-tcpxo"


@pytest.mark.parametrize("name, cpus, gb, gpu, count, network", [
    ("a3-highgpu-8g", 208, 1872, "h100", 8, "gpudirect-tcpx"),
    ("a3-highgpu-1g", 26, 234, "h100", 1, "tcp"),
    ("a3-ultragpu-8g", 224, 2952, "h200", 8, "rdma"),
    ("a4-highgpu-8g", 224, 3968, "b200", 8, "rdma"),
    ("a2-highgpu-1g", 12, 85, "a100", 1, "tcp"),
    ("a2-megagpu-16g", 96, 1360, "a100", 16, "tcp"),
    ("a2-ultragpu-8g", 96, 1360, "a100-80gb", 8, "tcp"),
    ("g2-standard-4", 4, 16, "l4", 1, "tcp"),
    ("g2-standard-24", 24, 96, "l4", 2, "tcp"),
    ("g2-standard-32", 32, 128, "l4", 1, "tcp"),
    ("g2-standard-96", 96, 384, "l4", 8, "tcp"),
])
def test_gpu_machines(name, cpus, gb, gpu, count, network):
    m = lookup_machine(name)
    assert (m.cpus, m.memory_mb, m.gpu_type, m.gpu_count, m.network) == (cpus, gb * 1024, gpu, count, network)


# Compute Engine's GPU machine types page (A4X Max, A4X, A3 Edge, G4 tables).
@pytest.mark.parametrize("name, cpus, gb, gpu, count, network, model", [
    ("a4x-highgpu-4g", 140, 884, "b200", 4, "rdma", "GB200"),
    ("a4x-maxgpu-4g-metal", 144, 960, "b300", 4, "rdma", "GB300"),
    ("a3-edgegpu-8g", 208, 1872, "h100", 8, "gpudirect-tcpx", "H100"),
    ("g4-standard-6", 6, 22, "rtxpro6000", 1, "tcp", "RTX PRO 6000 Blackwell 96GB (1/8 vGPU)"),
    ("g4-standard-12", 12, 45, "rtxpro6000", 1, "tcp", "(1/4 vGPU)"),
    ("g4-standard-24", 24, 90, "rtxpro6000", 1, "tcp", "(1/2 vGPU)"),
    ("g4-standard-48", 48, 180, "rtxpro6000", 1, "tcp", "RTX PRO 6000"),
    ("g4-standard-96", 96, 360, "rtxpro6000", 2, "tcp", "RTX PRO 6000"),
    ("g4-standard-192", 192, 720, "rtxpro6000", 4, "tcp", "RTX PRO 6000"),
    ("g4-standard-384", 384, 1440, "rtxpro6000", 8, "tcp", "RTX PRO 6000"),
])
def test_blackwell_and_g4_machines(name, cpus, gb, gpu, count, network, model):
    m = lookup_machine(name)
    assert (m.cpus, m.memory_mb, m.gpu_type, m.gpu_count, m.network) == (cpus, gb * 1024, gpu, count, network)
    assert model in m.gpu_model
    assert "vGPU" not in m.gpu_model or count == 1


def test_whole_g4_gpus_are_not_marked_as_slices():
    assert "vGPU" not in lookup_machine("g4-standard-48").gpu_model


def test_g2_custom_takes_the_gpus_of_its_standard_shape_within_its_memory_range():
    m = lookup_machine("g2-custom-16-55296")  # CT's ml-slurm example: 16 vCPUs, 54 GB
    assert (m.cpus, m.memory_mb, m.gpu_type, m.gpu_count) == (16, 55296, "l4", 1)
    assert lookup_machine("g2-custom-24-98304").gpu_count == 2
    assert lookup_machine("g2-custom-16-53248") is None  # 52 GB: below g2-standard-16's 54-64 GB
    assert lookup_machine("g2-custom-16-66560") is None  # 65 GB: above it
    assert lookup_machine("g2-custom-16-55300") is None  # not a multiple of 256 MB
    assert lookup_machine("g2-custom-20-81920") is None  # no g2-standard-20


# Compute Engine's general-purpose, compute- and HPC-optimized machine family pages.
@pytest.mark.parametrize("name, cpus, gb", [
    ("c4-standard-2", 2, 7), ("c4-standard-4", 4, 15), ("c4-standard-24", 24, 90),
    ("c4-standard-288", 288, 1080), ("c4-highcpu-2", 2, 4), ("c4-highmem-2", 2, 15),
    ("c4-highmem-192-lssd", 192, 1488), ("c4-highmem-288", 288, 2232),
    ("c4-standard-288-lssd-metal", 288, 1080),
    ("c4d-standard-2", 2, 7), ("c4d-standard-8", 8, 31), ("c4d-standard-384", 384, 1488),
    ("c4d-highcpu-2", 2, 3), ("c4d-highcpu-384", 384, 720), ("c4d-highmem-8-lssd", 8, 63),
    ("c4d-highmem-384", 384, 3024), ("c4d-standard-384-metal", 384, 1536),
    ("c4a-standard-4", 4, 16), ("c4a-highcpu-16", 16, 32), ("c4a-highmem-72", 72, 576),
    ("c4a-highmem-96-metal", 96, 768),
    ("h4d-standard-192", 192, 720), ("h4d-highmem-192", 192, 1488), ("h4d-highmem-192-lssd", 192, 1488),
    ("n4-standard-64", 64, 256), ("n4-highmem-80", 80, 640), ("n4d-highcpu-96", 96, 192),
    ("n4a-standard-1", 1, 4),
    ("t2a-standard-16", 16, 64), ("t2d-standard-60", 60, 240),
    ("c3d-highcpu-30", 30, 59), ("c3d-highcpu-360", 360, 708), ("c3-highcpu-192-metal", 192, 512),
    ("n2-highmem-128", 128, 864),
])
def test_newer_cpu_machines(name, cpus, gb):
    m = lookup_machine(name)
    assert (m.cpus, m.memory_mb, m.gpu_type, m.gpu_count) == (cpus, gb * 1024, None, 0)


@pytest.mark.parametrize("name", [
    "c4-standard-64", "c4-highcpu-288-metal", "c4-standard-2-lssd", "c4d-standard-4-lssd", "c4d-highcpu-8-lssd",
    "c4a-standard-36", "h4d-standard-96", "g4-standard-64", "a4x-maxgpu-4g", "n4-standard-96", "t2a-standard-60",
    "c3-highcpu-192",
])
def test_shapes_compute_engine_does_not_offer_are_unknown(name):
    assert lookup_machine(name) is None


def test_every_family_of_ct_examples_is_known():
    # The machine series Cluster Toolkit's examples and daily-test blueprints name (2026).
    assert {"a2", "a3", "a4", "a4x", "c2", "c2d", "c3", "c3d", "c4", "c4a", "c4d", "e2", "g2", "g4", "h3",
            "h4d", "n1", "n2", "n2d", "n4", "t2a", "t2d"} <= set(known_series())


@pytest.mark.parametrize("name, cpus, memory_mb", [
    ("n2-standard-2", 2, 8192),
    ("n2-standard-80", 80, 320 * 1024),
    ("n2d-standard-16", 16, 64 * 1024),
    ("n1-standard-1", 1, 3840),  # 3.75 GB
    ("n1-standard-2", 2, 7680),
    ("n1-highmem-8", 8, 52 * 1024),
    ("n1-highcpu-2", 2, 1843),  # 1.8 GB, as the API reports it
    ("c2-standard-4", 4, 16 * 1024),
    ("c2-standard-30", 30, 120 * 1024),
    ("c2-standard-60", 60, 240 * 1024),
    ("c2d-highcpu-112", 112, 224 * 1024),
    ("c3-highmem-88", 88, 704 * 1024),
    ("c3-standard-22-lssd", 22, 88 * 1024),
    ("c3d-standard-360", 360, 1440 * 1024),
    ("h3-standard-88", 88, 352 * 1024),
    ("e2-standard-32", 32, 128 * 1024),
    ("e2-medium", 2, 4096),
    ("n2-custom-8-32768", 8, 32768),
    ("custom-4-16384", 4, 16384),
])
def test_cpu_machines(name, cpus, memory_mb):
    m = lookup_machine(name)
    assert (m.cpus, m.memory_mb, m.gpu_type, m.gpu_count, m.network) == (cpus, memory_mb, None, 0, "tcp")


@pytest.mark.parametrize("name", [
    "n2-standard-3", "n1-standard-128", "c2-standard-2", "e2-highmem-32", "n2-standard-4-lssd",
    "a3-megagpu-4g", "z9-standard-8", "", "A3-MEGAGPU", None,
])
def test_unknown_machines_are_none(name):
    assert lookup_machine(name) is None


def test_lookup_is_case_and_space_tolerant():
    assert lookup_machine(" N2-Standard-2 ").cpus == 2


def test_every_known_machine_resolves():
    names = known_machine_types()
    assert {"n1-standard-96", "a4-highgpu-8g", "h3-standard-88", "e2-small"} <= set(names)
    for n in names:
        m = lookup_machine(n)
        assert m is not None and m.name == n and m.cpus > 0 and m.memory_mb > 0


def test_accelerator_names_map_to_gres_types():
    assert accelerator_gpu("nvidia-gb300")[0] == "b300"
    assert accelerator_gpu("nvidia-rtx-pro-6000")[0] == "rtxpro6000"
    assert accelerator_gpu("nvidia-h100-mega-80gb")[0] == "h100"
    assert accelerator_gpu("nvidia-a100-80gb")[0] == "a100-80gb"
    assert accelerator_gpu("nvidia-tesla-t4")[0] == "t4"
    assert accelerator_gpu("nvidia-nope") is None


@pytest.mark.parametrize("name, gen, chips, hosts, per_host, cores", [
    ("v2-8", "v2", 4, 1, 4, 8),
    ("v3-8", "v3", 4, 1, 4, 8),
    ("v3-32", "v3", 16, 4, 4, 32),
    ("v4-8", "v4", 4, 1, 4, 8),
    ("v4-16", "v4", 8, 2, 4, 16),
    ("v4-32", "v4", 16, 4, 4, 32),
    ("v5p-8", "v5p", 4, 1, 4, 8),
    ("v5p-128", "v5p", 64, 16, 4, 128),
    ("v5litepod-1", "v5e", 1, 1, 1, 1),
    ("v5litepod-4", "v5e", 4, 1, 4, 4),
    ("v5litepod-8", "v5e", 8, 1, 8, 8),
    ("v5litepod-16", "v5e", 16, 4, 4, 16),
    ("v5litepod-256", "v5e", 256, 64, 4, 256),
    ("v6e-1", "v6e", 1, 1, 1, 1),
    ("v6e-8", "v6e", 8, 1, 8, 8),
    ("v6e-16", "v6e", 16, 4, 4, 16),
    ("v6e-256", "v6e", 256, 64, 4, 256),
])
def test_tpu_slices(name, gen, chips, hosts, per_host, cores):
    t = lookup_tpu(name)
    assert (t.name, t.generation, t.chips, t.hosts, t.chips_per_host, t.cores) == (
        name, gen, chips, hosts, per_host, cores)
    assert t.chips == t.hosts * t.chips_per_host


def test_tpu_aliases_and_ct_accelerator_config():
    assert lookup_tpu("v5e-16").name == "v5litepod-16"
    assert lookup_tpu("V4-8").name == "v4-8"
    assert lookup_tpu("V4", "2x2x1").name == "v4-8"
    assert lookup_tpu("V4", "2x2x2").hosts == 2
    assert lookup_tpu("V5LITEPOD", "4x4").name == "v5litepod-16"
    assert lookup_tpu("V3", "4x4").name == "v3-32"
    assert lookup_tpu("tpu-v6e-slice", "2x4").name == "v6e-8"
    assert lookup_tpu("tpu-v5p-slice", "2x2x1").name == "v5p-8"


@pytest.mark.parametrize("name, topology", [
    ("v4-4", None), ("v4-12", None), ("v3-9", None), ("v5litepod-2", None), ("v6e-12", None),
    ("v6e-512", None), ("v7-8", None), ("v4", None), ("V4", None), ("V4", "2xx2"), ("n2-standard-8", None),
    ("", None), (None, None),
])
def test_unknown_tpus_are_none(name, topology):
    assert lookup_tpu(name, topology) is None


NODESET_BP = """\
blueprint_name: bad
vars:
  deployment_name: bad
  project_id: p
  region: us-central1
  zone: us-central1-a
deployment_groups:
- group: cluster
  modules:
  - id: gpu_nodeset
    source: community/modules/compute/schedmd-slurm-gcp-v6-nodeset
    settings:
      machine_type: {machine}
      node_count_dynamic_max: 2
      subnetwork_self_link: projects/p/regions/us-central1/subnetworks/s
  - id: gpu_partition
    source: community/modules/compute/schedmd-slurm-gcp-v6-partition
    use: [gpu_nodeset]
    settings:
      partition_name: gpu
"""


@pytest.mark.parametrize("machine, gres, count", [
    ("g4-standard-96", "rtxpro6000", 2), ("a4x-highgpu-4g", "b200", 4), ("a4x-maxgpu-4g-metal", "b300", 4),
    ("g2-custom-16-55296", "l4", 1), ("h4d-highmem-192-lssd", None, 0), ("c4d-standard-8", None, 0),
])
def test_a_ct_nodeset_of_a_new_family_plans_its_gpus(write, machine, gres, count):
    ns = process(write(NODESET_BP.format(machine=machine))).deployment.nodesets[0]
    assert (ns.machine_type, ns.gpu_type, ns.gpu_count) == (machine, gres, count)


@pytest.mark.parametrize("machine, near", [
    ("g4-standard-64", "g4-standard-"), ("h4d-highmem-190", "h4d-highmem-192"), ("c4d-standrd-8", "c4d-standard-8"),
    ("a4x-maxgpu-4g", "a4x-maxgpu-4g-metal"),
])
def test_an_unknown_type_of_a_new_family_is_an_error_with_a_near_name(write, machine, near):
    with pytest.raises(BlueprintErrors) as e:
        process(write(NODESET_BP.format(machine=machine)))
    [err] = e.value.errors
    assert err.message == f"unknown machine type {machine!r}"
    assert (err.pos.line, err.pos.col) == (13, 21)
    assert err.hint.startswith(f"did you mean '{near}")


def test_an_unknown_family_lists_the_known_series(write):
    with pytest.raises(BlueprintErrors) as e:
        process(write(NODESET_BP.format(machine="zz9-mega-1")))
    [err] = e.value.errors
    assert "g4" in err.hint and "h4d" in err.hint and "c4d" in err.hint
