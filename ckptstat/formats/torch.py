"""PyTorch `torch.save` files, read without importing torch (docs/formats.md sections 2 and 3).

- zip format (torch >= 1.6): `<prefix>/data.pkl` plus one `<prefix>/data/<key>` record per storage;
  records are normally stored uncompressed, so tensor bytes are addressed by absolute file offset.
- legacy stream (`_use_new_zipfile_serialization=False`): five pickles (magic, protocol 1001,
  sys_info, the object, the storage keys), then per key an int64 LE element count and the raw bytes.

The object pickle is walked by `SafeUnpickler`, which mirrors torch's `weights_only=True` allowlist
(torch/_weights_only_unpickler.py `_get_allowed_globals`) with stubs that only record storage key,
dtype, offset, shape and stride. Anything else is refused by name; nothing from the pickle is called.
`scan` lists a pickle's globals from its opcodes alone, without unpickling.
"""
from __future__ import annotations

import io
import lzma
import math
import os
import pickle
import pickletools
import struct
import zipfile
import zlib
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any, Callable, Iterator

if TYPE_CHECKING:  # numpy is imported where values are read, not on the header-only path
    import numpy as np

from ..core import dtypes
from ..errors import CheckpointError, CorruptCheckpointError, FileNotFound, UnknownFormatError, UnsafeCheckpointError
from ..core.io import RawFile, read_view
from ..core import Checkpoint, TensorInfo
from ..core.io import contiguous_strides, read_flat_file
from .registry import Format, Probe, register

# Limits on what a pickle may build (the file is untrusted).
MAX_OPS = 4_000_000        # opcodes in one pickle
MAX_ITEMS = 1_000_000      # items in one list / tuple / dict / set
MAX_STACK = 100_000        # unpickler stack entries and open MARKs
MAX_DEPTH = 100            # container nesting the tensor walk follows
MAX_SMALL_RECORD = 1 << 16  # byteorder, version... records
MAX_SMALL_PICKLE = 64 << 20  # data.pkl up to this size is read into memory at once

LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
LEGACY_PROTOCOL = 1001
_LEGACY_MAGIC_BYTES = b"\x8a\x0a" + LEGACY_MAGIC.to_bytes(10, "little")

# ---------------------------------------------------------------------------------------------
# The allowlist: torch's weights_only globals (torch 2.x `_get_allowed_globals`), as names.

# Legacy typed storage classes -> canonical dtype (docs/formats.md section 2 table).
STORAGE_DTYPES = {
    "DoubleStorage": "F64", "FloatStorage": "F32", "HalfStorage": "F16", "BFloat16Storage": "BF16",
    "LongStorage": "I64", "IntStorage": "I32", "ShortStorage": "I16", "CharStorage": "I8",
    "ByteStorage": "U8", "BoolStorage": "BOOL", "ComplexFloatStorage": "C64", "ComplexDoubleStorage": "C128",
}
_QUANT_STORAGES = ("QInt32Storage", "QInt8Storage", "QUInt2x4Storage", "QUInt4x2Storage", "QUInt8Storage")
# torch.<dtype> globals -> canonical dtype (None: allowed by torch, but no layout ckptstat decodes).
TORCH_DTYPES: dict[str, str | None] = {
    "float64": "F64", "float32": "F32", "float16": "F16", "bfloat16": "BF16",
    "int64": "I64", "int32": "I32", "int16": "I16", "int8": "I8",
    "uint64": "U64", "uint32": "U32", "uint16": "U16", "uint8": "U8", "bool": "BOOL",
    "complex64": "C64", "complex128": "C128", "complex32": None,
    "float8_e4m3fn": "F8_E4M3", "float8_e5m2": "F8_E5M2", "float8_e4m3fnuz": "F8_E4M3FNUZ",
    "float8_e5m2fnuz": "F8_E5M2FNUZ", "float8_e8m0fnu": "F8_E8M0", "float4_e2m1fn_x2": None,
    "qint32": None, "qint8": None, "quint8": None, "quint2x4": None, "quint4x2": None,
    "bits16": None, "bits1x8": None, "bits2x4": None, "bits4x2": None, "bits8": None,
    **{f"uint{i}": None for i in range(1, 8)}, **{f"int{i}": None for i in range(1, 8)},
}
_TENSOR_CLASSES = ("Double", "Float", "Half", "BFloat16", "Long", "Int", "Short", "Char", "Byte", "Bool")
_REBUILDERS = (
    "_rebuild_tensor", "_rebuild_tensor_v2", "_rebuild_tensor_v3", "_rebuild_parameter",
    "_rebuild_parameter_with_state", "_rebuild_qtensor", "_rebuild_sparse_tensor", "_rebuild_nested_tensor",
    "_rebuild_meta_tensor_no_storage", "_rebuild_wrapper_subclass", "_rebuild_device_tensor_from_numpy",
    "_rebuild_device_tensor_from_cpu_tensor",
)
ALLOWED_GLOBALS: frozenset[str] = frozenset(
    ["collections.OrderedDict", "collections.Counter", "torch.nn.parameter.Parameter", "torch.Size",
     "torch.Tensor", "torch.device", "torch.serialization._get_layout", "_codecs.encode",
     "builtins.bytearray", "builtins.set", "builtins.complex", "torch._tensor._rebuild_from_type_v2",
     "torch.storage.TypedStorage", "torch.storage.UntypedStorage",
     "torch.per_tensor_affine", "torch.per_tensor_symmetric", "torch.per_channel_affine",
     "torch.per_channel_symmetric", "torch.per_channel_affine_float_qparams"]
    + [f"torch.{d}" for d in TORCH_DTYPES]
    + [f"torch.{s}" for s in (*STORAGE_DTYPES, *_QUANT_STORAGES)]
    + [f"torch.cuda.{s}" for s in STORAGE_DTYPES]
    + [f"torch{sub}.{c}Tensor" for sub in ("", ".cuda") for c in _TENSOR_CLASSES]
    + [f"torch{sub}.{c}Tensor" for sub in (".sparse", ".cuda.sparse") for c in _TENSOR_CLASSES if c != "Bool"]
    + [f"torch._utils.{f}" for f in _REBUILDERS]
)
# torch refuses these modules even when a user extends the allowlist.
DENIED_MODULES = frozenset({"sys", "os", "posix", "nt"})


def is_allowed(global_name: str) -> bool:
    return global_name.split(".")[0] not in DENIED_MODULES and global_name in ALLOWED_GLOBALS


# ---------------------------------------------------------------------------------------------
# Stubs: what the allowlisted globals turn into. They record; they never run anything.

@dataclass(frozen=True)
class StorageType:
    name: str
    dtype: str | None          # None: UntypedStorage (bytes; the tensor's dtype comes from v3)


@dataclass(frozen=True)
class DTypeRef:
    name: str
    dtype: str | None


@dataclass(frozen=True)
class Opaque:
    """An allowlisted global with no role here (torch.Tensor, layouts, quantization schemes)."""
    name: str


@dataclass(frozen=True)
class StorageRef:
    key: str
    dtype: str | None
    numel: int
    view_offset: int = 0       # legacy storage views: element offset into the root storage


@dataclass(frozen=True)
class TensorRef:
    storage: StorageRef
    dtype: str
    offset: int                # in elements of dtype
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    parameter: bool = False


class _Refused(Exception):
    pass


def _ints(value: object, what: str) -> tuple[int, ...]:
    if not isinstance(value, (tuple, list)) or len(value) > 64 or not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value):
        raise _Refused(f"{what} must be a short tuple of non-negative ints, got {type(value).__name__}")
    return tuple(value)


def _tensor(storage: object, offset: object, size: object, stride: object, dtype: str | None) -> TensorRef:
    if not isinstance(storage, StorageRef):
        raise _Refused(f"tensor rebuilt from a {type(storage).__name__}, not a storage")
    if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
        raise _Refused(f"bad storage offset {offset!r}")
    shape, strides = _ints(size, "size"), _ints(stride, "stride")
    if len(shape) != len(strides):
        raise _Refused(f"size {shape} and stride {strides} differ in rank")
    dt = dtype or storage.dtype
    if dt is None:
        raise _Refused("tensor over an untyped storage without a dtype")
    return TensorRef(storage, dt, offset + storage.view_offset, shape, strides)


def _rebuild_tensor(storage, offset, size, stride):  # type: ignore[no-untyped-def]
    return _tensor(storage, offset, size, stride, None)


def _rebuild_tensor_v2(storage, offset, size, stride, requires_grad=False, hooks=None, metadata=None):  # type: ignore[no-untyped-def]
    return _tensor(storage, offset, size, stride, None)


def _rebuild_tensor_v3(storage, offset, size, stride, requires_grad, hooks, dtype, metadata=None):  # type: ignore[no-untyped-def]
    if not isinstance(dtype, DTypeRef):
        raise _Refused("_rebuild_tensor_v3 without a torch dtype")
    if dtype.dtype is None:
        raise _Refused(f"dtype torch.{dtype.name} is not supported by ckptstat")
    return _tensor(storage, offset, size, stride, dtype.dtype)


def _rebuild_parameter(data, requires_grad=True, hooks=None, state=None):  # type: ignore[no-untyped-def]
    if isinstance(data, TensorRef):
        return TensorRef(data.storage, data.dtype, data.offset, data.shape, data.stride, parameter=True)
    raise _Refused(f"parameter over a {type(data).__name__}, not a tensor")


def _rebuild_from_type_v2(func, new_type, args, state):  # type: ignore[no-untyped-def]
    # torch calls func(*args) then sets the subclass type; func must be one of our own stubs.
    if func not in (_rebuild_tensor, _rebuild_tensor_v2, _rebuild_tensor_v3, _rebuild_parameter) or not isinstance(args, tuple):
        raise _Refused("_rebuild_from_type_v2 with an unexpected rebuild function")
    return func(*args)


def _unsupported(kind: str) -> Callable[..., Any]:
    def stub(*args: object) -> Any:
        raise _Refused(f"{kind} tensors are not supported by ckptstat")
    return stub


def _encode(obj: object, encoding: str = "utf-8") -> bytes:
    # protocol-2 pickles write bytes as _codecs.encode(str, "latin1")
    if not isinstance(obj, str) or encoding not in ("latin1", "latin-1", "utf-8", "utf8", "ascii"):
        raise _Refused("_codecs.encode with unexpected arguments")
    return obj.encode(encoding)


def _bytearray(obj: object = b"") -> bytearray:
    if not isinstance(obj, (bytes, bytearray, list)):  # bytearray(int) would allocate what the file says
        raise _Refused("bytearray() with a non-bytes argument")
    return bytearray(obj)


def _set(items: object = ()) -> set:
    if not isinstance(items, (list, tuple, set)):
        raise _Refused("set() with a non-sequence argument")
    return set(items)


def _complex(re: object = 0, im: object = 0) -> complex:
    if not all(isinstance(v, (int, float)) for v in (re, im)):
        raise _Refused("complex() with non-numbers")
    return complex(re, im)  # type: ignore[arg-type]


def _size(dims: object = ()) -> tuple[int, ...]:
    return _ints(dims, "torch.Size")


def _device(*args: object) -> str:
    return ":".join(str(a) for a in args if isinstance(a, (str, int)))


def _stub_for(name: str) -> object:
    module, _, attr = name.rpartition(".")
    fixed: dict[str, object] = {
        "collections.OrderedDict": OrderedDict, "collections.Counter": Counter,
        "torch.nn.parameter.Parameter": _rebuild_parameter, "torch.Size": _size, "torch.device": _device,
        "_codecs.encode": _encode, "builtins.bytearray": _bytearray, "builtins.set": _set,
        "builtins.complex": _complex, "torch._tensor._rebuild_from_type_v2": _rebuild_from_type_v2,
        "torch._utils._rebuild_tensor": _rebuild_tensor, "torch._utils._rebuild_tensor_v2": _rebuild_tensor_v2,
        "torch._utils._rebuild_tensor_v3": _rebuild_tensor_v3,
        "torch._utils._rebuild_parameter": _rebuild_parameter,
        "torch._utils._rebuild_parameter_with_state": _rebuild_parameter,
        "torch.storage.UntypedStorage": StorageType("UntypedStorage", None),
    }
    if name in fixed:
        return fixed[name]
    if module == "torch._utils":
        return _unsupported(attr.replace("_rebuild_", "").replace("_", " "))
    if module in ("torch", "torch.cuda") and attr in STORAGE_DTYPES:
        return StorageType(attr, STORAGE_DTYPES[attr])
    if module == "torch" and attr in TORCH_DTYPES:
        return DTypeRef(attr, TORCH_DTYPES[attr])
    return Opaque(name)


# ---------------------------------------------------------------------------------------------
# The restricted unpickler. It subclasses pickle's pure-Python Unpickler (pickle._Unpickler, the
# reference implementation of pickle.Unpickler): its memo is a dict, so a hostile LONG_BINPUT index
# cannot make it allocate a huge memo array, and each opcode can be counted and bounded.

_CONTAINER_OPS = {pickle.APPEND, pickle.APPENDS, pickle.SETITEM, pickle.SETITEMS, pickle.ADDITEMS,
                  pickle.LIST, pickle.TUPLE, pickle.DICT, pickle.FROZENSET}


def _guarded(op: Callable[[Any], None], sized: bool) -> Callable[[Any], None]:
    def run(self: "SafeUnpickler") -> None:
        self.ops += 1
        if self.ops > MAX_OPS:
            raise _Refused(f"pickle runs more than {MAX_OPS:,} opcodes")
        op(self)
        if len(self.stack) > MAX_STACK or len(self.metastack) > MAX_STACK:
            raise _Refused(f"pickle stack deeper than {MAX_STACK:,}")
        if sized and self.stack:
            top = self.stack[-1]
            if isinstance(top, (list, tuple, dict, set, frozenset)) and len(top) > MAX_ITEMS:
                raise _Refused(f"pickle builds a {type(top).__name__} of more than {MAX_ITEMS:,} items")
    return run


class _Bounded:
    """A read-only view of a pickle stream that never asks for more than `limit` bytes in all.

    A pickle's lengths (BINUNICODE, BINBYTES8, LONG4, FRAME...) are untrusted, and the file's read(n)
    allocates n bytes before it reads: without this a 2 KB file claiming a 4 GiB string makes the
    unpickler (or pickletools, for scan) allocate 4 GiB."""

    def __init__(self, f: IO[bytes], limit: int):
        self.f, self.left, self.limit = f, max(limit, 0), max(limit, 0)

    def read(self, n: int | None = -1) -> bytes:
        data = self.f.read(self.left if n is None or n < 0 else min(n, self.left))
        self.left -= len(data)
        return data

    def readline(self, limit: int | None = -1) -> bytes:
        data = self.f.readline(self.left if limit is None or limit < 0 else min(limit, self.left))
        self.left -= len(data)
        return data

    def tell(self) -> int:
        return self.limit - self.left


def _remaining(f: IO[bytes]) -> int:
    """Bytes left in a seekable stream (a file or BytesIO)."""
    pos = f.tell()
    end = f.seek(0, os.SEEK_END)
    f.seek(pos)
    return end - pos


class SafeUnpickler(pickle._Unpickler):  # type: ignore[name-defined,misc]
    """Unpickles against torch's weights_only allowlist, with recording stubs (see module doc).
    Reads at most `limit` bytes of `file` (default: what is left of it)."""

    dispatch = {k: _guarded(f, bytes([k]) in _CONTAINER_OPS) for k, f in pickle._Unpickler.dispatch.items()}  # type: ignore[attr-defined]

    def __init__(self, file: IO[bytes], path: str, record: str, storages: bool = True, limit: int | None = None):
        self.stream = _Bounded(file, _remaining(file) if limit is None else limit)
        super().__init__(self.stream, encoding="utf-8")
        self.path, self.record, self.storages_allowed = path, record, storages
        self.ops = 0
        self.storages: dict[str, StorageRef] = {}

    def find_class(self, module: str, name: str) -> object:
        full = f"{module}.{name}"
        if not is_allowed(full):
            raise UnsafeCheckpointError(
                self.path, f"{self.record} references global {full!r}, which is outside torch's weights_only "
                "allowlist; refusing to load it (nothing was executed; `ckptstat scan` lists every global)")
        return _stub_for(full)

    def persistent_load(self, pid: object) -> StorageRef:
        # zip: ('storage', type, key, location, numel); legacy adds view_metadata (docs/formats.md 2, 3)
        if not (self.storages_allowed and isinstance(pid, tuple) and len(pid) in (5, 6) and pid[0] == "storage"):
            raise _Refused(f"unexpected persistent id {str(pid)[:60]!r}")
        stype, key, _location, numel = pid[1:5]
        view = pid[5] if len(pid) == 6 else None
        if not isinstance(stype, StorageType) or not isinstance(key, str) or not isinstance(numel, int) or numel < 0:
            raise _Refused(f"malformed storage id {str(pid)[:80]!r}")
        ref = StorageRef(key, stype.dtype, numel)
        prev = self.storages.setdefault(key, ref)
        if prev.dtype != ref.dtype:
            raise _Refused(f"storage {key!r} is referenced with two dtypes")
        if view is not None:  # legacy storage views (torch < 0.4): (view_key, offset, view_size)
            if not (isinstance(view, tuple) and len(view) == 3 and isinstance(view[1], int) and view[1] >= 0):
                raise _Refused("malformed storage view metadata")
            return StorageRef(key, ref.dtype, ref.numel, view[1])
        return ref

    # BUILD would set attributes on whatever is on the stack; nothing here needs them (torch uses it
    # for OrderedDict._metadata), so the state is dropped.
    def load_build(self) -> None:
        self.stack.pop()

    # NEWOBJ calls cls.__new__: only the two allowlisted dict classes may be built that way.
    def load_newobj(self) -> None:
        args = self.stack.pop()
        cls = self.stack.pop()
        if cls not in (OrderedDict, Counter):
            raise _Refused("NEWOBJ on a non-dict class")
        self.append(cls.__new__(cls, *args))

    def load_newobj_ex(self) -> None:
        self.stack.pop()
        self.load_newobj()

    # pickle's BYTEARRAY8 allocates bytearray(length) before reading: check the length first.
    def load_bytearray8(self) -> None:
        (n,) = struct.unpack("<Q", self.read(8))
        if n > self.stream.limit:
            raise _Refused(f"BYTEARRAY8 of {n:,} bytes in a {self.stream.limit:,}-byte pickle")
        b = bytearray(n)
        self.readinto(b)
        self.append(b)


SafeUnpickler.dispatch[pickle.BUILD[0]] = _guarded(SafeUnpickler.load_build, False)
SafeUnpickler.dispatch[pickle.NEWOBJ[0]] = _guarded(SafeUnpickler.load_newobj, False)
SafeUnpickler.dispatch[pickle.NEWOBJ_EX[0]] = _guarded(SafeUnpickler.load_newobj_ex, False)
SafeUnpickler.dispatch[pickle.BYTEARRAY8[0]] = _guarded(SafeUnpickler.load_bytearray8, False)


def unpickle(file: IO[bytes], path: str, record: str, storages: bool = True,
             limit: int | None = None) -> tuple[object, SafeUnpickler]:
    try:
        u = SafeUnpickler(file, path, record, storages, limit)
        return u.load(), u
    except CheckpointError:
        raise
    except _Refused as e:
        raise CorruptCheckpointError(path, f"{record}: {e}") from None
    except RecursionError:
        raise CorruptCheckpointError(path, f"{record}: pickle nests too deeply") from None
    except (pickle.UnpicklingError, EOFError, TypeError, ValueError, KeyError, IndexError, AttributeError,
            struct.error, UnicodeDecodeError, OverflowError, MemoryError, zipfile.BadZipFile) as e:
        raise CorruptCheckpointError(path, f"{record}: malformed pickle ({type(e).__name__}: {e})") from None


# ---------------------------------------------------------------------------------------------
# Walking the unpickled object: tensors get dot-joined paths, containers are visited once.

def _key(k: object) -> str:
    if isinstance(k, (str, int)) and not isinstance(k, bool):
        return str(k)
    return repr(k)[:80]


def walk(obj: object, path: str) -> Iterator[tuple[str, TensorRef]]:
    seen: set[int] = set()

    def rec(o: object, name: str, depth: int) -> Iterator[tuple[str, TensorRef]]:
        if isinstance(o, TensorRef):
            yield name or "tensor", o
            return
        if not isinstance(o, (dict, list, tuple)):
            return
        if depth >= MAX_DEPTH:
            raise CorruptCheckpointError(path, f"pickle nests containers more than {MAX_DEPTH} levels deep")
        if id(o) in seen:  # shared or cyclic containers: once (no exponential blow-up)
            return
        seen.add(id(o))
        if len(o) > MAX_ITEMS:
            raise CorruptCheckpointError(path, f"pickle holds a {type(o).__name__} of {len(o):,} items")
        items = o.items() if isinstance(o, dict) else enumerate(o)
        for k, v in items:
            yield from rec(v, f"{name}.{_key(k)}" if name else _key(k), depth + 1)

    yield from rec(obj, "", 0)


def _scalars(obj: object) -> dict[str, str]:
    """Top-level plain values of a training checkpoint (epoch, step...), as metadata."""
    if not isinstance(obj, dict):
        return {}
    return {_key(k): str(v)[:200] for k, v in obj.items()
            if isinstance(v, (int, float, str, bool))}


# ---------------------------------------------------------------------------------------------
# Turning recorded tensors into TensorInfo, checked against the storage records.

@dataclass
class StorageRecord:
    key: str
    nbytes: int
    offset: int | None         # absolute file offset of the record's bytes (None: compressed)
    record: str                # zip member name, or "legacy storage <key>"


def _extent(shape: tuple[int, ...], stride: tuple[int, ...]) -> int:
    """Elements of storage a view touches, from its first element to its last."""
    if math.prod(shape) == 0:
        return 0
    return 1 + sum((n - 1) * s for n, s in zip(shape, stride))


def _is_contiguous(shape: tuple[int, ...], stride: tuple[int, ...]) -> bool:
    want = contiguous_strides(shape)
    return all(n <= 1 or s == w for n, s, w in zip(shape, stride, want))


def build_tensors(path: str, found: list[tuple[str, TensorRef]], records: dict[str, StorageRecord],
                  byteorder: str) -> tuple[dict[str, TensorInfo], list[str]]:
    tensors: dict[str, TensorInfo] = {}
    views: dict[str, set[tuple]] = {}
    used: dict[str, int] = {}
    for name, ref in found:
        rec = records.get(ref.storage.key)
        if rec is None:
            raise CorruptCheckpointError(path, f"tensor {name!r} uses storage {ref.storage.key!r}, which has no record")
        itemsize = dtypes.get(ref.dtype).bits // 8
        end = (ref.offset + _extent(ref.shape, ref.stride)) * itemsize
        if end > rec.nbytes:
            raise CorruptCheckpointError(
                path, f"tensor {name!r} ({ref.dtype}{list(ref.shape)}, stride {list(ref.stride)}, offset {ref.offset}) "
                f"needs {end:,} bytes of {rec.record}, which holds {rec.nbytes:,}")
        while name in tensors:  # two paths that join to one name (e.g. keys "a.b" and a -> b)
            name += "'"
        contiguous = _is_contiguous(ref.shape, ref.stride)
        numel = math.prod(ref.shape)
        tensors[name] = TensorInfo(
            name=name, dtype=ref.dtype, shape=ref.shape, file=path,
            offset=None if rec.offset is None else rec.offset + ref.offset * itemsize,
            nbytes=numel * itemsize, byteorder=byteorder if itemsize > 1 else "little",
            stride=None if contiguous else ref.stride, storage=ref.storage.key,
            extra={"record": rec.record, "storage_byte_offset": ref.offset * itemsize},
        )
        views.setdefault(rec.key, set()).add((ref.offset, ref.shape, None if contiguous else ref.stride))
        used[rec.key] = max(used.get(rec.key, 0), end)
    notes = []
    partial = sorted(k for k, v in views.items() if len(v) > 1)
    if partial:
        notes.append(f"{len(partial)} storage(s) hold several different views (partial views of one buffer, "
                     f"each counted as its own tensor), e.g. storage {partial[0]!r}: "
                     + ", ".join(n for n, t in tensors.items() if t.storage == partial[0])[:200])
    unused = sum(records[k].nbytes - used[k] for k in used)
    if unused > 0:
        notes.append(f"{unused:,} stored bytes lie outside every tensor view (torch.save writes whole storages)")
    return tensors, notes


# ---------------------------------------------------------------------------------------------
# zip format

_LOCAL_HEADER = struct.Struct("<4s2B4HL2L2H")  # 30 bytes (PKWARE APPNOTE 4.3.7)


class _CheckedZipFile(zipfile.ZipFile):
    """zipfile trusts the end record's central-directory offset: too big a value makes every member's
    local-header offset negative (APPNOTE 4.3.16 arithmetic in zipfile._RealGetContents), and opening
    a member then seeks before the file's start (OSError EINVAL). Refuse such members by name."""

    def open(self, name, mode="r", pwd=None, *, force_zip64=False):  # type: ignore[no-untyped-def,override]
        info = name if isinstance(name, zipfile.ZipInfo) else self.getinfo(name)
        if info.header_offset < 0:
            raise zipfile.BadZipFile(f"member {info.filename!r} has a local header offset before the file's start")
        return super().open(name, mode, pwd, force_zip64=force_zip64)


def _zip_open(path: str, f: IO[bytes]) -> zipfile.ZipFile:
    try:
        return _CheckedZipFile(f)
    except zipfile.BadZipFile as e:
        raise CorruptCheckpointError(path, f"damaged or truncated zip ({e})") from None


def _data_offset(path: str, f: IO[bytes], info: zipfile.ZipInfo, size: int) -> int:
    """Where a member's bytes start, from its LOCAL header (its extra field differs from the central
    directory's: torch pads it to align data to 64 bytes), checked to lie inside the file."""
    if info.header_offset < 0 or info.header_offset + 30 > size:
        raise CorruptCheckpointError(path, f"zip entry {info.filename!r}: local header offset {info.header_offset} is past the end of the file")
    f.seek(info.header_offset)
    fields = _LOCAL_HEADER.unpack(f.read(30))
    if fields[0] != b"PK\x03\x04":
        raise CorruptCheckpointError(path, f"zip entry {info.filename!r}: no local header at offset {info.header_offset}")
    start = info.header_offset + 30 + fields[-2] + fields[-1]
    if start + info.compress_size > size:
        raise CorruptCheckpointError(
            path, f"zip entry {info.filename!r} claims {info.compress_size:,} bytes at offset {start:,}, past the end of the {size:,}-byte file")
    if info.compress_type == zipfile.ZIP_STORED and info.compress_size != info.file_size:
        raise CorruptCheckpointError(path, f"zip entry {info.filename!r}: stored entry with differing sizes")
    return start


def _archive_prefix(path: str, names: list[str]) -> str:
    pkls = [n for n in names if n == "data.pkl" or (n.endswith("/data.pkl") and n.count("/") == 1)]
    if not pkls:
        raise UnknownFormatError(path, "a zip without <prefix>/data.pkl: not a torch.save file")
    if len(pkls) > 1:
        raise CorruptCheckpointError(path, f"zip holds {len(pkls)} data.pkl records")
    prefix = pkls[0][: -len("data.pkl")]
    if prefix + "constants.pkl" in names:
        raise UnknownFormatError(path, "a TorchScript archive (torch.jit.save): ckptstat reads torch.save files "
                                 "(`ckptstat scan` lists its globals)")
    return prefix


def _read_small(path: str, zf: zipfile.ZipFile, info: zipfile.ZipInfo) -> bytes:
    if info.file_size > MAX_SMALL_RECORD:
        raise CorruptCheckpointError(path, f"zip entry {info.filename!r} is {info.file_size:,} bytes, expected a few")
    return zf.read(info)


class _ZipStreamReader:
    """Reads tensors from compressed records by streaming decompression (docs/formats.md section 2).

    A deflate stream can only be read forwards, so the reader keeps one member open with its
    position: consecutive chunks of a tensor continue where the last ended (linear time), and the
    member is reopened from byte 0 only when a read goes backwards or another record is asked for.
    A strided view visits its storage out of order chunk after chunk, so its record is decompressed
    once into an anonymous temporary file and the view read from there as from a stored record.
    At most one member and one temporary file are open at a time; `close()` releases them."""

    SKIP_BLOCK = 1 << 18  # bytes decompressed at a time when skipping or spilling

    def __init__(self, path: str):
        self.path = path
        self._pid = 0
        self._file: IO[bytes] | None = None
        self._zip: zipfile.ZipFile | None = None
        self._member: IO[bytes] | None = None
        self._record = ""
        self._pos = 0
        self._spill: IO[bytes] | None = None
        self._spill_record = ""
        self._spilled = 0

    def __call__(self, info: TensorInfo, start: int, count: int) -> np.ndarray:
        if info.offset is not None:   # a stored record beside compressed ones: read it in place
            return read_flat_file(info, start, count)
        if self._pid != os.getpid():   # forked (stats workers): never share the parent's file positions
            self._close_member()       # (closing our inherited copies leaves the parent's open)
            self._close_spill()
            self._pid = os.getpid()
        record = str(info.extra["record"])
        base = int(info.extra["storage_byte_offset"])  # type: ignore[call-overload]
        itemsize = info.dt.bits // 8
        if info.stride is None:
            raw = self._read(record, base + start * itemsize, count * itemsize)
            return dtypes.decode(raw, info.dtype, count, info.byteorder)
        spill = self._spilled_to(record, base + _extent(info.shape, info.stride) * itemsize)
        raw = read_view(RawFile(spill, self.path), base, itemsize, info.shape, info.stride, start, count)
        return dtypes.decode(raw, info.dtype, count, info.byteorder)

    def _read(self, record: str, lo: int, n: int) -> bytes:
        """Bytes [lo, lo + n) of the record, decompressed, continuing the open member if it can."""
        if self._member is None or record != self._record or lo < self._pos:
            self._close_member()
            self._file = open(self.path, "rb")
            self._zip = _zip_open(self.path, self._file)
            self._member = self._zip.open(record)
            self._record, self._pos = record, 0
        try:
            while self._pos < lo:
                skipped = len(self._member.read(min(lo - self._pos, max(n, 1 << 16), self.SKIP_BLOCK)))
                if not skipped:
                    break
                self._pos += skipped
            raw = self._member.read(n) if self._pos == lo else b""
        except BaseException:
            self._close_member()
            raise
        self._pos += len(raw)
        if len(raw) != n:
            self._close_member()
            raise CorruptCheckpointError(self.path, f"{record} ends before byte {lo + n:,}")
        return raw

    def _spilled_to(self, record: str, end: int) -> IO[bytes]:
        """An anonymous temporary file holding the record's bytes [0, end) at least."""
        import tempfile

        if self._spill is None or record != self._spill_record:
            self._close_spill()
            self._spill = tempfile.TemporaryFile()
            self._spill_record, self._spilled = record, 0
        while self._spilled < end:
            block = self._read(record, self._spilled, min(end - self._spilled, self.SKIP_BLOCK))
            self._spill.seek(self._spilled)
            self._spill.write(block)
            self._spilled += len(block)
        self._spill.flush()
        return self._spill

    def _close_member(self) -> None:
        for f in (self._member, self._zip, self._file):
            if f is not None:
                f.close()
        self._member = self._zip = self._file = None

    def _close_spill(self) -> None:
        if self._spill is not None:
            self._spill.close()
        self._spill = None

    def close(self) -> None:
        if self._pid == os.getpid():
            self._close_member()
            self._close_spill()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


def open_zip(path: str) -> Checkpoint:
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        zf = _zip_open(path, f)
        infos = {i.filename: i for i in zf.infolist()}
        prefix = _archive_prefix(path, list(infos))
        byteorder = "little"
        if prefix + "byteorder" in infos:
            byteorder = _read_small(path, zf, infos[prefix + "byteorder"]).decode("ascii", "replace").strip()
            if byteorder not in ("little", "big"):
                raise CorruptCheckpointError(path, f"byteorder record says {byteorder[:20]!r}")
        pkl = infos[prefix + "data.pkl"]
        _data_offset(path, f, pkl, size)
        with zf.open(pkl) as member:
            # small pickles (sizes already checked against the file) are read at once: the unpickler
            # makes thousands of tiny reads; a big or compressed one is streamed.
            stream: IO[bytes] = io.BytesIO(member.read()) if pkl.file_size <= MAX_SMALL_PICKLE else member  # type: ignore[assignment]
            obj, u = unpickle(stream, path, prefix + "data.pkl", limit=pkl.file_size)
        records: dict[str, StorageRecord] = {}
        compressed = False
        for key in u.storages:
            info = infos.get(f"{prefix}data/{key}")
            if info is None:
                raise CorruptCheckpointError(path, f"storage {key!r} has no record {prefix}data/{key}")
            start = _data_offset(path, f, info, size)
            stored = info.compress_type == zipfile.ZIP_STORED
            compressed |= not stored
            records[key] = StorageRecord(key, info.file_size, start if stored else None, info.filename)
    found = list(walk(obj, path))
    tensors, notes = build_tensors(path, found, records, byteorder)
    ckpt = Checkpoint(path=path, format="pytorch (zip)", tensors=tensors, files=(path,),
                      metadata={"torch.archive": prefix.rstrip("/"), "torch.byteorder": byteorder, **_scalars(obj)},
                      notes=notes)
    if compressed:
        ckpt.readers[path] = _ZipStreamReader(path)
        ckpt.notes.append("some storage records are compressed: values are read by streaming decompression")
    return ckpt


# ---------------------------------------------------------------------------------------------
# legacy stream

def open_legacy(path: str) -> Checkpoint:
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        magic, _ = unpickle(f, path, "magic number pickle", storages=False)
        if magic != LEGACY_MAGIC:
            raise CorruptCheckpointError(path, "legacy torch file with a wrong magic number")
        proto, _ = unpickle(f, path, "protocol pickle", storages=False)
        if proto != LEGACY_PROTOCOL:
            raise CorruptCheckpointError(path, f"legacy torch protocol {proto!r}, expected {LEGACY_PROTOCOL}")
        sys_info, _ = unpickle(f, path, "sys_info pickle", storages=False)
        if not isinstance(sys_info, dict):
            raise CorruptCheckpointError(path, "legacy sys_info is not a dict")
        obj, u = unpickle(f, path, "object pickle")
        keys, _ = unpickle(f, path, "storage key pickle", storages=False)
        if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys) or len(set(keys)) != len(keys):
            raise CorruptCheckpointError(path, "legacy storage key list is malformed")
        # Storages follow in key order: int64 LE element count, then count * element_size bytes.
        # The writer (THPStorage_writeFileRaw) emits both in little-endian whatever the machine, so
        # sys_info["little_endian"] only tells what the writing machine was (recorded in metadata).
        records: dict[str, StorageRecord] = {}
        pos = f.tell()
        for key in keys:
            ref = u.storages.get(key)
            if ref is None:
                raise CorruptCheckpointError(path, f"storage {key!r} is listed but no tensor uses it")
            if pos + 8 > size:
                raise CorruptCheckpointError(path, f"file ends before storage {key!r} (offset {pos:,})")
            f.seek(pos)
            (count,) = struct.unpack("<q", f.read(8))
            itemsize = dtypes.get(ref.dtype).bits // 8 if ref.dtype else 1
            nbytes = count * itemsize
            if count < 0 or pos + 8 + nbytes > size:
                raise CorruptCheckpointError(
                    path, f"storage {key!r} claims {count:,} elements ({nbytes:,} bytes) at offset {pos + 8:,}, "
                    f"past the end of the {size:,}-byte file")
            records[key] = StorageRecord(key, nbytes, pos + 8, f"legacy storage {key}")
            pos += 8 + nbytes
        missing = set(u.storages) - set(records)
        if missing:
            raise CorruptCheckpointError(path, f"storage {sorted(missing)[0]!r} has no data in the file")
    found = list(walk(obj, path))
    tensors, notes = build_tensors(path, found, records, "little")
    meta = {"torch.legacy_little_endian": str(sys_info.get("little_endian")), **_scalars(obj)}
    return Checkpoint(path=path, format="pytorch (legacy)", tensors=tensors, files=(path,), metadata=meta, notes=notes)


# ---------------------------------------------------------------------------------------------
# detection

def _first_zip_name(head: bytes) -> str:
    if len(head) < 30:
        return ""
    n = struct.unpack_from("<H", head, 26)[0]
    return head[30: 30 + n].decode("utf-8", "replace")


def accept_zip(probe: Probe) -> bool:
    if probe.head[:4] != b"PK\x03\x04":
        return False
    first = _first_zip_name(probe.head)
    if first == "data.pkl" or (first.endswith("/data.pkl") and first.count("/") == 1):
        return True
    try:  # some tool rewrote the zip in another order: look in the central directory
        with zipfile.ZipFile(probe.path) as zf:
            return any(n == "data.pkl" or (n.endswith("/data.pkl") and n.count("/") == 1) for n in zf.namelist())
    except (zipfile.BadZipFile, OSError, ValueError, EOFError):
        return False


def accept_legacy(probe: Probe) -> bool:
    # a pickle of the magic int: PROTO n, then LONG1 of 10 bytes (docs/formats.md section 0)
    return probe.head[:1] == b"\x80" and _LEGACY_MAGIC_BYTES in probe.head[:16]


register(Format("pytorch (zip)", accept_zip, open_zip, (".bin", ".pt", ".pth", ".ckpt")))
register(Format("pytorch (legacy)", accept_legacy, open_legacy, (".bin", ".pt", ".pth")))


# ---------------------------------------------------------------------------------------------
# scan: every global a pickle references, from its opcodes alone

SCAN_SCHEMA = "ckptstat.scan/1"
_STRING_OPS = {"SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE", "STRING", "BINSTRING", "SHORT_BINSTRING"}
_PUT_OPS = {"PUT", "BINPUT", "LONG_BINPUT"}
_GET_OPS = {"GET", "BINGET", "LONG_BINGET"}


@dataclass
class PickleScan:
    record: str
    opcodes: int = 0
    globals: Counter = field(default_factory=Counter)


def scan_pickle(data: IO[bytes], record: str) -> PickleScan:
    """Globals from GLOBAL / INST opcodes, and STACK_GLOBAL resolved from the two strings pushed
    before it (directly or through the memo); an unresolvable one is reported as such."""
    out = PickleScan(record)
    memo: dict[int, object] = {}
    recent: list[object] = []   # values of the last pushes (strings, else None)
    for op, arg, _pos in pickletools.genops(data):
        out.opcodes += 1
        if out.opcodes > MAX_OPS:
            raise _Refused(f"{record}: pickle has more than {MAX_OPS:,} opcodes")
        name = op.name
        if name in ("GLOBAL", "INST"):
            out.globals[str(arg).replace(" ", ".", 1)] += 1
        elif name == "STACK_GLOBAL":
            mod, attr = (recent[-2], recent[-1]) if len(recent) >= 2 else (None, None)
            ok = isinstance(mod, str) and isinstance(attr, str)
            out.globals[f"{mod}.{attr}" if ok else "<unresolved STACK_GLOBAL>"] += 1
        elif name.startswith("EXT"):
            out.globals[f"<copyreg extension {arg}>"] += 1
        if name in _STRING_OPS:
            recent.append(arg)
        elif name in _PUT_OPS:
            memo[int(arg)] = recent[-1] if recent else None  # type: ignore[arg-type]
            continue
        elif name == "MEMOIZE":
            memo[len(memo)] = recent[-1] if recent else None
            continue
        elif name in _GET_OPS:
            recent.append(memo.get(int(arg)))  # type: ignore[arg-type]
        elif name in ("FRAME", "PROTO", "MARK"):
            continue
        else:
            recent.append(None)
        del recent[:-2]
    return out


def _pickle_members(path: str, f: IO[bytes]) -> Iterator[tuple[str, IO[bytes]]]:
    head = f.read(16)
    f.seek(0)
    if head[:4] == b"PK\x03\x04":
        size = os.path.getsize(path)
        zf = _zip_open(path, f)
        for info in zf.infolist():
            if info.filename.endswith(".pkl"):
                _data_offset(path, f, info, size)
                with zf.open(info) as member:
                    yield info.filename, _Bounded(member, info.file_size)  # type: ignore[misc]
        return
    if head[:1] != b"\x80":
        raise UnknownFormatError(path, "holds no pickle (not a torch.save file or a pickle)")
    if _LEGACY_MAGIC_BYTES in head:
        for what in ("magic number", "protocol", "sys_info", "object", "storage keys"):
            yield f"{what} pickle", _Bounded(f, _remaining(f))
        return
    yield "pickle", _Bounded(f, _remaining(f))


def scan(path: str | os.PathLike[str]) -> dict:
    """Report (schema ckptstat.scan/1) of every global the file's pickles reference, and whether
    `torch.load(weights_only=False)` would run code (a global outside the weights_only allowlist)."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFound(path, "no such file") if not os.path.exists(path) else CheckpointError(path, "not a file")
    scans: list[PickleScan] = []
    try:
        with open(path, "rb") as f:
            for record, stream in _pickle_members(path, f):
                scans.append(scan_pickle(stream, record))
    except CheckpointError:
        raise
    except _Refused as e:
        raise CorruptCheckpointError(path, str(e)) from None
    except (ValueError, EOFError, struct.error, zipfile.BadZipFile, UnicodeDecodeError, OverflowError, KeyError,
            RuntimeError, zlib.error, lzma.LZMAError) as e:
        raise CorruptCheckpointError(path, f"malformed pickle or zip ({type(e).__name__}: {e})") from None
    except OSError as e:
        if e.errno is None:    # a decoder's error (bz2 "Invalid data stream"), not the OS's
            raise CorruptCheckpointError(path, f"malformed zip ({e})") from None
        raise CheckpointError(path, e.strerror or str(e)) from None
    every: Counter = Counter()
    for s in scans:
        every.update(s.globals)
    unsafe = sorted(g for g in every if not is_allowed(g))
    return {
        "schema": SCAN_SCHEMA,
        "path": path,
        "pickles": [{"record": s.record, "opcodes": s.opcodes,
                     "globals": [{"name": g, "count": n, "allowed": is_allowed(g)} for g, n in sorted(s.globals.items())]}
                    for s in scans],
        "globals": [{"name": g, "count": n, "allowed": is_allowed(g)} for g, n in sorted(every.items())],
        "unsafe_globals": unsafe,
        "weights_only_loadable": not unsafe,
        "would_run_code": bool(unsafe),
        "verdict": ("UNSAFE: torch.load without weights_only would import and may call: " + ", ".join(unsafe)) if unsafe
        else "safe: every global is in torch's weights_only allowlist",
    }


__all__ = ["ALLOWED_GLOBALS", "SafeUnpickler", "is_allowed", "open_legacy", "open_zip", "scan", "scan_pickle", "walk"]
