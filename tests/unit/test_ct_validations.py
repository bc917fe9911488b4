"""Cluster Toolkit's own checks on its Slurm modules, refused by `ctk validate` at the blueprint's line.

Each case takes a real Cluster Toolkit example (../shared/fixtures/cluster-toolkit), changes one
thing a user could get wrong, and expects exit 2 with exactly one error: at the file:line:col of
the setting, in ctk's words, with a hint. The table of checks (ctk.modules.ct_checks) is paired
with the `validation` and `precondition` blocks of the modules' variables.tf and outputs.tf,
read with python-hcl2, so a block Cluster Toolkit adds is a failing test here.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import hcl2  # python-hcl2, from the 'test' extra: it reads CT's HCL
import pytest

from conftest import FIXTURES
from ctk.blueprint import BlueprintErrors
from ctk.cli import main
from ctk.modules import cluster_toolkit as ct
from ctk.modules import ct_checks
from ctk.plan import process

pytestmark = pytest.mark.ct_fixtures

VARS = "project_id=demo-project,deployment_name=demo"
HPC = "examples/hpc-slurm.yaml"
TPU = "community/examples/hpc-slurm6-tpu.yaml"
HA = "community/examples/hpc-slurm-ha.yaml"
KINDS = (ct.NODESET, ct.NODESET_TPU, ct.NODESET_DYNAMIC, ct.PARTITION, ct.CONTROLLER, ct.LOGIN)


# ---- the table against Cluster Toolkit's .tf files --------------------------------------------

def _blocks(body, name: str) -> list[dict]:
    b = body.get(name, [])
    return b if isinstance(b, list) else [b]


def _norm(condition: str) -> str:
    """A condition without python-hcl2's ${ } wrapper and without whitespace."""
    c = condition.strip()
    if c.startswith("${") and c.endswith("}"):
        c = c[2:-1]
    return re.sub(r"\s+", "", c)


@functools.lru_cache(maxsize=1)
def fixture_blocks() -> frozenset[tuple[str, str, str, str]]:
    """(module, file, variable or output, condition) of every validation and precondition block."""
    out = set()
    for kind in KINDS:
        folder = Path(FIXTURES) / kind.source
        for fname, block, inner in (("variables.tf", "variable", "validation"), ("outputs.tf", "output", "precondition")):
            path = folder / fname
            if not path.exists():
                continue
            with open(path) as f:
                doc = hcl2.load(f)
            for entry in doc.get(block, []):
                for name, body in entry.items():
                    for b in _blocks(body, inner):
                        out.add((ct_checks.short(kind.source), fname, name.strip('"'), _norm(b["condition"])))
            # A lifecycle precondition on a resource in outputs.tf would be missed above.
            assert "lifecycle" not in path.read_text(), path
    return frozenset(out)


def table_blocks() -> set[tuple[str, str, str, str]]:
    return {(ct_checks.short(m), c.file, c.block, _norm(c.condition)) for c in ct_checks.CHECKS for m in c.modules}


def _listed(table: dict) -> set[tuple[str, str, str, str]]:
    return {(m, f, b, _norm(cond)) for (m, f, b, cond) in table}


def test_the_fixtures_hold_the_blocks_this_test_reads():
    blocks = fixture_blocks()
    assert len(blocks) >= 75  # 59 validation blocks and 20 preconditions at v1.95.0, a few alike
    assert {m for m, *_ in blocks} == {ct_checks.short(k.source) for k in KINDS}


def test_every_cluster_toolkit_block_is_checked_or_listed_with_its_reason():
    blocks = fixture_blocks()
    covered = table_blocks() | _listed(ct_checks.ELSEWHERE) | _listed(ct_checks.SKIPPED)
    missing = sorted(blocks - covered)
    assert not missing, "Cluster Toolkit blocks ctk neither checks nor lists in ELSEWHERE/SKIPPED:\n" + "\n".join(
        " | ".join(b) for b in missing)


def test_no_check_names_a_block_the_fixtures_do_not_have():
    stale = sorted(covered for covered in table_blocks() | _listed(ct_checks.ELSEWHERE) | _listed(ct_checks.SKIPPED)
                   if covered not in fixture_blocks())
    assert not stale, "ctk checks blocks Cluster Toolkit no longer has (or has changed):\n" + "\n".join(
        " | ".join(b) for b in stale)


def test_a_block_is_checked_in_one_place_only():
    assert not table_blocks() & _listed(ct_checks.ELSEWHERE)
    assert not table_blocks() & _listed(ct_checks.SKIPPED)
    assert all(reason for reason in {**ct_checks.ELSEWHERE, **ct_checks.SKIPPED}.values())


def test_messages_are_ctks_own_words_not_terraforms():
    errors = set()
    for kind in KINDS:
        for fname in ("variables.tf", "outputs.tf"):
            path = Path(FIXTURES) / kind.source / fname
            if path.exists():
                errors |= {re.sub(r"\s+", " ", m).strip().lower()
                           for m in re.findall(r'error_message\s*=\s*"((?:[^"\\]|\\.)*)"', path.read_text())}
    for c in ct_checks.CHECKS:
        assert c.message.lower() not in errors and c.hint.lower() not in errors, c.message
        assert c.hint, c.message


# ---- blueprints with one thing wrong ----------------------------------------------------------

@dataclass
class Edit:
    """Changes to one module of a fixture: settings set (YAML flow text) or dropped, text
    replaced in its block, its source, a module added before it."""

    module: str
    set: dict[str, str] = field(default_factory=dict)
    drop: tuple[str, ...] = ()
    replace: tuple[tuple[str, str], ...] = ()
    source: str | None = None
    add_before: str = ""


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _block(lines: list[str], module: str) -> tuple[int, int]:
    start = next(i for i, ln in enumerate(lines) if ln.strip() == f"- id: {module}")
    end = next((j for j in range(start + 1, len(lines))
                if re.match(r"^\s*- id: ", lines[j]) or lines[j].startswith("- group:")), len(lines))
    return start, end


def _apply(lines: list[str], e: Edit) -> list[str]:
    start, end = _block(lines, e.module)
    block = lines[start:end]
    for old, new in e.replace:
        text = "\n".join(block)
        assert old in text, (e.module, old)
        block = text.replace(old, new, 1).split("\n")
    if e.source:
        i = next(i for i, ln in enumerate(block) if ln.strip().startswith("source:"))
        block[i] = block[i][:_indent(block[i])] + f"source: {e.source}"
    s = next((i for i, ln in enumerate(block) if ln.strip() == "settings:"), None)
    if s is None and (e.set or e.drop):
        block.append(" " * (_indent(block[0]) + 2) + "settings:")
        s = len(block) - 1
    if s is not None:
        child = _indent(block[s]) + 2
        for key in e.drop:
            i = next(i for i in range(s + 1, len(block))
                     if _indent(block[i]) == child and block[i].strip().startswith(f"{key}:"))
            j = i + 1
            while j < len(block) and (not block[j].strip() or _indent(block[j]) > child):
                j += 1
            del block[i:j]
        for key, value in e.set.items():
            line = " " * child + f"{key}: {value}"
            i = next((i for i in range(s + 1, len(block))
                      if _indent(block[i]) == child and block[i].strip().startswith(f"{key}:")), None)
            if i is None:
                block.insert(s + 1, line)
            else:
                block[i] = line
    added = e.add_before.rstrip("\n").split("\n") if e.add_before else []
    return lines[:start] + added + block + lines[end:]


@dataclass
class Case:
    id: str
    fixture: str
    edits: tuple[Edit, ...]
    where: tuple  # (needle, token[, nth]): the line holding NEEDLE (its NTH), the column of TOKEN
    message: str
    hint: str = ""
    ct: tuple | None = None  # the ELSEWHERE block it shows (for checks outside the table)

    def write(self, tmp_path: Path) -> Path:
        src = Path(FIXTURES) / self.fixture
        lines = src.read_text().split("\n")
        for e in self.edits:
            lines = _apply(lines, e)
        # beside the fixture's folder layout is not needed: none of these fixtures stages files
        out = tmp_path / src.name
        out.write_text("\n".join(lines))
        return out


def at(path: Path, needle: str, token: str, nth: int = 1) -> str:
    hits = [(i, ln) for i, ln in enumerate(path.read_text().splitlines(), 1) if needle in ln]
    i, ln = hits[nth - 1]
    return f"{i}:{ln.index(token) + 1}"


def E(module: str, **kw) -> Edit:
    return Edit(module, **kw)


def S(module: str, **settings: str) -> Edit:
    return Edit(module, set=settings)


# A dynamic nodeset is not built by the controller: it names the cluster and its bucket itself.
DYN = E("debug_nodeset", source="community/modules/compute/schedmd-slurm-gcp-v6-nodeset-dynamic",
        drop=("node_count_dynamic_max",), set={"slurm_cluster_name": "demo", "slurm_bucket_path": "gs://demo/slurm"})
A3 = {"machine_type": "a3-megagpu-8g"}
NO_PLACEMENT = {"enable_placement": "false"}
NS_NFS = "[{server_ip: 10.0.0.2, remote_mount: /data, local_mount: /data, fs_type: nfs}]"
SECOND_LOGIN = """\
  - id: slurm_login2
    source: community/modules/scheduler/schedmd-slurm-gcp-v6-login
    use: [network]
    settings:
      name_prefix: slurm-login
      machine_type: n2-standard-4
"""
SECOND_TPU = """\
  - id: tpu_nodeset2
    source: community/modules/compute/schedmd-slurm-gcp-v6-nodeset-tpu
    use: [network]
    settings:
      name: tpu.nodeset
      node_type: v3-8
      node_count_dynamic_max: 1
"""
SECOND_DYN = """\
  - id: debug_nodeset2
    source: community/modules/compute/schedmd-slurm-gcp-v6-nodeset-dynamic
    use: [network]
    settings:
      name: debug-nodeset
      slurm_cluster_name: demo
      slurm_bucket_path: gs://demo/slurm
"""


def _vm(kind: str, module: str, fixture: str, extra: tuple[Edit, ...] = ()) -> list[Case]:
    """The checks the nodeset, dynamic nodeset and login modules share."""
    k = kind
    return [
        Case(f"{k}-image-no-project", fixture, extra + (S(module, instance_image="{family: my-family}"),),
             ("instance_image:", "{"), "instance_image names no project", "add project"),
        Case(f"{k}-image-name-and-family", fixture,
             extra + (S(module, instance_image="{name: img-1, family: my-family, project: p}"),),
             ("instance_image:", "{"), "exactly one of name and family", "not both"),
        Case(f"{k}-enable-smt", fixture, extra + (S(module, enable_smt="true"),), ("enable_smt:", "true"),
             "no longer accepts setting 'enable_smt'", "threads_per_core"),
        Case(f"{k}-two-gpu-models", fixture,
             extra + (S(module, guest_accelerator="[{type: nvidia-l4, count: 1}, {type: nvidia-tesla-t4, count: 1}]"),),
             ("guest_accelerator:", "{type: nvidia-tesla-t4"), "more than one kind of GPU", "at most one GPU model"),
        Case(f"{k}-bandwidth-tier", fixture, extra + (S(module, bandwidth_tier="tier_9"),),
             ("bandwidth_tier: tier_9", "tier_9"), "bandwidth_tier 'tier_9' is not one", "gvnic_enabled"),
    ]


def _tags(k: str, module: str, fixture: str, name: str) -> list[Case]:
    return [
        Case(f"{k}-{name}-value", fixture, (S(module, **{name: "{tagKeys/123: production}"}),),
             (f"{name}:", "production"), f"{name} value 'production' is not a tag value id", "tagValues/NUMBER"),
        Case(f"{k}-{name}-key", fixture, (S(module, **{name: "{env: tagValues/456}"}),),
             (f"{name}:", "env"), f"{name} key 'env' is not a tag key id", "tagKeys/NUMBER"),
    ]


def _deprecated(k: str, module: str, fixture: str, name: str, value: str, hint: str) -> Case:
    return Case(f"{k}-{name}", fixture, (S(module, **{name: value}),), (f"{name}:", value),
                f"no longer accepts setting '{name}'", hint)


CASES: list[Case] = [
    # ---- nodeset, dynamic nodeset, login: what they share
    *_vm("nodeset", "debug_nodeset", HPC),
    *_vm("dynamic", "debug_nodeset", HPC, (DYN,)),
    *_vm("login", "slurm_login", HPC),
    *_tags("nodeset", "debug_nodeset", HPC, "disk_resource_manager_tags"),
    *_tags("login", "slurm_login", HPC, "disk_resource_manager_tags"),
    *_tags("nodeset", "debug_nodeset", HPC, "resource_manager_tags"),
    _deprecated("login", "slurm_login", HPC, "disable_smt", "true", "threads_per_core"),
    _deprecated("nodeset", "debug_nodeset", HPC, "service_account", "{email: a@b.example, scopes: [x]}",
                "service_account_email"),
    _deprecated("tpu", "tpu_nodeset", TPU, "service_account", "{email: a@b.example, scopes: [x]}",
                "service_account_email"),
    _deprecated("login", "slurm_login", HPC, "service_account", "{email: a@b.example, scopes: [x]}",
                "service_account_email"),
    _deprecated("nodeset", "debug_nodeset", HPC, "disable_public_ips", "true", "enable_public_ips"),
    _deprecated("tpu", "tpu_nodeset", TPU, "disable_public_ips", "false", "enable_public_ips"),
    _deprecated("login", "slurm_login", HPC, "disable_login_public_ips", "true", "enable_login_public_ips"),
    _deprecated("nodeset", "debug_nodeset", HPC, "instance_template", "my-template", "template"),
    _deprecated("login", "slurm_login", HPC, "instance_template", "my-template", "template"),

    # ---- nodeset: its variables
    Case("nodeset-sockets", HPC, (S("debug_nodeset", node_conf="{Sockets: 2}"),), ("node_conf:", "2"),
         "node_conf cannot set Sockets", "leave it out"),
    Case("nodeset-zone-target-shape", HPC, (S("debug_nodeset", zone_target_shape="EVERYWHERE"),),
         ("zone_target_shape:", "EVERYWHERE"), "zone_target_shape 'EVERYWHERE' is not one", "BALANCED"),
    Case("nodeset-reservation-name", HPC, (S("debug_nodeset", reservation_name="My_Reservation"),),
         ("reservation_name:", "My_Reservation"), "'My_Reservation' is not a reservation's name or path",
         "projects/PROJECT/reservations/NAME"),
    Case("nodeset-future-reservation", HPC,
         (S("debug_nodeset", future_reservation="projects/p/regions/r/futureReservations/x", **NO_PLACEMENT),),
         ("future_reservation:", "projects/"), "is not a future reservation's name or path",
         "projects/PROJECT/zones/ZONE/futureReservations/NAME"),
    Case("nodeset-placement-distance", HPC, (S("debug_nodeset", placement_max_distance="4"),),
         ("placement_max_distance:", "4"), "placement_max_distance must be 1, 2 or 3, found 4", "null"),

    # ---- nodeset: the preconditions on its output
    Case("nodeset-h3-pd-ssd", HPC, (E("h3_nodeset", replace=(("disk_type: pd-balanced", "disk_type: pd-ssd"),)),),
         ("disk_type: pd-ssd", "pd-ssd"), "machine type h3-standard-88 cannot boot from a pd-ssd disk",
         "pd-balanced"),
    Case("nodeset-c3-default-disk", HPC, (S("debug_nodeset", machine_type="c3-standard-4"),),
         ("machine_type: c3-standard-4", "c3-standard-4"), "c3-standard-4 cannot boot from a pd-standard disk",
         "defaults to pd-standard"),
    Case("nodeset-reservation-zones", HPC, (S("debug_nodeset", reservation_name="res-a", zones="[us-central1-b]"),),
         ("zones:", "["), "a nodeset on a reservation cannot list further zones", "remove zones"),
    Case("nodeset-topology-needs-placement", HPC,
         (S("debug_nodeset", accelerator_topology="1x8", **A3, **NO_PLACEMENT),),
         ("enable_placement:", "false"), "accelerator_topology needs a compact placement", "enable_placement: true"),
    Case("nodeset-topology-misfit", HPC, (S("debug_nodeset", accelerator_topology="1x12", **A3),),
         ("accelerator_topology:", "1x12"), "'1x12' does not fit 8 GPU(s) per node", "multiple of the GPUs"),
    Case("nodeset-topology-without-gpus", HPC, (S("debug_nodeset", accelerator_topology="1x4"),),
         ("accelerator_topology:", "1x4"), "'1x4' does not fit 0 GPU(s) per node", "multiple of the GPUs"),
    Case("nodeset-distance-needs-placement", HPC,
         (S("debug_nodeset", placement_max_distance="2", **NO_PLACEMENT),),
         ("enable_placement:", "false"), "placement_max_distance needs a compact placement", "enable_placement: true"),
    Case("nodeset-a3-distance-1", HPC, (S("debug_nodeset", placement_max_distance="1", **A3),),
         ("placement_max_distance:", "1"), "A3 machines (a3-megagpu-8g) cannot be placed at distance 1", "2 or 3"),
    Case("nodeset-flex-reservation", HPC,
         (S("debug_nodeset", reservation_name="res-a", dws_flex="{enabled: true}"),),
         ("dws_flex:", "true"), "flex-start (dws_flex) cannot draw on a reservation", "remove reservation_name"),
    Case("nodeset-flex-zones", HPC, (S("debug_nodeset", zones="[us-central1-b]", dws_flex="{enabled: true}"),),
         ("zones:", "["), "flex-start (dws_flex) nodes cannot list further zones", "remove zones"),
    Case("nodeset-flex-migrate", HPC,
         (S("debug_nodeset", on_host_maintenance="MIGRATE", dws_flex="{max_run_duration: 3600}"),),
         ("on_host_maintenance:", "MIGRATE"), "must stop on host maintenance, found on_host_maintenance 'MIGRATE'",
         "TERMINATE"),
    Case("nodeset-two-reservations", HPC,
         (S("debug_nodeset", reservation_name="res-a", future_reservation="fr-a", **NO_PLACEMENT),),
         ("future_reservation:", "fr-a"), "a reservation or on a future reservation, not both",
         "remove reservation_name or future_reservation"),
    Case("nodeset-future-placement-default", HPC, (S("debug_nodeset", future_reservation="fr-a"),),
         ("future_reservation:", "fr-a"), "enable_placement is true", "it defaults to true"),
    Case("nodeset-future-placement-said", HPC, (S("debug_nodeset", future_reservation="fr-a", enable_placement="true"),),
         ("enable_placement:", "true"), "a future reservation does not take a compact placement",
         "enable_placement: false"),
    Case("nodeset-future-zones", HPC,
         (S("debug_nodeset", future_reservation="fr-a", zones="[us-central1-b]", **NO_PLACEMENT),),
         ("zones:", "["), "a nodeset on a future reservation cannot list further zones", "remove zones"),
    Case("nodeset-future-zone", HPC,
         (S("debug_nodeset", future_reservation="projects/p/zones/us-east1-b/futureReservations/fr-a", **NO_PLACEMENT),),
         ("future_reservation:", "projects/"), "future_reservation is in zone us-east1-b, the nodeset in us-central1-a",
         "zone to the future reservation's"),
    Case("nodeset-no-nodes", HPC, (S("debug_nodeset", node_count_dynamic_max="0"),),
         ("node_count_dynamic_max: 0", "0"), "the nodeset has no nodes", "at least one node"),

    # ---- TPU nodeset
    Case("tpu-version", TPU, (E("tpu_nodeset", drop=("node_type",), set={
         "accelerator_config": "{topology: 2x2, version: V5LITEPOD}"}),),
         ("accelerator_config:", "V5LITEPOD"), "accelerator_config.version 'V5LITEPOD' is not one", "node_type"),
    Case("tpu-topology", TPU, (E("tpu_nodeset", drop=("node_type",), set={
         "accelerator_config": "{topology: 2x, version: V3}"}),),
         ("accelerator_config:", "2x"), "accelerator_config.topology '2x' is not a TPU topology", "2x2x4"),
    Case("tpu-both", TPU, (S("tpu_nodeset", accelerator_config="{topology: 2x2, version: V3}"),),
         ("accelerator_config:", "{"), "this one gives both node_type and accelerator_config", "keep one"),
    Case("tpu-neither", TPU, (E("tpu_nodeset", drop=("node_type",)),),
         ("- id: tpu_nodeset", "tpu_nodeset"), "this one gives neither node_type nor accelerator_config", "keep one"),
    Case("tpu-too-few-nodes", TPU, (S("tpu_nodeset", node_type="v3-32", node_count_dynamic_max="0"),),
         ("node_count_dynamic_max:", "0"), "the TPU slice has 4 host(s)", "at least 4"),
    Case("tpu-dynamic-not-whole-slices", TPU, (S("tpu_nodeset", node_type="v3-32", node_count_dynamic_max="6"),),
         ("node_count_dynamic_max:", "6"), "node_count_dynamic_max must be a multiple of the slice's 4 host(s)",
         "whole slices"),
    Case("tpu-static-not-whole-slices", TPU,
         (S("tpu_nodeset", node_type="v3-32", node_count_dynamic_max="4", node_count_static="2"),),
         ("node_count_static:", "2"), "node_count_static must be a multiple of the slice's 4 host(s)", "whole slices"),

    # ---- partition
    Case("partition-nodeset-names", HPC,
         (S("compute_partition", nodeset="[$(compute_nodeset.nodeset), $(h3_nodeset.nodeset)]"),
          S("h3_nodeset", name="compute-nodeset-b")),
         ("name: compute-nodeset-b", "compute-nodeset-b"),
         "nodesets 'compute_nodeset' and 'h3_nodeset' both have the name 'computenodeset'", "at most 14"),
    Case("partition-tpu-nodeset-names", TPU, (E("tpu_nodeset", add_before=SECOND_TPU),
                                              E("tpu_partition", replace=(("use: [tpu_nodeset]",
                                                                           "use: [tpu_nodeset2, tpu_nodeset]"),))),
         ("- id: tpu_nodeset", "tpu_nodeset", 2), "nodesets 'tpu_nodeset2' and 'tpu_nodeset' both have the name "
         "'tpunodeset'", "another name"),
    Case("partition-dynamic-nodeset-names", HPC, (DYN, E("debug_nodeset", add_before=SECOND_DYN),
                                                  E("debug_partition", replace=(("- debug_nodeset",
                                                                                 "- debug_nodeset2\n    - debug_nodeset"),))),
         ("- id: debug_nodeset", "debug_nodeset", 2), "nodesets 'debug_nodeset2' and 'debug_nodeset' both have the "
         "name 'debugnodeset'", "another name"),
    Case("partition-network-storage", HPC, (S("debug_partition", network_storage=NS_NFS),),
         ("network_storage:", "["), "a partition takes no network_storage", "nodesets' network_storage"),

    # ---- controller
    Case("controller-cluster-name", HPC, (S("slurm_controller", slurm_cluster_name="My_Cluster"),),
         ("slurm_cluster_name:", "My_Cluster"), "invalid slurm_cluster_name 'My_Cluster'", "starting with a letter"),
    Case("controller-backup-state-disk", HA, (E("slurm_controller", drop=("controller_state_disk",)),),
         ("enable_backup_controller:", "true"), "not on controller_state_disk", "controller_state_disk: null"),
    Case("controller-backup-spool", HA, (E("slurm_controller", replace=(("local_mount: /var/spool/slurm",
                                                                         "local_mount: /var/spool/other"),)),),
         ("- server_ip: $(home_fs.network_storage.server_ip)", "-", 2), "network_storage mounts none there",
         "local_mount: /var/spool/slurm"),
    Case("controller-backup-static-ips", HA, (E("slurm_controller", replace=(('\n      - "10.80.0.11"', ""),)),),
         ('- "10.80.0.10"', "-"), "a backup controller needs two static_ips", "two internal IP addresses"),
    Case("controller-backup-cloudsql", HA, (E("slurm_controller", drop=("cloudsql",)),),
         ("enable_backup_controller:", "true"), "needs an external accounting database (cloudsql)", "cloudsql"),
    Case("controller-ha-type", HPC, (S("slurm_controller", controller_ha_type="multi-zonal"),),
         ("controller_ha_type:", "multi-zonal"), "controller_ha_type 'multi-zonal' is not one", "zonal, regional"),
    Case("controller-login-group-names", HPC,
         (E("slurm_login", add_before=SECOND_LOGIN),
          E("slurm_controller", replace=(("- slurm_login", "- slurm_login\n    - slurm_login2"),))),
         ("name_prefix: slurm-login", "slurm-login"),
         "login modules 'slurm_login' and 'slurm_login2' both make the login group 'slurm-login'", "name_prefix"),
    *(Case(f"controller-{s}-both", HPC, (S("slurm_controller", **{s: "[{filename: a.sh, content: echo, source: a.sh}]"}),),
           (f"{s}:", "{"), f"{s}[0] gives both of content and source", "one of the two")
      for s in ("prolog_scripts", "epilog_scripts", "task_prolog_scripts", "task_epilog_scripts")),
    Case("controller-script-neither", HPC,
         (S("slurm_controller", epilog_scripts="[{filename: a.sh, source: a.sh}, {filename: b.sh}]"),),
         ("epilog_scripts:", "{filename: b.sh}"), "epilog_scripts[1] gives neither of content and source"),
    _deprecated("controller", "slurm_controller", HPC, "enable_devel", "true", "always on"),
    _deprecated("controller", "slurm_controller", HPC, "disable_default_mounts", "false", "enable_default_mounts"),
    _deprecated("controller", "slurm_controller", HPC, "enable_slurm_gcp_plugins", "{}", "placement_max_distance"),
    _deprecated("controller", "slurm_controller", HPC, "compute_startup_script", "echo", "startup_script"),
]

# Blocks ctk checked before this table (ctk.plan), each shown once more here at its line.
_N, _P, _C = (ct_checks.short(k.source) for k in (ct.NODESET, ct.PARTITION, ct.CONTROLLER))
ELSEWHERE_CASES = [
    Case("nodeset-flex-duration", HPC, (S("debug_nodeset", dws_flex="{max_run_duration: 60}"),),
         ("dws_flex:", "60"), "max_run_duration must be 600 to 604800 seconds", "one week",
         ct=(_N, "variables.tf", "dws_flex")),
    Case("nodeset-flex-spot", HPC, (S("debug_nodeset", enable_spot_vm="true", dws_flex="{enabled: true}"),),
         ("enable_spot_vm:", "true"), "flex-start (dws_flex) and Spot VMs (enable_spot_vm) cannot be combined",
         ct=(_N, "outputs.tf", "nodeset")),
    Case("partition-name", HPC, (S("debug_partition", partition_name="Debug"),),
         ("partition_name: Debug", "Debug"), "invalid partition_name 'Debug'", "lowercase",
         ct=(_P, "variables.tf", "partition_name")),
    Case("partition-resume-timeout", HPC, (S("debug_partition", resume_timeout="0"),),
         ("resume_timeout:", "0"), "resume_timeout must be > 0 and < 65536", ct=(_P, "variables.tf", "resume_timeout")),
    Case("partition-suspend-time", HPC, (S("debug_partition", suspend_time="-5"),),
         ("suspend_time:", "-5"), "suspend_time must be >= -1", ct=(_P, "variables.tf", "suspend_time")),
    Case("partition-suspend-timeout", HPC, (S("debug_partition", suspend_timeout="0"),),
         ("suspend_timeout:", "0"), "suspend_timeout must be > 0", ct=(_P, "variables.tf", "suspend_timeout")),
    Case("partition-exclusive-static", HPC, (S("compute_nodeset", node_count_static="2"),),
         ("node_count_static:", "2"), "is exclusive, which Cluster Toolkit refuses with static nodes",
         "exclusive: false", ct=(_P, "outputs.tf", "partitions")),
    Case("partition-one-kind", HPC, (E("debug_partition", replace=(("\n    use:\n    - debug_nodeset", ""),)),),
         ("- id: debug_partition", "debug_partition"), "partition 'debug' has no nodeset", "exactly one kind",
         ct=(_P, "outputs.tf", "partitions")),
    Case("controller-partition-names", HPC, (S("h3_partition", partition_name="compute"),),
         ("partition_name: compute", "compute", 2), "partition name 'compute' is used twice",
         ct=(_C, "variables.tf", "partitions")),
]


def _validate(path: Path, capsys) -> tuple[int, list[dict]]:
    capsys.readouterr()
    rc = main(["validate", str(path), "--vars", VARS, "--json"])
    return rc, json.loads(capsys.readouterr().out).get("errors", [])


@pytest.mark.parametrize("case", CASES + ELSEWHERE_CASES, ids=lambda c: c.id)
def test_a_broken_rule_is_refused_at_its_setting(case, tmp_path, capsys):
    path = case.write(tmp_path)
    rc, errs = _validate(path, capsys)
    assert rc == 2, errs
    assert [(e["file"], f"{e['line']}:{e['col']}") for e in errs] == [(str(path), at(path, *case.where))], errs
    assert case.message in errs[0]["message"], errs
    assert case.hint in (errs[0]["hint"] or ""), errs
    assert errs[0]["hint"], errs


def test_the_dynamic_nodeset_base_validates(tmp_path, capsys):
    """The cases above change one thing at a time: what they start from is valid."""
    path = Case("dyn", HPC, (DYN,), ("", ""), "").write(tmp_path)
    assert _validate(path, capsys) == (0, [])


def test_every_check_has_a_case(tmp_path, monkeypatch):
    """Each check of the table, on each module kind it applies to, is broken by some case above."""
    fired: set[tuple[int, str]] = set()
    real = ct_checks.for_source

    def recording(source):
        def rec(check):
            def broken(v):
                r = check.broken(v)
                if r:
                    fired.add((id(check), source))
                return r
            return dataclasses.replace(check, broken=broken)
        return [rec(c) for c in real(source)]

    monkeypatch.setattr(ct_checks, "for_source", recording)
    for i, case in enumerate(CASES):
        folder = tmp_path / str(i)
        folder.mkdir()
        with pytest.raises(BlueprintErrors):
            process(str(case.write(folder)), [VARS])
    missing = [(c.message, ct_checks.short(m)) for c in ct_checks.CHECKS for m in c.modules if (id(c), m) not in fired]
    assert not missing, missing
    listed = {(m, f, b) for (m, f, b, _) in ct_checks.ELSEWHERE}
    assert {c.ct for c in ELSEWHERE_CASES} == listed


def test_the_fixtures_break_no_check_and_ctk_can_read_what_each_needs(monkeypatch):
    """Unchanged, the examples pass every check; and on them each check found the values it
    reads (a check that never can would cover nothing)."""
    from test_fixtures import blueprints, deployment_file, extra_vars

    known: set[int] = set()
    broken_on: list = []
    real = ct_checks.for_source

    def recording(source):
        def rec(check):
            def broken(v):
                r = check.broken(v)  # Unknown propagates: it was not known
                known.add(id(check))
                if r:
                    broken_on.append((v.module_id, check.message))
                return r
            return dataclasses.replace(check, broken=broken)
        return [rec(c) for c in real(source)]

    monkeypatch.setattr(ct_checks, "for_source", recording)
    seen_kinds = set()
    for bp in blueprints():
        exp = process(bp, [VARS] + extra_vars(bp), deployment_file(bp))
        seen_kinds |= {em.schema.source for em in exp.expanded.modules if em.schema}
    assert not broken_on
    for c in ct_checks.CHECKS:
        if seen_kinds & set(c.modules):
            assert id(c) in known, c.message


def test_the_command_line_exits_2_without_a_traceback(tmp_path):
    path = CASES[0].write(tmp_path)
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2] / "toolkit"))
    p = subprocess.run([sys.executable, "-m", "ctk", "validate", str(path), "--vars", VARS],
                       capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 2, p.stderr
    assert "Traceback" not in p.stderr
    where = at(path, *CASES[0].where)
    assert f"{path}:{where}: error: nodeset 'debug_nodeset': instance_image names no project" in p.stderr
    assert "hint: add project" in p.stderr
