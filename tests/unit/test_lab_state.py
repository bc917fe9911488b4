"""lab/state.json is one LabState (targets/labstate.py), read and written in one place: a state
file an earlier ctk wrote reads with defaults for what it lacks, and a finished deploy's state
is written as before, key for key."""

import json

from ctk.targets.labclient import lab_user
from ctk.targets.labstate import LabState, NodeRecord, load_state, save_state

NODE = {"name": "lab-0", "role": "compute", "addr": "198.18.4.2", "port": 6818, "image": "ctk-local",
        "nodeset": "lab", "host": 2, "dynamic": True, "spot": False, "flex": None, "hash": "0123456789abcdef",
        "image_version": "jax-0123456789abcdef"}


def test_a_finished_deploys_state_is_written_as_before(tmp_path):
    """The keys, their order and the indent a finished deploy wrote before LabState."""
    before = {"n": 3, "deployment": "lab", "nodes": [NODE], "notes": ["capped"], "max_nodes": 4, "complete": True,
              "accounting": True, "cluster": "lab", "agent": True, "user": "researcher",
              "rest": "http://198.18.3.1:6820", "metrics": "http://198.18.3.1:9090"}
    (tmp_path / "lab").mkdir()
    save_state(str(tmp_path), LabState.from_dict(before))
    assert (tmp_path / "lab" / "state.json").read_text() == json.dumps(before, indent=1) + "\n"
    assert load_state(str(tmp_path)) == LabState.from_dict(before)


def test_an_earlier_ctks_state_reads_with_defaults(tmp_path, monkeypatch):
    """A deploy's first state (written before it booted anything) and node records from before
    the lab had dynamic nodes: what is missing takes its default, unknown keys are left out."""
    monkeypatch.delenv("CTK_LAB_USER", raising=False)
    old_node = {k: NODE[k] for k in ("name", "role", "addr", "port", "image")}
    (tmp_path / "lab").mkdir()
    (tmp_path / "lab" / "state.json").write_text(json.dumps(
        {"n": 5, "deployment": "lab", "nodes": [old_node], "notes": [], "max_nodes": 4, "complete": False,
         "from_the_future": 1}))
    state = load_state(str(tmp_path))
    assert state == LabState(n=5, deployment="lab", nodes=[NodeRecord(**old_node)], max_nodes=4, complete=False)
    assert (state.accounting, state.agent, state.user, state.nodes[0].host, state.nodes[0].hash) == (
        False, False, None, 0, "")
    assert lab_user(str(tmp_path)) == "root"
    (tmp_path / "lab" / "state.json").write_text("{}\n")
    assert load_state(str(tmp_path)) == LabState()
    assert load_state(str(tmp_path / "nowhere")) is None
