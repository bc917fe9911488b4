# A node image built on Google Cloud: Packer's `googlecompute` builder boots a VM from the
# source image and the Ansible provisioner applies the same roles ctk applies locally, in the
# install phase (no secrets, no cluster config). `ctk create` writes the variables file
# (image.auto.pkrvars.json) from the blueprint beside this template and checks both with
# `packer validate -syntax-only`. Building needs Google Cloud credentials:
#
#   cd DEPLOYMENT/GROUP/IMAGE && packer build .

variable "project_id" {
  type = string
}

variable "zone" {
  type = string
}

variable "machine_type" {
  type    = string
  default = "n2-standard-4"
}

variable "source_image" {
  type    = string
  default = null
}

variable "source_image_family" {
  type    = string
  default = null
}

variable "source_image_project_id" {
  type    = list(string)
  default = []
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

variable "subnetwork_name" {
  type    = string
  default = null
}

variable "omit_external_ip" {
  type    = bool
  default = true
}

variable "ssh_username" {
  type    = string
  default = "packer"
}

variable "labels" {
  type    = map(string)
  default = {}
}

variable "ansible_vars_file" {
  type = string
}

source "googlecompute" "node_image" {
  project_id              = var.project_id
  zone                    = var.zone
  machine_type            = var.machine_type
  source_image            = var.source_image
  source_image_family     = var.source_image_family
  source_image_project_id = var.source_image_project_id
  image_name              = var.image_name
  image_family            = var.image_family
  image_labels            = var.labels
  disk_size               = var.disk_size
  subnetwork              = var.subnetwork_name
  omit_external_ip        = var.omit_external_ip
  use_internal_ip         = var.omit_external_ip
  ssh_username            = var.ssh_username
}

build {
  sources = ["source.googlecompute.node_image"]

  provisioner "ansible" {
    playbook_file   = "${path.root}/../../ansible/site.yml"
    user            = var.ssh_username
    use_proxy       = false
    extra_arguments = ["-e", "@${var.ansible_vars_file}", "-e", "ctk_phase=install"]
  }
}
