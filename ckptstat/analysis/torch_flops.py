"""torch's FlopCounterMode with the formulas it lacks: `aten._grouped_mm` (a transformers 5 MoE's routed experts) and
the fused SDPA kernels with grouped-query key/value heads (CUDA) or on the CPU. The measured side of `ckptstat run`
and of the meta-device FLOPs (analysis/meta.py)."""
from __future__ import annotations

from typing import Any


def grouped_mm_flops(a: Any, b: Any, offs: Any = None, *args: Any, out_val: Any = None, **kwargs: Any) -> int:
    """FLOPs of aten._grouped_mm, for which FlopCounterMode (torch 2.13) has no formula: transformers 5 runs a MoE's
    routed experts through it (integrations/moe.py grouped_mm_experts_forward). A 2-D input (rows, in) against a 3-D
    weight (groups, in, out): rows offs[g-1]:offs[g] go through group g, each row once, the rows past offs[-1]
    through none (expert parallelism's sentinels). On the meta device the offsets hold no values: every row the
    forward passes goes through an expert (tokens x top_k; without expert parallelism offs[-1] is that count)."""
    assert a.dim() == 2 and b.dim() == 3 and offs is not None and offs.numel() == b.shape[0], (a.shape, b.shape)
    rows = a.shape[0] if offs.device.type == "meta" else int(offs[-1])
    return 2 * rows * a.shape[1] * b.shape[2]


grouped_mm_flops._get_raw = True   # type: ignore[attr-defined]  # FlopCounterMode: pass the tensors, not their shapes


def sdpa_flops(query: Any, key: Any, value: Any, *args: Any, out_shape: Any = None, **kwargs: Any) -> int:
    """FLOPs of a fused attention kernel, (batch, heads, seq, dim) shapes, by torch's own sdpa_flop_count with the
    key/value heads broadcast to the query's. transformers 5 passes grouped-query key/value unexpanded on CUDA
    (enable_gqa), which torch before 2.13 refused to count (an AssertionError out of `ckptstat run`); and on CPU
    SDPA runs a kernel torch has no formula for (_scaled_dot_product_flash_attention_for_cpu)."""
    from torch.utils.flop_counter import sdpa_flop_count

    b, h, s_q, d = query
    return sdpa_flop_count(query, (b, h, key[2], d), (b, h, value[2], value[3]))


def flop_counter() -> Any:
    """torch's FlopCounterMode, counting grouped_mm (grouped_mm_flops) and every fused SDPA kernel (sdpa_flops)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    aten = torch.ops.aten
    fused = [aten._scaled_dot_product_efficient_attention, aten._scaled_dot_product_flash_attention,
             aten._scaled_dot_product_cudnn_attention, aten._scaled_dot_product_flash_attention_for_cpu]
    return FlopCounterMode(display=False, custom_mapping={aten._grouped_mm: grouped_mm_flops,
                                                          **{op: sdpa_flops for op in fused}})
