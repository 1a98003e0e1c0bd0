"""RegNet: transformers' modeling_regnet.py (RegNetModel, RegNetForImageClassification). A 3x3/2 stem (`embedder.embedder`:
bias-free conv, BatchNorm, the config's activation), stages of X or Y blocks (layer_type), the first block of a stage
carrying its stride (2; the first stage's 1 unless downsample_in_first_stage) and a 1x1 projection shortcut with
BatchNorm where the width or stride changes. An X block: 1x1 conv, a grouped 3x3 conv (groups max(1, width //
groups_width), the stride), 1x1 conv without activation (each with BatchNorm), the shortcut added, the activation;
a Y block puts squeeze-and-excitation before the last 1x1 (`layer.2`: the map's mean, a biased 1x1 conv to
round(in / 4), ReLU, a biased 1x1 conv back, sigmoid, the map scaled). A global average pool, `classifier.1` a Linear
(an Identity when num_labels is 0).

FLOPs are FlopCounterMode's: each conv out elements x cin / groups x k x k MACs (the SE convs on a 1x1 map), the
classifier's b x in x out. The side analysed is ArchSpec.image_size (--image-size; default 224: the config has no
image_size). The names are ResNet's (resnet.py) but for the grouped 3x3 and SE: files without config.json are
RegNet by the SE's names (Y); an X's names are a ResNet bottleneck's, which resnet.py refuses by its grouped 3x3.
The architecture is stated once, in `walk`."""
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
from .framework.walk_vision import batchnorm, conv_strided, positive_lists

DEFAULT_IMAGE = 224
STEM, HEAD = "embedder.embedder", "classifier.1"


@dataclass(frozen=True)
class RegNetVariant(Variant):
    channels: int
    widths: tuple[int, ...]   # each stage's output channels (hidden_sizes)
    depths: tuple[int, ...]   # each stage's blocks
    groups: tuple[int, ...]   # each stage's 3x3 conv groups: max(1, width // groups_width)
    se: bool                  # layer_type "y": squeeze-and-excitation in every block
    first_stride: int         # 2 with downsample_in_first_stage, else 1


def _spec(common: dict[str, Any], stem: int, v: RegNetVariant, act: str) -> ArchSpec:
    return ArchSpec(layers=sum(v.depths), hidden=stem, heads=0, kv_heads=0, head_dim=0, intermediate=v.widths[-1],
                    vocab=0, activation=act, norm="batchnorm", image_size=DEFAULT_IMAGE, variant=v, **common)


def from_config(c: Cfg) -> ArchSpec:
    widths, depths = positive_lists(c, "hidden_sizes", "depths")
    kind, gw = c.get("layer_type", default=FROM_CLASS), c.int("groups_width", default=FROM_CLASS)
    if kind not in ("x", "y") or gw < 1:
        raise UsageError(f"{c.path}: config layer_type = {kind!r} is not x or y, or groups_width {gw} is not positive")
    v = RegNetVariant(channels=c.int("num_channels", default=FROM_CLASS), widths=tuple(widths), depths=tuple(depths),
                      groups=tuple(max(1, w // gw) for w in widths), se=kind == "y",
                      first_stride=2 if c.get("downsample_in_first_stage", default=FROM_CLASS) else 1)
    return _spec(c.common, c.int("embedding_size", default=FROM_CLASS), v, str(c.get("hidden_act", default=FROM_CLASS)))


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    """Widths, depths and groups from the block convs' shapes (a Y: the SE's names); relu assumed, and a strided first
    stage unless its shortcut shows it is not (noted)."""
    W = WALKED
    stem = infer.shape(T, pattern(W, f"{STEM}.convolution"), "the stem conv")
    rx = re.compile(numbered(W, "layer.1.convolution"))   # groups 2, 3, 4: the stage, the block, the conv
    mids: dict[tuple[int, int], tuple[int, ...]] = {}   # the grouped 3x3 (layer.1) of each block
    for name, t in T.items():
        if (m := rx.search(name)) and m.group(4) == "1":
            mids[(int(m.group(2)), int(m.group(3)))] = t.shape
    stages = sorted({s for s, _ in mids})
    if not stages or any((s, 0) not in mids for s in stages):
        raise UsageError("cannot infer the architecture from tensor names: no RegNet block convs; pass --config")
    widths = [mids[(s, 0)][0] for s in stages]
    short = infer.has(T, pattern(W, "shortcut.convolution", layer="0"))   # the first stage's first block's
    v = RegNetVariant(channels=stem[1], widths=tuple(widths),
                      depths=tuple(1 + max(b for st, b in mids if st == s) for s in stages),
                      groups=tuple(mids[(s, 0)][0] // mids[(s, 0)][1] for s in stages),
                      se=infer.has(T, pattern(W, "layer.2.attention.0")),
                      first_stride=1 if widths[0] == stem[0] and not short else 2)
    notes = (f"no config: relu assumed; the first stage strided unless it keeps the stem's width without a shortcut; "
             f"input {DEFAULT_IMAGE}x{DEFAULT_IMAGE} unless --image-size",)
    common = dict(common, num_labels=infer.num_labels(T, rf"(^|\.){re.escape(HEAD)}\.weight$"),
                  assumptions=common.get("assumptions", ()) + notes)
    return _spec(common, stem[0], v, "relu")


def walk(B: Builder) -> Recorder:
    """The forward at B.s's sizes (RegNetModel's and the classifier): writes its ops to B and records the modules it
    meets, each stage's first block once and the rest under one `{bid}` path."""
    s = B.s
    X = s.variant_as(RegNetVariant)
    w = Recorder(B, "embedding")

    def conv_bn(path: str, at: str, layers: tuple[int, ...], cin: int, cout: int, k: int, stride: int, side: int,
                groups: int = 1, act: str | None = s.activation) -> int:
        """A RegNetConvLayer (a conv, padding k // 2, BatchNorm, activation, beside the conv's input: its caller's, for
        the inference peak); `at` the block its labels show."""
        label = path.replace("{bid}", at)
        out = conv_strided(w, f"{path}.convolution", f"{label}.convolution", cin, cout, k, stride, side, k // 2, layers,
                           groups=groups)
        with B.holding(B.b * cin * side * side):
            batchnorm(w, f"{path}.normalization", f"{label}.normalization", cout, out, layers, act)
        return out

    side = conv_bn(STEM, "", (), X.channels, s.hidden, 3, 2, s.image_size)
    w.bucket, cin = "encoder", s.hidden
    for i, (width, depth, groups) in enumerate(zip(X.widths, X.depths, X.groups)):
        block = f"encoder.stages.{i}.layers.{{bid}}"
        for first in (True, False):
            layers = (0,) if first else tuple(range(1, depth))
            if not layers:
                continue
            st, at, c, n = (X.first_stride if i == 0 else 2, "0", cin, 1) if first else (1, f"[1-{depth - 1}]", width,
                                                                                         depth - 1)
            conv_bn(f"{block}.layer.0", at, layers, c, width, 1, 1, side)
            o = conv_bn(f"{block}.layer.1", at, layers, width, width, 3, st, side, groups)
            p = block.replace("{bid}", at)
            last = 2
            if X.se:   # squeeze-and-excitation: mean, 1x1 to round(in / 4), ReLU, 1x1 back, sigmoid, scale
                red, shape = int(round(c / 4)), (B.b, width, o, o)
                B.add(f"{p}.layer.2 mean", "pool", "encoder", n, shape, (B.b, width, 1, 1), ew=B.b * width * o * o)
                for j, (a, b) in enumerate(((width, red), (red, width))):
                    conv_strided(w, f"{block}.layer.2.attention.{2 * j}", f"{p}.layer.2.attention.{2 * j}", a, b, 1, 1, 1,
                                 0, layers, bias=True)
                B.add(f"{p}.layer.2 relu, sigmoid, scale", "activation", "encoder", n, shape, shape,
                      ew=B.b * (red + width) + B.b * width * o * o)
                last = 3
            conv_bn(f"{block}.layer.{last}", at, layers, width, width, 1, 1, o, act=None)
            if first and (c != width or st != 1):   # the projection shortcut
                conv_bn(f"{block}.shortcut", at, layers, c, width, 1, st, side, act=None)
            shape = (B.b, width, o, o)
            B.add(f"{p} residual add + activation", "activation", "encoder", n, shape, shape, ew=2 * B.b * width * o * o)
            side = o
        cin = width
    B.add("pooler (global average)", "pool", "pooler", 1, (B.b, cin, side, side), (B.b, cin), ew=B.b * cin * side * side)
    if s.head == "imgcls" and s.num_labels:   # classifier.1 an Identity, without parameters, when num_labels is 0
        w.linear(HEAD, (B.b,), cin, s.num_labels, True, bucket="cls", top=True)
    return w


def build(B: Builder) -> None:
    walk(B)


def expected_tensors(s: ArchSpec) -> Shapes | None:
    """RegNetModel's parameters (`regnet.` inside RegNetForImageClassification)."""
    if s.head not in FAMILY.heads:
        return None
    return walk(Builder(s, 1, 1, 1, 1, 1)).shapes("" if s.head == "base" else "regnet")


# the walk of a tiny Y classifier of one stage of two blocks: the paths of the name signature and from_tensors' look-ups
WALKED = walked(walk, "regnet", head="imgcls", image_size=8, num_labels=2, variant=RegNetVariant(
    channels=1, widths=(8,), depths=(2,), groups=(2,), se=True, first_stride=2))

_TINY = dict(embedding_size=8, hidden_sizes=[16, 24, 32], depths=[1, 2, 2], groups_width=8, num_labels=5)

FAMILY = Family(
    name="regnet",
    model_types=("regnet",),
    signature=signature(WALKED, "layer.2.attention.0"),   # a Y's SE; an X's names are a ResNet bottleneck's
    from_config=from_config, from_tensors=from_tensors, build=build, expected_tensors=expected_tensors,
    heads=("base", "imgcls"),
    head_rules=(HeadRule(rf"(^|\.){re.escape(HEAD)}\.weight$", "imgcls"),),
    main_input="pixel_values",
    before=("resnet",),   # a Y's stem, block and shortcut names are ResNet's too
    samples=(
        Sample("RegNetConfig", _TINY, ("RegNetModel", "RegNetForImageClassification")),
        # X blocks: ResNet's names (detected as resnet, which refuses the grouped 3x3); a first stage at stride 1. The
        # base model alone: census_audit.expected_families reads a sample's detected_as for every config of its classes
        # (the default config, a Y, is found as regnet); the X classifier is checked in tests/test_walk_vision.py
        Sample("RegNetConfig", dict(_TINY, layer_type="x", downsample_in_first_stage=False, groups_width=16),
               ("RegNetModel",), detected_as="resnet"),
    ),
)
