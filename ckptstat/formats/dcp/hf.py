"""Folders of DCP's HuggingFaceStorageWriter written by every rank without consolidation (docs/dcp.md).

torch/distributed/checkpoint/hf_storage.py `HuggingFaceStorageWriter(save_distributed=True)` has each rank write its
chunks to `shard-<rank>-model-<i>-of-<n>.safetensors` (_hf_utils.py SHARDED_FILE_NAME, rank numbered from 1): a plain
safetensors file whose `__metadata__["DCP_SHARDING_INFO"]` (JSON) gives each chunk's `saved_offsets` in its tensor;
`finish` writes no index and no `.metadata` (with `enable_consolidation` the whole tensors are written beside a
`sharded/` folder of these, and read as any safetensors model). HuggingFaceStorageReader.read_metadata takes a tensor's
size as the largest offset + chunk shape over the files; so does this reader, and the chunks must hold exactly the
tensor's elements (two chunks claiming one element, or an element in none, is refused when values are read, by the
DCP reader's `_Chunks`). The files are numbered by rank from 1: a gap is refused; the last rank's file missing cannot
be told (no file records the tensors' sizes), nor can torch's reader tell it. One such file alone holds parts of
tensors: open_checkpoint refuses it (formats/registry.py).
"""
from __future__ import annotations

import json
import math
import os
from collections.abc import Callable

from ...core import Checkpoint, TensorInfo, dtypes
from ...core.chunked import Box as _Chunk
from ...core.files import check_inside
from ...errors import CorruptCheckpointError
from ..registry import _FOLDER_HOOKS, DCP_SHARD
from ..safetensors import open_safetensors
from . import SHARDING_KEY, _Chunks


def _offsets(path: str, part: Checkpoint) -> dict[str, tuple[int, ...]]:
    try:
        info = json.loads(part.metadata.get(SHARDING_KEY, ""))
    except ValueError:
        info = None
    if not isinstance(info, dict):
        raise CorruptCheckpointError(path, f"a DCP shard file without a readable __metadata__ {SHARDING_KEY}")
    out = {}
    for name, t in part.tensors.items():
        offs = info.get(name, {}).get("saved_offsets") if isinstance(info.get(name), dict) else None
        if not (isinstance(offs, list) and len(offs) == len(t.shape) and all(type(o) is int and o >= 0 for o in offs)):
            raise CorruptCheckpointError(path, f"{name!r}: {SHARDING_KEY} gives no saved_offsets for its "
                                               f"{len(t.shape)} dimension(s)")
        out[name] = tuple(offs)
    return out


def open_folder(folder: str, open_file: Callable[[str], Checkpoint]) -> Checkpoint | None:
    """The tensors of every `shard-*.safetensors` file of `folder`, assembled; None for a folder without them."""
    names = sorted(n for n in os.listdir(folder) if DCP_SHARD.match(n))
    if not names:
        return None
    ranks = sorted({int(n.split("-")[1]) for n in names})
    if ranks != list(range(1, len(ranks) + 1)):
        missing = sorted(set(range(1, ranks[-1] + 1)) - set(ranks))
        raise CorruptCheckpointError(folder, f"the shard files of rank(s) {', '.join(map(str, missing[:8]))} are missing "
                                             f"(ranks {ranks[0]}..{ranks[-1]} present; the writer numbers them from 1)")
    chunks: dict[str, list[_Chunk]] = {}
    files = tuple(os.path.join(folder, n) for n in names)
    for path in files:
        check_inside(path, "file", folder)   # (before it is read: docs/security.md)
        part = open_safetensors(path)
        for name, offs in _offsets(path, part).items():
            chunks.setdefault(name, []).append(_Chunk(offs, part.tensors[name].shape, part.tensors[name]))
    tensors: dict[str, TensorInfo] = {}
    reader = _Chunks()
    for name, parts in chunks.items():
        if len({c.tensor.dtype for c in parts}) != 1:
            raise CorruptCheckpointError(parts[1].tensor.file, f"{name!r}: its chunks have different dtypes")
        size = tuple(max(c.offsets[d] + c.sizes[d] for c in parts) for d in range(len(parts[0].sizes)))
        if sum(math.prod(c.sizes) for c in parts) != math.prod(size):
            raise CorruptCheckpointError(folder, f"{name!r}: its chunks hold {sum(math.prod(c.sizes) for c in parts):,} "
                                                 f"elements, a tensor of {list(size)} {math.prod(size):,}")
        t = parts[0].tensor
        if len(parts) == 1:
            tensors[name] = TensorInfo(name=name, dtype=t.dtype, shape=size, file=t.file, offset=t.offset,
                                       nbytes=t.nbytes, extra={"dcp_chunks": 1})
            continue
        tensors[name] = TensorInfo(name=name, dtype=t.dtype, shape=size, file=t.file, offset=None,
                                   nbytes=math.prod(size) * dtypes.get(t.dtype).bits // 8,
                                   extra={"dcp_chunks": len(parts)})
        reader.layouts[name] = parts
    return Checkpoint(path=folder, format="dcp (safetensors shards)", tensors=tensors, files=files,
                      metadata={"dcp.files": str(len(files))}, readers=dict.fromkeys(files, reader))


_FOLDER_HOOKS.append(open_folder)
