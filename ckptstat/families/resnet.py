"""ResNet-style CNNs: transformers' modeling_resnet.py (ResNetModel, ResNetForImageClassification, from
config.json) and torchvision's resnet.py layout (`conv1`, `layer1.0.conv1`, `downsample.0`, `fc`), from
tensor shapes alone. Both are the v1.5 network: a 7x7/2 stem conv, BatchNorm, ReLU, a 3x3/2 max pool,
then stages of basic (3x3, 3x3) or bottleneck (1x1, 3x3, 1x1 at width/4) blocks whose first block
carries the stage's stride (on the 3x3; on the first 1x1 with transformers' downsample_in_bottleneck)
and a 1x1 projection shortcut when the width or stride changes; global average pool; a linear head.

FLOPs of each conv are b x C_out x H_out x W_out x C_in x k x k MACs (groups 1), what FlopCounterMode
counts for aten.convolution; the spatial side is propagated with each conv's stride and padding k//2
(H_out = (H + 2*(k//2) - k) // stride + 1). BatchNorm's running statistics are buffers, not parameters.
The input side is `image_size` (--image-size, default 224)."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..errors import UsageError
from .framework import infer
from .framework.archspec import Variant
from .framework.base import ArchSpec, Cfg, Family, HeadRule, Sample, Shapes, Tensors, add_linear, add_norm
from .framework.ops import Builder
from .framework.walk_vision import conv2d

DEFAULT_IMAGE = 224


def batchnorm(B: Builder, module: str, bucket: str, ch: int, side: int, calls: int = 1, act: str | None = "relu") -> None:
    """BatchNorm2d (inference: scale and shift with running statistics; 2 x C parameters) and its activation."""
    n = B.b * ch * side * side
    shape = (B.b, ch, side, side)
    B.add(module, "norm", bucket, calls, shape, shape, params=2 * ch * calls, ew=2 * n, weights_per_call=2 * ch)
    if act:
        B.add(module + " act", "activation", bucket, calls, shape, shape, ew=n)


# ---- the spec: the side analysed in ArchSpec.image_size, the rest in a ResNetVariant ----
@dataclass(frozen=True)
class ResNetVariant(Variant):
    channels: int
    widths: tuple[int, ...]   # each stage's output channels (hidden_sizes)
    depths: tuple[int, ...]   # each stage's blocks
    bottleneck: bool          # 1x1 / 3x3 / 1x1 blocks (layer_type bottleneck); else two 3x3
    first_stride: int         # 1, or 2 with downsample_in_first_stage
    stride_in_1x1: bool       # downsample_in_bottleneck: the stride on the first 1x1, not the 3x3
    torchvision: bool         # torchvision's module names (conv1, layer1.0.conv1...)


def _spec(common: dict[str, Any], stem: int, widths: list[int], depths: list[int], bottleneck: bool, channels: int,
          first_stride: int = 1, stride_in_1x1: bool = False, torchvision: bool = False, labels: int = 0,
          image: int = DEFAULT_IMAGE) -> ArchSpec:
    v = ResNetVariant(channels=channels, widths=tuple(widths), depths=tuple(depths), bottleneck=bottleneck,
                      first_stride=first_stride, stride_in_1x1=stride_in_1x1, torchvision=torchvision)
    if labels:
        common = dict(common, num_labels=labels)
    return ArchSpec(layers=sum(depths), hidden=stem, heads=0, kv_heads=0, head_dim=0, intermediate=widths[-1] if widths else 0,
                    vocab=0, activation="relu", norm="batchnorm", image_size=image, variant=v, **common)


def from_config(c: Cfg) -> ArchSpec:
    widths, depths = c.get("hidden_sizes"), c.get("depths")
    if not (isinstance(widths, list) and isinstance(depths, list) and len(widths) == len(depths) and widths
            and all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in widths + depths)):
        raise UsageError(f"{c.path}: config hidden_sizes / depths must be lists of positive integers of one length")
    kind = c.get("layer_type", default="bottleneck")
    if kind not in ("basic", "bottleneck"):
        raise UsageError(f"{c.path}: config layer_type = {kind!r} is not basic or bottleneck")
    return _spec(c.common, c.int("embedding_size"), widths, depths, kind == "bottleneck", c.int("num_channels", default=3),
                 2 if c.get("downsample_in_first_stage", default=False) else 1,
                 bool(c.get("downsample_in_bottleneck", default=False)))


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    """Widths and block counts from the conv weights' names and shapes (transformers or torchvision names)."""
    tv = not infer.has(T, r"(^|\.)embedder\.embedder\.convolution\.weight$")
    if tv:
        stem_w = infer.shape(T, r"^([A-Za-z_]+\.)?conv1\.weight$", "the stem conv (conv1)")
        block = r"(^|\.)layer(\d+)\.(\d+)\.conv(\d)\.weight$"
        fc = infer.find(T, r"(^|\.)fc\.weight$")
    else:
        stem_w = infer.shape(T, r"(^|\.)embedder\.embedder\.convolution\.weight$", "the stem conv")
        block = r"(^|\.)stages\.(\d+)\.layers\.(\d+)\.layer\.(\d)\.convolution\.weight$"
        fc = infer.find(T, r"(^|\.)classifier\.1\.weight$")
    rx = re.compile(block)
    convs: dict[tuple[int, int, int], tuple[int, ...]] = {}
    for name, t in T.items():
        if m := rx.search(name):
            convs[(int(m.group(2)), int(m.group(3)), int(m.group(4)))] = t.shape
    if not convs:
        raise UsageError("cannot infer the architecture from tensor names: no ResNet block convs; pass --config")
    stages = sorted({s for s, _, _ in convs})
    bottleneck = any(c == (3 if tv else 2) for _, _, c in convs)
    last = 3 if bottleneck else 2
    last_idx = last if tv else last - 1
    if any((s, 0, last_idx) not in convs for s in stages):   # timm's test_resnet mixes BasicBlock and Bottleneck stages
        raise UsageError("cannot infer the architecture from tensor names: ResNet stages of mixed block kinds "
                         "(basic and bottleneck); pass --config")
    widths = [convs[(s, 0, last_idx)][0] for s in stages]
    depths = [1 + max(b for st, b, _ in convs if st == s) for s in stages]
    # a projection shortcut where the stem and the first stage are as wide shows a strided first stage
    short = r"(^|\.)layer1\.0\.downsample\.0\.weight$" if tv else r"(^|\.)stages\.0\.layers\.0\.shortcut\.convolution\.weight$"
    first_stride = 2 if infer.has(T, short) and widths[0] == stem_w[0] else 1
    notes = ("no config: the v1.5 ResNet assumed (stride on the 3x3 conv); input "
             f"{DEFAULT_IMAGE}x{DEFAULT_IMAGE} unless --image-size",)
    common = dict(common, assumptions=common.get("assumptions", ()) + notes)
    return _spec(common, stem_w[0], widths, depths, bottleneck, stem_w[1] if len(stem_w) == 4 else 3,
                 first_stride, torchvision=tv, labels=fc.shape[0] if fc is not None and len(fc.shape) == 2 else 0)


def _conv(tv: bool, block: str, j: int) -> str:
    """The j-th conv of a block, as torchvision (conv1..3) or transformers (layer.0..2.convolution) names it."""
    return f"{block}.conv{j + 1}" if tv else f"{block}.layer.{j}.convolution"


def _bn(tv: bool, block: str, j: int) -> str:
    return f"{block}.bn{j + 1}" if tv else f"{block}.layer.{j}.normalization"


def build(B: Builder) -> None:
    s = B.s
    X = s.variant_as(ResNetVariant)
    tv, side = X.torchvision, s.image_size
    # module names as the checkpoint spells them
    stem_conv, stem_bn = ("conv1", "bn1") if tv else ("embedder.embedder.convolution", "embedder.embedder.normalization")
    side = conv2d(B, stem_conv, "embedding", X.channels, s.hidden, 7, 2, side, 3)
    batchnorm(B, stem_bn, "embedding", s.hidden, side)
    out = (side + 2 - 3) // 2 + 1
    B.add("maxpool (3x3/2)", "pool", "embedding", 1, (B.b, s.hidden, side, side), (B.b, s.hidden, out, out),
          ew=B.b * s.hidden * out * out * 9)
    side, cin = out, s.hidden
    for i, (width, depth) in enumerate(zip(X.widths, X.depths)):
        stride = X.first_stride if i == 0 else 2
        for first in (True, False):
            calls = 1 if first else depth - 1
            if not calls:
                continue
            st = stride if first else 1
            cin_b = cin if first else width
            p = f"layer{i + 1}.{0 if first else f'[1-{depth - 1}]'}" if tv else \
                f"encoder.stages.{i}.layers.{0 if first else f'[1-{depth - 1}]'}"
            if X.bottleneck:
                mid = width // 4
                s1 = st if X.stride_in_1x1 else 1
                o = conv2d(B, _conv(tv, p, 0), "encoder", cin_b, mid, 1, s1, side, 0, calls=calls)
                batchnorm(B, _bn(tv, p, 0), "encoder", mid, o, calls)
                o = conv2d(B, _conv(tv, p, 1), "encoder", mid, mid, 3, st // s1, o, 1, calls=calls)
                batchnorm(B, _bn(tv, p, 1), "encoder", mid, o, calls)
                o = conv2d(B, _conv(tv, p, 2), "encoder", mid, width, 1, 1, o, 0, calls=calls)
                batchnorm(B, _bn(tv, p, 2), "encoder", width, o, calls, act=None)
            else:
                o = conv2d(B, _conv(tv, p, 0), "encoder", cin_b, width, 3, st, side, 1, calls=calls)
                batchnorm(B, _bn(tv, p, 0), "encoder", width, o, calls)
                o = conv2d(B, _conv(tv, p, 1), "encoder", width, width, 3, 1, o, 1, calls=calls)
                batchnorm(B, _bn(tv, p, 1), "encoder", width, o, calls, act=None)
            if first and (cin != width or st != 1):   # projection shortcut
                conv2d(B, f"{p}.downsample.0" if tv else f"{p}.shortcut.convolution", "encoder", cin, width, 1, st, side, 0)
                batchnorm(B, f"{p}.downsample.1" if tv else f"{p}.shortcut.normalization", "encoder", width, o, act=None)
            B.add(f"{p} residual add + relu", "activation", "encoder", calls, (B.b, width, o, o), (B.b, width, o, o),
                  ew=2 * B.b * width * o * o)
            side = o
        cin = width
    B.add("avgpool (global)", "pool", "pooler", 1, (B.b, cin, side, side), (B.b, cin), ew=B.b * cin * side * side)
    if s.head == "imgcls":
        B.linear("fc" if tv else "classifier.1", "cls", (B.b,), cin, s.num_labels, True)


def expected_tensors(s: ArchSpec) -> Shapes | None:
    """The conv weights (bias-free) and BatchNorm weight and bias (running statistics are buffers) of
    transformers' ResNetModel (`resnet.` inside ResNetForImageClassification, whose classifier.1 is an
    Identity when num_labels is 0), or torchvision's names (its fc always there)."""
    if s.head not in ("base", "imgcls"):
        return None
    X = s.variant_as(ResNetVariant)
    tv = X.torchvision
    pre = "" if s.head == "base" or tv else "resnet."
    out: Shapes = {}

    def conv_bn(conv: str, bn: str, cout: int, cin: int, k: int) -> None:
        out[pre + conv + ".weight"] = (cout, cin, k, k)
        add_norm(out, pre + bn, cout)

    stem = ("conv1", "bn1") if tv else ("embedder.embedder.convolution", "embedder.embedder.normalization")
    conv_bn(*stem, s.hidden, X.channels, 7)
    cin = s.hidden
    for i, (width, depth) in enumerate(zip(X.widths, X.depths)):
        stride = X.first_stride if i == 0 else 2
        for j in range(depth):
            p = f"layer{i + 1}.{j}" if tv else f"encoder.stages.{i}.layers.{j}"
            c = cin if j == 0 else width
            shapes: tuple[tuple[int, int, int], ...]   # (out, in, kernel) of the block's convs
            if X.bottleneck:
                mid = width // 4
                shapes = ((mid, c, 1), (mid, mid, 3), (width, mid, 1))
            else:
                shapes = ((width, c, 3), (width, width, 3))
            for k, (co, ci, ks) in enumerate(shapes):
                conv_bn(_conv(tv, p, k), _bn(tv, p, k), co, ci, ks)
            if j == 0 and (cin != width or stride != 1):   # projection shortcut
                conv_bn(*((f"{p}.downsample.0", f"{p}.downsample.1") if tv else
                          (f"{p}.shortcut.convolution", f"{p}.shortcut.normalization")), width, cin, 1)
        cin = width
    if s.head == "imgcls" and s.num_labels:
        add_linear(out, "fc" if tv else "classifier.1", s.num_labels, cin)
    return out


FAMILY = Family(
    name="resnet",
    model_types=("resnet",),
    # transformers' stage convs, or torchvision's block convs
    signature=r"(^|\.)(stages\.\d+\.layers\.\d+\.layer\.\d+\.convolution|layer\d+\.\d+\.conv\d)\.weight$",
    from_config=from_config, from_tensors=from_tensors, build=build, expected_tensors=expected_tensors,
    heads=("base", "imgcls"),
    head_rules=(HeadRule(r"(^|\.)(classifier\.1|fc)\.weight$", "imgcls"),),
    main_input="pixel_values",
    samples=(
        Sample("ResNetConfig", dict(embedding_size=8, hidden_sizes=[16, 24, 32, 40], depths=[2, 1, 2, 1], num_labels=5),
               ("ResNetModel", "ResNetForImageClassification")),
        Sample("ResNetConfig", dict(embedding_size=8, hidden_sizes=[8, 16, 24], depths=[1, 2, 1], layer_type="basic",
                                    downsample_in_first_stage=True), ("ResNetModel", "ResNetForImageClassification")),
        # stride on the first 1x1: a config-only difference the weights cannot show
        Sample("ResNetConfig", dict(embedding_size=8, hidden_sizes=[16, 32], depths=[2, 2], downsample_in_bottleneck=True),
               ("ResNetForImageClassification",), infer=False),
    ),
)
