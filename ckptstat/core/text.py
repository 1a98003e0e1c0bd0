"""Text from files, made inert wherever it is shown as text (docs/security.md, "Names").

A tensor name, a metadata value or a path comes from the file, and is printed to a terminal, written into a
markdown or HTML report or a CSV cell. The characters that would act there instead of reading as themselves
are shown as escapes (`\\x1b`, `\\u202e`):

- C0 and C1 controls: a terminal escape, BEL, a carriage return or newline that rewrites or splits a line;
- the bidirectional controls (U+061C, U+200E/F, U+202A-U+202E, U+2066-U+2069): a right-to-left override makes
  `weight.txt\\u202ecod.exe` display as `weight.txtexe.doc` (Unicode TR#9; CVE-2021-42574, "Trojan Source");
- the line and paragraph separators U+2028/U+2029, which editors, browsers and some terminals break a line at;
- lone surrogates (U+D800-U+DFFF), which no UTF-8 encoder writes (printing one raised UnicodeEncodeError).

`--json` keeps names exact (JSON escapes every control), except surrogates (core/jsontext.py).
"""
from __future__ import annotations

import re

_ACTIVE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def _escape(m: re.Match[str]) -> str:
    c = ord(m.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def inert(s: object) -> str:
    """A file-derived string with its active characters (above) shown as \\xNN or \\uNNNN."""
    return _ACTIVE.sub(_escape, str(s))


def has_surrogate(s: str) -> bool:
    return not s.isascii() and _SURROGATE.search(s) is not None


def without_surrogates(s: str) -> str:
    """The string with each surrogate code point replaced by U+FFFD (what a UTF-8 decoder shows for one)."""
    return _SURROGATE.sub("\ufffd", s)
