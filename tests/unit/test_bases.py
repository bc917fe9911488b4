"""The bases ctk knows, what each carries (Slurm, Python), and where each is known by name."""

from ctk.images.base import SUITES
from ctk.model import BASES, DEFAULT_BASE
from ctk.modules.ctk_kinds import IMAGE, IMAGE_BASES
from ctk.plan import process

IMAGE_MODULE = """\
blueprint_name: b
vars: {{deployment_name: demo, project_id: p, zone: us-central1-a}}
deployment_groups:
- group: g
  modules:
  - id: img
    {module}
"""


def test_debian_releases_carry_their_slurm_and_python():
    d12, d13 = BASES["debian-12"], BASES["debian-13"]
    assert (d12.release, d12.slurm_release, d12.python_release) == ("12", "22.05", "3.11")
    assert (d13.release, d13.slurm_release, d13.python_release) == ("13", "24.11", "3.13")
    # Slurm's own auth (auth/slurm) came with 23.11: debian-13 has it, debian-12 does not.
    assert d13.slurm >= (23, 11) > d12.slurm


def test_every_base_is_named_alike_everywhere():
    assert IMAGE_BASES == tuple(BASES) and DEFAULT_BASE in BASES
    assert IMAGE.input("base").default == DEFAULT_BASE
    assert set(SUITES) <= set(BASES)  # what debootstrap builds here
    assert {"debian-12", "debian-13"} <= set(SUITES)
    assert all(b.name == name for name, b in BASES.items())


def test_a_cluster_toolkit_image_on_debian_13_has_that_base(write):
    path = write(IMAGE_MODULE.format(
        module="source: modules/packer/custom-image\n    kind: packer\n"
               "    settings: {source_image_family: slurm-gcp-6-9-debian-13, machine_type: n2-standard-4, "
               "subnetwork_name: s}"))
    assert process(path).deployment.images[0].base == "debian-13"
