"""Machine type and TPU slice figures."""

import pytest

from ctk.modules.machines import accelerator_gpu, known_machine_types, lookup_machine, lookup_tpu


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
