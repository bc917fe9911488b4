"""The metrics role for real: a lab (Slurm 26.05) whose controller runs Prometheus, scraping
slurmctld's OpenMetrics endpoints and the node exporter of every node; a query for the running
jobs gives their count while they run, and every metric ctk's Grafana dashboard asks for is
there."""

import json
import os
import re
import shutil
import urllib.parse
import urllib.request

import pytest

from ctk import paths

from .labtools import deploy, until

pytestmark = pytest.mark.integration
for tool in ("slurmctld", "packer", "debootstrap", "unshare"):
    if not shutil.which(tool, path="/usr/sbin:/usr/bin:/sbin:/bin"):
        pytest.skip(f"{tool} is not installed", allow_module_level=True)

BLUEPRINT = os.path.join(os.path.dirname(__file__), "blueprints", "metrics-lab.yaml")


@pytest.fixture(scope="module")
def mlab(lab_build, state, tmp_path_factory):
    lab = deploy(tmp_path_factory, state, "metrics", BLUEPRINT)
    yield lab
    lab.destroy()


def query(url: str, expr: str) -> list[dict]:
    q = urllib.parse.urlencode({"query": expr})
    got = json.load(urllib.request.urlopen(f"{url}/api/v1/query?{q}", timeout=30))
    assert got["status"] == "success", got
    return got["data"]["result"]


def test_prometheus_counts_the_running_jobs_and_sees_every_node(mlab):
    _, st = mlab.status()
    url = st["metrics_url"]
    assert st["metrics"] == "up" and url.endswith(":9090"), st
    text = mlab.ctk("status", mlab.path).stdout
    assert f"metrics (Prometheus): {url} up" in text and paths.GRAFANA_DASHBOARD in text
    nodes = sorted(x["name"] for x in st["nodes"])
    # every node's exporter, and slurmctld's five endpoints, scraped and up
    until(lambda: sorted(r["metric"]["node"] for r in query(url, 'up{job="node"} == 1')) == nodes, 60,
          lambda _: f"every node's exporter up: {query(url, 'up')}")
    until(lambda: len(query(url, 'up{job=~"slurm-.*"} == 1')) == 5, 60, lambda _: f"slurmctld's endpoints: {query(url, 'up')}")
    jobs = [mlab.slurm("sbatch", "--parsable", "-N1", "-o", "/dev/null", "--wrap", "sleep 90").stdout.strip()
            for _ in range(2)]
    try:
        until(lambda: len(mlab.slurm("squeue", "-h", "-t", "R", "-o", "%i").stdout.split()) == 2, 60, "2 jobs running")

        def running() -> float | None:
            r = query(url, "slurm_jobs_running")
            return float(r[0]["value"][1]) if r else None
        until(lambda: running() == 2, 30, lambda _: f"slurm_jobs_running = 2 in Prometheus; it says {running()}")
        # per user: only users with jobs are reported
        until(lambda: [r["metric"]["username"] for r in query(url, "slurm_user_jobs_running == 2")] == ["root"], 30,
              lambda _: f"root's 2 running jobs: {query(url, 'slurm_user_jobs_running')}")
    finally:
        mlab.slurm("scancel", *jobs, check=False)
    until(lambda: float(query(url, "slurm_jobs_running")[0]["value"][1]) == 0, 60, "no job running in Prometheus")


def test_every_metric_of_the_grafana_dashboard_is_scraped(mlab):
    """With a job running (slurmctld reports per-user counts only for users with jobs)."""
    _, st = mlab.status()
    url = st["metrics_url"]
    dash = json.load(open(paths.GRAFANA_DASHBOARD))
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    wanted = {m for e in exprs for m in re.findall(r"\b(slurm_[a-z_]+|node_[A-Za-z_0-9]+)\b", e)}
    assert len(wanted) > 15

    def missing() -> set[str]:
        return wanted - set(json.load(urllib.request.urlopen(f"{url}/api/v1/label/__name__/values", timeout=30))["data"])
    job = mlab.slurm("sbatch", "--parsable", "-N1", "-o", "/dev/null", "--wrap", "sleep 60").stdout.strip()
    try:
        until(lambda: missing() == set(), 60, lambda _: f"metrics the dashboard asks for: {sorted(missing())}")
    finally:
        mlab.slurm("scancel", job, check=False)
    for e in exprs:  # and each query is one Prometheus takes
        query(url, e)
