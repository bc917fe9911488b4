# One image layer, built locally: Packer's `null` builder reaches a build node (booted by ctk
# from the layer below, sshd on a loopback address) over SSH and runs one Ansible role there.
# ctk writes the variables file; see toolkit/ctk/images/packer.py.

variable "host" {
  type = string
}

variable "port" {
  type = number
}

variable "private_key_file" {
  type = string
}

variable "playbook_file" {
  type = string
}

variable "extra_arguments" {
  type    = list(string)
  default = []
}

variable "ansible_env_vars" {
  type    = list(string)
  default = []
}

source "null" "build_node" {
  communicator         = "ssh"
  ssh_host             = var.host
  ssh_port             = var.port
  ssh_username         = "root"
  ssh_private_key_file = var.private_key_file
  ssh_timeout          = "60s"
}

build {
  sources = ["source.null.build_node"]

  provisioner "ansible" {
    playbook_file = var.playbook_file
    user          = "root"
    use_proxy     = false
    # packer would run `ansible-playbook --version` before every layer (0.7 s of each layer's
    # start, measured); ctk's environment pins Ansible, so there is nothing to learn from it
    skip_version_check = true
    extra_arguments    = var.extra_arguments
    ansible_env_vars   = var.ansible_env_vars
  }
}
