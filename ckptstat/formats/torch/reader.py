"""The torch reader: a container's unpickled object and storage records (containers.py) become
TensorInfo, each view checked against its storage's bytes; and the two formats' registration."""
from __future__ import annotations

import math
import struct
import zipfile

from ...core import Checkpoint, TensorInfo, dtypes
from ...core.io import contiguous_strides, extent
from ...errors import CheckpointError, CorruptCheckpointError, reading
from ..registry import Format, Probe, register
from .allowlist import TensorRef
from .containers import Contents, StorageRecord, is_data_pkl, is_legacy_head, read_legacy, read_zip
from .data_classes import data_note
from .model_config import embedded_config
from .pickled_objects import objects_note
from .torchscript import script_note
from .training import torch_training, zero_fragments
from .unpickler import SafeUnpickler, int_text, key_text, walk
from .values import checkpoint_objects
from .zipstream import ZipStreamReader

_View = tuple[int, tuple[int, ...], tuple[int, ...] | None]   # storage offset, shape, stride (None: contiguous)


def _is_contiguous(shape: tuple[int, ...], stride: tuple[int, ...]) -> bool:
    want = contiguous_strides(shape)
    return all(n <= 1 or s == w for n, s, w in zip(shape, stride, want))


def build_tensors(path: str, found: list[tuple[str, TensorRef]], records: dict[str, StorageRecord],
                  byteorder: str) -> tuple[dict[str, TensorInfo], list[str]]:
    tensors: dict[str, TensorInfo] = {}
    views: dict[str, set[_View]] = {}
    used: dict[str, int] = {}
    primes: dict[str, int] = {}   # name -> collisions so far (a search of name', name'', ... was cubic in them)
    for name, ref in found:
        rec = records.get(ref.storage.key)
        if rec is None:
            raise CorruptCheckpointError(path, f"tensor {name!r} uses storage {ref.storage.key!r}, which has no record")
        itemsize = dtypes.get(ref.dtype).bits // 8
        end = (ref.offset + extent(ref.shape, ref.stride)) * itemsize
        if end > rec.nbytes:
            raise CorruptCheckpointError(
                path, f"tensor {name!r} ({ref.dtype}{list(ref.shape)}, stride {list(ref.stride)}, offset {ref.offset}) "
                f"needs {end:,} bytes of {rec.record}, which holds {rec.nbytes:,}")
        if name in tensors:  # two paths that join to one name (e.g. keys "a.b" and a -> b): name', name'', name'3...
            base = name
            while name in tensors:
                k = primes[base] = primes.get(base, 0) + 1
                name = base + ("'" * k if k < 3 else f"'{k}")
        contiguous = _is_contiguous(ref.shape, ref.stride)
        numel = math.prod(ref.shape)
        tensors[name] = TensorInfo(
            name=name, dtype=ref.dtype, shape=ref.shape, file=path,
            offset=None if rec.offset is None else rec.offset + ref.offset * itemsize,
            nbytes=numel * itemsize, byteorder=byteorder if itemsize > 1 else "little",
            stride=None if contiguous else ref.stride, storage=ref.storage.key,
            extra={"record": rec.record, "storage_byte_offset": ref.offset * itemsize}, conj=ref.conj, neg=ref.neg,
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
    unnamed = [r for k, r in records.items() if k not in used]
    if unnamed:   # (a pickled model's tensors kept as plain attributes, in no state_dict: --pickled-objects)
        notes.append(f"{len(unnamed)} storage record(s), {sum(r.nbytes for r in unnamed):,} bytes, hold tensors "
                     f"no name listed here reaches (e.g. {unnamed[0].record}): not counted")
    return tensors, notes


def _scalars(obj: object) -> dict[str, str]:
    """Top-level plain values of a training checkpoint (epoch, step...), as metadata."""
    if not isinstance(obj, dict):
        return {}
    return {key_text(k): (int_text(v) if isinstance(v, int) else str(v))[:200] for k, v in obj.items()
            if isinstance(v, (int, float, str, bool))}


def torch_checkpoint(path: str, fmt: str, c: Contents) -> Checkpoint:
    """The Checkpoint of a torch.save container's contents (a file, or a member of an archive: formats/nemo.py)."""
    roles: dict[str, str] = {}   # a pickled model's parameters and buffers (--pickled-objects), which its classes say
    tensors, notes = build_tensors(path, list(walk(c.obj, path, c.pickle_bytes, roles)), c.records, c.byteorder)
    if c.outside_allowlist - c.instances:
        notes.append(data_note(c.outside_allowlist - c.instances))
    if c.instances:
        notes.append(objects_note(c.instances))
    if c.script_classes is not None:
        notes.append(script_note(c.script_classes))
    embedded = embedded_config(c.obj) if c.instances else None   # a transformers model pickled whole: its config
    if embedded is not None:
        notes.append(f"config: the pickled model's own ({embedded[0]}, model_type {embedded[1]['model_type']!r}), as "
                     "save_pretrained would write it; a config.json beside the file is read instead")
    training, optimizer_params, groups = torch_training(c.obj)   # Lightning, DeepSpeed, an optimizer's state_dict
    return Checkpoint(path=path, format=fmt, tensors=tensors, files=(path,), metadata={**c.metadata, **_scalars(c.obj)},
                      notes=notes, training=training, optimizer_params=optimizer_params, optimizer_groups=groups,
                      ordered=True, optimizer_fragments=zero_fragments(c.obj),
                      objects=checkpoint_objects(c.obj, path),
                      roles={n: r for n, r in roles.items() if n in tensors},
                      config=embedded[1] if embedded else None,
                      config_from=f"{embedded[0]} of the pickle" if embedded else None)


def open_zip(path: str, unpickler: type[SafeUnpickler] = SafeUnpickler) -> Checkpoint:
    """A torch.save zip; `unpickler`: a RecordingUnpickler for a library's file that names its own classes."""
    contents = read_zip(path, unpickler)
    ckpt = torch_checkpoint(path, "pytorch (zip)" if contents.script_classes is None else "torchscript (zip)", contents)
    if contents.compressed:
        ckpt.readers[path] = ZipStreamReader(path, crc=False)
        ckpt.notes.append("some storage records are compressed: values are read by streaming decompression")
    return ckpt


def open_legacy(path: str) -> Checkpoint:
    return torch_checkpoint(path, "pytorch (legacy)", read_legacy(path))


# ---------------------------------------------------------------------------------------------
# detection (docs/formats.md section 0)

def _first_zip_name(head: bytes) -> str:
    if len(head) < 30:
        return ""
    n = struct.unpack_from("<H", head, 26)[0]
    return head[30: 30 + n].decode("utf-8", "replace")


def accept_zip(probe: Probe) -> bool:
    if probe.head[:4] != b"PK\x03\x04":
        return False
    if is_data_pkl(_first_zip_name(probe.head)):
        return True
    try:  # some tool rewrote the zip in another order: look in the central directory
        with reading(probe.path), zipfile.ZipFile(probe.path) as zf:
            return any(is_data_pkl(n) for n in zf.namelist())
    except CheckpointError:   # not a readable zip: not this format
        return False


def accept_legacy(probe: Probe) -> bool:
    return is_legacy_head(probe.head)


register(Format("pytorch (zip)", accept_zip, open_zip, (".bin", ".pt", ".pth", ".ckpt")))
register(Format("pytorch (legacy)", accept_legacy, open_legacy, (".bin", ".pt", ".pth")))
