"""Flax msgpack checkpoints: `flax_model.msgpack` as transformers' FlaxPreTrainedModel.save_pretrained writes
it (docs/flax.md, docs/formats.md "Flax msgpack").

Layout (flax/serialization.py, `to_bytes` -> `msgpack_serialize`): one msgpack map (the state dict:
nested maps keyed by strings); each numpy/jax array leaf is a msgpack ExtType of code 1
(`_MsgpackExtType.ndarray`) whose payload is itself msgpack of the 3-array (shape, dtype name, raw
C-order bytes) (`_ndarray_to_bytes`: `arr.dtype.name`, `arr.tobytes('C')`, so native byte order, which
is little-endian on every host flax runs on); a numpy scalar is code 3 (`npscalar`) with the same
payload of shape (); a Python complex is code 2 (`native_complex`, msgpack of (real, imag)). An array
over 1 GiB (MAX_CHUNK_SIZE) is stored as a map {"__msgpack_chunked_array__": True, "shape": {"0": d0,
...}, "chunks": {"0": 1-D array, ...}} (`_chunk`), read back here as one tensor over its chunks.

Opening walks the msgpack bytes with offsets and reads structure only: the `msgpack` package cannot
skip an ext payload without reading it into memory (its Unpacker hands an ext over whole, and
`skip()` buffers it too), so the walk is ours (formats/msgpack_walk.py), and `msgpack` decodes only the first bytes of each
array's payload (the shape and dtype); the raw bytes' file offset is recorded and values are read on
demand by core.tensor.read_flat_file. Every count and length is checked against the bytes left in the
file before it is looped on or read; nesting is bounded (MAX_DEPTH).

Names are the map keys joined by "." (`bert.encoder.layer.0.attention.self.query.kernel`). A Dense
`kernel` of rank 2 is marked `extra["layout"] = "in_out"`, as transformers' PyTorch <-> Flax converter
transposes it (modeling_flax_pytorch_utils.rename_key_and_reshape_tensor); the Flax spellings `embedding`
and LayerNorm `scale` map onto PyTorch's `weight` in families/framework/infer.py.
"""
from __future__ import annotations

from typing import Any

import msgpack

from ..core import Checkpoint, TensorInfo, dtypes
from ..core.files import open_regular, size_of
from ..core.io import pread
from ..core.tensor import read_flat_file
from ..errors import CorruptCheckpointError
from .msgpack_walk import BIN, EXT_NDARRAY, EXT_NPSCALAR, Source, looks_like_flax, walk
from .registry import Format, Probe, register

MAX_RANK = 64              # numpy's NPY_MAXDIMS
_PAYLOAD_HEAD = 1024       # (shape, dtype) of an array's payload fit here: 64 dims x 9 bytes + a dtype name

CHUNKED = "__msgpack_chunked_array__"              # flax.serialization._chunk

FLAX_DTYPES = dtypes.NUMPY_NAMES   # flax.serialization writes `arr.dtype.name`


def _array(src: Source, name: str, code: int, start: int, n: int, file: str) -> TensorInfo:
    """The (shape, dtype, raw bytes) payload of an ndarray/npscalar ext at `start`, `n` bytes (the source's
    position is left where it was)."""
    back, src.pos = src.pos, start
    head = src.take(min(n, _PAYLOAD_HEAD), f"{name!r}: array header")
    src.pos = back
    unpacker = msgpack.Unpacker(raw=False, max_buffer_size=len(head) + 1, max_array_len=MAX_RANK, max_str_len=64,
                                max_bin_len=0, max_map_len=0, max_ext_len=0)
    unpacker.feed(head)
    try:
        if unpacker.read_array_header() != 3:
            raise ValueError("not a (shape, dtype, bytes) triple")
        shape, dtype = unpacker.unpack(), unpacker.unpack()
    except (msgpack.OutOfData, ValueError, TypeError, msgpack.UnpackException) as e:
        raise src.fail(f"array {name!r} at offset {start:,}: malformed (shape, dtype, bytes) header ({e})") from None
    if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) for d in shape):
        raise src.fail(f"array {name!r}: shape {shape!r} is not a list of integers")
    if not isinstance(dtype, str) or dtype not in FLAX_DTYPES:
        raise src.fail(f"array {name!r}: dtype {str(dtype)[:64]!r} is not one ckptstat reads")
    pos = unpacker.tell()
    marker = head[pos] if pos < len(head) else -1
    if marker not in BIN or pos + 1 + BIN[marker] > len(head):
        raise src.fail(f"array {name!r}: its raw bytes are not a msgpack bin")
    width = BIN[marker]
    stored = int.from_bytes(head[pos + 1:pos + 1 + width], "big")
    offset = start + pos + 1 + width
    if offset + stored != start + n:
        raise src.fail(f"array {name!r}: its bytes ({stored:,}) do not fill its ext payload ({n:,} bytes)")
    extra: dict[str, object] = {"scalar": True} if code == EXT_NPSCALAR else {}
    if len(shape) in (2, 4) and name.rsplit(".", 1)[-1] == "kernel":
        # transformers' converter: a Dense kernel is PyTorch's weight.T, a Conv kernel weight.transpose(2, 3, 1, 0)
        extra["layout"] = "in_out" if len(shape) == 2 else "hwio"
    t = TensorInfo(name, FLAX_DTYPES[dtype], tuple(shape), file, offset, stored, extra=extra)   # validates the shape
    if t.byte_size != stored:
        raise src.fail(f"array {name!r} ({dtype}, shape {tuple(shape)}) needs {t.byte_size:,} bytes, the file holds {stored:,}")
    return t


def _chunked(path: str, tensors: dict[str, TensorInfo], scalars: dict[str, Any]) -> None:
    """Arrays flax split into chunks (serialization._chunk) become one tensor over their chunks' bytes."""
    for flag in [k for k, v in scalars.items() if v is True and k.rsplit(".", 1)[-1] == CHUNKED]:
        prefix = flag[:-len(CHUNKED)]
        name = prefix.rstrip(".")
        del scalars[flag]
        dims: list[int] = []
        while f"{prefix}shape.{len(dims)}" in scalars:
            dims.append(scalars.pop(f"{prefix}shape.{len(dims)}"))
        parts: list[TensorInfo] = []
        while f"{prefix}chunks.{len(parts)}" in tensors:
            parts.append(tensors.pop(f"{prefix}chunks.{len(parts)}"))
        if not parts or any(len(p.shape) != 1 or p.dtype != parts[0].dtype for p in parts):
            raise CorruptCheckpointError(path, f"chunked array {name!r}: its chunks are not 1-D arrays of one dtype")
        chunks = tuple((p.offset or 0, p.numel) for p in parts)
        # the bytes are not one run (ext headers between the chunks): no offset, read_chunks reads them
        t = TensorInfo(name, parts[0].dtype, tuple(dims), path, parts[0].offset if len(parts) == 1 else None,
                       sum(p.nbytes for p in parts), extra={"chunks": chunks})
        if t.numel != sum(p.numel for p in parts):
            raise CorruptCheckpointError(path, f"chunked array {name!r}: shape {tuple(dims)} but its chunks hold "
                                               f"{sum(p.numel for p in parts):,} elements")
        if name in tensors or not name:
            raise CorruptCheckpointError(path, f"chunked array {name!r} has the name of another array")
        tensors[name] = t


def read_chunks(info: TensorInfo, start: int, count: int) -> Any:
    """Elements [start, start + count) of a tensor; a chunked one's come from each chunk's bytes in turn."""
    chunks = info.extra.get("chunks")
    if not isinstance(chunks, tuple):
        return read_flat_file(info, start, count)
    import numpy as np

    out, first = [], 0
    for offset, n in chunks:
        lo, hi = max(start, first), min(start + count, first + n)
        if lo < hi:
            piece = TensorInfo(info.name, info.dtype, (n,), info.file, offset, info.dt.nbytes(n))
            out.append(read_flat_file(piece, lo - first, hi - lo))
        first += n
    return np.concatenate(out) if out else read_flat_file(info, 0, 0)


def open_flax(path: str) -> Checkpoint:
    with open_regular(path) as f:
        size = size_of(f)
        src = Source(path, size, lambda at, n: pread(f, n, at))
        tensors: dict[str, TensorInfo] = {}
        others = 0

        def on_ext(name: str, code: int, start: int, n: int) -> None:   # its payload's head is in the window now
            nonlocal others
            if code not in (EXT_NDARRAY, EXT_NPSCALAR):
                others += 1
            elif name in tensors:
                raise src.fail(f"two arrays are named {name!r} (a repeated key, or a key holding '.')")
            else:
                tensors[name] = _array(src, name, code, start, n, path)

        scalars: dict[str, Any] = {}
        skipped = walk(src, on_ext, scalars) + others
        if src.pos != size:
            raise src.fail(f"{size - src.pos:,} bytes follow the top-level map (msgpack's ExtraData)")
    _chunked(path, tensors, scalars)
    ckpt = Checkpoint(path=path, format="flax (msgpack)", tensors=tensors, files=(path,))
    if any("chunks" in t.extra for t in tensors.values()):
        ckpt.readers[path] = read_chunks
    skipped += len(scalars)
    if skipped:
        ckpt.notes.append(f"{skipped} leaf value(s) that are not arrays (Python numbers, strings, complex) are not tensors")
    return ckpt


def accept(probe: Probe) -> bool:
    """Registered last: never steals a file (looks_like_flax)."""
    return looks_like_flax(probe.head, whole=len(probe.head) >= probe.size)


# transformers' flax_shard_checkpoint keys flax_model.msgpack.index.json's weight_map by flatten_dict(params, sep="/")
register(Format("flax (msgpack)", accept, open_flax, (".msgpack",), index_name=lambda n: n.replace("/", "."),
                fallback=True))
