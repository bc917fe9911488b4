"""The slurm role's OCI runtime (files/ctk-oci-runtime): how it adapts a bundle's config.json
for the job's user, and the state folder it refuses. Its real runs (runc in lab nodes through
srun --container) are in tests/integration/test_containers.py."""

import os

import pytest

from conftest import load_program
from ctk import paths

PATH = os.path.join(paths.ANSIBLE, "roles", "slurm", "files", "ctk-oci-runtime")


RT = load_program(PATH, "ctk_oci_runtime")

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
               {"destination": "/opt/data", "type": "bind", "source": "/srv/data", "options": ["rbind"]},
               # as Slurm adds a batch step's script (IgnoreFileConfigJson off)
               {"destination": "/tmp/slurm/startup", "type": "bind", "source": "/var/spool/slurmd/s",
                "options": ["bind"]}],
    "linux": {"namespaces": [{"type": t} for t in ("pid", "ipc", "uts", "mount", "user", "network")],
              "uidMappings": [{"containerID": 0, "hostID": 1000, "size": 1}],
              "resources": {"devices": [{"allow": False, "access": "rwm"}]}, "cgroupsPath": "/x"},
}


def test_the_container_keeps_only_its_user_and_mount_namespaces_and_maps_the_user_alone():
    c = RT.adapt(SPEC, "/var/lib/ctk/containers/jax-cpu", 1900000, 1900001, "/home/researcher/run")
    assert c["process"]["cwd"] == "/home/researcher/run"
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
    order = [m["destination"] for m in c["mounts"]]
    by_dest = {m["destination"]: m for m in c["mounts"]}
    assert by_dest["/proc"] == {**by_dest["/proc"], "type": "bind", "source": "/proc"}
    assert "noexec" in by_dest["/proc"]["options"] or not os.statvfs("/proc").f_flag & os.ST_NOEXEC
    assert "ro" in by_dest["/sys"]["options"]
    assert "/dev/mqueue" not in by_dest and "/sys/fs/cgroup" not in by_dest  # they need namespaces it has not
    for d in ("/home", "/etc/hosts", "/etc/passwd"):
        assert by_dest[d]["source"] == d and {"rbind", "nosuid", "nodev"} <= set(by_dest[d]["options"])
    assert "ro" in by_dest["/etc/passwd"]["options"] and "ro" not in by_dest["/home"]["options"]
    assert order.count("/proc") == 1 and order.index("/dev") < order.index("/dev/shm")


def test_the_containers_tmp_and_run_are_its_own_under_slurms_and_the_bundles_mounts():
    """Slurm binds a batch step's script at /tmp/slurm/startup: on the node's shared /tmp,
    another user could make /tmp/slurm first, and the node's /tmp bound after it would hide it.
    The container's /tmp is a tmpfs of its own, and what the bundle and Slurm mount goes on top."""
    c = RT.adapt(SPEC, "/b", 1000, 1000, "/tmp/job")
    order = [m["destination"] for m in c["mounts"]]
    by_dest = {m["destination"]: m for m in c["mounts"]}
    assert by_dest["/tmp"]["type"] == "tmpfs" and by_dest["/run"]["type"] == "tmpfs"
    assert order.index("/tmp") < order.index("/tmp/slurm/startup") and order.index("/run") < order.index("/opt/data")
    assert order[-2:] == ["/opt/data", "/tmp/slurm/startup"]  # the bundle's own, last, in their order
    assert c["process"]["cwd"] == "/"  # /tmp is not the node's: the step's folder there is not shared


def test_a_device_file_is_bound_without_nodev_which_would_not_open_it():
    assert "nodev" not in RT.bind("/dev/null", "/dev/nvidia0", device=True)["options"] or \
        os.statvfs("/dev/null").f_flag & os.ST_NODEV
    assert "nodev" in RT.bind("/home", "/home")["options"]


def test_the_runtime_never_runs_a_container_as_root_and_names_its_user(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        RT.main(["run", "x", "-b", str(tmp_path)])  # no --uid
    assert e.value.code == 125 and "--uid UID" in capsys.readouterr().err
    if os.geteuid() == 0:
        with pytest.raises(SystemExit) as e:
            RT.become(0)
        assert e.value.code == 125 and "never as root" in capsys.readouterr().err
    else:
        with pytest.raises(SystemExit) as e:
            RT.become(os.getuid() + 1)
        assert e.value.code == 125 and "only for itself" in capsys.readouterr().err


def test_a_state_folder_another_user_could_reach_is_refused(tmp_path, capsys):
    mine = tmp_path / f"ctk-oci-{os.getuid()}"
    assert RT.state_dir(str(tmp_path)) == str(mine)
    assert oct(mine.stat().st_mode & 0o777) == "0o700"
    mine.chmod(0o777)  # as if another user had made it for us
    with pytest.raises(SystemExit) as e:
        RT.state_dir(str(tmp_path))
    assert e.value.code == 125 and "not a folder of uid" in capsys.readouterr().err


@pytest.mark.parametrize("cid", ["", "../x", ".hidden", "a/b"])
def test_a_container_id_that_is_a_path_is_refused(cid, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(RT, "state_dir", lambda: str(tmp_path))
    monkeypatch.setattr(RT, "become", lambda uid: None)
    monkeypatch.setattr(RT.shutil, "which", lambda *a, **k: "/usr/sbin/runc")
    with pytest.raises(SystemExit) as e:
        RT.main(["--uid", "1000", "run", cid, "-b", str(tmp_path)] if cid else ["--uid", "1000", "run", "-b", str(tmp_path)])
    assert e.value.code == 125 and "not a container id" in capsys.readouterr().err


def test_each_run_forgets_the_configs_of_containers_runc_no_longer_has(tmp_path):
    for name in ("ended", "running"):
        (tmp_path / "bundles" / name).mkdir(parents=True)
        (tmp_path / "bundles" / name / "config.json").write_text("{}")
    (tmp_path / "running").mkdir()  # runc's own state folder of a live container
    RT.forget_ended(str(tmp_path))
    assert sorted(os.listdir(tmp_path / "bundles")) == ["running"]


# ---- the job's own mounts and working folder (pyxis's options, through ctk's srun) ----------

def with_env(**env):
    spec = dict(SPEC, process=dict(SPEC["process"], env=["PATH=/usr/bin"] + [f"{k}={v}" for k, v in env.items()]))
    return spec


def test_the_jobs_mounts_go_on_top_and_its_workdir_is_where_the_process_starts(tmp_path):
    rootfs = tmp_path / "bundle" / "rootfs"
    (rootfs / "opt").mkdir(parents=True)
    src = tmp_path / "job"
    src.mkdir()
    spec = with_env(CTK_CONTAINER_MOUNTS=f"{src}:/opt/job:ro,{src}", CTK_CONTAINER_WORKDIR="/opt/job/code/")
    c = RT.adapt(spec, str(tmp_path / "bundle"), 1900000, 1900000, "/home/r", str(tmp_path / "skel"))
    assert c["root"]["path"] == str(rootfs)  # /opt is the image's: no root of the user's needed
    assert not (tmp_path / "skel").exists()
    mine = [m for m in c["mounts"] if m["source"] == str(src)]
    assert [m["destination"] for m in mine] == ["/opt/job", str(src)]
    assert "ro" in mine[0]["options"] and "ro" not in mine[1]["options"] and "nosuid" in mine[0]["options"]
    assert c["mounts"][-2:] == mine  # after the node's and the bundle's, so over them
    assert c["process"]["cwd"] == "/opt/job/code"


def test_a_mount_on_a_folder_new_to_the_image_gets_a_root_of_the_users(tmp_path):
    rootfs = tmp_path / "bundle" / "rootfs"
    for d in ("usr/bin", "etc", "proc", "tmp"):
        (rootfs / d).mkdir(parents=True)
    (rootfs / "bin").symlink_to("usr/bin")
    (rootfs / "marker").write_text("")
    src = tmp_path / "job"
    src.mkdir()
    skel = tmp_path / "state" / "bundles" / "7.0" / "root"
    c = RT.adapt(with_env(CTK_CONTAINER_MOUNTS=f"{src}:/nemo_run"), str(tmp_path / "bundle"), 1900000, 1900000,
                 "/home/r", str(skel))
    assert c["root"]["path"] == str(skel)
    assert os.readlink(skel / "bin") == "usr/bin" and (skel / "proc").is_dir() and (skel / "tmp").is_dir()
    first = c["mounts"][:3]  # the image's own entries first, read-only, then everything else
    assert [(m["source"], m["destination"]) for m in first] == [
        (str(rootfs / "etc"), "/etc"), (str(rootfs / "marker"), "/marker"), (str(rootfs / "usr"), "/usr")]
    assert all("ro" in m["options"] for m in first)
    assert c["mounts"][-1]["destination"] == "/nemo_run" and c["mounts"][3]["destination"] == "/proc"


@pytest.mark.parametrize("spec,said", [
    ("relative:/x", "not an absolute path"),
    ("/srv/../etc:/x", "not an absolute path without '..'"),
    ("/tmp:/proc/x", "nothing is mounted on /proc/x"),
    ("/tmp:/", "nothing is mounted on /"),
    ("/tmp:/x:exec", "'exec' is not a flag"),
    ("/tmp:/x:ro:more", "not SRC[:DST[:ro|rw]]"),
    ("/no/such/folder:/x", "does not exist on this node"),
])
def test_a_bad_mount_is_refused_and_named(spec, said, capsys):
    with pytest.raises(SystemExit) as e:
        RT.adapt(with_env(CTK_CONTAINER_MOUNTS=spec), "/b", 1900000, 1900000, "/home/r", "/nonexistent/skel")
    assert e.value.code == 125 and said in capsys.readouterr().err


def test_a_relative_workdir_is_refused(capsys):
    with pytest.raises(SystemExit):
        RT.adapt(with_env(CTK_CONTAINER_WORKDIR="code"), "/b", 1900000, 1900000, "/home/r")
    assert "not an absolute path" in capsys.readouterr().err
