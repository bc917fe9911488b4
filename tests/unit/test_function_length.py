"""No function of the ctk package is longer than MAX_LINES lines: from its `def` line to its last
(decorators not counted), as Python's ast gives them. The package data (ctk/data: example jobs,
verification suites) is not ctk's own code and is left out."""

import ast
import os
from collections.abc import Collection

import ctk

MAX_LINES = 80
PKG = os.path.dirname(os.path.abspath(ctk.__file__))

# Functions still over the limit, as (path under the package, name): they are to be split next.
# The list only shrinks: a function here that is no longer over the limit, or no longer exists,
# fails the test until it is taken off.
STILL_LONG: set[tuple[str, str]] = set()


def function_lengths(source: str, filename: str = "<source>") -> list[tuple[int, str, int]]:
    """(line, name, length in lines) of every function and method in SOURCE, nested ones too."""
    tree = ast.parse(source, filename)
    return sorted((n.lineno, n.name, n.end_lineno - n.lineno + 1) for n in ast.walk(tree)
                  if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))


def length_problems(sources: dict[str, str], still_long: Collection[tuple[str, str]] = (),
                    limit: int = MAX_LINES) -> list[str]:
    """What breaks the rule in SOURCES (file name -> its text): each function longer than LIMIT
    lines that STILL_LONG does not name, as `file:line name (N lines)`, and each entry of
    STILL_LONG that is no longer over the limit or no longer exists."""
    problems = []
    longest: dict[tuple[str, str], int] = {}
    for file, source in sorted(sources.items()):
        for line, name, n in function_lengths(source, file):
            longest[file, name] = max(n, longest.get((file, name), 0))
            if n > limit and (file, name) not in still_long:
                problems.append(f"{file}:{line} {name} ({n} lines)")
    for file, name in sorted(still_long):
        if (file, name) not in longest:
            problems.append(f"{file} {name}: listed in STILL_LONG but no longer exists; take it off the list")
        elif longest[file, name] <= limit:
            problems.append(f"{file} {name}: listed in STILL_LONG but now {longest[file, name]} lines, "
                            f"within the limit of {limit}; take it off the list")
    return problems


def package_sources(root: str = PKG) -> dict[str, str]:
    """Every .py file of the package at ROOT but those under its data folder: path under ROOT
    (with /) -> text."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        if dirpath == root:
            dirnames[:] = [d for d in dirnames if d != "data"]
        for f in filenames:
            if f.endswith(".py"):
                path = os.path.join(dirpath, f)
                with open(path, encoding="utf-8") as fh:
                    out[os.path.relpath(path, root).replace(os.sep, "/")] = fh.read()
    return out


def test_no_function_is_longer_than_the_limit():
    sources = package_sources()
    assert "plan/__init__.py" in sources and "cli/job.py" in sources, sorted(sources)  # the walk found the package
    assert not any(f.startswith("data/") for f in sources)
    problems = length_problems(sources, STILL_LONG)
    assert not problems, (f"functions of {PKG} over {MAX_LINES} lines (split them into helpers):\n"
                          + "\n".join(problems))


def _function(name: str, lines: int, decorators: int = 0, prefix: str = "def") -> str:
    """The source of a function LINES lines long (its def line included), after DECORATORS lines."""
    body = "".join(f"    x{i} = {i}\n" for i in range(lines - 1))
    return "@staticmethod\n" * decorators + f"{prefix} {name}():\n{body}"


def test_the_check_fails_on_a_function_over_the_limit():
    source = "import os\n\n\n" + _function("short", 80, decorators=3) + "\n\n" + _function("long", 81)
    # short's decorators are not counted: 80 lines from its def line (7) on
    assert function_lengths(source) == [(7, "short", 80), (89, "long", 81)]
    assert length_problems({"m.py": source}) == ["m.py:89 long (81 lines)"]
    # an async one, and a method
    source = _function("agen", 81, prefix="async def") + "\n\nclass C:\n" + "\n".join(
        "    " + line for line in _function("meth", 82).splitlines()) + "\n"
    assert length_problems({"m.py": source}) == ["m.py:1 agen (81 lines)", "m.py:85 meth (82 lines)"]


def test_the_allowlist_only_shrinks():
    long_one, short_one = _function("f", 81), _function("f", 80)
    assert length_problems({"m.py": long_one}, {("m.py", "f")}) == []
    assert length_problems({"m.py": short_one}, {("m.py", "f")}) == [
        "m.py f: listed in STILL_LONG but now 80 lines, within the limit of 80; take it off the list"]
    assert length_problems({"m.py": long_one}, {("m.py", "g")}) == [
        "m.py:1 f (81 lines)", "m.py g: listed in STILL_LONG but no longer exists; take it off the list"]
