"""Blueprints: load with positions, expand expressions and `use`, validate — errors all at once."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from .errors import BlueprintError, BlueprintErrors, Collector, Pos, UserError

if TYPE_CHECKING:
    from .expand import Expanded

# The engine (load, expand, validate) is imported on first use: commands that never read a
# blueprint (ctk job ...) start faster without it.


def __getattr__(name: str):
    if name == "Expanded":
        from .expand import Expanded
        return Expanded
    raise AttributeError(name)


def process(path: str, cli_vars: list[str] | tuple = (), deployment_file: str | None = None,
            then: Callable[[Expanded, Collector], None] | None = None) -> Expanded:
    """Load, expand and validate a blueprint; raise BlueprintErrors listing every problem.
    THEN, if given, runs on a valid blueprint before errors are raised, so that its errors
    (planning's, see ctk.plan.process) are reported with the others."""
    from .expand import collect_vars, expand
    from .load import load_file
    from .structure import check_structure
    from .validate import validate
    from .vars import load_deployment_file, parse_cli_vars

    c = Collector()
    doc = load_file(path, strict=False)
    c.errors.extend(doc.errors)
    sources = {doc.file: doc.text}
    cli = parse_cli_vars(list(cli_vars))
    for _, _, src in cli:
        sources[src.doc.file] = src.doc.text
    dep = None
    if deployment_file:
        dep = load_deployment_file(deployment_file, c)
        sources[dep[0].file] = dep[0].text
    bp = check_structure(doc, c)
    if bp is None:
        c.raise_if_any(sources)
    assert bp is not None  # check_structure notes an error whenever it returns None: raised above
    var_sources = collect_vars(bp, dep, cli)
    exp = expand(bp, var_sources, c)
    validate(exp, c)
    if not c and then is not None:
        then(exp, c)
    exp.sources = sources
    c.raise_if_any(sources)
    return exp


__all__ = ["process", "BlueprintError", "BlueprintErrors", "Collector", "Pos", "UserError", "Expanded"]
