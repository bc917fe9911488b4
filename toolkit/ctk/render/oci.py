"""The OCI bundle config of a container image (config.json beside its rootfs/), as ctk's nodes
run it: through the slurm role's OCI runtime (files/ctk-oci-runtime), which Slurm's oci.conf
names. That runtime maps the job's user into the container's user namespace, gives it a /tmp
and /run of its own and binds the node's /proc, /sys, /home and name files, so this config says
only what the image is: its root filesystem (read-only), its default command and environment."""

from __future__ import annotations

import json

from ..model import JAX_VENV, ImageSpec

# The capabilities a process keeps in the container's user namespace (none of the node's).
CAPS = ["CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"]
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def image_path(roles: list[str]) -> str:
    """PATH in an image of ROLES: its stack's venv first where the jax role made one."""
    return f"{JAX_VENV}/bin:{PATH}" if "jax" in roles else PATH


def bundle_config(img: ImageSpec) -> dict:
    """config.json of IMG's bundle (runtime-spec 1.0.2). `srun --container` replaces the
    process's args, environment and folder with the step's."""
    path = image_path(img.roles)
    return {
        "ociVersion": "1.0.2",
        "process": {"terminal": False, "user": {"uid": 0, "gid": 0}, "args": ["/bin/sh"],
                    "env": [f"PATH={path}", "LANG=C.UTF-8"], "cwd": "/", "noNewPrivileges": True,
                    "capabilities": {k: list(CAPS) for k in ("bounding", "effective", "permitted")}},
        "root": {"path": "rootfs", "readonly": True},
        "mounts": [
            {"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
             "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
            {"destination": "/dev/pts", "type": "devpts", "source": "devpts",
             "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"]},
        ],
        "linux": {"namespaces": [{"type": "user"}, {"type": "mount"}]},
        "annotations": {"org.opencontainers.image.title": f"ctk-{img.name}",
                        "ctk.stack": img.stack, "ctk.base": img.base},
    }


def bundle_config_text(img: ImageSpec) -> str:
    return json.dumps(bundle_config(img), indent=2) + "\n"
