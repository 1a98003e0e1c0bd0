"""torch's `weights_only=True` allowlist, as names, and what each allowed global becomes here: a stub
that records (storage key, dtype, offset, shape, stride) and never runs anything from the pickle
(docs/formats.md section 2; torch/_weights_only_unpickler.py `_get_allowed_globals`).

The allowlist is torch 2.15's, the release users run now; `ADDED` and `REMOVED` say what changed since the
release the test install pins (2.13), so that tests/test_scan_allowlist.py reads the table against either."""
from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import ClassVar, NoReturn

from ...core import dtypes

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
    "complex64": "C64", "complex128": "C128", "complex32": "C32", "bcomplex32": "BC32",
    "float8_e4m3fn": "F8_E4M3", "float8_e5m2": "F8_E5M2", "float8_e4m3fnuz": "F8_E4M3FNUZ",
    "float8_e5m2fnuz": "F8_E5M2FNUZ", "float8_e8m0fnu": "F8_E8M0", "float4_e2m1fn_x2": "F4_X2",
    "qint32": None, "qint8": None, "quint8": None, "quint2x4": None, "quint4x2": None,
    "bits16": None, "bits1x8": None, "bits2x4": None, "bits4x2": None, "bits8": None,
    **{f"uint{i}": None for i in range(1, 8)}, **{f"int{i}": None for i in range(1, 8)},
}
_TENSOR_CLASSES = ("Double", "Float", "Half", "BFloat16", "Long", "Int", "Short", "Char", "Byte", "Bool")
_REBUILDERS = (
    "_rebuild_tensor", "_rebuild_tensor_v2", "_rebuild_tensor_v3", "_rebuild_parameter",
    "_rebuild_parameter_with_state", "_rebuild_qtensor", "_rebuild_sparse_tensor",
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
# What torch registers itself with add_safe_globals when it is imported (torch 2.15): weights_only accepts these by
# default too (torch/_weights_only_unpickler.py `_get_user_allowed_globals`).
DEFAULT_SAFE_GLOBALS: frozenset[str] = frozenset({
    "torch.distributed._mesh_layout._FlatLayout", "torch.distributed._mesh_layout._MeshLayout",
})
# What the two lists gained and lost, with the torch release that changed them: 2.15 added its new dtype
# bcomplex32, and dropped `_rebuild_nested_tensor` and the nested jagged tensor's two safe globals.
ADDED: dict[str, tuple[int, int]] = {"torch.bcomplex32": (2, 15)}
REMOVED: dict[str, tuple[int, int]] = {"torch._utils._rebuild_nested_tensor": (2, 15)}
REMOVED_SAFE: dict[str, tuple[int, int]] = {"torch.nested._internal.nested_tensor.NestedTensor": (2, 15),
                                            "torch.nested._internal.nested_tensor._rebuild_njt": (2, 15)}


def allowed_in(release: tuple[int, int]) -> tuple[frozenset[str], frozenset[str]]:
    """(`_get_allowed_globals()`, `_get_user_allowed_globals()` in a fresh process) of a torch release from 2.13 on."""
    def then(names: frozenset[str], removed: dict[str, tuple[int, int]]) -> frozenset[str]:
        return frozenset({n for n in names if ADDED.get(n, (0, 0)) <= release} | {n for n, v in removed.items() if release < v})
    return then(ALLOWED_GLOBALS, REMOVED), then(DEFAULT_SAFE_GLOBALS, REMOVED_SAFE)


# torch refuses these modules even when a user extends the allowlist.
DENIED_MODULES = frozenset({"sys", "os", "posix", "nt"})
# Python 2 names the weights_only unpickler maps on every GLOBAL before looking it up
# (torch/_utils.py IMPORT_MAPPING / NAME_MAPPING, `_read_global_instruction`).
TORCH_IMPORT_MAPPING = {
    "__builtin__": "builtins", "copy_reg": "copyreg", "Queue": "queue", "repr": "reprlib", "_abcoll": "collections.abc",
    "UserDict": "collections", "UserList": "collections", "UserString": "collections", "whichdb": "dbm",
    "StringIO": "io", "cStringIO": "io",
}
TORCH_NAME_MAPPING = {
    ("__builtin__", "xrange"): ("builtins", "range"), ("__builtin__", "reduce"): ("functools", "reduce"),
    ("__builtin__", "intern"): ("sys", "intern"), ("__builtin__", "unichr"): ("builtins", "chr"),
    ("__builtin__", "unicode"): ("builtins", "str"), ("__builtin__", "long"): ("builtins", "int"),
    ("itertools", "izip"): ("builtins", "zip"), ("itertools", "imap"): ("builtins", "map"),
    ("itertools", "ifilter"): ("builtins", "filter"), ("itertools", "ifilterfalse"): ("itertools", "filterfalse"),
    ("itertools", "izip_longest"): ("itertools", "zip_longest"), ("UserDict", "IterableUserDict"): ("collections", "UserDict"),
    ("UserList", "UserList"): ("collections", "UserList"), ("UserString", "UserString"): ("collections", "UserString"),
    ("__builtin__", "basestring"): ("builtins", "str"), ("exceptions", "StandardError"): ("builtins", "Exception"),
    ("UserDict", "UserDict"): ("collections", "UserDict"),
}
# Storage class names torch.load's unpickler turns into storage types without importing anything
# (torch/storage.py `_storage_type_to_dtype_map`), with their element size.
STORAGE_ITEMSIZE = {
    "DoubleStorage": 8, "FloatStorage": 4, "HalfStorage": 2, "LongStorage": 8, "IntStorage": 4, "ShortStorage": 2,
    "CharStorage": 1, "ByteStorage": 1, "BoolStorage": 1, "BFloat16Storage": 2, "ComplexDoubleStorage": 16,
    "ComplexFloatStorage": 8, "QInt8Storage": 1, "QInt32Storage": 4, "QUInt8Storage": 1, "QUInt4x2Storage": 1,
    "QUInt2x4Storage": 1,
}


def allowed_name(full: str) -> bool:
    """`module.name`, exactly as written, is one of the globals torch's weights_only unpickler accepts."""
    return full.split(".")[0] not in DENIED_MODULES and (full in ALLOWED_GLOBALS or full in DEFAULT_SAFE_GLOBALS)


def weights_only_name(module: str, name: str) -> tuple[str, str]:
    """The (module, name) torch's weights_only unpickler looks up for a GLOBAL `module name`."""
    if (module, name) in TORCH_NAME_MAPPING:
        return TORCH_NAME_MAPPING[(module, name)]
    return TORCH_IMPORT_MAPPING.get(module, module), name


def weights_only_allows(module: str, name: str) -> bool:
    """Whether `torch.load(weights_only=True)` accepts the GLOBAL `module name` (torch 2.15)."""
    module, name = weights_only_name(module, name)
    return module not in DENIED_MODULES and allowed_name(f"{module}.{name}")


def canonical(global_name: str) -> str:
    """A dotted global name with torch's Python 2 mapping applied (`__builtin__.set` -> `builtins.set`)."""
    module, _, name = global_name.rpartition(".")
    module, name = weights_only_name(module, name)
    return f"{module}.{name}"


def is_allowed(global_name: str) -> bool:
    """Whether torch's weights_only unpickler accepts the global `module.name` (Python 2 names mapped)."""
    module, _, name = global_name.rpartition(".")
    return weights_only_allows(module, name)


class Refused(Exception):
    """The pickle asks for something a weights-only file never holds; the unpickler turns it into a
    CorruptCheckpointError naming the file and the pickle record."""


class Forbidden(Exception):
    """The pickle calls or builds a global that is neither in torch's allowlist nor plain data the reader knows;
    the unpickler turns it into an UnsafeCheckpointError naming the global (`name`) and how it was used."""

    def __init__(self, name: str, built: bool = False):
        super().__init__(name)
        self.name, self.built = name, built


@dataclass(frozen=True)
class Named:
    """A global the pickle names but does not call: inert, as nothing here imports it (a structured config's metadata
    names the user's dataclass as a type; Lightning 1.x keyed its callbacks' states by their classes). Calling or
    building it is Forbidden."""
    name: str
    shown: ClassVar[str] = "global"   # what `objects` calls its type

    def __call__(self, *args: object) -> NoReturn:   # REDUCE, INST, OBJ
        raise Forbidden(self.name)

    def __repr__(self) -> str:   # a dict key names a tensor under it: `callbacks.<module>.ModelCheckpoint.best_...`
        return self.name


# ---------------------------------------------------------------------------------------------
# What the stubs build.

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
    conj: bool = False         # torch's conjugate and negative bits (a lazy x.conj() / negated view saved as one)
    neg: bool = False


# ---------------------------------------------------------------------------------------------
# The stubs. Their signatures are torch's (torch/_utils.py), so that a call with the wrong number of
# arguments fails as it would in torch; arguments that only matter to a live tensor are ignored.

def _ints(value: object, what: str) -> tuple[int, ...]:
    if not isinstance(value, (tuple, list)) or len(value) > 64 or not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value):
        raise Refused(f"{what} must be a short tuple of non-negative ints, got {type(value).__name__}")
    return tuple(value)


def _tensor(storage: object, offset: object, size: object, stride: object, dtype: str | None) -> TensorRef:
    if not isinstance(storage, StorageRef):
        raise Refused(f"tensor rebuilt from a {type(storage).__name__}, not a storage")
    if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
        raise Refused(f"bad storage offset {offset!r}")
    shape, strides = _ints(size, "size"), _ints(stride, "stride")
    if len(shape) != len(strides):
        raise Refused(f"size {shape} and stride {strides} differ in rank")
    dt = dtype or storage.dtype
    if dt is None:
        raise Refused("tensor over an untyped storage without a dtype")
    return TensorRef(storage, dt, offset + storage.view_offset, shape, strides)


def _rebuild_tensor(storage: object, offset: object, size: object, stride: object) -> TensorRef:
    return _tensor(storage, offset, size, stride, None)


def _math_bits(ref: TensorRef, metadata: object) -> TensorRef:
    """The tensor with the bits `metadata` sets, as torch._utils.set_tensor_metadata sets them: a key present sets its
    bit whatever its bool value (torch.save writes {'conj': True} / {'neg': True}); other keys are ignored."""
    if not metadata:
        return ref
    if not isinstance(metadata, dict):
        raise Refused(f"tensor metadata is a {type(metadata).__name__}, not a dict")
    conj, neg = "conj" in metadata, "neg" in metadata
    if any(not isinstance(metadata[k], (bool, int)) for k in ("conj", "neg") if k in metadata):
        raise Refused("tensor metadata's conj / neg is not a bool")
    if conj and dtypes.get(ref.dtype).kind != "complex":
        raise Refused(f"the conjugate bit set on a {ref.dtype} tensor (torch.load fails on it)")
    if neg and ref.dtype == "BOOL":
        raise Refused("the negative bit set on a BOOL tensor (torch cannot negate it)")
    return replace(ref, conj=conj, neg=neg) if conj or neg else ref


def _rebuild_tensor_v2(storage: object, offset: object, size: object, stride: object, requires_grad: object = False,
                       hooks: object = None, metadata: object = None) -> TensorRef:
    return _math_bits(_tensor(storage, offset, size, stride, None), metadata)


def _rebuild_tensor_v3(storage: object, offset: object, size: object, stride: object, requires_grad: object,
                       hooks: object, dtype: object, metadata: object = None) -> TensorRef:
    if not isinstance(dtype, DTypeRef):
        raise Refused("_rebuild_tensor_v3 without a torch dtype")
    if dtype.dtype is None:
        raise Refused(f"dtype torch.{dtype.name} is not supported by ckptstat")
    return _math_bits(_tensor(storage, offset, size, stride, dtype.dtype), metadata)


def _rebuild_parameter(data: object, requires_grad: object = True, hooks: object = None,
                       state: object = None) -> TensorRef:
    if isinstance(data, TensorRef):
        return data
    raise Refused(f"parameter over a {type(data).__name__}, not a tensor")


_TENSOR_REBUILDERS: tuple[Callable[..., TensorRef], ...] = (
    _rebuild_tensor, _rebuild_tensor_v2, _rebuild_tensor_v3, _rebuild_parameter)


def _rebuild_from_type_v2(func: object, new_type: object, args: object, state: object) -> TensorRef:
    # torch calls func(*args) then sets the subclass type; func must be one of our own stubs.
    rebuild = next((f for f in _TENSOR_REBUILDERS if f is func), None)
    if rebuild is None or not isinstance(args, tuple):
        raise Refused("_rebuild_from_type_v2 with an unexpected rebuild function")
    return rebuild(*args)


def _unsupported(kind: str) -> Callable[..., NoReturn]:
    def stub(*args: object) -> NoReturn:
        raise Refused(f"{kind} tensors are not supported by ckptstat")
    return stub


def _encode(obj: object, encoding: str = "utf-8") -> bytes:
    # protocol-2 pickles write bytes as _codecs.encode(str, "latin1")
    if not isinstance(obj, str) or encoding not in ("latin1", "latin-1", "utf-8", "utf8", "ascii"):
        raise Refused("_codecs.encode with unexpected arguments")
    return obj.encode(encoding)


def _bytearray(obj: object = b"") -> bytearray:
    if not isinstance(obj, (bytes, bytearray, list)):  # bytearray(int) would allocate what the file says
        raise Refused("bytearray() with a non-bytes argument")
    return bytearray(obj)


def _set(items: object = ()) -> set[object]:
    if not isinstance(items, (list, tuple, set)):
        raise Refused("set() with a non-sequence argument")
    return set(items)


def _complex(re: object = 0, im: object = 0) -> complex:
    if not isinstance(re, (int, float)) or not isinstance(im, (int, float)):
        raise Refused("complex() with non-numbers")
    return complex(re, im)


def _size(dims: object = ()) -> tuple[int, ...]:
    return _ints(dims, "torch.Size")


def _device(*args: object) -> str:
    return ":".join(str(a) for a in args if isinstance(a, (str, int)))


def _layout(name: object) -> Opaque:
    # torch.serialization._get_layout("torch.sparse_coo"): how a layout pickles (sparse tensors)
    return Opaque(f"layout {str(name)[:40]}")


_FIXED: dict[str, object] = {
    "collections.OrderedDict": OrderedDict, "collections.Counter": Counter,
    "torch.nn.parameter.Parameter": _rebuild_parameter, "torch.Size": _size, "torch.device": _device,
    "torch.serialization._get_layout": _layout,
    "_codecs.encode": _encode, "builtins.bytearray": _bytearray, "builtins.set": _set,
    "builtins.complex": _complex, "torch._tensor._rebuild_from_type_v2": _rebuild_from_type_v2,
    "torch._utils._rebuild_tensor": _rebuild_tensor, "torch._utils._rebuild_tensor_v2": _rebuild_tensor_v2,
    "torch._utils._rebuild_tensor_v3": _rebuild_tensor_v3,
    "torch._utils._rebuild_parameter": _rebuild_parameter,
    "torch._utils._rebuild_parameter_with_state": _rebuild_parameter,
    "torch.storage.UntypedStorage": StorageType("UntypedStorage", None),
}


# What the other rebuild functions build, in a refusal's words ("... tensors are not supported by ckptstat").
_KINDS = {"_rebuild_qtensor": "quantized (torch.quantize_per_tensor)", "_rebuild_sparse_tensor": "sparse",
          "_rebuild_meta_tensor_no_storage": "meta-device (no stored values)",
          "_rebuild_wrapper_subclass": "tensor-subclass (a wrapper such as DTensor or a torchao type)",
          "_rebuild_device_tensor_from_numpy": "device (XLA, MTIA: saved through numpy)",
          "_rebuild_device_tensor_from_cpu_tensor": "device (saved through a CPU copy)"}


def stub_for(name: str) -> object:
    """What the allowlisted global `name` becomes when the pickle loads it."""
    name = canonical(name)
    module, _, attr = name.rpartition(".")
    if name in _FIXED:
        return _FIXED[name]
    if module == "torch._utils":
        return _unsupported(_KINDS.get(attr, attr.replace("_rebuild_", "").replace("_", " ")))
    if module in ("torch", "torch.cuda") and attr in STORAGE_DTYPES:
        return StorageType(attr, STORAGE_DTYPES[attr])
    if module == "torch" and attr in _QUANT_STORAGES:      # their tensors are refused by _rebuild_qtensor's stub
        return StorageType(attr, None)
    if module == "torch" and attr in TORCH_DTYPES:
        return DTypeRef(attr, TORCH_DTYPES[attr])
    return Opaque(name)
