"""One pass over a checkpoint's tensors for the sums every report shares (issue 22: a 200k-tensor header
pays for each pass over its names): the unique parameter count and its stored bytes by bucket, layer and
dtype, the non-parameter tensors by role, and the (name, elements, stored bytes) of each counted
parameter for the summary's module tree. The summary and the analytic model (census/model.py) read it;
derived once on the checkpoint's logical view (census/quant/)."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

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
    place, alias_of = placements(ckpt), aliases(ckpt)
    out = Tally(0, 0, {}, {}, {}, {}, [], [])
    groups: dict[tuple[str, int | None, str], Sums] = {}   # (bucket, layer, stored label) -> sums, folded below
    tree = out.tree
    packed: dict[str, Callable[[int], int]] = {}   # dtype -> its DType.nbytes (what stored(t) gives a plain tensor)
    # The tensors' columns (core/tensor_table.py), not a TensorInfo each: the loop runs per name. Only a tensor with
    # extra facts (a quantised weight) is read as its TensorInfo.
    c, special = columns(ckpt.tensors), {t.name: t for t in with_extra(ckpt.tensors)}
    for name, dtype, numel, file_bytes in zip(c.names, c.dtypes, c.numels, c.nbytes):
        if name in alias_of:
            continue
        out.tensor_bytes += file_bytes
        p = place[name]
        if p.role != "parameter":
            row = out.non_params.get(p.role)
            if row is None:
                row = out.non_params[p.role] = {"role": p.role, "tensors": 0, "elements": 0, "bytes": 0, "names": []}
            row["tensors"] += 1
            row["elements"] += numel
            row["bytes"] += (packed.get(dtype) or packed.setdefault(dtype, dtypes.get(dtype).nbytes))(numel)
            row["names"].append(name)
            continue
        t = special.get(name) if special else None
        if t is not None:   # a quantised weight's bytes are all its pieces' (census/quant/)
            label, nbytes = stored(t, numel)
        else:
            label = dtype
            nbytes = (packed.get(label) or packed.setdefault(label, dtypes.get(label).nbytes))(numel)
        key = (p.bucket, p.layer, label)
        s = groups.get(key)
        if s is None:
            s = groups[key] = [0, 0, 0]
        s[0] += numel
        s[1] += nbytes
        s[2] += 1
        if p.bucket == "other":
            out.unplaced.append(name)
        tree.append((name, numel, nbytes))
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
