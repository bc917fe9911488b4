"""Which Slurm release changes a cluster takes in place (ctk.model.slurm_change_refusal), by
SchedMD's rule: the state and records of the previous two major releases, three from 24.11 on
(the 24.11 release notes: "can be upgraded from version 23.02, 23.11 or 24.05"); never back."""

import pytest

from ctk.model import releases_after, slurm_change_refusal


@pytest.mark.parametrize("old,new,n", [((24, 11), (26, 5), 3), ((23, 11), (24, 5), 1), ((23, 2), (24, 11), 3),
                                       ((22, 5), (24, 11), 4), ((24, 5), (24, 11), 1), ((26, 5), (26, 5), 0),
                                       ((21, 8), (22, 5), 1)])
def test_releases_after_counts_the_nine_then_six_month_cycles(old, new, n):
    assert releases_after(old, new) == n


@pytest.mark.parametrize("old,new", [((24, 11), (26, 5)), ((23, 2), (24, 11)), ((24, 11), (24, 11)),
                                     ((21, 8), (22, 5)), ((20, 11), (22, 5))])
def test_upgrades_in_the_window_are_taken(old, new):
    assert slurm_change_refusal(old, new) is None


def test_a_downgrade_and_a_jump_past_the_window_are_refused_saying_why():
    assert "cannot read them" in slurm_change_refusal((26, 5), (24, 11))
    why = slurm_change_refusal((22, 5), (24, 11))
    assert "at most 3 releases back" in why and "4 releases back" in why and "upgrade in steps" in why
    assert "at most 2 releases back" in slurm_change_refusal((20, 2), (22, 5))  # before 24.11: two


def test_a_refused_jump_names_the_deploys_in_between_from_what_ctks_images_offer():
    from ctk.targets.local.identity import _upgrade_path
    assert _upgrade_path((22, 5), (26, 5)) == (
        "upgrade in steps: deploy the cluster on Slurm 23.11 (base ubuntu-24.04), then Slurm 24.11 (base debian-13), "
        "then on 26.05")
    assert _upgrade_path((22, 5), (24, 11)).endswith("Slurm 23.11 (base ubuntu-24.04), then on 24.11")


def test_the_release_of_a_running_lab_is_read_from_sinfo_version():
    from ctk.targets.local.identity import release_of_version
    assert release_of_version("slurm-wlm 24.11.5\n") == "24.11"
    assert release_of_version("slurm 26.05.5") == "26.05"
    assert release_of_version("sinfo: error: Unable to contact slurm controller") is None
