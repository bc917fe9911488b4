"""Load YAML so that every key, scalar and list item remembers its file, line and column.

Values come back as plain Python (dict, list, str, int, float, bool, None); positions are kept
beside them, keyed by path (a tuple of keys and indices), as Cluster Toolkit does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import yaml
from yaml.constructor import SafeConstructor
from yaml.nodes import MappingNode, ScalarNode, SequenceNode

from .errors import BlueprintError, BlueprintErrors, Pos

Path = tuple

# A blueprint of a few hundred modules has a few tens of thousands of nodes; an alias bomb
# has billions. Stop long before memory is at risk.
MAX_NODES = 200_000
MAX_DEPTH = 100
MAX_BYTES = 16 * 1024 * 1024

_BOOL_WORDS = {"true", "false"}  # YAML 1.2 core schema, as gcluster reads it (not yes/no/on/off)


@dataclass
class Document:
    """A loaded YAML file: its plain value and where each part of it came from."""

    file: str
    text: str
    value: object
    positions: dict = field(default_factory=dict)  # path -> Pos of the value
    key_positions: dict = field(default_factory=dict)  # path -> Pos of the mapping key
    styles: dict = field(default_factory=dict)  # path -> scalar style ('', '"', "'", '|', '>')
    errors: list = field(default_factory=list)  # recoverable problems found while loading

    def pos(self, path: Path) -> Pos | None:
        """Position of the value at path, or of its closest ancestor that has one."""
        path = tuple(path)
        while True:
            if path in self.positions:
                return self.positions[path]
            if not path:
                return None
            path = path[:-1]

    def key_pos(self, path: Path) -> Pos | None:
        path = tuple(path)
        return self.key_positions.get(path) or self.pos(path)

    def pos_in(self, path: Path, offset: int) -> Pos | None:
        """Position of the character at `offset` inside the string scalar at path."""
        path = tuple(path)
        start = self.positions.get(path)
        if start is None:
            return self.pos(path)
        style = self.styles.get(path, "")
        value = _get(self.value, path)
        if not isinstance(value, str):
            return start
        before = value[:offset]
        if style in ("|", ">"):
            lines = self.text.splitlines()
            # Content starts on the line after the indicator; its indentation is the block's.
            first = start.line  # 1-based index of the indicator line -> next line index
            indent = 0
            for ln in lines[first:]:
                if ln.strip():
                    indent = len(ln) - len(ln.lstrip(" "))
                    break
            nl = before.count("\n")
            col = len(before) - (before.rfind("\n") + 1)
            return Pos(self.file, start.line + 1 + nl, indent + col + 1)
        if "\n" in before:
            return start
        quote = 1 if style in ('"', "'") else 0
        return Pos(self.file, start.line, start.col + quote + offset)


def _get(value, path):
    for p in path:
        value = value[p]
    return value


def _err(file: str, message: str, line: int, col: int, hint: str = "", text: str = ""):
    return BlueprintErrors([BlueprintError(message, Pos(file, line, col), hint)], {file: text})


def decode(file: str, data: bytes) -> str:
    """UTF-8 text of a file, or an error naming the first bad byte's line and column."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        good = data[: e.start].decode("utf-8", errors="replace")
        line = good.count("\n") + 1
        col = len(good) - (good.rfind("\n") + 1) + 1
        raise _err(file, f"invalid UTF-8 byte 0x{data[e.start]:02x}", line, col,
                   "save the file as UTF-8", data.decode("utf-8", errors="replace")) from None


def load_file(path: str, display: str | None = None, strict: bool = True) -> Document:
    """Read and load a YAML file; errors name the file as `display` (default: path)."""
    name = display or path
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_BYTES + 1)
    except FileNotFoundError:
        raise BlueprintErrors([BlueprintError(f"no such file: {path}")]) from None
    except IsADirectoryError:
        raise BlueprintErrors([BlueprintError(f"{path} is a directory, not a YAML file")]) from None
    except PermissionError:
        raise BlueprintErrors([BlueprintError(f"permission denied reading {path}")]) from None
    if len(data) > MAX_BYTES:
        raise _err(name, f"file is larger than {MAX_BYTES // (1024 * 1024)} MiB", 1, 1)
    return load_text(name, decode(name, data), strict)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _spaces(n: int) -> str:
    return f"{n} space{'s' if n != 1 else ''}"


def _above(lines: list[str], line: int) -> int | None:
    """The index of the last line before LINE (0-based) that holds YAML, not a comment."""
    for i in range(line - 1, -1, -1):
        s = lines[i].strip()
        if s and not s.startswith("#"):
            return i
    return None


def _plain_syntax(e: yaml.MarkedYAMLError, text: str) -> tuple[str, int, int, str]:
    """PyYAML's complaint in plain words, at the line and column (0-based) of the mistake
    rather than where the parser gave up (often the line after), and a hint."""
    problem, context = (e.problem or "invalid YAML").strip(), e.context or ""
    pm, cm = e.problem_mark or e.context_mark, e.context_mark
    if pm is None:  # PyYAML marks every error it raises; a bare one is reported at the top
        return problem, 0, 0, ""
    lines = text.splitlines()
    row = lines[pm.line] if pm.line < len(lines) else ""
    if "flow" in context and cm is not None:  # an unclosed [ or {: the fix goes where it opened
        kind, close = ("[", "]") if "sequence" in context else ("{", "}")
        return (f"this '{kind}' is never closed (a ',' or '{close}' was expected at line {pm.line + 1}, "
                f"column {pm.column + 1})", cm.line, cm.column, f"close it with '{close}'")
    if "quoted scalar" in context and cm is not None:
        q = lines[cm.line][cm.column] if cm.line < len(lines) and cm.column < len(lines[cm.line]) else "quote"
        return (f"this {q} is never closed", cm.line, cm.column, f"end the value with {q}")
    if problem == "mapping values are not allowed here":
        prev = _above(lines, pm.line)
        before = row[:pm.column]
        if ": " in before.strip() or before.rstrip().endswith(":"):
            return ("a second ':' on this line", pm.line, pm.column,
                    "quote a value that holds ': ', e.g. key: \"a: b\"")
        if prev is not None and ":" not in lines[prev].split("#")[0] and not lines[prev].lstrip().startswith("-") \
                and _indent(lines[prev]) <= _indent(row):
            at = _indent(lines[prev])
            return (f"'{lines[prev].strip()[:40]}' is neither 'key: value' nor a list item: a ':' is missing?",
                    prev, at, "write key: value, or '- item' in a list")
        if prev is not None and _indent(row) > _indent(lines[prev]):
            return (f"bad indentation: this line is indented {_spaces(_indent(row))}, more than line {prev + 1}, "
                    "whose key already has a value", pm.line, _indent(row), "indent keys of one mapping alike")
        return ("a ':' where no key can start", pm.line, pm.column, "quote a value that holds ': '")
    found = re.match(r"expected <block end>, but found '(.*)'", problem)
    if found:
        tok = found.group(1)
        if tok in ("]", "}"):
            return f"a '{tok}' that closes nothing", pm.line, pm.column, "remove it, or open its bracket"
        if tok == "-":
            return ("a list item ('- ') among the keys of a mapping", pm.line, pm.column,
                    "indent it under a key, or make every entry here a list item")
        if tok == "?":
            return ("a 'key: value' among the items ('- ') of a list", pm.line, pm.column,
                    "start it with '- ', or indent it under the item it belongs to")
        prev = _above(lines, pm.line)
        above = f" (line {prev + 1}: {_spaces(_indent(lines[prev]))})" if prev is not None else ""
        return (f"bad indentation: this line is indented {_spaces(_indent(row))}, which lines up with no key "
                f"above it{above}", pm.line, pm.column, "indent keys of one mapping alike, with spaces")
    m = re.match(r"found character '(.*)' that cannot start any token", problem)
    if m:
        return (f"'{m.group(1)}' cannot start a plain value", pm.line, pm.column,
                f"quote the value: \"{m.group(1)}...\"")
    msg = f"{context}: {problem}" if context and "found" in problem else problem
    return msg, pm.line, pm.column, ""


def load_text(file: str, text: str, strict: bool = True) -> Document:
    """Load YAML text. Recoverable problems (duplicate keys) are kept in `errors`; with
    `strict` they are raised at once, otherwise the caller reports them with its own."""
    if text.startswith("\ufeff"):
        text = text[1:]
    if not re.search(r"^[ \t]*[^\s#]", text.replace("---", "", 1), re.M):
        raise _err(file, "the file is empty (no YAML content)", 1, 1,
                   "a blueprint needs at least blueprint_name and deployment_groups", text)
    for i, ln in enumerate(text.splitlines(), 1):
        if ln.startswith("\t"):
            raise _err(file, "tab character in indentation", i, 1,
                       "YAML indentation must use spaces", text)
    try:
        nodes = list(yaml.compose_all(text, Loader=yaml.SafeLoader))
    except yaml.MarkedYAMLError as e:
        msg, line, col, hint = _plain_syntax(e, text)
        raise _err(file, f"YAML syntax: {msg}", line + 1, col + 1, hint, text) from None
    except yaml.YAMLError as e:
        raise _err(file, f"YAML syntax: {e}", 1, 1, "", text) from None
    nodes = [n for n in nodes if n is not None]
    if not nodes:
        raise _err(file, "the file is empty (no YAML content)", 1, 1, "", text)
    if len(nodes) > 1:
        m = nodes[1].start_mark
        raise _err(file, "more than one YAML document in the file", m.line + 1, m.column + 1,
                   "a blueprint is a single document", text)
    doc = Document(file, text, None)
    conv = _Converter(doc)
    doc.value = conv.convert(nodes[0], ())
    if doc.errors and strict:
        raise BlueprintErrors(doc.errors, {file: text})
    return doc


class _Converter:
    def __init__(self, doc: Document):
        self.doc = doc
        self.count = 0
        self.open: set[int] = set()  # collections being converted: an alias to one is recursive
        self.scalars = SafeConstructor()

    def pos(self, node) -> Pos:
        return Pos(self.doc.file, node.start_mark.line + 1, node.start_mark.column + 1)

    def fail(self, node, message: str, hint: str = ""):
        p = self.pos(node)
        raise _err(self.doc.file, message, p.line, p.col, hint, self.doc.text)

    def convert(self, node, path: Path, depth: int = 0):
        self.count += 1
        if self.count > MAX_NODES:
            self.fail(node, f"document expands to more than {MAX_NODES} values",
                      "aliases (*name) that repeat large anchors multiply the document; "
                      "write the values out or reduce the aliases")
        if depth > MAX_DEPTH:
            self.fail(node, f"nesting deeper than {MAX_DEPTH} levels",
                      "a recursive alias (*name inside its own anchor) cannot be expanded")
        if id(node) in self.open:
            self.fail(node, "recursive alias: a value that contains itself",
                      "an alias (*name) cannot refer to the anchor it is inside")
        self.doc.positions[path] = self.pos(node)
        if isinstance(node, ScalarNode):
            self.doc.styles[path] = node.style or ""
            return self.scalar(node)
        self.open.add(id(node))
        try:
            if isinstance(node, SequenceNode):
                return [self.convert(item, path + (i,), depth + 1) for i, item in enumerate(node.value)]
            if isinstance(node, MappingNode):
                return self.mapping(node, path, depth)
        finally:
            self.open.discard(id(node))
        self.fail(node, "unsupported YAML node")

    def scalar(self, node: ScalarNode):
        tag = node.tag
        if node.style:  # quoted or block: always a string
            return node.value
        if tag == "tag:yaml.org,2002:str" and re.fullmatch(r"0o[0-7]+", node.value):
            return int(node.value[2:], 8)  # YAML 1.2 octal
        if tag == "tag:yaml.org,2002:bool" and node.value.lower() not in _BOOL_WORDS:
            return node.value
        if tag == "tag:yaml.org,2002:timestamp":
            return node.value
        if tag == "tag:yaml.org,2002:int" and ":" in node.value:  # YAML 1.1 sexagesimal
            return node.value
        if tag in ("tag:yaml.org,2002:binary", "tag:yaml.org,2002:set", "tag:yaml.org,2002:omap"):
            return node.value
        if tag.startswith("tag:yaml.org,2002:"):
            try:
                return self.scalars.construct_object(node, deep=True)
            except yaml.YAMLError:
                return node.value
        return node.value  # unknown local tags (!foo) read as their text

    def mapping(self, node: MappingNode, path: Path, depth: int):
        out: dict = {}
        seen: dict[str, Pos] = {}
        pairs = list(node.value)
        merged: list = []
        for knode, vnode in pairs:
            if knode.tag == "tag:yaml.org,2002:merge":
                subs = vnode.value if isinstance(vnode, SequenceNode) else [vnode]
                for sub in subs:
                    if not isinstance(sub, MappingNode):
                        self.fail(knode, "a merge key (<<) must refer to a mapping",
                                  "use '<<: *anchor' where the anchor names a mapping")
                    merged.extend(sub.value)
        own = [(k, v) for k, v in pairs if k.tag != "tag:yaml.org,2002:merge"]
        own_keys = {k.value for k, _ in own if isinstance(k, ScalarNode)}
        for knode, vnode in own:
            if not isinstance(knode, ScalarNode):
                self.fail(knode, "mapping keys must be plain strings")
            key = knode.value
            if key in seen:
                first = seen[key]
                self.doc.errors.append(BlueprintError(
                    f"duplicate key '{key}' (first defined at line {first.line})", self.pos(knode),
                    "each key may appear once in a mapping; remove or rename one"))
                continue
            seen[key] = self.pos(knode)
            self.doc.key_positions[path + (key,)] = self.pos(knode)
            out[key] = self.convert(vnode, path + (key,), depth + 1)
        for knode, vnode in merged:  # explicit keys win over merged ones
            key = knode.value
            if key in own_keys or key in out:
                continue
            self.doc.key_positions[path + (key,)] = self.pos(knode)
            out[key] = self.convert(vnode, path + (key,), depth + 1)
        return out
