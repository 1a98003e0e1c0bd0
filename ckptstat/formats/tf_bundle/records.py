"""The `.index` table's values (docs/formats.md section 4; tensorflow/core/protobuf/tensor_bundle.proto):
key "" holds a BundleHeaderProto, every other key a BundleEntryProto."""
from __future__ import annotations

from dataclasses import dataclass

from .wire import Bad, fields, int64, message, number

# DataType enum (tensorflow/core/framework/types.proto) -> canonical dtype; _REF variants are +100.
TF_DTYPES = {1: "F32", 2: "F64", 3: "I32", 4: "U8", 5: "I16", 6: "I8", 7: "STR", 8: "C64", 9: "I64",
             10: "BOOL", 14: "BF16", 17: "U16", 18: "C128", 19: "F16", 22: "U32", 23: "U64",
             24: "F8_E5M2", 25: "F8_E4M3"}

Extent = tuple[tuple[int, int], ...]   # per dimension: (start, length); length -1 = the whole dimension


@dataclass
class Header:
    """BundleHeaderProto: 1 num_shards, 2 endianness (0 little, 1 big), 3 VersionDef (1 producer)."""

    num_shards: int = 1
    endianness: int = 0
    version: int = 0


@dataclass
class Entry:
    """BundleEntryProto."""

    dtype: int = 0
    shape: tuple[int, ...] = ()
    shard_id: int = 0
    offset: int = 0
    size: int = 0
    crc32c: int | None = None
    slices: tuple[Extent, ...] = ()


def parse_header(buf: bytes) -> Header:
    h = Header()
    for num, _, value in fields(buf):
        if num == 1:
            h.num_shards = number(value, "header num_shards")
        elif num == 2:
            h.endianness = number(value, "header endianness")
        elif num == 3:
            for n, _, v in fields(message(value, "header version")):
                if n == 1:
                    h.version = number(v, "header version producer")
    return h


def _shape(buf: bytes) -> tuple[int, ...]:
    dims = []
    for num, _, value in fields(buf):
        if num == 2:
            size = 0
            for n, _, v in fields(message(value, "shape dim")):  # TensorShapeProto.Dim: 1 size, 2 name
                if n == 1:
                    size = int64(v, "shape dim size")
            if size < 0:
                raise Bad(f"tensor dimension {size} is unknown or negative")
            dims.append(size)
        elif num == 3 and value:
            raise Bad("tensor shape has unknown rank")
    return tuple(dims)


def _slice(buf: bytes) -> Extent:
    extents = []
    for num, _, value in fields(buf):
        if num == 1:   # TensorSliceProto.Extent: 1 start, 2 length (absent = the whole dimension)
            start, length = 0, -1
            for n, _, v in fields(message(value, "slice extent")):
                if n == 1:
                    start = int64(v, "slice start")
                elif n == 2:
                    length = int64(v, "slice length")
            extents.append((start, length))
    return tuple(extents)


def parse_entry(buf: bytes) -> Entry:
    e = Entry()
    slices = []
    for num, _, value in fields(buf):
        if num == 1:
            e.dtype = number(value, "entry dtype")
        elif num == 2:
            e.shape = _shape(message(value, "entry shape"))
        elif num == 3:
            e.shard_id = number(value, "entry shard_id")
        elif num == 4:
            e.offset = int64(value, "entry offset")
        elif num == 5:
            e.size = int64(value, "entry size")
        elif num == 6:
            e.crc32c = number(value, "entry crc32c")
        elif num == 7:
            slices.append(_slice(message(value, "entry slice")))
    e.slices = tuple(slices)
    return e


def tensor_dtype(code: int, name: str) -> str:
    """The canonical dtype of a DataType enum value (a _REF variant reads as its base type)."""
    code = code - 100 if code > 100 else code
    if code not in TF_DTYPES:
        raise Bad(f"tensor {name!r}: unsupported TensorFlow dtype enum {code}")
    return TF_DTYPES[code]
