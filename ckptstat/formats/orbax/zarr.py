"""zarr v2 and v3 array metadata and chunks, as tensorstore writes them for orbax (docs/orbax.md).

- zarr v2 (`<array>/.zarray`): {"zarr_format": 2, "shape", "chunks", "dtype" (a numpy type string, `<f4`, or an
  ml_dtypes name, `bfloat16`), "compressor" (null, {"id": "zstd" | "gzip" | "zlib"}), "filters": null, "order": "C",
  "fill_value", "dimension_separator" ("." default)}; chunk (i, j) is `<array>/i.j`, a 0-d array's `<array>/0`.
- zarr v3 (`<array>/zarr.json`): {"zarr_format": 3, "node_type": "array", "shape", "data_type" (a numpy name),
  "chunk_grid": {"name": "regular", "configuration": {"chunk_shape"}}, "chunk_key_encoding": {"name": "default"
  (`c/i/j`, a 0-d array's `c`) | "v2" (`i.j`)}, "fill_value", "codecs"}; the codecs ckptstat decodes: `bytes`
  (endian) then `zstd` / `gzip` / `crc32c`, or one `sharding_indexed` (orbax's: each chunk a shard of inner chunks,
  its index of (offset, nbytes) uint64 pairs per inner chunk at its end or start, 2^64-1 twice for an absent one,
  through `bytes` and `crc32c` codecs).

Every chunk is stored whole (zarr pads an edge chunk to the chunk shape): a chunk decodes to exactly its chunk's
bytes, or is refused. A chunk absent from the store holds the fill value (orbax writes every chunk)."""
from __future__ import annotations

import io
import json
import math
import tempfile
import zlib
from dataclasses import dataclass
from typing import IO, Any

from ...core import dtypes
from ...errors import CheckpointError, CorruptCheckpointError
from .ocdbt import zstandard_module

MAX_RANK = 64
CODECS = ("zstd", "gzip", "zlib")
NO_CHUNK = 2**64 - 1
SPOOL = 8 << 20        # a decoded chunk held in memory up to this size, else in a temporary file
BLOCK = 1 << 20


@dataclass(frozen=True)
class Array:
    """One zarr array: where its chunks are and how they decode."""
    name: str
    dtype: str                   # canonical (core/dtypes.py)
    byteorder: str
    shape: tuple[int, ...]
    chunks: tuple[int, ...]      # the grid's chunk shape (v3 sharded: the shard's)
    inner: tuple[int, ...]       # the chunk shape values are stored in (v3 sharded: the inner chunks'; else chunks)
    codec: str | None            # compression of a stored (inner) chunk
    separator: str
    v3_default_keys: bool        # v3 "default" chunk key encoding: `c/i/j`
    sharded: bool = False
    index_at_end: bool = True
    index_crc: bool = False
    fill_zero: bool = True

    def key(self, coords: tuple[int, ...]) -> str:
        """The store key of the (outer) chunk at grid `coords`, after `<name>/`."""
        if self.v3_default_keys:
            return self.separator.join(("c", *map(str, coords)))
        return self.separator.join(map(str, coords)) if coords else "0"

    @property
    def inner_bytes(self) -> int:
        return dtypes.get(self.dtype).nbytes(math.prod(self.inner))


def _ints(v: object, what: str, rank: int | None = None) -> tuple[int, ...]:
    if not isinstance(v, list) or len(v) > MAX_RANK or not all(type(d) is int and d >= 0 for d in v):
        raise ValueError(f"{what} {str(v)[:80]} is not a list of at most {MAX_RANK} non-negative integers")
    if rank is not None and len(v) != rank:
        raise ValueError(f"{what} has {len(v)} dimensions, the array {rank}")
    return tuple(v)


def _dtype(name: object) -> tuple[str, str]:
    """(canonical dtype, byte order) of a zarr v2 type string (`<f4`, `|b1`, `bfloat16`) or a v3 data_type name."""
    if not isinstance(name, str) or len(name) > 32:
        raise ValueError(f"dtype {str(name)[:40]!r} is not a name")
    if name in dtypes.NUMPY_NAMES:
        return dtypes.NUMPY_NAMES[name], "little"
    if name[:1] in ("<", ">", "|", "=") and name[1:] in dtypes.NUMPY_CODES:
        return dtypes.NUMPY_CODES[name[1:]], "big" if name[0] == ">" else "little"
    raise ValueError(f"dtype {name!r} is not one ckptstat reads")


def _fill_zero(v: object) -> bool:
    return v is None or (type(v) in (int, float, bool) and v == 0) or v in ("0x0", "0x0000")


def parse(text: bytes, file: str, name: str) -> Array:
    """The array `name` from its `.zarray` / `zarr.json` bytes."""
    try:
        meta = json.loads(text)
        if not isinstance(meta, dict):
            raise ValueError("not a JSON object")
        fmt = meta.get("zarr_format")
        shape = _ints(meta.get("shape"), "shape")
        if fmt == 2:
            return _v2(meta, name, shape)
        if fmt == 3:
            return _v3(meta, name, shape)
        raise ValueError(f"zarr_format {str(fmt)[:20]} (2 or 3)")
    except (ValueError, RecursionError) as e:
        raise CorruptCheckpointError(file, f"array {name!r}: zarr metadata: {e}") from None


def _v2(meta: dict[str, Any], name: str, shape: tuple[int, ...]) -> Array:
    chunks = _ints(meta.get("chunks"), "chunks", len(shape))
    dtype, order = _dtype(meta.get("dtype"))
    comp = meta.get("compressor")
    codec = None if comp is None else comp.get("id") if isinstance(comp, dict) else comp
    if codec is not None and codec not in CODECS:
        raise ValueError(f"compressor {str(codec)[:40]!r} (ckptstat decodes {', '.join(CODECS)} or none)")
    if meta.get("filters") not in (None, []):
        raise ValueError("filters, which ckptstat does not decode")
    if meta.get("order", "C") != "C":
        raise ValueError(f"order {str(meta.get('order'))[:8]!r} (ckptstat reads C order)")
    sep = meta.get("dimension_separator", ".")
    if sep not in (".", "/"):
        raise ValueError(f"dimension_separator {str(sep)[:8]!r}")
    _check_grid(shape, chunks)
    return Array(name, dtype, order, shape, chunks, chunks, codec, sep, False, fill_zero=_fill_zero(meta.get("fill_value")))


def _check_grid(shape: tuple[int, ...], chunks: tuple[int, ...]) -> None:
    if 0 in chunks and math.prod(shape) > 0:
        raise ValueError(f"chunk shape {list(chunks)} has a zero dimension")


def _bytes_chain(codecs: object, what: str, index: bool = False) -> tuple[str, str | None, bool]:
    """(byte order, compression, crc32c) of an array->bytes chain: `bytes`, then at most one compressor, and (a shard
    index's chain only: a chunk's checksum is not decoded) crc32c."""
    if not isinstance(codecs, list) or not codecs or len(codecs) > 8:
        raise ValueError(f"{what}: not a list of codecs")
    order, codec, crc = "little", None, False
    for i, c in enumerate(codecs):
        cname = c.get("name") if isinstance(c, dict) else None
        conf = c.get("configuration") or {} if isinstance(c, dict) else {}
        if not isinstance(conf, dict):
            raise ValueError(f"{what}: codec {i}'s configuration is not an object")
        if i == 0:
            if cname != "bytes":
                raise ValueError(f"{what}: codec {str(cname)[:40]!r} first (ckptstat decodes `bytes` first)")
            order = {"little": "little", "big": "big", None: "little"}.get(conf.get("endian"), "")
            if not order:
                raise ValueError(f"{what}: endian {str(conf.get('endian'))[:20]!r}")
        elif cname in ("zstd", "gzip") and codec is None and not crc:
            codec = str(cname)
        elif cname == "crc32c" and not crc and index:
            crc = True
        else:
            raise ValueError(f"{what}: codec {str(cname)[:40]!r} (ckptstat decodes bytes, then zstd or gzip"
                             f"{', then crc32c' if index else ''})")
    return order, codec, crc


def _v3(meta: dict[str, Any], name: str, shape: tuple[int, ...]) -> Array:
    if meta.get("node_type", "array") != "array":
        raise ValueError(f"node_type {str(meta.get('node_type'))[:20]!r}")
    dtype, _ = _dtype(meta.get("data_type"))
    grid = meta.get("chunk_grid")
    if not (isinstance(grid, dict) and grid.get("name") == "regular" and isinstance(grid.get("configuration"), dict)):
        raise ValueError("chunk_grid is not a regular grid")
    chunks = _ints(grid["configuration"].get("chunk_shape"), "chunk_shape", len(shape))
    _check_grid(shape, chunks)
    enc = meta.get("chunk_key_encoding") or {"name": "default"}
    conf = enc.get("configuration") or {} if isinstance(enc, dict) else {}
    if not isinstance(enc, dict) or enc.get("name") not in ("default", "v2") or not isinstance(conf, dict):
        raise ValueError("chunk_key_encoding is neither default nor v2")
    default = enc["name"] == "default"
    sep = conf.get("separator", "/" if default else ".")
    if sep not in (".", "/"):
        raise ValueError(f"chunk key separator {str(sep)[:8]!r}")
    codecs = meta.get("codecs")
    fill = _fill_zero(meta.get("fill_value"))
    first = codecs[0] if isinstance(codecs, list) and codecs else None
    if isinstance(first, dict) and first.get("name") == "sharding_indexed":
        if not isinstance(codecs, list) or len(codecs) != 1:
            raise ValueError("codecs after sharding_indexed")
        sc = first.get("configuration")
        if not isinstance(sc, dict):
            raise ValueError("sharding_indexed without a configuration")
        inner = _ints(sc.get("chunk_shape"), "sharding chunk_shape", len(shape))
        if any(i == 0 or c % i for c, i in zip(chunks, inner)):
            raise ValueError(f"sharding chunk_shape {list(inner)} does not divide the chunk shape {list(chunks)}")
        order, codec, _ = _bytes_chain(sc.get("codecs"), "sharding codecs")
        index_order, index_codec, index_crc = _bytes_chain(sc.get("index_codecs"), "index_codecs", index=True)
        if index_order != "little" or index_codec is not None:
            raise ValueError("a shard index ckptstat does not decode (little-endian bytes and crc32c only)")
        where = sc.get("index_location", "end")
        if where not in ("end", "start"):
            raise ValueError(f"index_location {str(where)[:20]!r}")
        return Array(name, dtype, order, shape, chunks, inner, codec, sep, default, True, where == "end", index_crc,
                     fill)
    order, codec, _ = _bytes_chain(codecs, "codecs")
    return Array(name, dtype, order, shape, chunks, chunks, codec, sep, default, fill_zero=fill)


def index_bytes(arr: Array) -> int:
    """Bytes of a shard's index (sharded v3 arrays)."""
    return 16 * math.prod(c // i for c, i in zip(arr.chunks, arr.inner)) + (4 if arr.index_crc else 0)


def shard_index(arr: Array, raw: bytes, shard_bytes: int, file: str) -> list[tuple[int, int]]:
    """(offset, nbytes) of each inner chunk of a `shard_bytes`-byte shard from its index's bytes, C order
    ((NO_CHUNK, NO_CHUNK): absent), each checked against the shard."""
    import numpy as np

    n = (len(raw) - (4 if arr.index_crc else 0)) // 16
    if arr.index_crc:
        from ..crc32c import crc32c
        if crc32c(raw[:-4]) != int.from_bytes(raw[-4:], "little"):
            raise CorruptCheckpointError(file, f"array {arr.name!r}: a shard index's crc32c mismatch")
    out = []
    for off, nb in np.frombuffer(raw, "<u8", 2 * n).reshape(n, 2).tolist():
        if off == NO_CHUNK and nb == NO_CHUNK:
            out.append((NO_CHUNK, NO_CHUNK))
        elif off > shard_bytes or nb > shard_bytes - off:
            raise CorruptCheckpointError(file, f"array {arr.name!r}: a shard index entry of {nb:,} bytes at offset "
                                               f"{off:,} in a {shard_bytes:,}-byte shard")
        else:
            out.append((off, nb))
    return out


def decode_chunk(arr: Array, src: io.RawIOBase | IO[bytes], file: str, what: str) -> IO[bytes]:
    """One stored (inner) chunk decompressed into a spooled temporary file (in memory up to SPOOL bytes), exactly the
    chunk's bytes or refused; read in blocks, never whole."""
    want = arr.inner_bytes
    out = tempfile.SpooledTemporaryFile(max_size=SPOOL)
    done = 0

    def put(block: bytes) -> None:
        nonlocal done
        done += len(block)
        if done > want:
            raise CorruptCheckpointError(file, f"{what}: decodes to more than the chunk's {want:,} bytes")
        out.write(block)

    try:
        if arr.codec is None:
            while block := src.read(BLOCK):
                put(block)
        elif arr.codec == "zstd":
            zstandard = zstandard_module(f"{file}: zstd-compressed zarr chunks")
            try:
                reader = zstandard.ZstdDecompressor().stream_reader(src, read_across_frames=True)
                while block := reader.read(BLOCK):
                    put(block)
            except zstandard.ZstdError as e:
                raise CorruptCheckpointError(file, f"{what}: zstd: {e}") from None
        else:
            d = zlib.decompressobj(16 + zlib.MAX_WBITS if arr.codec == "gzip" else zlib.MAX_WBITS)
            try:
                while block := src.read(BLOCK):
                    put(d.decompress(block, want + 1 - done))
                    if d.unconsumed_tail:
                        raise CorruptCheckpointError(file, f"{what}: decodes to more than the chunk's {want:,} bytes")
                put(d.flush())
            except zlib.error as e:
                raise CorruptCheckpointError(file, f"{what}: {arr.codec}: {e}") from None
        if done != want:
            raise CorruptCheckpointError(file, f"{what}: decodes to {done:,} bytes, the chunk's {want:,}")
    except BaseException:
        out.close()
        raise
    return out


def refuse_fill(arr: Array, file: str) -> CheckpointError:
    return CheckpointError(file, f"array {arr.name!r}: a chunk is absent and its fill value is not zero, which "
                                 "ckptstat does not decode")
