"""The msgpack walk under the Flax reader (formats/flax_msgpack.py): structure at explicit file offsets,
payloads skipped, every count and length checked against the bytes left before it is read or looped on
(msgpack spec: github.com/msgpack/msgpack/blob/master/spec.md; flax's layout: docs/formats.md section 11).

No reader registers here, so that detection helpers (`looks_like_flax`, which `ckptstat scan` asks so as
not to read a Flax file's map markers as pickle opcodes) can be imported without changing the registry's
order."""
from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from ..errors import CorruptCheckpointError

MAX_DEPTH = 64             # nested maps and arrays; transformers' deepest (T5) is under 10
MAX_KEY_BYTES = 1 << 16    # one map key
_WINDOW = 1 << 14          # structure is read through a window of this many bytes (keys between payloads are short)
EXT_NDARRAY, EXT_COMPLEX, EXT_NPSCALAR = 1, 2, 3   # flax.serialization._MsgpackExtType

# msgpack spec (github.com/msgpack/msgpack/blob/master/spec.md): marker -> (bytes of its big-endian
# length/count field, what follows). Fixed-size scalars: marker -> bytes after the marker.
_MAP16, _MAP32, _ARR16, _ARR32 = 0xDE, 0xDF, 0xDC, 0xDD
_STR = {0xD9: 1, 0xDA: 2, 0xDB: 4}
BIN = {0xC4: 1, 0xC5: 2, 0xC6: 4}
_EXT = {0xC7: 1, 0xC8: 2, 0xC9: 4}
_FIXEXT = {0xD4: 1, 0xD5: 2, 0xD6: 4, 0xD7: 8, 0xD8: 16}
_SCALAR = {0xC0: 0, 0xC2: 0, 0xC3: 0, 0xCA: 4, 0xCB: 8, 0xCC: 1, 0xCD: 2, 0xCE: 4, 0xCF: 8, 0xD0: 1, 0xD1: 2,
           0xD2: 4, 0xD3: 8}
_INT = {0xCC: ">B", 0xCD: ">H", 0xCE: ">I", 0xCF: ">Q", 0xD0: ">b", 0xD1: ">h", 0xD2: ">i", 0xD3: ">q"}


class End(Exception):
    """The probe's bytes ended (detection only: the file goes on)."""


class Source:
    """Structure bytes at explicit offsets, through a window of _WINDOW bytes (payloads are skipped)."""

    def __init__(self, path: str, size: int, read: Callable[[int, int], bytes], partial: bool = False):
        self.path, self.size, self._read, self.partial = path, size, read, partial
        self.pos, self._at, self._buf = 0, 0, b""

    def fail(self, why: str) -> CorruptCheckpointError:
        return CorruptCheckpointError(self.path, why)

    def need(self, n: int, what: str) -> None:
        if n > self.size - self.pos:
            if self.partial:
                raise End
            raise self.fail(f"{what} at offset {self.pos:,} needs {n:,} bytes; the file has {self.size - self.pos:,} left")

    def take(self, n: int, what: str) -> bytes:
        self.need(n, what)
        lo = self.pos - self._at
        if lo < 0 or lo + n > len(self._buf):
            self._at, self._buf, lo = self.pos, self._read(self.pos, max(n, _WINDOW)), 0
            if len(self._buf) < n:
                raise self.fail(f"{what} at offset {self.pos:,}: the file ends first")
        self.pos += n
        return self._buf[lo:lo + n]

    def uint(self, width: int, what: str) -> int:
        return int.from_bytes(self.take(width, what), "big")

    def skip(self, n: int, what: str) -> None:
        self.need(n, what)
        self.pos += n


def _text(src: Source, marker: int) -> str:
    """A map key: msgpack str (flax writes string keys)."""
    at = src.pos - 1
    if 0xA0 <= marker <= 0xBF:
        n = marker & 0x1F
    elif marker in _STR:
        n = src.uint(_STR[marker], "key length")
    else:
        raise src.fail(f"map key at offset {at:,} is not a string (marker 0x{marker:02x}); flax writes string keys")
    if n > MAX_KEY_BYTES:
        raise src.fail(f"map key at offset {at:,} claims {n:,} bytes (at most {MAX_KEY_BYTES:,} read)")
    try:
        return src.take(n, "key").decode("utf-8")
    except UnicodeDecodeError:
        raise src.fail(f"map key at offset {at:,} is not UTF-8") from None


def _container(src: Source, marker: int) -> tuple[bool, int] | None:
    """(is a map, entries) for a map or array marker, else None; the count checked against the bytes left."""
    if 0x80 <= marker <= 0x8F or marker in (_MAP16, _MAP32):
        n = marker & 0x0F if marker <= 0x8F else src.uint(2 if marker == _MAP16 else 4, "map size")
        src.need(2 * n, f"a map of {n:,} entries")   # each entry is at least a 1-byte key and a 1-byte value
        return True, n
    if 0x90 <= marker <= 0x9F or marker in (_ARR16, _ARR32):
        n = marker & 0x0F if marker <= 0x9F else src.uint(2 if marker == _ARR16 else 4, "array size")
        src.need(n, f"an array of {n:,} items")
        return False, n
    return None


Leaf = Callable[[str, int, int, int], None]   # (name, ext code, payload offset, payload length)


def walk(src: Source, on_ext: Leaf, scalars: dict[str, Any]) -> int:
    """Walk the top-level map: on_ext for every ext leaf, ints and bools into `scalars` (what a chunked
    array's shape and flag need); returns how many other leaves (floats, strings, nil...) were skipped."""
    top = _container(src, src.take(1, "top-level marker")[0])
    if top is None or not top[0]:
        raise src.fail("not a Flax msgpack checkpoint: the top level is not a map")
    stack: list[list[Any]] = [[top[1], True, "", 0]]   # [entries left, is a map, name prefix, next index]
    skipped = 0
    while stack:
        frame = stack[-1]
        if frame[0] == 0:
            stack.pop()
            continue
        frame[0] -= 1
        if frame[1]:
            key = _text(src, src.take(1, "map key")[0])
        else:
            key, frame[3] = str(frame[3]), frame[3] + 1
        name = frame[2] + key
        at = src.pos
        marker = src.take(1, "value")[0]
        inner = _container(src, marker)
        if inner is not None:
            if len(stack) >= MAX_DEPTH:
                raise src.fail(f"a map or array at offset {at:,} is nested deeper than {MAX_DEPTH} levels")
            stack.append([inner[1], inner[0], name + ".", 0])
        elif marker in _EXT or marker in _FIXEXT:
            n = src.uint(_EXT[marker], "ext length") if marker in _EXT else _FIXEXT[marker]
            code = src.take(1, "ext type")[0]
            start = src.pos
            on_ext(name, code, start, n)
            src.skip(n, f"{name!r}: an ext payload of {n:,} bytes")
        elif marker <= 0x7F or marker >= 0xE0:   # positive / negative fixint
            scalars[name] = marker if marker <= 0x7F else marker - 0x100
        elif marker in _INT:
            scalars[name] = struct.unpack(_INT[marker], src.take(struct.calcsize(_INT[marker]), "integer"))[0]
        elif marker in (0xC2, 0xC3):
            scalars[name] = marker == 0xC3
        elif marker in _SCALAR:
            src.skip(_SCALAR[marker], "scalar")
            skipped += 1
        elif 0xA0 <= marker <= 0xBF or marker in _STR or marker in BIN:
            n = marker & 0x1F if marker <= 0xBF else src.uint(_STR.get(marker) or BIN[marker], "length")
            src.skip(n, f"{name!r}: a string of {n:,} bytes")
            skipped += 1
        else:   # 0xC1, never used
            raise src.fail(f"{name!r} at offset {at:,}: marker 0x{marker:02x} is not msgpack")
    return skipped


def looks_like_flax(head: bytes, whole: bool) -> bool:
    """msgpack has no magic: a file's first bytes (`whole`: all of them) are a top-level map that walks as a
    flax state dict (string keys, maps) to an ndarray ext whose payload opens with a 3-array."""
    if not head or not (0x81 <= head[0] <= 0x8F or head[0] in (_MAP16, _MAP32)):
        return False
    src = Source("", len(head), lambda at, n: head[at:at + n], partial=not whole)
    found: list[bool] = []

    def on_ext(name: str, code: int, start: int, n: int) -> None:
        if code in (EXT_NDARRAY, EXT_NPSCALAR) and start < len(head) and head[start] == 0x93:
            found.append(True)
            raise End

    try:
        walk(src, on_ext, {})
    except (End, CorruptCheckpointError):
        pass
    return bool(found)
