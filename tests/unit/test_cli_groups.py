"""The CLI builds only the parser of the command group it is given (cli.GROUPS names each
group's commands for that): the names there must be exactly the commands each group adds."""

import argparse
import importlib

from ctk.cli import GROUPS, build_parser
from ctk.cli.common import Parser


def _commands_added_by(group: str) -> set[str]:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", parser_class=Parser)
    importlib.import_module(f"ctk.cli.{group}").add_parsers(sub)
    return set(sub.choices)


def test_each_groups_listed_commands_are_the_ones_it_adds():
    for group, commands in GROUPS.items():
        assert _commands_added_by(group) == set(commands), group


def test_a_command_builds_only_its_groups_parser():
    sub = next(a for a in build_parser("deploy")._actions if isinstance(a, argparse._SubParsersAction))
    assert set(sub.choices) == set(GROUPS["cluster"])
    full = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert list(full.choices) == [c for cmds in GROUPS.values() for c in cmds]
