"""What one module's forward holds at its peak in inference, beyond the weights: transformers' eager attention
scores (text models: planner.activations) and the image/audio models' peak module from the op template. Measured
against torch's MemTracker over CPU forwards and torch.cuda.max_memory_allocated on an H200
(tests/test_memory_planner.py, bench/results/gpu_memory.md)."""
from __future__ import annotations

import functools
import json
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

_TEMPORARIES = os.path.join(os.path.dirname(__file__), "act_temporaries.json")


@functools.cache
def _act_table() -> Mapping[str, Mapping[str, float]]:
    with open(_TEMPORARIES, encoding="utf-8") as f:
        table: Mapping[str, Mapping[str, float]] = json.load(f)["activations"]
    return table


def act_temporaries(fn: str, ab: float) -> float:
    """Bytes per element of its input that transformers' ACT2FN[fn] allocates beside its input and output at its peak,
    at activations of ab bytes (act_temporaries.json, measured by fixtures/make_act_temporaries.py: quick_gelu's
    `x * sigmoid(1.702 x)` one temporary, gelu_new's tanh formula two, torch's fused gelu none); 0 for a function the
    table has not (softmax, a product)."""
    per = _act_table().get(fn)
    if per is None:
        return 0.0
    return per["float32"] if ab >= 4 else max(per["bfloat16"], per["float16"])


def op_peak(o: Any, ab: float, eager: bool = False) -> float:
    """Bytes live while one op runs: its input and output, what its callers keep live (Op.live: a residual block's
    input; Op.eager_live too under eager attention: the probabilities an encoder layer keeps through its MLP), an
    activation's temporaries over the elements it activates (a gated one's output: act(gate) x up, the two its input)
    and its Op.scratch (max_pool2d's indices)."""
    out = math.prod(o.out_shape)
    temps = act_temporaries(o.fn, ab) * out if o.kind == "activation" and o.fn else 0.0
    return (math.prod(o.in_shape) + out + o.live + (o.eager_live if eager else 0)) * ab + temps + o.scratch


def eager_scores(ab: float) -> tuple[float, str]:
    """Bytes per attention score at the peak of transformers' eager_attention_forward, and the rule: the scores
    (+ mask) at ab, then softmax(..., dtype=float32), which ATen runs as a float32 copy of them and a float32 result,
    all three live (fp32 scores: no copy); plus the b x s x s additive mask at ab that every layer shares."""
    if ab >= 4:
        return 2 * ab, f"{2 * ab:g} B (scores, fp32 softmax) + b*s^2 x {ab:g} B mask"
    return ab + 8, f"{ab + 8:g} B (scores {ab:g}, their fp32 copy 4, fp32 softmax 4) + b*s^2 x {ab:g} B mask"


def module_peak(ops: Sequence[Any], ab: float, eager: bool) -> tuple[float, str]:
    """Inference peak of an image/audio model, and its rule: the largest op_peak of one module (its input + output,
    what its callers keep live, an activation's temporaries); in a transformer encoder (ops with attention scores),
    eager attention's scores at their peak bytes beside q, k and v, where larger (with q, k, v and one contiguous copy
    the batched matmul makes of a transposed operand), and the four b x t x h tensors a layer keeps across its
    attention and MLP (its input, the attention output, their residual sum and its norm). ViT-B/16 at b=64 on an
    H200 held 0.37x (eager) and 0.67x (SDPA) of what the largest module alone planned; CLIP's vision tower 0.72-0.75x
    before quick_gelu's temporary was counted, ResNet-50 0.53x before a block's input (Op.live) was."""
    largest = max(op_peak(o, ab, eager) for o in ops)
    scores = [o for o in ops if o.kind == "attention" and o.module.endswith("scores (QK^T)")]
    norms = [math.prod(o.out_shape) for o in ops if o.kind == "norm"]
    rule = (f"largest (input + output + what its callers keep live) of one module x {ab:g} B + an activation's "
            "temporaries")
    if not scores or not norms:
        return largest, rule
    peak = largest
    if eager:
        sb, _ = eager_scores(ab)
        peak = max(peak, max(math.prod(o.out_shape) * sb + 4 * math.prod(o.in_shape) * ab for o in scores))
        rule = f"max({rule}, eager scores x {sb:g} B + q, k, v and a contiguous copy)"
    held = 4 * max(norms) * ab
    return peak + held, rule + f" + 4 x b*t*h x {ab:g} B (a layer's input, attention output, residual, norm)"
