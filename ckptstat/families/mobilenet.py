"""MobileNet V1 and V2: transformers' modeling_mobilenet_v1.py (MobileNetV1Model, MobileNetV1ForImageClassification) and
modeling_mobilenet_v2.py (MobileNetV2Model, MobileNetV2ForImageClassification; not the DeepLabV3+ segmentation head).
Every conv is a ConvLayer: a bias-free Conv2d, BatchNorm and the config's activation (relu6), padded as TensorFlow's
"SAME" where tf_padding (the input padded, then a conv without padding: the output side ceil(side / stride)), else
by (k - 1) / 2 on each side.

V1: a 3x3/2 stem (`conv_stem`), then 13 depthwise-separable blocks, each a depthwise 3x3 (groups = channels, the block's
stride) and a pointwise 1x1 (`layer.{2i}`, `layer.{2i+1}`), the widths max(int(depth x depth_multiplier), min_depth) of a
depth doubling at each stride 2 (and at the first block). V2: the stem (`conv_stem`: `first_conv` 3x3/2, an `expand_1x1`
unless first_layer_is_expansion, a depthwise `conv_3x3`, a `reduce_1x1` without activation), 16 inverted residuals
(`layer.{i}`: `expand_1x1` to make_divisible(round(in x expand_ratio)), depthwise `conv_3x3` with the block's stride,
`reduce_1x1` without activation, the input added where the stride is 1 and the width kept), a 1x1 `conv_1x1` (1280 x the
multiplier, 1280 with finegrained_output under a multiplier below 1); past output_stride a block runs at stride 1, its
depthwise conv dilated (1, doubled after each stride 2 skipped: its side kept, padded by the dilated kernel's span, the
MACs an undilated one's). Both: a global average pool and a Linear classifier
(an Identity when num_labels is 0).

FLOPs are FlopCounterMode's: each conv out elements x cin / groups x k x k MACs, the classifier's b x in x out; the
padding, BatchNorm, activations and the pool are element-wise. The side analysed is ArchSpec.image_size (--image-size;
default the config's image_size). The widths are worked out once from the config (transformers' formulas) or read from
the conv weights, and stated in a MobileNetVariant; the architecture is stated once, in `walk`."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..errors import UsageError
from .framework import infer
from .framework.archspec import Variant
from .framework.base import FROM_CLASS, ArchSpec, Cfg, Family, HeadRule, Sample, Shapes, Tensors
from .framework.ops import Builder
from .framework.recorder import Recorder
from .framework.walk_names import numbered, pattern, signature, walked
from .framework.walk_vision import batchnorm, conv_strided

DEFAULT_IMAGE = 224
# transformers' fixed layouts: V1's depthwise strides; V2's block widths (before the multiplier) and strides
V1_STRIDES = (1, 2, 1, 2, 1, 2, 1, 1, 1, 1, 1, 2, 1)
V2_WIDTHS = (16, 24, 24, 32, 32, 32, 64, 64, 64, 64, 96, 96, 96, 160, 160, 160, 320)
V2_STRIDES = (2, 1, 2, 1, 1, 2, 1, 1, 1, 1, 1, 1, 2, 1, 1, 1)


@dataclass(frozen=True)
class MobileNetVariant(Variant):
    version: int               # 1 or 2
    channels: int              # the image's
    tf_padding: bool
    stem: int                  # the stem conv's output channels
    widths: tuple[int, ...]    # V1: each block's pointwise output (13); V2: the stem's output, then each block's (17)
    strides: tuple[int, ...]   # each block's depthwise stride (V2: 1 past output_stride)
    expanded: tuple[int, ...] = ()   # V2: each block's expanded width (16)
    stem_expand: bool = False  # V2: the stem's expand_1x1 (not first_layer_is_expansion)
    head_width: int = 0        # V2: conv_1x1's output
    dilations: tuple[int, ...] = ()   # V2: each block's depthwise dilation past output_stride (none: all 1)


def make_divisible(value: int, divisor: int, min_value: int) -> int:
    """transformers' (and TF-slim's) rounding of a width to a multiple of `divisor`, never 10% below it."""
    new = max(min_value, int(value + divisor / 2) // divisor * divisor)
    return int(new + divisor if new < 0.9 * value else new)


def _spec(common: dict[str, Any], v: MobileNetVariant, act: str, image: int) -> ArchSpec:
    return ArchSpec(layers=len(v.strides), hidden=v.stem, heads=0, kv_heads=0, head_dim=0,
                    intermediate=max(v.expanded or v.widths), vocab=0, activation=act, norm="batchnorm",
                    image_size=image, variant=v, **common)


def from_config(c: Cfg) -> ArchSpec:
    dm, low = float(c.get("depth_multiplier", default=FROM_CLASS)), c.int("min_depth", default=FROM_CLASS)
    if not dm > 0:
        raise UsageError(f"{c.path}: config depth_multiplier = {dm} is not positive")
    ch, tf = c.int("num_channels", default=FROM_CLASS), bool(c.get("tf_padding", default=FROM_CLASS))
    if c.model_type == "mobilenet_v1":
        depth, widths = 32, []
        for i, st in enumerate(V1_STRIDES):
            depth *= 2 if st == 2 or i == 0 else 1
            widths.append(max(int(depth * dm), low))
        v = MobileNetVariant(version=1, channels=ch, tf_padding=tf, stem=max(int(32 * dm), low), widths=tuple(widths),
                             strides=V1_STRIDES)
    else:
        div, ratio = c.int("depth_divisible_by", default=FROM_CLASS), float(c.get("expand_ratio", default=FROM_CLASS))
        out_stride = c.int("output_stride", default=FROM_CLASS)

        def width(x: float) -> int:
            return make_divisible(int(round(x * dm)), div, low)

        ws = tuple(width(x) for x in V2_WIDTHS)
        strides, dilations, current, dilation = [], [], 2, 1
        for st in V2_STRIDES:   # past output_stride a block runs at stride 1, and the blocks after it dilated
            strides.append(1 if current == out_stride else st)
            dilations.append(dilation)
            dilation *= st // strides[-1]
            current *= strides[-1]
        fine = bool(c.get("finegrained_output", default=FROM_CLASS)) and dm < 1.0
        v = MobileNetVariant(version=2, channels=ch, tf_padding=tf, stem=width(32), widths=ws, strides=tuple(strides),
                             expanded=tuple(make_divisible(int(round(x * ratio)), div, low) for x in ws[:-1]),
                             stem_expand=not c.get("first_layer_is_expansion", default=FROM_CLASS),
                             head_width=1280 if fine else width(1280), dilations=tuple(dilations))
    return _spec(c.common, v, str(c.get("hidden_act", default=FROM_CLASS)), c.int("image_size", default=DEFAULT_IMAGE))


def _convs(T: Tensors, w: Recorder, key: str) -> dict[int, tuple[int, ...]]:
    """The weights' shapes of the `key` convs (a path whose layer is numbered) of every layer, by the layer's index."""
    rx = re.compile(numbered(w, key))
    return {int(m.group(2)): t.shape for name, t in T.items() if (m := rx.search(name))}


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    """The widths from the conv weights' shapes; transformers' strides, TF padding and relu6 assumed (noted)."""
    v2 = infer.has(T, pattern(WALKED[2], "conv_stem.first_conv.convolution"))
    W = WALKED[2 if v2 else 1]
    stem = infer.shape(T, pattern(W, "conv_stem.first_conv.convolution" if v2 else "conv_stem.convolution"),
                       "the stem conv")
    if v2:
        expand, reduce = _convs(T, W, "layer.0.expand_1x1.convolution"), _convs(T, W, "layer.0.reduce_1x1.convolution")
        n = len(reduce)
        stem_reduce = infer.shape(T, pattern(W, "conv_stem.reduce_1x1.convolution"), "the stem's reduce_1x1")
        head = infer.shape(T, pattern(W, "conv_1x1.convolution"), "conv_1x1")
        v = MobileNetVariant(version=2, channels=stem[1], tf_padding=True, stem=stem[0],
                             widths=(stem_reduce[0],) + tuple(reduce[i][0] for i in range(n)),
                             strides=V2_STRIDES[:n], expanded=tuple(expand[i][0] for i in range(n)),
                             stem_expand=infer.has(T, pattern(W, "conv_stem.expand_1x1.convolution")), head_width=head[0])
    else:
        layers = _convs(T, W, "layer.1.convolution")
        v = MobileNetVariant(version=1, channels=stem[1], tf_padding=True, stem=stem[0],
                             widths=tuple(layers[2 * i + 1][0] for i in range(len(layers) // 2)),
                             strides=V1_STRIDES[:len(layers) // 2])
    notes = (f"no config: transformers' strides, TensorFlow padding and relu6 assumed; input {DEFAULT_IMAGE}x"
             f"{DEFAULT_IMAGE} unless --image-size",)
    common = dict(common, model_type=f"mobilenet_v{v.version}", num_labels=infer.num_labels(T, r"(^|\.)classifier\.weight$"),
                  assumptions=common.get("assumptions", ()) + notes)
    return _spec(common, v, "relu6", DEFAULT_IMAGE)


def walk(B: Builder) -> Recorder:
    """The forward at B.s's sizes (MobileNetV1Model's or MobileNetV2Model's, and the classifier): writes its ops to B
    and records the modules it meets."""
    s = B.s
    X = s.variant_as(MobileNetVariant)
    w = Recorder(B, "embedding")

    def conv_layer(path: str, cin: int, cout: int, k: int, side: int, stride: int = 1, depthwise: bool = False,
                   act: bool = True, dilation: int = 1) -> int:
        """A ConvLayer: the conv (TF "SAME" or dilation x (k - 1) / 2 padding), its BatchNorm and activation, beside the
        conv's input (its caller's; the inference peak, analysis/memory/peaks.py); the output side."""
        out = conv_strided(w, f"{path}.convolution", f"{path}.convolution", cin, cout, k, stride, side,
                           "same" if X.tf_padding else dilation * (k - 1) // 2, groups=cin if depthwise else 1,
                           dilation=dilation)
        with B.holding(B.b * cin * side * side):
            batchnorm(w, f"{path}.normalization", f"{path}.normalization", cout, out, act=s.activation if act else None)
        return out

    if X.version == 1:
        side = conv_layer("conv_stem", X.channels, X.stem, 3, s.image_size, 2)
        w.bucket, c = "encoder", X.stem
        for i, (width, stride) in enumerate(zip(X.widths, X.strides)):
            side = conv_layer(f"layer.{2 * i}", c, c, 3, side, stride, depthwise=True)
            side = conv_layer(f"layer.{2 * i + 1}", c, width, 1, side)
            c = width
    else:
        side = conv_layer("conv_stem.first_conv", X.channels, X.stem, 3, s.image_size, 2)
        if X.stem_expand:
            conv_layer("conv_stem.expand_1x1", X.stem, X.stem, 1, side)
        side = conv_layer("conv_stem.conv_3x3", X.stem, X.stem, 3, side, depthwise=True)
        side = conv_layer("conv_stem.reduce_1x1", X.stem, X.widths[0], 1, side, act=False)
        w.bucket = "encoder"
        dilations = X.dilations or (1,) * len(X.strides)
        for i, (cin, cout, mid, stride, dil) in enumerate(zip(X.widths, X.widths[1:], X.expanded, X.strides, dilations)):
            conv_layer(f"layer.{i}.expand_1x1", cin, mid, 1, side)   # holding its input: the block's
            with B.holding(B.b * cin * side * side):   # the block's input, live through it (the residual's or not)
                out = conv_layer(f"layer.{i}.conv_3x3", mid, mid, 3, side, stride, depthwise=True, dilation=dil)
                conv_layer(f"layer.{i}.reduce_1x1", mid, cout, 1, out, act=False)
            side = out
            if stride == 1 and cin == cout:
                shape = (B.b, cout, side, side)
                B.add(f"layer.{i} residual add", "activation", "encoder", 1, shape, shape, ew=B.b * cout * side * side,
                      extra_in=B.b * cout * side * side)
        c = X.head_width
        conv_layer("conv_1x1", X.widths[-1], c, 1, side)
    B.add("avgpool (global)", "pool", "pooler", 1, (B.b, c, side, side), (B.b, c), ew=B.b * c * side * side)
    if s.head == "imgcls" and s.num_labels:   # an Identity, without parameters, when num_labels is 0
        w.linear("classifier", (B.b,), c, s.num_labels, True, bucket="cls", top=True)
    return w


def build(B: Builder) -> None:
    walk(B)


def expected_tensors(s: ArchSpec) -> Shapes | None:
    """MobileNetV1Model's / MobileNetV2Model's parameters (`mobilenet_v1.` / `mobilenet_v2.` inside the classifier)."""
    if s.head not in FAMILY.heads:
        return None
    return walk(Builder(s, 1, 1, 1, 1, 1)).shapes("" if s.head == "base" else s.model_type)


# the walks of a tiny classifier of each version (V2's stem with its expand_1x1): the paths of the name signature and
# from_tensors' look-ups
WALKED = {1: walked(walk, "mobilenet", head="imgcls", image_size=8, num_labels=2, variant=MobileNetVariant(
    version=1, channels=1, tf_padding=True, stem=4, widths=(4,), strides=(1,))),
    2: walked(walk, "mobilenet", head="imgcls", image_size=8, num_labels=2, variant=MobileNetVariant(
        version=2, channels=1, tf_padding=True, stem=4, widths=(4, 4), strides=(1,), expanded=(4,), stem_expand=True,
        head_width=4))}

_TINY = dict(depth_multiplier=0.25, min_depth=4, image_size=32, num_labels=5)

FAMILY = Family(
    name="mobilenet",
    model_types=("mobilenet_v1", "mobilenet_v2"),
    signature=signature(WALKED[1], "conv_stem.convolution") + "|" + signature(WALKED[2], "conv_stem.first_conv.convolution"),
    from_config=from_config, from_tensors=from_tensors, build=build, expected_tensors=expected_tensors,
    heads=("base", "imgcls"),
    head_rules=(HeadRule(r"(^|\.)classifier\.weight$", "imgcls"),),
    main_input="pixel_values",
    samples=(
        Sample("MobileNetV1Config", _TINY, ("MobileNetV1Model", "MobileNetV1ForImageClassification")),
        # PyTorch padding; an odd side
        Sample("MobileNetV1Config", dict(_TINY, tf_padding=False, image_size=37), ("MobileNetV1ForImageClassification",)),
        Sample("MobileNetV2Config", _TINY, ("MobileNetV2Model", "MobileNetV2ForImageClassification")),
        # a stem with its own expansion, a 1280-wide head under a multiplier below 1, dilated blocks past output stride
        # 8, PyTorch padding, an odd side: config-only switches (the strides and padding) the weights cannot show
        Sample("MobileNetV2Config", dict(_TINY, first_layer_is_expansion=False, output_stride=8, tf_padding=False,
                                         image_size=37, expand_ratio=3.0),
               ("MobileNetV2ForImageClassification",), infer=False),
    ),
)
