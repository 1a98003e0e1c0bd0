"""A DCP folder's non-tensor items, and the stream extensions an item may be written through (docs/dcp.md).

A state_dict value that is not a tensor (a step count, a learning rate, optimizer `param_groups` fields, any object)
is a `BytesStorageMetadata` item: DefaultSavePlanner.resolve_data `torch.save`s it into a BytesIO
(default_planner.py), the writer copies those bytes into a `.distcp` file like a tensor's item, and DCP's load
hands them to `torch.load(..., weights_only=False)` (DefaultLoadPlanner.load_bytes): a pickle that may import and
call anything. Here it is unpickled with torch's weights_only allowlist as recording stubs (the torch reader's
SafeUnpickler: nothing imported or called, opcodes and memory bounded; training scripts' plain data, an
argparse.Namespace, built as values: formats/torch/data_classes.py); an item calling any other global is left
unread, with the global named, and `ckptstat scan` judges it (analysis/scan/loaders.py `OWN_LOADERS`). A value of
plain types (None, bool, int, float, str, bytes, and lists, tuples and dicts of them, bounded) is kept as is.

Stream extensions (torch/distributed/checkpoint/_extension.py, "experimental"): FileSystemWriter(_extensions=[...])
passes each item through StreamTransformExtensions and records their descriptors, `name[@domain]/version`, in the
item's `_StorageInfo.transform_descriptors`; torch 2.13 registers one, ZStandard (`stream.zstd/1`, zstd frames, read
back with the `zstandard` or `pyzstd` package): decoded by extensions.py with the `zstd` extra, bounded; any other extension
is not decoded (the item listed, its value refused).
"""
from __future__ import annotations

import os
from typing import Any

from ...core import Checkpoint
from ...core.files import open_regular
from ...errors import CheckpointError, CkptstatError, UnsafeCheckpointError, reading
from ..torch.containers import zip_contents
from ..torch.training import TRAINING_KEYS, number
from ..torch.values import MAX_OBJECTS, row
from . import extensions
from .extensions import Item, extensions_text

LIBRARY = "torch.distributed.checkpoint"


def _object(fqn: str, item: Item, f: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"bytes": item.length, "file": os.path.basename(item.file), "offset": item.offset}
    if item.extensions and not extensions.decodable(item):
        out["unread"] = f"stored through DCP stream extension {extensions_text(item.extensions)}, not decoded"
        return out
    if item.extensions and not extensions.available():
        out["unread"] = (f"stored through DCP stream extension {extensions_text(item.extensions)}: decoded with the "
                         "'zstd' extra (zstandard is not installed): pip install 'ckptstat[zstd]'")
        return out
    try:
        with reading(item.file, f"non-tensor item {fqn!r} at offset {item.offset:,}"), \
                extensions.item_stream(f, item, f"non-tensor item {fqn!r}") as (stream, size):
            contents = zip_contents(item.file, stream, size)
    except UnsafeCheckpointError as e:
        out["unread"] = e.reason.split(";")[0] + " (DCP's load would unpickle it: `ckptstat scan` judges it)"
        return out
    except CheckpointError as e:
        if e.reason.startswith("non-tensor item"):
            raise
        raise CheckpointError(item.file, f"non-tensor item {fqn!r} at offset {item.offset:,}: {e.reason}") from None
    return {**out, **row(out["file"], contents.obj)}


def read_objects(items: dict[str, Item]) -> dict[str, dict[str, Any]]:
    """name -> {bytes, file, offset, type, value} of each non-tensor item; `unread` (why) where no value is shown."""
    out: dict[str, dict[str, Any]] = {}
    by_file: dict[str, list[str]] = {}
    for name, item in items.items():
        by_file.setdefault(item.file, []).append(name)
    read = set(list(items)[:MAX_OBJECTS])
    for file, names in by_file.items():
        with open_regular(file) as f:
            for name in names:
                if name in read:
                    out[name] = _object(name, items[name], f)
                else:
                    item = items[name]
                    out[name] = {"bytes": item.length, "file": os.path.basename(item.file), "offset": item.offset,
                                 "unread": f"past the first {MAX_OBJECTS:,} non-tensor items, which are read"}
    return {name: out[name] for name in items}


# The names whose plain number says the run's step, epoch and learning rate (TRAINING_KEYS): a state_dict's own
# `step`, a Stateful's `train_state.step` (torchtitan), an optimizer's `optimizer.param_groups.0.lr`. The shallowest
# name wins; an optimizer's per-parameter `state.` entries (Adam's `step`) never count.


def training_of(objects: dict[str, dict[str, Any]], ckpt: Checkpoint | None = None) -> dict[str, Any] | None:
    """The `training` record (formats/training.py's shape) a DCP folder's plain items give, or None. Without a plain
    step item, the step is the shallowest one-element integer tensor named so in `ckpt` (torchtitan's TrainState saves
    `train_state.step` as `torch.tensor(step, dtype=torch.int32)`), its value read."""
    def named(n: str, field: str) -> bool:
        return n.rsplit(".", 1)[-1] in TRAINING_KEYS[field] and ".state." not in f".{n}."

    found: dict[str, tuple[Any, str]] = {}
    for field in TRAINING_KEYS:
        names = sorted((n.count("."), n) for n, o in objects.items() if named(n, field)
                       and number(o.get("value")) is not None)
        if names:
            found[field] = (objects[names[0][1]]["value"], names[0][1])
    counters = sorted((n.count("."), n) for n, t in (ckpt.tensors.items() if ckpt else ())
                      if named(n, "global_step") and t.numel == 1 and t.dt.kind in ("int", "uint"))
    if "global_step" not in found and counters and ckpt is not None:
        try:   # (a chunk whose values cannot be read now, a zstd one without the extra: no step, the folder opens)
            found["global_step"] = (int(ckpt.read(counters[0][1]).reshape(-1)[0]), counters[0][1])
        except CkptstatError:
            pass
    if not found:
        return None
    lr = found.get("learning_rate")
    return {"library": LIBRARY, "global_step": found.get("global_step", (None,))[0],
            "epoch": found.get("epoch", (None,))[0], "learning_rate": lr[0] if lr else None,
            "learning_rate_from": lr[1] if lr else None}
