"""Module sources Cluster Toolkit removed or moved: an error at `source:` with the replacement."""

import pytest

from ctk.blueprint import BlueprintErrors
from ctk.blueprint.validate import MOVED_SOURCES, REMOVED_SOURCES
from ctk.modules import lookup
from ctk.plan import process

BP = """\
blueprint_name: demo
vars:
  project_id: p
  deployment_name: demo
  region: us-central1
  zone: us-central1-a
deployment_groups:
- group: primary
  modules:
  - id: old
    source: {source}
"""


def errors_of(write, source):
    with pytest.raises(BlueprintErrors) as e:
        process(write(BP.format(source=source)))
    return e.value.errors


def test_every_replacement_is_a_module_ctk_knows():
    for _, replacement in REMOVED_SOURCES.values():
        for part in (replacement or "").split(" with "):
            assert not part or lookup(part) is not None, part


@pytest.mark.parametrize("source, replacement", [
    ("community/modules/compute/schedmd-slurm-gcp-v5-partition-dynamic",
     "community/modules/compute/schedmd-slurm-gcp-v6-nodeset-dynamic"),
    ("community/modules/scheduler/SchedMD-slurm-on-gcp-login-node",
     "community/modules/scheduler/schedmd-slurm-gcp-v6-login"),
])
def test_a_removed_source_names_its_replacement_at_the_source_line(write, source, replacement):
    [err] = errors_of(write, source)
    assert err.message.startswith(f"Cluster Toolkit removed module '{source}'")
    assert (err.pos.line, err.pos.col) == (11, 13)
    assert f"use '{replacement}' instead" in err.hint


def test_the_v4_partition_is_replaced_by_a_nodeset_and_a_partition(write):
    [err] = errors_of(write, "community/modules/compute/SchedMD-slurm-on-gcp-partition")
    assert "v1.27.0" in err.message
    assert "schedmd-slurm-gcp-v6-nodeset with community/modules/compute/schedmd-slurm-gcp-v6-partition" in err.hint


def test_the_release_that_still_has_it_is_accepted_as_a_remote_source(write):
    pinned = ("github.com/GoogleCloudPlatform/cluster-toolkit//community/modules/scheduler/"
              "schedmd-slurm-gcp-v5-hybrid?ref=v1.44.2")
    exp = process(write(BP.format(source=pinned)))
    assert [u.module_id for u in exp.deployment.unsupported] == ["old"]


@pytest.mark.parametrize("source", ["community/modules/project/service-account",
                                    "./community/modules/project/service-account/"])
def test_a_moved_source_is_refused_with_its_new_path_as_gcluster_does(write, source):
    [err] = errors_of(write, source)
    assert err.message == f"Cluster Toolkit moved module '{source}' to 'modules/project/service-account'"
    assert err.hint == "use 'source: modules/project/service-account'"
    assert MOVED_SOURCES["community/modules/project/service-account"] == "modules/project/service-account"
