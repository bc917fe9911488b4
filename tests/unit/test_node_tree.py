"""A lab node's own tree (its overlay's upper dir) belongs to the image layers it was written on:
booted onto other layers, the node starts from the new image (ctk.sandbox.node.fresh_tree_for)."""

import json

from ctk.sandbox import node as nodes

OLD, NEW = ["/s/layers/jax-1/root", "/s/layers/slurm-1/root"], ["/s/layers/metrics-2/root", "/s/layers/jax-1/root"]


def _node(tmp_path, record=None, spec_json=None):
    sd = tmp_path / "n"
    (sd / "upper" / "etc").mkdir(parents=True)
    (sd / "upper" / "etc" / "passwd").write_text("root:x:0:0::/root:/bin/sh\n")
    (sd / "work" / "work").mkdir(parents=True)
    if record is not None:
        (sd / nodes.UPPER_LAYERS).write_text(json.dumps(record))
    if spec_json is not None:
        (sd / "spec.json").write_text(json.dumps({"lowerdirs": spec_json}))
    return sd, nodes.NodeSpec(hostname="n", state_dir=str(sd), lowerdirs=NEW)


def test_other_layers_drop_the_upper_dir_and_the_same_layers_keep_it(tmp_path):
    sd, spec = _node(tmp_path / "a", record=OLD)
    nodes.fresh_tree_for(spec)
    assert not (sd / "upper").exists() and not (sd / "work").exists()
    assert json.loads((sd / nodes.UPPER_LAYERS).read_text()) == NEW

    sd, spec = _node(tmp_path / "b", record=NEW)
    nodes.fresh_tree_for(spec)
    assert (sd / "upper" / "etc" / "passwd").exists()


def test_a_node_an_earlier_ctk_booted_is_judged_by_its_last_spec(tmp_path):
    sd, spec = _node(tmp_path / "a", spec_json=OLD)  # no record: the layers of its last boot
    nodes.fresh_tree_for(spec)
    assert not (sd / "upper").exists()

    sd, spec = _node(tmp_path / "b")  # never booted: nothing to judge, nothing dropped
    nodes.fresh_tree_for(spec)
    assert (sd / "upper" / "etc" / "passwd").exists()
