"""One pass over a checkpoint's tensors for the sums every report shares (issue 22: a 200k-tensor header
pays for each pass over its names): the unique parameter count and its stored bytes by bucket, layer and
dtype, the non-parameter tensors by role, and the (name, elements, stored bytes) of each counted
parameter for the summary's module tree. The summary and the analytic model (census/model.py) read it;
derived once on the checkpoint's logical view (census/quant/)."""
from __future__ import annotations

import operator
from collections import Counter
from dataclasses import dataclass
from itertools import compress

from ..core import Checkpoint, dtypes
from ..core.tensor_table import columns, with_extra
from .counts import aliases, placements
from .quant import logical, stored

Sums = list[int]   # [elements, stored bytes, tensors]


@dataclass
class Tally:
    total: int                                # unique parameters (census.parameters)
    tensor_bytes: int                         # bytes of every stored tensor, aliases once
    buckets: dict[str, Sums]
    layers: dict[tuple[str, int], Sums]
    by_dtype: dict[str, Sums]                 # stored label (dtype, or quantisation method) -> sums
    non_params: dict[str, dict]               # role -> {role, tensors, elements, bytes, names}
    unplaced: list[str]                       # parameters in bucket "other"
    tree: list[tuple[str, int, int]]          # (name, elements, stored bytes) of each counted parameter

    def stored_by_dtype(self) -> dict[str, int]:
        return {label: s[1] for label, s in self.by_dtype.items()}


def tally(ckpt: Checkpoint) -> Tally:
    return logical(ckpt).derived("tally", _tally)


def _tally(ckpt: Checkpoint) -> Tally:
    """The sums by whole columns (core/tensor_table.py), in C: a Python step runs once per distinct (placement,
    stored label, elements, bytes), per non-parameter tensor and per quantised weight, not per tensor (a 200k-tensor
    MoE header has a few thousand such keys: docs/performance.md). Every order is the tensors' own, as name by name."""
    place, alias_of = placements(ckpt), aliases(ckpt)
    out = Tally(0, 0, {}, {}, {}, {}, [], [])
    c = columns(ckpt.tensors)
    names, dts, numels, file_bytes = c.names, c.dtypes, c.numels, c.nbytes
    if alias_of:   # each storage and view once: its first name
        kept = [n not in alias_of for n in names]
        names, dts = list(compress(names, kept)), list(compress(dts, kept))
        numels, file_bytes = list(compress(numels, kept)), list(compress(file_bytes, kept))
    out.tensor_bytes = sum(file_bytes)
    places = list(map(place.__getitem__, names))
    ids = list(map(id, places))   # (a Placement hashes in Python; its id in C)
    placement_of = dict(zip(ids, places))
    packed_of = {k: dtypes.get(k[0]).nbytes(k[1]) for k in set(zip(dts, numels))}   # what stored(t) gives a plain tensor
    packed = list(map(packed_of.__getitem__, zip(dts, numels)))
    is_param = list(map({i for i, p in placement_of.items() if p.role == "parameter"}.__contains__, ids))
    for i in compress(range(len(names)), map(operator.not_, is_param)):   # buffers, optimizer state...: by role
        role = places[i].role
        row = out.non_params.get(role)
        if row is None:
            row = out.non_params[role] = {"role": role, "tensors": 0, "elements": 0, "bytes": 0, "names": []}
        row["tensors"] += 1
        row["elements"] += numels[i]
        row["bytes"] += packed[i]
        row["names"].append(names[i])
    names, ids, labels = list(compress(names, is_param)), list(compress(ids, is_param)), list(compress(dts, is_param))
    numels, nbytes = list(compress(numels, is_param)), list(compress(packed, is_param))
    special = {t.name: t for t in with_extra(ckpt.tensors)}
    if special:   # a quantised weight's bytes are all its pieces' (census/quant/)
        for i, name in enumerate(names):
            t = special.get(name)
            if t is not None:
                labels[i], nbytes[i] = stored(t, numels[i])
    groups: dict[tuple[str, int | None, str], Sums] = {}   # (bucket, layer, stored label) -> sums, folded below
    for (pid, label, numel, size), count in Counter(zip(ids, labels, numels, nbytes)).items():   # first-seen order
        p = placement_of[pid]
        s = groups.get((p.bucket, p.layer, label))
        if s is None:
            s = groups[(p.bucket, p.layer, label)] = [0, 0, 0]
        s[0] += numel * count
        s[1] += size * count
        s[2] += count
    unplaced = {i for i, p in placement_of.items() if p.bucket == "other"}
    out.unplaced = list(compress(names, map(unplaced.__contains__, ids)))
    out.tree = list(zip(names, numels, nbytes))
    for (bucket, layer, label), s in groups.items():   # in first-seen order, as name by name
        out.total += s[0]
        _fold(out.buckets, bucket, s)
        _fold(out.by_dtype, label, s)
        if layer is not None:
            _fold(out.layers, (bucket, layer), s)
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
    owner = lambda name: name.rpartition(".")[0]  # noqa: E731 - `optimizer.state.3.exp_avg` -> `optimizer.state.3`
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
