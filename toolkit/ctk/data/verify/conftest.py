"""Suites run by `ctk image test` (and after every build) against a node booted from the image.

ctk passes the image record (its layers, roles and stack pins) in CTK_IMAGE_RECORD.
"""

import json
import os

import pytest


@pytest.fixture(scope="session")
def image():
    with open(os.environ["CTK_IMAGE_RECORD"]) as f:
        return json.load(f)


@pytest.fixture(scope="session")
def roles(image):
    return image["spec"]["roles"]
