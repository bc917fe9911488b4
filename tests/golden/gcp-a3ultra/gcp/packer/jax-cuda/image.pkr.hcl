# A node image of the gcp target built by Packer on Google Cloud, for users who run Packer
# themselves rather than through gcluster: the `googlecompute` builder boots a VM from
# slurm-gcp's image family for the image's base, and the Ansible provisioner applies ctk's roles
# in their install phase (never munge, slurm or the NVIDIA driver: slurm-gcp's image has them).
# It follows Cluster Toolkit's modules/packer/custom-image: SSH through IAP, the build user
# removed when the VM shuts down, and `labels` on the build VM and on the image alike.
# `ctk create` writes image.auto.pkrvars.json beside it; versions.pkr.hcl pins Packer and the
# googlecompute plugin as Cluster Toolkit does. Building needs Google Cloud credentials:
#
#   cd DEPLOYMENT/gcp/packer/IMAGE && packer init . && packer build .
#
# then deploy the cluster with DEPLOYMENT/gcp/cluster-only.yaml, which boots the image by name.

variable "project_id" {
  type = string
}

variable "zone" {
  type = string
}

variable "machine_type" {
  type    = string
  default = "n2-standard-8"
}

variable "source_image_family" {
  type = string
}

variable "source_image_project_id" {
  type    = list(string)
  default = ["schedmd-slurm-public"]
}

variable "image_name" {
  type = string
}

variable "image_family" {
  type = string
}

variable "disk_size" {
  type    = number
  default = 50
}

variable "disk_type" {
  type    = string
  default = "pd-balanced"
}

variable "subnetwork_name" {
  type    = string
  default = null
}

variable "network_project_id" {
  type    = string
  default = null
}

variable "omit_external_ip" {
  type    = bool
  default = true
}

variable "use_iap" {
  type    = bool
  default = true
}

variable "ssh_username" {
  type    = string
  default = "ctk-packer"
}

variable "labels" {
  type    = map(string)
  default = {}
}

variable "state_timeout" {
  type    = string
  default = "30m"
}

variable "ansible_vars_file" {
  type = string
}

locals {
  labels = merge(var.labels, { ghpc_role = "packer" })
  # The build user's key is the only way in; it goes with the VM, as in Cluster Toolkit's module.
  metadata = {
    block-project-ssh-keys = "TRUE"
    shutdown-script        = <<-EOT
      #!/bin/bash
      userdel -r ${var.ssh_username}
      sed -i '/${var.ssh_username}/d' /var/lib/google/google_users
    EOT
  }
}

source "googlecompute" "node_image" {
  project_id              = var.project_id
  zone                    = var.zone
  machine_type            = var.machine_type
  source_image_family     = var.source_image_family
  source_image_project_id = var.source_image_project_id
  image_name              = var.image_name
  image_family            = var.image_family
  image_labels            = local.labels
  labels                  = local.labels
  disk_size               = var.disk_size
  disk_type               = var.disk_type
  subnetwork              = var.subnetwork_name
  network_project_id      = var.network_project_id
  omit_external_ip        = var.omit_external_ip
  use_internal_ip         = var.omit_external_ip
  use_iap                 = var.use_iap
  ssh_username            = var.ssh_username
  metadata                = local.metadata
  state_timeout           = var.state_timeout
}

build {
  sources = ["source.googlecompute.node_image"]

  provisioner "ansible" {
    playbook_file   = "${path.root}/../ansible/site.yml"
    user            = var.ssh_username
    use_proxy       = false
    extra_arguments = ["-e", "@${var.ansible_vars_file}", "-e", "ctk_phase=install"]
  }
}
