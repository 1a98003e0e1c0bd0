"""`json.dumps(obj, indent=2)`, the same text faster. Python 3.11's C encoder takes no indent, so the
standard library pretty-prints in pure-Python generators: ~60 us a stats row, 0.12 s of serial time at
2,048 tensors in every `--workers` run (docs/performance.md). Reports are trees of dict, list, tuple,
str, int, float, bool and None, each scalar written by a C function; anything else (a subclass, a tuple
key, a cycle) goes to the standard library, so its output and its errors are the standard library's."""
from __future__ import annotations

import json
from collections.abc import Callable
from json.encoder import encode_basestring_ascii
from typing import Any

from .text import without_surrogates

# repr of a finite float ends in a digit; of a non-finite one in "n" or "f", which json spells its own way
_NONFINITE = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}
_SCALAR: dict[type, Callable[[Any], str]] = {
    str: encode_basestring_ascii, int: int.__repr__, float: float.__repr__,
    bool: {True: "true", False: "false"}.__getitem__, type(None): {None: "null"}.__getitem__,
}
_NESTED = (dict, list, tuple)


class _Other(Exception):
    """A value this encoder leaves to the standard library."""


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


def _encode(o: object, out: list[str], nl: str) -> None:
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
    elif t is list or t is tuple:
        if not o:
            out.append("[]")
            return
        inner = nl + "  "
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


def dumps(obj: object) -> str:
    """What `json.dumps(obj, indent=2)` returns, except that a surrogate code point in a string (a config or
    metadata value; names holding one are refused, core/tensor.py `check_name`) is written as U+FFFD: json
    would write `\\ud800` alone, which strict parsers (RFC 8259 8.2, Rust's serde_json, jq) reject."""
    text = _dumps(obj)
    return _dumps(_clean(obj)) if "\\ud" in text or "\\uD" in text else text


def _dumps(obj: object) -> str:
    out: list[str] = []
    try:
        _encode(obj, out, "\n")
    except (_Other, RecursionError):
        return json.dumps(obj, indent=2)
    return "".join(out)


def _clean(o: object) -> object:
    """The report with surrogates replaced (rare: only when the text may hold one)."""
    if isinstance(o, str):
        return without_surrogates(o)
    if isinstance(o, dict):
        return {_clean(k): _clean(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_clean(v) for v in o]
    return o
