"""transformers' FineGrainedFP8 MoE experts as its save_pretrained writes them (5.25; docs/quantized.md): the model holds
each MoE block's experts fused, `P.experts.gate_up_proj` [E, 2 x inter, hidden] and `P.experts.down_proj` float8 with
one float32 `<proj>_scale_inv` [E, rows / b0, cols / b1] each, and save_pretrained splits the weights back into the
per-expert linears the checkpoint format names (`P.experts.{e}.gate_proj.weight`, `up_proj`, `down_proj`; Mixtral's
`w1`, `w3`, `w2`) but keeps the scales fused (`P.experts.gate_up_proj_scale_inv`), which transformers' loader reads
back beside the re-fused weights. Each per-expert weight is an `fp8 block-scaled` quantised weight of its own shape;
the fused scale is a member of the block's first expert's first weight (its bytes counted once), role `scale`."""
from __future__ import annotations

import re
from collections.abc import Iterator, Mapping

from ...core import TensorInfo

# fused name -> the per-expert linears it is split into (qwen2/3-MoE, OLMoE, DeepSeek...; Mixtral)
FUSED = {"gate_up_proj": (("gate_proj", "up_proj"), ("w1", "w3")), "down_proj": (("down_proj",), ("w2",))}
F8 = {"F8_E4M3", "F8_E5M2"}


def experts(T: Mapping[str, TensorInfo],
            modules: Mapping[str, Mapping[str, TensorInfo]]) -> Iterator[tuple[str, dict[str, TensorInfo]]]:
    """(weight name, its members) of every per-expert float8 weight whose experts' scales are stored fused: a
    3-D float32 `<fused>_scale_inv` in `P.experts` whose first dimension counts the experts `P.experts.{e}` holds
    (no more), each expert's parts 2-D float8 of one shape."""
    for mod, s in modules.items():
        for fused, options in FUSED.items():
            scale = s.get(fused + "_scale_inv")
            if scale is None or scale.dtype != "F32" or len(scale.shape) != 3 or not scale.shape[0]:
                continue
            for parts in options:
                names = [f"{mod}.{e}.{p}.weight" for e in range(scale.shape[0]) for p in parts]
                shapes = {T[n].shape for n in names if n in T and T[n].dtype in F8}
                if (all(n in T and T[n].dtype in F8 for n in names) and len(shapes) == 1 and len(next(iter(shapes))) == 2
                        and f"{mod}.{scale.shape[0]}.{parts[0]}.weight" not in T):
                    for i, n in enumerate(names):
                        yield n, {n: T[n], scale.name: scale} if i == 0 else {n: T[n]}
                    break


_EXPERT = re.compile(r"^(?P<m>.+\.experts)\.(?P<e>\d+)\.(?P<part>\w+)\.weight$")


def scale_of(name: str, T: Mapping[str, TensorInfo]) -> tuple[str, int, int, int] | None:
    """Where a per-expert weight's scales lie in its block's fused `<fused>_scale_inv` [E, R, C]: (its name, the
    element its grid starts at, the grid's rows and columns): expert e's [R, C], its parts' rows in order (gate then
    up, as the fused weight's rows are), or None."""
    m = _EXPERT.match(name)
    if m is None:
        return None
    for fused, options in FUSED.items():
        scale = T.get(f"{m['m']}.{fused}_scale_inv")
        if scale is None or len(scale.shape) != 3:
            continue
        for parts in options:
            e, (experts, rows, cols) = int(m["e"]), scale.shape
            if m["part"] in parts and e < experts and rows % len(parts) == 0:
                per = rows // len(parts)
                return scale.name, (e * rows + parts.index(m["part"]) * per) * cols, per, cols
    return None
