"""Role nvidia_driver: the pinned driver installed headless, its kernel module built by DKMS for
every kernel of the image (modinfo names that kernel), nouveau blacklisted, kernel and driver held
against upgrades, and what was installed recorded in /etc/ctk/nvidia-driver.json. Image builders
have no GPUs: nothing here needs one."""

import json

import pytest

from ctk.stacks.drivers import image_driver


@pytest.fixture(autouse=True)
def _only_with_the_driver(roles):
    if "nvidia_driver" not in roles:
        pytest.skip("image has no nvidia_driver role")


@pytest.fixture(scope="module")
def record(host):
    f = host.file("/etc/ctk/nvidia-driver.json")
    assert f.exists, "the role records what it installed"
    return json.loads(f.content_string)


@pytest.fixture(scope="module")
def kernels(host):
    """The image's kernels, from its /boot (the build host's kernel is not the image's)."""
    out = host.check_output("ls /boot | sed -n 's/^vmlinuz-//p'").split()
    assert out, "the image has a kernel"
    return out


def test_the_record_is_the_pinned_driver(record, base):
    pinned = image_driver(base.name)
    assert pinned is not None, f"ctk pins no driver for base {base.name}"
    assert record["version"] == pinned.version and record["kernel_module"] == pinned.kernel_module
    if pinned.package_version:
        assert record["package_version"] == pinned.package_version


def test_the_module_is_built_for_each_kernel_of_the_image(host, record, kernels):
    assert sorted(record["kernels"]) == sorted(kernels)
    for k, ko in zip(record["kernels"], record["modules"]):
        assert ko.startswith((f"/lib/modules/{k}/", f"/usr/lib/modules/{k}/")), ko
        assert host.file(ko).exists
        assert host.check_output(f"modinfo -F vermagic {ko}").split()[0] == k
        assert host.check_output(f"modinfo -F version {ko}") == record["version"]


def test_dpkg_has_the_module_package_fully_configured(host, record, base):
    if base.distribution != "debian":
        pytest.skip("Debian's package names")
    out = host.check_output("dpkg-query -W -f='${db:Status-Abbrev}|${Version}' nvidia-kernel-dkms")
    # h: held (the role holds it), i: installed, and no error flag (a failed DKMS build leaves
    # the package half-configured: "iF")
    assert out == f"hi |{record['package_version']}"


def test_nvidia_smi_and_the_cuda_driver_library_are_installed(host):
    assert host.exists("nvidia-smi")
    assert "libcuda.so.1" in host.check_output("ldconfig -p")
    assert "libnvidia-ml.so.1" in host.check_output("ldconfig -p")


def test_no_x_server(host):
    assert not host.exists("Xorg")
    assert not host.package("xserver-xorg-core").is_installed


def test_nouveau_is_blacklisted(host):
    lines = host.check_output("cat /etc/modprobe.d/*.conf").splitlines()
    assert "blacklist nouveau" in [ln.strip() for ln in lines]


def test_kernel_and_driver_packages_are_held(host, kernels, base):
    if base.distribution not in ("debian", "ubuntu"):
        pytest.skip("apt holds")
    held = set(host.check_output("apt-mark showhold").split())
    assert "nvidia-kernel-dkms" in held or any(p.startswith("nvidia-headless-") for p in held), held
    for k in kernels:
        assert f"linux-image-{k}" in held and f"linux-headers-{k}" in held, held
    conf = host.file("/etc/apt/apt.conf.d/51ctk-nvidia-driver")
    assert conf.exists and '"nvidia-";' in conf.content_string and '"linux-image-";' in conf.content_string


def test_nvidia_persistenced_runs_only_where_a_gpu_is_bound(host):
    if not host.exists("systemctl"):
        pytest.skip("no systemd in the image")
    dropin = host.file("/etc/systemd/system/nvidia-persistenced.service.d/ctk-gpu-nodes.conf")
    assert "ConditionPathExistsGlob=/sys/bus/pci/drivers/nvidia/0000:*" in dropin.content_string


def test_slurm_has_its_nvml_plugin_where_slurmd_runs(host, base):
    if base.distribution != "debian" or not host.file("/usr/sbin/slurmd").exists:
        pytest.skip("Debian's slurmd")
    assert host.package("slurm-wlm-nvml-plugin").is_installed
    assert host.check_output("find /usr/lib -name gpu_nvml.so | head -n1").endswith("gpu_nvml.so")
