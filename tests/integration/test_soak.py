"""The elastic lab's soak (soak.py), run in the background from the moment the lab image is
built (conftest.py). A module of its own, so that with several workers it is taken last, when
the soak is about done, on a worker of its own."""

import pytest

from .conftest import soak_result
from .soak import committed_before, unusable

# It waits for the soak (5 minutes and more from the lab image's build): longer than the 900 s a
# test gets elsewhere.
pytestmark = [pytest.mark.integration, pytest.mark.timeout(2700)]


def test_the_soak_ends_every_job_completed_with_the_uninterrupted_loss(lab_build):
    """At least 5 minutes (--soak-seconds) of training jobs on the Spot and flex-start partitions
    under random preemption (a mean interval of 40 s): every job ends COMPLETED with the final
    line of the uninterrupted run; Spot preemptions hit running jobs, flex-start nodes waited for
    their capacity and lost it at their run duration; nothing is left pending, and every node is usable again
    within two minutes of the last job's end (a Spot node taken back by the last preemptions is
    DOWN for a while)."""
    res = soak_result()
    assert "error" not in res, res["error"]
    assert res["seconds"] >= 300
    jobs, events = res["jobs"], res["events"]
    assert len(jobs) >= 6 and {j["partition"] for j in jobs} == {"spot", "flex"}
    bad = [j for j in jobs if j["state"] != "COMPLETED" or j["final"] != res["expected"]]
    assert not bad, (res["expected"], bad)
    chaos = [e for e in events if e["event"] == "sigterm" and e.get("by") == "chaos"]
    hit = [e for e in chaos if e["jobs"]]
    assert len(hit) >= 2, chaos
    assert all(e["event"] != "error" and e["event"] != "boot-failed" for e in events), events
    flex_back = [e for e in events if e["event"] == "sigterm" and str(e.get("by", "")).startswith("flex-start")]
    waits = [e for e in events if e["event"] == "waiting-for-capacity"]
    assert flex_back and waits
    # a run resumes from the newest checkpoint the runs before it are known to have committed (a
    # job preempted before its first checkpoint starts again from step 0), and some did resume
    requeued = [j for j in jobs if any(r["restart"] for r in j["runs"])]
    assert requeued and any(r["start"] for j in requeued for r in j["runs"]), requeued
    for j in requeued:
        runs = j["runs"]
        for k, run in enumerate(runs[1:], 1):
            if run["start"] is None:  # cut short between its first line and its restore
                assert run is not runs[-1] and run["last"] is None, (j["id"], runs)
                continue
            floor = committed_before(runs[:k], res["checkpoint_every"])
            assert run["start"] >= floor, (j["id"], floor, runs)
    assert res["squeue"].strip() == "", res["squeue"]
    assert not unusable(res["sinfo"]), (res["settle_seconds"], res["sinfo"])
    print(f"\nsoak: {len(jobs)} jobs in {res['total_seconds']:.0f} s ({res['seconds']:.0f} s of submissions), "
          f"{len(chaos)} random preemptions ({len(hit)} under jobs), {len(flex_back)} flex-start take-backs, "
          f"{len(requeued)} jobs requeued")
