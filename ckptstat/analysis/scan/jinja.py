"""What a Jinja chat template can reach, read without rendering it (docs/security.md, "Chat templates").

A chat template is a Jinja program that a chat frontend renders with the conversation. Rendered by a plain
`jinja2.Environment` (llama-cpp-python before 0.2.72 rendered a GGUF's template so: CVE-2024-34359), a template
reaches Python's objects through attribute and item look-ups: `''.__class__.__mro__[1].__subclasses__()` and
`cycler.__init__.__globals__.os.popen(...)` run commands. jinja2's sandbox refuses private attributes, and from 3.1.6
a string's `format` reached through `|attr` (CVE-2024-56326 and CVE-2025-27516 escaped the sandbox through it).

Every escape needs a look-up by a name Python keeps internal (a `_` prefix: `__class__`, `__globals__`,
`_TemplateReference__context`), a frame or code attribute, or `str.format`'s field syntax with such a name
(`'{0.__class__}'.format(x)`). A template names one either literally, which `judge` finds, or by a name it computes
at render time (`x['_'*2 ~ 'class' ~ '_'*2]`, `x|attr(k)` with `k` built so), which it cannot read: unknown. So:

- finding (unsafe): an attribute or name with a `_` prefix, an attribute of UNSAFE_ATTRIBUTES, a string literal
  holding a dunder (`'{0.__class__}'`), a look-up (`['...']`, `|attr`, `attribute=`) of such a literal or of `format`;
- unknown: a look-up by a name the template computes (a subscript or an accessor filter's name that is not plain:
  see `_local`), `include` / `import` / `extends` (other templates, whatever the renderer's loader finds), a
  template the lexer cannot read;
- otherwise safe: every look-up is by a literal name, by a number, or by a name whose every binding in the template
  (set, for, with, macro arguments at each call, namespace fields) is plain, or that the renderer supplies (the
  conversation: data, not the template's).

The lexer follows jinja2's default syntax (jinja2/lexer.py: the `{{ }}`, `{% %}`, `{# #}` delimiters with their
`-` / `+` marks, `{% raw %}`, brackets balanced before a tag ends, its token expressions and string unescaping);
tests/test_scan_chat_templates.py compares its tokens with jinja2's own. Every pass is linear in the tokens.
"""
from __future__ import annotations

import re
import unicodedata
from collections import deque
from dataclasses import dataclass, field

# The names a look-up must not take (jinja2/sandbox.py `is_internal_attribute`, `UNSAFE_*`) beside a `_` prefix.
UNSAFE_ATTRIBUTES = frozenset({
    "mro", "gi_frame", "gi_code", "cr_frame", "cr_code", "ag_frame", "ag_code", "tb_frame", "tb_next", "f_back",
    "f_builtins", "f_globals", "f_locals", "f_code", "func_globals", "func_code", "im_func", "im_self",
})
FORMATTERS = frozenset({"format", "format_map"})   # str methods that read the attributes their format string names
# Filters that look up an attribute by an argument (jinja2/filters.py `make_attrgetter` callers, and `attr`).
ACCESSOR_FILTERS = frozenset({"attr", "map", "selectattr", "rejectattr", "sort", "groupby", "sum", "unique", "min",
                              "max"})
# Which positional argument is the attribute's name (jinja2/filters.py signatures: `sort(reverse, case_sensitive,
# attribute)`, `unique(case_sensitive, attribute)`...); map's first is a filter's name, or 'attr' then the name.
ATTRIBUTE_ARGUMENT = {"attr": 0, "selectattr": 0, "rejectattr": 0, "groupby": 0, "sum": 0, "map": 0, "sort": 2,
                      "unique": 1, "min": 1, "max": 1}
# Filters whose result is a number, also of a string; the operators and filters that turn objects into text (`~`,
# `%`, jinja2's soft_str, repr, JSON; `map`, which may apply one). Where an expression makes text, only data may go
# in: the text of any other object can hold a `_` the template chose (`(()|select|string)[24]` is the `_` of
# '<generator object select_or_reject ...>', `x.items()` is "dict_items(...)", `x.format_map` a method's name).
NUMBER_FILTERS = frozenset({"length", "count", "int", "float", "abs", "round", "wordcount"})
TEXT_MAKERS = frozenset({"~", "%", "string", "tojson", "pprint", "join", "format", "replace", "trim", "lower", "upper",
                         "title", "capitalize", "reverse", "e", "escape", "forceescape", "safe", "center", "indent",
                         "truncate", "wordwrap", "striptags", "urlize", "urlencode", "xmlattr", "list", "filesizeformat",
                         "map"})
TEXT_OF_DATA = (TEXT_MAKERS - {"reverse", "map"}) | NUMBER_FILTERS | {"first", "last"}   # data in, data's text out
LOADERS = frozenset({"include", "import", "from", "extends"})
KEYWORDS = frozenset({"in", "not", "and", "or", "is", "if", "else", "elif", "for", "recursive", "as", "with",
                      "without", "context", "ignore", "missing", "true", "false", "none", "True", "False", "None"})
# Names whose value is text the template writes (a block's or macro's output, a call block's body, a dict's keys), an
# object whose text holds `_` (jinja2's globals: `lipsum ~ ''` is '<function generate_lorem_ipsum ...>'), or the
# special tokens the renderer passes from the model's own files (llama-cpp-python: the GGUF's bos and eos tokens;
# transformers: the tokenizer's special_tokens_map): strings the file's author chose, as the template's literals are.
TEMPLATE_TEXT = frozenset({"self", "caller", "super", "varargs", "kwargs", "dict", "lipsum", "cycler", "joiner",
                           "namespace", "bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token",
                           "mask_token", "additional_special_tokens", "raise_exception", "strftime_now"})
DUNDER = re.compile(r"__[^\W\d]\w*__")
SHOWN = 20   # findings and unknowns listed per template; the rest counted
WORK_PER_TOKEN, WORK_FLOOR = 4, 100_000   # _Budget

_NAME = re.compile(r"[\w\u00b7\u0300-\u036f\u203f\u2040]+")
_STRING = re.compile(r"('([^'\\]*(?:\\.[^'\\]*)*)'|\"([^\"\\]*(?:\\.[^\"\\]*)*)\")", re.S)
_INTEGER = re.compile(r"(0b(_?[0-1])+|0o(_?[0-7])+|0x(_?[\da-f])+|[1-9](_?\d)*|0(_?0)*)", re.I)
_FLOAT = re.compile(r"(?<!\.)(\d+_)*\d+((\.(\d+_)*\d+)?e[+\-]?(\d+_)*\d+|\.(\d+_)*\d+)", re.I)
_OPERATOR = re.compile("|".join(re.escape(o) for o in (
    "//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[", "]", "(", ")", "{", "}", ">", "<", "=",
    ".", ":", "|", ",", ";")))
# jinja2's tag rules in its order, as one pattern (the first alternative that matches wins, as in jinja2's loop).
_TOKEN = re.compile("|".join(f"(?P<{kind}>{rx.pattern})" for kind, rx in (
    ("space", re.compile(r"\s+")), ("float", _FLOAT), ("integer", _INTEGER), ("name", _NAME), ("string", _STRING),
    ("operator", _OPERATOR))), re.I | re.S)
_OPEN = re.compile(r"(?P<raw>\{%[-+]?\s*raw\s*(?:-%\}\s*|%\}))|(?P<tag>\{%|\{\{|\{#)[-+]?", re.S)
_ENDRAW = re.compile(r"\{%[-+]?\s*endraw\s*(?:\+%\}|-%\}\s*|%\})", re.S)
_COMMENT_END = re.compile(r"\+#\}|-#\}\s*|#\}", re.S)
_END = {"{%": re.compile(r"\+%\}|-%\}\s*|%\}"), "{{": re.compile(r"-\}\}\s*|\}\}")}
_CLOSE = {"(": ")", "[": "]", "{": "}"}
_COMPARE = ("==", "!=", "<", ">", "<=", ">=")


class TemplateError(ValueError):
    """A template jinja2's lexer refuses too (a tag, string, comment or raw block never closed; unbalanced brackets)."""


@dataclass(frozen=True)
class Token:
    kind: str     # "name", "string", "integer", "float", "operator"
    value: str    # a string's value unescaped, as jinja2 gives it; other tokens as written
    line: int


@dataclass
class Tag:
    kind: str                                               # "{%" (a statement) or "{{" (an expression)
    tokens: list[Token]
    close: dict[int, int] = field(default_factory=dict)     # an opening bracket's index -> its closing one's
    opens: dict[int, int] = field(default_factory=dict)     # ... and back
    budget: _Budget | None = None                           # shared by the template's tags (lex)


class _Budget:
    """The token steps the look-up analysis may take: WORK_PER_TOKEN per token of the template (and a floor), so that
    keys nested in keys (`x[y[y[...]]]`) or calls in calls cannot make it quadratic; past it the template is unknown."""

    def __init__(self, tokens: int):
        self.left = WORK_PER_TOKEN * tokens + WORK_FLOOR

    def spend(self, n: int) -> None:
        self.left -= n
        if self.left < 0:
            raise TemplateError("its look-ups nest deeper than scan follows")


def lex(source: str) -> list[Tag]:
    """The template's tags, each with its tokens, as jinja2's default lexer reads them (data and comments dropped)."""
    tags: list[Tag] = []
    pos, line = 0, 1
    while True:
        m = _OPEN.search(source, pos)
        if m is None:
            budget = _Budget(sum(len(tag.tokens) for tag in tags))
            for tag in tags:
                tag.budget = budget
            return tags
        line += source.count("\n", pos, m.start())
        if m.group("raw") or m.group("tag") == "{#":
            end = (_ENDRAW if m.group("raw") else _COMMENT_END).search(source, m.end())
            if end is None:
                raise TemplateError(f"line {line}: a {'raw block' if m.group('raw') else 'comment'} never closed")
            line += source.count("\n", m.start(), end.end())
            pos = end.end()
            continue
        tag = Tag(m.group("tag"), [])
        line += source.count("\n", m.start(), m.end())
        pos, line = _tag(source, m.end(), tag, line)
        tags.append(tag)


def _tag(source: str, pos: int, tag: Tag, line: int) -> tuple[int, int]:
    """Read one tag's tokens from `pos` to its end (which counts only once its brackets are balanced); where it ended,
    and the line there."""
    end = _END[tag.kind]
    stack: list[int] = []
    out = tag.tokens
    while True:
        if pos >= len(source):
            raise TemplateError(f"line {line}: a tag never closed")
        if not stack and (m := end.match(source, pos)):
            return m.end(), line + m.group().count("\n")
        hit = _TOKEN.match(source, pos)
        if hit is None:
            raise TemplateError(f"line {line}: unexpected character {source[pos]!r}")
        kind, text = hit.lastgroup or "", hit.group()
        if kind == "string":
            try:
                value = re.sub(r"\r\n|\r", "\n", text[1:-1]).encode("ascii", "backslashreplace").decode("unicode-escape")
            except UnicodeDecodeError as e:
                raise TemplateError(f"line {line}: a string jinja2 cannot unescape ({e.reason})") from None
            out.append(Token(kind, value, line))
        elif kind != "space":
            if text in _CLOSE:
                stack.append(len(out))
            elif text in (")", "]", "}"):
                if not stack or _CLOSE[out[stack[-1]].value] != text:
                    raise TemplateError(f"line {line}: unbalanced {text!r}")
                tag.close[stack[-1]], tag.opens[len(out)] = len(out), stack[-1]
                stack.pop()
            out.append(Token(kind, text, line))
        line += text.count("\n")
        pos = hit.end()


@dataclass(frozen=True)
class Finding:
    line: int
    what: str     # the construct, as written
    why: str


@dataclass
class Verdict:
    findings: list[Finding] = field(default_factory=list)   # what reaches Python's internals (unsafe)
    unknown: list[str] = field(default_factory=list)        # what scan cannot read (a computed name, another template)


def _private(name: str) -> bool:
    name = unicodedata.normalize("NFKC", name)
    return name.startswith("_") or name in UNSAFE_ATTRIBUTES


def _op(t: Token | None, *ops: str) -> bool:
    return t is not None and t.kind == "operator" and t.value in ops


def _at(tokens: list[Token], i: int) -> Token | None:
    return tokens[i] if 0 <= i < len(tokens) else None


def _postfix(prev: Token | None) -> bool:
    """Whether a bracket after `prev` applies to a value (a look-up or a call), not a new list or group."""
    if prev is None:
        return False
    if prev.kind == "name":
        return prev.value not in KEYWORDS
    return prev.kind == "string" or _op(prev, ")", "]", "}")


def _split(tag: Tag, lo: int, hi: int, sep: str) -> list[tuple[int, int]]:
    """The ranges of tag.tokens[lo:hi] between `sep` operators outside brackets."""
    _spend(tag, hi - lo)
    parts, start, i = [], lo, lo
    while i < hi:
        if i in tag.close:
            i = tag.close[i] + 1
            continue
        if _op(tag.tokens[i], sep):
            parts.append((start, i))
            start = i + 1
        i += 1
    parts.append((start, hi))
    return [(a, b) for a, b in parts if a < b]


def _spend(tag: Tag, n: int) -> None:
    if tag.budget is not None:
        tag.budget.spend(n)


def _keyword(tag: Tag, a: int, b: int) -> str | None:
    """The name of a `name=value` argument in tokens [a, b), or None."""
    t = tag.tokens
    return t[a].value if b - a > 1 and t[a].kind == "name" and _op(t[a + 1], "=") else None


@dataclass(frozen=True)
class _Expr:
    """An expression: tokens [lo, hi) of a tag, or None for a value scan does not follow (a block set's text)."""
    tag: Tag | None
    lo: int = 0
    hi: int = 0


class _Bindings:
    """What the template binds each name to (set, for, with, macro arguments at every call, namespace fields), and the
    names not plain: bound (directly or through another name) to a value `_local` rejects."""

    def __init__(self, tags: list[Tag]):
        self.values: dict[str, list[_Expr]] = {}
        self.macros: dict[str, list[tuple[str, _Expr | None]]] = {}
        for tag in tags:
            self._statement(tag)
        for tag in tags:   # each macro call's arguments bind its parameters
            t = tag.tokens
            for i in range(len(t) - 1):
                if t[i].kind == "name" and t[i].value in self.macros and i + 1 in tag.close and not _op(_at(t, i - 1), "."):
                    self._call(self.macros[t[i].value], tag, i + 2, tag.close[i + 1])
        self.not_plain: set[str] = set()
        users: dict[str, set[str]] = {}
        work: deque[str] = deque()
        for name, exprs in self.values.items():
            for e in exprs:
                ok, refs = _local(e, self) if e.tag is not None else (False, set())
                for r in refs:
                    users.setdefault(r, set()).add(name)
                if not ok and name not in self.not_plain:
                    self.not_plain.add(name)
                    work.append(name)
        while work:   # a name bound to a name not plain is not plain either
            for user in users.get(work.popleft(), ()):
                if user not in self.not_plain:
                    self.not_plain.add(user)
                    work.append(user)

    def _bind(self, name: str, e: _Expr) -> None:
        self.values.setdefault(name, []).append(e)

    def _statement(self, tag: Tag) -> None:
        t = tag.tokens
        head = t[0].value if tag.kind == "{%" and t and t[0].kind == "name" else ""
        if head in ("set", "with"):
            for a, b in _split(tag, 1, len(t), ","):
                eq = next((i for i in range(a, b) if _op(t[i], "=")), None)
                name = ".".join(x.value for x in t[a:b if eq is None else eq] if x.kind == "name")
                if eq is None:
                    self._bind(name, _Expr(None))   # `{% set x %}...{% endset %}`: text the template writes
                elif _at(t, eq + 1) is not None and t[eq + 1].value == "namespace" and eq + 2 in tag.close:
                    self._bind(name, _Expr(tag, eq, eq))   # a namespace object; its fields bound by its arguments
                    for c, d in _split(tag, eq + 3, tag.close[eq + 2], ","):
                        if (kw := _keyword(tag, c, d)) is not None:
                            self._bind(f"{name}.{kw}", _Expr(tag, c + 2, d))
                else:
                    self._bind(name, _Expr(tag, eq + 1, b))
        elif head == "for":
            at = next((i for i, x in enumerate(t) if x.kind == "name" and x.value == "in"), len(t))
            stop = next((i for i in range(at + 1, len(t)) if t[i].kind == "name" and t[i].value in ("if", "recursive")),
                        len(t))
            for target in t[1:at]:
                if target.kind == "name":
                    self._bind(target.value, _Expr(tag, at + 1, stop))
        elif head == "macro" and len(t) > 2 and t[1].kind == "name" and 2 in tag.close:
            params: list[tuple[str, _Expr | None]] = []
            for a, b in _split(tag, 3, tag.close[2], ","):
                if t[a].kind == "name":
                    default = _Expr(tag, a + 2, b) if _keyword(tag, a, b) else None
                    params.append((t[a].value, default))
                    if default is not None:
                        self._bind(t[a].value, default)
            self.macros[t[1].value] = params
        elif head == "call" and 1 in tag.close:   # `{% call(x) m() %}`: what the macro passes its caller
            for param in t[2:tag.close[1]]:
                if param.kind == "name":
                    self._bind(param.value, _Expr(None))

    def _call(self, params: list[tuple[str, _Expr | None]], tag: Tag, lo: int, hi: int) -> None:
        for n, (a, b) in enumerate(_split(tag, lo, hi, ",")):
            if _op(tag.tokens[a], "*", "**"):
                for p, _ in params:
                    self._bind(p, _Expr(None))
            elif (kw := _keyword(tag, a, b)) is not None:
                self._bind(kw, _Expr(tag, a + 2, b))
            elif n < len(params):
                self._bind(params[n][0], _Expr(tag, a, b))

    def plain(self, e: _Expr) -> bool:
        if e.tag is None:
            return False
        ok, refs = _local(e, self)
        return ok and not refs & self.not_plain


def _operand(tag: Tag, end: int, lo: int) -> int:
    """Where the postfix expression ending at token `end` starts (a name, its attributes, items and calls, a group),
    no further back than `lo`."""
    t, start = tag.tokens, end
    while start >= lo:
        if _op(t[start], ")", "]") and start in tag.opens:
            start = tag.opens[start]
        if start - 1 >= lo and (t[start - 1].kind == "name" and t[start - 1].value not in KEYWORDS
                                and not _op(t[start], "(", "[") or _op(t[start], "(", "[") and _postfix(t[start - 1])
                                or _op(t[start - 1], ".")):
            start -= 1
            continue
        break
    _spend(tag, end - start + 1)
    return max(start, lo)


def _measured(tag: Tag, lo: int, hi: int) -> set[int]:
    """The indexes of tokens in [lo, hi) that only a NUMBER_FILTERS filter reads (`(content|trim)|length`,
    `x.y[0]|count`): whatever they hold, the filter makes a number of it."""
    out: set[int] = set()
    for k in range(lo + 2, hi):
        if _op(tag.tokens[k - 1], "|") and tag.tokens[k].value in NUMBER_FILTERS:
            out.update(range(_operand(tag, k - 2, lo), k - 1))
    return out


def _local(e: _Expr, names: _Bindings) -> tuple[bool, set[str]]:
    """Whether the expression, as written, can only be a literal, a number, a truth value, or the renderer's data
    transformed without a `_` of the template's, and the bound names it reads. Not plain: a string holding `_`, `%` or
    braces (unless compared, or an item's key: `[...]`, `.get(...)`), str.format, a macro's or block's text and
    TEMPLATE_TEXT, arguments unpacked, and where TEXT_MAKERS make text, a call, a filter outside TEXT_OF_DATA, an
    attribute with `_` not called (`x.format_map`). What a NUMBER_FILTERS filter reads is a number whatever it holds
    (`_measured`)."""
    assert e.tag is not None
    t, lo, hi = e.tag.tokens, e.lo, e.hi
    _spend(e.tag, hi - lo)
    refs: set[str] = set()
    if hi - lo == 1 and t[lo].kind == "string":   # a literal bound to a name, or a slice's end: no `_` of its own
        return not re.search(r"[_%{}]", t[lo].value), refs
    texts = any(_op(t[i], "~", "%") or _op(_at(t, i - 1), "|") and t[i].value in TEXT_MAKERS for i in range(lo, hi))
    skip = _measured(e.tag, lo, hi)
    for i in range(lo, hi):
        if i in skip:
            continue
        x, prev, after = t[i], _at(t, i - 1) if i > lo else None, _at(t, i + 1) if i + 1 < hi else None
        if x.kind == "string":
            if not (_op(prev, "[") and _op(after, "]") and i - 2 >= lo and _postfix(t[i - 2])   # an item's key
                    or _op(prev, "(") and i - 3 >= lo and t[i - 2].value == "get" and _op(t[i - 3], ".")   # .get(key)
                    or _op(prev, *_COMPARE) or _op(after, *_COMPARE)
                    or after is not None and after.kind == "name" and after.value in ("in", "not")
                    or not re.search(r"[_%{}]", x.value)):
                return False, refs
        elif x.kind == "operator":
            if x.value in ("*", "**") and (prev is None or _op(prev, "(", ",")):
                return False, refs   # arguments unpacked
            if x.value == "(" and prev is not None and (prev.value in names.macros and not _op(_at(t, i - 2), ".") or
                                                        prev.value in FORMATTERS and _op(_at(t, i - 2), ".") or
                                                        texts and _postfix(prev)):
                return False, refs   # a macro's output (text the template writes), str.format, a call's made text
            if x.value == "|" and texts and not (after is not None and after.value in TEXT_OF_DATA):
                return False, refs   # a filter's object (a generator, an iterator) made text
        elif x.kind == "name" and not _op(prev, "|") and x.value not in KEYWORDS:
            if _op(prev, "."):
                if texts and "_" in x.value and not _op(after, "("):
                    return False, refs
                continue
            if _op(after, "="):
                continue
            if x.value in TEMPLATE_TEXT:
                return False, refs
            path, bound, j = x.value, x.value, i + 1
            while j + 1 < hi and _op(t[j], ".") and t[j + 1].kind == "name":   # `ns.field`: the field's own bindings
                path, j = f"{path}.{t[j + 1].value}", j + 2
                bound = path if path in names.values else bound
            refs.add(bound)
    return True, refs & names.values.keys()


def judge(source: str, where: str = "template") -> Verdict:
    """The template's findings and unknowns (see the module doc); never renders it."""
    v = Verdict()
    try:
        tags = lex(source)
    except TemplateError as e:
        v.unknown.append(f"{where}: scan cannot read it as Jinja ({e}); jinja2 refuses it too, unless a renderer reads "
                         "it with other delimiters")
        return v
    names: _Bindings | None = None
    try:
        names = _Bindings(tags)
    except TemplateError as e:
        v.unknown.append(f"{where}: {e}: its look-ups by computed names are not judged")
    for tag in tags:
        t = tag.tokens
        if tag.kind == "{%" and t and t[0].kind == "name" and t[0].value in LOADERS:
            v.unknown.append(f"{where} line {t[0].line}: `{t[0].value}` renders another template, whatever the "
                             "renderer's loader finds")
        for i, x in enumerate(t):
            prev = _at(t, i - 1)
            if x.kind == "name" and (_op(prev, ".") and _private(x.value) or x.value.startswith("__")):
                v.findings.append(Finding(x.line, ("." if _op(prev, ".") else "") + x.value,
                                          "a name Python keeps internal (jinja2's sandbox refuses it)"))
            elif x.kind == "string" and (d := DUNDER.search(unicodedata.normalize("NFKC", x.value))):
                v.findings.append(Finding(x.line, repr(x.value[:60]), f"a string naming {d.group()} (a format string's "
                                          "field, or a look-up's name)"))
            elif names is not None and (_op(x, "[") and _postfix(prev) and i in tag.close
                                        or x.kind == "name" and x.value in ACCESSOR_FILTERS and _filter_at(tag, i)
                                        or x.value in FORMATTERS and _op(prev, ".") and i + 1 in tag.close):
                try:
                    if _op(x, "["):
                        _key(tag, i + 1, tag.close[i], names, where, v)
                    elif x.value in FORMATTERS and _op(prev, "."):
                        _format_string(tag, _operand(tag, i - 2, 0), i - 1, names, where, v)
                    else:
                        _accessor(tag, i, names, where, v)
                except TemplateError as e:   # the budget spent: the literal rules above still run to the end
                    v.unknown.append(f"{where} line {x.line}: {e}: its look-ups by computed names are not judged")
                    names = None
    return v


def _filter_at(tag: Tag, i: int) -> bool:
    """Whether the name at token i is a filter: after `|`, or first in a `{% filter ... %}` block."""
    return _op(_at(tag.tokens, i - 1), "|") or i == 1 and tag.kind == "{%" and tag.tokens[0].value == "filter"


# A str.format field that looks up a private attribute or item (`{0._x}`, `{0[_x]}`, `{.__class__}`).
PRIVATE_FIELD = re.compile(r"\{[^{}]*?[.\[]\s*_")


def _format_string(tag: Tag, a: int, b: int, names: _Bindings, where: str, v: Verdict) -> None:
    """The receiver, tokens [a, b), of a `.format(...)` / `.format_map(...)` call: its fields look attributes up by
    name (`'{0.x}'`), so a literal is judged by its fields and anything else is unknown unless plain."""
    literal = _literal(tag, a, b)
    if literal is not None:
        if PRIVATE_FIELD.search(literal):
            v.findings.append(Finding(tag.tokens[a].line, repr(literal[:60]), "a format string whose field looks up a "
                                      "private name (str.format reads it)"))
    elif not names.plain(_Expr(tag, a, b)):
        v.unknown.append(f"{where} line {tag.tokens[a].line}: str.format of a string the template computes: its fields "
                         "look attributes up by name, which scan cannot tell")


def _literal(tag: Tag, a: int, b: int) -> str | None:
    return tag.tokens[a].value if b - a == 1 and tag.tokens[a].kind == "string" else None


def _judge_name(tag: Tag, a: int, b: int, names: _Bindings, where: str, construct: str, v: Verdict,
                attribute: bool = False) -> None:
    """A look-up's name in tokens [a, b): a literal judged by its value (`attribute`: an attribute for the template to
    use, where str.format counts), anything else unknown unless plain."""
    literal = _literal(tag, a, b)
    line = tag.tokens[a].line
    if literal is not None:
        if _private(literal) or attribute and literal in FORMATTERS:
            v.findings.append(Finding(line, f"{construct}({literal[:60]!r})", (
                "str.format, which reads the attributes its format string names (jinja2 before 3.1.6: a sandbox "
                "escape)" if literal in FORMATTERS else "a name Python keeps internal (jinja2's look-up falls back "
                "from the item to the attribute)")))
    elif not names.plain(_Expr(tag, a, b)):
        shown = " ".join(repr(x.value) if x.kind == "string" else x.value for x in tag.tokens[a:b])[:80]
        v.unknown.append(f"{where} line {line}: {construct} by a name the template computes ({shown}): scan cannot "
                         "tell what it reaches")


def _key(tag: Tag, a: int, b: int, names: _Bindings, where: str, v: Verdict) -> None:
    """A subscript's key, or each part of a slice (`[1:]`, `[::-1]`), judged as a look-up's name (one unknown a key)."""
    for x, y in _split(tag, a, b, ":"):
        said = len(v.unknown)
        _judge_name(tag, x, y, names, where, "an item", v)
        if len(v.unknown) > said:
            return


def _accessor(tag: Tag, i: int, names: _Bindings, where: str, v: Verdict) -> None:
    """An accessor filter's arguments that name an attribute: `attribute=`; the first of attr, selectattr, rejectattr,
    groupby and map (a filter's name), and map's second after 'attr'."""
    name = tag.tokens[i].value
    args = _split(tag, i + 2, tag.close[i + 1], ",") if i + 1 in tag.close and _op(tag.tokens[i + 1], "(") else []
    if any(_op(tag.tokens[a], "*", "**") for a, _ in args):
        v.unknown.append(f"{where} line {tag.tokens[i].line}: |{name} with its arguments unpacked: scan cannot tell what "
                         "it looks up")
        return
    positional = [(a, b) for a, b in args if _keyword(tag, a, b) is None]
    looked_up = [(a + 2, b, True) for a, b in args if _keyword(tag, a, b) == "attribute"]
    at = ATTRIBUTE_ARGUMENT.get(name)
    if at is not None and at < len(positional):
        looked_up.append((*positional[at], name != "map"))   # map's first: a filter's name (`format`: %-formatting)
    if name == "map" and len(positional) > 1 and _literal(tag, *positional[0]) == "attr":
        looked_up.append((*positional[1], True))
    for a, b, attribute in looked_up:
        _judge_name(tag, a, b, names, where, f"|{name}", v, attribute)
