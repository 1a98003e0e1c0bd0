"""GGUF, the llama.cpp / ggml file (docs/formats.md section 6; ggml docs/gguf.md, ggml/src/gguf.cpp, gguf-py).

Layout, little-endian: `GGUF`, u32 version (2 or 3), u64 tensor_count, u64 kv_count; kv_count key-values
(string key, u32 value type, value); tensor_count tensor infos (string name, u32 n_dims (gguf.cpp: <= 4), n_dims x u64
dims with ne[0] the fastest-varying, u32 ggml type, u64 offset); then padding to `general.alignment`
(default 32) and the data section, where each tensor's offset is relative to the section's start.
A string is a u64 byte length and UTF-8 bytes.

Every count and length is checked against the bytes the file has left before anything is allocated
or looped over, as gguf.cpp's reader does (gguf_reader::read with its size checks, gguf_init_from_file_impl),
and against core.limits (key and tensor counts, name and string lengths: a Python object costs far more
than the bytes that describe it). The header is read with positioned reads, not a memory map: a file
truncated while it is parsed ends in an error, never in SIGBUS.
"""
from __future__ import annotations

import math
import re
import struct
from typing import IO, TYPE_CHECKING, Any

from ..core import Checkpoint, TensorInfo, dtypes
from ..core.files import file_size, open_regular
from ..core.io import pread, read_bytes
from ..core.limits import limits
from ..core.tensor import INT64_MAX, read_flat_file  # INT64_MAX: ggml's ne[] are int64_t too (gguf.cpp rejects past it)
from ..errors import CheckpointError, CorruptCheckpointError
from .gguf_split import Split, open_set, split_keys
from .registry import Format, Probe, register

if TYPE_CHECKING:  # numpy is imported where values are read, not on the header-only path
    from numpy.typing import NDArray

MAGIC = b"GGUF"
VERSIONS = (2, 3)          # version 1 had 32-bit counts and lengths; llama.cpp dropped it
DEFAULT_ALIGNMENT = 32     # GGUF_DEFAULT_ALIGNMENT
# A bound on a header's rank: llama.cpp's gguf.cpp refuses past GGML_MAX_DIMS (4), but gguf-py writes and reads any
# rank, and ComfyUI-GGUF's video models (Wan, HunyuanVideo) keep their 5-D patch embeddings (tools/fix_5d_tensors.py)
MAX_DIMS = 8
# ComfyUI-GGUF's record of a tensor's shape before it was flattened to rows of 256 for quantisation (tools/convert.py
# `shape_fix`: SD 1.x, XL), which its loader reads back: the tensor's logical shape, its elements in the same order
ORIG_SHAPE = "comfy.gguf.orig_shape."

# ggml type code (gguf-py constants.py GGMLQuantizationType) -> canonical dtype in dtypes.DTYPES.
GGML_TYPES = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 6: "Q5_0", 7: "Q5_1", 8: "Q8_0", 9: "Q8_1",
    10: "Q2_K", 11: "Q3_K", 12: "Q4_K", 13: "Q5_K", 14: "Q6_K", 15: "Q8_K",
    16: "IQ2_XXS", 17: "IQ2_XS", 18: "IQ3_XXS", 19: "IQ1_S", 20: "IQ4_NL", 21: "IQ3_S", 22: "IQ2_S",
    23: "IQ4_XS", 24: "I8", 25: "I16", 26: "I32", 27: "I64", 28: "F64", 29: "IQ1_M", 30: "BF16",
    34: "TQ1_0", 35: "TQ2_0", 39: "MXFP4", 40: "NVFP4", 41: "Q1_0",
}

# Metadata value types (gguf-py GGUFValueType): code -> (short name, struct code; None: variable size).
STRING, ARRAY = 8, 9
VALUE_TYPES: dict[int, tuple[str, str | None]] = {
    0: ("u8", "B"), 1: ("i8", "b"), 2: ("u16", "H"), 3: ("i16", "h"), 4: ("u32", "I"), 5: ("i32", "i"),
    6: ("f32", "f"), 7: ("bool", "?"), STRING: ("str", None), ARRAY: ("array", None),
    10: ("u64", "Q"), 11: ("i64", "q"), 12: ("f64", "d"),
}
# Fewest bytes one value of a type can take: a string is at least its u64 length.
_MIN_SIZE = {code: struct.calcsize("<" + fmt) if fmt else 8 for code, (_, fmt) in VALUE_TYPES.items()}
_MIN_SIZE[ARRAY] = 12                      # u32 element type + u64 count
_MIN_KV = 8 + 4 + 1                        # key length, value type, one byte of value
_MIN_TENSOR_INFO = 8 + 4 + 4 + 8           # name length, n_dims, type, offset (rank 0)
_U64 = struct.Struct("<Q")
SHOWN_ARRAY_ITEMS = 8                      # short numeric arrays are shown whole; longer ones summarised


def accept(probe: Probe) -> bool:
    return probe.head[:4] == MAGIC


class _Cursor:
    """Reads the header through a window of the file (positioned reads, growing from FIRST_WINDOW to
    WINDOW bytes: over a URL each is one range request, and a small header costs one small request,
    docs/remote.md); every read is checked against the bytes left."""

    FIRST_WINDOW = 1 << 16
    WINDOW = 1 << 20

    def __init__(self, path: str, f: IO[bytes], size: int):
        self.path, self.f, self.size, self.pos = path, f, size, 0
        self.buf, self.base = b"", 0        # file bytes [base, base + len(buf))
        self.step = self.FIRST_WINDOW

    def bad(self, msg: str) -> CorruptCheckpointError:
        return CorruptCheckpointError(self.path, msg)

    @property
    def left(self) -> int:
        return self.size - self.pos

    def need(self, n: int, what: str) -> None:
        if n > self.left:
            raise self.bad(f"{what} needs {n} bytes at offset {self.pos}, but the file has {self.left} left")

    def window(self, n: int) -> int:
        """Make file bytes [pos, pos + n) available in self.buf; returns pos's index in it."""
        at = self.pos - self.base
        if at < 0 or at + n > len(self.buf):
            self.buf = pread(self.f, max(n, self.step), self.pos) if n else b""
            self.step = min(self.step * 2, self.WINDOW)
            self.base, at = self.pos, 0
            if len(self.buf) < n:
                raise self.bad(f"file ends at offset {self.pos + len(self.buf)}, before the {self.size}-byte size it had "
                               "when opened (truncated while being read?)")
        return at

    def unpack(self, fmt: str, what: str) -> tuple[Any, ...]:
        n = struct.calcsize("<" + fmt)
        self.need(n, what)
        at = self.window(n)   # (before reading self.buf: window() may replace it)
        out = struct.unpack_from("<" + fmt, self.buf, at)
        self.pos += n
        return out

    def u32(self, what: str) -> int:
        return int(self.unpack("I", what)[0])

    def u64(self, what: str) -> int:
        return int(self.unpack("Q", what)[0])

    def raw_string(self, what: str, cap: int | None = None) -> bytes:
        n = self.u64(f"length of {what}")
        self.need(n, f"{what} (a string of {n} bytes)")
        if cap is not None and n > cap:
            raise self.bad(f"{what} is a string of {n:,} bytes at offset {self.pos}, longer than the {cap:,} ckptstat "
                           "reads (--limit gguf_name_bytes)")
        at = self.window(n)
        data = bytes(self.buf[at:at + n])
        self.pos += n
        return data

    def name(self, what: str) -> str:
        raw = self.raw_string(what, limits().gguf_name_bytes)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise self.bad(f"{what} at offset {self.pos - len(raw)} is not valid UTF-8") from None

    def skip(self, n: int, what: str) -> None:
        self.need(n, what)
        self.pos += n

    def skip_strings(self, count: int, what: str) -> None:
        """Step over `count` strings (a tokenizer's vocabulary: 10^5 of them), checking each length;
        the strings of one window are stepped over without a call per string."""
        unpack = _U64.unpack_from
        i = 0
        while i < count:
            self.need(8, f"length of {what} item {i}")
            at = self.window(8)
            buf, base, pos = self.buf, self.base, self.pos
            while True:
                (n,) = unpack(buf, at)
                if n > self.size - (pos + 8):
                    self.pos = pos + 8
                    self.need(n, f"{what} item {i} (a string of {n} bytes)")
                pos += 8 + n
                i += 1
                at = pos - base
                if i >= count or at + 8 > len(buf):
                    break
            self.pos = pos


def _f32_text(x: float) -> str:
    """The shortest decimal that reads back as the same float32 (1e-05, not 9.999999747378752e-06)."""
    if not math.isfinite(x):
        return repr(x)
    for digits in range(6, 10):
        s = f"{x:.{digits}g}"
        if struct.pack("<f", float(s)) == struct.pack("<f", x):
            return s
    return repr(x)


def _scalar_text(code: int, value: object) -> str:
    if code == 7:
        return "true" if value else "false"
    if code == 6 and isinstance(value, float):
        return _f32_text(value)
    return repr(value) if isinstance(value, float) else str(value)


def _read_value(cur: _Cursor, code: int, key: str) -> tuple[str, object]:
    """(text for Checkpoint.metadata, the raw value for scalars: (element type, items) for a short array shown whole,
    None for other arrays and strings)."""
    if code not in VALUE_TYPES:
        raise cur.bad(f"key {key!r}: unknown value type {code}")
    if code == STRING:
        n = cur.u64(f"length of value of {key!r}")
        cur.need(n, f"value of {key!r} (a string of {n} bytes)")
        if n > limits().gguf_string_bytes:   # kept as metadata text: a long one (a chat template) is summarised
            cur.skip(n, f"value of {key!r}")
            return f"<string of {n:,} bytes>", None
        at = cur.window(n)
        data = bytes(cur.buf[at:at + n])
        cur.pos += n
        return data.decode("utf-8", "backslashreplace"), None
    fmt = VALUE_TYPES[code][1]
    if fmt is not None:   # a fixed-size scalar
        (value,) = cur.unpack(fmt, f"value of {key!r}")
        return _scalar_text(code, value), value
    elem = cur.u32(f"element type of array {key!r}")
    count = cur.u64(f"element count of array {key!r}")
    if elem not in VALUE_TYPES:
        raise cur.bad(f"array {key!r}: unknown element type {elem}")
    if elem == ARRAY:  # gguf.cpp: nested arrays are not supported
        raise cur.bad(f"array {key!r}: arrays of arrays are not supported")
    type_name, fmt = VALUE_TYPES[elem]
    if count > cur.left // _MIN_SIZE[elem]:
        raise cur.bad(f"array {key!r} claims {count} {type_name} items; the {cur.left} bytes left hold at most "
                      f"{cur.left // _MIN_SIZE[elem]}")
    if elem == STRING:
        cur.skip_strings(count, f"array {key!r}")
    elif count <= SHOWN_ARRAY_ITEMS:
        items = cur.unpack(f"{count}{fmt}", f"array {key!r}")
        return "[" + ", ".join(_scalar_text(elem, v) for v in items) + "]", (elem, items)
    else:
        cur.skip(count * _MIN_SIZE[elem], f"array {key!r}")
    return f"<array of {count} {type_name}>", None


_ARRAY_TEXT = re.compile(r"<array of (\d+) \w+>\Z")      # _read_value's summary of a long array
_STRING_TEXT = re.compile(r"<string of ([\d,]+) bytes>\Z")   # ... and of a long string


def array_length(text: str) -> int | None:
    """The items of an array value as Checkpoint.metadata holds it (_read_value: summarised, or shown whole)."""
    m = _ARRAY_TEXT.match(text)
    if m:
        return int(m.group(1))
    if text.startswith("[") and text.endswith("]"):
        return 0 if text == "[]" else text.count(",") + 1
    return None


def string_bytes(text: str) -> int:
    """The UTF-8 bytes of a string value as Checkpoint.metadata holds it (a long one summarised)."""
    m = _STRING_TEXT.match(text)
    return int(m.group(1).replace(",", "")) if m else len(text.encode("utf-8", "surrogateescape"))


def open_gguf(path: str) -> Checkpoint:
    """A GGUF file; a shard of a split set opens the whole set (formats/gguf_split.py)."""
    ckpt, split = _open_one(path)
    return ckpt if split is None else open_set(path, ckpt, split, _open_one)


def _open_one(path: str) -> tuple[Checkpoint, Split | None]:
    size = file_size(path)
    if size < 24:
        raise CorruptCheckpointError(path, f"file is {size} bytes, too short for a GGUF header (24)")
    with open_regular(path) as f:
        return _parse_file(path, f, size)


def _parse(path: str, f: IO[bytes], size: int) -> Checkpoint:
    return _parse_file(path, f, size)[0]


_INT_TYPES = frozenset({0, 1, 2, 3, 4, 5, 10, 11})   # u8 ... i32, u64, i64


def _counts(cur: _Cursor) -> tuple[int, int]:
    """The magic and version checked; (tensor_count, kv_count), each checked against the file and the limits."""
    at = cur.window(4)
    magic = bytes(cur.buf[at:at + 4])
    if magic != MAGIC:
        raise cur.bad(f"not a GGUF file (magic {magic!r})")
    cur.pos = 4
    version = cur.u32("version")
    if version not in VERSIONS:
        swapped = struct.unpack("<I", struct.pack(">I", version))[0]
        if swapped in VERSIONS:
            raise cur.bad(f"big-endian GGUF (version {swapped}) is not supported")
        raise cur.bad(f"GGUF version {version} is not supported (ckptstat reads versions 2 and 3)")
    tensor_count = cur.u64("tensor count")
    kv_count = cur.u64("key-value count")
    # Both counts bound loops and dicts: check them against what the file could hold, and the limits.
    lim = limits()
    if kv_count > lim.gguf_keys:
        raise cur.bad(f"kv_count {kv_count:,} is more than the {lim.gguf_keys:,} metadata keys ckptstat reads "
                      "(--limit gguf_keys)")
    if tensor_count > lim.gguf_tensors:
        raise cur.bad(f"tensor_count {tensor_count:,} is more than the {lim.gguf_tensors:,} tensors ckptstat reads "
                      "(--limit gguf_tensors)")
    if kv_count > cur.left // _MIN_KV:
        raise cur.bad(f"kv_count {kv_count} cannot fit in the {cur.size}-byte file (a key-value takes at least "
                      f"{_MIN_KV} bytes)")
    if tensor_count > (cur.left - kv_count * _MIN_KV) // _MIN_TENSOR_INFO:
        raise cur.bad(f"tensor_count {tensor_count} cannot fit in the {cur.size}-byte file "
                      f"(a tensor info takes at least {_MIN_TENSOR_INFO} bytes)")
    return tensor_count, kv_count


CHAT_TEMPLATE = "tokenizer.chat_template"   # and tokenizer.chat_template.<name> (gguf-py Keys.Tokenizer.CHAT_TEMPLATE*)


def chat_templates(path: str, f: IO[bytes], size: int, cap: int) -> dict[str, str | int]:
    """The file's chat templates by key, each read whole (its byte length instead when longer than `cap`), through the
    same checked reads as the header (analysis/scan/chat_templates.py judges them)."""
    cur = _Cursor(path, f, size)
    out: dict[str, str | int] = {}
    seen: set[str] = set()
    for i in range(_counts(cur)[1]):
        key = cur.name(f"key {i}")
        if key in seen:
            raise cur.bad(f"duplicate key {key!r}")
        seen.add(key)
        code = cur.u32(f"value type of {key!r}")
        if code != STRING or not (key == CHAT_TEMPLATE or key.startswith(CHAT_TEMPLATE + ".")):
            _read_value(cur, code, key)
            continue
        n = cur.u64(f"length of value of {key!r}")
        cur.need(n, f"value of {key!r} (a string of {n} bytes)")
        if n > cap:
            cur.skip(n, f"value of {key!r}")
            out[key] = n
            continue
        at = cur.window(n)
        out[key] = bytes(cur.buf[at:at + n]).decode("utf-8", "replace")
        cur.pos += n
    return out


def _parse_file(path: str, f: IO[bytes], size: int) -> tuple[Checkpoint, Split | None]:
    cur = _Cursor(path, f, size)
    tensor_count, kv_count = _counts(cur)

    metadata: dict[str, str] = {}
    scalars: dict[str, tuple[int, object]] = {}
    for i in range(kv_count):
        key = cur.name(f"key {i}")
        if key in metadata:
            raise cur.bad(f"duplicate key {key!r}")
        code = cur.u32(f"value type of {key!r}")
        text, value = _read_value(cur, code, key)
        metadata[key], scalars[key] = text, (code, value)

    alignment = DEFAULT_ALIGNMENT
    if "general.alignment" in scalars:
        code, value = scalars["general.alignment"]
        if code != 4:  # gguf.cpp reads it with gguf_get_val_u32
            raise cur.bad(f"general.alignment must be a u32, not {VALUE_TYPES[code][0]}")
        if not isinstance(value, int) or value <= 0 or value & (value - 1):
            raise cur.bad(f"general.alignment {value} is not a power of two")
        alignment = value

    infos = []
    seen: set[str] = set()
    flattened = {k[len(ORIG_SHAPE):] for k in scalars if k.startswith(ORIG_SHAPE)}   # (most files: none)
    for i in range(tensor_count):
        name = cur.name(f"name of tensor {i}")
        if name in seen:
            raise cur.bad(f"duplicate tensor name {name!r}")
        seen.add(name)
        n_dims = cur.u32(f"n_dims of {name!r}")
        if n_dims > MAX_DIMS:
            raise cur.bad(f"tensor {name!r}: n_dims {n_dims} exceeds {MAX_DIMS}")
        ne = cur.unpack(f"{n_dims}Q", f"dims of {name!r}") if n_dims else ()
        code = cur.u32(f"type of {name!r}")
        offset = cur.u64(f"offset of {name!r}")
        dtype = GGML_TYPES.get(code)
        if dtype is None:
            raise cur.bad(f"tensor {name!r}: unknown ggml type {code}")
        if any(d > INT64_MAX for d in ne) or math.prod(ne) > INT64_MAX:
            raise cur.bad(f"tensor {name!r}: dims {list(ne)} overflow int64")
        dt = dtypes.get(dtype)
        numel = math.prod(ne)
        if dt.is_blocked and (not ne or ne[0] % dt.block):
            raise cur.bad(f"tensor {name!r}: row length {ne[0] if ne else 1} is not a multiple of the "
                          f"{dtype} block size {dt.block}")
        # ne[0] varies fastest (ggml's ne[]), so numpy's C-order shape is the reverse.
        shape = _orig_shape(cur, name, scalars, numel) if name in flattened else tuple(reversed(ne))
        infos.append((name, dtype, shape, offset, dt.nbytes(numel), code))

    data_start = -(-cur.pos // alignment) * alignment
    if infos and data_start > size:
        raise cur.bad(f"the data section would start at byte {data_start}, past the end of the {size}-byte file")
    tensors: dict[str, TensorInfo] = {}
    prev_end, prev_name = 0, None
    for name, _, _, offset, nbytes, _ in sorted(infos, key=lambda t: (t[3], t[4])):
        if offset % alignment:
            raise cur.bad(f"tensor {name!r}: offset {offset} is not a multiple of the alignment {alignment}")
        if data_start + offset + nbytes > size:
            raise cur.bad(f"tensor {name!r}: bytes [{data_start + offset}, {data_start + offset + nbytes}) run past "
                          f"the end of the {size}-byte file (truncated?)")
        if nbytes and offset < prev_end:
            raise cur.bad(f"tensor {name!r} at data offset {offset} overlaps {prev_name!r}, which ends at {prev_end}")
        if nbytes:
            prev_end, prev_name = offset + nbytes, name
    for name, dtype, shape, offset, nbytes, code in infos:  # keep the file's order
        tensors[name] = TensorInfo(name, dtype, shape, path, data_start + offset, nbytes, extra={"ggml_type": code})
    split = split_keys(path, {k: (code in _INT_TYPES, v) for k, (code, v) in scalars.items() if k.startswith("split.")})
    return Checkpoint(path=path, format="gguf", tensors=tensors, files=(path,), metadata=metadata,
                      readers={path: read_gguf}, declared_architecture=str(metadata["general.architecture"])
                      if "general.architecture" in metadata else None), split


def _orig_shape(cur: _Cursor, name: str, scalars: dict[str, tuple[int, object]], numel: int) -> tuple[int, ...]:
    """The shape ComfyUI-GGUF recorded for a tensor it flattened (ORIG_SHAPE), checked against its elements."""
    key = ORIG_SHAPE + name
    code, value = scalars[key]
    if code != ARRAY or not isinstance(value, tuple) or value[0] not in _INT_TYPES or len(value[1]) > MAX_DIMS:
        raise cur.bad(f"{key} is not an array of at most {MAX_DIMS} integers")
    shape = tuple(int(d) for d in value[1])
    if any(d < 0 for d in shape) or math.prod(shape) != numel:
        raise cur.bad(f"{key} {list(shape)} does not hold the tensor's {numel} elements")
    return shape


def read_gguf(info: TensorInfo, start: int, count: int) -> NDArray[Any]:
    """Elements [start, start + count) in C order. Block-quantised tensors are read from the first to
    the last block the range touches, dequantised, and cut to the range."""
    d = info.dt
    if not d.is_blocked or info.offset is None:
        return read_flat_file(info, start, count)
    if not dtypes.can_decode(info.dtype):
        raise CheckpointError(info.file, f"tensor {info.name!r}: values of {info.dtype} tensors are not decoded yet")
    first, end = start // d.block, -(-(start + count) // d.block)
    raw = read_bytes(info.file, info.offset + first * d.block_bytes, (end - first) * d.block_bytes)
    values = dtypes.decode(raw, info.dtype, (end - first) * d.block)
    lo = start - first * d.block
    return values[lo:lo + count]


register(Format("gguf", accept, open_gguf, (".gguf",)))
