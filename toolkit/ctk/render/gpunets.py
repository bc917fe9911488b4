"""The GPU networks of a gcp-target hand-off (pure): the Cluster Toolkit modules and settings that
give each GPU nodeset of ctk's kinds the network its machine needs (ctk.modules.gpu_networks),
added once per deployment and wired to the nodesets that need them:

    GPUDirect-TCPX / TCPXO   a modules/network/multivpc of the machine's GPU networks in the
                             nodeset's `use` (its additional_networks output), the primary
                             network clear of their range at MTU 8244, and slurm-gcp's RxDM as
                             the prolog and epilog of the nodeset's partitions (staged by the
                             controller's startup script, run by slurmd from
                             /opt/apps/adm/slurm: enable_external_prolog_epilog, and the
                             long-prolog slurm.conf template for RxDM's start)
    RDMA                     a second gVNIC network and a modules/network/gpu-rdma-vpc, as the
                             nodeset's additional_networks (the second NIC first, then the RDMA
                             subnetworks' interfaces), the primary network at MTU 8896, and
                             Google's gIB NCCL plugin installed by the nodes' startup script
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from ..model import Deployment, Nodeset
from ..modules import gpu_networks as gn
from ..modules.gpu_networks import GpuNetwork

CT_VPC = "modules/network/vpc"
CT_SCRIPT = "modules/scripts/startup-script"


@dataclass
class Wiring:
    """What the hand-off adds for the GPU networks of a deployment."""

    network_settings: dict = field(default_factory=dict)  # the primary vpc's
    network_modules: list[dict] = field(default_factory=list)  # beside the primary vpc
    cluster_modules: list[dict] = field(default_factory=list)  # startup scripts, before the nodesets
    nodeset_use: dict[str, list[str]] = field(default_factory=dict)  # nodeset module id -> more `use`
    nodeset_settings: dict[str, dict] = field(default_factory=dict)  # nodeset module id -> settings
    controller_settings: dict = field(default_factory=dict)
    # nodeset name -> what its GPUs talk over, in words (README, job render --check)
    described: dict[str, str] = field(default_factory=dict)


def wired_nodesets(dep: Deployment) -> list[tuple[Nodeset, GpuNetwork]]:
    """The nodesets whose GPU network the hand-off builds: those whose jobs' network is their
    machine's own (planning turned the rest to tcp)."""
    return [(ns, g) for ns in dep.nodesets if not ns.tpu_type and (g := gn.built_for(ns.machine_type, ns.network))]


def _suffix(i: int, n: int, keys: list) -> str:
    """'' when the deployment has one set of such networks (KEYS), else what tells set I apart: its
    NIC count N, or its place where two sets have the same count."""
    if len(keys) == 1:
        return ""
    counts = [k if isinstance(k, int) else k[0] for k in keys]
    return str(n) if counts.count(n) == 1 else f"{n}_{i}"


MULTIVPC_ID, NET1_ID, RDMA_ID, RDMA_STARTUP_ID, CONTROLLER_STARTUP_ID = gn.MODULE_IDS


def wiring(dep: Deployment) -> Wiring:
    w = Wiring()
    wired = wired_nodesets(dep)
    if not wired:
        return w
    w.network_settings["mtu"] = min(g.primary_mtu for _, g in wired)
    if any(g.multivpc for _, g in wired):
        w.network_settings["network_address_range"] = gn.PRIMARY_RANGE_WITH_GPUNETS

    counts = sorted({g.gpu_nics for _, g in wired if g.multivpc})
    multivpc_id = {}
    for i, n in enumerate(counts):
        sfx = _suffix(i, n, counts)
        multivpc_id[n] = f"{MULTIVPC_ID}{sfx and '_' + sfx}"
        w.network_modules.append({"id": multivpc_id[n], "source": gn.MULTIVPC, "settings": {
            "network_name_prefix": f"$(vars.deployment_name)-gpunet{sfx.replace('_', '-')}",
            "global_ip_address_range": gn.GPUNETS_RANGE,
            "network_count": n,
            "subnetwork_cidr_suffix": gn.GPUNETS_CIDR_SUFFIX}})

    rdma_sets = sorted({(g.gpu_nics, g.second_nic_range) for _, g in wired if not g.multivpc})
    rdma_ids = {}
    for i, key in enumerate(rdma_sets):
        n, net1 = key
        sfx = _suffix(i, n, rdma_sets)
        net1_id, rdma_id = f"{NET1_ID}{sfx and '_' + sfx}", f"{RDMA_ID}{sfx and '_' + sfx}"
        rdma_ids[key] = (net1_id, rdma_id)
        name = f"$(vars.deployment_name){sfx and '-' + sfx.replace('_', '-')}"
        w.network_modules += [
            {"id": net1_id, "source": CT_VPC, "settings": {
                "network_name": f"{name}-net-1", "mtu": 8896, "enable_internal_traffic": False,
                "subnetworks": [{"subnet_name": f"{name}-sub-1", "subnet_region": "$(vars.region)", "subnet_ip": net1}],
                "firewall_rules": [{"name": f"{name}-internal-1", "ranges": [net1],
                                    "allow": [{"protocol": p} for p in ("tcp", "udp", "icmp")]}]}},
            {"id": rdma_id, "source": gn.RDMA_VPC, "settings": {
                "network_name": f"{name}-rdma-net",
                "network_profile": "https://www.googleapis.com/compute/beta/projects/$(vars.project_id)/global/"
                                   "networkProfiles/$(vars.zone)-vpc-roce",
                "network_routing_mode": "REGIONAL",
                "subnetworks_template": {"name_prefix": f"{name}-mrdma-sub", "count": n, "ip_range": gn.RDMA_RANGE,
                                         "region": "$(vars.region)"}}},
        ]

    if rdma_sets:
        w.cluster_modules.append({"id": RDMA_STARTUP_ID, "source": CT_SCRIPT, "settings": {"runners": [
            {"type": "shell", "destination": "ctk-nccl-gib.sh", "content": nccl_gib_script()}]}})
    rxdm = _rxdm_partitions(dep, wired)
    members = {p.name: p.nodesets for p in dep.partitions}
    for ns, g in wired:
        if g.multivpc:
            w.nodeset_use[ns.module_id] = [multivpc_id[g.gpu_nics]]
            parts = [p for p, _ in rxdm if ns.name in members[p]]
            w.described[ns.name] = (f"{g.transport}: {g.gpu_nics} GPU networks (multivpc '{multivpc_id[g.gpu_nics]}')"
                                    + (f", slurm-gcp's RxDM as the prolog and epilog of partition {', '.join(parts)}"
                                       if parts else ", and no RxDM: the nodeset is in no partition"))
        else:
            net1_id, rdma_id = rdma_ids[(g.gpu_nics, g.second_nic_range)]
            w.nodeset_settings[ns.module_id] = {
                "additional_networks": additional_networks(net1_id, rdma_id),
                "startup_script": f"$({RDMA_STARTUP_ID}.startup_script)"}
            w.described[ns.name] = (f"rdma: a second gVNIC network ('{net1_id}') and {g.gpu_nics} RDMA subnetworks "
                                    f"('{rdma_id}'), Google's gIB NCCL plugin")

    if rxdm:
        w.cluster_modules.append({"id": CONTROLLER_STARTUP_ID, "source": CT_SCRIPT, "settings": {"runners": [
            {"type": "shell", "destination": "ctk-rxdm.sh", "content": rxdm_script(rxdm)}]}})
        w.controller_settings.update({"controller_startup_script": f"$({CONTROLLER_STARTUP_ID}.startup_script)",
                                      "enable_external_prolog_epilog": True, "slurm_conf_tpl": gn.LONG_PROLOG_TPL})
    return w


def additional_networks(net1_id: str, rdma_id: str) -> str:
    """The nodeset's NICs beyond the primary one: the second gVNIC network's, then one per RDMA
    subnetwork (gpu-rdma-vpc's subnetwork_interfaces), as Cluster Toolkit's RDMA examples."""
    nic = ", ".join((
        "network=null", f"subnetwork={net1_id}.subnetwork_self_link", "subnetwork_project=vars.project_id",
        'nic_type="GVNIC"', "queue_count=null", 'network_ip=""', "stack_type=null", "access_config=[]",
        "ipv6_access_config=[]", "alias_ip_range=[]"))
    return f"$(concat([{{{nic}}}], {rdma_id}.subnetwork_interfaces))"


def _rxdm_partitions(dep: Deployment, wired: list[tuple[Nodeset, GpuNetwork]]) -> list[tuple[str, GpuNetwork]]:
    """(partition, its nodes' GPU network) for each partition with a TCPX or TCPXO nodeset
    (planning refuses a partition that mixes two)."""
    by_name = {ns.name: g for ns, g in wired if g.multivpc}
    out = []
    for p in dep.partitions:
        gs = [by_name[n] for n in p.nodesets if n in by_name]
        if gs:
            out.append((p.name, gs[0]))
    return out


def rxdm_script(partitions: list[tuple[str, GpuNetwork]]) -> str:
    """The controller's startup runner that stages slurm-gcp's RxDM as the prolog and epilog of
    PARTITIONS, in the folders slurmd runs them from: each script fetched from one commit of
    slurm-gcp and checked against its SHA-256, behind ctk's check of what it needs on the node."""
    nets = {g.rxdm: g for _, g in partitions}
    fetches = "\n".join(f"fetch {s} {gn.PROLOG_SHA256[s]}" for s in sorted(nets))
    guards = "\n".join(_guard(s, nets[s]) for s in sorted(nets))
    links = "\n".join(f"link {shlex.quote(p)} {g.rxdm} {g.rxdm_links[0]} {g.rxdm_links[1]}" for p, g in partitions)
    return f"""#!/bin/bash
# ctk: the receive-datapath manager (RxDM) GPUDirect-TCPX(O) needs on every node of a job, as
# the prolog and epilog of the partitions whose nodes have it: slurm-gcp's script (from commit
# {gn.SLURM_GCP_COMMIT[:12]}, checked), run by slurmd from these folders as a job starts and ends
# (enable_external_prolog_epilog) through ctk's check of what it needs on the node.
set -uo pipefail
adm={gn.SLURM_ADM}
install -d -m 0755 "$adm/scripts"
fetch() {{  # NAME SHA256: slurm-gcp's script NAME into $adm/scripts; without it, jobs run without RxDM
  if curl -fsS --retry 5 -o "$adm/scripts/$1.part" "{gn.PROLOG_URL}$1" \\
      && echo "$2  $adm/scripts/$1.part" | sha256sum --check --quiet --strict; then
    chmod 0755 "$adm/scripts/$1.part" && mv -f "$adm/scripts/$1.part" "$adm/scripts/$1"
  else
    rm -f "$adm/scripts/$1.part"
    echo "ctk: could not fetch slurm-gcp's $1 (or it was not the file expected); jobs run without RxDM" >&2
  fi
}}
link() {{  # PARTITION SCRIPT PROLOG EPILOG
  install -d -m 0755 "$adm/partition-$1-prolog_slurmd.d" "$adm/partition-$1-epilog_slurmd.d"
  ln -sfn "$adm/scripts/ctk-$2" "$adm/partition-$1-prolog_slurmd.d/$3.prolog_slurmd"
  ln -sfn "$adm/scripts/ctk-$2" "$adm/partition-$1-epilog_slurmd.d/$4.epilog_slurmd"
}}
{fetches}
{guards}
{links}
"""


def _guard(script: str, g: GpuNetwork) -> str:
    """The runner's lines that write ctk-SCRIPT: SCRIPT where the node has what it needs (else the
    job goes on without GPUDirect, and the node's log says why)."""
    needs = list(gn.RXDM_NEEDS_ALL) + list(gn.RXDM_NEEDS.get(g.transport, ()))
    checks = "\n".join(f'{test} >/dev/null 2>&1 || missing="$missing, {what}"' for test, what in needs)
    return f"""cat > "$adm/scripts/ctk-{script}.part" <<'CTK_EOF'
#!/bin/bash
# ctk: slurm-gcp's {script} for {g.transport}, where this node has what it needs; where not, the
# job runs on without GPUDirect (NCCL then uses sockets) and the node's log (ctk-rxdm) says why.
missing=""
test -x {gn.SLURM_ADM}/scripts/{script} || missing="$missing, slurm-gcp's {script} (not fetched)"
{checks}
if [ -n "$missing" ]; then
  logger -t ctk-rxdm "job ${{SLURM_JOB_ID:-?}}: RxDM skipped, this node lacks ${{missing#, }}" || true
  exit 0
fi
exec {gn.SLURM_ADM}/scripts/{script} "$@"
CTK_EOF
chmod 0755 "$adm/scripts/ctk-{script}.part" && mv -f "$adm/scripts/ctk-{script}.part" "$adm/scripts/ctk-{script}"
"""


def nccl_gib_script() -> str:
    """The RDMA nodes' startup runner: Google's gIB NCCL plugin from its apt repository (held at
    its version), and its settings for login shells (ctk's jobs source them themselves)."""
    return f"""#!/bin/bash
# ctk: Google's gIB NCCL plugin for RDMA over RoCE (package nccl-gib {gn.NCCL_GIB_VERSION}) from Google's
# Artifact Registry, once per node; /usr/local/gib/scripts/set_nccl_env.sh sets NCCL up for it.
set -euo pipefail
want={gn.NCCL_GIB_VERSION}
if dpkg-query -W -f='${{Version}}\\n' nccl-gib 2>/dev/null | grep -qxF "$want"; then
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
keys=/usr/share/keyrings/ctk-google-apt.gpg
tmp=/var/tmp/ctk-nccl-gib
rm -rf "$tmp" && mkdir -m 0700 "$tmp"
trap 'rm -rf "$tmp"' EXIT
curl -fsS --retry 5 -o "$tmp/cloud.asc" https://packages.cloud.google.com/apt/doc/apt-key.gpg
curl -fsS --retry 5 -o "$tmp/ar.asc" https://us-apt.pkg.dev/doc/repo-signing-key.gpg
cat "$tmp/cloud.asc" "$tmp/ar.asc" | gpg --dearmor > "$tmp/keys.gpg"
install -m 0644 "$tmp/keys.gpg" "$keys"
echo "deb [signed-by=$keys] https://packages.cloud.google.com/apt apt-transport-artifact-registry-stable main" \\
  > /etc/apt/sources.list.d/ctk-artifact-registry.list
apt-get update -q
apt-get install -y -q apt-transport-artifact-registry
echo "deb [signed-by=$keys] ar+https://us-apt.pkg.dev/projects/gce-ai-infra gpudirect-gib-apt main" \\
  > /etc/apt/sources.list.d/ctk-nccl-gib.list
apt-get update -q
apt-get install -y -q "nccl-gib=$want"
apt-mark hold nccl-gib
cat > /etc/profile.d/ctk-nccl-gib.sh <<'EOF'
# ctk: NCCL over Google's gIB plugin (RDMA), for login shells
if [ -r /usr/local/gib/scripts/set_nccl_env.sh ]; then
  . /usr/local/gib/scripts/set_nccl_env.sh
fi
case ":${{LD_LIBRARY_PATH:-}}:" in
  *:/usr/local/gib/lib64:*) ;;
  *) export LD_LIBRARY_PATH="/usr/local/gib/lib64${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}" ;;
esac
EOF
"""
