"""ctk job submit/status/logs/cancel/list without a cluster: the Slurm calls ctk builds (one
batched squeue for any number of jobs), the registry, log paths and bad input."""

import json
import os
import threading

import pytest

from ctk.cli import main
from ctk.errors import UserError
from ctk.jobs import commands, registry, scheduler
from ctk.jobs.clusters import Cluster, LocalCluster, Result


def test_states_asks_squeue_once_for_every_job():
    argv = scheduler.states_argv(["11", "12", "13"])
    assert argv == ["squeue", "-h", "--states=all", "-j", "11,12,13", "-o", "%i|%T|%r"]


def test_parse_states_marks_forgotten_jobs_unknown_and_maps_array_tasks():
    out = "11|RUNNING\n12|COMPLETED\n20_1|COMPLETED\n20_[2-3]|PENDING\n21_0|COMPLETED\n21_1|FAILED\n" \
          "22_0|COMPLETED\n22_1|COMPLETED\n23_0|COMPLETED\n23_[1]|PENDING\n23_2|RUNNING\n"
    assert scheduler.parse_states(out, ["11", "12", "13", "20", "21", "22", "23", "20_1"]) == {
        "11": "RUNNING", "12": "COMPLETED", "13": "UNKNOWN", "20": "PENDING", "21": "FAILED",
        "22": "COMPLETED", "23": "RUNNING", "20_1": "COMPLETED"}


class Rec(Cluster):
    """A cluster that records the Slurm commands ctk runs and answers from ANSWERS(argv) ->
    (stdout, returncode, stderr); its files live in a folder (for the call-counting tests)."""

    def __init__(self, root, answers, jobs_dir="/home/.ctk-jobs", forgotten=None):
        self.calls, self.answers, self.root = [], answers, str(root)
        self.key = self.registry_dir = str(root)
        self.jobs_dir = jobs_dir
        self._forgotten = forgotten or {}

    def run(self, argv, timeout=30, stdin=None):
        self.calls.append(list(argv))
        out, rc, err = self.answers(argv)
        return Result(rc, out, err)

    def put_script(self, text, name):
        path = f"{self.jobs_dir}/{name}-{len(self.calls)}.sbatch"
        self.calls.append(["put", path, text])
        return path

    def forgotten(self, ids):
        self.calls.append(["forgotten", *ids])
        return {j: self._forgotten[j] for j in ids if j in self._forgotten}


@pytest.fixture
def dep(tmp_path):
    d = tmp_path / "dep"
    d.mkdir()
    return str(d)


def use(monkeypatch, cluster):
    monkeypatch.setattr(commands, "cluster_of", lambda args: cluster)
    return cluster


def test_status_of_1000_jobs_is_one_squeue_call(dep, monkeypatch, capsys):
    for i in range(1000):
        registry.append(dep, {"id": str(1000 + i), "template": "jax-smoke", "command": []})
    c = use(monkeypatch, Rec(dep, lambda argv: ("".join(f"{j}|COMPLETED\n" for j in argv[4].split(",")[:500]), 0, "")))
    assert main(["job", "status", "--deployment", dep, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    slurm = [x for x in c.calls if x[0] != "forgotten"]
    assert len(slurm) == 1 and slurm[0][0] == "squeue"
    assert len(rows) == 1000
    assert {r["state"] for r in rows[:500]} == {"COMPLETED"} and {r["state"] for r in rows[500:]} == {"UNKNOWN"}
    # the 500 jobs squeue no longer lists were asked about once, together
    assert [x[0] for x in c.calls].count("forgotten") == 1 and len(c.calls[1]) == 501


def test_final_states_are_remembered_for_when_slurm_forgets(dep, monkeypatch, capsys):
    registry.append(dep, {"id": "5", "template": "jax-smoke", "command": []})
    registry.append(dep, {"id": "6", "template": "jax-smoke", "command": []})
    use(monkeypatch, Rec(dep, lambda argv: ("5|COMPLETED\n6|RUNNING\n", 0, "")))
    assert main(["job", "status", "--deployment", dep]) == 0
    # later: squeue lists neither; 5 is known from the registry, 6 from the completion log
    c = use(monkeypatch, Rec(dep, lambda argv: ("", 1, "Invalid job id specified"), forgotten={"6": ("FAILED", 3)}))
    capsys.readouterr()
    assert main(["job", "status", "--deployment", dep, "--json"]) == 0
    assert {r["id"]: r["state"] for r in json.loads(capsys.readouterr().out)} == {"5": "COMPLETED", "6": "FAILED"}
    assert c.calls[0] == scheduler.states_argv(["6"]) and c.calls[1] == ["forgotten", "6"]
    assert registry.get(dep, "5")["final_state"] == "COMPLETED" and registry.get(dep, "5")["template"] == "jax-smoke"


def test_squeue_invalid_job_id_means_unknown(dep):
    c = Rec(dep, lambda argv: ("", 1, "slurm_load_jobs error: Invalid job id specified"))
    assert scheduler.states(c, ["5"]) == {"5": "UNKNOWN"}


def test_squeue_failure_is_an_error(dep):
    with pytest.raises(scheduler.SlurmError, match="contact"):
        scheduler.states(Rec(dep, lambda argv: ("", 1, "Unable to contact slurm controller")), ["5"])


def test_exit_code_from_scontrol_then_the_completion_log(dep):
    answers = {"1": "JobId=1 JobState=COMPLETED ExitCode=0:0", "2": "JobId=2 JobState=FAILED ExitCode=3:0",
               "3": "JobId=3 JobState=CANCELLED ExitCode=0:15"}
    c = Rec(dep, lambda argv: (answers[argv[-1]], 0, "") if argv[-1] in answers else ("", 1, "Invalid job id"),
            forgotten={"5": ("FAILED", 7)})
    assert [scheduler.exit_code(c, j) for j in ("1", "2", "3", "4", "5")] == [0, 3, 143, None, 7]


def test_sacct_answers_for_forgotten_jobs_in_one_call(dep):
    c = Rec(dep, lambda argv: ("11|COMPLETED|0:0\n12|CANCELLED by 0|0:15\n", 0, ""))
    assert Cluster._sacct(c, ["11", "12", "13"]) == {"11": ("COMPLETED", 0), "12": ("CANCELLED", 143)}
    assert c.calls == [["sacct", "-n", "-P", "-X", "-j", "11,12,13", "-o", "JobIDRaw,State,ExitCode"]]
    no_acct = Rec(dep, lambda argv: ("", 1, "Slurm accounting storage is disabled"))
    assert Cluster._sacct(no_acct, ["11"]) == {}


def test_submit_stores_the_script_and_parses_the_id(dep):
    c = Rec(dep, lambda argv: ("4242;lab\n", 0, ""))
    jid, path = scheduler.submit(c, "#!/bin/bash\ntrue\n", ["--hold"], name="jax-smoke")
    assert jid == "4242" and path.startswith("/home/.ctk-jobs/jax-smoke-")
    assert c.calls == [["put", path, "#!/bin/bash\ntrue\n"],
                       ["sbatch", "--parsable", "--chdir=/home/.ctk-jobs", "--hold", path]]
    with pytest.raises(scheduler.SlurmError, match="not a job id"):
        scheduler.submit(Rec(dep, lambda argv: ("oops", 0, "")), "x")


def _lab_state(dep, user="researcher"):
    os.makedirs(os.path.join(dep, "lab", "home", user, ".ctk-jobs"))
    with open(os.path.join(dep, "lab", "state.json"), "w") as f:
        json.dump({"n": 1, "nodes": [], "user": user}, f)


def test_lab_jobs_live_in_the_lab_users_home_and_logs_are_read_without_following_links(dep, tmp_path, monkeypatch):
    monkeypatch.delenv("CTK_LAB_USER", raising=False)
    _lab_state(dep)
    c = LocalCluster(dep)
    assert (c.user, c.jobs_dir) == ("researcher", "/home/researcher/.ctk-jobs")
    jobs = os.path.join(dep, "lab", "home", "researcher", ".ctk-jobs")
    with open(os.path.join(jobs, "a.out"), "w") as f:
        f.write("two")
    assert c.host_path("/home/researcher/.ctk-jobs/a.out") == os.path.join(jobs, "a.out") == c.host_path("a.out")
    assert c.read("a.out") == b"two" and c.read("/home/researcher/.ctk-jobs/a.out", 1) == b"wo"
    assert c.read("/home/none") == b"" and c.host_path("/tmp/x.out") is None and c.read("/tmp/x.out") == b""
    # A job that swaps its log, or a folder on the way, for a link to a host file gets nothing back.
    secret = tmp_path / "host-secret"
    secret.write_text("host's")
    os.symlink(secret, os.path.join(jobs, "b.out"))
    os.symlink(str(tmp_path), os.path.join(jobs, "up"))
    os.mkfifo(os.path.join(jobs, "c.out"))
    assert c.read("b.out") == b"" and c.read("up/host-secret") == b"" and c.read("../../../../host-secret") == b""
    assert c.read("c.out") == b""  # a FIFO would hang the reader
    monkeypatch.setenv("CTK_LAB_USER", "root")
    assert LocalCluster(dep).jobs_dir == "/root/.ctk-jobs"


def test_local_completion_log_gives_the_last_run_of_a_requeued_job(dep, monkeypatch):
    from ctk.targets import labclient
    log = labclient.jobcomp_log(dep)
    os.makedirs(os.path.dirname(log))
    with open(log, "w") as f:
        f.write("JobId=7 UserId=root(0) JobState=NODE_FAIL Partition=debug ExitCode=0:0\n"
                "JobId=8 UserId=root(0) JobState=COMPLETED ExitCode=0:0\n"
                "JobId=7 UserId=root(0) JobState=COMPLETED Partition=debug ExitCode=0:0\n"
                "JobId=9 UserId=root(0) JobState=FAILED ExitCode=2:0\n")
    assert LocalCluster(dep).forgotten(["7", "9", "10"]) == {"7": ("COMPLETED", 0), "9": ("FAILED", 2)}


def test_log_paths_follow_the_scripts_output_lines(dep):
    c = Rec(dep, None)
    script = "#!/bin/bash\n#SBATCH --job-name=jax-smoke\n#SBATCH --output=./%x-%j.out\n#SBATCH --error=./%x-%j.err\n"
    assert scheduler.log_paths(c, script, "7") == ("/home/.ctk-jobs/jax-smoke-7.out", "/home/.ctk-jobs/jax-smoke-7.err")
    assert scheduler.log_paths(c, "#!/bin/bash\n#SBATCH --output=/home/logs/%j.txt\n", "8") == (
        "/home/logs/8.txt", "/home/logs/8.txt")
    assert scheduler.log_paths(c, "#!/bin/bash\n", "9")[0] == "/home/.ctk-jobs/slurm-9.out"
    remote = Rec(dep, None, jobs_dir="/home/alice/.ctk-jobs")
    assert scheduler.log_paths(remote, script, "7")[0] == "/home/alice/.ctk-jobs/jax-smoke-7.out"


def test_array_log_paths_name_each_task():
    script = "#SBATCH --job-name=sweep\n#SBATCH --array=0-2%2\n#SBATCH --output=./%x-%A_%a.out\n"
    c = Rec("/x", None)
    assert scheduler.array_tasks(script) == ["0", "1", "2"]
    assert scheduler.log_paths(c, script, "40", task="1")[0] == "/home/.ctk-jobs/sweep-40_1.out"
    assert scheduler.log_paths(c, script, "40", task="%a")[0] == "/home/.ctk-jobs/sweep-40_%a.out"
    assert scheduler.array_tasks("#SBATCH --array=1,5,10-14:2\n") == ["1", "5", "10", "12", "14"]
    assert scheduler.array_tasks("#!/bin/bash\n") == []


def test_array_job_logs_are_read_per_task(dep):
    from ctk.jobs import api
    c = LocalCluster(dep)
    os.makedirs(os.path.join(dep, "lab", "home", ".ctk-jobs"))
    for t in ("0", "1"):
        with open(os.path.join(dep, "lab", "home", ".ctk-jobs", f"sweep-40_{t}.out"), "w") as f:
            f.write(f"task {t}\n")
    job = api.Job("40", c, {"id": "40", "array_tasks": ["0", "1", "2"],
                             "stdout": "/home/.ctk-jobs/sweep-40_%a.out", "stderr": "/home/.ctk-jobs/sweep-40_%a.err"})
    assert job.logs(task="1") == "task 1\n"
    assert job.logs() == "==> 40_0 <==\ntask 0\n==> 40_1 <==\ntask 1\n"


def test_registry_appends_concurrently_without_tearing_lines(dep):
    def work(k):
        for i in range(50):
            registry.append(dep, {"id": f"{k}{i:03d}", "params": {"pad": "x" * 5000}})
    threads = [threading.Thread(target=work, args=(k,)) for k in range(1, 5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    recs = registry.load(dep)
    assert len(recs) == 200 and all(r["params"]["pad"] == "x" * 5000 for r in recs)
    assert registry.get(dep, "1007")["id"] == "1007"
    with pytest.raises(UserError, match="not submitted through ctk"):
        registry.get(dep, "999")


def test_unknown_job_and_missing_deployment_exit_2(dep, monkeypatch, capsys):
    assert main(["job", "list", "--deployment", os.path.join(dep, "nope")]) == 2
    monkeypatch.setenv("PATH", dep)  # no sbatch here: no cluster of this machine either
    assert main(["job", "list"]) == 2
    assert "this machine has no Slurm commands" in capsys.readouterr().err
    monkeypatch.undo()
    assert main(["job", "submit", "jax-smoke", "--deployment", dep]) == 2
    assert "no deployment.json" in capsys.readouterr().err
    assert main(["job", "list", "--identity", "/k"]) == 2
    assert "go with --host" in capsys.readouterr().err
    assert main(["job", "render", "jax-smoke", "--host", "a@b"]) == 2
    assert "go with --check" in capsys.readouterr().err
    assert main(["job", "status", "--host", "a b"]) == 2
    assert "expected USER@HOST" in capsys.readouterr().err
    use(monkeypatch, Rec(dep, lambda argv: ("", 0, "")))
    assert main(["job", "logs", "123", "--deployment", dep]) == 2
    assert "not submitted through ctk" in capsys.readouterr().err
    assert main(["job", "cancel", "123", "--deployment", dep]) == 2
    assert main(["job", "status", "123", "--deployment", dep]) == 2
    registry.append(dep, {"id": "40", "template": "array", "array_tasks": ["0", "1"], "stdout": "a", "stderr": "b"})
    assert main(["job", "logs", "40_7", "--deployment", dep]) == 2
    assert "has no array task '7'" in capsys.readouterr().err


def test_list_of_an_empty_registry(dep, monkeypatch, capsys):
    use(monkeypatch, Rec(dep, None))
    assert main(["job", "list", "--deployment", dep]) == 0
    assert capsys.readouterr().out == "(no jobs)\n"


def test_submit_command_words_after_double_dash_reach_the_api(dep, monkeypatch, capsys):
    seen = {}
    c = use(monkeypatch, Rec(dep, None))

    class J:
        id = "77"

    def fake_submit(template, params, cluster, command=(), nodeset=None, extra_args=(), deployment=None, options=None,
                    chdir=None):
        seen.update(template=template, params=params, cluster=cluster, command=list(command), nodeset=nodeset)
        return J()
    monkeypatch.setattr("ctk.jobs.api.submit", fake_submit)
    rc = main(["job", "submit", "jax-smoke", "--deployment", dep, "--nodes", "2", "--set", "partition=debug",
               "--", "python3", "-c", "print('--set')"])
    assert rc == 0 and capsys.readouterr().out == "77\n"
    assert seen == {"template": "jax-smoke", "params": {"partition": "debug", "nodes": "2"}, "cluster": c,
                    "command": ["python3", "-c", "print('--set')"], "nodeset": None}


def test_wait_backs_off_from_0_2_to_5_seconds(monkeypatch, tmp_path):
    from ctk.jobs import api
    sleeps = []
    states = iter(["PENDING"] * 8 + ["COMPLETED"])
    monkeypatch.setattr(api.scheduler, "details", lambda c, ids, known=None: {ids[0]: (next(states), "")})
    monkeypatch.setattr(api.scheduler, "exit_code", lambda c, j: 0)
    monkeypatch.setattr(api.time, "sleep", sleeps.append)
    job = api.Job("1", Rec(tmp_path, None), {"id": "1"})
    assert job.wait() == "COMPLETED"
    assert sleeps == [0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0, 5.0]


@pytest.mark.parametrize("requeue,expected", [(True, "COMPLETED"), (False, "NODE_FAIL")])
def test_a_requeueable_job_is_followed_through_a_node_failure(monkeypatch, tmp_path, requeue, expected):
    from ctk.jobs import api
    states = iter(["RUNNING", "NODE_FAIL", "PENDING", "RUNNING", "COMPLETED"])
    monkeypatch.setattr(api.scheduler, "details", lambda c, ids, known=None: {ids[0]: (next(states), "")})
    monkeypatch.setattr(api.scheduler, "exit_code", lambda c, j: 0)
    monkeypatch.setattr(api.time, "sleep", lambda s: None)
    rec = {"id": "1", "requeue": True} if requeue else {"id": "1"}
    assert api.Job("1", Rec(tmp_path, None), rec).wait() == expected


def test_requeue_is_read_from_the_script():
    assert scheduler.requeues("#!/bin/bash\n#SBATCH --requeue\n#SBATCH --open-mode=append\n")
    assert not scheduler.requeues("#!/bin/bash\n#SBATCH --no-requeue\n# --requeue\n")


def test_without_flags_jobs_go_to_this_machines_own_slurm(tmp_path, monkeypatch, capsys):
    from ctk.jobs.clusters import HereCluster, open_cluster
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    conf = tmp_path / "site" / "slurm.conf"  # check() wants the file SLURM_CONF names to exist
    conf.parent.mkdir()
    conf.write_text("ClusterName=site\nSlurmctldHost=ctl(10.0.0.9)\n")
    monkeypatch.setenv("SLURM_CONF", str(conf))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text("#!/bin/sh\necho 31\n")
    (bin_dir / "sbatch").chmod(0o755)
    (bin_dir / "sinfo").write_text("#!/bin/sh\necho 'debug*|2:00:00|2|2|3000|(null)'\n")  # what the job is checked against
    (bin_dir / "sinfo").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    (tmp_path / "home").mkdir()
    monkeypatch.chdir(tmp_path / "home")  # jobs run where they are submitted from (sbatch's default)
    c = open_cluster()
    assert isinstance(c, HereCluster) and c.key == f"here:{conf}"
    assert c.jobs_dir == str(tmp_path / "home" / ".ctk-jobs")
    # the registry of cluster site (its name and controller: a cluster ctk did not make)
    assert c.registry_dir == str(tmp_path / "state" / "ctk" / "clusters" / "site@ctl")
    assert main(["job", "submit", "jax-train", "--", "true"]) == 0
    assert capsys.readouterr().out == "31\n"
    rec = registry.load(c.registry_dir)[0]
    assert rec["cluster"] == f"here:{conf}" and rec["stdout"] == str(tmp_path / "home" / "jax-train-31.out")
    assert open(rec["script"]).read().startswith("#!/bin/bash\n")


def test_submit_passes_sbatch_options_and_prints_the_record_as_json(dep, monkeypatch, capsys):
    c = use(monkeypatch, Rec(dep, lambda argv: ("88\n", 0, "")))
    assert main(["job", "submit", "jax-train", "--deployment", dep, "--sbatch=--hold",
                 "--sbatch=--dependency=afterok:12", "--json", "--", "true"]) == 0
    rec = json.loads(capsys.readouterr().out)
    assert rec["id"] == "88" and rec["template"] == "jax-train" and rec["command"] == ["true"]
    sbatch = [x for x in c.calls if x[0] == "sbatch"][0]
    assert sbatch[3:5] == ["--hold", "--dependency=afterok:12"]
    assert main(["job", "submit", "jax-train", "--deployment", dep, "--sbatch", "hold", "--", "true"]) == 2
    assert "an sbatch option" in capsys.readouterr().err


def test_ssh_cluster_names_and_host_key_policy(tmp_path, monkeypatch):
    import paramiko

    from ctk.jobs.clusters import SshCluster
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no ~/.ssh/config, no known_hosts
    c = SshCluster("alice@login.example.org:2222")
    assert c.key == "ssh://alice@login.example.org:2222"
    assert not isinstance(c.conn.client._policy, paramiko.RejectPolicy)  # Fabric's default: accept
    kh = tmp_path / "known_hosts"
    kh.write_text("")
    strict = SshCluster("root@10.0.0.5", known_hosts=str(kh))
    assert isinstance(strict.conn.client._policy, paramiko.RejectPolicy)
    assert strict.key == "ssh://root@10.0.0.5:22"


# ---- no cluster named, none configured here -----------------------------------------------

def _ctk(*argv, **env):
    import subprocess
    import sys

    from conftest import ROOT

    e = {k: v for k, v in os.environ.items() if k != "SLURM_CONF"}
    e.update(env, PYTHONPATH=os.path.join(ROOT, "toolkit"))
    return subprocess.run([sys.executable, "-m", "ctk", *argv], env=e, capture_output=True, text=True, timeout=120)


@pytest.mark.skipif(not __import__("shutil").which("sbatch"), reason="needs Slurm's commands on PATH")
def test_submit_with_slurm_conf_pointing_nowhere_says_so(tmp_path):
    missing = str(tmp_path / "no" / "slurm.conf")
    r = _ctk("job", "submit", "jax-smoke", SLURM_CONF=missing, HOME=str(tmp_path))
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.startswith(f"error: this machine has no Slurm cluster configured: SLURM_CONF={missing} does not exist")
    assert "hint: --deployment DIR (a deployment ctk made) or --host USER@HOST" in r.stderr


@pytest.mark.skipif(not __import__("shutil").which("sbatch") or os.path.exists("/etc/slurm/slurm.conf"),
                    reason="needs Slurm's commands on a machine with no slurm.conf of its own")
def test_submit_on_a_machine_without_a_cluster_says_so(tmp_path):
    """The real sbatch, with no slurm.conf and no DNS SRV record: its 'DNS SRV lookup failed'
    becomes a plain sentence and the flags that name a cluster."""
    r = _ctk("job", "submit", "jax-smoke", HOME=str(tmp_path))
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.startswith("error: this machine has no Slurm cluster configured (no /etc/slurm/slurm.conf")
    assert "DNS SRV" not in r.stderr and "hint: --deployment DIR" in r.stderr


def test_status_of_an_unknown_job_here_hints_a_plain_job_list(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    assert main(["job", "status", "1"]) == 2
    err = capsys.readouterr().err
    assert err.endswith("hint: ctk job list\n") and "None" not in err
