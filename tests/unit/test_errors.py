"""One user error (exit 2) and one failure (exit 1); every other error derives from them."""

import pytest

from ctk.blueprint.errors import BlueprintErrors
from ctk.connect.base import SlurmError
from ctk.errors import EXIT_FAIL, EXIT_USAGE, Failure, UserError
from ctk.images.build import ImageBuildError
from ctk.images.packer import PackerError
from ctk.images.verify import ImageVerifyError
from ctk.runner import CommandError, run
from ctk.sandbox.daemons import DaemonError


def test_message_and_hint_render_as_the_cli_prints_them():
    e = UserError("--set x: expected K=V", hint="--set nodes=2")
    assert str(e) == "--set x: expected K=V\n  hint: --set nodes=2"
    assert e.exit_code == EXIT_USAGE
    assert e.to_dict() == {"kind": "usage", "message": "--set x: expected K=V", "hint": "--set nodes=2",
                           "exit_code": 2}
    assert str(Failure("slurmctld did not start")) == "slurmctld did not start"


@pytest.mark.parametrize("cls", [DaemonError, SlurmError, ImageBuildError, ImageVerifyError, PackerError])
def test_failures_exit_1(cls):
    assert issubclass(cls, Failure) and cls("x").exit_code == EXIT_FAIL


def test_blueprint_errors_are_user_errors():
    assert issubclass(BlueprintErrors, UserError)


def test_a_failed_command_is_a_failure_with_its_tail():
    with pytest.raises(CommandError) as e:
        run(["sh", "-c", "echo one; echo two >&2; exit 3"])
    assert isinstance(e.value, Failure) and e.value.exit_code == 1 and e.value.returncode == 3
    assert str(e.value).endswith("(exit 3)\none\ntwo")
