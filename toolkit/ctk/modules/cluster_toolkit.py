"""Cluster Toolkit module kinds: input and output names as CT's modules declare them.

The Slurm modules, the image builder, the startup script and the vpc are declared in
full (every variable of the module, deprecated ones included, so a misspelt setting is
caught). Other CT modules ctk keeps but does not deploy are declared with
`open_inputs=True` and their outputs only, so `use` wiring and `$(id.output)`
references can still be checked.

Names, types and defaults follow GoogleCloudPlatform/cluster-toolkit v1.95.0;
tests/unit/test_schema_drift.py compares them with that release's variables.tf /
outputs.tf / .pkr.hcl files (../shared/fixtures/cluster-toolkit). Types are Terraform's,
simplified: object({...}) is "object" and tuple([...]) "tuple" wherever they occur
(list(object({...})) is "list(object)"); other types keep their element types
(map(string), list(map(string))). `required=True` marks a variable with no default in
CT; CT fills several of those from deployment variables of the same name (see
AUTO_FROM_VARS) and one from the module id (see INJECT_MODULE_ID), so "required" does
not mean "the blueprint must set it".
"""

from __future__ import annotations

import dataclasses

from .schema import Input, ModuleKind, Output

# Deployment variables CT passes to any module input of the same name.
AUTO_FROM_VARS = ("project_id", "deployment_name", "region", "zone", "labels")

_SCOPES = ["https://www.googleapis.com/auth/cloud-platform"]
_SHIELDED = {"enable_integrity_monitoring": True, "enable_secure_boot": True, "enable_vtpm": True}
_AMF = {"threads_per_core": 1}


def _in(name, type_="any", default=None, doc="", required=False) -> Input:
    return Input(name=name, type=type_, default=default, doc=doc, required=required)


def _req(name, type_, doc) -> Input:
    return Input(name=name, type=type_, default=None, doc=doc, required=True)


def _dep(name, type_="bool", doc="", default=None) -> Input:
    """A variable CT keeps only to reject it with a pointer to its replacement."""
    return Input(name=name, type=type_, default=default, doc="DEPRECATED. " + doc)


def _outs(*names_docs) -> tuple[Output, ...]:
    return tuple(Output(n, d) for n, d in names_docs)


# Inputs shared by the compute-instance modules (nodeset, controller, login).
def _vm_common(disk_type: str, on_host_maintenance: str, machine_type: str) -> list[Input]:
    return [
        _in("machine_type", "string", machine_type, "GCE machine type of the VMs."),
        _in("metadata", "map(string)", {}, "Extra instance metadata."),
        _in("instance_image", "map(string)",
            {"family": "slurm-gcp-6-12-hpc-rocky-linux-8", "project": "schedmd-slurm-public"},
            "Boot image: {project, and one of family or name}."),
        _in("instance_image_custom", "bool", False,
            "Acknowledge that instance_image is not a SchedMD-published image (skips the check)."),
        _in("allow_automatic_updates", "bool", True,
            "Let the OS apply package updates on its own (supported images only)."),
        _in("tags", "list(string)", [], "Network tags on the VMs."),
        _in("disk_type", "string", disk_type, "Boot disk type (pd-ssd, pd-balanced, hyperdisk-balanced, ...)."),
        _in("disk_size_gb", "number", 50, "Boot disk size in GB."),
        _in("disk_auto_delete", "bool", True, "Delete the boot disk with the VM."),
        _in("disk_labels", "map(string)", {}, "Labels on the boot disk, merged with labels."),
        _in("disk_resource_manager_tags", "map(string)", {}, "Resource Manager tags on the disks."),
        _in("disk_encryption_key", "string", None,
            "Cloud KMS key that encrypts the VMs' disks (null: Google-managed)."),
        _in("disk_encryption_key_service_account", "string", None,
            "Account that asks KMS for that key (null: the Compute Engine default account)."),
        _in("additional_disks", "list(object)", [], "Extra disks to attach to each VM."),
        _in("enable_confidential_vm", "bool", False, "Run as Confidential VMs (image must support it)."),
        _in("enable_shielded_vm", "bool", False, "Run as Shielded VMs (image must support it)."),
        _in("shielded_instance_config", "object", dict(_SHIELDED),
            "Shielded VM switches; used only with enable_shielded_vm."),
        _in("enable_oslogin", "bool", True, "Use OS Login for SSH users."),
        _in("can_ip_forward", "bool", False, "Allow the VMs to forward IP packets."),
        _in("advanced_machine_features", "object", dict(_AMF),
            "CPU features: threads_per_core (1 turns SMT off), visible_core_count, ..."),
        _in("resource_manager_tags", "map(string)", {}, "Resource Manager tags on the VMs."),
        _dep("enable_smt", "bool", "Use advanced_machine_features.threads_per_core."),
        _in("labels", "map(string)", {}, "Labels on the VMs."),
        _in("min_cpu_platform", "string", None, "Minimum CPU platform, e.g. 'Intel Sapphire Rapids'."),
        _in("on_host_maintenance", "string", on_host_maintenance, "MIGRATE or TERMINATE on host maintenance."),
        _in("guest_accelerator", "list(object)", [],
            "GPUs to attach: [{type, count}], at most one entry; A2/A3/A4/G2 bring their own."),
        _in("preemptible", "bool", False, "Use preemptible VMs."),
        _in("service_account_email", "string", None, "Service account the VMs run as (null: default)."),
        _in("service_account_scopes", "set(string)", list(_SCOPES), "OAuth scopes of that account."),
        _dep("service_account", "object", "Use service_account_email and service_account_scopes."),
        _in("bandwidth_tier", "string", "platform_default",
            "NIC and egress tier: platform_default, virtio_enabled, gvnic_enabled or tier_1_enabled."),
        _req("subnetwork_self_link", "string", "Subnetwork the VMs attach to."),
    ]


_NETWORK_STORAGE_DOC = "Shared file systems to mount: [{server_ip, remote_mount, local_mount, fs_type, mount_options}]."

NODESET = ModuleKind(
    source="community/modules/compute/schedmd-slurm-gcp-v6-nodeset",
    role="nodeset",
    doc="A group of identical Slurm compute nodes (one NodeName/NodeSet).",
    inputs=(
        _req("name", "string", "Nodeset name, unique in the cluster; CT fills it from the module id."),
        _req("project_id", "string", "Project to create the nodes in."),
        _req("region", "string", "Region of the nodes."),
        _req("zone", "string", "Zone of the nodes; more zones go in zones."),
        _in("zones", "set(string)", [], "Further zones in the region where nodes may be created."),
        _in("zone_target_shape", "string", "ANY_SINGLE_ZONE",
            "How bulk creation spreads VMs over zones: ANY, ANY_SINGLE_ZONE or BALANCED."),
        _in("node_conf", "map(any)", {}, "Extra parameters for the Slurm NodeName line (not Sockets)."),
        _in("node_count_static", "number", 0, "Nodes that always exist."),
        _in("node_count_dynamic_max", "number", 10, "Most nodes created on demand (power saving)."),
        _dep("instance_template", "string", "Instance templates cannot be given for compute nodes."),
        *_vm_common("pd-standard", "TERMINATE", "c2-standard-60"),
        _in("accelerator_topology", "string", None, "Shape of the GPU/TPU slice for placement, e.g. '1x72'."),
        _in("enable_spot_vm", "bool", False, "Use Spot VMs."),
        _in("spot_instance_config", "object", None, "Spot VM settings: {termination_action}."),
        _in("enable_public_ips", "bool", False, "Give each node an ephemeral public IP."),
        _dep("disable_public_ips", "bool", "Use enable_public_ips."),
        _in("enable_placement", "bool", True, "Create nodes under a compact placement policy."),
        _in("placement_max_distance", "number", None, "Largest distance (1-3) allowed by the placement policy."),
        _in("additional_networks", "list(object)", [], "Extra NICs: [{network, subnetwork, nic_type, ...}]."),
        _in("access_config", "list(object)", [], "External IP configuration of the first NIC."),
        _in("reservation_name", "string", "", "SPECIFIC reservation to consume, by name or path."),
        _in("future_reservation", "string", "", "Future reservation to consume, by name or self link."),
        _in("maintenance_interval", "string", None, "Maintenance interval of the VMs (e.g. PERIODIC)."),
        _in("startup_script", "string", "# no-op", "Script run at boot on every node."),
        _in("network_storage", "list(object)", [], _NETWORK_STORAGE_DOC),
        _in("instance_properties", "any", None, "Raw bulkInsert instance properties overriding Slurm-GCP's."),
        _in("enable_maintenance_reservation", "bool", False,
            "Hold a Slurm reservation over scheduled host maintenance."),
        _in("enable_opportunistic_maintenance", "bool", False,
            "Let maintenance run as soon as a notified node goes idle."),
        _in("dws_flex", "object", {"enabled": False},
            "Dynamic Workload Scheduler flex-start: {enabled, max_run_duration, use_job_duration, use_bulk_insert}."),
        _in("confidential_instance_type", "string", None, "Confidential computing technology (SEV, TDX, ...)."),
        _in("machine_configs", "any", {},
            "Machine types and their node counts, for a nodeset of several machine types."),
    ),
    outputs=_outs(("nodeset", "The nodeset definition, for a partition's nodeset input.")),
)

NODESET_TPU = ModuleKind(
    source="community/modules/compute/schedmd-slurm-gcp-v6-nodeset-tpu",
    role="nodeset-tpu",
    doc="A Slurm nodeset of TPU VMs; a multi-host slice contributes one node per TPU VM.",
    inputs=(
        _in("node_count_static", "number", 0, "TPU worker nodes that always exist."),
        _in("node_count_dynamic_max", "number", 0, "Most TPU worker nodes created on demand."),
        _req("name", "string", "Nodeset name, unique in the cluster; CT fills it from the module id."),
        _in("enable_public_ips", "bool", False, "Give the TPU VMs public IPs."),
        _dep("disable_public_ips", "bool", "Use enable_public_ips."),
        _in("node_type", "string", "", "TPU accelerator type, e.g. 'v4-8' (or give accelerator_config)."),
        _in("accelerator_config", "object", {"topology": "", "version": ""},
            "TPU version (V2, V3, V4, V5LITEPOD) and topology, instead of node_type."),
        _in("tf_version", "string", "2.14.0", "TPU software (runtime) version."),
        _in("preemptible", "bool", False, "Use preemptible TPUs."),
        _in("preserve_tpu", "bool", False, "Stop rather than delete TPU VMs on suspend."),
        _req("zone", "string", "The one zone of the TPU nodes."),
        _in("data_disks", "list(string)", [], "Data disks to attach to the TPU VMs."),
        _in("docker_image", "string", None, "Container image the TPU VMs run Slurm in."),
        _req("subnetwork_self_link", "string", "Subnetwork of the TPU VMs."),
        _in("service_account_email", "string", None, "Service account of the TPU VMs."),
        _in("service_account_scopes", "set(string)", list(_SCOPES), "OAuth scopes of that account."),
        _dep("service_account", "object", "Use service_account_email and service_account_scopes."),
        _req("project_id", "string", "Project of the TPU VMs."),
        _in("reserved", "bool", False, "Create the TPUs from a reservation."),
        _in("network_storage", "list(object)", [], _NETWORK_STORAGE_DOC),
    ),
    outputs=_outs(("nodeset_tpu", "The TPU nodeset definition, for a partition's nodeset_tpu input.")),
)

NODESET_DYNAMIC = ModuleKind(
    source="community/modules/compute/schedmd-slurm-gcp-v6-nodeset-dynamic",
    role="nodeset",
    doc="A Slurm nodeset of dynamic nodes that register themselves (an instance template, no counts).",
    inputs=(
        _req("name", "string", "Nodeset name, unique in the cluster; CT fills it from the module id."),
        _in("feature", "string", None, "Slurm node feature binding nodes to the nodeset (default: the name)."),
        _req("project_id", "string", "Project of the nodes."),
        _req("slurm_cluster_name", "string", "Slurm cluster the nodes join."),
        _req("slurm_bucket_path", "string", "Bucket path holding the cluster's Slurm files."),
        _in("machine_type", "string", "c2-standard-60", "GCE machine type of the nodes."),
        _in("metadata", "map(string)", {}, "Extra instance metadata."),
        _in("instance_image", "map(string)",
            {"family": "slurm-gcp-6-12-hpc-rocky-linux-8", "project": "schedmd-slurm-public"},
            "Boot image: {project, and one of family or name}."),
        _in("instance_image_custom", "bool", False, "Acknowledge a non-SchedMD image."),
        _in("allow_automatic_updates", "bool", True, "Let the OS apply package updates on its own."),
        _in("tags", "list(string)", [], "Network tags."),
        _in("disk_type", "string", "pd-standard", "Boot disk type."),
        _in("disk_size_gb", "number", 50, "Boot disk size in GB."),
        _in("disk_auto_delete", "bool", True, "Delete the boot disk with the VM."),
        _in("disk_labels", "map(string)", {}, "Labels on the boot disk."),
        _in("additional_disks", "list(object)", [], "Extra disks."),
        _in("enable_confidential_vm", "bool", False, "Run as Confidential VMs."),
        _in("enable_shielded_vm", "bool", False, "Run as Shielded VMs."),
        _in("shielded_instance_config", "object", dict(_SHIELDED), "Shielded VM switches."),
        _in("enable_oslogin", "bool", True, "Use OS Login."),
        _in("can_ip_forward", "bool", False, "Allow IP forwarding."),
        _in("advanced_machine_features", "object", dict(_AMF), "CPU features (threads_per_core, ...)."),
        _dep("enable_smt", "bool", "Use advanced_machine_features.threads_per_core."),
        _in("labels", "map(string)", {}, "Labels on the VMs."),
        _in("min_cpu_platform", "string", None, "Minimum CPU platform."),
        _in("on_host_maintenance", "string", "TERMINATE", "MIGRATE or TERMINATE."),
        _in("guest_accelerator", "list(object)", [], "GPUs to attach: [{type, count}]."),
        _in("preemptible", "bool", False, "Use preemptible VMs."),
        _in("service_account_email", "string", None, "Service account of the VMs."),
        _in("service_account_scopes", "set(string)", list(_SCOPES), "OAuth scopes of that account."),
        _in("enable_spot_vm", "bool", False, "Use Spot VMs."),
        _in("spot_instance_config", "object", None, "Spot VM settings."),
        _in("bandwidth_tier", "string", "platform_default", "NIC and egress tier."),
        _in("enable_public_ips", "bool", False, "Give each node a public IP."),
        _req("region", "string", "Region of the nodes."),
        _req("subnetwork_self_link", "string", "Subnetwork of the nodes."),
        _in("additional_networks", "list(object)", [], "Extra NICs."),
        _in("access_config", "list(object)", [], "External IP configuration."),
        _in("startup_script", "string", "# no-op", "Script run at boot."),
        _in("universe_domain", "string", "googleapis.com", "API domain of an alternate universe."),
        _in("network_storage", "list(object)", [], _NETWORK_STORAGE_DOC),
        _in("machine_configs", "any", {},
            "Machine types and their node counts, for a nodeset of several machine types."),
    ),
    outputs=_outs(
        ("nodeset_dyn", "The dynamic nodeset, for a partition's nodeset_dyn input."),
        ("instance_template_self_link", "Instance template to create the nodes from."),
        ("node_name_prefix", "Prefix the node hostnames must carry."),
    ),
)

PARTITION = ModuleKind(
    source="community/modules/compute/schedmd-slurm-gcp-v6-partition",
    role="partition",
    doc="A Slurm partition over one kind of nodeset (static/dynamic, or TPU).",
    inputs=(
        _req("partition_name", "string", "Partition name: lowercase letters and digits, starting with a letter."),
        _in("partition_conf", "map(string)", {}, "Extra parameters for the PartitionName line."),
        _in("is_default", "bool", False, "Make this the default partition (unless partition_conf sets Default)."),
        _in("exclusive", "bool", True, "One job per node, nodes deleted after it; false to share nodes."),
        _in("nodeset", "list(object)", [], "Nodesets in the partition (from nodeset modules via use)."),
        _in("nodeset_tpu", "list(object)", [], "TPU nodesets in the partition."),
        _in("nodeset_dyn", "list(object)", [], "Dynamic nodesets in the partition."),
        _in("resume_timeout", "number", None,
            "Seconds a resumed node may take to come up (ResumeTimeout; null: chosen from the nodesets)."),
        _in("suspend_time", "number", 300, "Idle seconds before a node is powered down (-1: never)."),
        _in("suspend_timeout", "number", None, "Seconds a node may take to power down (SuspendTimeout)."),
        _dep("network_storage", "list(object)", "Mounts belong on the nodeset; must stay empty.", default=[]),
    ),
    outputs=_outs(
        ("partitions", "The partition, as a one-element list for the controller's partitions input."),
        ("nodeset", "The nodesets of this partition."),
        ("nodeset_tpu", "The TPU nodesets of this partition."),
        ("nodeset_dyn", "The dynamic nodesets of this partition."),
    ),
)

# The controller declares subnetwork_self_link with its instance settings below.
_controller_vm = [i for i in _vm_common("pd-ssd", "MIGRATE", "c2-standard-4") if i.name != "subnetwork_self_link"]

CONTROLLER = ModuleKind(
    source="community/modules/scheduler/schedmd-slurm-gcp-v6-controller",
    role="controller",
    doc="The Slurm controller VM; it also creates the login nodes and holds the cluster config.",
    inputs=(
        _req("project_id", "string", "Project of the cluster."),
        _req("deployment_name", "string", "Deployment name."),
        _in("slurm_cluster_name", "string", None,
            "Cluster name ([a-z][a-z0-9]{0,9}); default derived from deployment_name."),
        _req("region", "string", "Region of the cluster."),
        _in("zone", "string", None, "Zone of the controller (null: any zone in the region)."),
        _in("create_bucket", "bool", True, "Create the bucket holding cluster files."),
        _in("bucket_name", "string", None, "Existing bucket to use when create_bucket is false."),
        _in("bucket_dir", "string", None, "Folder in the bucket for this cluster's files."),
        _in("login_nodes", "list(object)", [], "Login node groups (from login modules via use)."),
        _in("nodeset", "list(object)", [], "Nodesets (normally reached through partitions)."),
        _in("nodeset_tpu", "list(object)", [], "TPU nodesets."),
        _in("nodeset_dyn", "list(object)", [], "Dynamic nodesets."),
        _in("partitions", "list(object)", [], "Partitions of the cluster (from partition modules via use)."),
        _in("controller_state_disk", "object", {"type": "pd-ssd", "size": 50},
            "Disk that keeps slurmctld state; null to go without."),
        _in("enable_debug_logging", "bool", False, "Verbose logging of the Slurm-GCP scripts."),
        _in("extra_logging_flags", "map(bool)", {}, "Extra logging flags (trace_api)."),
        _in("enable_cleanup_compute", "bool", True, "Delete compute nodes and placement policies on destroy."),
        _in("enable_bigquery_load", "bool", False, "Load job accounting into BigQuery."),
        _in("cloud_parameters", "object", {},
            "cloud.conf settings: resume_rate, resume_timeout, suspend_rate, suspend_timeout, topology_plugin, ..."),
        _in("enable_default_mounts", "bool", True, "Share /home and /apps from the controller over NFS."),
        _in("network_storage", "list(object)", [], "File systems mounted on every instance. " + _NETWORK_STORAGE_DOC),
        _in("login_network_storage", "list(object)", [], "File systems mounted on login nodes only."),
        _in("slurmdbd_conf_tpl", "string", None, "Template file for slurmdbd.conf."),
        _in("slurm_conf_tpl", "string", None, "Template file for slurm.conf."),
        _in("slurm_conf_template", "string", None, "Older name of slurm_conf_tpl."),
        _in("cgroup_conf_tpl", "string", None, "Template file for cgroup.conf."),
        _in("controller_startup_script", "string", "# no-op", "Script run at boot on the controller."),
        _in("controller_startup_scripts_timeout", "number", 300, "Seconds each controller script may run (0: no limit)."),
        _in("login_startup_script", "string", "# no-op", "Script run at boot on login nodes."),
        _in("login_startup_scripts_timeout", "number", 300, "Seconds each login script may run (0: no limit)."),
        _in("compute_startup_scripts_timeout", "number", 300, "Seconds each compute script may run (0: no limit)."),
        _in("enable_chs_gpu_health_check_prolog", "bool", False, "Run the Cluster Health Scanner GPU check as a prolog."),
        _in("enable_chs_gpu_health_check_epilog", "bool", False, "Run the Cluster Health Scanner GPU check as an epilog."),
        _in("prolog_scripts", "list(object)", [], "Prolog scripts: [{filename, content or source}]."),
        _in("epilog_scripts", "list(object)", [], "Epilog scripts: [{filename, content or source}]."),
        _in("task_prolog_scripts", "list(object)", [], "TaskProlog scripts: [{filename, content or source}]."),
        _in("task_epilog_scripts", "list(object)", [], "TaskEpilog scripts: [{filename, content or source}]."),
        _in("enable_external_prolog_epilog", "bool", None, "Run prolog/epilog scripts shared from the controller over NFS."),
        _in("cloudsql", "object", None, "External accounting database: {server_ip, user, password, db_name, ...}."),
        _in("enable_slurm_auth", "bool", False, "Use Slurm's own auth/slurm plugin instead of munge."),
        _in("enable_backup_controller", "bool", False, "Run a second controller for high availability."),
        _in("controller_ha_type", "string", "zonal",
            "How the HA controllers' instance group is spread: zonal or regional."),
        _in("backup_zone", "string", None, "Zone of the backup controller."),
        _in("universe_domain", "string", "googleapis.com", "API domain of an alternate universe."),
        _in("endpoint_versions", "object", {"compute": "beta"}, "API versions to call ({compute})."),
        _in("gcloud_path_override", "string", "", "Folder of the gcloud used by cleanup."),
        _dep("enable_devel", "bool", "Always on now."),
        _dep("disable_default_mounts", "bool", "Use enable_default_mounts."),
        _dep("enable_slurm_gcp_plugins", "any", "Use nodeset placement_max_distance / advanced_machine_features."),
        _dep("compute_startup_script", "any", "Use the nodeset's startup_script."),
        _in("slurm_bucket_kms_key", "string", None,
            "Customer-managed KMS key (self link) for the cluster-files bucket."),
        # the controller VM itself
        *_controller_vm,
        _dep("disable_smt", "bool", "Use advanced_machine_features.threads_per_core."),
        _in("static_ips", "list(string)", [], "Static internal IPs for the controller(s)."),
        _in("enable_controller_public_ips", "bool", False, "Give the controller a public IP."),
        _dep("disable_controller_public_ips", "bool", "Use enable_controller_public_ips."),
        _dep("instance_template", "string", "Instance templates cannot be given for the controller."),
        _req("subnetwork_self_link", "string", "Subnetwork of the controller."),
        _in("controller_project_id", "string", None, "Other project for the controller and its bucket."),
        _in("controller_network_attachment", "string", None, "Network attachment for the controller."),
        _in("subnetwork_stack_type", "string", "IPV4_ONLY",
            "Stack type of that subnetwork, e.g. IPV4_ONLY or IPV4_IPV6."),
        _in("additional_networks", "list(object)", [], "Extra NICs of the controller."),
        _in("munge_mount", "object",
            {"server_ip": None, "remote_mount": "/etc/munge/", "fs_type": "nfs", "mount_options": ""},
            "Where compute and login nodes mount munge.key from (server_ip null: the controller)."),
        _in("slurm_key_mount", "object", None,
            "Share that compute and login nodes mount slurm.key from (auth/slurm)."),
    ),
    outputs=_outs(
        ("slurm_cluster_name", "Cluster name."),
        ("slurm_controller_instance", "The controller instance (template)."),
        ("slurm_login_instances", "The login instances."),
        ("slurm_bucket_path", "Bucket path of the cluster files."),
        ("slurm_bucket_name", "Bucket of the cluster files."),
        ("slurm_bucket_dir", "Folder in that bucket."),
        ("slurm_bucket", "The bucket (object)."),
        ("munge_deprecation_warning", "A notice that munge authentication is on its way out (null with auth/slurm)."),
        ("instructions", "How to reach the controller."),
    ),
)

LOGIN = ModuleKind(
    source="community/modules/scheduler/schedmd-slurm-gcp-v6-login",
    role="login",
    doc="A group of Slurm login nodes; the controller creates them from this definition.",
    inputs=(
        _req("project_id", "string", "Project of the login nodes."),
        _in("region", "string", None, "Region of the login nodes."),
        _in("zone", "string", None, "Zone of the login nodes (null: any in the region)."),
        _req("name_prefix", "string", "Login group name, unique in the cluster; CT fills it from the module id."),
        _in("num_instances", "number", 1, "Login nodes in the group (ignored when static_ips is set)."),
        *_vm_common("pd-ssd", "MIGRATE", "c2-standard-4"),
        _dep("disable_smt", "bool", "Use advanced_machine_features.threads_per_core."),
        _in("additional_networks", "list(object)", [], "Extra NICs."),
        _in("static_ips", "list(string)", [], "Static internal IPs, one per login node."),
        _in("enable_login_public_ips", "bool", False, "Give login nodes public IPs."),
        _dep("disable_login_public_ips", "bool", "Use enable_login_public_ips."),
        _dep("instance_template", "string", "Instance templates cannot be given for login nodes."),
    ),
    outputs=_outs(("login_nodes", "The login group, for the controller's login_nodes input.")),
)

CUSTOM_IMAGE = ModuleKind(
    source="modules/packer/custom-image",
    role="image",
    kind="packer",
    doc="A Packer build of a VM image from a source image, startup script, shell scripts and playbooks.",
    inputs=(
        _req("deployment_name", "string", "Deployment name (default image family)."),
        _req("project_id", "string", "Project of the build VM and the image."),
        _in("machine_type", "string", "n2-standard-4", "Machine type of the build VM."),
        _in("disk_size", "number", None, "Image disk size in GB."),
        _in("disk_type", "string", "pd-balanced", "Disk type of the build VM."),
        _req("zone", "string", "Zone of the build VM."),
        _in("region", "string", None, "Region of the build VM."),
        _in("network_project_id", "string", None, "Host project of a Shared VPC."),
        _req("subnetwork_name", "string", "Subnetwork of the build VM."),
        _in("omit_external_ip", "bool", True, "Build without a public IP."),
        _in("tags", "list(string)", None, "Network tags of the build VM."),
        _in("image_family", "string", None, "Family of the built image (default: deployment_name)."),
        _in("image_name", "string", None, "Name of the built image (default: family plus timestamp)."),
        _in("source_image_project_id", "list(string)", None, "Projects searched, in order, for the source image."),
        _in("source_image", "string", None, "Source image name."),
        _in("source_image_family", "string", "hpc-rocky-linux-8", "Source image family (latest image of it)."),
        _in("service_account_email", "string", None, "Service account of the build VM."),
        _dep("scopes", "set(string)", "Use service_account_scopes."),
        _in("service_account_scopes", "set(string)", list(_SCOPES), "OAuth scopes of the build VM."),
        _in("use_iap", "bool", True, "SSH through IAP."),
        _in("use_os_login", "bool", False, "SSH with OS Login."),
        _in("ssh_username", "string", "hpc-toolkit-packer", "SSH user for provisioning."),
        _in("ansible_playbooks", "list(object)", [],
            "Playbooks to run: [{playbook_file, galaxy_file, extra_arguments}]."),
        _in("shell_scripts", "list(string)", [], "Local shell scripts to run on the build VM."),
        _in("windows_startup_ps1", "list(string)", [], "PowerShell scripts for Windows images."),
        _in("startup_script", "string", None, "Startup script text run on the build VM."),
        _in("startup_script_file", "string", None, "Local file used as startup script (wins over startup_script)."),
        _in("wrap_startup_script", "bool", True, "Wrap the startup script in Packer's wrapper."),
        _in("labels", "map(string)", None, "Labels of the build VM."),
        _in("accelerator_type", "string", None, "GPU type to attach to the build VM."),
        _in("accelerator_count", "number", None, "GPUs to attach to the build VM."),
        _in("on_host_maintenance", "string", None, "MIGRATE or TERMINATE (GPUs need TERMINATE)."),
        _in("state_timeout", "string", "10m", "How long to wait for VM state changes and image creation."),
        _in("metadata", "map(string)", {}, "Metadata of the build VM (not startup-script)."),
        _in("manifest_file", "string", "packer-manifest.json", "Where Packer writes its build manifest."),
        _in("communicator", "string", None, "ssh or winrm."),
        _in("image_storage_locations", "list(string)", None, "Storage location of the image (one region)."),
        _in("enable_shielded_vm", "bool", False, "Build on a Shielded VM."),
        _in("shielded_instance_config", "object", dict(_SHIELDED), "Shielded VM switches."),
        _in("compute_endpoint_version", "string", None, "Compute API version Packer calls (null: its own)."),
        _in("gcloud_path_override", "string", "", "Folder of the gcloud to run locally (empty: the one on PATH)."),
        _in("image_licenses", "list(string)",
            ["projects/click-to-deploy-images/global/licenses/hpc-toolkit-vm-image"],
            "Licenses recorded on the built image."),
    ),
    outputs=(),
)

STARTUP_SCRIPT = ModuleKind(
    source="modules/scripts/startup-script",
    role="startup-script",
    doc="Bundles runners (shell, ansible-local, data) into one boot script staged in a bucket.",
    inputs=(
        _req("project_id", "string", "Project of the staging bucket."),
        _req("deployment_name", "string", "Deployment name, used to name the bucket."),
        _req("region", "string", "Region of the bucket."),
        _req("labels", "map(string)", "Labels of the bucket."),
        _in("gcs_bucket_path", "string", None, "Existing gs:// path to stage into."),
        _in("bucket_viewers", "list(string)", [], "Members given read access to the bucket."),
        _in("debug_file", "string", None, "Local file to write the script to."),
        _in("runners", "list(map(string))", [],
            "Steps: [{type: shell|ansible-local|data, destination, content or source, args}]."),
        _in("docker", "object", {"enabled": False}, "Install Docker: {enabled, world_writable, daemon_config}."),
        _dep("enable_docker_world_writable", "bool", "Use docker.world_writable."),
        _dep("install_docker", "bool", "Use docker.enabled."),
        _in("local_ssd_filesystem", "object", {"fs_type": "ext4", "mountpoint": "", "permissions": "0755"},
            "RAID and mount local SSDs: {fs_type, mountpoint, permissions}."),
        _in("install_cloud_ops_agent", "bool", False, "Install the Ops Agent."),
        _in("install_stackdriver_agent", "bool", False, "Install the legacy monitoring agent."),
        _in("install_ansible", "bool", None, "Install Ansible (null: when an ansible-local runner exists)."),
        _in("configure_ssh_host_patterns", "list(string)", [],
            "Host patterns for passwordless SSH between nodes (needs shared /home)."),
        _dep("prepend_ansible_installer", "bool", "Use install_ansible."),
        _in("ansible_virtualenv_path", "string", "/usr/local/ghpc-venv", "Virtualenv Ansible is installed in."),
        _in("http_proxy", "string", "", "HTTP(S) proxy for package managers and shells."),
        _in("http_no_proxy", "string", ".google.com,.googleapis.com,metadata.google.internal,localhost,127.0.0.1",
            "Domains that bypass http_proxy."),
        _in("install_cloud_rdma_drivers", "bool", False, "Install Cloud RDMA drivers."),
        _in("enable_gpu_network_wait_online", "bool", False, "Hold boot until the GPU NICs are up."),
        _in("managed_lustre", "object", {"enabled": False, "port": 988},
            "Set up the (already installed) Managed Lustre client: {enabled, port}."),
        _in("set_ofi_cloud_rdma_tunables", "bool", False, "Set libfabric tunables for Cloud RDMA."),
        _in("compute_endpoint_version", "string", None, "Compute API version the script's calls use (null: default)."),
        _in("gcloud_path_override", "string", "", "Folder of the gcloud to run locally (empty: the one on PATH)."),
    ),
    outputs=_outs(
        ("startup_script", "The script, as text."),
        ("compute_startup_script", "The script, for compute startup inputs."),
        ("controller_startup_script", "The script, for the controller's startup input."),
    ),
)


# The network of nearly every Slurm blueprint: ctk keeps it for the gcp target and does not
# deploy it, but declares its inputs in full, so a misspelt setting is caught here too.
VPC = ModuleKind(
    source="modules/network/vpc",
    role="",
    doc="A VPC network with subnetworks, NAT and firewall rules.",
    inputs=(
        _req("project_id", "string", "Project of the network."),
        _in("labels", "map(string)", {}, "Labels on the network resources that take labels."),
        _in("network_name", "string", None, "Network name (null: DEPLOYMENT-net)."),
        _in("subnetwork_name", "string", None,
            "Name of the default primary subnetwork (null: DEPLOYMENT-primary-subnet)."),
        _dep("subnetwork_size", "number", "Use subnetworks."),
        _in("default_primary_subnetwork_size", "number", 15,
            "CIDR bits of the default primary subnetwork, when subnetworks does not give it."),
        _req("region", "string", "Region of the default subnetwork and the router."),
        _req("deployment_name", "string", "Deployment name (default names)."),
        _in("network_address_range", "string", "10.0.0.0/9", "CIDR range the subnetworks are carved from."),
        _in("mtu", "number", 8896, "MTU of the network (0: Compute Engine's default; 8896: jumbo frames)."),
        _in("enable_ipv6_ula", "bool", False, "Turn on internal IPv6 (ULA); cannot be undone."),
        _in("internal_ipv6_range", "string", None, "The /48 from fd20::/20 for that ULA range (null: chosen)."),
        _in("subnetworks", "list(map(string))", [],
            "Subnetworks: [{subnet_name, subnet_region, subnet_ip or new_bits, ...}]; the first is the primary."),
        _dep("primary_subnetwork", "map(string)", "Use subnetworks."),
        _dep("additional_subnetworks", "list(map(string))", "Use subnetworks."),
        _in("secondary_ranges", "map(list(object))", {},
            "Secondary ranges by subnetwork name: {name: [{range_name, ip_cidr_range}]} (older form)."),
        _in("secondary_ranges_list", "list(object)", [],
            "Secondary ranges: [{subnetwork_name, ranges: [{range_name, ip_cidr_range}]}]."),
        _in("network_routing_mode", "string", "GLOBAL", "Routing mode: GLOBAL or REGIONAL."),
        _in("network_description", "string", "", "Description of the network (changing it recreates it)."),
        _in("ips_per_nat", "number", 2, "External IPs per regional Cloud NAT (0: no NAT)."),
        _in("shared_vpc_host", "bool", False, "Make the project a Shared VPC host."),
        _in("delete_default_internet_gateway_routes", "bool", False,
            "Delete the network's default-route* routes to the internet gateway."),
        _in("enable_iap_ssh_ingress", "bool", True, "Firewall rule: SSH through IAP."),
        _in("enable_iap_rdp_ingress", "bool", False, "Firewall rule: RDP through IAP."),
        _in("enable_iap_winrm_ingress", "bool", False, "Firewall rule: WinRM through IAP."),
        _in("enable_internal_traffic", "bool", True, "Firewall rule: all TCP, UDP and ICMP inside the network."),
        _in("enable_cloud_router", "bool", True, "Create a Cloud Router."),
        _in("enable_cloud_nat", "bool", True, "Create Cloud NATs."),
        _in("extra_iap_ports", "list(string)", [], "Further TCP ports to open to IAP forwarding."),
        _in("allowed_ssh_ip_ranges", "list(string)", [], "CIDR ranges SSH is allowed from."),
        _in("firewall_rules", "any", [], "Further firewall rules."),
        _in("firewall_log_config", "string", "DISABLE_LOGGING",
            "Logging of the module's firewall rules (DISABLE_LOGGING, INCLUDE_ALL_METADATA, ...)."),
        _in("network_profile", "string", None, "Network profile (URL) applied at creation, e.g. an RDMA (roce) one."),
        _in("subnetwork_private_access", "bool", True, "Private Google Access on the subnetworks."),
        _in("subnetwork_stack_type", "string", "IPV4_ONLY", "Stack type of the subnetworks: IPV4_ONLY or IPV4_IPV6."),
        _in("subnetwork_ipv6_access_type", "string", None,
            "IPv6 access type of the subnetworks (INTERNAL or EXTERNAL)."),
        _in("nic_type", "string", "GVNIC", "NIC type written into the instance_additional_networks output."),
    ),
    outputs=_outs(
        ("network_name", "Network name."),
        ("network_id", "Network id."),
        ("network_self_link", "Network self link."),
        ("subnetworks", "All subnetworks created."),
        ("subnetwork", "The primary subnetwork."),
        ("subnetwork_name", "Name of the primary subnetwork."),
        ("subnetwork_self_link", "Self link of the primary subnetwork."),
        ("subnetwork_address", "CIDR range of the primary subnetwork."),
        ("subnetwork_stack_type", "Stack type of the primary subnetwork."),
        ("nat_ips", "External IPs of the Cloud NATs."),
        ("instance_additional_networks",
         "The subnetworks as NIC entries, in the form a GKE node pool's additional_networks takes."),
    ),
)


# Modules ctk keeps for the gcp target but does not deploy: outputs only.
def _kept(source: str, doc: str, *outputs: str) -> ModuleKind:
    return ModuleKind(source=source, role="", doc=doc, open_inputs=True,
                      outputs=tuple(Output(o) for o in outputs))


_VPC_OUTS = ("network_id", "network_name", "network_self_link", "subnetwork", "subnetwork_address",
             "subnetwork_name", "subnetwork_self_link")
_PSA_OUTS = ("cidr_range", "connect_mode", "private_vpc_connection_peering", "reserved_ip_range")
_GCS_OUTS = ("client_install_runner", "gcs_bucket_name", "gcs_bucket_path", "mount_runner", "network_storage")
_SA_OUTS = ("key", "service_account_email", "service_account_iam_email")

_KEPT = (
    _kept("modules/network/multivpc", "Several VPC networks, e.g. one per GPU NIC.",
          "additional_networks", "network_ids", "network_names", "network_self_links",
          "subnetwork_addresses", "subnetwork_names", "subnetwork_self_links"),
    _kept("modules/network/pre-existing-vpc", "An existing VPC network and subnetwork.", *_VPC_OUTS),
    _kept("modules/network/pre-existing-subnetwork", "An existing subnetwork.",
          "subnetwork", "subnetwork_address", "subnetwork_name", "subnetwork_self_link"),
    _kept("modules/network/gpu-rdma-vpc", "A VPC with an RDMA (RoCE) network profile for GPU NICs.",
          "network_id", "network_name", "network_self_link", "subnetworks", "subnetwork_interfaces",
          "subnetwork_interfaces_gke", "subnetwork_name_prefix"),
    _kept("modules/network/private-service-access", "Private services access peering (Filestore, Cloud SQL, Lustre).",
          *_PSA_OUTS),
    _kept("community/modules/network/private-service-access", "Older path of private-service-access.", *_PSA_OUTS),
    _kept("modules/file-system/filestore", "A Filestore NFS share.",
          "capacity_gib", "filestore_id", "install_nfs_client", "install_nfs_client_runner",
          "mount_runner", "network_storage"),
    _kept("modules/file-system/managed-lustre", "A Google Cloud Managed Lustre file system.",
          "capacity_gib", "install_managed_lustre_client", "lustre_id", "network_storage"),
    _kept("modules/file-system/parallelstore", "A Parallelstore (DAOS) file system.",
          "instructions", "network_storage"),
    _kept("modules/file-system/cloud-storage-bucket", "A GCS bucket, mountable with gcsfuse.", *_GCS_OUTS),
    _kept("community/modules/file-system/cloud-storage-bucket", "Older path of cloud-storage-bucket.", *_GCS_OUTS),
    _kept("modules/file-system/pre-existing-network-storage", "An existing NFS/Lustre/GCS share to mount.",
          "client_install_runner", "mount_runner", "network_storage"),
    _kept("community/modules/file-system/nfs-server", "An NFS server VM.",
          "install_nfs_client", "install_nfs_client_runner", "mount_runner", "network_storage"),
    _kept("modules/monitoring/dashboard", "A Cloud Monitoring dashboard.", "instructions"),
    _kept("modules/project/service-account", "A service account with project roles.", *_SA_OUTS),
    _kept("community/modules/project/service-account", "Older path of service-account.", *_SA_OUTS),
    _kept("community/modules/database/slurm-cloudsql-federation",
          "A Cloud SQL instance for Slurm accounting.", "cloudsql"),
)

KINDS: dict[str, ModuleKind] = {k.source: k for k in (
    NODESET, NODESET_TPU, NODESET_DYNAMIC, PARTITION, CONTROLLER, LOGIN, CUSTOM_IMAGE, STARTUP_SCRIPT, VPC, *_KEPT,
)}

# Input CT fills with the module id when the blueprint leaves it unset.
INJECT_MODULE_ID: dict[str, str] = {
    NODESET.source: "name",
    NODESET_TPU.source: "name",
    NODESET_DYNAMIC.source: "name",
    LOGIN.source: "name_prefix",
}

for _source, _input in INJECT_MODULE_ID.items():
    KINDS[_source] = dataclasses.replace(KINDS[_source], inject_module_id=_input, _by_name={})
