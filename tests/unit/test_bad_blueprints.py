"""A corpus of bad blueprints (tests/bad_blueprints/): each must fail with exit 2, every
error at its file:line:col with the source line and a caret, the hints given, no
traceback, and no deployment folder (or temp folder) left behind.

Each case declares its expectations in the comment lines at its top (or, for a file that
cannot hold comments, in a side file NN-name.expect):

    # expect: LINE:COL message substring        an error in the blueprint itself
    # expect: NAME:LINE:COL message substring   an error in another source: --vars, --vars#2,
                                                or `deployment` (the -d file)
    # hint: substring                           appears in a hint line (repeatable)
    # vars: k=v,k2=v2                           one --vars flag (repeatable)
    # deployment: NN-name.deployment.yaml       companion file passed with -d
    # xfail: reason                             known engine gap: strict xfail of every test
    # xfail-text: reason                        ... of the text (create) tests only
    # xfail-json: reason                        ... of the validate --json test only

`expect:` lines may repeat; all must appear, and no other error may be reported.
Most cases run in-process (ctk.cli.main, fast); a handful run `python -m ctk` in a real
subprocess to prove there is no traceback at the process level.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from ctk import cli

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO / "tests" / "bad_blueprints"

# Cases that also go through a real `python -m ctk` process.
SUBPROCESS = {
    "non-utf8", "empty-file", "alias-bomb", "recursive-alias", "unclosed-bracket",
    "deployment-name-invalid", "bad-vars-flag", "deployment-file-unknown-key", "many-errors-at-once",
    "stack-needs-newer-python",
}

_DIRECTIVE = re.compile(r"^(expect|hint|vars|deployment|xfail|xfail-text|xfail-json):\s*(.*)$")
_LOC = re.compile(r"^(?:(?P<src>\S+):)?(?P<line>\d+):(?P<col>\d+)$")


@dataclass
class Expect:
    source: str  # "" for the blueprint, else --vars, --vars#2, deployment
    line: int
    col: int
    message: str


@dataclass
class Case:
    path: Path
    expects: list[Expect] = field(default_factory=list)
    hints: list[str] = field(default_factory=list)
    vars: list[str] = field(default_factory=list)
    deployment: Path | None = None
    xfail: str = ""
    xfail_text: str = ""
    xfail_json: str = ""

    @property
    def stem(self) -> str:  # name without the NN- prefix
        return self.path.stem.split("-", 1)[1]


def _header(path: Path) -> list[str]:
    side = path.with_suffix(".expect")
    data = side.read_bytes() if side.exists() else path.read_bytes()
    out = []
    for ln in data.decode("utf-8", errors="replace").splitlines():
        if not ln.startswith("#"):
            break
        out.append(ln[1:].strip())
    return out


def parse_case(path: Path) -> Case:
    c = Case(path)
    for ln in _header(path):
        d = _DIRECTIVE.match(ln)
        if not d:
            continue  # a description line
        key, rest = d.group(1), d.group(2).strip()
        if key == "expect":
            loc, _, msg = rest.partition(" ")
            m = _LOC.match(loc)
            assert m, f"{path.name}: bad expect line {ln!r}"
            c.expects.append(Expect(m["src"] or "", int(m["line"]), int(m["col"]), msg.strip()))
        elif key == "hint":
            c.hints.append(rest)
        elif key == "vars":
            c.vars.append(rest)
        elif key == "deployment":
            c.deployment = path.parent / rest
            assert c.deployment.is_file(), f"{path.name}: no companion file {rest}"
        elif key == "xfail":
            c.xfail = rest
        elif key == "xfail-text":
            c.xfail_text = rest
        elif key == "xfail-json":
            c.xfail_json = rest
    assert c.expects, f"{path.name}: no '# expect:' line"
    return c


def _case_files() -> list[Path]:
    return sorted(p for p in CORPUS.glob("*.yaml") if not p.name.endswith(".deployment.yaml"))


CASES = [parse_case(p) for p in _case_files()]


def _params(cases, kind: str, only=None):
    out = []
    for c in cases:
        if only is not None and c.stem not in only:
            continue
        reason = c.xfail or (c.xfail_text if kind == "text" else c.xfail_json)
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        out.append(pytest.param(c, id=c.path.stem, marks=marks))
    return out


# ---- running ctk ----------------------------------------------------------------------

def _argv(cmd: str, case: Case, bp: str, dep: str | None) -> list[str]:
    argv = [cmd, bp]
    for v in case.vars:
        argv.append(f"--vars={v}")  # '=' form: a value may be empty or start with '-'
    if dep:
        argv += ["-d", dep]
    return argv


def run_inprocess(argv: list[str], capsys) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = cli.main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def run_subprocess(argv: list[str]) -> tuple[int, str, str]:
    env = dict(os.environ, PYTHONPATH=str(REPO / "toolkit"))
    p = subprocess.run([sys.executable, "-m", "ctk", *argv], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout, p.stderr


# ---- checks ---------------------------------------------------------------------------

def _sources(case: Case, bp: str, dep: str | None) -> dict[str, tuple[str, str]]:
    """Display name used in messages -> (name as an expect line writes it, text)."""
    src = {bp: ("", case.path.read_bytes().decode("utf-8", errors="replace"))}
    if dep:
        src[dep] = ("deployment", case.deployment.read_text())
    for i, v in enumerate(case.vars):
        name = "--vars" if i == 0 else f"--vars#{i + 1}"
        src[name] = (name, v)
    return src


def _display(case: Case, e: Expect, bp: str, dep: str | None) -> str:
    if e.source == "":
        return bp
    if e.source == "deployment":
        assert dep, f"{case.path.name}: expect names the deployment file but there is none"
        return dep
    return e.source


def check_text(case: Case, rc: int, out: str, err: str, bp: str, dep: str | None, where: Path):
    report = f"rc={rc}\n--- stderr ---\n{err}\n--- stdout ---\n{out}"
    assert "Traceback" not in err and "Traceback" not in out, report
    assert rc == 2, report
    lines = err.splitlines()
    sources = _sources(case, bp, dep)
    for e in case.expects:
        head = f"{_display(case, e, bp, dep)}:{e.line}:{e.col}: error: "
        at = [i for i, ln in enumerate(lines) if ln.startswith(head) and e.message in ln]
        assert at, f"expected an error starting {head!r} containing {e.message!r}\n{report}"
        # The source line and a caret under the column, where the file has that line.
        _, text = sources[_display(case, e, bp, dep)]
        src_lines = text.splitlines()
        if 1 <= e.line <= len(src_lines):
            i = at[0]
            want_src = "  " + src_lines[e.line - 1].replace("\t", " ")
            want_caret = "  " + " " * (e.col - 1) + "^"
            got = lines[i + 1:i + 3]
            assert got == [want_src, want_caret], \
                f"source line and caret after {lines[i]!r}: want {[want_src, want_caret]}\n{report}"
    hint_lines = [ln for ln in lines if ln.lstrip().startswith("hint:")]
    for h in case.hints:
        assert any(h in ln for ln in hint_lines), f"expected a hint containing {h!r}\n{report}"
    n = len(case.expects)
    assert f"{n} error{'s' if n != 1 else ''}" in lines, \
        f"expected exactly {n} error(s), no others\n{report}"
    # Nothing written: no deployment folder, no staging folder left beside it.
    assert not (where / "out").exists(), f"{where / 'out'} was created\n{report}"
    assert list(where.iterdir()) == [], f"left behind: {list(where.iterdir())}\n{report}"


def check_json(case: Case, rc: int, out: str, err: str, bp: str, dep: str | None):
    report = f"rc={rc}\n--- stdout ---\n{out}\n--- stderr ---\n{err}"
    assert "Traceback" not in err and "Traceback" not in out, report
    assert rc == 2, report
    try:
        doc = json.loads(out)
    except ValueError:
        pytest.fail(f"validate --json did not print JSON\n{report}")
    assert doc.get("ok") is False, report
    errors = doc.get("errors")
    assert isinstance(errors, list) and errors, report
    for x in errors:
        assert isinstance(x.get("message"), str) and x["message"], report
        assert isinstance(x.get("line"), int) and isinstance(x.get("col"), int), \
            f"error without line/col: {x}\n{report}"
    for e in case.expects:
        want = (_display(case, e, bp, dep), e.line, e.col)
        assert any((x.get("file"), x["line"], x["col"]) == want and e.message in x["message"]
                   for x in errors), f"no JSON error at {want} containing {e.message!r}\n{report}"
    hints = [x.get("hint") or "" for x in errors]
    for h in case.hints:
        assert any(h in x for x in hints), f"no JSON hint containing {h!r}\n{report}"
    assert len(errors) == len(case.expects), f"expected exactly {len(case.expects)} error(s)\n{report}"


# ---- tests ----------------------------------------------------------------------------

def test_corpus_size():
    assert len(CASES) >= 45
    names = [c.path.name for c in CASES]
    assert len({n.split("-", 1)[0] for n in names}) == len(names), "case numbers must be unique"


@pytest.mark.parametrize("case", _params(CASES, "text"))
def test_create_fails_inprocess(case: Case, tmp_path, capsys):
    bp = str(case.path)
    dep = str(case.deployment) if case.deployment else None
    rc, out, err = run_inprocess(_argv("create", case, bp, dep) + ["-o", str(tmp_path / "out")], capsys)
    check_text(case, rc, out, err, bp, dep, tmp_path)


@pytest.mark.parametrize("case", _params(CASES, "json"))
def test_validate_json(case: Case, capsys):
    bp = str(case.path)
    dep = str(case.deployment) if case.deployment else None
    rc, out, err = run_inprocess(_argv("validate", case, bp, dep) + ["--json"], capsys)
    check_json(case, rc, out, err, bp, dep)


@pytest.mark.parametrize("case", _params(CASES, "text", SUBPROCESS))
def test_create_fails_subprocess(case: Case, tmp_path):
    # Paths relative to the repository root, as a user types them.
    bp = str(case.path.relative_to(REPO))
    dep = str(case.deployment.relative_to(REPO)) if case.deployment else None
    rc, out, err = run_subprocess(_argv("create", case, bp, dep) + ["-o", str(tmp_path / "out")])
    check_text(case, rc, out, err, bp, dep, tmp_path)


def test_subprocess_cases_exist():
    stems = {c.stem for c in CASES}
    assert SUBPROCESS <= stems, SUBPROCESS - stems
