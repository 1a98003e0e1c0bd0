"""TensorFlow tensor bundles (TF1 `model.ckpt-N` and TF2 object-based `ckpt-N`), read without TensorFlow.

A checkpoint `<prefix>` is `<prefix>.index` plus `<prefix>.data-SSSSS-of-NNNNN` shards, and usually a
text file `checkpoint` naming the latest prefix (docs/formats.md section 4). The `.index` is a LevelDB-style
table (google/leveldb doc/table_format.md): footer -> index block -> data blocks -> entries; key ""
holds BundleHeaderProto, every other key a BundleEntryProto (tensorflow/core/protobuf/tensor_bundle.proto).
Protobuf is decoded by the small wire-format reader below; nothing else is needed.

Partitioned variables (tf.compat.v1 partitioners) store the full variable's entry with `slices` and no
data, and one entry per slice under a binary key (OrderedCode-encoded name and extents,
tensorflow/core/util/saved_tensor_slice_util.cc `EncodeTensorNameSlice`); the reader gathers them back
into one logical tensor.
"""
from __future__ import annotations

import math
import os
import re
import struct
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Iterator

if TYPE_CHECKING:  # numpy and crc32c load only when values are read or verified
    import numpy as np

from ..core import dtypes
from ..errors import CorruptCheckpointError, FileNotFound
from ..core import Checkpoint, TensorInfo
from ..core.io import contiguous_strides, read_bytes
from .keras_names import dense_layout
from .registry import _FILE_HOOKS, Format, Probe, register

MAGIC = 0xDB4775248B80FB57
MAGIC_BYTES = struct.pack("<Q", MAGIC)
FOOTER = 48
MAX_INDEX_BYTES = 1 << 31
VERIFY_CHUNK = 16 << 20

# DataType enum (tensorflow/core/framework/types.proto) -> canonical dtype; _REF variants are +100.
TF_DTYPES = {1: "F32", 2: "F64", 3: "I32", 4: "U8", 5: "I16", 6: "I8", 7: "STR", 8: "C64", 9: "I64",
             10: "BOOL", 14: "BF16", 17: "U16", 18: "C128", 19: "F16", 22: "U32", 23: "U64",
             24: "F8_E5M2", 25: "F8_E4M3"}
_DATA_NAME = re.compile(r"^(?P<prefix>.+)\.data-\d{5}-of-\d{5}$")


class _Bad(Exception):
    """A structural problem found while decoding; becomes a CorruptCheckpointError naming the file."""


# ---------------------------------------------------------------- protobuf wire format
def varint(buf: bytes, pos: int, limit: int | None = None, max_bytes: int = 10) -> tuple[int, int]:
    """Decode a base-128 varint at buf[pos]; returns (value, next position)."""
    end = len(buf) if limit is None else limit
    result = shift = 0
    for i in range(max_bytes):
        if pos + i >= end:
            raise _Bad(f"varint at byte {pos} runs past the end of its field")
        b = buf[pos + i]
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos + i + 1
        shift += 7
    raise _Bad(f"varint at byte {pos} never ends (more than {max_bytes} bytes)")


def fields(buf: bytes) -> Iterator[tuple[int, int, object]]:
    """(field number, wire type, value) for each field of a serialized message. Length-delimited
    values are bytes; varints and fixed32/64 are ints."""
    pos, end = 0, len(buf)
    while pos < end:
        key, pos = varint(buf, pos)
        num, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = varint(buf, pos)
        elif wire == 1:
            if pos + 8 > end:
                raise _Bad("fixed64 field runs past the end of its message")
            value, pos = struct.unpack_from("<Q", buf, pos)[0], pos + 8
        elif wire == 5:
            if pos + 4 > end:
                raise _Bad("fixed32 field runs past the end of its message")
            value, pos = struct.unpack_from("<I", buf, pos)[0], pos + 4
        elif wire == 2:
            n, pos = varint(buf, pos)
            if pos + n > end:
                raise _Bad(f"length-delimited field of {n} bytes runs past the end of its message")
            value, pos = bytes(buf[pos:pos + n]), pos + n
        else:
            raise _Bad(f"unsupported protobuf wire type {wire} (field {num})")
        yield num, wire, value


def _int64(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


@dataclass
class Entry:
    """BundleEntryProto."""

    dtype: int = 0
    shape: tuple[int, ...] = ()
    shard_id: int = 0
    offset: int = 0
    size: int = 0
    crc32c: int | None = None
    slices: tuple[tuple[tuple[int, int], ...], ...] = ()   # per slice: (start, length or -1) per dim


def _shape(buf: bytes) -> tuple[int, ...]:
    dims = []
    for num, _, value in fields(buf):
        if num == 2:
            size = 0
            for n, _, v in fields(value):  # TensorShapeProto.Dim: 1 size, 2 name
                if n == 1:
                    size = _int64(v)
            if size < 0:
                raise _Bad(f"tensor dimension {size} is unknown or negative")
            dims.append(size)
        elif num == 3 and value:
            raise _Bad("tensor shape has unknown rank")
    return tuple(dims)


def _slice(buf: bytes) -> tuple[tuple[int, int], ...]:
    extents = []
    for num, _, value in fields(buf):
        if num == 1:   # TensorSliceProto.Extent: 1 start, 2 length (absent = the whole dimension)
            start, length = 0, -1
            for n, _, v in fields(value):
                if n == 1:
                    start = _int64(v)
                elif n == 2:
                    length = _int64(v)
            extents.append((start, length))
    return tuple(extents)


def parse_entry(buf: bytes) -> Entry:
    e = Entry()
    slices = []
    for num, _, value in fields(buf):
        if num == 1:
            e.dtype = value
        elif num == 2:
            e.shape = _shape(value)
        elif num == 3:
            e.shard_id = value
        elif num == 4:
            e.offset = _int64(value)
        elif num == 5:
            e.size = _int64(value)
        elif num == 6:
            e.crc32c = value
        elif num == 7:
            slices.append(_slice(value))
    e.slices = tuple(slices)
    return e


def parse_header(buf: bytes) -> dict:
    h = {"num_shards": 1, "endianness": 0, "version": {}}
    for num, _, value in fields(buf):
        if num == 1:
            h["num_shards"] = value
        elif num == 2:
            h["endianness"] = value
        elif num == 3:
            h["version"] = {n: v for n, _, v in fields(value) if n in (1, 2)}
    return h


# ---------------------------------------------------------------- LevelDB table
def _handle(buf: bytes, pos: int, limit: int) -> tuple[int, int, int]:
    offset, pos = varint(buf, pos, limit)
    size, pos = varint(buf, pos, limit)
    return offset, size, pos


def _block(data: bytes, offset: int, size: int, what: str, verify: bool) -> bytes:
    """A block's contents; its 5-byte trailer is a compression byte and a masked crc32c of
    contents + that byte."""
    if offset + size + 5 > len(data):
        raise _Bad(f"{what} block handle (offset {offset}, size {size}) points past the end of the {len(data)}-byte index")
    contents = data[offset:offset + size]
    ctype = data[offset + size]
    if ctype != 0:
        raise _Bad(f"{what} block is compressed (type {ctype}); TF bundles are written uncompressed")
    if verify:
        from . import crc32c as _crc

        (stored,) = struct.unpack_from("<I", data, offset + size + 1)
        actual = _crc.mask(_crc.crc32c(data[offset:offset + size + 1]))
        if stored != actual:
            raise _Bad(f"{what} block at offset {offset}: crc32c mismatch (stored {stored:#010x}, computed {actual:#010x})")
    return contents


def _entries(block: bytes, what: str) -> Iterator[tuple[bytes, bytes]]:
    if len(block) < 4:
        raise _Bad(f"{what} block of {len(block)} bytes is too short for its restart count")
    (num_restarts,) = struct.unpack_from("<I", block, len(block) - 4)
    limit = len(block) - 4 - 4 * num_restarts
    if limit < 0:
        raise _Bad(f"{what} block claims {num_restarts} restart points, more than its {len(block)} bytes hold")
    pos, key = 0, b""
    while pos < limit:
        shared, pos = varint(block, pos, limit, 5)
        unshared, pos = varint(block, pos, limit, 5)
        vlen, pos = varint(block, pos, limit, 5)
        if shared > len(key) or pos + unshared + vlen > limit:
            raise _Bad(f"{what} block entry at byte {pos} overruns its block")
        key = key[:shared] + block[pos:pos + unshared]
        pos += unshared
        yield key, block[pos:pos + vlen]
        pos += vlen


def read_table(path: str, verify: bool = False) -> list[tuple[bytes, bytes]]:
    """Every (key, value) of a `.index` table, in key order."""
    size = os.path.getsize(path)
    if size < FOOTER:
        raise _Bad(f"file is {size} bytes, too short for a table footer ({FOOTER} bytes)")
    if size > MAX_INDEX_BYTES:
        raise _Bad(f"index file of {size} bytes is larger than any tensor-bundle index ckptstat accepts")
    with open(path, "rb") as f:
        data = f.read()
    footer = data[-FOOTER:]
    if footer[-8:] != MAGIC_BYTES:
        raise _Bad(f"not a tensor-bundle index: bad table magic {footer[-8:].hex()} (expected {MAGIC_BYTES.hex()})")
    _, _, pos = _handle(footer, 0, 40)              # metaindex handle (TF writes an empty one)
    ioff, isize, _ = _handle(footer, pos, 40)
    index = _block(data, ioff, isize, "index", verify)
    out: list[tuple[bytes, bytes]] = []
    for _, handle in _entries(index, "index"):
        boff, bsize, _ = _handle(handle, 0, len(handle))
        out.extend(_entries(_block(data, boff, bsize, "data", verify), "data"))
    return out


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


def slice_key(name: str, extents: tuple[tuple[int, int], ...]) -> bytes:
    """The bundle key of one slice of a partitioned variable (EncodeTensorNameSlice)."""
    escaped = name.encode("utf-8").replace(b"\xff", b"\xff\x00").replace(b"\x00", b"\x00\xff")
    key = _num_increasing(0) + escaped + b"\x00\x01" + _num_increasing(len(extents))
    for start, length in extents:
        key += _signed_num_increasing(start) + _signed_num_increasing(length)
    return key


# ---------------------------------------------------------------- opening a checkpoint
def accept(probe: Probe) -> bool:
    # By magic; or by name, so that a damaged `.index` gets this reader's precise error.
    return probe.tail == MAGIC_BYTES or probe.path.endswith(".index") or bool(
        _DATA_NAME.match(probe.path) and os.path.isfile(_DATA_NAME.match(probe.path)["prefix"] + ".index"))


def data_file(prefix: str, shard: int, num_shards: int) -> str:
    return f"{prefix}.data-{shard:05d}-of-{num_shards:05d}"


def latest_prefix(pointer: str) -> str:
    """The prefix the `checkpoint` text file names (CheckpointState text proto, model_checkpoint_path)."""
    with open(pointer, "rb") as f:
        text = f.read(1 << 20).decode("utf-8", "replace")
    m = re.search(r'^\s*model_checkpoint_path:\s*"((?:[^"\\]|\\.)*)"', text, re.M)
    if not m:
        raise CorruptCheckpointError(pointer, "no model_checkpoint_path in this checkpoint state file")
    named = m.group(1).encode().decode("unicode_escape")
    folder = os.path.dirname(os.path.abspath(pointer))
    candidates = [named if os.path.isabs(named) else os.path.join(folder, named),
                  os.path.join(folder, os.path.basename(named))]   # absolute paths from another machine
    for c in candidates:
        if os.path.isfile(c + ".index"):
            return c
    raise FileNotFound(candidates[0] + ".index", f"named by {pointer} but missing")


def open_pointer(pointer: str) -> Checkpoint:
    return open_bundle(latest_prefix(pointer) + ".index")


def _numel_bytes(dtype: str, shape: tuple[int, ...]) -> int:
    return dtypes.get(dtype).nbytes(math.prod(shape))


def open_bundle(path: str) -> Checkpoint:
    m = _DATA_NAME.match(path)
    if m:                                # a data shard was named: open its index
        path = m["prefix"] + ".index"
    prefix = path[: -len(".index")] if path.endswith(".index") else path
    try:
        return _open(path, prefix)
    except _Bad as e:
        raise CorruptCheckpointError(path, str(e)) from None


def _dtype(code: int, name: str) -> str:
    code = code - 100 if code > 100 else code
    if code not in TF_DTYPES:
        raise _Bad(f"tensor {name!r}: unsupported TensorFlow dtype enum {code}")
    return TF_DTYPES[code]


def _open(path: str, prefix: str) -> Checkpoint:
    table = read_table(path)
    if not table or table[0][0] != b"":
        raise _Bad("no bundle header (the entry with the empty key)")
    header = parse_header(table[0][1])
    num_shards = header["num_shards"]
    if not 1 <= num_shards <= 100_000:
        raise _Bad(f"header claims {num_shards} data shards")
    byteorder = "big" if header["endianness"] == 1 else "little"
    shards = [data_file(prefix, i, num_shards) for i in range(num_shards)]
    sizes: dict[int, int] = {}

    def shard_size(i: int, name: str) -> int:
        if i >= num_shards:
            raise _Bad(f"tensor {name!r} is in shard {i} but the header says there are {num_shards}")
        if i not in sizes:
            if not os.path.isfile(shards[i]):
                raise FileNotFound(shards[i], f"data shard of {os.path.basename(path)} is missing")
            sizes[i] = os.path.getsize(shards[i])
        return sizes[i]

    def check_range(name: str, e: Entry, dtype: str, shape: tuple[int, ...]) -> None:
        end = shard_size(e.shard_id, name)
        if e.offset < 0 or e.size < 0 or e.offset + e.size > end:
            raise _Bad(f"tensor {name!r}: bytes [{e.offset}, {e.offset + e.size}) run past the end of "
                       f"{os.path.basename(shards[e.shard_id])} ({end} bytes)")
        if dtype != "STR" and e.size != _numel_bytes(dtype, shape):
            raise _Bad(f"tensor {name!r}: {e.size} bytes stored but {dtype}{list(shape)} needs {_numel_bytes(dtype, shape)}")

    raw: dict[bytes, Entry] = {}
    for key, value in table[1:]:
        raw[key] = parse_entry(value)
    tensors: dict[str, TensorInfo] = {}
    partitioned: dict[str, list[tuple[Entry, tuple[tuple[int, int], ...]]]] = {}
    for key, e in raw.items():
        if key[:1] == b"\x00":
            continue                      # a slice of a partitioned variable, gathered below
        try:
            name = key.decode("utf-8")
        except UnicodeDecodeError:
            raise _Bad(f"tensor key {key[:40]!r} is not UTF-8") from None
        dtype = _dtype(e.dtype, name)
        if e.slices:
            parts = []
            for ext in e.slices:
                if len(ext) != len(e.shape):
                    raise _Bad(f"tensor {name!r}: slice of rank {len(ext)} for a rank-{len(e.shape)} tensor")
                full = tuple((s, n if n >= 0 else dim - s) for (s, n), dim in zip(ext, e.shape))
                if any(s < 0 or n < 0 or s + n > dim for (s, n), dim in zip(full, e.shape)):
                    raise _Bad(f"tensor {name!r}: slice {list(full)} lies outside its shape {list(e.shape)}")
                part = raw.get(slice_key(name, ext))
                if part is None:
                    raise _Bad(f"tensor {name!r}: slice {list(full)} is listed but has no entry")
                sshape = tuple(n for _, n in full)
                check_range(name, part, dtype, sshape)
                parts.append((part, full))
            covered = sum(math.prod(n for _, n in full) for _, full in parts)
            if covered != math.prod(e.shape):
                raise _Bad(f"tensor {name!r}: its slices hold {covered} elements, its shape {math.prod(e.shape)}")
            partitioned[name] = parts
            extents = [{"file": shards[p.shard_id], "offset": p.offset, "bytes": p.size, "crc32c": p.crc32c,
                        "extent": [list(x) for x in full]} for p, full in parts]
            tensors[name] = TensorInfo(name, dtype, e.shape, path, None, sum(p.size for p, _ in parts), byteorder,
                                       storage=name, extra=_extra(name, e.shape, {"partitions": extents}))
            continue
        check_range(name, e, dtype, e.shape)
        extra = {"crc32c": e.crc32c} if e.crc32c is not None else {}
        tensors[name] = TensorInfo(name, dtype, e.shape, shards[e.shard_id], e.offset, e.size, byteorder,
                                   storage=name, extra=_extra(name, e.shape, extra))

    files = (path,) + tuple(shards[i] for i in sorted(sizes))
    ckpt = Checkpoint(path=prefix, format="tf-bundle", tensors=tensors, files=files,
                      metadata={"tf.num_shards": str(num_shards), "tf.endianness": byteorder,
                                "tf.version": str(header["version"].get(1, 0))})

    if partitioned:
        ckpt.readers[path] = read_partitioned
    ckpt.metadata["tf.partitioned"] = str(len(partitioned))
    graph = tensors.get(OBJECT_GRAPH_KEY)
    if graph is not None and graph.dtype == "STR" and graph.numel == 1:
        _adopt_model_variables(ckpt, object_graph(read_bytes(graph.file, graph.offset or 0, graph.nbytes)))
    return ckpt


# ---------------------------------------------------------------- TF2 object graph
OBJECT_GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"
_VALUE_SUFFIX = "/.ATTRIBUTES/VARIABLE_VALUE"


def string_scalar(raw: bytes) -> bytes:
    """A DT_STRING scalar's bytes: varint64 length, 4-byte masked crc32c of the lengths, the string."""
    n, pos = varint(raw, 0)
    if pos + 4 + n > len(raw):
        raise _Bad(f"string tensor of {n} bytes runs past its {len(raw)}-byte entry")
    return raw[pos + 4:pos + 4 + n]


def object_graph(raw: bytes) -> list[tuple[list[tuple[int, str]], list[str]]]:
    """TrackableObjectGraph (tensorflow/core/protobuf/trackable_object_graph.proto): per node, its
    children (node id, local name) and the checkpoint keys of its attributes."""
    nodes = []
    for num, _, node in fields(string_scalar(raw)):
        if num != 1:
            continue
        children, keys = [], []
        for n, _, v in fields(node):  # type: ignore[arg-type]
            if n == 1:
                ref = {a: b for a, _, b in fields(v)}  # type: ignore[arg-type]
                children.append((int(ref.get(1, 0)), bytes(ref.get(2, b"")).decode("utf-8", "replace")))  # type: ignore[arg-type]
            elif n == 2:
                attr = {a: b for a, _, b in fields(v)}  # type: ignore[arg-type]
                keys.append(bytes(attr.get(3, b"")).decode("utf-8", "replace"))  # type: ignore[arg-type]
        nodes.append((children, keys))
    return nodes


def _adopt_model_variables(ckpt: Checkpoint, nodes: list[tuple[list[tuple[int, str]], list[str]]]) -> None:
    """Keras 3 under tf.train.Checkpoint keys the model's variables by their first path in the object
    graph, which runs through `optimizer/_trainable_variables/N`. A variable also reachable without
    passing the optimizer belongs to the model: name it by that path (the TF key stays in extra)."""
    if not nodes:
        return
    path: dict[int, list[str]] = {0: []}
    queue = [0]
    while queue:                               # breadth first, as TF assigns keys
        node = queue.pop(0)
        for child, local in nodes[node][0]:
            if child in path or not 0 <= child < len(nodes) or (node == 0 and local == "optimizer"):
                continue
            path[child] = path[node] + [local]
            queue.append(child)
    adopted = 0
    for node, (_, keys) in enumerate(nodes):
        for key in keys:
            if node in path and key.startswith("optimizer/") and key in ckpt.tensors and key.endswith(_VALUE_SUFFIX):
                new = "/".join(path[node]) + _VALUE_SUFFIX
                if new in ckpt.tensors:
                    continue
                info = ckpt.tensors.pop(key)
                extra = {**info.extra, "checkpoint_key": key}
                layout = _extra(new, info.shape, {}).get("layout")
                if layout:
                    extra["layout"] = layout
                ckpt.tensors[new] = replace(info, name=new, extra=extra)
                adopted += 1
    if adopted:
        ckpt.tensors = dict(sorted(ckpt.tensors.items()))
        ckpt.notes.append(f"object graph: {adopted} variable(s) keyed under optimizer/ are the model's own "
                          "(reachable from it); shown under their model path, TF's key in extra.checkpoint_key")


def read_partitioned(info: TensorInfo, start: int, count: int) -> np.ndarray:
    """Elements [start, start + count) of a partitioned variable: the flat range is split into
    rectangles (strided.rectangles), and each is filled from the slices it overlaps, reading from
    each slice (a C-contiguous array of its extent) only the overlapping part."""
    parts = info.extra.get("partitions")
    if not isinstance(parts, list):
        raise ValueError(f"{info.name}: not a partitioned variable")
    import contextlib

    import numpy as np

    from ..core.io import RawFile, _void, gather, rectangles

    isz = info.dt.bits // 8
    if isz * 8 != info.dt.bits:
        raise ValueError(f"{info.name}: partitioned {info.dtype} (sub-byte) is not supported")
    slices = []
    for p in parts:
        lo = tuple(s for s, _ in p["extent"])
        size = tuple(n for _, n in p["extent"])
        if p["bytes"] != math.prod(size) * isz or len(lo) != len(info.shape):
            raise ValueError(f"{info.name}: slice {p['extent']} holds {p['bytes']} bytes")
        slices.append((lo, size, contiguous_strides(size), p))
    out = np.empty(count * isz, dtype=np.uint8)
    void = _void(isz)
    filled = 0
    with contextlib.ExitStack() as stack:
        files: dict[str, RawFile] = {}
        pos = 0
        for lo, size in rectangles(info.shape, start, count):
            n = math.prod(size)
            block = out[pos * isz:(pos + n) * isz].view(void).reshape(size)
            pos += n
            for plo, psize, pstrides, p in slices:
                a = tuple(max(x, y) for x, y in zip(lo, plo))
                b = tuple(min(x + m, y + k) for x, m, y, k in zip(lo, size, plo, psize))
                if any(j >= k for j, k in zip(a, b)):
                    continue
                shape = tuple(k - j for j, k in zip(a, b))
                f = files.get(p["file"])
                if f is None:
                    f = files[p["file"]] = RawFile(stack.enter_context(open(p["file"], "rb", buffering=0)), p["file"])
                at = p["offset"] + sum((j - y) * s for j, y, s in zip(a, plo, pstrides)) * isz
                if shape == size:   # the slice holds the whole rectangle: read it in place
                    gather(f, at, isz, shape, pstrides, block.view(np.uint8).reshape(-1))
                else:
                    part = np.empty(math.prod(shape) * isz, dtype=np.uint8)
                    gather(f, at, isz, shape, pstrides, part)
                    block[tuple(slice(j - x, k - x) for j, k, x in zip(a, b, lo))] = part.view(void).reshape(shape)
                filled += math.prod(shape)
    if filled != count:   # the slices were checked to cover the shape once at open; not to overlap
        raise ValueError(f"{info.name}: its slices cover {filled} of the {count} elements asked for")
    return dtypes.decode(out, info.dtype, count, info.byteorder)


def _extra(name: str, shape: tuple[int, ...], extra: dict) -> dict:
    layout = dense_layout(name, shape)
    if layout:
        extra["layout"] = layout
    return extra


# ---------------------------------------------------------------- checksums
def verify(ckpt: Checkpoint, chunk_bytes: int = VERIFY_CHUNK) -> list[str]:
    """Check the index blocks' and every tensor's masked crc32c; raise CorruptCheckpointError on a
    mismatch. Tensor bytes are streamed in chunks."""
    from . import crc32c as _crc

    index = ckpt.files[0]
    try:
        read_table(index, verify=True)
    except _Bad as e:
        raise CorruptCheckpointError(index, str(e)) from None
    checked = 0

    def stream(file: str, name: str, offset: int, size: int, crc: int) -> int:
        with open(file, "rb") as f:
            f.seek(offset)
            left = size
            while left:
                block = f.read(min(chunk_bytes, left))
                if not block:
                    raise CorruptCheckpointError(file, f"tensor {name!r}: file ends before its {size} bytes")
                crc = _crc.crc32c(block, crc)
                left -= len(block)
        return crc

    def string_crc(file: str, name: str, offset: int, size: int, numel: int) -> int:
        """tensor_bundle.cc WriteStringTensor: the crc covers each length as a little-endian uint32
        (uint64 when it does not fit; not the varints on disk), then the 4-byte masked length
        checksum, then the string bytes."""
        head = read_bytes(file, offset, min(size, 10 * numel + 4))
        pos, crc, total = 0, 0, 0
        for _ in range(numel):
            try:
                n, pos = varint(head, pos)
            except _Bad as e:
                raise CorruptCheckpointError(file, f"tensor {name!r}: {e}") from None
            crc = _crc.crc32c(struct.pack("<I" if n <= 0xFFFFFFFF else "<Q", n), crc)
            total += n
        if pos + 4 + total != size:
            raise CorruptCheckpointError(file, f"tensor {name!r}: string lengths add up to {pos + 4 + total} bytes, "
                                               f"the entry holds {size}")
        (stored_len,) = struct.unpack_from("<I", head, pos)
        if stored_len != _crc.mask(crc):
            raise CorruptCheckpointError(file, f"tensor {name!r}: crc32c mismatch in its string lengths")
        crc = _crc.crc32c(head[pos:pos + 4], crc)
        return stream(file, name, offset + pos + 4, total, crc)

    def check(t: TensorInfo, file: str, offset: int, size: int, stored: int | None) -> None:
        nonlocal checked
        if stored is None:
            return
        if t.dtype == "STR":
            crc = string_crc(file, t.name, offset, size, t.numel)
        else:
            crc = stream(file, t.name, offset, size, 0)
        if _crc.mask(crc) != stored:
            raise CorruptCheckpointError(file, f"tensor {t.name!r}: crc32c mismatch (stored {stored:#010x}, "
                                               f"computed {_crc.mask(crc):#010x})")
        checked += 1

    for t in ckpt:
        parts = t.extra.get("partitions")
        if isinstance(parts, list):
            for p in parts:
                check(t, p["file"], p["offset"], p["bytes"], p["crc32c"])
        else:
            check(t, t.file, t.offset or 0, t.nbytes, t.extra.get("crc32c"))  # type: ignore[arg-type]
    return [f"verified: {checked} tensor crc32c checksums and the index block checksums match"]


register(Format("tf-bundle", accept, open_bundle, (".index",), verify=verify))
# A folder's (or a user's) `checkpoint` state file names the latest prefix.
_FILE_HOOKS["checkpoint"] = open_pointer
