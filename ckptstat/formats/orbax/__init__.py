"""orbax checkpoints (JAX, Flax NNX / linen, MaxText, T5X...), read without jax, orbax or tensorstore (docs/orbax.md).

orbax-checkpoint (0.12) saves a pytree into a folder, an "item": each array a zarr array (zarr.py) named by its
tree path joined with "." (`params.layers_0.q_proj.kernel`), in one of two layouts:
- OCDBT (the default, `use_ocdbt=True`): the folder is one OCDBT database (ocdbt.py), its `manifest.ocdbt` merging
  each process's `ocdbt.process_N/` (a save stopped before the merge: each process's database read, together);
  keys `<name>/.zarray` (or `<name>/zarr.json` with `use_zarr3`) and `<name>/<chunk key>`;
- `use_ocdbt=False`: a folder per array, `<name>/.zarray` and a file per chunk.
Beside them: `_METADATA` (JSON: the tree, each leaf's value type), `_sharding`, `_CHECKPOINT_METADATA`, and
`array_metadatas/`; leaves that are not arrays (strings, None) are in `_METADATA` alone and are no tensors here.

A CheckpointManager writes a folder per step (`<step>/`, with `_CHECKPOINT_METADATA`) and in it a folder per item
(`state/`, `params/`, `default/`...): a step folder reads as its array items together, each name after its item's
(`state.params...`); the manager's own folder (the steps) is refused with the steps it holds.

Values: each chunk (each inner chunk of a zarr v3 shard) is a box of the tensor (core/chunked.py); a chunk is
decoded into a spooled temporary file when first read (every chunk of the tensor being read kept until the next
tensor, at most HELD_IN_MEMORY bytes of them in memory, the rest on disk), so memory stays bounded whatever the
chunks' sizes and number."""
from __future__ import annotations

import io
import math
import os
import re
import tempfile
from collections.abc import Callable, Iterator
from typing import IO, Any

from ...core import Checkpoint, TensorInfo, dtypes, urls
from ...core import files as fs
from ...core.chunked import Assembler, Box
from ...core.files import check_inside, file_size, open_regular
from ...core.io import Window
from ...errors import CheckpointError, CorruptCheckpointError, UsageError
from ..configs import read_json
from ..registry import _FILE_HOOKS, _FOLDER_HOOKS
from . import zarr
from .ocdbt import MANIFEST, Store, Value, read_value

METADATA, CHECKPOINT_METADATA = "_METADATA", "_CHECKPOINT_METADATA"
ARRAY_META = (".zarray", "zarr.json")
MAX_META = 1 << 20            # bytes of one array's zarr metadata
MAX_CHUNKS = 1 << 20          # chunks of one checkpoint's arrays, all together
MAX_FILES = 1 << 20           # files of a use_ocdbt=False item walked
HELD_IN_MEMORY = 32 << 20     # decoded chunks of the tensor being read held in memory, at most (each up to zarr.SPOOL)
STEP = re.compile(r"^\d+$")


def _walk_files(folder: str, root: str) -> dict[str, Value]:
    """A use_ocdbt=False item: every file under its array folders, by its path inside the item ("/"-separated)."""
    if urls.is_url(folder):
        raise CheckpointError(urls.redact(folder), "an orbax item saved with use_ocdbt=False (a folder per array) is "
                                                   "read from a local folder only")
    out: dict[str, Value] = {}
    for top in sorted(os.listdir(folder)):
        sub = os.path.join(folder, top)
        if not (os.path.isdir(sub) and any(os.path.isfile(os.path.join(sub, m)) for m in ARRAY_META)):
            continue
        check_inside(sub, "array folder", root)
        for dirpath, dirnames, names in os.walk(sub):
            dirnames.sort()
            for n in sorted(names):
                p = os.path.join(dirpath, n)
                check_inside(p, "file", root)
                out[os.path.relpath(p, folder).replace(os.sep, "/")] = Value(p, 0, file_size(p))
                if len(out) > MAX_FILES:
                    raise CorruptCheckpointError(folder, f"more than {MAX_FILES:,} files in its array folders")
    return out


class _Values(Assembler):
    """A tensor's chunks decoded as they are read (zarr.py), those of the tensor being read kept."""

    def __init__(self) -> None:
        super().__init__()
        self.decoded: dict[int, IO[bytes] | None] = {}
        self.in_memory = 0                    # bytes of decoded chunks held in memory (the rest spooled to disk)
        self.reading: str | None = None
        self.indexes: dict[tuple[str | None, int], list[tuple[int, int]]] = {}

    def close(self) -> None:
        for f in self.decoded.values():
            if f is not None:
                f.close()
        self.decoded.clear()
        self.indexes.clear()
        self.in_memory = 0

    def _span(self, arr: zarr.Array, value: Value, inner: int | None, file: str) -> Value | None:
        """Where one (inner) chunk's stored bytes lie (None: an inner chunk the shard's index says is absent)."""
        if inner is None:
            return value
        key = (value.file, value.offset)
        if key not in self.indexes:
            size = zarr.index_bytes(arr)
            if size > value.length:
                raise CorruptCheckpointError(file, f"array {arr.name!r}: a {value.length:,}-byte shard too short "
                                                   f"for its {size:,}-byte index")
            at = value.length - size if arr.index_at_end else 0
            raw = read_value(Value(value.file, value.offset + at, size, None if value.inline is None
                                   else value.inline[at:at + size]), f"array {arr.name!r}: shard index")
            self.indexes[key] = zarr.shard_index(arr, raw, value.length, file)
        off, nb = self.indexes[key][inner]
        if off == zarr.NO_CHUNK:
            return None
        return Value(value.file, value.offset + off, nb, None if value.inline is None else value.inline[off:off + nb])

    def _chunk(self, box: Box) -> IO[bytes] | None:
        if id(box) not in self.decoded:
            arr, value, inner = box.item
            span = None if value is None else self._span(arr, value, inner, box.tensor.file)
            what = f"array {arr.name!r}: a chunk"
            if span is None:
                if not arr.fill_zero:
                    raise zarr.refuse_fill(arr, box.tensor.file)
                self.decoded[id(box)] = None
            elif span.inline is not None:
                self.decoded[id(box)] = zarr.decode_chunk(arr, io.BytesIO(span.inline), box.tensor.file, what)
            else:
                file = span.file or ""
                if span.offset + span.length > file_size(file):
                    raise CorruptCheckpointError(file, f"{what}: {span.length:,} bytes at offset {span.offset:,} of a "
                                                       f"{file_size(file):,}-byte file")
                with open_regular(file) as f:
                    self.decoded[id(box)] = zarr.decode_chunk(arr, Window(f, span.offset, span.length), file, what)
            held = self.decoded[id(box)]
            if isinstance(held, tempfile.SpooledTemporaryFile) and arr.inner_bytes <= zarr.SPOOL:   # (in memory)
                self.in_memory += arr.inner_bytes
                if self.in_memory > HELD_IN_MEMORY:   # the tensor's chunks kept past the budget go to disk
                    held.rollover()
                    self.in_memory -= arr.inner_bytes
        return self.decoded[id(box)]

    def values(self, name: str, box: Box, dtype: str, start: int, count: int) -> Any:
        import numpy as np

        if self.reading != name:
            self.close()
            self.reading = name
        arr: zarr.Array = box.item[0]
        pick = None
        if box.sizes != arr.inner:   # an edge chunk: stored padded to the chunk shape
            idx = np.unravel_index(np.arange(start, start + count, dtype=np.int64), box.sizes)
            padded = np.ravel_multi_index(idx, arr.inner)
            start, pick = int(padded[0]), padded - padded[0]
            count = int(padded[-1]) + 1 - start
        width = dtypes.get(dtype).bits // 8
        f = self._chunk(box)
        if f is None:
            raw = bytes(count * width)
        else:
            f.seek(start * width)
            raw = f.read(count * width)
        out = dtypes.decode(raw, dtype, count, arr.byteorder)
        return out if pick is None else out[pick]


def _grid(arr: zarr.Array) -> Iterator[tuple[tuple[int, ...], tuple[int, ...], int | None]]:
    """(outer chunk coords, inner box origin, index in the shard or None) of every stored box, C order."""
    outer = tuple(-(-s // c) for s, c in zip(arr.shape, arr.chunks))
    per = tuple(c // i for c, i in zip(arr.chunks, arr.inner))
    for oc in _coords(outer):
        for k, ic in enumerate(_coords(per)):
            origin = tuple(o * c + i * n for o, c, i, n in zip(oc, arr.chunks, ic, arr.inner))
            if all(o < s for o, s in zip(origin, arr.shape)):
                yield oc, origin, k if arr.sharded else None


def _coords(extent: tuple[int, ...]) -> Iterator[tuple[int, ...]]:
    if not extent:
        yield ()
        return
    for i in range(extent[0]):
        for rest in _coords(extent[1:]):
            yield (i, *rest)


def _tensors(values: dict[str, Value], file: str, prefix: str, reader: _Values,
             budget: list[int]) -> dict[str, TensorInfo]:
    """The item's arrays (keys `<name>/.zarray` or `<name>/zarr.json`), each with its chunks' boxes."""
    out: dict[str, TensorInfo] = {}
    for key in sorted(values):
        name, _, meta = key.rpartition("/")
        if meta not in ARRAY_META or not name:
            continue
        v = values[key]
        if v.length > MAX_META:
            raise CorruptCheckpointError(file, f"array {name!r}: {v.length:,} bytes of zarr metadata")
        arr = zarr.parse(read_value(v, f"array {name!r}: zarr metadata"), file, name)
        n_chunks = math.prod(-(-s // c) for s, c in zip(arr.shape, arr.chunks)) if math.prod(arr.shape) else 0
        n_boxes = n_chunks * math.prod(c // i for c, i in zip(arr.chunks, arr.inner))
        budget[0] -= n_boxes
        if budget[0] < 0:
            raise CorruptCheckpointError(file, f"array {name!r}: {n_boxes:,} chunks; more than {MAX_CHUNKS:,} in all")
        boxes, stored = [], 0
        dt = dtypes.get(arr.dtype)
        for oc, origin, inner in _grid(arr):
            chunk_value = values.get(f"{name}/{arr.key(oc)}")
            if chunk_value is not None and (inner is None or inner == 0):
                stored += chunk_value.length
            sizes = tuple(min(n, s - o) for n, s, o in zip(arr.inner, arr.shape, origin))
            desc = TensorInfo(name=f"{prefix}{name}", dtype=arr.dtype, shape=arr.inner, file=file, offset=None,
                              nbytes=dt.nbytes(math.prod(arr.inner)))
            boxes.append(Box(origin, sizes, desc, (arr, chunk_value, inner)))
        full = f"{prefix}{name}"
        extra: dict[str, object] = {"zarr_chunks": len(boxes)}
        if arr.codec is not None:
            extra["deflated"] = stored
            if len(boxes) * arr.inner_bytes > dt.nbytes(math.prod(arr.shape)):   # edge chunks decode padded, whole
                extra["inflated"] = len(boxes) * arr.inner_bytes
        out[full] = TensorInfo(name=full, dtype=arr.dtype, shape=arr.shape, file=file, offset=None,
                               nbytes=dt.nbytes(math.prod(arr.shape)), byteorder=arr.byteorder, extra=extra)
        reader.layouts[full] = boxes
    return out


PROCESS = re.compile(r"^ocdbt\.process_\d+$")


def _unmerged(item: str) -> list[str]:
    """The per-process OCDBT databases (`ocdbt.process_N/`) of a local item without a merged manifest.ocdbt: a save
    stopped before orbax merged them (each holds its process's arrays)."""
    if urls.is_url(item):
        return []
    return sorted((n for n in os.listdir(item) if PROCESS.match(n) and os.path.isfile(os.path.join(item, n, MANIFEST))),
                  key=lambda n: int(n.rsplit("_", 1)[1]))


def _item_kind(names: list[str]) -> str | None:
    """"ocdbt" or "zarr" for an orbax item folder holding `names`, else None."""
    if MANIFEST in names:
        return "ocdbt"
    if METADATA in names:
        return "zarr"
    return None


def _json(path: str) -> dict[str, Any]:
    """An optional JSON record of orbax's (configs.read_json, bounded); {} where it is absent or unreadable."""
    if not fs.isfile(path):
        return {}
    try:
        data = read_json(path, MAX_META, "orbax metadata")
    except (ValueError, RecursionError, CheckpointError):
        return {}
    return data if isinstance(data, dict) else {}


def _plain(name: str) -> bool:
    """A name of a folder inside the step folder (never a path elsewhere)."""
    return bool(name) and name not in (".", "..") and "/" not in name and "\\" not in name


def open_folder(folder: str, open_file: Callable[[str], Checkpoint] | None = None) -> Checkpoint | None:
    """An orbax item folder, or a step folder of items; None for a folder of neither."""
    root = folder
    names = fs.listdir(folder)
    items: list[tuple[str, str, str]] = []          # (prefix, item folder, layout)
    if kind := _item_kind(names):
        items = [("", folder, kind)]
    elif CHECKPOINT_METADATA in names:
        # the items: those _CHECKPOINT_METADATA's item_handlers names (a URL's listing may hold no folders), and a
        # local folder's subfolders
        declared = _json(fs.join(folder, CHECKPOINT_METADATA)).get("item_handlers")
        subs = {n for n in declared if isinstance(n, str) and _plain(n)} if isinstance(declared, dict) else set()
        if not urls.is_url(folder):
            subs |= {n for n in names if os.path.isdir(os.path.join(folder, n))}
        items = [(f"{n}.", fs.join(folder, n), k) for n in sorted(subs)
                 if fs.isdir(fs.join(folder, n)) and (k := _item_kind(fs.listdir(fs.join(folder, n))))]
        if not items:
            raise CheckpointError(folder, "an orbax step folder without an item of arrays (each item a folder with "
                                          f"{MANIFEST} or {METADATA})")
    else:
        return None
    reader = _Values()
    tensors: dict[str, TensorInfo] = {}
    files: list[str] = []
    kinds = []
    budget = [MAX_CHUNKS]
    for prefix, item, kind in items:
        if kind == "ocdbt":
            check_inside(fs.join(item, MANIFEST), "file", root)
            store = Store(item, root)
            values = {k.decode("utf-8", "replace"): v for k, v in store.values.items()}
            files += sorted(store.files | {v.file for v in store.values.values() if v.file})
            file = fs.join(item, MANIFEST)
        elif processes := _unmerged(item):   # a save whose per-process databases were never merged into one
            values = {}
            for sub in processes:
                store = Store(fs.join(item, sub), root)
                for raw_key, where in store.values.items():
                    key = raw_key.decode("utf-8", "replace")
                    if key in values:
                        raise CorruptCheckpointError(fs.join(fs.join(item, sub), MANIFEST),
                                                     f"key {key[:80]!r} is in two processes' databases")
                    values[key] = where
                files += sorted(store.files | {v.file for v in store.values.values() if v.file})
            kind = "ocdbt-unmerged"
            file = fs.join(item, METADATA)
        else:
            values = _walk_files(item, root)
            files += sorted(v.file for v in values.values() if v.file)
            file = fs.join(item, METADATA)   # (the tensors' file: the item's one file of its own)
        found = _tensors(values, file, prefix, reader, budget)
        if not found and kind == "zarr" and not values:
            continue
        tensors.update(found)
        versions = " and ".join(v for v, m in (("v2", "/.zarray"), ("v3", "/zarr.json")) if any(k.endswith(m) for k in values))
        layout = {"ocdbt": "OCDBT", "ocdbt-unmerged": "OCDBT per process, not merged"}.get(kind, "a folder per array")
        kinds.append(f"{layout}, zarr {versions or 'arrays'}")
    meta = _json(fs.join(folder, CHECKPOINT_METADATA)) if CHECKPOINT_METADATA in names else {}
    handler = meta.get("item_handlers")
    metadata = {"orbax.items": ", ".join(p.rstrip(".") for p, _, _ in items if p) or "one",
                "orbax.layout": "; ".join(sorted(set(kinds)))}
    if isinstance(handler, str):
        metadata["orbax.handler"] = handler.rsplit(".", 1)[-1]
    return Checkpoint(path=folder, format=f"orbax ({'; '.join(sorted(set(kinds))) or 'no arrays'})", tensors=tensors,
                      files=tuple(dict.fromkeys(files)), metadata=metadata,
                      readers=dict.fromkeys({t.file for t in tensors.values()}, reader))


def orbax_folder(names: set[str] | list[str]) -> bool:
    """Do a folder's file names make it an orbax item or step folder (the checkpoint is the folder)?"""
    return any(n in names for n in (MANIFEST, METADATA, CHECKPOINT_METADATA))


def manager_steps(folder: str) -> list[int]:
    """The steps of an orbax CheckpointManager's folder (numbered subfolders with _CHECKPOINT_METADATA), else []."""
    return sorted(int(n) for n in os.listdir(folder)
                  if STEP.match(n) and os.path.isfile(os.path.join(folder, n, CHECKPOINT_METADATA)))


def refuse_manager(folder: str, steps: list[int]) -> UsageError:
    shown = ", ".join(map(str, steps[-8:]))
    return UsageError(f"{folder}: an orbax CheckpointManager folder of {len(steps)} step(s) ({shown}); open one "
                      f"step's folder, e.g. the latest: {os.path.join(folder, str(steps[-1]))}")


def _open_manifest(path: str) -> Checkpoint:
    whole = open_folder(os.path.dirname(os.path.abspath(path)))
    if whole is None:
        raise CheckpointError(path, "not an orbax / OCDBT folder")
    return whole


_FOLDER_HOOKS.append(open_folder)
_FILE_HOOKS[MANIFEST] = _open_manifest
