"""Suites run by `ctk image test` (and after every build) against a node booted from the image.

ctk passes the image record (its layers, roles and stack pins) in CTK_IMAGE_RECORD.
"""

import json
import os

import pytest

from ctk.model import BASES


@pytest.fixture(scope="session")
def image():
    with open(os.environ["CTK_IMAGE_RECORD"]) as f:
        return json.load(f)


@pytest.fixture(scope="session")
def roles(image):
    return image["spec"]["roles"]


@pytest.fixture(scope="session")
def base(image):
    """What the image's base carries (ctk.model.BASES): its release, its Slurm and Python."""
    return BASES[image["spec"]["base"]]
