"""The ViT-shaped image encoders, each described once as a walk: ViT and DeiT (vit.py), DINOv2 (dinov2.py), CLIP's and
SigLIP's towers (clip.py, siglip.py), walked with framework/recorder.py's `Recorder` (each parameterised module
recorded while its op is written, so the expected tensors and the op template come from one walk). The pieces every
such walk meets: the Conv2d patch embedding (`conv`; `conv_strided` the convnets': ResNet's, ConvNeXt's and MobileNet's,
grouped and TF-padded where they are, with `batchnorm` and `positive_lists`), learned tokens and positions
(`Recorder.params`), and the pre-LayerNorm encoder layers (`encoder_layers`) under each modeling file's names
(`LayerPaths`), their variants typed in an `EncoderLayer`: DINOv2's (and BEiT's) layer scale, DINOv2's SwiGLU MLP,
BEiT's bias-free key."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, get_args

from ...errors import UsageError
from .base import Cfg
from .ops import Builder
from .recorder import Recorder

# a conv's padding: each side's, or TensorFlow's "SAME" (MobileNet's tf_padding: the input padded by
# max(k - stride, 0), or max(k - side % stride, 0) where stride does not divide the side, before a conv without padding)
Padding = int | Literal["same"]


def conv2d(B: Builder, module: str, bucket: str, cin: int, cout: int, k: int, stride: int, side: int, pad: Padding,
           bias: bool = False, calls: int = 1, groups: int = 1, dilation: int = 1) -> int:
    """A square Conv2d on a `side` x `side` input, its channels in `groups` (each output channel reads cin / groups:
    a depthwise conv has groups = cin; FlopCounterMode counts out elements x cin / groups x k x k MACs); returns the
    output side. A dilated kernel spans dilation x (k - 1) + 1 (the same MACs). "same" padding is a padded copy of the
    input (constant_pad_nd), live beside the input and the conv's output: its scratch (MobileNetV2 under MemTracker);
    Conv2d's own padding allocates no copy."""
    span = dilation * (k - 1) + 1
    both = max(span - (side % stride or stride), 0) if pad == "same" else 2 * pad
    out = (side + both - span) // stride + 1
    padded = B.b * cin * (side + both) ** 2 * B.ab if pad == "same" and both else 0
    if out < 1:
        raise UsageError(f"image side {side} is smaller than the {k}x{k} kernel of {module} (--image-size)")
    per = cout * (cin // groups) * k * k + (cout if bias else 0)
    B.add(f"{module} ({k}x{k}/{stride}{f', groups {groups}' if groups > 1 else ''})", "conv", bucket, calls,
          (B.b, cin, side, side), (B.b, cout, out, out), params=per * calls,
          macs=B.b * cout * out * out * (cin // groups) * k * k, ew=B.b * cout * out * out if bias else 0,
          weights_per_call=per, scratch=padded)
    return out


def conv(w: Recorder, path: str, cin: int, cout: int, k: int, side: int, bias: bool, bucket: str | None = None,
         top: bool = False) -> int:
    """A recorded Conv2d of k x k, stride k (a patch embedding; k 1: a per-pixel projection) on a side x side image;
    returns the output side."""
    w.record(path, (("weight", (cout, cin, k, k)),) + ((("bias", (cout,)),) if bias else ()), top=top)
    return conv2d(w.B, path if top else w.label(path), bucket or w.bucket, cin, cout, k, k, side, 0, bias=bias)


def conv_strided(w: Recorder, path: str, label: str, cin: int, cout: int, k: int, stride: int, side: int, pad: Padding,
                 layers: tuple[int, ...] = (), bucket: str | None = None, groups: int = 1, bias: bool = False,
                 top: bool = False, dilation: int = 1) -> int:
    """A recorded Conv2d of k x k with its own stride, padding and groups (bias-free unless `bias`: ResNet's), run once
    per index of `layers` (the path's `{bid}`; none: once), its op under `label`; `top`: a task head's (outside the
    body); returns the output side."""
    w.record(path, (("weight", (cout, cin // groups, k, k)),) + ((("bias", (cout,)),) if bias else ()), layers=layers,
             top=top)
    return conv2d(w.B, label, bucket or w.bucket, cin, cout, k, stride, side, pad, bias=bias, calls=max(len(layers), 1),
                  groups=groups, dilation=dilation)


def batchnorm(w: Recorder, path: str, label: str, ch: int, side: int, layers: tuple[int, ...] = (),
              act: str | None = "relu", top: bool = False) -> None:
    """BatchNorm2d (inference: scale and shift with running statistics, which are buffers; weight and bias, 2 x C
    parameters) and its activation, once per index of `layers` (the path's `{bid}`; none: once); `top`: a task head's."""
    B, calls = w.B, max(len(layers), 1)
    w.record(path, (("weight", (ch,)), ("bias", (ch,))), layers=layers, top=top)
    n = B.b * ch * side * side
    shape = (B.b, ch, side, side)
    B.add(label, "norm", w.bucket, calls, shape, shape, params=2 * ch * calls, ew=2 * n, weights_per_call=2 * ch)
    if act:
        B.add(label + " act", "activation", w.bucket, calls, shape, shape, ew=n, fn=act)


def positive_lists(c: Cfg, *keys: str) -> list[list[int]]:
    """The config's lists of positive integers under `keys` (a convnet's per-stage widths and depths), of one length."""
    got = [c.get(k) for k in keys]
    if not (all(isinstance(v, (list, tuple)) and v for v in got) and len({len(v) for v in got}) == 1
            and all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for v in got for x in v)):
        raise UsageError(f"{c.path}: config {' / '.join(keys)} must be lists of positive integers of one length")
    return [list(v) for v in got]


@dataclass(frozen=True)
class LayerPaths:
    """One encoder layer's module names as the modeling file names them, under `layers`.{i} (ViT's by default); `act`,
    `gated_act` name the activation's op (no parameters)."""
    layers: str = "encoder.layer"
    attn_in: str = "layernorm_before"     # the norm before attention
    attn: str = "attention.attention"     # {attn}.{q,k,v}
    q: str = "query"
    k: str = "key"
    v: str = "value"
    o: str = "attention.output.dense"
    mlp_in: str = "layernorm_after"       # the norm before the MLP
    up: str = "intermediate.dense"        # MLP "plain": up, act, down
    act: str = "intermediate act"
    down: str = "output.dense"
    gated_in: str = "mlp.weights_in"      # MLP "swiglu": gated_in [2f, h], silu(x1) x x2, gated_out
    gated_act: str = "mlp silu*x2"
    gated_out: str = "mlp.weights_out"
    scales: tuple[str, str] = ("layer_scale1.lambda1", "layer_scale2.lambda1")   # EncoderLayer.layer_scale


# plain: up, the config's activation, down (ViT, CLIP); swiglu: one projection to 2f, silu of one half times the other,
# down (DINOv2's use_swiglu_ffn, Dinov2SwiGLUFFN)
MLPKind = Literal["plain", "swiglu"]


@dataclass(frozen=True)
class EncoderLayer:
    """What one pre-LayerNorm encoder layer is: norm, q/k/v (biased as the walk says), attention, biased o, norm, MLP."""
    paths: LayerPaths = LayerPaths()
    # a learned per-channel scale [h] (LayerPaths.scales, parameters without .weight) on the attention's and on the MLP's
    # output before each residual add (DINOv2's Dinov2LayerScale); the residual adds are counted there, else in the MLP norm
    layer_scale: bool = False
    mlp: MLPKind = "plain"
    k_bias: bool = True   # false: the key projection has no bias whatever qkv_bias says (BEiT's, Data2VecVision's)
    # What the layer keeps live through its MLP, for the inference peak: transformers' layers unpack `hidden_states, _ =
    # self.attention(...)`, and `_` keeps eager attention's probabilities (SDPA returns none); Data2VecVisionLayer (a
    # modeling file transformers has not refactored) returns none but keeps `kept` b x n x h tensors more: the
    # attention's output in self_attention_outputs, and lambda_1 x it where it has a layer scale
    keeps_probs: bool = True
    kept: int = 0

    def __post_init__(self) -> None:
        if self.mlp not in get_args(MLPKind):
            raise TypeError(f"EncoderLayer.mlp = {self.mlp!r} is not one of {get_args(MLPKind)}")


Shape = tuple[int, ...]


def encoder_layers(w: Recorder, lay: EncoderLayer, L: int, n: int, h: int, heads: int, f: int, act: str, qkv_bias: bool,
                   causal: bool = False) -> None:
    """L pre-LayerNorm layers over n tokens of h (q/k/v biased by `qkv_bias`, o and the MLP always), each run once."""
    p, B = lay.paths, w.B
    tok, at = (B.b, n), f"{p.layers}.{{bid}}."
    w.norm(at + p.attn_in, tok, h, L, residual=False)
    for m, bias in ((p.q, qkv_bias), (p.k, qkv_bias and lay.k_bias), (p.v, qkv_bias)):
        w.linear(f"{at}{p.attn}.{m}", tok, h, h, bias, L)
    B.attention(w.label(at + p.attn, L), w.bucket, heads, n, n, h // heads, L, causal=causal)
    w.linear(at + p.o, tok, h, h, True, L)
    if lay.layer_scale:
        _scale(w, at + p.scales[0], tok, h, L)
    w.norm(at + p.mlp_in, tok, h, L, residual=not lay.layer_scale)
    with B.holding(B.b * heads * n * n if lay.keeps_probs else 0, eager=True), B.holding(lay.kept * math.prod(tok) * h):
        if lay.mlp == "swiglu":
            w.linear(at + p.gated_in, tok, h, 2 * f, True, L)
            B.activation(w.label(at + p.gated_act, L), w.bucket, tok, f, "silu", L, gated=True)
            w.linear(at + p.gated_out, tok, f, h, True, L)
        else:
            w.linear(at + p.up, tok, h, f, True, L)
            B.activation(w.label(at + p.act, L), w.bucket, tok, f, act, L)
            w.linear(at + p.down, tok, f, h, True, L)
    if lay.layer_scale:
        _scale(w, at + p.scales[1], tok, h, L)
    else:   # the MLP's output added to the stream (ViTOutput's `+ input_tensor`, CLIPEncoderLayer's `residual + ...`)
        n_h = math.prod(tok) * h
        B.add(w.label(at.rstrip("."), L) + " MLP output + residual", "activation", w.bucket, L, tok + (h,), tok + (h,),
              ew=n_h, extra_in=n_h)


def _scale(w: Recorder, path: str, tok: Shape, h: int, L: int) -> None:
    """A layer scale (x lambda) and the residual add after it."""
    w.params(path.replace(".{bid}", f"[{L}]") + " (+residual)", ((path, (h,)),), tok + (h,), tok + (h,),
             ew=2 * math.prod(tok) * h, kind="activation", L=L)
