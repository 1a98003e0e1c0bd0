"""The linear-attention layers of the layout walk (layout.py; DecoderLayout.linear): Qwen3-Next's and Qwen3.5's gated
DeltaNet (transformers modeling_qwen3_next.py Qwen3NextGatedDeltaNet, modeling_qwen3_5.py Qwen3_5GatedDeltaNet) on the
layers config layer_types marks "linear_attention" (ArchSpec.linear_layers), and the cache of such a hybrid decoder.

One layer: q, k, v and the output gate z from the input projections (in_proj_qkvz and in_proj_ba, or in_proj_qkv,
in_proj_z, in_proj_b, in_proj_a), the short causal depthwise conv1d over [q; k; v] (no bias), beta = sigmoid(b) and the
decay g = -exp(A_log) x softplus(a + dt_bias), the chunked gated delta rule, the gated RMSNorm (over each value head's
width, x silu(z)) and out_proj.

FLOPs are those of the reference PyTorch code transformers runs without the flash-linear-attention kernels (and on the
CPU, where the walk's oracle runs): the conv as FlopCounterMode counts a convolution, over the padded output length
(the prefill's input is padded to the kernel's width when shorter: LinearAttentionLayer.update_conv_state, so
max(s, k) + k - 1 outputs), and torch_chunk_gated_delta_rule's matmuls. That rule pads the sequence to a multiple of
its chunk size (64) and, per value head (the key heads repeated to as many) and chunk of C tokens: two C x C score
matmuls over the key width dk before the chunk loop (k_beta K^T and Q K^T), then in the loop k_cumdecay @ state and
Q @ state (C x dk x dv each), the intra-chunk scores @ v_new (C x C x dv) and K^T @ v_new (dk x C x dv, the state's
update): C x (2 C dk + 3 dk dv + C dv) MACs a chunk. Its triangular solves (torch.linalg.solve_triangular) are no
matmul FlopCounterMode counts; the single-token recurrent rule (a decode step) is element-wise.

The cache (transformers 5 cache_utils.py LinearAttentionLayer): per linear layer a conv state [b, 2 Hk dk + Hv dv, k]
in the model's dtype and a recurrent state [b, Hv, dk, dv] in float32 whatever the model's (the rule computes in
float32); per attention layer its keys and values (DynamicLayer)."""
from __future__ import annotations

import re

from ...errors import NoAnalyticModel, UsageError
from . import infer
from .archspec import ArchSpec, DeltaNet
from .base import FROM_CLASS, SLIDING_HELD, STATE_BYTES, Cfg, KVLines, Tensors
from .layout_base import DecoderLayout, LinearKeys, Walk
from .ops import ew_cost

_TYPES = ("linear_attention", "full_attention", "sliding_attention")   # the layer_types a linear hybrid's may name
CHUNK = 64          # torch_chunk_gated_delta_rule's chunk_size (the modeling files pass none)


def chunk_macs(s: ArchSpec, b: int, n: int) -> int:
    """torch_chunk_gated_delta_rule's matmul MACs in one layer for b x n tokens (the module docstring)."""
    v = s.deltanet
    assert v is not None
    padded = -(-n // CHUNK) * CHUNK
    dk, dv = v.key_dim, v.value_dim
    return b * v.value_heads * padded * (2 * CHUNK * dk + 3 * dk * dv + CHUNK * dv)


def gated_deltanet(w: Walk, layers: tuple[int, ...]) -> None:
    """One gated DeltaNet mixer on `layers` (the module docstring), in execution order."""
    s, p, B, lay = w.s, w.p, w.B, w.lay
    v = s.deltanet
    assert v is not None, "a linear layout's spec gives its sizes (ArchSpec.deltanet)"
    h, L, b, n = s.hidden, len(layers), B.b, B.seq
    Hk, dk, Hv, dv, k = v.key_heads, v.key_dim, v.value_heads, v.value_dim, v.conv_kernel
    kd, vd = Hk * dk, Hv * dv
    conv = 2 * kd + vd
    la = f"{p.linear_attn}."
    if lay.linear == "qkvz":
        w.linear(la + p.in_qkvz, "ssm_in", h, conv + vd, False, layers)
        w.linear(la + p.in_ba, "ssm_ba", h, 2 * Hv, False, layers)
    elif lay.linear == "split":
        for sub, gguf, width in ((p.in_qkv, "attn_qkv", conv), (p.in_z, "attn_gate", vd), (p.in_b, "ssm_beta", Hv),
                                 (p.in_a, "ssm_alpha", Hv)):
            w.linear(la + sub, gguf, h, width, False, layers)
    elif lay.linear == "fused":   # the four run apart; their MACs are one projection's of the summed width
        w.linear(la + p.in_fused, None, h, conv + vd + 2 * Hv, False, layers)
    else:   # separate (llama.cpp has no such architecture: no names)
        for sub, width in ((p.q, kd), (p.k, kd), (p.v, vd), (p.sep_b, Hv), (p.sep_a, Hv), (p.sep_g, vd)):
            w.linear(la + sub, None, h, width, False, layers)
    # depthwise, no bias; FlopCounterMode counts the padded output length. OLMo-Hybrid's is saved as three, q / k / v
    # (transformers' conversion_mapping concatenates them on load)
    if lay.linear == "separate":
        for sub, width in zip(p.sep_conv, (kd, kd, vd)):
            w.record(la + sub, None, (("weight", (width, 1, k)),), layers)
    else:
        w.record(la + p.conv, "ssm_conv1d", (("weight", (conv, 1, k)),), layers)
    B.add(w.label(f"{la}{p.conv} (+silu)", layers), "conv", "encoder", L, (b, conv, n), (b, conv, n), params=conv * k * L,
          macs=b * (max(n, k) + k - 1) * conv * k, ew=b * n * conv * ew_cost("silu"), weights_per_call=conv * k)
    # beta = sigmoid(b); g = -exp(A_log) x softplus(a + dt_bias): dt_bias is llama.cpp's ssm_dt.bias (the converter
    # renames it dt_proj.bias: Qwen3NextModel.modify_tensors)
    w.record(la + p.dt_bias, "ssm_dt.bias", (("", (Hv,)),), layers)
    w.record(la + p.a_log, "ssm_a", (("", (Hv,)),), layers)
    B.add(w.label(f"{la}{p.a_log}, {p.dt_bias} (beta, decay)", layers), "ssm", "encoder", L, (b, n, 2 * Hv), (b, n, 2 * Hv),
          params=2 * Hv * L, ew=b * n * Hv * (ew_cost("sigmoid") + 13), weights_per_call=2 * Hv)
    # q/k L2 norms and the scale, then the chunked rule (its decays, masks and exps as element-wise estimates)
    padded = -(-n // CHUNK) * CHUNK
    B.add(w.label(f"{la}chunked gated delta rule (chunk {CHUNK})", layers), "ssm", "encoder", L, (b, n, conv),
          (b, n, vd), macs=chunk_macs(s, b, n),
          ew=b * Hv * (n * 2 * dk * ew_cost("rmsnorm") + padded * (3 * CHUNK + 4 * (dk + dv) + 2 * dk * dv // CHUNK)))
    w.norm(la + p.gated_norm, "ssm_norm", dv, layers, residual=False, tokens=w.tok + (Hv,))
    B.activation(w.label(f"{la}{p.gated_norm} x silu(z)", layers), "encoder", w.tok, vd, "silu", L, gated=True)
    w.linear(la + (p.o if lay.linear == "separate" else p.out), "ssm_out", vd, h, False, layers)


def from_config(c: Cfg, layers: int, keys: LinearKeys = LinearKeys()) -> tuple[tuple[int, ...], DeltaNet]:
    """ArchSpec's linear_layers and deltanet from the config: layer_types' "linear_attention" entries, else the config
    class's rule (Qwen3NextConfig.__post_init__: every full_attention_interval-th layer attends, the others are
    linear; the interval is a constructor argument, 4 unless given, no field of the class's table)."""
    types = c.get("layer_types", default=None)
    if types is None:
        every = c.int("full_attention_interval", default=4)
        types = ["linear_attention" if (i + 1) % every else "full_attention" for i in range(layers)] if every > 0 else None
    # "sliding_attention": LaraMini's sliding layers (decoders.sliding reads them)
    if not isinstance(types, list) or len(types) != layers or any(t not in _TYPES for t in types):
        raise UsageError(f"{c.path}: config layer_types is not a list of {layers} of {' / '.join(_TYPES)}")
    v = DeltaNet(key_heads=c.int(*keys.key_heads, default=FROM_CLASS), key_dim=c.int(*keys.key_dim, default=FROM_CLASS),
                 value_heads=c.int(*keys.value_heads, default=FROM_CLASS),
                 value_dim=c.int(*keys.value_dim, default=FROM_CLASS),
                 conv_kernel=c.int(*keys.conv_kernel, default=FROM_CLASS))
    if min(v.key_heads, v.key_dim, v.value_heads, v.value_dim, v.conv_kernel) <= 0 or v.value_heads % v.key_heads:
        raise UsageError(f"{c.path}: config linear_num_value_heads ({v.value_heads}) is not a positive multiple of "
                         f"linear_num_key_heads ({v.key_heads}), or a linear-attention size is not positive")
    return tuple(i for i, t in enumerate(types) if t == "linear_attention"), v


def hybrid_kv_cache(s: ArchSpec, b: int, n: int, nd: int, ab: int) -> KVLines:
    """transformers' cache after a forward of b x n tokens (the module docstring): keys and values of each attention
    layer, a conv state and a float32 recurrent state of each linear layer, neither growing with s. A sliding
    attention layer (ArchSpec.sliding_layers: LaraMini's) holds all s tokens after the forward (base.SLIDING_HELD)."""
    v = s.deltanet
    if v is None or (s.sliding_window and not s.sliding_layers):
        raise NoAnalyticModel("a linear-attention hybrid's cache is described with its sliding layers named only")
    lin = len(s.linear_layers)
    slide = len(set(s.sliding_layers) - set(s.linear_layers)) if s.sliding_window else 0
    full = s.layers - lin - slide
    per = 2 * s.kv_heads * s.head_dim * ab
    conv = (2 * v.key_heads * v.key_dim + v.value_heads * v.value_dim) * v.conv_kernel * ab
    state = v.value_heads * v.key_dim * v.value_dim * max(ab, STATE_BYTES)
    total = b * ((full + slide) * n * per + lin * (conv + state))
    sliding = f" + {slide} sliding layers x s ({SLIDING_HELD})" if slide else ""
    return [(f"b={b}, s={n}", total,
             f"{full} attention layers x 2 x g x d x s x b x {ab} B ({per:,} B per token and layer){sliding}; {lin} linear "
             f"layers x b x (conv state (2 Hk dk + Hv dv) x k x {ab} B = {conv:,} B + recurrent state Hv x dk x dv x "
             f"{max(ab, STATE_BYTES)} B (float32 whatever the dtype) = {state:,} B), whatever s")]


def from_tensors(lay: DecoderLayout, T: Tensors, key_dim: int) -> tuple[tuple[int, ...], DeltaNet, str]:
    """ArchSpec's linear_layers and deltanet from the shapes of a checkpoint without config.json: the layers holding
    {linear_attn}.{a_log}; the value heads from A_log [Hv], their width from the gated norm [dv], the kernel and the
    conv's width 2 Hk dk + Hv dv from conv1d [conv, 1, k] (the key width from q_conv1d where it is saved
    split). No shape splits the key width Hk dk into heads: dk is
    assumed `key_dim` (the config class's) where it divides it, else the whole width (one key head); said in the note
    (only the chunked rule's FLOPs depend on it)."""
    p = lay.paths
    base = rf"(^|\.){re.escape(p.layers)}\.(\d+)\.{re.escape(p.linear_attn)}\."
    rx = re.compile(base + re.escape(p.a_log) + "$")
    layers = tuple(sorted({int(m.group(2)) for n in T if (m := rx.search(n))}))
    first = rf"(^|\.){re.escape(p.layers)}\.{layers[0] if layers else 0}\.{re.escape(p.linear_attn)}\."
    (Hv,) = infer.shape(T, first + re.escape(p.a_log) + "$", f"{p.linear_attn}.{p.a_log}")
    (dv,) = infer.shape(T, first + re.escape(p.gated_norm) + r"\.weight$", f"{p.linear_attn}.{p.gated_norm}")
    if lay.linear == "separate":   # q_conv1d [Hk dk, 1, k] (k_conv1d alike, v_conv1d [Hv dv, 1, k])
        kd, _, k = infer.shape(T, first + re.escape(p.sep_conv[0]) + r"\.weight$", f"{p.linear_attn}.{p.sep_conv[0]}")
    else:
        conv, _, k = infer.shape(T, first + re.escape(p.conv) + r"\.weight$", f"{p.linear_attn}.{p.conv}")
        kd = (conv - Hv * dv) // 2
    dk = key_dim if key_dim > 0 and kd % key_dim == 0 and Hv % (kd // key_dim) == 0 else kd
    note = (f"no config: linear_key_head_dim assumed {dk} ({kd // dk} key heads of the key width {kd}; only the chunked "
            "delta rule's FLOPs depend on it)")
    return layers, DeltaNet(key_heads=kd // dk, key_dim=dk, value_heads=Hv, value_dim=dv, conv_kernel=k), note
