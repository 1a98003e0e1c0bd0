"""The gated short convolution, a token mixer some layers of a layout run in place of attention (DecoderLayout.short_conv;
ArchSpec.short_conv the layers and sizes): LFM2's Lfm2ShortConv (transformers modeling_lfm2.py, modeling_lfm2_moe.py).

Its forward: in_proj (h -> 3h: B, C, x), B x x, a depthwise causal conv1d over the h channels (kernel k = conv_L_cache,
padding k - 1, its output cut to the input's length), C x the conv's output, out_proj (h -> h); conv_bias biases the
two projections and the conv. FlopCounterMode counts the convolution over its padded output, as Mamba's (mamba.py):
2 x b x h x k x (input length + k - 1). With a cache (transformers' default, use_cache) the prefill's input is the
cache's update_conv_state, the tokens left-padded to k when fewer (LinearAttentionLayer): max(s, k) long. The cache
holds a conv state [b, h, k] per such layer (LinearAttentionLayer.conv_states), no keys or values."""
from __future__ import annotations

from dataclasses import replace

from ...errors import UsageError
from . import infer
from .archspec import ArchSpec, ShortConv
from .base import FROM_CLASS, Cfg, KVLines, Tensors, decoder_kv_cache
from .layout_base import Walk

CONV = "conv"   # LFM2's names: {layers}.N.conv.{in_proj, conv, out_proj}
_TYPES = ("conv", "full_attention", "sliding_attention")   # the layer_types a short-conv hybrid's may name


def from_config(c: Cfg, layers: int) -> ShortConv:
    """The layers config layer_types marks "conv" (else those not in full_attn_idxs, Lfm2Config's older key; by default
    every layer attends), conv_L_cache and conv_bias."""
    types = c.get("layer_types", default=None)
    if types is None:
        full = c.get("full_attn_idxs", default=None)
        full = list(range(layers)) if full is None else full
        if not isinstance(full, list) or not all(isinstance(i, int) for i in full):
            raise UsageError(f"{c.path}: config full_attn_idxs is not a list of layer indices")
        types = ["full_attention" if i in full else "conv" for i in range(layers)]
    # "sliding_attention": LFM3's sliding layers (decoders.sliding reads them)
    if not isinstance(types, list) or len(types) != layers or any(t not in _TYPES for t in types):
        raise UsageError(f"{c.path}: config layer_types is not a list of {layers} of {' / '.join(_TYPES)}")
    return ShortConv(kernel=c.int("conv_L_cache", default=FROM_CLASS), bias=bool(c.get("conv_bias", default=FROM_CLASS)),
                     layers=tuple(i for i, t in enumerate(types) if t == "conv"))


def from_tensors(T: Tensors, layers_path: str) -> ShortConv:
    """The conv layers of a checkpoint without config.json: those holding {layers}.N.conv.in_proj."""
    import re

    stem = rf"(^|\.){re.escape(layers_path)}\.(\d+)\.{CONV}\."
    conv = sorted({int(m.group(2)) for n in T if (m := re.search(stem + r"in_proj\.weight$", n))})
    if not conv:
        return ShortConv(kernel=0, bias=False, layers=())
    k = infer.shape(T, stem + rf"{CONV}\.weight$", f"{CONV}.{CONV}")[-1]
    return ShortConv(kernel=k, bias=infer.has(T, stem + r"in_proj\.bias$"), layers=tuple(conv))


def short_conv(w: Walk, layers: tuple[int, ...]) -> None:
    """The gated short convolution on `layers` (the module docstring)."""
    s, B = w.s, w.B
    assert s.short_conv is not None
    h, k, bias, L = s.hidden, s.short_conv.kernel, s.short_conv.bias, len(layers)
    tok = w.tok + (h,)
    w.linear(f"{CONV}.in_proj", "shortconv.in_proj", h, 3 * h, bias, layers)
    B.add(w.label(f"{CONV} B x x", layers), "activation", "encoder", L, tok, tok, ew=B.b * B.seq * h)
    w.record(f"{CONV}.{CONV}", "shortconv.conv", (("weight", (h, 1, k)),) + ((("bias", (h,)),) if bias else ()), layers)
    out = max(B.seq, k) + k - 1   # the padded output FlopCounterMode counts, over the cache's max(s, k) tokens
    B.add(w.label(f"{CONV}.{CONV} (depthwise, kernel {k})", layers), "conv", "encoder", L, (B.b, h, B.seq), (B.b, h, B.seq),
          params=(h * k + (h if bias else 0)) * L, macs=B.b * h * out * k, ew=B.b * h * out if bias else 0,
          weights_per_call=h * k + (h if bias else 0))
    B.add(w.label(f"{CONV} C x conv", layers), "activation", "encoder", L, tok, tok, ew=B.b * B.seq * h)
    w.linear(f"{CONV}.out_proj", "shortconv.out_proj", h, h, bias, layers)


def kv_cache(s: ArchSpec, b: int, n: int, nd: int, ab: int) -> KVLines:
    """The attention layers' keys and values (decoder_kv_cache over them) and each conv layer's conv state [b, h, k]."""
    conv = s.short_conv.layers if s.short_conv is not None else ()
    k = s.short_conv.kernel if s.short_conv is not None else 0
    attn = s.layers - len(conv)
    lines = decoder_kv_cache(replace(s, layers=attn), b, n, nd, ab) if attn else [(f"b={b}, s={n}", 0, "no attention layer")]
    state = len(conv) * s.hidden * k * ab * b
    label, kv, how = lines[0]
    return [(label, kv + state, f"{how}; + {len(conv)} conv layers x h x conv_L_cache x b x {ab} B = {state:,} B of conv "
                                f"states (any s)")] + lines[1:]
