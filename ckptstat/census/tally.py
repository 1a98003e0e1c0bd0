"""One pass over a checkpoint's tensors for the sums every report shares (issue 22: a 200k-tensor header
pays for each pass over its names): the unique parameter count and its stored bytes by bucket, layer and
dtype, the non-parameter tensors by role, and the names, elements and stored bytes of the counted
parameters (columns) for the summary's module tree. The summary and the analytic model (census/model.py) read it;
derived once on the checkpoint's logical view (census/quant/)."""
from __future__ import annotations

import operator
import re
from collections import Counter
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from itertools import compress

from ..core import Checkpoint, dtypes
from ..core.tensor_table import columns, with_extra
from ..naming import PADDLE_ACCUMULATOR
from .counts import aliases, placements
from .quant import logical, stored
from .ties import stored_twice

_PADDLE = re.compile(PADDLE_ACCUMULATOR)

Sums = list[int]   # [elements, stored bytes, tensors]


@dataclass
class Tally:
    total: int                                # unique parameters (census.parameters)
    tensor_bytes: int                         # bytes of every stored tensor, aliases once, copies of a tie each
    buckets: dict[str, Sums]
    layers: dict[tuple[str, int], Sums]
    by_dtype: dict[str, Sums]                 # stored label (dtype, or quantisation method) -> sums
    non_params: dict[str, dict]               # role -> {role, tensors, elements, bytes, names}
    unplaced: list[str]                       # parameters in bucket "other"
    tree: tuple[list[str], list[int], list[int]]   # (names, elements, stored bytes) of the counted parameters

    def stored_by_dtype(self) -> dict[str, int]:
        return {label: s[1] for label, s in self.by_dtype.items()}


def tally(ckpt: Checkpoint) -> Tally:
    return logical(ckpt).derived("tally", _tally)


def _without(apart: Collection[str], names: list[str], *columns: list) -> tuple[list, ...]:
    """The columns less the rows of the names `apart`."""
    keep = [n not in apart for n in names]
    return tuple(list(compress(col, keep)) for col in (names, *columns))


def _tally(ckpt: Checkpoint) -> Tally:
    place, alias_of = placements(ckpt), aliases(ckpt)
    # The tensors' columns (core/tensor_table.py), not a TensorInfo each; only a tensor with extra facts (a quantised
    # weight) is read as its TensorInfo. Python runs once per distinct (placement, dtype, element count) key, a few
    # thousand in a 200k-tensor MoE header: the per-row work is C's (map, zip, Counter; docs/performance.md).
    c, special = columns(ckpt.tensors), {t.name: t for t in with_extra(ckpt.tensors)}
    names, numels, file_bytes = c.names, c.numels, c.nbytes
    dtype_col: list[str | tuple[str, str]] = list(c.dtypes)
    if alias_of:   # an alias is counted under its first name only
        names, numels, file_bytes, dtype_col = _without(alias_of, names, numels, file_bytes, dtype_col)
    tensor_bytes = sum(file_bytes)
    if twice := stored_twice(ckpt):   # a tied weight the file stores again: once, as transformers loads it
        names, numels, file_bytes, dtype_col = _without(twice, names, numels, file_bytes, dtype_col)
    placed = list(map(place.__getitem__, names))
    by_id = {id(p): p for p in placed}   # (the Placement objects stay alive in `placed` while ids are in use)
    if special:   # a quantised weight's row is its own key: its label and bytes are all its pieces' (census/quant/)
        dtype_col = [("\x00", n) if n in special else d for n, d in zip(names, dtype_col)]

    def keys() -> Iterator[tuple[int, str | tuple[str, str], int]]:
        """Each row's key, made as it is read (a list of them was 110 MB at 1M tensors)."""
        return zip(map(id, placed), dtype_col, numels)

    counts = Counter(keys())   # in first-seen order, so every table below fills as name by name
    out = Tally(0, tensor_bytes, {}, {}, {}, {}, [], ([], [], []))
    groups: dict[tuple[str, int | None, str], Sums] = {}   # (bucket, layer, stored label) -> sums, folded below
    key_bytes: dict[tuple, int] = {}   # a parameter key's stored bytes a tensor
    stacked: list[tuple[str, int, Sums]] = []   # (bucket, layers, sums) of tensors stacked by layer
    other_roles = False
    for key, k in counts.items():
        pid, dtype, numel = key
        n_layers = 0
        if isinstance(dtype, tuple):   # a quantised weight: its label and stored bytes are all its pieces'
            t = special[dtype[1]]
            (label, nbytes), packed = stored(t, numel), dtypes.get(t.dtype).nbytes(numel)
            n = t.extra.get("stacked_layers")   # a Megatron stack, its leading dimension the layer (formats/dcp/megatron.py)
            n_layers = n if isinstance(n, int) and n > 0 and t.shape and t.shape[0] == n else 0
        else:
            label, nbytes = dtype, dtypes.get(dtype).nbytes(numel)
            packed = nbytes
        p = by_id[pid]
        if p.role != "parameter":
            row = out.non_params.get(p.role)
            if row is None:
                row = out.non_params[p.role] = {"role": p.role, "tensors": 0, "elements": 0, "bytes": 0, "names": []}
            row["tensors"] += k
            row["elements"] += numel * k
            row["bytes"] += packed * k
            other_roles = True
            continue
        key_bytes[key] = nbytes
        if n_layers and p.layer is None and p.bucket in ("encoder", "decoder"):
            stacked.append((p.bucket, n_layers, [numel * k, nbytes * k, k]))
        s = groups.get((p.bucket, p.layer, label))
        if s is None:
            s = groups[(p.bucket, p.layer, label)] = [0, 0, 0]
        s[0] += numel * k
        s[1] += nbytes * k
        s[2] += k
    # names, in the file's order, of the non-parameter roles, of the parameters placed nowhere, and the tree's rows
    listed = {pid for pid, p in by_id.items() if p.role != "parameter" or p.bucket == "other"}
    if listed:
        flags = list(map(listed.__contains__, map(id, placed)))
        for name, p in zip(compress(names, flags), compress(placed, flags)):
            if p.role != "parameter":
                out.non_params[p.role]["names"].append(name)
            else:
                out.unplaced.append(name)
    if other_roles:
        is_param = list(map(key_bytes.__contains__, keys()))
        out.tree = (list(compress(names, is_param)), list(compress(numels, is_param)),
                    list(map(key_bytes.__getitem__, compress(keys(), is_param))))
    else:   # every row: the columns themselves, not copies (8 MB each at 1M tensors)
        same = not special and all(map(operator.eq, map(key_bytes.__getitem__, keys()), file_bytes))
        out.tree = (names, numels, file_bytes if same else list(map(key_bytes.__getitem__, keys())))
    for (bucket, layer, label), s in groups.items():   # in first-seen order, as name by name
        out.total += s[0]
        _fold(out.buckets, bucket, s)
        _fold(out.by_dtype, label, s)
        if layer is not None:
            _fold(out.layers, (bucket, layer), s)
    for bucket, n_layers, (elements, nbytes, k) in stacked:   # each layer its slice: 1/n of the stack, one tensor
        for layer in range(n_layers):
            _fold(out.layers, (bucket, layer), [elements // n_layers, nbytes // n_layers, k])
    return out


def _fold(table: dict, key: object, s: Sums) -> None:
    into = table.setdefault(key, [0, 0, 0])
    for i in range(3):
        into[i] += s[i]


def optimizer_state(ckpt: Checkpoint) -> dict | None:
    """The optimizer state a checkpoint holds, from the tally's rows by role: its tensors of role optimizer
    (`exp_avg`, `exp_avg_sq`...) and the step counters of the same entries (`state.N.step`), counted as
    `torch.load(...)["state"]` holds them: `entries` the parameters with state (`state.N`), `tensors`, `elements`,
    `bytes`. None when it holds none."""
    c, view = tally(ckpt), logical(ckpt)
    opt = c.non_params.get("optimizer")
    if opt is None:
        return None
    def owner(name: str) -> str:   # `optimizer.state.3.exp_avg` -> `optimizer.state.3`; Paddle's `w_0_moment1_0` -> `w_0`
        paddle = _PADDLE.sub("", name)
        return paddle if paddle != name else name.rpartition(".")[0]
    entries = set(map(owner, opt["names"]))
    steps = [view[n] for n in c.non_params.get("counter", {}).get("names", ()) if owner(n) in entries]
    return {"entries": len(entries), "tensors": opt["tensors"] + len(steps),
            "elements": opt["elements"] + sum(t.numel for t in steps),
            "bytes": opt["bytes"] + sum(t.byte_size for t in steps)}


def optimizer_only(ckpt: Checkpoint) -> dict | None:
    """The optimizer state of a checkpoint that holds it and no model parameter (a Trainer's `optimizer.pt` opened
    alone), else None: what the summary, `memory` and `audit` say instead of a model's figures."""
    return None if tally(ckpt).buckets else optimizer_state(ckpt)


def optimizer_only_text(held: dict) -> str:
    """One line for a file of optimizer state alone: what it holds, and where the model is."""
    return (f"optimizer state and no model weights: {held['entries']:,} parameters' state in {held['tensors']:,} "
            f"tensors ({held['elements']:,} elements, {held['bytes']:,} bytes); the model is in its weights file "
            "or the checkpoint folder (a Trainer's checkpoint-N/ reads both)")
