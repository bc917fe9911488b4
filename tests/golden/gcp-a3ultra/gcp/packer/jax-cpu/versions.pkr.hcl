# The Packer and googlecompute plugin gcp.pkr.hcl is written for: those Cluster Toolkit's
# custom-image module requires. `packer init .` installs the plugin. (Packer before 1.7 cannot
# read `required_plugins`; ctk checks the folder without this file there.)
packer {
  required_version = ">= 1.15.3, < 2.0.0"

  required_plugins {
    googlecompute = {
      version = "~> 1.2.5"
      source  = "github.com/hashicorp/googlecompute"
    }
  }
}
