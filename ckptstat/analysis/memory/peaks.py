"""What one module's forward holds at its peak in inference, beyond the weights: transformers' eager attention
scores (text models: planner.activations) and the image/audio models' peak module from the op template. Measured
against torch's MemTracker over CPU forwards and torch.cuda.max_memory_allocated on an H200
(tests/test_memory_planner.py, bench/results/gpu_memory.md)."""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any


def eager_scores(ab: float) -> tuple[float, str]:
    """Bytes per attention score at the peak of transformers' eager_attention_forward, and the rule: the scores
    (+ mask) at ab, then softmax(..., dtype=float32), which ATen runs as a float32 copy of them and a float32 result,
    all three live (fp32 scores: no copy); plus the b x s x s additive mask at ab that every layer shares."""
    if ab >= 4:
        return 2 * ab, f"{2 * ab:g} B (scores, fp32 softmax) + b*s^2 x {ab:g} B mask"
    return ab + 8, f"{ab + 8:g} B (scores {ab:g}, their fp32 copy 4, fp32 softmax 4) + b*s^2 x {ab:g} B mask"


def module_peak(ops: Sequence[Any], ab: float, eager: bool) -> tuple[float, str]:
    """Inference peak of an image/audio model, and its rule: the largest (input + output) of one module; in a
    transformer encoder (ops with attention scores), eager attention's scores at their peak bytes beside q, k and v,
    where larger (with q, k, v and one contiguous copy the batched matmul makes of a transposed operand), and the
    four b x t x h tensors a layer keeps across its attention and MLP (its input, the attention
    output, their residual sum and its norm). ViT-B/16 at b=64 on an H200 held 0.37x (eager) and 0.67x (SDPA) of
    what the largest module alone planned; ResNets hold their shortcut too, not counted (0.57x on CPU)."""
    largest = max((math.prod(o.in_shape) + math.prod(o.out_shape)) * ab for o in ops)
    scores = [o for o in ops if o.kind == "attention" and o.module.endswith("scores (QK^T)")]
    norms = [math.prod(o.out_shape) for o in ops if o.kind == "norm"]
    rule = f"largest (input + output) of one module x {ab:g} B"
    if not scores or not norms:
        return largest, rule
    peak = largest
    if eager:
        sb, _ = eager_scores(ab)
        peak = max(peak, max(math.prod(o.out_shape) * sb + 4 * math.prod(o.in_shape) * ab for o in scores))
        rule = f"max({rule}, eager scores x {sb:g} B + q, k, v and a contiguous copy)"
    held = 4 * max(norms) * ab
    return peak + held, rule + f" + 4 x b*t*h x {ab:g} B (a layer's input, attention output, residual, norm)"
