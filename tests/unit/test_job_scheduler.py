"""ctk job submit/status/logs/cancel/list without a cluster: the Slurm calls ctk builds (one
batched squeue for any number of jobs), the registry, log paths and bad input."""

import json
import os
import subprocess
import threading

import pytest

from ctk.blueprint.errors import UserError
from ctk.cli import main
from ctk.jobs import commands, registry, scheduler


def test_states_asks_squeue_once_for_every_job():
    argv = scheduler.states_argv(["11", "12", "13"])
    assert argv == ["squeue", "-h", "--states=all", "-j", "11,12,13", "-o", "%i|%T"]


def test_parse_states_marks_forgotten_jobs_unknown_and_maps_array_tasks():
    out = "11|RUNNING\n12|COMPLETED\n20_1|PENDING\n20_2|RUNNING\n"
    assert scheduler.parse_states(out, ["11", "12", "13", "20"]) == {
        "11": "RUNNING", "12": "COMPLETED", "13": "UNKNOWN", "20": "PENDING"}


class FakeRun:
    def __init__(self, answers):
        self.calls, self.answers = [], answers

    def __call__(self, argv, **kw):
        self.calls.append(argv)
        out, rc, err = self.answers(argv)
        return subprocess.CompletedProcess(argv, rc, out, err)


@pytest.fixture
def dep(tmp_path):
    d = tmp_path / "dep"
    d.mkdir()
    return str(d)


def test_status_of_1000_jobs_is_one_squeue_call(dep, monkeypatch, capsys):
    for i in range(1000):
        registry.append(dep, {"id": str(1000 + i), "template": "jax-smoke", "command": []})
    fake = FakeRun(lambda argv: ("".join(f"{j}|COMPLETED\n" for j in argv[4].split(",")[:500]), 0, ""))
    monkeypatch.setattr(scheduler.subprocess, "run", fake)
    assert main(["job", "status", "--deployment", dep, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(fake.calls) == 1 and fake.calls[0][0] == "squeue"
    assert len(rows) == 1000
    assert {r["state"] for r in rows[:500]} == {"COMPLETED"} and {r["state"] for r in rows[500:]} == {"UNKNOWN"}


def test_squeue_invalid_job_id_means_unknown(dep, monkeypatch):
    monkeypatch.setattr(scheduler.subprocess, "run",
                        FakeRun(lambda argv: ("", 1, "slurm_load_jobs error: Invalid job id specified")))
    assert scheduler.states(dep, ["5"]) == {"5": "UNKNOWN"}


def test_squeue_failure_is_an_error(dep, monkeypatch):
    monkeypatch.setattr(scheduler.subprocess, "run",
                        FakeRun(lambda argv: ("", 1, "Unable to contact slurm controller")))
    with pytest.raises(scheduler.SlurmError, match="contact"):
        scheduler.states(dep, ["5"])


def test_exit_code_from_scontrol(dep, monkeypatch):
    answers = {"1": "JobId=1 JobState=COMPLETED ExitCode=0:0", "2": "JobId=2 JobState=FAILED ExitCode=3:0",
               "3": "JobId=3 JobState=CANCELLED ExitCode=0:15"}
    monkeypatch.setattr(scheduler.subprocess, "run", FakeRun(
        lambda argv: (answers[argv[-1]], 0, "") if argv[-1] in answers else ("", 1, "Invalid job id")))
    assert [scheduler.exit_code(dep, j) for j in ("1", "2", "3", "4")] == [0, 3, 143, None]


def test_submit_writes_the_script_in_the_shared_home_and_parses_the_id(dep, monkeypatch):
    monkeypatch.setattr(scheduler, "_check_deployment", lambda d: None)
    fake = FakeRun(lambda argv: ("4242;lab\n", 0, ""))
    monkeypatch.setattr(scheduler.subprocess, "run", fake)
    jid, path = scheduler.submit("#!/bin/bash\ntrue\n", dep, ["--hold"], name="jax-smoke")
    assert jid == "4242"
    assert path.startswith(os.path.join(dep, "lab", "home", ".ctk-jobs", "jax-smoke-")) and path.endswith(".sbatch")
    assert open(path).read() == "#!/bin/bash\ntrue\n"
    assert fake.calls == [["sbatch", "--parsable", "--chdir=/home/.ctk-jobs", "--hold", path]]
    _, path2 = scheduler.submit("x", dep, name="jax-smoke")
    assert path2 != path


def test_log_paths_follow_the_scripts_output_lines(dep):
    home = os.path.join(os.path.abspath(dep), "lab", "home")
    script = "#!/bin/bash\n#SBATCH --job-name=jax-smoke\n#SBATCH --output=./%x-%j.out\n#SBATCH --error=./%x-%j.err\n"
    assert scheduler.log_paths(dep, script, "7") == (os.path.join(home, ".ctk-jobs", "jax-smoke-7.out"),
                                                     os.path.join(home, ".ctk-jobs", "jax-smoke-7.err"))
    assert scheduler.log_paths(dep, "#!/bin/bash\n#SBATCH --output=/home/logs/%j.txt\n", "8") == (
        os.path.join(home, "logs", "8.txt"), os.path.join(home, "logs", "8.txt"))
    assert scheduler.log_paths(dep, "#!/bin/bash\n", "9")[0] == os.path.join(home, ".ctk-jobs", "slurm-9.out")
    assert scheduler.log_paths(dep, "#SBATCH --output=/tmp/x.out\n", "9")[0] is None


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


def test_unknown_job_and_missing_deployment_exit_2(dep, capsys):
    assert main(["job", "logs", "123", "--deployment", dep]) == 2
    assert "not submitted through ctk" in capsys.readouterr().err
    assert main(["job", "cancel", "123", "--deployment", dep]) == 2
    assert main(["job", "status", "123", "--deployment", dep]) == 2
    assert main(["job", "list", "--deployment", os.path.join(dep, "nope")]) == 2
    assert main(["job", "list"]) == 2
    assert "--deployment DIR is required" in capsys.readouterr().err
    assert main(["job", "submit", "jax-smoke", "--deployment", dep]) == 2
    assert "no deployment.json" in capsys.readouterr().err


def test_list_of_an_empty_registry(dep, capsys):
    assert main(["job", "list", "--deployment", dep]) == 0
    assert capsys.readouterr().out == "(no jobs)\n"


def test_submit_command_words_after_double_dash_reach_the_api(dep, monkeypatch, capsys):
    seen = {}

    class J:
        id = "77"

    def fake_submit(template, params, cluster, command=(), nodeset=None):
        seen.update(template=template, params=params, cluster=cluster, command=list(command), nodeset=nodeset)
        return J()
    monkeypatch.setattr("ctk.jobs.api.submit", fake_submit)
    rc = main(["job", "submit", "jax-smoke", "--deployment", dep, "--nodes", "2", "--set", "partition=debug",
               "--", "python3", "-c", "print('--set')"])
    assert rc == 0 and capsys.readouterr().out == "77\n"
    assert seen == {"template": "jax-smoke", "params": {"partition": "debug", "nodes": "2"}, "cluster": dep,
                    "command": ["python3", "-c", "print('--set')"], "nodeset": None}


def test_wait_backs_off_from_0_2_to_5_seconds(monkeypatch):
    from ctk.jobs import api
    sleeps = []
    states = iter(["PENDING"] * 8 + ["COMPLETED"])
    monkeypatch.setattr(api.scheduler, "states", lambda d, ids: {ids[0]: next(states)})
    monkeypatch.setattr(api.time, "sleep", sleeps.append)
    job = api.Job("1", "/nowhere", {"id": "1"})
    assert job.wait() == "COMPLETED"
    assert sleeps == [0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0, 5.0]
