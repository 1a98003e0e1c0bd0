"""What one module's forward holds at its peak in inference, beyond the weights: transformers' eager attention
scores (text models: planner.activations), a state-space mixer's scan on transformers' reference path, and the
image/audio models' peak module from the op template. Measured
against torch's MemTracker over CPU forwards and torch.cuda.max_memory_allocated on an H200
(tests/test_memory_planner.py, bench/results/gpu_memory.md)."""
from __future__ import annotations

import functools
import json
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

from ...families.framework.base import ArchSpec

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


REFERENCE_PATH = ("state-space layers, as transformers runs them without the mamba_ssm / causal_conv1d kernels (their "
                  "fused CUDA scan holds no [b, i, s, N] tensor)")


def ssm_scan(s: ArchSpec, b: int, n: int, ab: float) -> tuple[float, str]:
    """Bytes one state-space mixer (ArchSpec.ssm) holds at its peak beside the layer's b*s*2h, and the rule, on
    transformers' reference path (no mamba_ssm / causal_conv1d kernel loaded: CPU, or a GPU without them), as torch's
    MemTracker measures it; (0, "") without one. The CUDA kernels fuse the scan and hold none of the float32 tensors.
     - Mamba1 (dt_rank: Mamba, FalconMamba, Jamba, Zamba): modeling_mamba.py mamba_selective_scan discretises the whole
       sequence before its loop, discrete_A, discrete_B and deltaB_u [b, i, s, N] in float32, live to its end beside
       the D skip and its sum (float32 [b, i, s]), and the mixer's in_proj output (2i), conv output, dt, softplus(dt),
       the loop's outputs and their stack (7i at the activation dtype); Zamba scans each of its n_mamba_heads heads
       in turn, i / heads channels of [.., s, N] at a time.
     - Mamba2 (Mamba2, Bamba, Granite 4, NemotronH, FalconH1, Zamba2): modeling_mamba2.py mamba2_chunk_scan pads s to
       S, whole chunks of l, and keeps every local to its return, all float32: the segment sums L, C.B (G) and M
       [b, S/l, l, l, H] (Q = S*H*l each), B and C repeated to the H heads, then B_decay (K = S*H*N each), x padded and
       the D residual, then Y_diag, C.states, Y_off, their sum and its contiguous copy (X = S*i each), the chunk-start
       states (Z = (S/l + 1)*i*N). Its peak is the largest of three moments: M's einsum (its permuted copy of M and
       of x, 4Q + 2K + 4X), C.states' einsum (its copies of C and the states, 3Q + 4K + 4X + Z + S/l*i*N) and the
       return (3Q + 3K + 7X + Z); besides, the mixer's in_proj output (i + conv_dim + H) and conv output (conv_dim)
       at the activation dtype."""
    m = s.ssm
    if m is None:
        return 0, ""
    i, N = m.intermediate, m.state
    if m.dt_rank:
        per = i // getattr(s.variant, "mamba_heads", 1)   # ZambaVariant.mamba_heads: one head's channels at a time
        nbytes = b * n * (4 * (3 * per * N + 2 * i) + ab * 7 * i)
        return nbytes, (f"{REFERENCE_PATH}: b*s*2h x {ab:g} B + 4 B x b*s*(3*{'i/heads' if per != i else 'i'}*N + 2i) "
                        f"float32 discrete_A, discrete_B, deltaB_u and the D skip + b*s*7i x {ab:g} B (in_proj, conv, dt, "
                        "scan outputs)")
    S = -(-n // m.chunk) * m.chunk
    Q, K, X, Z = S * m.heads * m.chunk, S * m.heads * N, S * i, (S // m.chunk + 1) * i * N
    scan = max(4 * Q + 2 * K + 4 * X, 3 * Q + 4 * K + 4 * X + Z + S // m.chunk * i * N, 3 * Q + 3 * K + 7 * X + Z)
    nbytes = 4 * b * scan + ab * b * n * (i + 2 * m.conv_dim + m.heads)
    return nbytes, (f"{REFERENCE_PATH}: b*s*2h x {ab:g} B + 4 B x b*max(4Q + 2K + 4X, 3Q + 4K + 4X + Z + S/l*i*N, "
                    f"3Q + 3K + 7X + Z) float32 chunked scan (S: s padded to chunks of l = {m.chunk}; Q = S*H*l, "
                    f"K = S*H*N, X = S*i, Z = (S/l + 1)*i*N) + b*s*(i + 2*conv_dim + H) x {ab:g} B (in_proj, conv)")


def ssm_layer(s: ArchSpec, b: int, n: int, ab: float, t: int = 1, mask: bool = False) -> tuple[float, str]:
    """A state-space layer's inference peak, b*s*2h beside its mixer's scan (ssm_scan) / tp, plus, with `mask`, a
    hybrid's eager b*s^2 mask (built once, live in every layer), and the rule's words for it; (0, "") without a
    mixer. `memory` and the planner compare it with the attention or MLP layer's peak and keep the larger."""
    scan, rule = ssm_scan(s, b, n, ab)
    if not scan:
        return 0, ""
    m = b * n * n * ab if mask else 0
    return (ab * b * n * 2 * s.hidden + (scan / t if t > 1 else scan) + m,
            f"; {rule}{f' + b*s^2 x {ab} B mask' if m else ''}{'; the scan / tp' if t > 1 else ''}; the larger of the two")
