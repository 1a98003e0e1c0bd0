"""`json.dumps(obj, indent=2)`, the same text faster. Python 3.11's C encoder takes no indent, so the
standard library pretty-prints in pure-Python generators: ~60 us a stats row, 0.12 s of serial time at
2,048 tensors in every `--workers` run (docs/performance.md). Reports are trees of dict, list, tuple,
str, int, float, bool and None, each scalar written by a C function; anything else (a subclass, a tuple
key, a cycle, nesting deeper than MAX_DEPTH) goes to the standard library, so its output and its errors are the
standard library's. A cycle is found by depth, never by running into the interpreter's recursion limit: a finalizer
the collector runs at that limit fails in turn (an unraisable RecursionError).

A long list (a stats report's 200,000 rows) is written a column at a time (`_column`): dicts of the same keys
one key across all of them, numbers by the C encoder (json.dumps of a flat list: its text split at ", "),
strings by encode_basestring_ascii over the column, each dict then one `%` of a template: a handful of C
calls a column rather than Python's per value (~50 us a stats row before, issue 35). A long Table whose every value
is known writable (`_writable`) has its text made as it is written (`_Later`), PIECE rows at a time: a stats
report's 200,000 rows were 156 MiB of text held at once before the first byte went out."""
from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from itertools import chain, repeat
from json.encoder import encode_basestring_ascii
from operator import itemgetter
from typing import Any, NamedTuple

from .table import Table, values
from .text import has_surrogate, without_surrogates

# repr of a finite float ends in a digit; of a non-finite one in "n" or "f", which json spells its own way
_NONFINITE = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}
_SCALAR: dict[type, Callable[[Any], str]] = {
    str: encode_basestring_ascii, int: int.__repr__, float: float.__repr__,
    bool: {True: "true", False: "false"}.__getitem__, type(None): {None: "null"}.__getitem__,
}
_NESTED = (dict, list, tuple, Table)
_NUMBERS = frozenset({int, float, bool, type(None)})   # the C encoder's text, split at ", ", is json's for these
_SCALARS = _NUMBERS | {str}
MIN_COLUMN = 8   # a list at least this long is written by columns
# ...and in pieces of this many items: each piece's columns are made, joined and freed before the next, so that the
# intermediate texts of a 200,000-row list never coexist (its peak RSS: the report and the finished text, issue 35)
PIECE = 4096
# nesting deeper than this (a report is a dozen levels; a cycle is endless) is left to the standard library, whose
# encoder names a cycle; each level here is at most four Python frames, well inside the default recursion limit
MAX_DEPTH = 64
_DEEPEST = len("\n") + 2 * MAX_DEPTH   # the indent text `nl` at that depth


class _Other(Exception):
    """A value this encoder leaves to the standard library."""


class _Later(NamedTuple):
    """A long Table's items at indent `nl`, their text made when `pieces` hands it over (the Table `_writable`)."""
    table: Table
    nl: str

    def texts(self) -> Iterator[str]:
        return _in_pieces(self.table, self.nl)


def _writable(t: Table) -> bool:
    """Whether _items writes every row of `t` itself (nothing left to the standard library) and without a surrogate
    to clean: str keys; each column an array, a nested Table of its own that is, or a list of scalars or of lists
    (tuples) of scalars, its strings without a surrogate."""
    if any(type(k) is not str or has_surrogate(k) for k in t.keys):
        return False
    for c in t.columns.values():
        if isinstance(c, Table):
            if not _writable(c):
                return False
        elif isinstance(c, list):
            if set(map(type, c)) <= {list, tuple}:
                c = list(chain.from_iterable(c))
            if not set(map(type, c)) <= _SCALARS or has_surrogate("".join([v for v in c if type(v) is str])):
                return False
    return True


def _scalar(o: object) -> str:
    f = _SCALAR.get(type(o))
    if f is None:
        raise _Other
    s = f(o)
    return _NONFINITE[s] if s[-1] in "nf" else s


def _key(k: object) -> str:
    if type(k) is str:
        return encode_basestring_ascii(k)
    return encode_basestring_ascii(_scalar(k))   # json writes int, float, bool and None keys as strings


def _encode(o: object, out: list[str | _Later], nl: str) -> None:
    if len(nl) > _DEEPEST:
        raise _Other
    t = type(o)
    if t is dict:
        items = o.items()  # type: ignore[attr-defined]
        if not items:
            out.append("{}")
            return
        inner = nl + "  "
        sep = "{" + inner
        for k, v in items:
            if type(v) in _NESTED:
                out.append(sep + _key(k) + ": ")
                _encode(v, out, inner)
            else:
                out.append(sep + _key(k) + ": " + _scalar(v))
            sep = "," + inner
        out.append(nl + "}")
    elif t is list or t is tuple or t is Table:
        if not o:
            out.append("[]")
            return
        inner = nl + "  "
        if len(o) >= MIN_COLUMN:  # type: ignore[arg-type]
            seq: list[Any] | Table = o if isinstance(o, Table) else list(o)  # type: ignore[call-overload]
            out.append("[" + inner)
            if isinstance(seq, Table) and _writable(seq):
                out.append(_Later(seq, inner))
            else:
                out += _in_pieces(seq, inner)
            out.append(nl + "]")
            return
        sep = "[" + inner
        for v in o:  # type: ignore[attr-defined]
            if type(v) in _NESTED:
                out.append(sep)
                _encode(v, out, inner)
            else:
                out.append(sep + _scalar(v))
            sep = "," + inner
        out.append(nl + "]")
    else:
        out.append(_scalar(o))


def _in_pieces(seq: list[Any] | Table, nl: str) -> Iterator[str]:
    """A long list's items at indent `nl`, PIECE at a time: each piece's columns made, joined and freed before the
    next."""
    for i in range(0, len(seq), PIECE):
        yield ("," + nl if i else "") + _items(seq[i:i + PIECE], nl)


def _items(col: list[Any] | Table, nl: str) -> str:
    """A long list's items, each at indent `nl`, joined: dicts of the same keys (a Table's rows) in one join of
    their columns' texts interleaved with the keys (no string a dict), other items through _column."""
    cols: tuple[list[str], list[list[str]]] | None
    if isinstance(col, Table):
        cols = _table_columns(col, nl)
    else:
        cols = _dict_columns(col, nl) if type(col[0]) is dict and set(map(type, col)) == {dict} else None
    if cols is None:
        return ("," + nl).join(_column(col, nl))
    keys, texts = cols
    if not keys:
        return ("," + nl).join(["{}"] * len(col))
    inner = nl + "  "
    pre = ["{" + inner + keys[0] + ": "] + ["," + inner + k + ": " for k in keys[1:]]
    parts: list[Any] = []
    for p, t in zip(pre, texts):
        parts += [repeat(p), t]
    parts.append(repeat(nl + "}," + nl))
    return "".join(chain.from_iterable(zip(*parts)))[:-len("," + nl)]


def _column(col: list[Any] | Table, nl: str) -> list[str]:
    """The text of each value in `col` (a list's items, or one key's values across a list of dicts; a Table's
    rows; a Table's array column, as the list it reads as: core/table.py `values`), indented at `nl`; by columns where
    the values allow, else value by value (_encode: so what it does not own, a cycle included, still goes to the
    standard library)."""
    if len(nl) > _DEEPEST:
        raise _Other
    col = values(col)
    if isinstance(col, Table):
        return _dicts(col, nl)  # type: ignore[return-value]
    kinds = set(map(type, col))
    if kinds <= _NUMBERS:
        return json.dumps(col)[1:-1].split(", ") if col else []
    if kinds == {str}:
        return list(map(encode_basestring_ascii, col))
    if kinds <= _SCALARS:
        return list(map(_scalar, col))
    texts = _dicts(col, nl) if kinds == {dict} else _lists(col, nl) if kinds <= {list, tuple} else None
    return texts if texts is not None else [_one(v, nl) for v in col]


def _one(v: object, nl: str) -> str:
    out: list[str | _Later] = []
    _encode(v, out, nl)
    return "".join(chain.from_iterable(map(_texts, out)))


def _dict_columns(col: list[dict[str, Any]], nl: str) -> tuple[list[str], list[list[str]]] | None:
    """Dicts of the same str keys in the same order: (their keys' texts, each key's values' texts at the
    dicts' inner indent), else None."""
    keys = tuple(col[0])
    if any(type(k) is not str for k in keys) or len(set(map(tuple, col))) != 1:
        return None
    inner = nl + "  "
    return [encode_basestring_ascii(k) for k in keys], [_column(list(map(itemgetter(k), col)), inner) for k in keys]


def _table_columns(t: Table, nl: str) -> tuple[list[str], list[list[str]]]:
    """_dict_columns of a Table's rows, from its columns."""
    if any(type(k) is not str for k in t.keys):
        raise _Other
    inner = nl + "  "
    return [encode_basestring_ascii(k) for k in t.keys], [_column(c, inner) for c in t.columns.values()]


def _dicts(col: list[dict[str, Any]] | Table, nl: str) -> list[str] | None:
    """Each dict's text, one `%` of a template over the columns (None: dicts of other keys)."""
    cols = _table_columns(col, nl) if isinstance(col, Table) else _dict_columns(col, nl)
    if cols is None:
        return None
    keys, texts = cols
    if not keys:
        return ["{}"] * len(col)
    inner = nl + "  "
    template = "".join(("{" if i == 0 else ",") + inner + k.replace("%", "%%") + ": %s"
                       for i, k in enumerate(keys)) + nl + "}"
    return list(map(template.__mod__, zip(*texts)))


def _lists(col: list[Any], nl: str) -> list[str] | None:
    """Lists (or tuples) of scalars: their items one column (None: lists holding containers, whose
    flattening could grow without end on a cycle; those go value by value, depth first)."""
    flat = list(chain.from_iterable(col))
    if not set(map(type, flat)) <= _SCALARS:
        return None
    if not flat:
        return ["[]"] * len(col)
    inner = nl + "  "
    texts = _column(flat, inner)
    one = "[" + inner + "%s" + nl + "]"
    sep, out, i = "," + inner, [], 0
    for n in map(len, col):
        out.append("[]" if not n else one % texts[i] if n == 1 else "[" + inner + sep.join(texts[i:i + n]) + nl + "]")
        i += n
    return out


def dumps(obj: object) -> str:
    """What `json.dumps(obj, indent=2)` returns, except that a surrogate code point in a string (a config or
    metadata value; names holding one are refused, core/tensor.py `check_name`) is written as U+FFFD: json
    would write `\\ud800` alone, which strict parsers (RFC 8259 8.2, Rust's serde_json, jq) reject."""
    return "".join(pieces(obj))


def write(obj: object, write_text: Callable[[str], object]) -> None:
    """dumps(obj) and a newline, handed to `write_text` a piece at a time: a long report's text is never joined
    into one string (a second copy of it), nor its pieces' intermediate texts kept (PIECE)."""
    for piece in pieces(obj):
        write_text(piece)
    write_text("\n")


def pieces(obj: object) -> Iterator[str]:
    """dumps(obj)'s text in pieces, in order. Nothing is handed over before the whole text is made, or known to be
    written by this encoder without a surrogate (a long Table's, made as it is handed over: _Later), so a value left
    to the standard library (_Other) still gets its output, or its error, from json alone."""
    out = _pieces(obj)
    # (a piece with no escape at all, the common case, is scanned once; a _Later's text holds no surrogate)
    if any(type(p) is str and "\\u" in p and ("\\ud" in p or "\\uD" in p) for p in out):
        out = _pieces(_clean(obj))
    return chain.from_iterable(_texts(p) for p in out)


def _texts(p: str | _Later) -> Iterator[str] | tuple[str]:
    return (p,) if type(p) is str else p.texts()  # type: ignore[union-attr]


def _pieces(obj: object) -> list[str | _Later]:
    out: list[str | _Later] = []
    try:
        _encode(obj, out, "\n")
    except (_Other, RecursionError):
        return [json.dumps(obj, indent=2, default=_rows)]
    return out


def _rows(o: object) -> list[Any]:
    """What json writes for a Table: its rows (anything else is json's TypeError, in its words)."""
    if type(o) is Table:
        return list(o)
    raise TypeError(f"Object of type {type(o).__name__} is not JSON serializable")


def _clean(o: object) -> object:
    """The report with surrogates replaced (rare: only when the text may hold one)."""
    if isinstance(o, str):
        return without_surrogates(o)
    if isinstance(o, dict):
        return {_clean(k): _clean(v) for k, v in o.items()}
    if isinstance(o, (list, tuple, Table)):
        return [_clean(v) for v in o]
    return o
