"""torch.distributed.checkpoint (DCP) folders, read without torch (docs/dcp.md).

`torch.distributed.checkpoint.save` with its FileSystemWriter (torch/distributed/checkpoint/filesystem.py,
torch 2.13) writes a folder:

- `.metadata`: `pickle.dump` of a `Metadata` (checkpoint/metadata.py): `state_dict_metadata` maps each
  flattened name (fqn) to a `TensorStorageMetadata` (`properties` pickled as the tuple (dtype, layout,
  requires_grad, memory format code, pin_memory), `size`, `chunks`: `ChunkStorageMetadata(offsets, sizes)`,
  the boxes each rank wrote) or a `BytesStorageMetadata` (any other object, torch.save'd); `storage_data` maps
  `MetadataIndex(fqn, offset)` (offset: the chunk's `offsets`) to `_StorageInfo(relative_path, offset,
  length[, transform_descriptors])`.
- `__<rank>_<n>.distcp`: the items one after the other, each a whole `torch.save` zip of the chunk's tensor
  (`_write_item`: SerializationFormat.TORCH_SAVE, the default) at `offset`, `length` bytes long.

The pickle is walked by the torch reader's SafeUnpickler with the DCP metadata classes added as recording
stubs (`_DcpUnpickler`, a RecordingUnpickler): nothing is imported or called. Each chunk's zip is read as a torch.save file
through a window on the `.distcp` file. A tensor in one chunk is addressed by its byte offset; one in
several chunks gets a reader (`_Chunks`) that assembles any element range from the chunks it crosses.
"""
from __future__ import annotations

import io
import json
import math
import os
import re
from collections.abc import Callable, Iterator
from typing import IO, Any

from ...core import Checkpoint, TensorInfo, dtypes
from ...core.chunked import Assembler
from ...core.chunked import Box as _Chunk
from ...core.files import check_inside, file_size, open_regular
from ...core.io import RawFile, Window, contiguous_strides, pread, read_view
from ...core.tensor import apply_math_bits, read_flat_file
from ...errors import CheckpointError, CorruptCheckpointError
from ..registry import _FILE_HOOKS, _FOLDER_HOOKS, Format, Probe, register
from ..torch.allowlist import DTypeRef
from ..torch.containers import StorageRecord, zip_contents
from ..torch.reader import build_tensors
from ..torch.unpickler import Record, RecordingUnpickler, key_text, unpickle, walk
from . import extensions, megatron
from .extensions import Item as _Item
from .extensions import extensions_text
from .objects import read_objects, training_of

METADATA = ".metadata"                      # filesystem.py `_metadata_fn`
_MODULE = "torch.distributed.checkpoint"
MAX_METADATA = 256 << 20                    # bytes of `.metadata` pickle read


# filesystem.py _StorageInfo, metadata.py classes: recorded, never built
_CLASSES = {f"{_MODULE}.filesystem._StorageInfo",
            *(f"{_MODULE}.metadata.{c}" for c in ("Metadata", "TensorStorageMetadata", "TensorProperties",
                                                   "ChunkStorageMetadata", "BytesStorageMetadata", "MetadataIndex",
                                                   "StorageMeta")),
            # planner.py's plan dataclasses: Megatron-Core's torch_dist save keeps every rank's SavePlan in the
            # Metadata it pickles (`all_local_plans`, megatron/core/dist_checkpointing/strategies/state_dict_saver.py)
            *(f"{_MODULE}.planner.{c}" for c in ("SavePlan", "WriteItem", "TensorWriteData", "BytesIOWriteData"))}


def _mem_format(code: object = 0) -> object:
    return code      # metadata.py _MEM_FORMAT_ENCODING(code): an Enum of ints


def _path(*parts: object) -> str:
    return "/".join(str(p) for p in parts)[:400]   # StorageMeta.checkpoint_id, a pathlib path


_CALLS: dict[str, Callable[..., object]] = {f"{_MODULE}.metadata._MEM_FORMAT_ENCODING": _mem_format,
          f"{_MODULE}.planner.WriteItemType": _mem_format,    # an Enum of ints, pickled by value
          **{f"pathlib.{c}": _path for c in ("PosixPath", "WindowsPath", "PurePosixPath", "PureWindowsPath")}}
# Every global a genuine .metadata pickle imports beyond torch's weights_only allowlist: DCP's own metadata and
# plan dataclasses, its memory-format and write-item enums and pathlib paths (analysis/scan/ judges a .metadata file by them).
DCP_GLOBALS = frozenset(_CLASSES | set(_CALLS))


class _DcpUnpickler(RecordingUnpickler):
    """torch's weights_only allowlist plus the DCP metadata classes, as records (see module doc)."""

    CLASSES = frozenset(_CLASSES)
    CALLS = _CALLS
    WHAT = "a DCP metadata class"


def _read_metadata(path: str) -> Record:
    check_inside(path, "file")   # (every file of the folder before it is opened: docs/security.md)
    size = file_size(path)
    if size > MAX_METADATA:
        raise CorruptCheckpointError(path, f"{METADATA} is {size:,} bytes, more than the {MAX_METADATA:,} read")
    with open_regular(path) as f:
        data = f.read(size)
    # (unpickle: pickle's own errors on a broken stream, EOFError, UnpicklingError, TypeError..., become a
    # CorruptCheckpointError naming the pickle here, not only at open_checkpoint's boundary: scan reads it too)
    obj, _ = unpickle(io.BytesIO(data), path, f"{METADATA} pickle", storages=False, unpickler=_DcpUnpickler)
    if not (isinstance(obj, Record) and obj.kind == "Metadata" and isinstance(obj.state, dict)):
        raise CorruptCheckpointError(path, f"{METADATA} does not hold a torch.distributed.checkpoint Metadata")
    return obj


def _ints(path: str, value: object, what: str) -> tuple[int, ...]:
    if not isinstance(value, tuple) or not all(type(v) is int and v >= 0 for v in value):
        raise CorruptCheckpointError(path, f"{what} is {str(value)[:60]}, not a tuple of non-negative integers")
    return value


def _record(path: str, value: object, kind: str, what: str) -> Record:
    if not (isinstance(value, Record) and value.kind == kind and isinstance(value.state, (dict, tuple))):
        raise CorruptCheckpointError(path, f"{what} is not a {kind}")
    return value


def _storage(path: str, folder: str, meta: Record, sizes: dict[str, int]) -> dict[tuple[str, tuple[int, ...]], _Item]:
    """storage_data: (fqn, chunk offsets) -> its item, every offset and length checked against its file."""
    data = meta.field("storage_data", 0)
    if not isinstance(data, dict):
        raise CorruptCheckpointError(path, "Metadata.storage_data is not a dict")
    out: dict[tuple[str, tuple[int, ...]], _Item] = {}
    for key, value in data.items():
        index = _record(path, key, "MetadataIndex", "a storage_data key")
        fqn = index.field("fqn", 0)
        info = _record(path, value, "_StorageInfo", f"storage_data[{str(fqn)[:60]!r}]")
        rel, offset, length = (info.field(n, i) for i, n in enumerate(("relative_path", "offset", "length")))
        if not isinstance(fqn, str) or not isinstance(rel, str):
            raise CorruptCheckpointError(path, "a storage_data entry without a name or file")
        if os.path.basename(rel) != rel or rel in ("", ".", "..") or "\\" in rel:
            raise CorruptCheckpointError(path, f"{fqn!r} is stored in {rel[:80]!r}, not a file of the checkpoint's folder")
        ext = info.field("transform_descriptors", 3) or ()
        if not (isinstance(ext, (list, tuple)) and all(isinstance(e, str) for e in ext)):
            raise CorruptCheckpointError(path, f"{fqn!r}: transform_descriptors is {str(ext)[:60]}, not a list of names")
        if rel not in sizes:
            file = os.path.join(folder, rel)
            check_inside(file, "file", path)   # a rank's file linked out of the folder: refused before it is read
            if not os.path.isfile(file):
                raise CorruptCheckpointError(path, f"{fqn!r} is stored in {rel!r}, which is missing")
            sizes[rel] = file_size(file)
        if type(offset) is not int or type(length) is not int or offset < 0 or length < 0 \
                or offset + length > sizes[rel]:
            raise CorruptCheckpointError(path, f"{fqn!r}: {length!r} bytes at offset {offset!r} of {rel!r}, past the "
                                               f"end of the {sizes[rel]:,}-byte file")
        chunk = index.field("offset", 1)
        out[(fqn, () if chunk is None else _ints(path, chunk, f"{fqn!r} storage offset"))] = \
            _Item(os.path.join(folder, rel), offset, length, tuple(e[:80] for e in ext))
    return out


SHARDING_KEY = "DCP_SHARDING_INFO"   # _hf_utils.py CUSTOM_METADATA_KEY: fqn -> {"saved_offsets": chunk offsets}


def _safetensors_chunk(item: _Item, blobs: dict[tuple[str, int], Checkpoint], fqn: str,
                       offsets: tuple[int, ...]) -> TensorInfo:
    """A chunk stored with SerializationFormat.SAFETENSORS (filesystem.py `_write_files_from_queue`): each rank file
    ends with one safetensors blob of all its chunks, keyed by fqn, `__metadata__[DCP_SHARDING_INFO]` giving each
    chunk's offsets; every chunk's `_StorageInfo` points at the blob's first byte (its length is the chunk's bytes).
    The blob is read by the safetensors reader, its checks included (it must end at the file's end)."""
    from ..safetensors import open_safetensors

    key = (item.file, item.offset)
    if key not in blobs:
        blobs[key] = open_safetensors(item.file, start=item.offset)
    blob = blobs[key]
    t = blob.tensors.get(fqn)
    if t is None:
        raise CorruptCheckpointError(item.file, f"{fqn!r}: not in the safetensors blob at offset {item.offset:,}")
    try:
        saved = json.loads(blob.metadata.get(SHARDING_KEY, "{}")).get(fqn, {}).get("saved_offsets")
    except (ValueError, AttributeError):
        saved = None
    if saved is not None and tuple(saved) != offsets:
        raise CorruptCheckpointError(item.file, f"{fqn!r}: the blob's {SHARDING_KEY} says offsets {saved!r}, the "
                                                f"metadata {list(offsets)}")
    return t


def _chunk_tensor(item: _Item, f: IO[bytes], fqn: str, dtype: str, sizes: tuple[int, ...],
                  offsets: tuple[int, ...], blobs: dict[tuple[str, int], Checkpoint]) -> TensorInfo:
    """The tensor one item holds (a torch.save zip, or its entry in the file's safetensors blob), its offset made
    absolute, checked against the metadata."""
    head = pread(f, 9, item.offset)
    if head[:4] != b"PK\x03\x04" and head[8:9] == b"{":
        t = _safetensors_chunk(item, blobs, fqn, offsets)
        if t.dtype != dtype or t.shape != sizes:
            raise CorruptCheckpointError(item.file, f"{fqn!r}: the safetensors blob holds {t.dtype}{list(t.shape)}, "
                                                    f"the metadata says {dtype}{list(sizes)}")
        return t
    window: Any = Window(f, item.offset, item.length)
    return _zip_tensor(item, window, item.length, item.offset, fqn, dtype, sizes)


def _zip_tensor(item: _Item, f: IO[bytes], size: int, base: int, fqn: str, dtype: str,
                sizes: tuple[int, ...]) -> TensorInfo:
    """The one tensor of the torch.save zip `f` (`size` bytes: an item's window, or its decompressed stream), its
    offsets `base` + the zip's, checked against the metadata."""
    contents = zip_contents(item.file, f, size)
    if contents.compressed:
        raise CorruptCheckpointError(item.file, f"{fqn!r}: a compressed storage record (torch.save stores them)")
    found = list(walk(contents.obj, item.file, contents.pickle_bytes))
    if len(found) != 1:
        raise CorruptCheckpointError(item.file, f"{fqn!r}: the item at offset {item.offset:,} holds {len(found)} "
                                                "tensors, not one")
    records = {k: StorageRecord(r.key, r.nbytes, None if r.offset is None else r.offset + base, r.record)
               for k, r in contents.records.items()}
    tensors, _ = build_tensors(item.file, found, records, contents.byteorder)
    t = next(iter(tensors.values()))
    if t.dtype != dtype or t.shape != sizes:
        raise CorruptCheckpointError(item.file, f"{fqn!r}: the item at offset {item.offset:,} holds "
                                                f"{t.dtype}{list(t.shape)}, the metadata says {dtype}{list(sizes)}")
    return t


class _Chunks(Assembler):
    """A DCP tensor's chunks (core/chunked.py), each read by offset or from its stream-extension item decompressed."""

    def __init__(self) -> None:
        super().__init__()
        self.decoded: tuple[_Item, IO[bytes], TensorInfo] | None = None   # the last item decompressed (extensions.py)

    def close(self) -> None:
        if self.decoded is not None:
            self.decoded[1].close()
            self.decoded = None

    def values(self, name: str, c: _Chunk, dtype: str, start: int, count: int) -> Any:
        """Elements [start, start + count) of one chunk: by offset, or from its item decompressed (the last one kept
        in a temporary file while its values are read in blocks)."""
        item = c.item
        if item is None:
            return apply_math_bits(c.tensor, read_flat_file(c.tensor, start, count))
        if not extensions.decodable(item):
            raise CheckpointError(item.file, f"tensor {name!r} is stored through DCP stream extension "
                                             f"{extensions_text(item.extensions)}, which ckptstat does not decode")
        if self.decoded is None or self.decoded[0] != item:
            self.close()
            with open_regular(item.file) as f:
                out, size = extensions.decompressed(f, item, f"tensor {name!r} chunk", math.prod(c.sizes) *
                                              dtypes.get(dtype).bits // 8)
            try:
                t = _zip_tensor(item, out, size, 0, name, dtype, c.sizes)
            except BaseException:
                out.close()
                raise
            self.decoded = (item, out, t)
        _, out, t = self.decoded
        view = read_view(RawFile(out, item.file), t.offset or 0, t.dt.bits // 8, t.shape,
                         t.stride or contiguous_strides(t.shape), start, count)
        return apply_math_bits(t, dtypes.decode(view, t.dtype, count, t.byteorder))


def _tensor_entries(path: str, meta: Record) -> Iterator[tuple[str, str, tuple[int, ...], list[Record]]]:
    """(fqn, canonical dtype, size, chunks) of every tensor in state_dict_metadata; the other names are yielded
    with dtype ""."""
    sdm = meta.field("state_dict_metadata", 0)
    if not isinstance(sdm, dict):
        raise CorruptCheckpointError(path, "Metadata.state_dict_metadata is not a dict")
    for fqn, md in sdm.items():
        name = key_text(fqn)
        if isinstance(md, Record) and md.kind == "BytesStorageMetadata":
            yield name, "", (), []
            continue
        md = _record(path, md, "TensorStorageMetadata", f"{name!r}'s metadata")
        props = _record(path, md.field("properties", 0), "TensorProperties", f"{name!r}'s properties")
        dt = props.field("dtype", 0)
        if not isinstance(dt, DTypeRef) or dt.dtype is None:
            raise CorruptCheckpointError(path, f"{name!r}: dtype {str(getattr(dt, 'name', dt))[:40]} is not one "
                                               "ckptstat reads")
        chunks = md.field("chunks", 2)
        if not isinstance(chunks, list):
            raise CorruptCheckpointError(path, f"{name!r}: chunks is not a list")
        yield name, dt.dtype, _ints(path, md.field("size", 1), f"{name!r} size"), chunks


Box = tuple[tuple[int, ...], tuple[int, ...], _Item]   # a chunk's offsets, sizes and item


def _rank_entries(path: str, folder: str, sizes: dict[str, int]) -> tuple[Record, dict[str, tuple[str, tuple[int, ...],
                                                                                               list[Box]]], dict[str, _Item]]:
    """One metadata file's tensors (dtype, size, chunks with their items, each checked) and non-tensor items."""
    meta = _read_metadata(path)
    storage = _storage(path, folder, meta, sizes)
    tensors: dict[str, tuple[str, tuple[int, ...], list[Box]]] = {}
    objects: dict[str, _Item] = {}
    for name, dtype, size, chunks in _tensor_entries(path, meta):
        if not dtype:
            item = storage.get((name, ()))
            if item is None:
                raise CorruptCheckpointError(path, f"non-tensor item {name!r} has no storage_data entry")
            objects[name] = item
            continue
        TensorInfo(name=name, dtype=dtype, shape=size, file=path, offset=None, nbytes=0)   # checks the shape
        boxes = []
        for i, c in enumerate(chunks):
            c = _record(path, c, "ChunkStorageMetadata", f"{name!r} chunk {i}")
            offs = _ints(path, c.field("offsets", 0), f"{name!r} chunk {i} offsets")
            lens = _ints(path, c.field("sizes", 1), f"{name!r} chunk {i} sizes")
            if len(offs) != len(size) or len(lens) != len(size) or any(o + n > d for o, n, d in zip(offs, lens, size)):
                raise CorruptCheckpointError(path, f"{name!r} chunk {i} ({list(offs)} + {list(lens)}) is not inside "
                                                   f"its tensor {list(size)}")
            item = storage.get((name, offs))
            if item is None:
                raise CorruptCheckpointError(path, f"{name!r} chunk {i} at {list(offs)} has no storage_data entry")
            boxes.append((offs, lens, item))
        tensors[name] = (dtype, size, boxes)
    return meta, tensors, objects


def open_dcp(path: str) -> Checkpoint:
    """A DCP folder from its `.metadata` (the folder resolves to it: registry.FOLDER_CANDIDATES), or from its
    rank-local `__<rank>.metadata` files (all of them, whichever is named)."""
    folder = os.path.dirname(path)
    paths = rank_local(folder) if RANK_METADATA.match(os.path.basename(path)) else [path]
    sizes: dict[str, int] = {}
    specs: dict[str, tuple[str, tuple[int, ...], list[Box]]] = {}
    objects: dict[str, _Item] = {}
    repeated = 0
    for p in paths:
        meta, tensors_here, objects_here = _rank_entries(p, folder, sizes)
        for name, (dtype, size, boxes) in tensors_here.items():
            if name not in specs:
                specs[name] = (dtype, size, list(boxes))
                continue
            if specs[name][:2] != (dtype, size):
                raise CorruptCheckpointError(p, f"{name!r} is {dtype}{list(size)} here, {specs[name][0]}"
                                                f"{list(specs[name][1])} in {os.path.basename(paths[0])}")
            stored = {(o, n) for o, n, _ in specs[name][2]}
            specs[name][2].extend(b for b in boxes if (b[0], b[1]) not in stored)
            repeated += sum(1 for b in boxes if (b[0], b[1]) in stored)
        for name, item in objects_here.items():
            objects.setdefault(name, item)
    tensors: dict[str, TensorInfo] = {}
    reader = _Chunks()
    jobs: dict[str, list[tuple[str, str, tuple[int, ...], tuple[int, ...], tuple[int, ...], _Item]]] = {}
    entries = [(name, dtype, size) for name, (dtype, size, _) in specs.items()]
    for name, (dtype, size, boxes) in specs.items():
        held = sum(math.prod(lens) for _, lens, _ in boxes)
        if held != math.prod(size):
            raise CorruptCheckpointError(path, f"{name!r}: its chunks hold {held:,} elements, the tensor {math.prod(size):,}")
        for offs, lens, item in boxes:
            jobs.setdefault(item.file, []).append((name, dtype, size, offs, lens, item))
    layouts: dict[str, list[_Chunk]] = {}
    blobs: dict[tuple[str, int], Checkpoint] = {}   # the safetensors blobs read, by (file, offset)
    transformed: dict[str, list[_Item]] = {}   # tensor -> its chunks' items, written through stream extensions
    for file, items in jobs.items():
        with open_regular(file) as f:
            for name, dtype, _, offs, lens, item in items:
                if item.extensions:   # a compressed (or otherwise transformed) stream: decoded when values are read
                    transformed.setdefault(name, []).append(item)
                    layouts.setdefault(name, []).append(_Chunk(offs, lens, TensorInfo(
                        name=name, dtype=dtype, shape=lens, file=item.file, offset=None, nbytes=0), item))
                    continue
                t = _chunk_tensor(item, f, name, dtype, lens, offs, blobs)
                layouts.setdefault(name, []).append(_Chunk(offs, lens, t))
    for name, dtype, size in entries:
        parts = layouts.get(name, [])
        if len(parts) == 1 and parts[0].item is None:
            t = parts[0].tensor
            tensors[name] = TensorInfo(name=name, dtype=dtype, shape=size, file=t.file, offset=t.offset, nbytes=t.nbytes,
                                       byteorder=t.byteorder, stride=t.stride, storage=f"{t.file}@{t.offset}",
                                       extra={"dcp_chunks": 1}, conj=t.conj, neg=t.neg)
        else:
            itemsize = dtypes.get(dtype).bits // 8
            first = parts[0].tensor.file if parts else path
            extra: dict[str, Any] = {"dcp_chunks": len(parts)}
            if name in transformed:
                extra["dcp_extensions"] = sorted({e for i in transformed[name] for e in i.extensions})
            tensors[name] = TensorInfo(name=name, dtype=dtype, shape=size, file=first, offset=None,
                                       nbytes=math.prod(size) * itemsize, extra=extra)
            reader.layouts[name] = parts
    files = tuple(os.path.join(folder, rel) for rel in sorted(sizes))
    ckpt = Checkpoint(path=path, format="dcp", tensors=tensors, files=(*paths, *files),
                      metadata={"dcp.version": str(meta.field("version", 0))[:40], "dcp.files": str(len(files))},
                      readers=dict.fromkeys(files, reader))
    if RANK_METADATA.match(os.path.basename(path)):
        ckpt.metadata["dcp.rank_local_metadata"] = str(len(paths))
        ckpt.notes.append(f"rank-local metadata ({len(paths)} __<rank>.metadata files, saved without rank coordination)"
                          + (f": {repeated} chunk(s) stored by several ranks, read from the lowest rank's file"
                             if repeated else ""))
    if transformed:
        exts = sorted({e for x in transformed.values() for i in x for e in i.extensions})
        how = ("decompressed (bounded) when their values are read" if all(extensions.decodable(i) for x in
               transformed.values() for i in x) else "values not read where ckptstat does not decode the extension")
        ckpt.notes.append(f"{len(transformed)} tensor(s) stored through DCP stream extension(s) {extensions_text(exts)}: "
                          f"listed from the metadata, {how}")
    if objects:
        ckpt.objects = read_objects(objects)
    config = megatron.config_of(folder)
    if config is not None:   # Megatron-Core's torch_dist save: common.pt and metadata.json beside (megatron.py)
        ckpt.files += tuple(os.path.join(folder, n) for n in (megatron.COMMON, megatron.CONFIG)
                            if os.path.isfile(os.path.join(folder, n)))
        megatron.annotate(ckpt, folder, config)
    ckpt.training = training_of(ckpt.objects, ckpt)
    if ckpt.training is not None and config is not None:
        ckpt.training["library"] = megatron.LIBRARY
    return ckpt


RANK_METADATA = re.compile(r"^__(\d+)\.metadata$")   # filesystem.py _get_metadata_path(rank): use_collectives=False


def rank_local(folder: str) -> list[str]:
    """The folder's rank-local metadata files, by rank. DCP's save with use_collectives=False has each rank write
    `__<rank>.metadata` of its own chunks alone (FileSystemWriter.finish), replicated tensors once per rank; DCP's
    load reads the global `.metadata` first, else the rank's own file."""
    found = sorted((int(m.group(1)), n) for n in os.listdir(folder or ".") if (m := RANK_METADATA.match(n)))
    return [os.path.join(folder, n) for _, n in found]


def open_rank_local(folder: str, open_file: Callable[[str], Checkpoint]) -> Checkpoint | None:
    """A folder of rank-local metadata files without a global `.metadata` (registry._FOLDER_HOOKS), else None."""
    if os.path.exists(os.path.join(folder, METADATA)):
        return None
    paths = rank_local(folder)
    if not paths:
        return None
    ckpt = open_dcp(paths[0])
    ckpt.path = folder
    return ckpt


def object_items(path: str) -> dict[str, _Item]:
    """Where each non-tensor item of the DCP folder whose `.metadata` is `path` lies (for `ckptstat scan`, which
    judges the pickles DCP's load unpickles with torch.load(weights_only=False))."""
    meta = _read_metadata(path)
    storage = _storage(path, os.path.dirname(path), meta, {})
    return {name: storage[(name, ())] for name, dtype, _, _ in _tensor_entries(path, meta)
            if not dtype and (name, ()) in storage}


def is_metadata_head(head: bytes) -> bool:
    """A pickle (PROTO) whose first global is DCP's Metadata (filesystem.py pickles it at the top)."""
    return head[:1] == b"\x80" and f"{_MODULE}.metadata".encode() in head[:256] and b"Metadata" in head[:256]


def accept(probe: Probe) -> bool:
    return is_metadata_head(probe.head)


_FILE_HOOKS[METADATA] = open_dcp
_FOLDER_HOOKS.append(open_rank_local)
_FOLDER_HOOKS.append(megatron.open_nemo2)
register(Format("dcp", accept, open_dcp, (METADATA,)))
