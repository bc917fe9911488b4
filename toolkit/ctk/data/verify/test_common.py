"""Role common: base packages, and nothing machine-specific or secret baked in."""


def test_base_packages(host):
    for pkg in ("ca-certificates", "iproute2", "procps", "openssh-server", "python3", "python3-venv", "sudo"):
        assert host.package(pkg).is_installed, pkg


def test_no_ssh_host_keys_in_the_image(host):
    # A build node's host key lives in /run (tmpfs); the image itself carries none.
    assert host.run("ls /etc/ssh/ssh_host_*_key 2>/dev/null").stdout == ""


def test_release_of_its_base(host, base):
    assert host.system_info.distribution == base.distribution
    release = host.system_info.release
    assert release == base.release or release.startswith(base.release + "."), release


def test_python_of_its_base(host, base):
    # Ansible and every stack run on it: a stack must be locked for this Python.
    out = host.check_output("python3 --version")
    assert out.split()[1].rsplit(".", 1)[0] == base.python_release, out
