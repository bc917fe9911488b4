"""YAML output that reads like a hand-written blueprint (block scalars, key order kept)."""

from __future__ import annotations

import yaml


class _Dumper(yaml.SafeDumper):
    pass


def _str(dumper, s: str):
    if "\n" in s:
        # Block style cannot carry trailing spaces on a line; fall back to quoted then.
        style = "|" if not any(ln != ln.rstrip(" \t") for ln in s.split("\n")) else '"'
        return dumper.represent_scalar("tag:yaml.org,2002:str", s, style=style)
    return dumper.represent_scalar("tag:yaml.org,2002:str", s)


_Dumper.add_representer(str, _str)


def dump(value) -> str:
    return yaml.dump(value, Dumper=_Dumper, sort_keys=False, default_flow_style=False,
                     allow_unicode=True, width=100)
