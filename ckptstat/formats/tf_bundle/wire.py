"""The protobuf wire format (protobuf.dev "Encoding"), as much of it as tensor bundles use: varints,
fixed32/64 and length-delimited fields. Decoding errors are `Bad`, which the reader turns into a
CorruptCheckpointError naming the file."""
from __future__ import annotations

import struct
from collections.abc import Iterator


class Bad(Exception):
    """A structural problem found while decoding; becomes a CorruptCheckpointError naming the file."""


def varint(buf: bytes, pos: int, limit: int | None = None, max_bytes: int = 10) -> tuple[int, int]:
    """Decode a base-128 varint at buf[pos]; returns (value, next position)."""
    end = len(buf) if limit is None else limit
    result = shift = 0
    for i in range(max_bytes):
        if pos + i >= end:
            raise Bad(f"varint at byte {pos} runs past the end of its field")
        b = buf[pos + i]
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos + i + 1
        shift += 7
    raise Bad(f"varint at byte {pos} never ends (more than {max_bytes} bytes)")


def fields(buf: bytes) -> Iterator[tuple[int, int, int | bytes]]:
    """(field number, wire type, value) for each field of a serialized message. Length-delimited
    values are bytes; varints and fixed32/64 are ints."""
    pos, end = 0, len(buf)
    while pos < end:
        key, pos = varint(buf, pos)
        num, wire = key >> 3, key & 7
        value: int | bytes
        if wire == 0:
            value, pos = varint(buf, pos)
        elif wire == 1:
            if pos + 8 > end:
                raise Bad("fixed64 field runs past the end of its message")
            value, pos = struct.unpack_from("<Q", buf, pos)[0], pos + 8
        elif wire == 5:
            if pos + 4 > end:
                raise Bad("fixed32 field runs past the end of its message")
            value, pos = struct.unpack_from("<I", buf, pos)[0], pos + 4
        elif wire == 2:
            n, pos = varint(buf, pos)
            if pos + n > end:
                raise Bad(f"length-delimited field of {n} bytes runs past the end of its message")
            value, pos = bytes(buf[pos:pos + n]), pos + n
        else:
            raise Bad(f"unsupported protobuf wire type {wire} (field {num})")
        yield num, wire, value


def number(value: int | bytes, what: str) -> int:
    """A varint or fixed field's value; a length-delimited one where a number belongs is Bad."""
    if isinstance(value, bytes):
        raise Bad(f"{what} is length-delimited where a number belongs")
    return value


def message(value: int | bytes, what: str) -> bytes:
    """A length-delimited field's bytes (a nested message or a string)."""
    if not isinstance(value, bytes):
        raise Bad(f"{what} is a number where a message belongs")
    return value


def repeated_ints(value: int | bytes, what: str) -> list[int]:
    """One occurrence of a repeated integer field: its varints when packed (length-delimited), else the one number."""
    if isinstance(value, int):
        return [value]
    out, pos = [], 0
    while pos < len(value):
        x, pos = varint(value, pos)
        out.append(x)
    return out


def int64(value: int | bytes, what: str) -> int:
    """An int64 field: a varint of its two's complement (so 2**64 - 1 reads as -1)."""
    v = number(value, what)
    return v - (1 << 64) if v >= 1 << 63 else v
