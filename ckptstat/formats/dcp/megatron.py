"""Megatron-Core distributed checkpoints (the `torch_dist` backend), as Megatron-LM (`iter_0000100/`) and NeMo 2.0
(`<ckpt>/weights/`, beside `<ckpt>/context/`) write them (docs/dcp.md, "Megatron-Core").

megatron/core/dist_checkpointing/serialization.py `save` writes, into one folder:

- a torch.distributed.checkpoint folder (`.metadata`, `__<rank>_<n>.distcp`) of the state dict's ShardedTensors,
  each under its ShardedTensor `key` with its global shape (strategies/torch.py); the `.metadata` pickle also
  keeps every rank's SavePlan (`all_local_plans`, strategies/state_dict_saver.py), read by formats/dcp/;
- `common.pt`: `torch.save` of everything in the state dict that is not sharded (strategies/common.py
  `save_common`: the iteration, optimizer param_groups, ...), read back by `torch.load(path, map_location='cpu')`;
- `metadata.json`: `{"sharded_backend": "torch_dist", "sharded_backend_version": 1, "common_backend": "torch",
  "common_backend_version": 1}` (core.py `CheckpointingConfig`, written last: its presence says the save finished).

A transformer block saves its layers stacked (transformer_block.py `sharded_state_dict`: each layer's tensors under
`<prefix>layers.<name>` with a prepended axis at the layer's global offset), so `decoder.layers.mlp.linear_fc1.weight`
is one tensor of shape [num_layers, ffn, hidden]: its leading dimension is the layer. The reader marks such tensors
(`extra["stacked_layers"]`); the census splits them by layer (census/tally.py).
"""
from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from typing import Any

from ...core import Checkpoint, TensorInfo
from ...core.files import check_inside, file_size, open_regular
from ...errors import CheckpointError, UnsafeCheckpointError, reading
from ..torch.containers import zip_contents
from ..torch.values import MAX_OBJECTS, flat, row

LIBRARY = "Megatron-Core dist_checkpointing"   # the training line's library
CONFIG = "metadata.json"        # megatron/core/dist_checkpointing/core.py CONFIG_FNAME
COMMON = "common.pt"            # strategies/common.py COMMON_STATE_FNAME
MAX_CONFIG = 1 << 16            # bytes of metadata.json read (Megatron's is ~120)
MAX_COMMON = 256 << 20          # bytes of common.pt read
# A name with a `layers.` segment not followed by a layer number: a stacked block (transformer_block.py)
STACKED = re.compile(r"(^|\.)layers\.(?!\d+(\.|$))")


def config_of(folder: str) -> dict[str, Any] | None:
    """The folder's Megatron `metadata.json` when it names a sharded backend, else None (a DCP folder of another
    writer, or a metadata.json of something else)."""
    path = os.path.join(folder, CONFIG)
    check_inside(path, "file", folder)   # (metadata.json and common.pt before they are read: docs/security.md)
    if not os.path.isfile(path) or file_size(path) > MAX_CONFIG:
        return None
    try:
        with open_regular(path) as f:
            data = json.loads(f.read(MAX_CONFIG).decode("utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("sharded_backend"), str) else None


def common_objects(folder: str) -> dict[str, dict[str, Any]]:
    """The non-sharded state in `common.pt`, by dotted name (JSON: `file`, `type`, `value`, or `unread` saying why),
    unpickled with the torch reader's restricted unpickler (nothing imported or called). Megatron-LM's `args`, an
    argparse.Namespace outside torch's weights_only allowlist, is read as the attributes it holds (`args.lr`:
    formats/torch/data_classes.py); a pickle calling any other such global is left unread, the global named
    (`ckptstat scan` judges the file)."""
    path = os.path.join(folder, COMMON)
    check_inside(path, "file", folder)
    if not os.path.isfile(path):
        return {}
    size = file_size(path)
    base: dict[str, Any] = {"bytes": size, "file": COMMON, "offset": 0}
    if size > MAX_COMMON:
        return {COMMON: {**base, "unread": f"{size:,} bytes, more than the {MAX_COMMON:,} read"}}
    try:
        with open_regular(path) as f, reading(path, COMMON):
            contents = zip_contents(path, f, size)
    except UnsafeCheckpointError as e:
        return {COMMON: {**base, "unread": e.reason.split(";")[0] + " (`ckptstat scan` judges it)"}}
    except CheckpointError as e:
        return {COMMON: {**base, "unread": f"not read: {e.reason}"}}
    out: dict[str, dict[str, Any]] = {}
    for name, leaf in flat("", contents.obj):
        if len(out) >= MAX_OBJECTS:
            break
        out[name or COMMON] = row(COMMON, leaf)
    return out


def annotate(ckpt: Checkpoint, folder: str, config: dict[str, Any]) -> None:
    """Say what Megatron wrote: its backend, the common state, and the tensors stored with a leading layer axis."""
    for key in ("sharded_backend", "sharded_backend_version", "common_backend", "common_backend_version"):
        if key in config:
            ckpt.metadata[f"megatron.{key}"] = str(config[key])[:40]
    stacked: dict[str, TensorInfo] = {}
    layers: set[int] = set()
    for name, t in ckpt.tensors.items():
        if STACKED.search(name) and t.shape:
            stacked[name] = TensorInfo(name=t.name, dtype=t.dtype, shape=t.shape, file=t.file, offset=t.offset,
                                       nbytes=t.nbytes, byteorder=t.byteorder, stride=t.stride, storage=t.storage,
                                       extra={**t.extra, "stacked_layers": t.shape[0]})
            layers.add(t.shape[0])
    if stacked:
        tensors = dict(ckpt.tensors)
        tensors.update(stacked)
        ckpt.tensors = tensors
    common = common_objects(folder)
    if common:
        ckpt.objects = {**ckpt.objects, **common}
    held = (f"read: {len(common)} item(s) under objects" if common else "read: empty") \
        if os.path.isfile(os.path.join(folder, COMMON)) else "absent"
    what = f"Megatron-Core distributed checkpoint ({str(config.get('sharded_backend'))[:40]} backend; {COMMON} {held})"
    if stacked:
        n = ", ".join(str(k) for k in sorted(layers))
        what += (f"; {len(stacked)} tensor(s) under `layers.` stored stacked, the leading dimension the layer "
                 f"({n} layers): per-layer figures split them along it")
    ckpt.notes.append(what)


def open_nemo2(folder: str, open_file: Callable[[str], Checkpoint]) -> Checkpoint | None:
    """A NeMo 2.0 checkpoint folder (nemo/lightning/ckpt_utils.py: the weights in `weights/`, a Megatron distributed
    checkpoint, the model's serialized config in `context/`): its weights, else None (registry._FOLDER_HOOKS)."""
    weights = os.path.join(folder, "weights")
    if not (os.path.isdir(weights) and os.path.isfile(os.path.join(weights, ".metadata"))
            and config_of(weights) is not None):
        return None
    ckpt = open_file(weights)
    ckpt.notes.append("NeMo 2.0 checkpoint folder: its weights/ read" +
                      ("; context/ (the model's serialized config) not read" if os.path.isdir(
                          os.path.join(folder, "context")) else ""))
    return ckpt
