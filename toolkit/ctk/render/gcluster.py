"""The gcp target's hand-off (pure): a Cluster Toolkit blueprint that gcluster deploys, shaped
like Cluster Toolkit's image-builder example, with ctk's roles staged as one tarball.

    gcp/blueprint.yaml     a primary group (the vpc, and per image a startup-script that unpacks
                           ctk's roles and runs them locally), one packer group per image
                           (modules/packer/custom-image on slurm-gcp's family for the image's
                           base) and the cluster group (Cluster Toolkit's Slurm modules booting
                           the built images)
    gcp/ctk-roles.tar.gz   ctk's Ansible roles and each image's role variables, byte for byte
                           the same for the same roles and images (sorted, no times, no owners)
    gcp/README.md          what to run

A blueprint of ctk's own kinds with a ctk/target/gcp module is translated whole. A Cluster
Toolkit blueprint that builds its own images (a custom-image module) is kept as written, and
ctk's roles run after its own image build, from the startup script that build uses. On
slurm-gcp's images ctk never applies munge, slurm, nvidia_driver or cuda: the image has them
(ctk.modules.slurm_gcp).
"""

from __future__ import annotations

import copy
import gzip
import io
import json
import os
import re
import tarfile

from .. import paths
from ..blueprint.expand import Expanded, plain
from ..blueprint.expression import is_deferred
from ..model import Controller, Deployment, GcpSettings, ImageSpec, Nodeset, Partition
from ..modules import gpu_networks, lookup, slurm_gcp
from ..modules.machines import lookup_machine
from ..plan.values import module_ident
from ..stacks import get_stack
from ..stacks.rolevars import role_variables
from ..yamlout import dump
from . import gpunets

TARBALL = "ctk-roles.tar.gz"
TARBALL_PATH = f"gcp/{TARBALL}"  # in the deployment folder
TARBALL_ON_VM = "/var/tmp/ctk-roles.tar.gz"
# The ansible-core the build VM runs ctk's roles with (the release ctk itself is tested with).
ANSIBLE_CORE = "2.19.14"
CT_NODESET = "community/modules/compute/schedmd-slurm-gcp-v6-nodeset"
CT_NODESET_TPU = "community/modules/compute/schedmd-slurm-gcp-v6-nodeset-tpu"
CT_PARTITION = "community/modules/compute/schedmd-slurm-gcp-v6-partition"
CT_LOGIN = "community/modules/scheduler/schedmd-slurm-gcp-v6-login"
CT_CONTROLLER = "community/modules/scheduler/schedmd-slurm-gcp-v6-controller"
CT_IMAGE = "modules/packer/custom-image"
CT_SCRIPT = "modules/scripts/startup-script"
CT_VPC = "modules/network/vpc"
# Machine families that take Hyperdisk only (no Persistent Disk): their boot disk type.
_HYPERDISK_ONLY = ("c4", "c4a", "c4d", "n4", "h4d", "a4", "a4x", "x4", "m4", "g4")
_HYPERDISK_ONLY_TYPES = ("a3-ultragpu-",)  # A3 Ultra, unlike the other A3s


def gcp_roles(img: ImageSpec) -> list[str]:
    """The roles an image gets on slurm-gcp's images: its own, less what that image brings."""
    roles = [r for r in img.roles if r not in slurm_gcp.BROUGHT_BY_IMAGE]
    if img.source != "ctk/image":  # Cluster Toolkit's image builds bring their accelerator stack
        roles = [r for r in roles if r in ("common", "jax")]
    return roles


def hands_off(exp: Expanded, dep: Deployment) -> bool:
    """Whether the deployment folder gets gcp/: a gcp target, or a Cluster Toolkit blueprint
    with a Slurm controller that builds its own images."""
    if dep.traits.hands_off_to_gcluster:
        return True
    has = {em.module.source for em in exp.modules}
    return CT_CONTROLLER in has and any(img.source == CT_IMAGE for img in dep.images)


def gcp_files(exp: Expanded, dep: Deployment) -> dict[str, str | bytes]:
    """gcp/'s files by deployment-folder-relative path; {} when the blueprint is not for Google
    Cloud."""
    if not hands_off(exp, dep):
        return {}
    images = [img for img in dep.images if img.source == "ctk/image" or img.source == CT_IMAGE]
    if dep.traits.hands_off_to_gcluster:
        bp = native_blueprint(exp, dep)
    else:
        bp = _kept(exp, dep)
    header = (f"# Written by `ctk create` from {os.path.basename(exp.blueprint.doc.file)}: Cluster Toolkit deploys "
              "it (see README.md here).\n# ctk's roles are in ctk-roles.tar.gz beside it; "
              "change the ctk blueprint and run ctk create again rather than editing this file.\n")
    return {
        "gcp/blueprint.yaml": header + "---\n" + dump(bp),
        TARBALL_PATH: roles_tarball({img.name: image_vars(img) for img in images}),
        "gcp/README.md": _readme(exp, dep, images),
    }


# ---- the roles tarball -------------------------------------------------------------------

def image_vars(img: ImageSpec) -> dict:
    """The role variables of an image's build on Google Cloud (the install phase): its roles'
    own, as a local build gives each layer."""
    roles = gcp_roles(img)
    # The build VM runs systemd, as the nodes booted from the image will: package scripts may
    # start their daemons, and no policy-rc.d is left in the image to stop later ones.
    out: dict = {"ctk_roles": roles, "common_block_service_autostart": False}
    stack = get_stack(img.stack)
    for role in roles:
        out.update(role_variables(img, role, stack))
    if "pyxis" in roles:  # slurm-gcp's Slurm keeps its configuration under /usr/local
        out["pyxis_slurm_etc"] = slurm_gcp.SLURM_ETC
    return out


def _info(name: str, mode: int, size: int = 0, kind: bytes = tarfile.REGTYPE) -> tarfile.TarInfo:
    ti = tarfile.TarInfo(name)
    ti.type, ti.mode, ti.size = kind, mode, size
    ti.mtime, ti.uid, ti.gid, ti.uname, ti.gname = 0, 0, 0, "", ""
    return ti


def roles_tarball(images: dict[str, dict]) -> bytes:
    """ctk's ansible/ folder plus images/NAME.json per image, as a reproducible .tar.gz."""
    root = paths.ansible_dir()
    entries: dict[str, bytes | None] = {"ansible": None, "images": None}  # None: a folder
    for dirpath, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        rel = os.path.relpath(dirpath, root)
        base = "ansible" if rel == "." else f"ansible/{rel}"
        for d in dirs:
            entries[f"{base}/{d}"] = None
        for f in files:
            if not f.endswith((".pyc", ".retry")):
                with open(os.path.join(dirpath, f), "rb") as fh:
                    entries[f"{base}/{f}"] = fh.read()
    for name, v in sorted(images.items()):
        entries[f"images/{name}.json"] = (json.dumps(v, indent=2, sort_keys=True) + "\n").encode()
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0) as gz:
        with tarfile.open(fileobj=gz, mode="w", format=tarfile.GNU_FORMAT) as tar:
            for name in sorted(entries):
                data = entries[name]
                if data is None:
                    tar.addfile(_info(name, 0o755, kind=tarfile.DIRTYPE))
                else:
                    executable = data.startswith(b"#!")
                    tar.addfile(_info(name, 0o755 if executable else 0o644, len(data)), io.BytesIO(data))
    return buf.getvalue()


def install_script(image: str) -> str:
    """The startup-script runner that applies ctk's roles for IMAGE on the build VM."""
    return f"""#!/bin/bash
# ctk: apply ctk's roles for image {image} (their install phase) on this build VM, with
# Ansible run locally. ctk-roles.tar.gz holds the roles and the image's variables.
set -euo pipefail
dir=/var/tmp/ctk
rm -rf "$dir" && mkdir -p "$dir"
tar -xzf {TARBALL_ON_VM} -C "$dir"
# ansible-core {ANSIBLE_CORE} needs Python >= 3.11: slurm-gcp's own ({slurm_gcp.SLURM_PYTHON}) where the OS has older
py={slurm_gcp.SLURM_PYTHON}
[ -x "$py" ] || py=python3
"$py" -m venv "$dir/venv"
"$dir/venv/bin/pip" install --quiet 'ansible-core=={ANSIBLE_CORE}'
"$dir/venv/bin/ansible-playbook" --connection=local --inventory=localhost, "$dir/ansible/site.yml" \\
  --extra-vars "@$dir/images/{image}.json" --extra-vars ctk_phase=install
rm -rf "$dir" {TARBALL_ON_VM}
"""


def _runners(image: str) -> list[dict]:
    return [
        {"type": "data", "source": f'$(ghpc_stage("{TARBALL}"))', "destination": TARBALL_ON_VM},
        {"type": "shell", "destination": f"ctk-image-{image}.sh", "content": install_script(image)},
    ]


# ---- a blueprint of ctk's own kinds ------------------------------------------------------



def family_name(img: ImageSpec) -> str:
    """The family of the built image: a GCE resource name."""
    return re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]", "-", img.name.lower())).strip("-")[:62] or "ctk-image"


def _image_var(img: ImageSpec) -> str:
    return f"{module_ident(img.name)}_image"


def _image_ref(dep: Deployment, name: str | None) -> str:
    img = dep.image_named(name)
    return f"$(vars.{_image_var(img)})" if img else ""


def _boot_disk(machine_type: str) -> str:
    family = machine_type.split("-", 1)[0]
    hyperdisk = family in _HYPERDISK_ONLY or machine_type.startswith(_HYPERDISK_ONLY_TYPES)
    return "hyperdisk-balanced" if hyperdisk else "pd-balanced"


def _booting(dep: Deployment, image: str | None, machine_type: str) -> dict:
    """Settings of a Slurm VM module that boots a ctk image."""
    ref = _image_ref(dep, image)
    booting = {"instance_image": ref, "instance_image_custom": True} if ref else {}  # none: slurm-gcp's own
    return {"machine_type": machine_type, **booting, "allow_automatic_updates": False,
            "disk_type": _boot_disk(machine_type)}


def _nodeset(exp: Expanded, dep: Deployment, ns: Nodeset) -> dict:
    counts = {"node_count_static": ns.node_count_static, "node_count_dynamic_max": ns.node_count_dynamic_max}
    if ns.tpu_type:
        return {"id": ns.module_id, "source": CT_NODESET_TPU, "use": ["network"],
                "settings": {"name": ns.name, "node_type": ns.tpu_type, **counts, "preemptible": ns.spot}}
    em = exp.module(ns.module_id)
    settings = {"name": ns.name, **counts, **_booting(dep, ns.image, ns.machine_type)}
    if ns.spot:
        settings["enable_spot_vm"] = True
    if ns.flex_max_run_duration is not None:  # the ctk nodeset's dws_flex as written (the same keys)
        settings["dws_flex"] = plain(em.get("dws_flex")) if em else {"max_run_duration": ns.flex_max_run_duration}
    for key in ("enable_placement", "placement_max_distance", "reservation_name"):  # Cluster Toolkit's, as written
        v = em.get(key) if em and key in em.explicit | em.from_vars else None
        if v is not None and v != "":
            settings[key] = plain(v)
    conf = dict(ns.node_conf)
    if ns.features:
        conf["Features"] = ",".join(ns.features)
    if conf:
        settings["node_conf"] = conf
    mt = lookup_machine(ns.machine_type)
    if mt is not None and mt.gpu_count and ns.machine_type.split("-", 1)[0] in ("a2", "a3", "a4", "a4x", "g2", "g4"):
        settings["bandwidth_tier"] = "gvnic_enabled"
    return {"id": ns.module_id, "source": CT_NODESET, "use": ["network"], "settings": settings}


_CLOUD_PARAMETERS = ("resume_timeout", "suspend_timeout", "resume_rate", "suspend_rate")


def _power_settings(exp: Expanded, p: Partition, conf: dict) -> dict:
    """A partition's suspend_time, resume_timeout and suspend_timeout as Cluster Toolkit's settings of
    those names, where they are not its defaults. The timeouts the ctk partition set as settings
    (not in partition_conf) leave CONF."""
    out: dict = {}
    if p.suspend_time != Partition.suspend_time:
        out["suspend_time"] = p.suspend_time
    em = exp.module(p.module_id)
    written = em.get("partition_conf") if em else None
    for key, slurm_key in (("resume_timeout", "ResumeTimeout"), ("suspend_timeout", "SuspendTimeout")):
        v = em.setting(key) if em else None
        if v is None or is_deferred(v) or (isinstance(written, dict) and slurm_key in written):
            continue
        out[key] = p.conf[slurm_key]
        conf.pop(slurm_key, None)
    return out


def native_blueprint(exp: Expanded, dep: Deployment, pinned: dict[str, str] | None = None) -> dict:
    """The Cluster Toolkit blueprint of a gcp-target deployment. With PINNED (image name ->
    built image's name), the cluster alone, booting those images by name (render.packer)."""
    g = dep.settings_of(GcpSettings)
    images = [img for img in dep.images if img.source == "ctk/image"]
    given = {"project_id": g.project_id, "region": g.region, "zone": g.zone}
    vars_: dict = {"project_id": None, "deployment_name": dep.deployment_name, "region": None, "zone": None}
    for k, v in given.items():
        vars_[k] = v if v is not None else exp.vars.get(k)
    if dep.controller and dep.controller.slurm_auth:
        vars_["enable_slurm_auth"] = True
    for img in images:
        vars_[_image_var(img)] = ({"name": pinned[img.name]} if pinned else {"family": family_name(img)}) \
            | {"project": "$(vars.project_id)"}

    nets = gpunets.wiring(dep)
    primary: list[dict] = [{"id": "network", "source": CT_VPC, **({"settings": nets.network_settings}
                                                                  if nets.network_settings else {})},
                           *nets.network_modules]
    groups: list[dict] = [{"group": "primary", "modules": primary}]
    for img in images if pinned is None else ():
        fam = slurm_gcp.family_for(img.base)
        assert fam is not None  # planning refused the others
        script = f"{module_ident(img.name)}_script"
        primary.append({"id": script, "source": CT_SCRIPT, "settings": {"runners": _runners(img.name)}})
        groups.append({"group": f"packer_{module_ident(img.name)}", "modules": [{
            "id": f"{module_ident(img.name)}_build", "source": CT_IMAGE, "kind": "packer", "use": ["network", script],
            "settings": {
                "source_image_project_id": [slurm_gcp.PROJECT],
                "source_image_family": fam.family,
                "image_family": f"$(vars.{_image_var(img)}.family)",
                "machine_type": g.image_machine_type or "n2-standard-8",
                "disk_size": 50 if g.image_disk_size is None else g.image_disk_size,
                "state_timeout": "30m",
            }}]})

    cluster = list(nets.cluster_modules)
    for ns in dep.nodesets:
        mod = _nodeset(exp, dep, ns)
        mod["use"] += nets.nodeset_use.get(ns.module_id, [])
        mod["settings"].update(nets.nodeset_settings.get(ns.module_id, {}))
        cluster.append(mod)
    by_name = {ns.name: ns.module_id for ns in dep.nodesets}
    for p in dep.partitions:
        conf = {k: str(v) for k, v in p.conf.items()}
        if p.max_time:
            conf["MaxTime"] = p.max_time
        if p.oversubscribe:
            conf["OverSubscribe"] = p.oversubscribe
        settings: dict = {"partition_name": p.name, "is_default": p.is_default, "exclusive": p.exclusive,
                          **_power_settings(exp, p, conf)}
        if conf:
            settings["partition_conf"] = conf
        cluster.append({"id": p.module_id, "source": CT_PARTITION,
                        "use": [by_name[n] for n in p.nodesets if n in by_name], "settings": settings})
    for lg in dep.logins:
        em = exp.module(lg.module_id)
        prefix = str(em.get("name_prefix") or "login") if em else "login"
        cluster.append({"id": lg.module_id, "source": CT_LOGIN, "use": ["network"],
                        "settings": {"name_prefix": prefix, "num_instances": lg.count,
                                     **_booting(dep, lg.image, lg.machine_type)}})
    ctl = dep.controller
    if ctl is not None:
        settings = _booting(dep, ctl.image, ctl.machine_type)
        if ctl.slurm_auth:
            settings["enable_slurm_auth"] = "$(vars.enable_slurm_auth)"
        params = {k: getattr(ctl, k) for k in _CLOUD_PARAMETERS if getattr(ctl, k) != getattr(Controller, k)}
        if params:
            settings["cloud_parameters"] = params
        settings.update(nets.controller_settings)
        cluster.append({"id": ctl.module_id or "controller", "source": CT_CONTROLLER,
                        "use": ["network", *(p.module_id for p in dep.partitions), *(lg.module_id for lg in dep.logins)],
                        "settings": settings})
    groups.append({"group": "cluster", "modules": cluster})
    return {"blueprint_name": exp.blueprint.name, "vars": vars_, "deployment_groups": groups}


# ---- a Cluster Toolkit blueprint that builds its own images ------------------------------

def _kept(exp: Expanded, dep: Deployment) -> dict:
    """The blueprint as written (vars given to ctk on the command line or in a deployment file
    included), with ctk's runners after those of each image build's startup script."""
    bp = exp.blueprint
    data = copy.deepcopy(bp.doc.value)
    assert isinstance(data, dict)  # a blueprint is a mapping (check_structure)
    vars_ = data.setdefault("vars", {}) or {}
    data["vars"] = vars_
    for name, src in exp.var_sources.items():
        if src.doc is not bp.doc and name in exp.vars:
            vars_[name] = plain(exp.vars[name])
    for g in data["deployment_groups"]:  # the lab's settings (ctk/target/local) are not Cluster Toolkit's
        if g.get("modules"):
            g["modules"] = [m for m in g["modules"] if m.get("source") != "ctk/target/local"]
    modules = {m["id"]: m for g in data["deployment_groups"] for m in g.get("modules", [])}
    for img in dep.images:
        if img.source != CT_IMAGE:
            continue
        packer = modules[img.module_id]
        scripts = [u for u in packer.get("use", []) if (k := lookup(modules[u]["source"])) and k.role == "startup-script"]
        if scripts:
            script = modules[scripts[0]]
        else:
            script = {"id": f"ctk_{module_ident(img.name)}_script", "source": CT_SCRIPT, "settings": {}}
            data["deployment_groups"][0]["modules"].append(script)
            packer.setdefault("use", []).append(script["id"])
        settings = script.setdefault("settings", {}) or {}
        script["settings"] = settings
        settings["runners"] = list(settings.get("runners") or []) + _runners(img.name)
    return data


def _gpu_network_lines(dep: Deployment) -> list[str]:
    """What the README says of the GPU networks blueprint.yaml builds."""
    described = gpunets.wiring(dep).described
    if not described:
        return []
    lines = ["", "The GPU networks, as Cluster Toolkit's examples/machine-learning build them for these machines:", ""]
    by_name = {ns.name: ns for ns in dep.nodesets}
    lines += [f"- nodeset `{n}` ({by_name[n].machine_type}): {d}" for n, d in described.items()]
    nets = {by_name[n].network for n in described}
    if nets & {"gpudirect-tcpx", "gpudirect-tcpxo"}:
        lines += ["", "RxDM runs in Docker containers (NVIDIA's container toolkit) on the nodes; TCPXO's needs the",
                  "dmabuf-import-helper kernel module and the aperture devices' udev rule too, TCPX's the NIC",
                  "topology file",
                  "/opt/tcpdirect_benchmark/gpu_rxq_configuration.textproto. Cluster Toolkit's A3 images carry",
                  "them; ctk's roles do not install them yet. Where a node lacks one, ctk's wrapper lets the job",
                  "run without RxDM (NCCL then uses sockets) and logs why (`journalctl -t ctk-rxdm`).",
                  "The controller fetches slurm-gcp's RxDM scripts at boot from commit "
                  f"{gpu_networks.SLURM_GCP_COMMIT[:12]}, checking",
                  "each file's SHA-256; the scripts pull their containers at each job."]
    if "rdma" in nets:
        lines += ["", "The RDMA nodes install Google's gIB NCCL plugin from its apt repository as they start, as",
                  "Cluster Toolkit's examples do."]
    return lines


def _readme(exp: Expanded, dep: Deployment, images: list[ImageSpec]) -> str:
    # A Cluster Toolkit blueprint on another target keeps its project in its vars.
    project = (dep.settings.project_id if isinstance(dep.settings, GcpSettings) else None) or exp.vars.get("project_id")
    pv = "" if project else " --vars project_id=YOUR_PROJECT"
    lines = [
        f"# {exp.blueprint.name} on Google Cloud",
        "",
        "Cluster Toolkit deploys this folder; ctk wrote it (`ctk create`). From the deployment folder:",
        "",
        "```sh",
        "# the images first (Packer), then the cluster (Terraform), in gcp/" + (dep.deployment_name or "DEPLOYMENT"),
        f"gcluster deploy gcp/blueprint.yaml{pv} -o gcp",
        "# when done",
        f"gcluster destroy gcp/{dep.deployment_name or 'DEPLOYMENT'}",
        "```",
        "",
        "What the images get, beside what their source image already has:",
        "",
    ]
    for img in images:
        fam = slurm_gcp.family_for(img.base) if img.source == "ctk/image" else None
        on = f"{fam.family} ({slurm_gcp.PROJECT}; Slurm {fam.slurm})" if fam else "the blueprint's own image build"
        lines.append(f"- `{img.name}`: on {on}, ctk's roles {', '.join(gcp_roles(img)) or '(none)'}"
                     + (f", stack {img.stack}" if "jax" in gcp_roles(img) else ""))
    if dep.traits.hands_off_to_gcluster:
        lines += _gpu_network_lines(dep)
    lines += [
        "",
        "ctk's roles run on each image's build VM from its startup script: the data runner copies",
        f"`{TARBALL}` (the roles and each image's variables) to the VM, and the shell runner applies",
        f"them with ansible-core {ANSIBLE_CORE} in a venv of its own. slurm-gcp's images bring Slurm",
        f"(under {slurm_gcp.SLURM_PREFIX}, configuration in {slurm_gcp.SLURM_ETC}), munge and the NVIDIA driver,",
        "so ctk's munge, slurm, nvidia_driver and cuda roles are never applied there; slurm-gcp",
        "writes slurm.conf itself, from the partitions and nodesets in blueprint.yaml.",
        "",
        "Checked here, without credentials: `ctk validate` of blueprint.yaml against Cluster Toolkit's",
        "module interfaces, and the roles' syntax. Building and deploying needs a Google Cloud project.",
        "",
    ]
    return "\n".join(lines)
