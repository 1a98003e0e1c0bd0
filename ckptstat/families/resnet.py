"""ResNet-style CNNs: transformers' modeling_resnet.py (ResNetModel, ResNetForImageClassification, from
config.json) and torchvision's resnet.py layout (`conv1`, `layer1.0.conv1`, `downsample.0`, `fc`), from
tensor shapes alone. Both are the v1.5 network: a 7x7/2 stem conv, BatchNorm, ReLU, a 3x3/2 max pool,
then stages of basic (3x3, 3x3) or bottleneck (1x1, 3x3, 1x1 at width/4) blocks whose first block
carries the stage's stride (on the 3x3; on the first 1x1 with transformers' downsample_in_bottleneck)
and a 1x1 projection shortcut when the width or stride changes; global average pool; a linear head.

FLOPs of each conv are b x C_out x H_out x W_out x C_in x k x k MACs (groups 1), what FlopCounterMode
counts for aten.convolution; the spatial side is propagated with each conv's stride and padding k//2
(H_out = (H + 2*(k//2) - k) // stride + 1). BatchNorm's running statistics are buffers, not parameters.
The input side is `image_size` (--image-size, default 224).

The architecture is stated once, in `walk` (framework/recorder.py's Recorder): each conv and BatchNorm recorded as
its op is written, a stage's blocks after the first under one `{bid}` path, so the op template and the expected tensors
(both naming schemes, every head) come from one walk."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..errors import UsageError
from .framework import infer
from .framework.archspec import Variant
from .framework.base import ArchSpec, Cfg, Family, HeadRule, Sample, Shapes, Tensors
from .framework.ops import Builder
from .framework.recorder import Recorder
from .framework.walk_names import numbered, pattern, signature, walked
from .framework.walk_vision import batchnorm, conv_strided, positive_lists

DEFAULT_IMAGE = 224


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
    widths, depths = positive_lists(c, "hidden_sizes", "depths")
    kind = c.get("layer_type", default="bottleneck")
    if kind not in ("basic", "bottleneck"):
        raise UsageError(f"{c.path}: config layer_type = {kind!r} is not basic or bottleneck")
    return _spec(c.common, c.int("embedding_size"), widths, depths, kind == "bottleneck", c.int("num_channels", default=3),
                 2 if c.get("downsample_in_first_stage", default=False) else 1,
                 bool(c.get("downsample_in_bottleneck", default=False)))


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    """Widths and block counts from the conv weights' names and shapes (transformers or torchvision names)."""
    tv = not infer.has(T, pattern(WALKED[False], STEMS[False][0]))
    W = WALKED[tv]
    # the stem: torchvision's conv1 at the top (under one prefix at most: not a block's conv1)
    stem_w = infer.shape(T, rf"^([A-Za-z_]+\.)?{re.escape(STEMS[True][0])}\.weight$" if tv else pattern(W, STEMS[False][0]),
                         f"the stem conv ({STEMS[tv][0]})")
    block = numbered(W, _conv(tv, _block(tv, 0), 0))   # groups 2, 3, 4: the stage, the block, the conv
    fc = infer.find(T, pattern(W, HEADS[tv]))
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
    mid = 2 if tv else 1   # a bottleneck's 3x3: square (a RegNet X's, under the same names, is grouped: regnet.py)
    if bottleneck and any(len(t) == 4 and t[0] != t[1] for (_, _, c), t in convs.items() if c == mid):
        raise UsageError("cannot infer the architecture from tensor names: grouped 3x3 convs (a RegNet X?), which a "
                         "ResNet has not; pass --config")
    widths = [convs[(s, 0, last_idx)][0] for s in stages]
    depths = [1 + max(b for st, b, _ in convs if st == s) for s in stages]
    # a projection shortcut where the stem and the first stage are as wide shows a strided first stage
    short = pattern(W, SHORTCUTS[tv][0].format(block=_block(tv, 0)), layer="0")
    first_stride = 2 if infer.has(T, short) and widths[0] == stem_w[0] else 1
    notes = ("no config: the v1.5 ResNet assumed (stride on the 3x3 conv); input "
             f"{DEFAULT_IMAGE}x{DEFAULT_IMAGE} unless --image-size",)
    common = dict(common, assumptions=common.get("assumptions", ()) + notes)
    return _spec(common, stem_w[0], widths, depths, bottleneck, stem_w[1] if len(stem_w) == 4 else 3,
                 first_stride, torchvision=tv, labels=fc.shape[0] if fc is not None and len(fc.shape) == 2 else 0)


def _conv(tv: bool, block: str, j: int) -> str:
    """The j-th conv of a block, as torchvision (conv1..3) or transformers (layer.0..2.convolution) names it."""
    return f"{block}.conv{j + 1}" if tv else f"{block}.layer.{j}.convolution"


def _block(tv: bool, i: int) -> str:
    """Stage i's blocks, as torchvision (layer1..4) or transformers (encoder.stages.0..3) names them."""
    return f"layer{i + 1}.{{bid}}" if tv else f"encoder.stages.{i}.layers.{{bid}}"


# by torchvision's names or not: the stem's conv and BatchNorm, a projection shortcut's, the classifier
STEMS = {True: ("conv1", "bn1"), False: ("embedder.embedder.convolution", "embedder.embedder.normalization")}
SHORTCUTS = {True: ("{block}.downsample.0", "{block}.downsample.1"),
             False: ("{block}.shortcut.convolution", "{block}.shortcut.normalization")}
HEADS = {True: "fc", False: "classifier.1"}


def _bn(tv: bool, block: str, j: int) -> str:
    return f"{block}.bn{j + 1}" if tv else f"{block}.layer.{j}.normalization"


def walk(B: Builder) -> Recorder:
    """The forward at B.s's sizes (transformers' ResNetModel and classifier, or torchvision's names): writes its ops to
    B and records the modules it meets, each block's convs once for the stage's first block and once for the rest."""
    s = B.s
    X = s.variant_as(ResNetVariant)
    tv = X.torchvision
    w = Recorder(B, "embedding")

    def conv_bn(conv: str, bn: str, at: str, layers: tuple[int, ...], cin: int, cout: int, k: int, stride: int,
                side: int, act: str | None = "relu", pixels: bool = False) -> int:
        """A conv (padding k//2) and its BatchNorm; `at` the block index their ops' labels show; the output side. The
        conv's input stays live under the BatchNorm and activation (ResNetConvLayer's and ResNetShortCut's forward
        take it as their argument), not counted where it is the caller's `pixels` (the stem's)."""
        out = conv_strided(w, conv, conv.replace("{bid}", at), cin, cout, k, stride, side, k // 2, layers)
        with B.holding(0 if pixels else B.b * cin * side * side):
            batchnorm(w, bn, bn.replace("{bid}", at), cout, out, layers, act)
        return out

    side = conv_bn(*STEMS[tv], "", (), X.channels, s.hidden, 7, 2, s.image_size, pixels=True)
    out = (side + 2 - 3) // 2 + 1
    # nn.MaxPool2d runs max_pool2d_with_indices (CPU and CUDA, inference too) and drops its int64 indices
    B.add("maxpool (3x3/2)", "pool", "embedding", 1, (B.b, s.hidden, side, side), (B.b, s.hidden, out, out),
          ew=B.b * s.hidden * out * out * 9, scratch=8 * B.b * s.hidden * out * out)
    w.bucket = "encoder"   # the stem's ops are the embedding's, the stages' the encoder's
    side, cin = out, s.hidden
    # What stays live beside a block's ops, for the inference peak (analysis/memory/peaks.py): ResNetModel keeps the
    # embedder's output through the encoder and the pooler, ResNetStage its input through the stage, a block its input
    # through the block (the residual; under the shortcut, the main path's output too), a conv layer its input under
    # its BatchNorm (conv_bn). Each counted once: a stage's first block's input is the stage's, stage 0's the embedder's.
    embedded = B.b * s.hidden * out * out
    for i, (width, depth) in enumerate(zip(X.widths, X.depths)):
        stride = X.first_stride if i == 0 else 2
        block = _block(tv, i)
        stage_in = B.b * cin * side * side
        for first in (True, False):
            layers = (0,) if first else tuple(range(1, depth))
            if not layers:
                continue
            st, at = (stride, "0") if first else (1, f"[1-{depth - 1}]")
            c = cin if first else width
            convs: tuple[tuple[int, int, int, int], ...]   # (in, out, kernel, stride) of the block's convs
            if X.bottleneck:
                mid, s1 = width // 4, st if X.stride_in_1x1 else 1
                convs = ((c, mid, 1, s1), (mid, mid, 3, st // s1), (mid, width, 1, 1))
            else:
                convs = ((c, width, 3, st), (width, width, 3, 1))
            x = B.b * c * side * side
            projection = first and (cin != width or st != 1)
            with B.holding((embedded if i or not first else 0) + (stage_in if i and not first else 0)):
                o = side
                for j, (ci, co, k, sj) in enumerate(convs):
                    with B.holding(x if j else 0):
                        o = conv_bn(_conv(tv, block, j), _bn(tv, block, j), at, layers, ci, co, k, sj, o,
                                    act=None if j == len(convs) - 1 else "relu")
                main = B.b * width * o * o
                if projection:
                    short_conv, short_bn = (path.format(block=block) for path in SHORTCUTS[tv])
                    with B.holding(main):
                        conv_bn(short_conv, short_bn, at, layers, cin, width, 1, st, side, act=None)
                p = block.replace("{bid}", at)
                with B.holding(x + (main if projection else 0)):   # the input and the shortcut's output
                    B.add(f"{p} residual add + relu", "activation", "encoder", len(layers), (B.b, width, o, o),
                          (B.b, width, o, o), ew=2 * B.b * width * o * o)
            side = o
        cin = width
    with B.holding(embedded):
        B.add("avgpool (global)", "pool", "pooler", 1, (B.b, cin, side, side), (B.b, cin), ew=B.b * cin * side * side)
    if s.head == "imgcls":
        head = HEADS[tv]
        if s.num_labels:
            w.linear(head, (B.b,), cin, s.num_labels, True, bucket="cls", top=True)
        else:   # transformers' classifier.1 is an Identity when num_labels is 0: no parameters
            B.linear(head, "cls", (B.b,), cin, 0, True)
    return w


def build(B: Builder) -> None:
    walk(B)


def expected_tensors(s: ArchSpec) -> Shapes | None:
    """The conv weights (bias-free) and BatchNorm weight and bias of the walk: transformers' ResNetModel (`resnet.`
    inside ResNetForImageClassification), or torchvision's names (its fc always there)."""
    if s.head not in FAMILY.heads:
        return None
    tv = s.variant_as(ResNetVariant).torchvision
    return walk(Builder(s, 1, 1, 1, 1, 1)).shapes("resnet" if s.head == "imgcls" and not tv else "")


# the walks of a tiny classifier of one basic block with a projection shortcut, by transformers' names and by
# torchvision's: the paths of the name signature and from_tensors' look-ups
WALKED = {tv: walked(walk, "resnet", head="imgcls", hidden=4, image_size=8, variant=ResNetVariant(
    channels=1, widths=(8,), depths=(1,), bottleneck=False, first_stride=1, stride_in_1x1=False, torchvision=tv))
    for tv in (False, True)}

FAMILY = Family(
    name="resnet",
    model_types=("resnet",),
    # transformers' stage convs, or torchvision's block convs
    signature="|".join(signature(WALKED[tv], _conv(tv, _block(tv, 0), 0)) for tv in (False, True)),
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
