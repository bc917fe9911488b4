"""Integration tests: real daemons and tools."""

import pytest

# The helpers the test modules share: pytest explains their failed asserts as it does the tests'.
pytest.register_assert_rewrite(__name__ + ".labtools")
