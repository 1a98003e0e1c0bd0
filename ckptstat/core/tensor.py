"""The core data model: a checkpoint is a set of tensor descriptions read from headers alone,
plus a way to read one tensor's values, or a chunk of them, on demand."""
from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import CheckpointError, CorruptCheckpointError, reading
from . import dtypes
from .files import file_size, open_regular
from .io import RawFile, contiguous_strides, extent, read_bytes, read_view
from .limits import limits
from .text import has_surrogate, inert

if TYPE_CHECKING:  # numpy is imported only where values are read: a summary needs headers alone
    from numpy.typing import NDArray

DEFAULT_CHUNK_BYTES = 16 << 20
# `ckptstat stats`' chunk: stored bytes per read (a bf16 chunk widens to 8 MiB f32, 16 MiB f64 where it widens)
STATS_CHUNK_BYTES = 4 << 20
INT64_MAX = 2**63 - 1   # torch, TF, ggml and numpy all hold a tensor's element count in an int64


@dataclass(frozen=True)
class TensorInfo:
    """One tensor as its file describes it. Nothing here has touched the tensor's values.

    offset is the absolute byte offset of element 0 in `file` (None when the bytes are not directly
    addressable, e.g. a compressed zip record: the format's reader then knows how to get them);
    stride is in elements and set only for a view that is not C-contiguous; storage names the
    buffer the bytes live in, so that two names over one storage and view are aliases (tied weights).
    conj / neg are torch's conjugate and negative bits (a lazy `x.conj()` or negated view saved as one): the bytes
    are stored as they are, and torch.load gives them conjugated / negated, as the values read here are.
    """

    name: str
    dtype: str
    shape: tuple[int, ...]
    file: str
    offset: int | None
    nbytes: int
    byteorder: str = "little"
    stride: tuple[int, ...] | None = None
    storage: str | None = None
    extra: Mapping[str, object] = field(default_factory=dict, compare=False, hash=False)
    conj: bool = False
    neg: bool = False

    def __post_init__(self) -> None:
        check_name(self.file, self.name)
        # Every reader's shape passes here: a dimension or a product past int64 is an error, never a
        # Python big int that later code multiplies or loops over.
        n = 1
        for i, d in enumerate(self.shape):
            if isinstance(d, bool) or not isinstance(d, int) or d < 0 or d > INT64_MAX:
                what = ("not an integer" if isinstance(d, bool) or not isinstance(d, int) else "negative" if d < 0
                        else "larger than 2^63-1")
                raise CorruptCheckpointError(self.file, f"tensor {self.name!r}: dimension {i} is {what}")
            n *= d
            if n > INT64_MAX:
                raise CorruptCheckpointError(self.file, f"tensor {self.name!r}: shape of rank {len(self.shape)} holds "
                                                        "more than 2^63-1 elements (int64 overflows)")

    @classmethod
    def validated(cls, name: str, dtype: str, shape: tuple[int, ...], file: str, offset: int, nbytes: int) -> TensorInfo:
        """A contiguous little-endian tensor whose shape the caller has checked as __post_init__ does (plain
        ints, 0 < product <= 2^63-1), built without the frozen dataclass's setattr per field: a reader of a
        million-tensor header calls this a million times (docs/performance.md). Equal to TensorInfo(...)."""
        if not name.isascii():
            check_name(file, name)
        obj = object.__new__(cls)
        d = obj.__dict__   # the defaulted fields (byteorder, stride, storage, extra) are read from the class
        d["name"] = name
        d["dtype"] = dtype
        d["shape"] = shape
        d["file"] = file
        d["offset"] = offset
        d["nbytes"] = nbytes
        return obj

    # Plain properties, not cached ones: a cache in each instance's __dict__ costs ~0.75 KB a tensor
    # (150 MB on a 200k-tensor header) and saves no measurable time (docs/performance.md).
    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def dt(self) -> dtypes.DType:
        return dtypes.get(self.dtype)

    @property
    def math_bits(self) -> bool:
        """Whether the values read differ from the stored bytes' (conj / neg: Checkpoint reads them applied)."""
        return self.conj or self.neg

    @property
    def byte_size(self) -> int:
        """Bytes the tensor's elements take, packed (what a parameter costs in memory)."""
        return self.dt.nbytes(self.numel)

    @property
    def alias_key(self) -> tuple[object, ...]:
        """Equal for two names that are the same tensor (same storage, offset, shape, stride and dtype: a float8
        tensor and its uint8 view, which torch.save writes over one storage, are two tensors of other values). A
        tensor with neither storage nor offset (ONNX values in typed fields, not raw bytes) is its own, and so is one
        of no bytes: it has none to share (safetensors puts every 0-byte tensor at its neighbour's offset)."""
        if (self.storage is None and self.offset is None) or not self.nbytes:
            return (self.file, self.name)
        return (self.file, self.storage, self.offset, self.shape, self.stride, self.dtype)


def check_name(file: str, name: object) -> None:
    """Every reader's tensor names pass here: a name must be text that UTF-8 can write. A lone surrogate
    (`\\ud800` in a safetensors header's JSON, which Python's json accepts and the safetensors library
    refuses; BINUNICODE bytes a pickle's 'surrogatepass' decodes) is refused in one line, for every format
    alike: such a name cannot be printed, written to a report, nor put in strict JSON (docs/security.md)."""
    if isinstance(name, str) and has_surrogate(name):
        raise CorruptCheckpointError(file, f"tensor name {inert(ascii(name)[1:-1][:120])!r} holds a lone surrogate: "
                                           "not valid Unicode (the safetensors library refuses it too)")


# `validated` instances read `extra` from the class: no extra facts, and read-only, so no instance can
# change another's (replace() and TensorInfo(...) still give each their own dict).
TensorInfo.extra = MappingProxyType({})

Reader = Callable[[TensorInfo, int, int], "NDArray[Any]"]
_T = TypeVar("_T")


def stored_bytes(info: TensorInfo) -> int:
    """Bytes the tensor's values come from: the storage span of a strided view (a stride-0 `expand`
    stores one row for many), else what the reader recorded (an HDF5 dataset: its allocated chunks)."""
    if info.stride is not None and len(info.stride) == len(info.shape):
        return extent(info.shape, info.stride) * max(info.dt.bits // 8, 1)
    return info.nbytes


def check_inflation(file: str, what: str, inflated: int, deflated: int) -> None:
    """Refuse to decompress `what` (deflated to `deflated` bytes from `inflated`) past limits().inflate_ratio x its
    compressed size + expansion_floor: the work and the temporary files stay linear in the bytes stored."""
    lim = limits()
    if inflated > lim.inflate_ratio * deflated + lim.expansion_floor:
        raise CorruptCheckpointError(file, f"{what} inflates from {deflated:,} bytes to {inflated:,}, more than "
                                           f"{lim.inflate_ratio}x; not decompressed (--limit inflate_ratio=N)")


def check_expansion(info: TensorInfo) -> None:
    """Refuse to read values a tensor does not store: more than limits().expansion bytes of values per
    stored byte (+ expansion_floor), e.g. a stride-0 view over a huge shape, or an HDF5 dataset of
    2^60 unallocated elements; a deflated tensor (`extra["deflated"]`: its compressed bytes) past
    limits().inflate_ratio (of `extra["inflated"]`, the bytes it decompresses to, where more than its values). The
    work a value read does is then linear in the bytes stored."""
    deflated, inflated = info.extra.get("deflated"), info.extra.get("inflated")
    if isinstance(deflated, int):   # (`inflated`: what decompression yields when more than the values, zarr's padding)
        check_inflation(info.file, f"tensor {info.name!r}", inflated if isinstance(inflated, int) else info.nbytes,
                        deflated)
    lim = limits()
    logical, stored = info.byte_size, stored_bytes(info)
    if logical > lim.expansion * stored + lim.expansion_floor:
        raise CorruptCheckpointError(info.file, f"tensor {info.name!r} describes {logical:,} bytes of values but stores "
                                                f"{stored:,}; refusing to read more than {lim.expansion}x what is stored "
                                                "(a stride-0 view, or unallocated/compressed data; --limit expansion=N)")


def read_flat_file(info: TensorInfo, start: int, count: int) -> NDArray[Any]:
    """Elements [start, start + count) of the C-order flattened tensor, decoded.

    Works for any tensor whose bytes sit at a known offset of a plain file: contiguous ones are read
    from the exact byte range; strided views read only the storage runs those elements lie in
    (read_view: memory a small multiple of the chunk, bytes read about the chunk's).
    """
    d = info.dt
    if info.offset is None:
        raise ValueError(f"{info.name}: no byte offset; the format must supply a reader")
    if info.stride is None or info.stride == contiguous_strides(info.shape):
        if (start * d.bits) % 8:
            raise ValueError(f"chunk start {start} is not byte-aligned for {info.dtype}")
        lo = start * d.bits // 8
        raw = read_bytes(info.file, info.offset + lo, d.nbytes(count))
        return dtypes.decode(raw, info.dtype, count, info.byteorder)
    # A strided view (torch only): read the bytes the requested elements need, not the whole span.
    with open_regular(info.file, buffering=0) as f:
        view = read_view(RawFile(f, info.file), info.offset, d.bits // 8, info.shape, info.stride, start, count)
    return dtypes.decode(view, info.dtype, count, info.byteorder)


def apply_math_bits(info: TensorInfo, values: NDArray[Any]) -> NDArray[Any]:
    """Decoded values with the tensor's conjugate and negative bits applied, as torch.load gives them."""
    if info.conj:
        values = values.conj()
    return -values if info.neg else values


@dataclass
class Checkpoint:
    """A checkpoint opened from headers: tensor descriptions, metadata and the config found beside it."""

    path: str
    format: str
    tensors: Mapping[str, TensorInfo]
    files: tuple[str, ...]
    metadata: dict[str, str] = field(default_factory=dict)
    config: dict[str, Any] | None = None
    config_path: str | None = None
    # Where `config` came from when no file holds it (None: config_path, or no config): a transformers model pickled
    # whole carries its own (formats/torch/model_config.py: "model.config of the pickle").
    config_from: str | None = None
    readers: dict[str, Reader] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    # The reader proved that no two tensors share a byte (safetensors refuses overlapping data_offsets), so
    # no name is an alias of another and the census need not look (census/counts.py aliases).
    distinct: bool = False
    # Names the file says are the same tensor as a stored name without storing them (dropped -> kept),
    # as safetensors.torch.save_model records them in __metadata__.
    dropped: dict[str, str] = field(default_factory=dict)
    # The architecture the file itself declares (GGUF general.architecture), else None.
    declared_architecture: str | None = None
    # Why the totals are partial (a GGUF split set with shards missing: formats/gguf_split.py), else None.
    partial: str | None = None
    # A PEFT adapter's adapter_config.json (and its path) when the weights are an adapter's, not a model's
    # (formats/folders.py); the census then resolves no architecture from the adapter's tensor names.
    adapter: dict[str, Any] | None = None
    adapter_path: str | None = None
    # The quantisation record beside a config.json without a quantization_config (modelopt's hf_quant_config.json,
    # AutoGPTQ's quantize_config.json: their older uploads' only record, which their loaders read; formats/folders.py)
    quant_sidecar: dict[str, Any] | None = None
    # What a training library's folder or file says of its run (formats/training.py): library, global_step, epoch,
    # learning_rate, the optimizer state's file; None for a plain model checkpoint.
    training: dict[str, Any] | None = None
    # Values the format stores beside its tensors, by name (a DCP folder's non-tensor items: formats/dcp/objects.py):
    # {bytes, file, offset, type, value}, `unread` saying why where no value is shown.
    objects: dict[str, dict[str, Any]] = field(default_factory=dict)
    # An optimizer state's prefix (`optimizer.state.3`) -> the name of the parameter it belongs to, where the
    # optimizer's param_groups name them (torch >= 2.6 optimizers built from named_parameters(): `param_names`).
    optimizer_params: dict[str, str] = field(default_factory=dict)
    # A flat optimizer state (DeepSpeed ZeRO's partition, `...base_optimizer_state.state.0`) -> the slices of it each
    # parameter owns, (name, first element, elements), from the file's own map (ZeRO's param_slice_mappings).
    optimizer_fragments: dict[str, tuple[tuple[str, int, int], ...]] = field(default_factory=dict)
    # An index-keyed optimizer state whose param_groups do not name their parameters: its prefix
    # (`optimizer_states.0.state`) -> each param group's `params` indices, in the file's order (formats/torch/training.py).
    optimizer_groups: dict[str, tuple[tuple[int, ...], ...]] = field(default_factory=dict)
    # Who built those groups, where the folder says: "transformers Trainer" (Trainer.create_optimizer: the
    # parameters it decays, then the others; formats/training.py), else None.
    optimizer_builder: str | None = None
    # Roles the file itself records, which the name rules yield to (a torch.export archive's buffers and tensor
    # constants: `is_param` false), by name.
    roles: dict[str, str] = field(default_factory=dict)
    # The tensors are in the order the writer gave them (a torch pickle's dict: a state_dict in module order). False
    # where a format reorders them (safetensors writers sort the names) or cannot say.
    ordered: bool = False
    # Tables the layers above derive from the tensors and config (Checkpoint.derived); not an init argument, so a
    # view made with dataclasses.replace starts without them.
    _derived: dict[Hashable, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __len__(self) -> int:
        return len(self.tensors)

    def derived(self, key: Hashable, compute: Callable[[Checkpoint], _T]) -> _T:
        """`compute(self)`, once per key: a table derived from the tensors and config (placements, aliases, the
        resolved architecture, ...). A Checkpoint's tensors and config are fixed once open_checkpoint returns: the
        readers in formats/ build them and nothing above assigns them (tests/test_layering.py); a changed view is a
        new Checkpoint (dataclasses.replace), whose derived tables start empty."""
        if key not in self._derived:
            self._derived[key] = compute(self)
        value: _T = self._derived[key]
        return value

    def __iter__(self) -> Iterator[TensorInfo]:
        return iter(self.tensors.values())

    def object_value(self, name: str) -> Any:
        """The value `objects` holds under `name`, for comparing checkpoints (diff, trend): its type where it was not
        read, None where there is none."""
        o = self.objects.get(name)
        return None if o is None else o["value"] if "value" in o else f"<{o.get('type')}, not read>"

    def editable(self) -> dict[str, TensorInfo]:
        """The tensors as a dict that a reader in formats/ may change while it builds the checkpoint (a reader's
        TensorTable, core/tensor_table.py, becomes one)."""
        if not isinstance(self.tensors, dict):
            self.tensors = dict(self.tensors.items())
        return self.tensors

    def __getitem__(self, name: str) -> TensorInfo:
        return self.tensors[name]

    @property
    def inputs(self) -> tuple[str, ...]:
        """Every file opening it read: the path opened (a sharded checkpoint's index), its files, the config.json
        and adapter_config.json read beside them; what an output (-o) must never be (core/files.py check_output)."""
        return tuple(p for p in (self.path, *self.files, self.config_path, self.adapter_path) if p is not None)

    def close(self) -> None:
        """Release what readers hold open (a compressed zip record streamed across chunks)."""
        for reader in {id(r): r for r in self.readers.values()}.values():
            close = getattr(reader, "close", None)
            if close is not None:
                close()

    def __enter__(self) -> Checkpoint:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def config_kind(self) -> str:
        """What held `config`, as labels name it: "config.json", or config_from (a pickled model's own)."""
        return self.config_from or "config.json"

    @property
    def file_size(self) -> int:
        return sum(file_size(f) for f in self.files)

    def _reader(self, info: TensorInfo) -> Reader:
        return self.readers.get(info.file, read_flat_file)

    def _read(self, info: TensorInfo, start: int, count: int) -> NDArray[Any]:
        """The one place values are read: what a reader trips over in a damaged file (a broken deflate
        stream, a bad CRC, a file shorter than its header said) becomes a CorruptCheckpointError
        naming the file and tensor, as open_checkpoint does for headers."""
        if info.dt.kind == "str":
            raise CheckpointError(info.file, f"tensor {info.name!r} holds strings, which have no numeric values")
        check_expansion(info)
        with reading(info.file, f"tensor {info.name!r}: cannot read its values"):
            return apply_math_bits(info, self._reader(info)(info, start, count))

    def read_elements(self, name: str, start: int, count: int) -> NDArray[Any]:
        """Elements [start, start + count) of the C-order flattened tensor, decoded."""
        return self._read(self.tensors[name], start, count)

    def read_stored(self, name: str, start: int, count: int) -> NDArray[Any]:
        """Elements [start, start + count) of a tensor of one-byte elements as stored, not decoded (uint8: a float8
        tensor's codes)."""
        info = self.tensors[name]
        if info.dt.bits != 8 or info.dt.lanes != 1:
            raise ValueError(f"{name}: {info.dtype} elements are not one byte each")
        return self._read(replace(info, dtype="U8", conj=False, neg=False), start, count)

    def read(self, name: str) -> NDArray[Any]:
        """The whole tensor, decoded (bf16 and fp8 widen to float32; a packed element's values, F4_X2's two fp4,
        along a last axis of their own). For big tensors use iter_chunks."""
        info = self.tensors[name]
        lanes = info.dt.lanes
        return self._read(info, 0, info.numel).reshape(info.shape + ((lanes,) if lanes > 1 else ()))

    def iter_chunks(self, name: str, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> Iterator[NDArray[Any]]:
        """The tensor's values in C order, as flat arrays of about chunk_bytes stored bytes each (`lanes` values an
        element: dtypes.decode)."""
        info = self.tensors[name]
        step = max(8, (chunk_bytes * 8 // max(info.dt.bits, 1)) // 8 * 8)
        for start in range(0, info.numel, step):
            yield self._read(info, start, min(step, info.numel - start))
