"""The slurm role's OCI runtime (files/ctk-oci-runtime): how it adapts a bundle's config.json
for the job's user, and the state folder it refuses. Its real runs (runc in lab nodes through
srun --container) are in tests/integration/test_containers.py."""

import importlib.machinery
import importlib.util
import os

import pytest

from ctk import paths

PATH = os.path.join(paths.ANSIBLE, "roles", "slurm", "files", "ctk-oci-runtime")


def load():
    loader = importlib.machinery.SourceFileLoader("ctk_oci_runtime", PATH)
    spec = importlib.util.spec_from_loader("ctk_oci_runtime", loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


RT = load()

# What `runc spec --rootless` writes (runc 1.1), trimmed to the parts the runtime changes.
SPEC = {
    "process": {"terminal": True, "user": {"uid": 0, "gid": 0}, "args": ["sh"], "cwd": "/",
                "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}],
                "capabilities": {"bounding": ["CAP_SYS_ADMIN"]}},
    "root": {"path": "rootfs", "readonly": True},
    "hostname": "runc",
    "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"},
               {"destination": "/dev", "type": "tmpfs", "source": "tmpfs"},
               {"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue"},
               {"destination": "/sys", "type": "none", "source": "/sys", "options": ["rbind", "ro"]},
               {"destination": "/sys/fs/cgroup", "type": "cgroup", "source": "cgroup"},
               {"destination": "/opt/data", "type": "bind", "source": "/srv/data", "options": ["rbind"]}],
    "linux": {"namespaces": [{"type": t} for t in ("pid", "ipc", "uts", "mount", "user", "network")],
              "uidMappings": [{"containerID": 0, "hostID": 1000, "size": 1}],
              "resources": {"devices": [{"allow": False, "access": "rwm"}]}, "cgroupsPath": "/x"},
}


def test_the_container_keeps_only_its_user_and_mount_namespaces_and_maps_the_user_alone():
    c = RT.adapt(SPEC, "/var/lib/ctk/containers/jax-cpu", 1900000, 1900001, "/home/researcher/run")
    assert c["linux"]["namespaces"] == [{"type": "user"}, {"type": "mount"}]
    assert c["linux"]["uidMappings"] == [{"containerID": 0, "hostID": 1900000, "size": 1}]
    assert c["linux"]["gidMappings"] == [{"containerID": 0, "hostID": 1900001, "size": 1}]
    assert c["process"]["user"] == {"uid": 0, "gid": 0} and c["process"]["noNewPrivileges"] is True
    assert set(c["process"]["capabilities"]["bounding"]) == {"CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"}
    assert "rlimits" not in c["process"] and "hostname" not in c
    assert not {"resources", "cgroupsPath"} & set(c["linux"])
    assert c["root"]["path"] == "/var/lib/ctk/containers/jax-cpu/rootfs"
    assert SPEC["linux"]["namespaces"][0] == {"type": "pid"}  # the bundle's own config is unchanged


def test_proc_sys_and_the_shared_folders_are_the_nodes_bound_with_their_own_flags():
    c = RT.adapt(SPEC, "/b", 1000, 1000, "/")
    by_dest = {m["destination"]: m for m in c["mounts"]}
    assert by_dest["/proc"] == {**by_dest["/proc"], "type": "bind", "source": "/proc"}
    assert "noexec" in by_dest["/proc"]["options"] or not os.statvfs("/proc").f_flag & os.ST_NOEXEC
    assert "ro" in by_dest["/sys"]["options"]
    assert "/dev/mqueue" not in by_dest and "/sys/fs/cgroup" not in by_dest  # they need namespaces it has not
    assert by_dest["/opt/data"]["source"] == "/srv/data"  # the bundle's own binds stay
    for d in ("/tmp", "/etc/hosts", "/etc/passwd"):
        assert by_dest[d]["source"] == d and {"rbind", "nosuid", "nodev"} <= set(by_dest[d]["options"])
    assert "ro" in by_dest["/etc/passwd"]["options"] and "ro" not in by_dest["/tmp"]["options"]
    assert [m["destination"] for m in c["mounts"]].count("/proc") == 1
    # a /run of its own where Slurm mounts the step's folder (/var/run/slurm) in a read-only root
    assert by_dest["/run"]["type"] == "tmpfs" and [m["destination"] for m in c["mounts"]].index("/run") == 1


def test_the_step_runs_in_its_folder_where_the_container_shares_it():
    assert RT.adapt(SPEC, "/b", 1000, 1000, "/tmp/job")["process"]["cwd"] == "/tmp/job"
    assert RT.adapt(SPEC, "/b", 1000, 1000, "/var/spool/slurmd")["process"]["cwd"] == "/"


def test_a_state_folder_another_user_could_reach_is_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    assert RT.state_dir() == str(tmp_path / "ctk-oci")
    assert oct((tmp_path / "ctk-oci").stat().st_mode & 0o777) == "0o700"
    (tmp_path / "ctk-oci").chmod(0o777)  # as if another user had made it for us
    with pytest.raises(SystemExit) as e:
        RT.state_dir()
    assert e.value.code == 125 and "not a folder of uid" in capsys.readouterr().err


@pytest.mark.parametrize("cid", ["", "../x", ".hidden", "a/b"])
def test_a_container_id_that_is_a_path_is_refused(cid, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    monkeypatch.setattr(RT.shutil, "which", lambda *a, **k: "/usr/sbin/runc")
    with pytest.raises(SystemExit) as e:
        RT.main(["run", cid, "-b", str(tmp_path)] if cid else ["run", "-b", str(tmp_path)])
    assert e.value.code == 125 and "not a container id" in capsys.readouterr().err
