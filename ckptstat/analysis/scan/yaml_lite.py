"""A conservative reader of the YAML of a NeMo `model_config.yaml`, for `ckptstat scan` (analysis/scan/nemo.py): every
mapping entry and sequence item, where it is and, for a scalar, its text; no document built, no YAML library used.

OmegaConf.load reads the file (omegaconf/omegaconf.py `load`: text mode, UTF-8, so `\\r\\n` and `\\r` are `\\n`) with
PyYAML's SafeLoader and resolvers of its own (omegaconf/_utils.py `get_yaml_loader`). scan must never read a key or a
value otherwise than PyYAML does, so the reader takes only the shapes PyYAML's emitter writes (OmegaConf.save): block
mappings and sequences, plain, quoted and block (`|`, `>`) scalars, flow collections; it raises `Unreadable` at
anything else: tags (`!`), anchors and aliases (`&`, `*`: an alias repeats a node, which is how a YAML bomb grows),
merge keys (`<<`), complex keys (`? `), directives, several documents, tabs, a double-quoted key with an escape, a
plain scalar holding `: `, a key past PyYAML's 1024 characters, indentation PyYAML refuses, characters its reader
refuses or reads as line breaks (`\\x85`, `\\u2028`, `\\u2029`), nesting past MAX_DEPTH. The caller makes `Unreadable`
an unknown verdict, never a safe one. A scalar is read exactly (`Entry.exact`) when it fits on one line (plain;
single-quoted; double-quoted without a backslash); any other comes with its raw text and `exact=False`.
"""
from __future__ import annotations

import re
from collections.abc import Generator, Iterator
from dataclasses import dataclass

MAX_DEPTH = 256        # nested block and flow collections (PyYAML's composer recurses, and fails near 1000)
MAX_KEY = 1024         # PyYAML's longest simple key (scanner.py `save_possible_simple_key`)
# PyYAML's reader refuses what lies outside its printable set (yaml/reader.py NON_PRINTABLE) and reads \x85, \u2028 and
# \u2029 as line breaks, which Python's text mode does not: all are refused here, and tabs (a BOM only at the start).
_REFUSED = re.compile("[^\x0a\x20-\x7e\xa0-\ud7ff\ue000-\ufefe\uff00-\ufffd\U00010000-\U0010ffff]|[\u2028\u2029]")
_BLOCK_HEADER = re.compile(r"^[|>](?:([+-]?)([1-9]?)|([1-9])([+-]))[ ]*(?:#.*)?$")
_INDICATORS = set("&*!|>%@`'\"{}[],#?:-")
# PyYAML's implicit resolvers (yaml/resolver.py) and OmegaConf's float (get_yaml_loader): a plain scalar matching one is
# no string (a bool, a number, null; `<<` a merge, `=` a value); every other plain scalar is a string.
_NOT_STRING = [re.compile(p, re.X) for p in (
    r"^(?:yes|Yes|YES|no|No|NO|true|True|TRUE|false|False|FALSE|on|On|ON|off|Off|OFF)$",
    r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?|\.[0-9][0-9_]*(?:[eE][-+][0-9]+)?
        |[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$""",
    r"""^(?:[-+]?[0-9]+(?:_[0-9]+)*\.[0-9_]*(?:[eE][-+]?[0-9]+)?|[-+]?[0-9]+(?:_[0-9]+)*(?:[eE][-+]?[0-9]+)
        |\.[0-9]+(?:_[0-9]+)*(?:[eE][-+][0-9]+)?|[-+]?[0-9]+(?:_[0-9]+)*(?::[0-5]?[0-9])+\.[0-9_]*
        |[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$""",
    r"""^(?:[-+]?0b[0-1_]+|[-+]?0[0-7_]+|[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+
        |[-+]?[1-9][0-9_]*(?::[0-5]?[0-9])+)$""",
    r"^(?:~|null|Null|NULL|)$", r"^(?:<<|=)$")]


class Unreadable(Exception):
    """Text the reader cannot read with certainty, or that PyYAML refuses: `line` (1-based), `why`."""

    def __init__(self, line: int, why: str):
        super().__init__(f"line {line}: {why}")
        self.line, self.why = line, why


@dataclass(frozen=True)
class Entry:
    """A mapping entry (`key`) or a sequence item (`key` None) at `path` (the keys and indices leading to it).
    `style`: `plain`, `single`, `double`, `block` (a scalar: `text` its value when `exact`, else its raw source),
    `map`, `seq` (a collection: its entries follow) or `null`."""
    path: tuple[str | int, ...]
    key: str | None
    style: str
    text: str
    exact: bool
    line: int

    @property
    def where(self) -> str:
        """The path as dotted keys and `[i]` indices."""
        out = ""
        for p in self.path:
            out = f"{out}[{p}]" if isinstance(p, int) else f"{out}.{p}" if out else p
        return out

    @property
    def is_string(self) -> bool:
        """Whether OmegaConf holds the value as a string (a quoted or block scalar, or a plain one no resolver reads)."""
        if self.style in ("single", "double", "block"):
            return True
        return self.style == "plain" and not any(p.match(self.text) for p in _NOT_STRING)


_Path = tuple[str | int, ...]


def _at(where: _Path, key: str | None, index: int = 0) -> _Path:
    return (*where, index if key is None else key)


def _comment_at(s: str, i: int) -> bool:
    return s[i] == "#" and (i == 0 or s[i - 1] == " ")


def _uncommented(s: str) -> str:
    for i in range(len(s)):
        if _comment_at(s, i):
            return s[:i].rstrip(" ")
    return s


def _is_dash(s: str) -> bool:
    return s == "-" or s.startswith("- ")


def _key_colon(c: str) -> int | None:
    """Where a plain key's `:` (followed by a space or the line's end) is in a line's content, or None."""
    for i, ch in enumerate(c):
        if _comment_at(c, i):
            return None
        if ch == ":" and (i + 1 == len(c) or c[i + 1] == " "):
            return i
    return None


def _single(s: str) -> tuple[str, int] | None:
    """The single-quoted scalar at the start of s, closed on this line: (value, index after it), else None."""
    out, j = [], 1
    while j < len(s):
        if s[j] == "'":
            if s[j + 1:j + 2] == "'":
                out.append("'")
                j += 2
                continue
            return "".join(out), j + 1
        out.append(s[j])
        j += 1
    return None


def _double(s: str) -> tuple[str, int] | None:
    """The double-quoted scalar at the start of s, closed on this line: (its raw text, index after it), else None."""
    j = 1
    while j < len(s):
        if s[j] == "\\":
            j += 2
        elif s[j] == '"':
            return s[1:j], j + 1
        else:
            j += 1
    return None


def _nothing_after(s: str, j: int, line: int) -> None:
    rest = s[j:]
    if rest.strip(" ") and not (rest.lstrip(" ").startswith("#") and rest.startswith(" ")):
        raise Unreadable(line, f"text after a quoted scalar: {rest.strip()[:40]!r}")


def _split_key(c: str, line: int) -> tuple[str, str]:
    """(key, the rest after its `: `) of a block mapping entry's line content `c`."""
    if c[0] == "'":
        got = _single(c)
        if got is None:
            raise Unreadable(line, "a quoted key over several lines")
        key, j = got
    elif c[0] == '"':
        dq = _double(c)
        if dq is None or "\\" in dq[0]:
            raise Unreadable(line, "a double-quoted key with an escape, or over several lines")
        key, j = dq
    else:
        if c[0] in _INDICATORS and not (c[0] == "-" and len(c) > 1 and c[1] != " "):
            raise Unreadable(line, f"a key starting with {c[0]!r} (a complex key, tag, anchor, alias or flow key)")
        found = _key_colon(c)
        if found is None:
            raise Unreadable(line, f"a line that is no 'key: value' ({c[:40]!r})")
        key, j = c[:found].rstrip(" "), found
        if key == "<<":
            raise Unreadable(line, "a merge key (<<)")
    if len(key) > MAX_KEY:
        raise Unreadable(line, f"a key of {len(key):,} characters (PyYAML reads at most {MAX_KEY})")
    rest = c[j:].lstrip(" ")
    if not rest.startswith(":") or (len(rest) > 1 and rest[1] != " "):
        raise Unreadable(line, f"no ': ' after the key {key[:40]!r}")
    return key, rest[1:].lstrip(" ")


def _is_key_line(c: str, line: int) -> bool:
    try:
        return bool(_split_key(c, line))
    except Unreadable:
        return False


_Pending = tuple[int, _Path, "str | None", int, bool]   # a key or item whose value is on the next lines: (its collection's
                                                    # indent, where, key, line, whether a key)


@dataclass
class _Frame:
    indent: int
    kind: str            # "map" or "seq"
    where: _Path
    indentless: bool     # a sequence at its key's own indent (`key:` then `- a`)
    count: int = 0       # a sequence's items so far


def _push(frames: list[_Frame], frame: _Frame, line: int) -> None:
    frames.append(frame)
    if len(frames) > MAX_DEPTH:
        raise Unreadable(line, f"nesting deeper than {MAX_DEPTH}")


class _Reader:
    def __init__(self, text: str):
        if text.startswith("\ufeff"):
            text = text[1:]
        text = text.replace("\r\n", "\n").replace("\r", "\n")
        bad = _REFUSED.search(text)
        if bad:
            raise Unreadable(text.count("\n", 0, bad.start()) + 1,
                             f"the character {bad.group()!r} (PyYAML refuses it, reads it as a line break, or it is a tab)")
        self.lines = text.split("\n")
        self.i = 0

    def _line(self, k: int) -> tuple[int, str]:
        """(indent, content without trailing spaces) of line k."""
        s = self.lines[k]
        body = s.lstrip(" ")
        return len(s) - len(body), body.rstrip(" ")

    def _next_content(self, k: int) -> int:
        while k < len(self.lines):
            body = self._line(k)[1]
            if body and not body.startswith("#"):
                return k
            k += 1
        return k

    # ---------------------------------------------------------------------------------------------- scalars
    def _continued(self, parent: int) -> str:
        """The lines after a plain scalar that fold into it (deeper than `parent`, up to a comment), raw; a line PyYAML
        would read as anything but more of the scalar is unreadable."""
        raw = []
        while self.i < len(self.lines):
            n, body = self._line(self.i)
            if not body:
                self.i += 1
                continue
            if n <= parent or body.startswith("#"):
                break
            if _key_colon(body) is not None or ": " in body or _uncommented(body) != body:
                raise Unreadable(self.i + 1, "a plain scalar continued on a line PyYAML reads otherwise")
            raw.append(body)
            self.i += 1
        return " ".join(raw)

    def _quoted_lines(self, first: str, q: str, line: int) -> str:
        """A quoted scalar not closed on its first line: its lines up to the closing quote, raw (PyYAML checks no
        indentation there, only document markers)."""
        parts = [first]
        while True:
            self.i += 1
            if self.i >= len(self.lines):
                raise Unreadable(line, "a quoted scalar that is never closed")
            s = self.lines[self.i]
            if s.startswith(("---", "...")):
                raise Unreadable(self.i + 1, "a document marker inside a quoted scalar")
            j = 0
            while j < len(s):
                if q == '"' and s[j] == "\\":
                    j += 2
                elif s[j] == q and q == "'" and s[j + 1:j + 2] == "'":
                    j += 2
                elif s[j] == q:
                    parts.append(s[:j])
                    _nothing_after(s, j + 1, self.i + 1)
                    self.i += 1
                    return "\n".join(parts)
                else:
                    j += 1
            parts.append(s)

    def _block_scalar(self, header: re.Match[str], parent: int, line: int) -> str:
        """A block scalar's lines: blank ones, and those at or past its content's indent (`parent` + the header's
        indicator, else the first content line's); a line between `parent` and that indent, or a leading blank line
        longer than the first content line's indent (PyYAML takes the longest as the indent), is unreadable."""
        indicator = header.group(2) or header.group(3)
        indent = parent + int(indicator) if indicator else None
        raw, blank = [], 0
        self.i += 1
        while self.i < len(self.lines):
            s = self.lines[self.i]
            n = len(s) - len(s.lstrip(" "))
            if not s.strip(" "):
                blank = max(blank, len(s)) if indent is None else blank
            else:
                if n <= parent:
                    break
                if indent is None:
                    if blank > n:
                        raise Unreadable(self.i + 1, "a block scalar whose leading blank lines are deeper than its text")
                    indent = n
                if n < indent:
                    raise Unreadable(self.i + 1, "a line less indented than its block scalar's content")
            raw.append(s)
            self.i += 1
        return "\n".join(raw)

    def _value(self, s: str, parent: int, where: _Path, key: str | None, line: int) -> list[Entry] | None:
        """The entries of a value starting at `s` (the rest of line `line`), the entry `key` at `where` in a collection
        at indent `parent`; None when the value is on the following lines (a nested block) or null. self.i is left on
        the line after the value."""
        if not s or s.startswith("#"):
            return None
        c = s[0]
        if c in "&*!":
            raise Unreadable(line, f"{'an anchor' if c == '&' else 'an alias' if c == '*' else 'a tag'} ({s[:40]!r})")
        if c in "|>":
            header = _BLOCK_HEADER.match(s)
            if header is None:
                raise Unreadable(line, f"a block scalar header {s[:20]!r}")
            return [Entry(where, key, "block", self._block_scalar(header, parent, line), False, line)]
        if c in "\"'":
            closed = _single(s) if c == "'" else _double(s)
            style = "single" if c == "'" else "double"
            if closed is not None:
                _nothing_after(s, closed[1], line)
                self.i += 1
                return [Entry(where, key, style, closed[0], c == "'" or "\\" not in closed[0], line)]
            return [Entry(where, key, style, self._quoted_lines(s, c, line), False, line)]
        if c in "[{":
            return self._flow(s, where, key, line)
        if c in _INDICATORS and not (c in "-?:" and len(s) > 1 and s[1] != " "):
            raise Unreadable(line, f"a value starting with {c!r}")
        text = _uncommented(s)
        if _key_colon(text) is not None or ": " in text:
            raise Unreadable(line, "a plain scalar holding ': ' (PyYAML: mapping values are not allowed here)")
        self.i += 1
        more = self._continued(parent)
        return [Entry(where, key, "plain", f"{text} {more}" if more else text, not more, line)]

    def _flow(self, s: str, where: _Path, key: str | None, line: int) -> list[Entry]:
        """A flow collection from `s` over as many lines as it takes (PyYAML checks no indentation inside one): its
        last line found by one linear scan (`_flow_end`), then its tokens read once, which must close exactly there."""
        end = self._flow_end(s, line)
        text = "\n".join([s, *self.lines[self.i + 1:end + 1]])
        toks, j = _flow_tokens(text, line)
        rest = text[j:]
        if "\n" in rest or rest.strip(" ") and not (rest.startswith(" ") and rest.lstrip(" ").startswith("#")):
            raise Unreadable(line, f"text after a flow collection: {rest.strip()[:40]!r}")
        self.i = end + 1
        return _flow_entries(toks, where, key, line)

    def _flow_end(self, s: str, line: int) -> int:
        """The index of the line where the flow collection starting `s` (on line self.i) closes, by its brackets outside
        quotes and comments (a quote opens a scalar only where a token starts)."""
        depth, quote, k, text = 0, "", self.i, s
        while True:
            j = 0
            while j < len(text):
                ch = text[j]
                if quote:
                    if quote == '"' and ch == "\\":
                        j += 1
                    elif ch == quote and quote == "'" and text[j + 1:j + 2] == "'":
                        j += 1
                    elif ch == quote:
                        quote = ""
                elif ch == "#" and (j == 0 or text[j - 1] == " "):
                    break
                elif ch in "'\"" and (j == 0 or text[j - 1] in " [{,:"):
                    quote = ch
                elif ch in "[{":
                    depth += 1
                    if depth > MAX_DEPTH:
                        raise Unreadable(line, f"flow collections nested deeper than {MAX_DEPTH}")
                elif ch in "]}":
                    depth -= 1
                    if depth == 0:
                        return k
                j += 1
            k += 1
            if k >= len(self.lines):
                raise Unreadable(line, "a flow collection that is never closed")
            text = self.lines[k]
            if text.startswith(("---", "...")):
                raise Unreadable(k + 1, "a document marker inside a flow collection")

    # ----------------------------------------------------------------------------------------------- collections
    def entries(self) -> Iterator[Entry]:
        frames: list[_Frame] = []
        pending: _Pending | None = None
        started = rooted = False
        while True:
            self.i = self._next_content(self.i)
            if self.i >= len(self.lines):
                break
            line = self.i + 1
            n, body = self._line(self.i)
            if n == 0 and body.startswith("%"):
                raise Unreadable(line, "a directive")
            if n == 0 and (body == "---" or body.startswith("--- ")):
                if started or body != "---":
                    raise Unreadable(line, "several documents, or content on a document marker")
                self.i += 1
                continue
            if n == 0 and (body == "..." or body.startswith("... ")):
                raise Unreadable(line, "a document end marker")
            started = True
            dash = _is_dash(body)
            if pending is not None:
                parent, where, key, pline, is_key = pending
                pending = None
                if n > parent or (is_key and dash and n == parent):
                    kind = "seq" if dash else "map"
                    yield Entry(where, key, kind, "", True, pline)
                    _push(frames, _Frame(n, kind, where, n == parent), line)
                else:
                    yield Entry(where, key, "null", "", True, pline)
            while frames and (frames[-1].indent > n or frames[-1].indentless and frames[-1].indent == n and not dash):
                frames.pop()
            if not frames:
                if rooted:
                    raise Unreadable(line, "content after the document's root collection")
                rooted = True
                if body[0] in "[{":   # a document that is one flow collection (the root itself is no entry)
                    yield from self._flow(body, (), None, line)[1:]
                    continue
                frames.append(_Frame(n, "seq" if dash else "map", (), False))
            if frames[-1].indent != n:
                raise Unreadable(line, f"indentation {n} where the collection is at {frames[-1].indent}")
            pending = yield from self._content(frames, body, n, line)
        if pending is not None:
            yield Entry(pending[1], pending[2], "null", "", True, pending[3])

    def _content(self, frames: list[_Frame], body: str, n: int, line: int) -> Generator[Entry, None, _Pending | None]:
        """One line's content `body` at indent `n` in the innermost frame: a sequence item or a mapping entry; compact
        forms (`- key: v`, `- - v`) open frames of their own."""
        while True:
            top = frames[-1]
            if top.kind == "seq":
                if not _is_dash(body):
                    raise Unreadable(line, "a mapping key where a sequence item is expected")
                where = _at(top.where, None, top.count)
                top.count += 1
                rest = body[1:].lstrip(" ")
                col = n + len(body) - len(rest)
                if not rest or rest.startswith("#"):
                    self.i += 1
                    return (n, where, None, line, False)
                if _is_dash(rest) or _is_key_line(rest, line):
                    kind = "seq" if _is_dash(rest) else "map"
                    yield Entry(where, None, kind, "", True, line)
                    _push(frames, _Frame(col, kind, where, False), line)
                    body, n = rest, col
                    continue
                got = self._value(rest, n, where, None, line)
                assert got is not None   # (rest holds a value)
                yield from got
                return None
            if _is_dash(body):
                raise Unreadable(line, "a sequence item where a mapping key is expected")
            key, rest = _split_key(body, line)
            where = _at(top.where, key)
            got = self._value(rest, n, where, key, line)
            if got is None:
                self.i += 1
                return (n, where, key, line, True)
            yield from got
            return None


# -------------------------------------------------------------------------------------------------- flow collections
_Tok = tuple[str, str, str, bool]   # (kind: one of "{}[],:" or "scalar", style, text, exact)


def _flow_tokens(text: str, line: int) -> tuple[list[_Tok], int]:
    """PyYAML's flow tokens of the collection `text` starts with, and the index after its closing bracket: a plain
    scalar ends at `,?[]{}`, at `:` before a space, a line end or a flow indicator, and at ` #`; a `:` that starts a
    token is a value indicator (in flow context PyYAML takes any); `?`, anchors, aliases and tags are unreadable."""
    toks: list[_Tok] = []
    j, n, depth = 0, len(text), 0
    while j < n:
        ch = text[j]
        if ch in " \n":
            j += 1
        elif ch == "#":   # at a token's start PyYAML takes `#` for a comment, a space before it or not (`{#x`)
            nl = text.find("\n", j)
            j = n if nl < 0 else nl
        elif ch in "{}[],:":
            toks.append((ch, "", "", True))
            depth += 1 if ch in "[{" else -1 if ch in "]}" else 0
            j += 1
            if depth == 0:
                return toks, j
        elif ch == "'":
            k, out = j + 1, []
            while True:
                if k >= n:
                    raise Unreadable(line, "a quoted scalar in a flow collection that is never closed")
                if text[k] == "'":
                    if text[k + 1:k + 2] == "'":
                        out.append("'")
                        k += 2
                        continue
                    break
                out.append(text[k])
                k += 1
            raw = "".join(out)
            toks.append(("scalar", "single", raw, "\n" not in raw))
            j = k + 1
        elif ch == '"':
            k = j + 1
            while k < n and text[k] != '"':
                k += 2 if text[k] == "\\" else 1
            if k >= n:
                raise Unreadable(line, "a quoted scalar in a flow collection that is never closed")
            raw = text[j + 1:k]
            toks.append(("scalar", "double", raw, "\\" not in raw and "\n" not in raw))
            j = k + 1
        elif ch in "&*!|>%@`?" or ch == "-" and (j + 1 == n or text[j + 1] in " \n,[]{}"):
            raise Unreadable(line, f"{ch!r} in a flow collection (an anchor, alias, tag, explicit key or odd indicator)")
        else:
            k, last = j, j
            while k < n:
                c = text[k]
                if c in ",?[]{}" or c == ":" and (k + 1 == n or text[k + 1] in " \n,[]{}") \
                        or c == "#" and text[k - 1] in " \n":
                    break
                if c not in " \n":
                    last = k
                k += 1
            raw = text[j:last + 1]
            toks.append(("scalar", "plain", " ".join(raw.split()) if "\n" in raw else raw, "\n" not in raw))
            j = last + 1
    raise Unreadable(line, "a flow collection that is never closed")


def _flow_entries(toks: list[_Tok], where: _Path, key: str | None, line: int) -> list[Entry]:
    """The entries of one flow collection, from its tokens (a pair `a: b` inside a sequence is unreadable)."""
    out: list[Entry] = []
    stack: list[_Frame] = []
    pos = 0

    def opened(tok: str, at: _Path, k: str | None) -> None:
        kind = "map" if tok == "{" else "seq"
        out.append(Entry(at, k, kind, "", True, line))
        stack.append(_Frame(0, kind, at, False))

    def item_end() -> None:
        nonlocal pos
        if stack and pos < len(toks) and toks[pos][0] == ",":
            pos += 1
        elif stack and not (pos < len(toks) and toks[pos][0] in "]}"):
            raise Unreadable(line, "a flow item not followed by ',' or a closing bracket")

    if not toks or toks[0][0] not in "[{":
        raise Unreadable(line, "a flow collection expected")
    opened(toks[0][0], where, key)
    pos = 1
    while stack:
        if pos >= len(toks):
            raise Unreadable(line, "a flow collection that is never closed")
        top = stack[-1]
        kind, style, text, exact = toks[pos]
        if kind in "]}":
            if (kind == "}") != (top.kind == "map"):
                raise Unreadable(line, "mismatched flow brackets")
            stack.pop()
            pos += 1
            item_end()
            continue
        if top.kind == "seq":
            at = _at(top.where, None, top.count)
            top.count += 1
            if kind in "[{":
                opened(kind, at, None)
                pos += 1
                continue
            if kind != "scalar" or pos + 1 < len(toks) and toks[pos + 1][0] == ":":
                raise Unreadable(line, "a flow sequence item scan does not read (a pair, or an empty item)")
            out.append(Entry(at, None, style, text, exact, line))
            pos += 1
            item_end()
            continue
        if kind != "scalar" or not exact or style == "plain" and text == "<<" or len(text) > MAX_KEY:
            raise Unreadable(line, "a flow mapping key scan does not read exactly")
        at = _at(top.where, text)
        pos += 1
        if pos < len(toks) and toks[pos][0] == ":":
            pos += 1
            nxt = toks[pos][0] if pos < len(toks) else ""
            if nxt in ("[", "{"):
                opened(nxt, at, text)
                pos += 1
                continue
            if nxt == "scalar":
                out.append(Entry(at, text, toks[pos][1], toks[pos][2], toks[pos][3], line))
                pos += 1
                item_end()
                continue
        out.append(Entry(at, text, "null", "", True, line))
        item_end()
    if pos != len(toks):
        raise Unreadable(line, "text after a flow collection")
    return out


def entries(text: str) -> Iterator[Entry]:
    """Every entry of the YAML document `text` (see the module doc), in document order; raises Unreadable."""
    yield from _Reader(text).entries()
