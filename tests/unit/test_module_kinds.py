"""Module kinds: lookup by source, declared inputs against the real CT example blueprints."""

import re
from pathlib import Path

import pytest
import yaml

from conftest import FIXTURES as _FIXTURES
from ctk.modules import ALL_KINDS, cluster_toolkit, ctk_kinds, is_remote, lookup

FIXTURES = Path(_FIXTURES)
BLUEPRINTS = sorted(
    p for d in ("examples", "community/examples") for p in (FIXTURES / d).rglob("*.yaml")
    if not p.name.endswith("-deployment.yaml")
) if FIXTURES.is_dir() else []

needs_fixtures = pytest.mark.ct_fixtures


def _modules(bp):
    for g in bp.get("deployment_groups") or []:
        yield from g.get("modules") or []


def _expressions(value):
    """Bodies of every unescaped $(...) in a settings value, nested parentheses included."""
    if isinstance(value, dict):
        for v in value.values():
            yield from _expressions(v)
    elif isinstance(value, list):
        for v in value:
            yield from _expressions(v)
    elif isinstance(value, str):
        i = value.find("$(")
        while i != -1:
            if i == 0 or value[i - 1] != "\\":
                depth, j = 0, i + 1
                while j < len(value):
                    depth += {"(": 1, ")": -1}.get(value[j], 0)
                    if depth == 0:
                        break
                    j += 1
                yield value[i + 2:j]
            i = value.find("$(", i + 2)


_REF = re.compile(r"(?<![\w.\-\"])([A-Za-z][\w-]*)\.([A-Za-z_][\w-]*)")


def test_all_kinds_keyed_by_source():
    assert ALL_KINDS
    for source, kind in ALL_KINDS.items():
        assert kind.source == source
        assert kind.role in ("nodeset", "nodeset-tpu", "partition", "controller", "login", "image", "container-image",
                             "shared-fs", "startup-script", "target", "gcp-target", "local-target", "")
        assert len(set(kind.input_names)) == len(kind.input_names), source
        if kind.role == "":
            # kept, not deployed: outputs, and either every input (the vpc) or none (open_inputs)
            assert kind.outputs and kind.open_inputs != bool(kind.inputs), source


def test_ct_slurm_kinds_carry_ct_names():
    nodeset = lookup("community/modules/compute/schedmd-slurm-gcp-v6-nodeset")
    assert nodeset.role == "nodeset" and not nodeset.open_inputs
    assert nodeset.input("node_count_dynamic_max").default == 10
    assert nodeset.input("machine_type").default == "c2-standard-60"
    assert nodeset.input("subnetwork_self_link").required
    assert nodeset.output_names == ["nodeset"]
    part = lookup("community/modules/compute/schedmd-slurm-gcp-v6-partition")
    assert part.input("partition_name").required and part.input("exclusive").default is True
    assert "partitions" in part.output_names
    ctl = lookup("community/modules/scheduler/schedmd-slurm-gcp-v6-controller")
    assert ctl.input("partitions").is_list and ctl.input("machine_type").default == "c2-standard-4"
    assert lookup("community/modules/scheduler/schedmd-slurm-gcp-v6-login").output_names == ["login_nodes"]
    assert lookup("community/modules/compute/schedmd-slurm-gcp-v6-nodeset-tpu").role == "nodeset-tpu"
    img = lookup("modules/packer/custom-image")
    assert (img.role, img.kind) == ("image", "packer")
    assert lookup("modules/scripts/startup-script").output_names[0] == "startup_script"


def test_ctk_kinds():
    image = ctk_kinds.KINDS["ctk/image"]
    assert image.input("name").required
    assert image.input("roles").default == ["common", "munge", "slurm", "jax"]
    assert lookup("ctk/slurm/nodeset").input("gpu_network").default is None
    assert lookup("ctk/storage/shared-fs").output_names == ["network_storage"]
    assert not any(k.open_inputs for k in ctk_kinds.KINDS.values())


@pytest.mark.parametrize("source, expected", [
    ("modules/network/vpc", "modules/network/vpc"),
    ("./modules/network/vpc", "modules/network/vpc"),
    ("../../community/modules/compute/schedmd-slurm-gcp-v6-nodeset",
     "community/modules/compute/schedmd-slurm-gcp-v6-nodeset"),
    ("./modules/embedded/community/modules/scheduler/schedmd-slurm-gcp-v6-login",
     "community/modules/scheduler/schedmd-slurm-gcp-v6-login"),
    ("github.com/GoogleCloudPlatform/cluster-toolkit//community/modules/compute/"
     "schedmd-slurm-gcp-v6-partition?ref=v1.2", "community/modules/compute/schedmd-slurm-gcp-v6-partition"),
    ("git::https://github.com/GoogleCloudPlatform/cluster-toolkit.git//modules/scripts/startup-script?ref=v1.95.0",
     "modules/scripts/startup-script"),
])
def test_lookup_paths(source, expected):
    assert lookup(source).source == expected


@pytest.mark.parametrize("source", [
    "modules/network/nope", "community/modules/compute/schedmd-slurm-gcp-v5-node-group",
    "github.com/someone/else", "ctk/slurm/nope", "", None,
])
def test_lookup_unknown(source):
    assert lookup(source) is None


@pytest.mark.parametrize("source, remote", [
    ("github.com/GoogleCloudPlatform/cluster-toolkit//modules/network/vpc?ref=v1.2", True),
    ("git::https://example.com/repo.git//mod", True),
    ("https://example.com/mod.zip", True),
    ("gcs::https://www.googleapis.com/storage/v1/bucket/mod.zip", True),
    ("modules/network/vpc", False),
    ("./local/module", False),
    ("ctk/image", False),
])
def test_is_remote(source, remote):
    assert is_remote(source) is remote


@needs_fixtures
@pytest.mark.parametrize("path", BLUEPRINTS, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_fixture_sources_are_known(path):
    bp = yaml.safe_load(path.read_text())
    for m in _modules(bp):
        assert lookup(m["source"]) is not None, f"{m['id']}: unknown source {m['source']}"


@needs_fixtures
@pytest.mark.parametrize("path", BLUEPRINTS, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_fixture_settings_are_declared_inputs(path):
    bp = yaml.safe_load(path.read_text())
    for m in _modules(bp):
        kind = lookup(m["source"])
        if kind is None or kind.role == "" or kind.open_inputs:
            continue
        unknown = sorted(set(m.get("settings") or {}) - set(kind.input_names))
        assert not unknown, f"{m['id']} ({m['source']}): undeclared settings {unknown}"


@needs_fixtures
@pytest.mark.parametrize("path", BLUEPRINTS, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_fixture_references_name_declared_outputs(path):
    bp = yaml.safe_load(path.read_text())
    kinds = {m["id"]: lookup(m["source"]) for m in _modules(bp)}
    for m in _modules(bp):
        for used in m.get("use") or []:
            assert used in kinds, f"{m['id']} uses unknown module {used}"
        for body in _expressions(m.get("settings") or {}):
            for mod_id, output in _REF.findall(body):
                if mod_id in kinds:
                    assert output in kinds[mod_id].output_names, (
                        f"{m['id']}: $({mod_id}.{output}) is not an output of {kinds[mod_id].source}")


@needs_fixtures
def test_fixtures_cover_the_slurm_kinds():
    seen = {m["source"] for p in BLUEPRINTS for m in _modules(yaml.safe_load(p.read_text()))}
    for source in ("community/modules/compute/schedmd-slurm-gcp-v6-nodeset",
                   "community/modules/compute/schedmd-slurm-gcp-v6-nodeset-tpu",
                   "community/modules/scheduler/schedmd-slurm-gcp-v6-controller",
                   "modules/packer/custom-image"):
        assert source in seen
    assert seen <= set(cluster_toolkit.KINDS)
