"""DeepSpeed ZeRO stage 3 checkpoints: the model partitioned across the data-parallel ranks (docs/training.md).

DeepSpeed's engine (deepspeed/runtime/engine.py `_save_checkpoint`, `_save_zero_checkpoint`) writes, per rank R, a
`zero_pp_rank_R_mp_rank_00_model_states.pt` whose `module` holds empty placeholders for the partitioned parameters,
with `param_shapes` (one ordered map of name -> shape per param group), `frozen_param_shapes` and this rank's
`frozen_param_fragments`, and a `zero_pp_rank_R_mp_rank_00_optim_states.pt` whose `optimizer_state_dict` holds
`fp32_flat_groups` (this rank's fp32 partition of each group), `partition_count` and the torch optimizer's state over
those partitions. The layout, as deepspeed/utils/zero_to_fp32.py (`_zero3_merge_trainable_params`,
`zero3_partitioned_param_info`) reads it back:

- the groups' partitions of one rank are one flat run; each parameter, in `param_shapes` order, takes
  ceil(numel / ranks) elements of every rank's run at the same offset;
- the parameter is rank 0's slice, then rank 1's, ..., cut to numel (the last ranks' tail is padding);
- a frozen parameter is its ranks' `frozen_param_fragments` end to end, cut to numel.

Here each parameter becomes one tensor under the placeholder's name (a `module` that holds the weights themselves,
saved with stage3_gather_16bit_weights_on_model_save, keeps them), its values gathered from the ranks' files on
demand (`_Gathered`, a bounded read per piece); the fragments are dropped as tensors of their own; each rank's
optimizer state gets its parameters' slices (Checkpoint.optimizer_fragments), padding left unattributed. Every
count, shape and length is checked against the files before any value is read."""
from __future__ import annotations

import bisect
import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..core import Checkpoint, TensorInfo, dtypes
from ..core.tensor import Reader, read_flat_file
from ..errors import CheckpointError, CorruptCheckpointError, reading
from .torch.containers import read_zip

MODEL = re.compile(r"^zero_pp_rank_(\d+)_mp_rank_(\d+)_model_states\.pt$")   # engine.py _get_zero_ckpt_name stage 3
FLAT = "optimizer_state_dict.fp32_flat_groups."         # + group: a rank's fp32 partition of the group
STATE = "optimizer_state_dict.optimizer_state_dict.state."   # + group: the torch optimizer's state over it
FROZEN = "frozen_param_fragments."


def is_zero3(model_files: list[str]) -> bool:
    """Whether a DeepSpeed tag folder's model states are ZeRO-3's (one file per data-parallel rank)."""
    return bool(model_files) and all(MODEL.match(n) for n in model_files)


def part_prefix(name: str, files: int) -> str:
    """The prefix a ZeRO `*_optim_states.pt`'s names get in the folder's checkpoint: none when it is the only one."""
    return "" if files == 1 else f"{name.removesuffix('_optim_states.pt')}."


@dataclass(frozen=True)
class _Piece:
    start: int          # the parameter's first element this piece holds
    count: int
    source: TensorInfo  # the flat partition (or frozen fragment) holding it
    at: int             # its first element in `source`


class _Gathered:
    """Values of the gathered parameters: elements [start, start + count) from the pieces they cross; any other
    tensor of the file by the reader it had."""

    def __init__(self, fallback: Reader | None) -> None:
        self.pieces: dict[str, list[_Piece]] = {}
        self.fallback = fallback or read_flat_file

    def __call__(self, info: TensorInfo, start: int, count: int) -> Any:
        import numpy as np

        pieces = self.pieces.get(info.name)
        if pieces is None:
            return self.fallback(info, start, count)
        parts = []
        i = max(0, bisect.bisect_right([p.start for p in pieces], start) - 1)
        end = start + count
        while i < len(pieces) and pieces[i].start < end:
            p = pieces[i]
            lo, hi = max(start, p.start), min(end, p.start + p.count)
            if lo < hi:
                parts.append(read_flat_file(p.source, p.at + lo - p.start, hi - lo))
            i += 1
        return np.concatenate(parts) if parts else np.empty(0, dtype=np.float32)

    def close(self) -> None:
        close = getattr(self.fallback, "close", None)
        if close is not None:
            close()


def _shapes(path: str, value: Any, what: str) -> dict[str, tuple[int, ...]]:
    if not isinstance(value, dict):
        raise CorruptCheckpointError(path, f"{what} is not a map of names to shapes")
    out = {}
    for name, shape in value.items():
        if not (isinstance(name, str) and isinstance(shape, tuple) and all(type(d) is int and d >= 0 for d in shape)):
            raise CorruptCheckpointError(path, f"{what}: {str(name)[:60]!r} has no shape of non-negative integers")
        out[name] = shape
    return out


def _ranked(names: list[str], pattern: re.Pattern[str]) -> list[str]:
    return sorted(names, key=lambda n: int(m.group(1)) if (m := pattern.match(n)) else -1)


_OPTIM = re.compile(r"^zero_pp_rank_(\d+)_mp_rank_\d+_optim_states\.pt$")


def gather(ckpt: Checkpoint, folder: str, model_files: list[str], optim_files: list[str],
           open_file: Callable[[str], Checkpoint]) -> None:
    """ckpt (rank 0's model states with every rank's optimizer state merged, as formats/training.py builds it) with
    the partitioned parameters gathered (see the module doc)."""
    if any(m.group(2) != "00" for n in model_files if (m := MODEL.match(n))):
        raise CheckpointError(folder, "ZeRO-3 with model parallelism (mp_rank_01...) is not read (DeepSpeed's "
                                      "zero_to_fp32 reads mp_rank_00 alone)")
    model_files, optim_files = _ranked(model_files, MODEL), _ranked(optim_files, _OPTIM)
    first = os.path.join(folder, model_files[0])
    with reading(first):
        obj = read_zip(first).obj
    if not isinstance(obj, dict) or not isinstance(obj.get("param_shapes"), list):
        raise CorruptCheckpointError(first, "a ZeRO-3 model states file without param_shapes")
    groups = [_shapes(first, g, f"param_shapes[{i}]") for i, g in enumerate(obj["param_shapes"])]
    frozen = _shapes(first, obj.get("frozen_param_shapes") or {}, "frozen_param_shapes")
    ranks = len(optim_files)
    if obj.get("dp_world_size", ranks) != ranks or len(model_files) != ranks:
        raise CorruptCheckpointError(first, f"dp_world_size is {obj.get('dp_world_size')!r}, the folder has "
                                            f"{len(model_files)} model and {ranks} optimizer state files")
    # each rank's flat run: its groups' partitions end to end
    runs: list[list[TensorInfo]] = []
    for n in optim_files:
        prefix = part_prefix(n, ranks)
        flats: list[TensorInfo] = []
        while (t := ckpt.tensors.get(f"{prefix}{FLAT}{len(flats)}")) is not None:
            flats.append(t)
        if len(flats) != len(groups) or any(len(t.shape) != 1 for t in flats):
            raise CorruptCheckpointError(os.path.join(folder, n), f"{len(flats)} flat fp32 group(s), param_shapes "
                                                                  f"{len(groups)}")
        runs.append(flats)
    sizes = [[t.numel for t in flats] for flats in runs]
    if any(s != sizes[0] for s in sizes):
        raise CorruptCheckpointError(folder, "the ranks' fp32 partitions differ in size")
    bounds = [0, *(sum(sizes[0][: g + 1]) for g in range(len(groups)))]   # each group's first element in a run
    reader = _Gathered(ckpt.readers.get(first))
    offset = 0
    fragments: dict[str, list[tuple[str, int, int]]] = {}
    for name, shape in ((n, s) for g in groups for n, s in g.items()):
        numel = math.prod(shape)
        share = -(-numel // ranks)   # zero3_partitioned_param_info: ceil(numel / ranks), padded
        pieces = []
        for r, flats in enumerate(runs):
            take = max(0, min(share, numel - r * share))
            at = offset
            while take:
                g = bisect.bisect_right(bounds, at) - 1
                if g >= len(flats):
                    raise CorruptCheckpointError(flats[-1].file, f"{name!r} lies past the end of the fp32 partition")
                count = min(take, bounds[g + 1] - at)
                pieces.append(_Piece(r * share + (at - offset), count, flats[g], at - bounds[g]))
                fragments.setdefault(f"{part_prefix(optim_files[r], ranks)}{STATE}{g}", []).append(
                    (name, at - bounds[g], count))
                at, take = at + count, take - count
        offset += share
        _place(ckpt, reader, first, name, shape, pieces)
    if offset != bounds[-1]:
        raise CorruptCheckpointError(folder, f"the parameters take {offset:,} elements of each rank's fp32 partition, "
                                             f"which holds {bounds[-1]:,}")
    if frozen:
        _frozen(ckpt, reader, folder, first, model_files, frozen, open_file)
    ckpt.optimizer_fragments.update({k: tuple(v) for k, v in fragments.items()})
    ckpt.readers[first] = reader
    ckpt.files += tuple(f for f in (os.path.join(folder, n) for n in model_files) if f not in ckpt.files)
    ckpt.notes.append(f"ZeRO-3: {sum(map(len, groups)) + len(frozen)} parameter(s) gathered from {ranks} ranks' "
                      "partitions (DeepSpeed's zero_to_fp32 layout)")


def _place(ckpt: Checkpoint, reader: _Gathered, file: str, name: str, shape: tuple[int, ...],
           pieces: list[_Piece]) -> None:
    """The parameter as one tensor under its placeholder's name (`module.` + name)."""
    key = f"module.{name}"
    held = sum(p.count for p in pieces)
    if held != math.prod(shape):
        raise CorruptCheckpointError(file, f"{name!r}: its partitions hold {held:,} elements, its shape {math.prod(shape):,}")
    stored = ckpt.tensors.get(key)
    if stored is not None and stored.numel:   # the module holds the gathered weights itself (16-bit, as saved with
        return                                # stage3_gather_16bit_weights_on_model_save): those are the model's
    dtype = pieces[0].source.dtype if pieces else "F32"
    ckpt.editable()[key] = TensorInfo(name=key, dtype=dtype, shape=shape, file=file, offset=None,
                                   nbytes=dtypes.get(dtype).nbytes(math.prod(shape)), extra={"zero3_pieces": len(pieces)})
    reader.pieces[key] = pieces


def _frozen(ckpt: Checkpoint, reader: _Gathered, folder: str, first: str, model_files: list[str],
            frozen: dict[str, tuple[int, ...]], open_file: Callable[[str], Checkpoint]) -> None:
    """Frozen parameters: each rank's `frozen_param_fragments` end to end (zero_to_fp32 `_zero3_merge_frozen_params`)."""
    ranks = [ckpt] + [open_file(os.path.join(folder, n)) for n in model_files[1:]]
    for name, shape in frozen.items():
        numel = math.prod(shape)
        pieces, pos = [], 0
        for r, part in enumerate(ranks):
            t = part.tensors.get(f"{FROZEN}{name}")
            if t is None:
                raise CorruptCheckpointError(os.path.join(folder, model_files[r]), f"no {FROZEN}{name[:80]}")
            n = max(0, min(t.numel, numel - pos))
            if n:
                pieces.append(_Piece(pos, n, t, 0))
            pos += n
        _place(ckpt, reader, first, name, shape, pieces)
        ckpt.editable().pop(f"{FROZEN}{name}", None)
