"""Partitioned variables (tf.compat.v1 partitioners; docs/formats.md section 4). The full variable's
entry lists its `slices` and holds no data; each slice is its own entry under a binary key
(OrderedCode-encoded name and extents, tensorflow/core/util/saved_tensor_slice_util.cc
`EncodeTensorNameSlice`), holding a C-contiguous array of its extent. At open the slices are found and
checked to cover the variable; its values are gathered back from them on demand (`read_partitioned`).

The slices are noted in TensorInfo.extra["partitions"]: [{file, offset, bytes, crc32c, extent:
[[start, length] per dimension]}]."""
from __future__ import annotations

import contextlib
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...core import TensorInfo, dtypes
from ...core.files import open_regular
from ...core.io import RawFile, contiguous_strides, gather, rectangles, void_dtype
from .records import Entry, Extent
from .wire import Bad

if TYPE_CHECKING:  # numpy is imported where values are read, not on the header-only path
    from numpy.typing import NDArray


# ---------------------------------------------------------------- OrderedCode slice keys
def _num_increasing(v: int) -> bytes:
    b = v.to_bytes((v.bit_length() + 7) // 8, "big") if v else b""
    return bytes([len(b)]) + b


def _signed_num_increasing(v: int) -> bytes:
    """tensorflow/core/lib/strings/ordered_code.cc WriteSignedNumIncreasing."""
    x = ~v if v < 0 else v
    if x < 64:
        return bytes([(0x80 ^ v) & 0xFF])
    n = (x.bit_length() + 7) // 7            # kBitsToLength
    buf = bytearray((v & ((1 << 80) - 1)).to_bytes(10, "big"))   # sign-extended to 10 bytes
    begin = buf[10 - n:]
    header = [(0, 0), (0x80, 0), (0xC0, 0), (0xE0, 0), (0xF0, 0), (0xF8, 0), (0xFC, 0), (0xFE, 0),
              (0xFF, 0), (0xFF, 0x80), (0xFF, 0xC0)][n]
    begin[0] ^= header[0]
    begin[1] ^= header[1]
    return bytes(begin)


def slice_key(name: str, extents: Extent) -> bytes:
    """The bundle key of one slice of a partitioned variable (EncodeTensorNameSlice)."""
    escaped = name.encode("utf-8").replace(b"\xff", b"\xff\x00").replace(b"\x00", b"\x00\xff")
    key = _num_increasing(0) + escaped + b"\x00\x01" + _num_increasing(len(extents))
    for start, length in extents:
        key += _signed_num_increasing(start) + _signed_num_increasing(length)
    return key


# ---------------------------------------------------------------- at open
def find_slices(name: str, e: Entry, entries: Mapping[bytes, Entry]) -> list[tuple[Entry, Extent]]:
    """Each slice's entry with its extent made explicit (no -1 lengths), checked to lie inside the
    variable's shape; together they must hold as many elements as the variable."""
    parts = []
    for ext in e.slices:
        if len(ext) != len(e.shape):
            raise Bad(f"tensor {name!r}: slice of rank {len(ext)} for a rank-{len(e.shape)} tensor")
        full = tuple((s, n if n >= 0 else dim - s) for (s, n), dim in zip(ext, e.shape))
        if any(s < 0 or n < 0 or s + n > dim for (s, n), dim in zip(full, e.shape)):
            raise Bad(f"tensor {name!r}: slice {list(full)} lies outside its shape {list(e.shape)}")
        part = entries.get(slice_key(name, ext))
        if part is None:
            raise Bad(f"tensor {name!r}: slice {list(full)} is listed but has no entry")
        parts.append((part, full))
    covered = sum(math.prod(n for _, n in full) for _, full in parts)
    if covered != math.prod(e.shape):
        raise Bad(f"tensor {name!r}: its slices hold {covered} elements, its shape {math.prod(e.shape)}")
    _check_disjoint(name, [full for _, full in parts])
    return parts


MAX_OVERLAP_TESTS = 1 << 22   # box pairs compared when checking a variable's slices do not overlap


def _check_disjoint(name: str, boxes: list[Extent]) -> None:
    """Slices that hold as many elements as the variable cover it exactly if and only if no two
    overlap: a slice listed twice, or two that overlap while a gap is left elsewhere, is refused
    (TF's reader would fail on it; reading it would leave elements unset). A sweep along dimension 0
    compares only slices whose first-dimension ranges meet: linear for the usual partitioning."""
    if len(boxes) < 2 or not boxes[0]:
        if len(boxes) > 1:
            raise Bad(f"tensor {name!r}: a scalar split into {len(boxes)} slices")
        return
    order = sorted(boxes, key=lambda b: b[0][0])
    active: list[Extent] = []
    tests = 0
    for box in order:
        start0 = box[0][0]
        active = [a for a in active if a[0][0] + a[0][1] > start0]
        for other in active:
            tests += 1
            if tests > MAX_OVERLAP_TESTS:
                raise Bad(f"tensor {name!r}: {len(boxes)} slices too entangled to check (more than "
                          f"{MAX_OVERLAP_TESTS:,} overlap tests)")
            if all(s < t + m and t < s + n for (s, n), (t, m) in zip(box, other)):
                raise Bad(f"tensor {name!r}: slices {[list(x) for x in other]} and {[list(x) for x in box]} overlap "
                          "(a slice listed twice, or a gap left elsewhere)")
        active.append(box)


def describe(parts: list[tuple[Entry, Extent]], shards: list[str]) -> list[dict[str, object]]:
    """The slices as TensorInfo.extra["partitions"] notes them."""
    return [{"file": shards[p.shard_id], "offset": p.offset, "bytes": p.size, "crc32c": p.crc32c,
             "extent": [list(x) for x in full]} for p, full in parts]


# ---------------------------------------------------------------- reading values
@dataclass(frozen=True)
class Part:
    file: str
    offset: int
    nbytes: int
    crc32c: int | None
    lo: tuple[int, ...]        # first index per dimension
    size: tuple[int, ...]      # length per dimension


def _int(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"expected an integer in a partition note, got {value!r}")
    return value


def parts_of(info: TensorInfo) -> list[Part] | None:
    """The slices noted in info.extra["partitions"], or None when the tensor is not partitioned."""
    notes = info.extra.get("partitions")
    if notes is None:
        return None
    if not isinstance(notes, list):
        raise ValueError(f"{info.name}: malformed partition notes")
    out = []
    for p in notes:
        if not (isinstance(p, dict) and isinstance(p.get("file"), str) and isinstance(p.get("extent"), list)
                and all(isinstance(x, list) and len(x) == 2 for x in p["extent"])):
            raise ValueError(f"{info.name}: malformed partition note {p!r}"[:200])
        crc = p.get("crc32c")
        out.append(Part(p["file"], _int(p.get("offset")), _int(p.get("bytes")), None if crc is None else _int(crc),
                        tuple(_int(s) for s, _ in p["extent"]), tuple(_int(n) for _, n in p["extent"])))
    return out


def read_partitioned(info: TensorInfo, start: int, count: int) -> NDArray[Any]:
    """Elements [start, start + count) of a partitioned variable: the flat range is split into
    rectangles (core.io.rectangles), and each is filled from the slices it overlaps, reading from
    each slice (a C-contiguous array of its extent) only the overlapping part."""
    import numpy as np

    parts = parts_of(info)
    if parts is None:
        raise ValueError(f"{info.name}: not a partitioned variable")
    isz = info.dt.bits // 8
    if isz * 8 != info.dt.bits:
        raise ValueError(f"{info.name}: partitioned {info.dtype} (sub-byte) is not supported")
    for p in parts:
        if p.nbytes != math.prod(p.size) * isz or len(p.lo) != len(info.shape):
            raise ValueError(f"{info.name}: slice {[list(x) for x in zip(p.lo, p.size)]} holds {p.nbytes} bytes")
    slices = [(p, contiguous_strides(p.size)) for p in parts]
    out = np.empty(count * isz, dtype=np.uint8)
    void = void_dtype(isz)
    filled = 0
    with contextlib.ExitStack() as stack:
        files: dict[str, RawFile] = {}
        pos = 0
        for lo, size in rectangles(info.shape, start, count):
            n = math.prod(size)
            block = out[pos * isz:(pos + n) * isz].view(void).reshape(size)
            pos += n
            for p, strides in slices:
                a = tuple(max(x, y) for x, y in zip(lo, p.lo))
                b = tuple(min(x + m, y + k) for x, m, y, k in zip(lo, size, p.lo, p.size))
                if any(j >= k for j, k in zip(a, b)):
                    continue
                shape = tuple(k - j for j, k in zip(a, b))
                f = files.get(p.file)
                if f is None:
                    f = files[p.file] = RawFile(stack.enter_context(open_regular(p.file, buffering=0)), p.file)
                at = p.offset + sum((j - y) * s for j, y, s in zip(a, p.lo, strides)) * isz
                if shape == size:   # the slice holds the whole rectangle: read it in place
                    gather(f, at, isz, shape, strides, block.view(np.uint8).reshape(-1))
                else:
                    piece = np.empty(math.prod(shape) * isz, dtype=np.uint8)
                    gather(f, at, isz, shape, strides, piece)
                    block[tuple(slice(j - x, k - x) for j, k, x in zip(a, b, lo))] = piece.view(void).reshape(shape)
                filled += math.prod(shape)
    if filled != count:   # the slices were checked to cover the shape once at open; not to overlap
        raise ValueError(f"{info.name}: its slices cover {filled} of the {count} elements asked for")
    return dtypes.decode(out, info.dtype, count, info.byteorder)
