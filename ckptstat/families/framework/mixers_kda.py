"""Kimi Delta Attention (KDA), the token mixer of a layout's linear layers where DecoderLayout.linear is "kda" or
"kda_full" (ArchSpec.linear_layers; its sizes ArchSpec.deltanet, H heads of d: key_heads = value_heads, key_dim =
value_dim): transformers modeling_kimi_linear.py KimiLinearDeltaAttention and modeling_bailing_hybrid.py
BailingHybridDeltaAttention (both Glm5NextTextLinearAttention's forward), as they run without the
flash-linear-attention kernels (on the CPU, where the walk's oracle runs).

One layer, at {linear_attn}: q_proj, k_proj, v_proj (h -> H d each), the depthwise causal conv1d over [q; k; v] (3 H d
channels, no bias; saved split as q_conv1d / k_conv1d / v_conv1d, Paths.sep_conv) counted as FlopCounterMode counts a
convolution over the padded output length (layout_linear: max(s, k) + k - 1), the per-channel forget gate (f_a_proj
h -> d then f_b_proj d -> H d, or one f_proj h -> H d; dt_bias [H d], A_log), beta = sigmoid(b_proj) (h -> H), the
chunked KDA rule, the output gate (g_a_proj, g_b_proj, or one g_proj), the gated RMSNorm o_norm over each head's d,
and o_proj (H d -> h).

chunk_kimi_delta_attention pads the sequence to chunks of C = 64 and, per head and chunk, runs as matmuls only
attn @ v_beta (C x C x d), attn @ (k_beta exp g) (C x C x d), and in the loop (q exp g) @ state, k_cumdecay @ state
(C x d x d each), the intra-chunk scores @ v_new (C x C x d) and the state's update (d x C x d): C x (3 C d + 3 d d)
MACs a chunk. Its intra-chunk scores are element-wise products summed over d (no matmul FlopCounterMode counts); the
single-token recurrent rule (a decode step) is element-wise.

The cache (transformers 5 cache_utils LinearAttentionLayer): per KDA layer a conv state [b, 3 H d, k] and a float32
recurrent state [b, H, d, d]; the other layers are the family's (latent_hybrid_cache: multi-head latent attention's)."""
from __future__ import annotations

import re

from . import infer
from .archspec import ArchSpec, DeltaNet
from .base import STATE_BYTES, KVLines, Tensors
from .layout_base import DecoderLayout, Walk
from .layout_linear import CHUNK
from .ops import ew_cost


def chunk_macs(s: ArchSpec, b: int, n: int) -> int:
    """chunk_kimi_delta_attention's matmul MACs in one layer for b x n tokens (the module docstring)."""
    v = s.deltanet
    assert v is not None
    padded = -(-n // CHUNK) * CHUNK
    return b * v.value_heads * padded * (3 * CHUNK * v.key_dim + 3 * v.key_dim * v.value_dim)


def _gate(w: Walk, layers: tuple[int, ...], names: tuple[str, ...], what: str) -> None:
    """A gate's projection(s) to H d: one (full rank), or two through d (low rank)."""
    s, la, v = w.s, f"{w.p.linear_attn}.", w.s.deltanet
    assert v is not None
    width, d = v.value_heads * v.value_dim, v.key_dim
    if w.lay.linear == "kda_full":
        w.linear(la + names[0], None, s.hidden, width, False, layers, label=w.label(f"{la}{names[0]} ({what})", layers))
        return
    w.linear(la + names[0], None, s.hidden, d, False, layers, label=w.label(f"{la}{names[0]} ({what})", layers))
    w.linear(la + names[1], None, d, width, False, layers, label=w.label(f"{la}{names[1]} ({what})", layers))


def kda(w: Walk, layers: tuple[int, ...]) -> None:
    """One KDA mixer on `layers` (the module docstring), in execution order."""
    s, p, B, lay = w.s, w.p, w.B, w.lay
    v = s.deltanet
    assert v is not None, "a KDA layout's spec gives its sizes (ArchSpec.deltanet)"
    h, L, b, n = s.hidden, len(layers), B.b, B.seq
    H, d, k = v.value_heads, v.key_dim, v.conv_kernel
    width = H * d
    conv = 3 * width
    la = f"{p.linear_attn}."
    for sub in (p.q, p.k, p.v):
        w.linear(la + sub, None, h, width, False, layers)
    for sub in p.sep_conv:
        w.record(la + sub, None, (("weight", (width, 1, k)),), layers)
    B.add(w.label(f"{la}{'/'.join(p.sep_conv)} (+silu)", layers), "conv", "encoder", L, (b, conv, n), (b, conv, n),
          params=conv * k * L, macs=b * (max(n, k) + k - 1) * conv * k, ew=b * n * conv * ew_cost("silu"),
          weights_per_call=conv * k)
    _gate(w, layers, p.kda_f if lay.linear == "kda" else p.kda_f[:1], "forget gate")
    w.record(la + p.dt_bias, "ssm_dt.bias", (("", (width,)),), layers)   # renamed dt_proj.bias by KimiLinearModel's converter
    w.record(la + p.a_log, None, (("", (1, 1, H, 1) if lay.linear == "kda" else (H,)),), layers)
    B.add(w.label(f"{la}{p.a_log}, {p.dt_bias} (per-channel decay)", layers), "ssm", "encoder", L, (b, n, width),
          (b, n, width), params=(width + H) * L, ew=b * n * width * (ew_cost("softplus") + 3), weights_per_call=width + H)
    w.linear(la + p.sep_b, None, h, H, False, layers)
    padded = -(-n // CHUNK) * CHUNK
    B.add(w.label(f"{la}chunked KDA rule (chunk {CHUNK})", layers), "ssm", "encoder", L, (b, n, conv), (b, n, width),
          macs=chunk_macs(s, b, n),
          ew=b * H * (n * 2 * d * ew_cost("rmsnorm") + padded * (3 * CHUNK * d + 4 * d + 2 * d * d // CHUNK)))
    _gate(w, layers, p.kda_g if lay.linear == "kda" else (p.sep_g,), "output gate")
    w.norm(la + p.gated_norm, None, d, layers, residual=False, tokens=w.tok + (H,))
    B.activation(w.label(f"{la}{p.gated_norm} x sigmoid(gate)", layers), "encoder", w.tok, width, "sigmoid", L, gated=True)
    w.linear(la + p.o, None, width, h, False, layers)


def latent_hybrid_cache(s: ArchSpec, b: int, n: int, nd: int, ab: int) -> KVLines:
    """transformers' cache of a KDA hybrid whose other layers run multi-head latent attention (Kimi Linear, Ling 3):
    per latent layer the normalised kv_lora_rank latent and the rope key of every token (one shared head, as DeepSeek's:
    deepseek.kv_cache), per KDA layer a conv state (3 H d x k) and a float32 recurrent state (H x d x d), whatever s."""
    v, m = s.deltanet, s.latent
    assert v is not None and m is not None, "a KDA hybrid's spec gives its sizes (ArchSpec.deltanet, ArchSpec.latent)"
    lin = len(s.linear_layers)
    full = s.layers - lin
    per = (m.kv_lora_rank + s.rope_dim) * ab
    conv = 3 * v.value_heads * v.value_dim * v.conv_kernel * ab
    state = v.value_heads * v.key_dim * v.value_dim * max(ab, STATE_BYTES)
    return [(f"b={b}, s={n}", b * (full * n * per + lin * (conv + state)),
             f"{full} latent-attention layers x (kv_lora_rank + qk_rope_head_dim) x s x b x {ab} B ({per:,} B per token and "
             f"layer); {lin} KDA layers x b x (conv state 3 H d x k x {ab} B = {conv:,} B + recurrent state H x d x d x "
             f"{max(ab, STATE_BYTES)} B (float32 whatever the dtype) = {state:,} B), whatever s")]


def from_tensors(lay: DecoderLayout, T: Tensors) -> tuple[tuple[int, ...], DeltaNet]:
    """ArchSpec's linear_layers and deltanet from the shapes of a checkpoint without config.json: the layers holding
    {linear_attn}.{sep_b} (b_proj [H, h]), each head's d from the gated norm [d], the kernel from the conv1d (saved split,
    q_conv1d [H d, 1, k], or as held, conv1d [3 H d, 1, k])."""
    p = lay.paths
    base = rf"(^|\.){re.escape(p.layers)}\.(\d+)\.{re.escape(p.linear_attn)}\."
    rx = re.compile(base + re.escape(p.sep_b) + r"\.weight$")
    layers = tuple(sorted({int(m.group(2)) for n in T if (m := rx.search(n))}))
    (H, _) = infer.shape(T, base + re.escape(p.sep_b) + r"\.weight$", f"{p.linear_attn}.{p.sep_b}")
    (d,) = infer.shape(T, base + re.escape(p.gated_norm) + r"\.weight$", f"{p.linear_attn}.{p.gated_norm}")
    (_, _, k) = infer.shape(T, base + rf"({re.escape(p.sep_conv[0])}|{re.escape(p.conv)})\.weight$",
                            f"{p.linear_attn}.{p.sep_conv[0]}")
    return layers, DeltaNet(key_heads=H, key_dim=d, value_heads=H, value_dim=d, conv_kernel=k)
