"""An image's slurm_release (ctk.model.SLURM_ARCHIVES: 26.05, Debian forky's, on debian-13):
refused at its line where the base cannot take it or the image has no slurm role, one release per
cluster, the variables each target gives the slurm role, and what the lab renders for it."""

from __future__ import annotations

import os

import pytest

from ctk import paths
from ctk.blueprint import BlueprintErrors
from ctk.images.build import plan_layers
from ctk.plan import process
from ctk.render.slurmconf import NodeLayout, render_cgroup_conf
from ctk.stacks import get_stack
from ctk.stacks.rolevars import role_variables

# the lab without its slurm_release: the base's own Slurm (24.11)
LAB = open(os.path.join(paths.BLUEPRINTS, "lab.yaml")).read().replace('      slurm_release: "26.05"\n', "", 1)
IMAGE = "      roles: [common, munge, slurm, jax]\n      stack: jax-cpu\n"


def lab(tmp_path, settings: str, text: str = LAB) -> str:
    assert IMAGE in text
    p = tmp_path / "lab.yaml"
    p.write_text(text.replace(IMAGE, IMAGE + settings, 1))
    return str(p)


def errors(path: str) -> list[str]:
    with pytest.raises(BlueprintErrors) as e:
        process(path)
    return [f"{x.pos.line}:{x.pos.col} {x.message} | {x.hint}" for x in e.value.errors]


def line_of(path: str, text: str) -> int:
    return next(i for i, ln in enumerate(open(path).read().splitlines(), 1) if text in ln)


def test_slurm_26_05_on_debian_13_gives_the_slurm_role_its_release_and_suite(tmp_path):
    dep = process(lab(tmp_path, '      slurm_release: "26.05"\n')).deployment
    (img,) = dep.images
    assert (img.slurm_release, img.slurm, dep.slurm()) == ("26.05", (26, 5), (26, 5))
    got = role_variables(img, "slurm", get_stack(img.stack))
    assert got["slurm_release"] == "26.05" and got["slurm_release_suite"] == "forky"


def test_the_bases_own_release_by_name_is_the_base_image_with_the_same_layers(tmp_path):
    plain = process(lab(tmp_path, "")).deployment.images[0]
    named = process(lab(tmp_path, '      slurm_release: "24.11"\n')).deployment.images[0]
    assert named.slurm_release == "" and named.slurm == plain.slurm == (24, 11)
    stack = get_stack(plain.stack)
    assert [x.key for x in plan_layers(named, "base-x", stack)] == [x.key for x in plan_layers(plain, "base-x", stack)]
    newer = process(lab(tmp_path, '      slurm_release: "26.05"\n')).deployment.images[0]
    keys = {x.role: x.key for x in plan_layers(newer, "base-x", stack)}
    before = {x.role: x.key for x in plan_layers(plain, "base-x", stack)}
    # the base's and the layers under slurm stay; slurm's and every layer above it change
    assert [r for r in keys if keys[r] == before[r]] == ["common+munge"]


@pytest.mark.parametrize("value,message,hint", [
    ('"25.11"', "image 'lab': ctk has no Slurm 25.11 for base debian-13",
     "base debian-13 offers: 24.11 (the base's), 26.05 (Debian forky's)"),
    ("26.5", "image 'lab': slurm_release '26.5' is not a Slurm release",
     'a release as Slurm spells it, e.g. "26.05"; base debian-13 offers: 24.11 (the base\'s), 26.05 (Debian forky\'s)'),
    ("latest", "image 'lab': slurm_release 'latest' is not a Slurm release",
     'a release as Slurm spells it, e.g. "26.05"; base debian-13 offers: 24.11 (the base\'s), 26.05 (Debian forky\'s)'),
])
def test_a_release_ctk_cannot_install_is_refused_at_its_line(tmp_path, value, message, hint):
    path = lab(tmp_path, f"      slurm_release: {value}\n")
    assert errors(path) == [f"{line_of(path, 'slurm_release')}:22 {message} | {hint}"]


def test_26_05_on_debian_12_is_refused_and_names_the_base_that_has_it(tmp_path):
    path = lab(tmp_path, '      slurm_release: "26.05"\n', LAB.replace("base: debian-13", "base: debian-12", 1))
    got = [e for e in errors(path) if "slurm" in e.lower()]
    assert len(got) == 1 and "ctk has no Slurm 26.05 for base debian-12" in got[0], got
    assert got[0].endswith("base debian-12 offers: 22.05 (the base's); Slurm 26.05 is on base debian-13"), got


def test_a_release_without_the_slurm_role_is_refused(tmp_path):
    text = LAB.replace(IMAGE, "      roles: [common, jax]\n      stack: jax-cpu\n", 1)
    p = tmp_path / "lab.yaml"
    p.write_text(text.replace("      stack: jax-cpu\n", '      stack: jax-cpu\n      slurm_release: "26.05"\n', 1))
    got = errors(str(p))
    assert any("slurm_release is for the slurm role, which is not in its roles" in e for e in got), got


def test_two_node_images_with_different_releases_are_refused(tmp_path):
    text = LAB.replace("- group: cluster\n", """\
  - id: new_image
    source: ctk/image
    settings:
      name: newer
      roles: [common, munge, slurm, jax]
      stack: jax-cpu
      slurm_release: "26.05"

- group: cluster
""", 1).replace("  - id: gpu_nodeset\n    source: ctk/slurm/nodeset\n    use: [lab_image]",
                "  - id: gpu_nodeset\n    source: ctk/slurm/nodeset\n    use: [new_image]", 1)
    p = tmp_path / "lab.yaml"
    p.write_text(text)
    got = errors(str(p))
    assert got == [f"{line_of(str(p), 'slurm_release')}:22 image 'newer' has Slurm 26.05, image 'lab' Slurm 24.11: "
                   "the nodes of one cluster run one Slurm release | give every node image the same slurm_release "
                   "(and base)"], got


def test_the_labs_cgroup_conf_turns_the_plugin_off_from_26_05(tmp_path):
    layout = NodeLayout(controller_addr="198.18.0.2", controller_port=6817, node_addr={}, node_port={},
                        state_dir="/s", spool_dir="/p", log_dir="/l", pid_dir="/r", slurm_user="slurm")
    old = process(lab(tmp_path, "")).deployment
    new = process(lab(tmp_path, '      slurm_release: "26.05"\n')).deployment
    assert "CgroupPlugin=autodetect\n" in render_cgroup_conf(old, layout=layout)
    assert "CgroupPlugin=disabled\n" in render_cgroup_conf(new, layout=layout)
    # production nodes keep their cgroups, whatever the release
    assert "CgroupPlugin=autodetect\nConstrainCores=yes" in render_cgroup_conf(new)


def test_slurmctlds_openmetrics_are_on_from_25_11(tmp_path):
    from ctk.render.slurmconf import render_slurm_conf

    old = process(lab(tmp_path, "")).deployment
    new = process(lab(tmp_path, '      slurm_release: "26.05"\n')).deployment
    assert "MetricsType=metrics/openmetrics" in render_slurm_conf(new).splitlines()
    assert "MetricsType" not in render_slurm_conf(old)  # 24.11 has no such plugin


def test_a_container_image_takes_the_nodes_release_and_shares_their_slurm_layer(tmp_path):
    container = ('      slurm_release: "26.05"\n\n  - id: jax_container\n    source: ctk/container-image\n'
                 '    settings:\n      name: jax-cpu\n      roles: [common, munge, slurm, jax]\n      stack: jax-cpu\n'
                 '      slurm_release: "26.05"\n')
    dep = process(lab(tmp_path, container)).deployment
    (node,), (box,) = dep.images, dep.containers
    assert box.slurm_release == "26.05"
    stack = get_stack(node.stack)
    assert [x.key for x in plan_layers(box, "base-x", stack)] == [x.key for x in plan_layers(node, "base-x", stack)]
    path = lab(tmp_path, container[:container.rindex('slurm_release')] + 'slurm_release: "25.11"\n')
    got = errors(path)
    assert any("image 'jax-cpu': ctk has no Slurm 25.11 for base debian-13" in e for e in got), got
