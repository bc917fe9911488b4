"""Image exports: a directory, a tar.zst, an OCI archive (buildah, chroot isolation; pushed to a
registry too with --push), an ext4 disk image (mke2fs -d). The layers are flattened through a
read-only overlay mounted in a private mount namespace, so nothing stays mounted whatever
happens."""

from __future__ import annotations

import os
import re
import shlex
import shutil

from ..errors import UserError
from ..progress import Progress
from ..render.oci import image_path
from ..runner import run
from .store import Store

FORMATS = ("dir", "tar", "oci", "ext4")
# A registry reference: HOST[:PORT]/PATH[:TAG] (or @sha256:DIGEST), as buildah push takes after
# docker://; the host has a dot or a port, or is localhost, so it is never read as a path.
PUSH_REF_RE = re.compile(r"^(localhost|[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)+|[A-Za-z0-9.-]+:\d{1,5})(:\d{1,5})?"
                         r"(/[a-z0-9]+([._-]+[a-z0-9]+)*)+(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}|@sha256:[0-9a-f]{64})?$")


def check_push_ref(ref: str) -> None:
    if not PUSH_REF_RE.match(ref):
        raise UserError(f"--push {ref!r}: not a registry reference",
                        hint="HOST[:PORT]/NAME[:TAG], e.g. us-docker.pkg.dev/PROJECT/REPO/jax:1 or localhost:5000/jax")


def _in_flat_view(store: Store, layers: list[str], script: str, work: str, progress: Progress, what: str):
    """Run a shell script with $ROOT set to the image's flattened, read-only tree."""
    mnt = os.path.join(work, "mnt")
    os.makedirs(mnt, exist_ok=True)
    lower = ":".join(store.lowerdirs(layers))
    mount = (f"mount -t overlay overlay -o ro,lowerdir={shlex.quote(lower)} {shlex.quote(mnt)}"
             if len(layers) > 1 else f"mount --bind -o ro {shlex.quote(store.layer_root(layers[0]))} {shlex.quote(mnt)}")
    full = f"set -eu\nmount --make-rprivate /\n{mount}\nROOT={shlex.quote(mnt)}\n{script}\n"
    run(["unshare", "--mount", "sh", "-c", full], on_line=progress.task, what=what)


def export_script(name: str, fmt: str, dest: str, work: str, path: str = "", push: str = "",
                  tls_verify: bool = True) -> str:
    """The shell program (sh, run with set -eu) that writes image NAME's tree, at $ROOT, to DEST
    in format FMT; WORK is a scratch folder of its own. PATH: the oci image's PATH (its stack's
    venv first), where the image has a JAX venv. PUSH: a registry reference the oci image is
    pushed to as well (over TLS unless TLS_VERIFY is false)."""
    q = shlex.quote(dest)
    if fmt == "dir":
        return f'mkdir {q}\ncp -a "$ROOT"/. {q}/\n'
    if fmt == "tar":
        # zstd as tar's own compressor, not through a pipe: sh has no pipefail, and a tar that
        # failed there would have left a truncated archive behind zstd's success
        return f'tar --numeric-owner --xattrs -I "zstd -q -T0" -C "$ROOT" -cf {q} .\n'
    if fmt == "ext4":
        label = shlex.quote(("ctk-" + name)[:16])
        return (f'size=$(du -sm "$ROOT" | cut -f1)\n'
                f'mke2fs -q -F -t ext4 -L {label} -d "$ROOT" {q} "$(( size * 13 / 10 + 64 ))M"\n')
    storage = shlex.quote(os.path.join(work, "containers"))
    b = f"buildah --root {storage}/root --runroot {storage}/run --storage-driver vfs"
    tarball = shlex.quote(os.path.join(work, "rootfs.tar"))
    title = shlex.quote(f"org.opencontainers.image.title=ctk-{name}")
    local = shlex.quote(f"localhost/ctk/{name}:latest")
    ref = shlex.quote(f"oci-archive:{dest}:ctk/{name}:latest")
    env = f" --env {shlex.quote('PATH=' + path)}" if path else ""
    head = (f'tar --numeric-owner -C "$ROOT" -cf {tarball} .\n'
            f"ctr=$({b} from --isolation chroot scratch)\n"
            f'{b} add "$ctr" {tarball} /\n'
            f'rm {tarball}\n'
            f'{b} config --cmd /bin/bash --label {title}{env} "$ctr"\n')
    if not push:
        # Committed straight to the archive: no image in buildah's own storage between, which
        # costs one more copy of the tree (a third of the export's time).
        return head + (f'{b} commit --quiet --format oci --disable-compression=false "$ctr" {ref} >/dev/null\n'
                       f'{b} rm "$ctr" >/dev/null\n')
    # One commit, pushed twice: the archive and the registry get the same image (one config digest).
    return head + (f'{b} commit --quiet "$ctr" {local} >/dev/null\n'
                   f"{b} push --quiet {local} {ref}\n"
                   f"{b} push --quiet --format oci --tls-verify={'true' if tls_verify else 'false'} {local} "
                   f"{shlex.quote('docker://' + push)}\n"
                   f'{b} rm "$ctr" >/dev/null\n')


def export_image(name: str, fmt: str, out: str, store: Store | None = None, progress: Progress | None = None,
                 overwrite: bool = False, push: str | None = None, tls_verify: bool = True) -> str:
    store = store or Store()
    progress = progress or Progress()
    if fmt not in FORMATS:
        raise UserError(f"--format {fmt!r}: use one of {', '.join(FORMATS)}")
    if push is not None:
        if fmt != "oci":
            raise UserError(f"--push goes with --format oci, not {fmt}", hint="--format oci -o IMAGE.tar --push REF")
        check_push_ref(push)
    rec = store.built_image(name)
    out = os.path.abspath(out)
    if os.path.exists(out) and not overwrite:
        raise UserError(f"{out} already exists", hint="pass -w to overwrite it")
    work = store.scratch(f"export-{name}-{os.getpid()}")
    tmp_out = os.path.join(os.path.dirname(out), f".{os.path.basename(out)}.tmp-{os.getpid()}")
    try:
        with progress.step(f"export {name} as {fmt} to {out}" + (f", push to {push}" if push else "")):
            if fmt == "oci" and not shutil.which("buildah"):
                raise UserError("the oci format needs buildah", hint="apt-get install buildah")
            roles = (rec.get("spec") or {}).get("roles") or []
            script = export_script(name, fmt, tmp_out, work, image_path(roles) if "jax" in roles else "",
                                   push or "", tls_verify)
            _in_flat_view(store, rec["layers"], script, work, progress, f"export of {name} as {fmt} failed")
            if os.path.isdir(out) and not os.path.islink(out):
                shutil.rmtree(out)
            elif os.path.exists(out):
                os.unlink(out)
            os.rename(tmp_out, out)
    finally:
        if os.path.isdir(tmp_out):
            shutil.rmtree(tmp_out, ignore_errors=True)
        elif os.path.exists(tmp_out):
            os.unlink(tmp_out)
        shutil.rmtree(work, ignore_errors=True)
    return out
