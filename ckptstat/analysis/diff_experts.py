"""transformers 5's fused experts read as the per-expert tensors its save_pretrained writes, for `ckptstat diff`.

In memory (`model.state_dict()`, what a `torch.save` of it holds) a transformers 5 MoE keeps its experts fused:
`<p>.experts.gate_up_proj` [E, 2I, H] (each expert's gate rows, then its up rows) and `<p>.experts.down_proj`
[E, H, I]; save_pretrained reverts transformers' conversion_mapping (MergeModulelist, Concatenate) and writes one
tensor per expert: `<p>.experts.N.gate_proj.weight`, `up_proj`, `down_proj`, and Mixtral's original names
(`block_sparse_moe.experts.N.w1` / `w3` / `w2`, `block_sparse_moe.gate`). Where one side holds fused experts and the
other per-expert ones, the fused side is read as slices (each a contiguous run of its stored bytes: no copy) named
as the per-expert side's, and Mixtral's names are spelled as the fused side's module (`mlp`)."""
from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from ..core import Checkpoint
from ..core.tensor import TensorInfo
from ..families.framework.layout import Paths
from ..families.mixtral import MIXTRAL as MIXTRAL_LAYOUT

LABEL = "transformers 5's fused experts (gate_up_proj, down_proj) read per expert, as save_pretrained writes them"
FUSED = re.compile(r"^(?P<p>.*\.experts)\.(?P<w>gate_up_proj|down_proj)$")
PER_EXPERT = re.compile(r"\.experts\.\d+\.(gate_proj|up_proj|down_proj|w1|w2|w3)\.weight$")


def _renames(saved: Paths, memory: Paths) -> list[tuple[re.Pattern[str], str]]:
    """A family's checkpoint names as its in-memory model's (transformers' conversion_mapping, reversed): the experts'
    and the router's, from the two layouts' Paths."""
    experts = [(rf"\.{saved.mlp}\.{saved.experts}\.(\d+)\.{a}\.", rf".{memory.mlp}.{memory.experts}.\1.{b}.")
               for a, b in ((saved.gate, memory.gate), (saved.up, memory.up), (saved.down, memory.down))]
    router = [(rf"\.{saved.mlp}\.{saved.router}\.", f".{memory.mlp}.{memory.router}.")]
    return [(re.compile(a), b) for a, b in experts + router]


# Mixtral's (block_sparse_moe.experts.N.w1 / w3 / w2, block_sparse_moe.gate) as the fused model's (mlp.*)
MIXTRAL = _renames(MIXTRAL_LAYOUT.paths, Paths())


def _slice(t: TensorInfo, name: str, index: int, part: int, parts: int) -> TensorInfo:
    """Expert `index`'s part `part` of `parts` equal runs of rows (its bytes are contiguous)."""
    per_expert = t.nbytes // t.shape[0]
    size = per_expert // parts
    lo = index * per_expert + part * size
    extra: dict[str, Any] = dict(t.extra)
    if isinstance(extra.get("storage_byte_offset"), int):   # a torch zip record read by its own offset
        extra["storage_byte_offset"] += lo
    shape = (t.shape[1] // parts, *t.shape[2:])
    return replace(t, name=name, shape=shape, offset=None if t.offset is None else t.offset + lo, nbytes=size,
                   extra=extra)


def _fused(t: TensorInfo) -> bool:
    return (FUSED.match(t.name) is not None and len(t.shape) == 3 and t.stride is None and not t.dt.is_blocked
            and (t.offset is not None or "storage_byte_offset" in t.extra)
            and t.shape[1] % (2 if t.name.endswith("gate_up_proj") else 1) == 0)


def split(ckpt: Checkpoint) -> Checkpoint:
    """The checkpoint with each fused experts tensor replaced by its per-expert slices."""
    tensors: dict[str, TensorInfo] = {}
    for name, t in ckpt.tensors.items():
        m = FUSED.match(name)
        if m is None or not _fused(t):
            tensors[name] = t
            continue
        parts = ("gate_proj", "up_proj") if m["w"] == "gate_up_proj" else ("down_proj",)
        for e in range(t.shape[0]):
            for i, part in enumerate(parts):
                n = f"{m['p']}.{e}.{part}.weight"
                tensors[n] = _slice(t, n, e, i, len(parts))
    return replace(ckpt, tensors=tensors)


def fused_side(a: Checkpoint, b: Checkpoint) -> str | None:
    """"a" or "b": the side holding fused experts where the other holds them per expert; else None."""
    def fused(c: Checkpoint) -> bool:
        return any(_fused(t) for t in c.tensors.values())

    def per_expert(c: Checkpoint) -> bool:
        return any(PER_EXPERT.search(n) for n in c.tensors)

    if fused(a) and not per_expert(a) and per_expert(b) and not fused(b):
        return "a"
    if fused(b) and not per_expert(b) and per_expert(a) and not fused(a):
        return "b"
    return None
