"""An in-place Slurm upgrade of a lab, for real: 24.11 (Debian 13's) to 26.05 (forky's), by a
deploy of the same blueprint with slurm_release "26.05", with a job running and one queued.
SchedMD's order: slurmdbd first (it converts the accounting database, then listens), slurmctld
once it answers, then each slurmd, rebooted into the new image once its jobs end. Both jobs
complete, every earlier accounting record is kept, and a deploy back to 24.11 is refused with
the lab left as it was."""

import json
import os
import re
import shutil

import pytest

from .labtools import deploy, until

pytestmark = pytest.mark.integration
for tool in ("slurmctld", "packer", "debootstrap", "unshare"):
    if not shutil.which(tool, path="/usr/sbin:/usr/bin:/sbin:/bin"):
        pytest.skip(f"{tool} is not installed", allow_module_level=True)

BLUEPRINT = os.path.join(os.path.dirname(__file__), "blueprints", "upgrade-lab.yaml")
ROLES = "roles: [common, munge, slurm]}"


@pytest.fixture(scope="module")
def ulab(slurm_image, state, tmp_path_factory):
    slurm_image("debian-13"), slurm_image("debian-13@26.05")  # the layers of both releases' images
    lab = deploy(tmp_path_factory, state, "upgrade", BLUEPRINT)
    yield lab
    lab.destroy()


def job_state(lab, job: str) -> str:
    m = re.search(r"JobState=(\S+)", lab.slurm("scontrol", "show", "-o", "job", job).stdout)
    return m.group(1) if m else ""


def slurmd_versions(lab) -> dict[str, str]:
    out = lab.slurm("scontrol", "show", "-o", "node").stdout
    return {m.group(1): m.group(2) for m in re.finditer(r"NodeName=(\S+).*? Version=(\S+)", out)}


def test_24_11_to_26_05_in_place_keeps_the_running_and_queued_jobs_and_the_records(ulab, tmp_path):
    lab = ulab
    assert lab.slurm("sinfo", "--version").stdout.split()[-1].startswith("24.11.")
    done = [lab.slurm("sbatch", "--parsable", "-N1", "-o", "/dev/null", "--wrap", "true").stdout.strip()
            for _ in range(3)]
    for j in done:
        until(lambda j=j: job_state(lab, j) == "COMPLETED", 60, f"job {j} completed")
    running = lab.slurm("sbatch", "--parsable", "-N2", "-o", "/root/running-%j.out", "--wrap",
                        "srun sleep 30; echo ran").stdout.strip()
    until(lambda: job_state(lab, running) == "RUNNING", 60, "the 2-node job running")
    queued = lab.slurm("sbatch", "--parsable", "-N2", f"--dependency=afterany:{running}", "-o", "/root/queued-%j.out",
                       "--wrap", "srun sh -c 'echo $(hostname) $SLURM_JOB_ID'").stdout.strip()
    assert job_state(lab, queued) == "PENDING"
    before = lab.slurm("sacct", "-n", "-P", "-X", "-o", "JobID,State").stdout.split()

    v2 = tmp_path / "upgrade-26.05.yaml"
    text = open(BLUEPRINT).read()
    assert ROLES in text
    v2.write_text(text.replace(ROLES, 'roles: [common, munge, slurm], slurm_release: "26.05"}'))
    r = lab.ctk("deploy", str(v2), "-o", lab.path, "--json", timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(r.stdout)
    computes = sorted(res["rolling"])
    assert len(computes) == 2 and not set(computes) & set(res["restarted"]), res

    # slurmdbd converted the database and listened before slurmctld started
    ctl = next(n for n in os.listdir(os.path.join(lab.path, "lab", "nodes")) if n.endswith("-controller"))
    log = open(os.path.join(lab.path, "lab", "nodes", ctl, "log", "nodeinit.log")).read()
    last_boot = log[log.rindex("starting munged"):]
    assert last_boot.index("starting slurmdbd") < last_boot.index("starting slurmctld"), last_boot[-2000:]
    dbd = open(os.path.join(lab.path, "lab", "nodes", ctl, "log", "slurmdbd.log")).read()
    assert "slurmdbd version 26.05." in dbd and "slurmdbd version 24.11." in dbd
    assert lab.slurm("sinfo", "--version").stdout.split()[-1].startswith("26.05.")
    # the running job goes on under the 24.11 slurmds, now talking to a 26.05 slurmctld
    assert job_state(lab, running) == "RUNNING" and job_state(lab, queued) == "PENDING"
    assert all(v.startswith("24.11.") for v in slurmd_versions(lab).values()), slurmd_versions(lab)

    until(lambda: job_state(lab, running) == "COMPLETED", 120, f"job {running} completed")
    until(lambda: job_state(lab, queued) == "COMPLETED", 120, lambda _: f"job {queued} completed: "
          f"{job_state(lab, queued)}, nodes {slurmd_versions(lab)}")
    assert open(os.path.join(lab.path, "lab", "root", f"running-{running}.out")).read().strip() == "ran"
    # the queued job ran on the upgraded nodes (a node reboots before it takes another job)
    versions = slurmd_versions(lab)
    assert sorted(versions) == computes and all(v.startswith("26.05.") for v in versions.values()), versions
    out = open(os.path.join(lab.path, "lab", "root", f"queued-{queued}.out")).read().split("\n")
    assert sorted(ln.split()[0] for ln in out if ln) == computes

    after = dict(ln.split("|") for ln in lab.slurm("sacct", "-n", "-P", "-X", "-o", "JobID,State").stdout.split())
    for rec in before:  # every record of before the upgrade is there, the running one ended
        jid, st = rec.split("|")
        assert jid in after and (after[jid] == st or jid == running), (rec, after)
    assert after[running] == "COMPLETED" and after[queued] == "COMPLETED", after

    # back to 24.11: refused before anything changes (exit 2), the lab runs on; also for a lab
    # whose identity.json an earlier ctk wrote without the release (asked of the running lab)
    ident_path = os.path.join(lab.path, "lab", "identity.json")
    ident = json.load(open(ident_path))
    assert ident["slurm"] == "26.05", ident
    del ident["slurm"]
    with open(ident_path, "w") as f:
        json.dump(ident, f)
    r = lab.ctk("deploy", BLUEPRINT, "-o", lab.path)
    assert r.returncode == 2 and "Slurm 24.11 cannot read them" in r.stderr and "--purge" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    rc, st = lab.status()
    assert rc == 0 and all(x["running"] for x in st["nodes"]), st
    assert lab.slurm("sinfo", "--version").stdout.split()[-1].startswith("26.05.")
