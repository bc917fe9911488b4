"""The gcp target's module kind (ctk/target/gcp): where on Google Cloud the cluster goes."""

from __future__ import annotations

from ..schema import Input, ModuleKind

KIND = ModuleKind(
    source="ctk/target/gcp",
    role="gcp-target",
    doc="Deploy on Google Cloud (the gcp target): ctk writes a Cluster Toolkit blueprint that builds "
        "its images on slurm-gcp's public images and the cluster from Cluster Toolkit's Slurm "
        "modules, and gcluster deploys it.",
    inputs=(
        Input("project_id", "string", None, "Google Cloud project (null: give it to gcluster with --vars)."),
        Input("region", "string", None, "Region of the cluster."),
        Input("zone", "string", None, "Zone of the nodes and of the image builds."),
        Input("image_machine_type", "string", "n2-standard-8", "Machine type of the VMs that build the images."),
        Input("image_disk_size", "number", 50, "Boot disk of the built images, in GB."),
    ),
    outputs=(),
)
