"""ctk's Ansible roles applied for real to a Debian 12 root filesystem over the chroot connection.

Install phase role by role (common, munge, slurm, jax) as ctk builds image layers, then site.yml
(every role in one run) again: it must report changed=0. Then the configure phase with a
throwaway munge key and a small slurm.conf folder, the same way. Then what the node holds: the key (0400,
munge), /etc/slurm, the pinned jax in the venv, slurmd.

Needs root, mmdebstrap or debootstrap (the session store's debian-12 base, which the Debian 12
lab's background build makes first) and an Ansible with community.general (PyPI's `ansible`,
which `make test` installs in /var/tmp/ctk-dev/venv; else $CTK_ANSIBLE_PLAYBOOK or PATH). Takes
a few minutes (pip installs jax into the tree).
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import stat
import sys
from pathlib import Path

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import roles_helpers as rh

from ctk.images.store import Store
from ctk.stacks import jax_role_vars, load_stacks, read_lock

pytestmark = pytest.mark.integration

ROLES = ["common", "munge", "slurm", "jax"]
STACK = "jax-cpu-0.10"  # the newest CPU stack for the tree's Debian 12 (Python 3.11)

SLURM_CONF = """\
ClusterName=ctktest
SlurmctldHost=ctk-controller(127.0.10.1)
SlurmUser=slurm
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
NodeName=ctk-compute-0 NodeAddr=127.0.10.2 CPUs=1 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES State=UP
"""
CGROUP_CONF = "CgroupPlugin=autodetect\n"


def _missing_requirements() -> str | None:
    if os.geteuid() != 0:
        return "needs root (chroot, mount)"
    if not sys.platform.startswith("linux"):
        return "needs Linux"
    if not shutil.which("chroot", path=rh.SANE_PATH):
        return "no chroot command"
    if not shutil.which("mmdebstrap", path=rh.SANE_PATH) and not shutil.which("debootstrap", path=rh.SANE_PATH):
        return "no mmdebstrap or debootstrap to make the debian-12 base with (apt-get install mmdebstrap)"
    if not rh.find_ansible_playbook():
        return ("no ansible-playbook with community.general (`make testdeps` installs PyPI's ansible "
                f"into {rh.DEV_DIR / 'venv'}; or set CTK_ANSIBLE_PLAYBOOK)")
    return None


_skip = _missing_requirements()
if _skip:
    pytestmark = [pytest.mark.integration, pytest.mark.skip(reason=_skip)]


class Lab:
    """What the tests in this module share: the tree, the vars, the timings, what failed."""

    def __init__(self, root: Path, work: Path, ansible_playbook: str):
        self.root = root
        self.work = work
        self.ansible_playbook = ansible_playbook
        self.timings: dict[str, float] = {}
        self.recaps: dict[str, tuple] = {}  # step -> (first recap, second recap)
        self.failed: list[str] = []
        stack = load_stacks()[STACK]
        self.pins = dict(stack.pins)
        self.install_vars = {
            # As ctk passes them: the pins and the stack's locks (the role installs the one for
            # the tree's Python, hashes required, from PyPI here: there is no wheelhouse).
            **jax_role_vars(stack, [read_lock(stack, py) for py in stack.pythons]),
            # A TLS-inspecting proxy's CA on this host must be trusted inside the tree too,
            # or pip cannot reach PyPI there.
            "common_extra_ca_certs": sorted(glob.glob("/usr/local/share/ca-certificates/*.crt")),
            "pip_extra_args": os.environ.get("CTK_TEST_PIP_EXTRA_ARGS", ""),
        }
        self.key = work / "munge.key"
        self.key.write_bytes(os.urandom(1024))
        self.key.chmod(0o600)
        self.conf_dir = work / "slurm-conf"
        self.conf_dir.mkdir()
        (self.conf_dir / "slurm.conf").write_text(SLURM_CONF)
        (self.conf_dir / "cgroup.conf").write_text(CGROUP_CONF)
        self.configure_vars = {
            **self.install_vars,
            "munge_key_src": str(self.key),
            "slurm_conf_dir": str(self.conf_dir),
            "slurm_flavour": "compute",
            "ctk_hosts": [{"name": "ctk-controller", "addr": "127.0.10.1"},
                          {"name": "ctk-compute-0", "addr": "127.0.10.2", "aliases": ["c0"]}],
            "ctk_users": [{"name": "ctkuser", "uid": 2345}],
        }

    def play(self, playbook: str, extra: dict) -> rh.PlaybookRun:
        return rh.run_playbook(playbook, self.root, extra, ansible_playbook=self.ansible_playbook,
                               workdir=self.work)

    def layer(self, role: str, phase: str) -> rh.PlaybookRun:
        extra = self.install_vars if phase == "install" else self.configure_vars
        return self.play("layer.yml", {**extra, "ctk_role": role, "ctk_phase": phase})

    def need(self, *steps: str) -> None:
        for s in steps:
            if s in self.failed:
                pytest.skip(f"needs step {s!r}, which failed")

    def report(self) -> str:
        """What each step took and what its runs reported: figures to read, not to assert on."""
        fmt = lambda r: "-" if r is None else f"ok={r.ok} changed={r.changed} failed={r.failed}"  # noqa: E731
        return "\n".join(["ctk roles timings:", *(f"  {k:<32} {v:7.1f} s" for k, v in self.timings.items()),
                          "ctk roles recaps:", *(f"  {k:<22} first: {fmt(a):<30} rerun: {fmt(b)}"
                                                 for k, (a, b) in self.recaps.items())])


def _explain(run: rh.PlaybookRun) -> str:
    return f"rc={run.returncode} recap={run.recap}\n{run.output[-8000:]}"


@pytest.fixture(scope="module")
def lab(debian12_base, state, tmp_path_factory):
    """The tree (a copy of the session store's debian-12 base, which the Debian 12 lab's image and
    the ssh target's machines start from too) and what the tests learn about it; its timings are
    printed at the end (shown with -s, or with -rA as the last test's teardown output)."""
    work = tmp_path_factory.mktemp("ctk-roles")
    root = rh.copy_rootfs(Path(Store(state).layer_root(debian12_base)), work / "root")
    try:
        with rh.chroot_mounts(root):
            lab = Lab(root, work, rh.find_ansible_playbook())
            yield lab
            print("\n" + lab.report())
    finally:
        rh.remove_rootfs(root)
        shutil.rmtree(work, ignore_errors=True)  # the throwaway munge key goes with it


def _processes_inside(root: Path) -> list[str]:
    """Processes whose root directory is the tree (a daemon a package script started)."""
    out = []
    for p in glob.glob("/proc/[0-9]*"):
        try:
            if os.readlink(f"{p}/root") == str(root):
                cmd = Path(p, "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                out.append(f"{p.rsplit('/', 1)[1]}: {cmd}")
        except OSError:
            continue
    return out


def _uid_in(root: Path, user: str) -> int:
    for line in (root / "etc/passwd").read_text().splitlines():
        f = line.split(":")
        if f[0] == user:
            return int(f[2])
    raise AssertionError(f"no user {user} in {root}/etc/passwd")


# ---------------------------------------------------------------- install phase, layer by layer

@pytest.mark.parametrize("role", ROLES)
def test_install_layer_changes_the_tree(lab, role):
    """Each role's install phase, as ctk builds its layer (layer.yml). Run once: that a second
    run changes nothing is asked of every role at once by site.yml below, and of each role's
    layer.yml run by tests/integration/test_image_build.py (on the built Debian 13 image)."""
    i = ROLES.index(role)
    lab.need(*(f"install:{r}" for r in ROLES[:i]))
    lab.failed.append(f"install:{role}")  # until proven otherwise

    first = lab.layer(role, "install")
    lab.timings[f"install {role}"] = first.seconds
    assert first.returncode == 0 and first.recap and first.recap.failed == 0, _explain(first)
    # Else site.yml's changed=0 below would prove nothing for it (a role that skipped all its tasks).
    assert first.recap.changed > 0, f"the first install of {role} changed nothing\n{_explain(first)}"
    lab.recaps[f"install {role}"] = (first.recap, None)
    lab.failed.remove(f"install:{role}")


def test_install_phase_bakes_no_secret_config_or_daemon(lab):
    lab.need(*(f"install:{r}" for r in ROLES))
    root = lab.root
    assert not (root / "etc/munge/munge.key").exists(), "the package's munge key is left in the image"
    assert not (root / "etc/slurm/slurm.conf").exists()
    assert not list((root / "etc/ssh").glob("ssh_host_*")), "SSH host keys are left in the image"
    assert _processes_inside(root) == [], "a daemon was started inside the image"
    assert not list((root / "var/cache/apt/archives").glob("*.deb")), "downloaded .deb files left in the image"
    # The image has what the phase promises.
    assert (root / "usr/sbin/munged").exists()
    assert (root / "usr/sbin/slurmd").exists() or (root / "usr/sbin/slurmd-wlm").exists()
    assert (root / "usr/sbin/slurmctld").exists()
    slurm = _uid_in(root, "slurm")
    assert slurm == 64030
    for d in ("var/spool/slurmctld", "var/spool/slurmd", "var/log/slurm"):
        assert (root / d).stat().st_uid == slurm, d
    profile = (root / "etc/profile.d/ctk-jax.sh").read_text()
    assert "/opt/ctk/jax/bin" in profile
    assert (root / "etc/localtime").resolve().name == "UTC"


def test_whole_site_install_is_already_done(lab):
    """site.yml (every role, one run) finds nothing left to do after the layers: no role's
    install changes anything a second time (the changed tasks are named by role)."""
    lab.need(*(f"install:{r}" for r in ROLES))
    run = lab.play("site.yml", {**lab.install_vars, "ctk_phase": "install"})
    lab.timings["site.yml install (rerun)"] = run.seconds
    assert run.returncode == 0 and run.recap, _explain(run)
    lab.recaps["site.yml install"] = (None, run.recap)
    assert run.recap.changed == 0, f"changed: {run.changed_tasks()}\n{_explain(run)}"


# ---------------------------------------------------------------- configure phase

@pytest.mark.parametrize("role", ROLES)
def test_configure_layer_applies(lab, role):
    """Each role's configure phase, as a node is configured; run once (site.yml's run below
    asks that a second one changes nothing)."""
    lab.need(*(f"install:{r}" for r in ROLES))
    i = ROLES.index(role)
    lab.need(*(f"configure:{r}" for r in ROLES[:i]))
    lab.failed.append(f"configure:{role}")

    first = lab.layer(role, "configure")
    lab.timings[f"configure {role}"] = first.seconds
    assert first.returncode == 0 and first.recap and first.recap.failed == 0, _explain(first)
    lab.recaps[f"configure {role}"] = (first.recap, None)
    lab.failed.remove(f"configure:{role}")


def test_configured_node(lab):
    lab.need(*(f"configure:{r}" for r in ROLES))
    root = lab.root

    key = root / "etc/munge/munge.key"
    st = key.stat()
    assert stat.S_IMODE(st.st_mode) == 0o400
    assert st.st_uid == _uid_in(root, "munge")
    assert key.read_bytes() == lab.key.read_bytes()
    for d, mode in (("etc/munge", 0o700), ("var/lib/munge", 0o711), ("var/log/munge", 0o700),
                    ("run/munge", 0o755)):
        s = (root / d).stat()
        assert (s.st_uid, stat.S_IMODE(s.st_mode)) == (_uid_in(root, "munge"), mode), d

    conf = root / "etc/slurm/slurm.conf"
    assert conf.read_text() == SLURM_CONF
    assert stat.S_IMODE(conf.stat().st_mode) == 0o644
    assert (root / "etc/slurm/cgroup.conf").read_text() == CGROUP_CONF
    assert not (root / "etc/slurm/gres.conf").exists()

    hosts = (root / "etc/hosts").read_text()
    assert re.search(r"^127\.0\.10\.2\s+ctk-compute-0 c0$", hosts, re.M), hosts
    assert _uid_in(root, "ctkuser") == 2345
    assert (root / "etc/ssh/ssh_host_ed25519_key").exists()
    assert _processes_inside(root) == [], "configure started a daemon (ctk starts them, not Ansible)"

    jax = rh.chroot_run(root, ["/opt/ctk/jax/bin/python", "-c", "import jax; print(jax.__version__)"])
    assert jax.returncode == 0, jax.stderr
    assert jax.stdout.strip() == lab.pins["jax"]

    slurmd = rh.chroot_run(root, ["slurmd", "-V"])
    assert slurmd.returncode == 0, slurmd.stderr
    assert re.match(r"^slurm(-wlm)? \d+\.\d+\.\d+", slurmd.stdout.strip()), slurmd.stdout


def test_site_configure_is_already_done(lab):
    """site.yml's configure phase, every role, finds nothing left to do after each role's."""
    lab.need(*(f"configure:{r}" for r in ROLES))
    run = lab.play("site.yml", {**lab.configure_vars, "ctk_phase": "configure"})
    assert run.returncode == 0 and run.recap, _explain(run)
    lab.recaps["site.yml configure"] = (None, run.recap)
    assert run.recap.changed == 0, f"changed: {run.changed_tasks()}\n{_explain(run)}"


def test_gres_conf_follows_the_cluster_folder(lab):
    """A gres.conf that appears is copied; one that goes away is removed from the node."""
    lab.need(*(f"configure:{r}" for r in ROLES))
    gres = lab.conf_dir / "gres.conf"
    gres.write_text("NodeName=ctk-compute-0 Name=gpu Count=2\n")
    try:
        run = lab.layer("slurm", "configure")
        assert run.returncode == 0, _explain(run)
        assert (lab.root / "etc/slurm/gres.conf").read_text() == gres.read_text()
    finally:
        gres.unlink()
    run = lab.layer("slurm", "configure")
    assert run.returncode == 0, _explain(run)
    assert not (lab.root / "etc/slurm/gres.conf").exists()


# ---------------------------------------------------------------- refusals

def test_configure_without_a_munge_key_is_refused(lab):
    lab.need(*(f"install:{r}" for r in ROLES))
    extra = {**lab.configure_vars, "munge_key_src": "", "ctk_role": "munge", "ctk_phase": "configure"}
    run = lab.play("layer.yml", extra)
    assert run.returncode != 0
    assert "set munge_key_src" in run.output


def test_short_munge_key_is_refused(lab):
    lab.need(*(f"install:{r}" for r in ROLES))
    short = lab.work / "short.key"
    short.write_bytes(b"x" * 8)
    extra = {**lab.configure_vars, "munge_key_src": str(short), "ctk_role": "munge", "ctk_phase": "configure"}
    run = lab.play("layer.yml", extra)
    assert run.returncode != 0
    assert "at least 32 bytes" in run.output


def test_unknown_role_or_phase_is_refused(lab):
    for extra in ({"ctk_role": "nosuchrole", "ctk_phase": "install"},
                  {"ctk_role": "munge", "ctk_phase": "deploy"}):
        run = lab.play("layer.yml", extra)
        assert run.returncode != 0, extra
        assert "pass -e ctk_role=ROLE" in run.output, run.output[-3000:]


def test_range_pins_are_refused(lab):
    lab.need("install:common")
    extra = {**lab.install_vars, "jax_stack_pins": {"jax": ">=0.4"}, "ctk_role": "jax", "ctk_phase": "install"}
    run = lab.play("layer.yml", extra)
    assert run.returncode != 0
    assert "exact" in run.output


def test_a_stack_without_a_lock_for_the_trees_python_is_refused(lab):
    lab.need("install:common")
    extra = {**lab.install_vars, "jax_stack_locks": {"3.13": "jax==0.12.0.1\n"}, "ctk_role": "jax",
             "ctk_phase": "install"}
    run = lab.play("layer.yml", extra)
    assert run.returncode != 0
    assert f"stack '{STACK}' has no lock for Python 3.11" in run.output, run.output[-3000:]
    assert f"ctk stack lock {STACK} --python 3.11" in run.output
