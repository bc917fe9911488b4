"""What ctk's GPU images carry (the nvidia_driver and cuda roles' pinned versions) against what
their stacks and GPUs need: refused by `ctk validate`, exit 2, at the line that asks for it."""

import json
import os
import subprocess
import sys
import textwrap

import yaml

from conftest import ROOT
from ctk import paths
from ctk.modules.machines import (
    ACCELERATORS,
    GENERATIONS,
    known_machine_types,
    lookup_machine,
)
from ctk.stacks.drivers import GENERATION_NEEDS, cuda_toolkit, gpu_needs, image_driver

ENV = {**os.environ, "PYTHONPATH": os.path.join(ROOT, "toolkit")}


def validate(path, env=None):
    r = subprocess.run([sys.executable, "-m", "ctk", "validate", path, "--json"], capture_output=True, text=True,
                       env={**ENV, **(env or {})}, timeout=60)
    return r.returncode, json.loads(r.stdout)


def blueprint(write, *, base="debian-13", roles="[common, munge, slurm, nvidia_driver, jax]", stack="jax-cuda12",
              machine="a3-megagpu-8g", extra=""):
    return write(textwrap.dedent(f"""\
        blueprint_name: gpu
        vars:
          deployment_name: gpu
        deployment_groups:
        - group: cluster
          modules:
          - id: img
            source: ctk/image
            settings:
              name: gpu
              base: {base}
              roles: {roles}
              stack: {stack}
        {textwrap.indent(extra, "      ")}
          - id: ns
            source: ctk/slurm/nodeset
            use: [img]
            settings:
              machine_type: {machine}
              node_count_static: 1
          - id: part
            source: ctk/slurm/partition
            use: [ns]
            settings: {{partition_name: gpu, is_default: true}}
          - id: ctl
            source: ctk/slurm/controller
            use: [img, part]
        """))


def line_of(path, text):
    return next(i for i, ln in enumerate(open(path), 1) if text in ln)


def test_the_checks_read_the_versions_the_roles_pin():
    """One place for each version: the role's own vars file, which the role installs from."""
    for base, release in (("debian-12", "Debian-12"), ("debian-13", "Debian-13")):
        pinned = yaml.safe_load(open(os.path.join(paths.ANSIBLE, "roles", "nvidia_driver", "vars", f"{release}.yml")))
        d = image_driver(base)
        assert d.version == pinned["__nvidia_driver_pin"]["version"]
        assert d.package_version.startswith(d.version + "-") and d.kernel_module == "proprietary"
    assert image_driver("debian-13").version.startswith("550.")
    assert image_driver("debian-12").version.startswith("535.")
    assert image_driver("ubuntu-24.04").kernel_module == "open" and image_driver("ubuntu-24.04").at_least("580")
    assert cuda_toolkit("debian-12").version == "11.8" and cuda_toolkit("debian-13").version == "12.4"
    assert image_driver("no-such-base") is None and cuda_toolkit("no-such-base") is None


def test_jax_cuda13_on_a_debian_image_is_refused_at_the_stack_line(write):
    bp = blueprint(write, stack="jax-cuda13")
    rc, out = validate(bp)
    assert rc == 2
    [err] = [e for e in out["errors"] if "jax-cuda13" in e["message"]]
    assert err["line"] == line_of(bp, "stack: jax-cuda13") and err["col"] == 14
    assert "needs NVIDIA driver >= 580" in err["message"] and "gets driver 550.163.01" in err["message"]
    assert "jax-cuda12" in err["hint"] and "ubuntu-24.04" in err["hint"]
    rc, out = validate(blueprint(write, base="debian-12", stack="jax-cuda13"))
    assert rc == 2 and any("gets driver 535.309.01" in e["message"] for e in out["errors"])


def test_jax_cuda12_on_debian_13_with_the_driver_passes(write):
    rc, out = validate(blueprint(write))
    assert rc == 0, out


def test_an_image_without_the_driver_role_is_not_held_to_its_driver(write):
    """No nvidia_driver role: the driver comes from elsewhere (or the GPUs are emulated, as on
    the lab), so there is nothing ctk installs to check against."""
    rc, out = validate(blueprint(write, roles="[common, munge, slurm, jax]", stack="jax-cuda13"))
    assert rc == 0, out


def test_blackwell_needs_the_open_module_that_no_debian_image_has(write):
    assert gpu_needs("b200") == ("Blackwell", "570", "open")
    bp = blueprint(write, machine="a4-highgpu-8g")
    rc, out = validate(bp)
    assert rc == 2
    [err] = out["errors"]
    assert err["line"] == line_of(bp, "machine_type: a4-highgpu-8g")
    assert "B200 GPUs (Blackwell) need NVIDIA's open kernel module from driver 570" in err["message"]
    assert "proprietary" in err["message"] and "ubuntu-24.04" in err["hint"]
    rc, out = validate(blueprint(write, machine="a4x-highgpu-4g"))  # GB200: the same GPU
    assert rc == 2


def test_every_gpu_of_the_machine_table_has_a_generation_the_rules_know():
    """A new GPU cannot slip past the driver rules: its gres type needs a generation, and the
    rules are kept by generation."""
    known = {"Pascal", "Volta", "Turing", "Ampere", "Ada Lovelace", "Hopper", "Blackwell"}
    assert {gres for gres, _ in ACCELERATORS.values()} == set(GENERATIONS)
    assert set(GENERATIONS.values()) <= known and set(GENERATION_NEEDS) <= known
    gpus = {m.gpu_type for n in known_machine_types() if (m := lookup_machine(n)) and m.gpu_count}
    assert gpus <= set(GENERATIONS)
    assert {g for g in GENERATIONS if GENERATIONS[g] == "Blackwell"} == {"b200", "b300", "rtxpro6000"}
    assert gpu_needs("b300") == gpu_needs("rtxpro6000") == ("Blackwell", "570", "open")
    assert gpu_needs("h100") is None and gpu_needs(None) is None


def test_every_blackwell_machine_type_is_refused_on_the_proprietary_module_at_its_line(write):
    """All the Blackwell machine types of the table (B200, GB200, GB300, RTX PRO 6000), one
    nodeset each, in one blueprint: one error each, at its own machine_type line."""
    blackwell = sorted(n for n in known_machine_types()
                       if (m := lookup_machine(n)) and m.gpu_count and GENERATIONS[m.gpu_type] == "Blackwell")
    assert {"a4-highgpu-8g", "a4x-highgpu-4g", "a4x-maxgpu-4g-metal", "g4-standard-48"} <= set(blackwell)
    nodesets = "".join(textwrap.indent(textwrap.dedent(f"""\
          - id: ns{i}
            source: ctk/slurm/nodeset
            use: [img]
            settings:
              machine_type: {m}
              node_count_dynamic_max: 1
        """), "  ") for i, m in enumerate(blackwell))
    bp = write(open(blueprint(write)).read().replace("  - id: ns\n", nodesets + "  - id: ns\n", 1))
    rc, out = validate(bp)
    assert rc == 2
    errors = {e["line"]: e for e in out["errors"]}
    assert len(errors) == len(out["errors"]) == len(blackwell)
    for m in blackwell:
        err = errors[line_of(bp, f"machine_type: {m}")]
        assert "(Blackwell) need NVIDIA's open kernel module from driver 570" in err["message"], err
        assert "ubuntu-24.04" in err["hint"]
    assert any("RTXPRO6000 GPUs" in e["message"] for e in out["errors"])


def test_a_driver_role_picks_a_cuda_stack_when_the_image_names_none(write):
    bp = write(open(blueprint(write)).read().replace("      stack: jax-cuda12\n", ""))
    r = subprocess.run([sys.executable, "-m", "ctk", "show", bp, "--json"], capture_output=True, text=True, env=ENV,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["images"][0]["stack"] == "jax-cuda12"


def test_transformer_engine_needs_a_cuda_toolkit_of_its_stacks_major_version(write):
    te = 'transformer_engine: "2.20.2"'
    roles = "[common, munge, slurm, nvidia_driver, cuda, jax]"
    bp = blueprint(write, base="debian-12", roles=roles, stack="jax-cuda12-0.10", extra=te)
    rc, out = validate(bp)
    assert rc == 2
    [err] = out["errors"]
    assert err["line"] == line_of(bp, "transformer_engine:")
    assert "CUDA 12 toolkit" in err["message"] and "toolkit is 11.8" in err["message"]
    assert "debian-13" in err["hint"]
    rc, out = validate(blueprint(write, roles=roles, extra=te))  # debian-13: CUDA toolkit 12.4
    assert rc == 0, out
    rc, out = validate(blueprint(write, extra=te))  # no cuda role: nothing to build it with
    assert rc == 2 and "needs the cuda role" in out["errors"][0]["message"]
    rc, out = validate(blueprint(write, roles="[common, munge, slurm, nvidia_driver, jax, cuda]", extra=te))
    assert rc == 2 and "needs the cuda role before jax" in out["errors"][0]["message"]
    rc, out = validate(blueprint(write, roles="[common, munge, slurm, nvidia_driver, cuda]", extra=te))
    assert rc == 2 and "has no jax role" in out["errors"][0]["message"]
    rc, out = validate(blueprint(write, roles=roles, stack="jax-cpu", extra=te))
    assert rc == 2 and "needs a CUDA stack" in out["errors"][0]["message"]


def test_transformer_engine_is_a_release_ctk_knows_and_has_a_lock_for(write, tmp_path):
    roles = "[common, munge, slurm, nvidia_driver, cuda, jax]"
    bp = blueprint(write, roles=roles, extra='transformer_engine: "2.19.0"')
    rc, out = validate(bp)
    assert rc == 2
    [err] = out["errors"]
    assert err["line"] == line_of(bp, "transformer_engine:")
    assert "2.19.0 is not a release ctk knows" in err["message"] and "2.20.2" in err["hint"]
    # The shipped lock of jax-cuda12 with 2.20.2 for Python 3.13 is what makes it valid: a catalog
    # copy without it is refused, naming the command that makes it.
    catalog = tmp_path / "catalog"
    os.makedirs(catalog / "locks" / "jax-cuda12")
    with open(catalog / "stacks.yaml", "w") as f:
        f.write(open(os.path.join(paths.IMAGES, "stacks.yaml")).read())
    for name in ("py3.12.txt", "py3.13.txt"):
        with open(catalog / "locks" / "jax-cuda12" / name, "w") as f:
            f.write(open(os.path.join(paths.IMAGES, "locks", "jax-cuda12", name)).read())
    rc, out = validate(blueprint(write, roles=roles, extra='transformer_engine: "2.20.2"'),
                       env={"CTK_STACKS": str(catalog / "stacks.yaml")})
    assert rc == 2, out
    assert "no current lock for Python 3.13 with Transformer Engine 2.20.2" in out["errors"][0]["message"]
    assert out["errors"][0]["hint"] == "make it: ctk stack lock jax-cuda12 --python 3.13 --transformer-engine 2.20.2"


def test_a_libtpu_that_is_not_the_one_of_the_stacks_jax_fails_validate(write, tmp_path):
    catalog = yaml.safe_load(open(os.path.join(paths.IMAGES, "stacks.yaml")))
    catalog["stacks"]["jax-tpu"]["pins"]["libtpu"] = "0.0.42.1"  # jax 0.10.2's, not 0.12.0.1's
    path = tmp_path / "stacks.yaml"
    path.write_text(yaml.safe_dump(catalog, sort_keys=False))
    bp = blueprint(write, roles="[common, munge, slurm, jax]", stack="jax-tpu", machine="n2-standard-2")
    r = subprocess.run([sys.executable, "-m", "ctk", "validate", bp], capture_output=True, text=True,
                       env={**ENV, "CTK_STACKS": str(path)}, timeout=60)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert f"{path}:" in r.stderr and "libtpu 0.0.42.1 is not the libtpu jax 0.12.0.1 was released with (0.0.50.*)" in r.stderr


def test_dcgm_is_refused_where_nvidia_publishes_none_and_without_the_driver(write):
    """DCGM is in NVIDIA's CUDA repository for Debian 12, Ubuntu and RHEL/Rocky, not for Debian 13,
    and Debian's archive has none: refused at the image's roles line, naming where it exists."""
    bp = blueprint(write, roles="[common, munge, slurm, nvidia_driver, dcgm, jax]")
    rc, out = validate(bp)
    assert rc == 2
    [err] = out["errors"]
    assert err["line"] == line_of(bp, "roles:")
    assert "no DCGM packages for base debian-13" in err["message"] and "debian-12" in err["hint"]
    rc, out = validate(blueprint(write, roles="[common, munge, slurm, dcgm, nvidia_driver, jax]"))
    assert rc == 2 and "put nvidia_driver before it" in out["errors"][0]["message"]
    rc, out = validate(blueprint(write, base="debian-12", stack="jax-cuda12-0.10",
                                 roles="[common, munge, slurm, nvidia_driver, dcgm, jax]"))
    assert rc == 0, out
