"""ConvNeXt and ConvNeXt V2: transformers' modeling_convnext.py (ConvNextModel, ConvNextForImageClassification) and
modeling_convnextv2.py (ConvNextV2Model, ConvNextV2ForImageClassification). A patchify stem (a biased Conv2d, k = stride
= patch_size, then a channels-first LayerNorm), stages of blocks, each stage after the first opening with a downsampling
layer (a channels-first LayerNorm and a biased 2x2/2 conv); a block is a depthwise 7x7 conv (groups = channels, padding 3,
biased), a channels-last LayerNorm, the pointwise MLP as nn.Linear (C -> 4C, the config's activation, 4C -> C), then
ConvNeXt's layer scale (a learned [C], where layer_scale_init_value > 0) or, before the second Linear, ConvNeXt V2's
GRN (global response normalisation: weight and bias [1, 1, 1, 4C]), and the residual add. The model's head: a global
average pool and a LayerNorm (the pooler output); the classifier a Linear on it (an Identity when num_labels is 0).

FLOPs are FlopCounterMode's: each conv out elements x cin / groups x k x k MACs (the depthwise conv's k x k per
element), the Linears' tokens x in x out; norms, GRN and the pool are element-wise. The side analysed is
ArchSpec.image_size (--image-size; default the config's image_size, which sizes nothing in the model); the stem
and the downsampling convs floor the side (no padding).

The architecture is stated once, in `walk` (framework/recorder.py's Recorder): the op template and the expected tensors
(both heads) derive from it."""
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
from .framework.walk_vision import conv, conv_strided, positive_lists

DEFAULT_IMAGE = 224


@dataclass(frozen=True)
class ConvNextVariant(Variant):
    channels: int
    patch_size: int
    widths: tuple[int, ...]   # each stage's channels (hidden_sizes)
    depths: tuple[int, ...]   # each stage's blocks
    layer_scale: bool         # ConvNeXt's layer_scale_parameter (layer_scale_init_value > 0)
    grn: bool                 # ConvNeXt V2's GRN (and no layer scale)


def _spec(common: dict[str, Any], v: ConvNextVariant, act: str, image: int) -> ArchSpec:
    return ArchSpec(layers=sum(v.depths), hidden=v.widths[0], heads=0, kv_heads=0, head_dim=0,
                    intermediate=4 * v.widths[-1], vocab=0, activation=act, norm="layernorm", image_size=image,
                    variant=v, **common)


def from_config(c: Cfg) -> ArchSpec:
    widths, depths = positive_lists(c, "hidden_sizes", "depths")
    stages = c.int("num_stages", default=FROM_CLASS)
    if stages != len(widths):   # the encoder builds num_stages stages; the final LayerNorm is hidden_sizes[-1] wide
        raise UsageError(f"{c.path}: config num_stages = {stages} is not the {len(widths)} hidden_sizes")
    v2 = c.model_type == "convnextv2"
    scale = not v2 and float(c.get("layer_scale_init_value", default=FROM_CLASS)) > 0
    v = ConvNextVariant(channels=c.int("num_channels", default=FROM_CLASS), patch_size=c.int("patch_size", default=FROM_CLASS),
                        widths=tuple(widths), depths=tuple(depths), layer_scale=scale, grn=v2)
    return _spec(c.common, v, str(c.get("hidden_act", default=FROM_CLASS)), c.int("image_size", default=DEFAULT_IMAGE))


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    """Widths and block counts from the depthwise convs' names and shapes; V2 from its GRN."""
    W = WALKED
    stem = infer.shape(T, pattern(W, "embeddings.patch_embeddings"), "the patch embedding conv")
    rx = re.compile(numbered(W, "dwconv"))   # groups 2, 3: the stage, the block
    blocks: dict[int, tuple[int, int]] = {}
    for name, t in T.items():
        if m := rx.search(name):
            st, b = int(m.group(2)), int(m.group(3))
            blocks[st] = (t.shape[0], max(b + 1, blocks.get(st, (0, 0))[1]))
    stages = sorted(blocks)
    grn = infer.has(T, pattern(W, "grn"))
    v = ConvNextVariant(channels=stem[1], patch_size=stem[2], widths=tuple(blocks[s][0] for s in stages),
                        depths=tuple(blocks[s][1] for s in stages), grn=grn,
                        layer_scale=infer.has(T, pattern(W, "layer_scale_parameter")))
    notes = (f"no config: input {DEFAULT_IMAGE}x{DEFAULT_IMAGE} unless --image-size; the activation gelu",)
    common = dict(common, model_type="convnextv2" if grn else "convnext",
                  num_labels=infer.num_labels(T, r"(^|\.)classifier\.weight$"),
                  assumptions=common.get("assumptions", ()) + notes)
    return _spec(common, v, "gelu", DEFAULT_IMAGE)


def walk(B: Builder) -> Recorder:
    """The forward at B.s's sizes (ConvNextModel's or ConvNextV2Model's, and the classifier): writes its ops to B and
    records the modules it meets."""
    s = B.s
    X = s.variant_as(ConvNextVariant)
    w = Recorder(B, "embedding")
    c = X.widths[0]
    side = conv(w, "embeddings.patch_embeddings", X.channels, c, X.patch_size, s.image_size, True)
    w.norm("embeddings.layernorm", (B.b, side, side), c, residual=False)
    w.bucket = "encoder"
    # What stays live beside each op, for the inference peak (analysis/memory/peaks.py): ConvNextModel keeps the
    # embeddings' output through the encoder and the pooling, ConvNextEncoder a stage's input through the stage,
    # ConvNextStage its downsampled input through its layers, a layer its input (the residual) through the layer. Each
    # counted once; the layers after a stage's first hold both its input and theirs, the bound over the stage's layers.
    embedded = B.b * c * side * side
    for i, (width, depth) in enumerate(zip(X.widths, X.depths)):
        at = f"encoder.stages.{i}"
        before = B.b * c * side * side
        with B.holding(embedded + before if i else 0):
            if i:   # the downsampling layer: a channels-first LayerNorm, a biased 2x2/2 conv
                w.norm(f"{at}.downsampling_layer.0", (B.b, side, side), c, residual=False)
                side = conv_strided(w, f"{at}.downsampling_layer.1", f"{at}.downsampling_layer.1", c, width, 2, 2,
                                    side, 0, bias=True)
            c, f, L = width, 4 * width, depth
            tok, layer = (B.b, side, side), f"{at}.layers.{{bid}}"
            n = B.b * side * side
            with B.holding(n * c if L > 1 else 0):   # the stage's input, beside a later layer's
                conv_strided(w, f"{layer}.dwconv", w.label(f"{layer}.dwconv", L), c, c, 7, 1, side, 3, tuple(range(L)),
                             groups=c, bias=True)
                with B.holding(n * c):   # the layer's input
                    w.norm(f"{layer}.layernorm", tok, c, L, residual=False)
                    w.linear(f"{layer}.pwconv1", tok, c, f, True, L)
                    B.activation(w.label(f"{layer}.act", L), w.bucket, tok, f, s.activation, L)
                    if X.grn:   # x * weight * (its L2 norm over the map / the channels' mean of it) + bias + x
                        grn = (("weight", (1, 1, 1, f)), ("bias", (1, 1, 1, f)))
                        # at its peak x x norm and weight x that beside x, with the [b, f] norms and their ratio
                        B.add(w.label(f"{layer}.grn", L), "norm", w.bucket, L, tok + (f,), tok + (f,), params=w.count(
                            ((f"{layer}.grn", grn),), L), ew=6 * n * f, weights_per_call=2 * f,
                            scratch=B.ab * (n * f + 2 * B.b * f))
                    w.linear(f"{layer}.pwconv2", tok, f, c, True, L)
                    if X.layer_scale:
                        w.params(f"{layer}.layer_scale_parameter".replace(".{bid}", f"[{L}]"),
                                 ((f"{layer}.layer_scale_parameter", (c,)),), tok + (c,), tok + (c,), ew=n * c,
                                 kind="activation", L=L)
                    B.add(w.label(layer, L) + " residual add", "activation", "encoder", L, tok + (c,), tok + (c,),
                          ew=n * c, extra_in=n * c)
    with B.holding(embedded):
        B.add("mean over the map", "pool", "pooler", 1, (B.b, c, side, side), (B.b, c), ew=B.b * c * side * side)
    w.norm("layernorm", (B.b,), c, residual=False, bucket="pooler")
    if s.head == "imgcls" and s.num_labels:   # an Identity, without parameters, when num_labels is 0
        w.linear("classifier", (B.b,), c, s.num_labels, True, bucket="cls", top=True)
    return w


def build(B: Builder) -> None:
    walk(B)


def expected_tensors(s: ArchSpec) -> Shapes | None:
    """ConvNextModel's parameters (`convnext.` / `convnextv2.` inside the classifier)."""
    if s.head not in FAMILY.heads:
        return None
    return walk(Builder(s, 1, 1, 1, 1, 1)).shapes("" if s.head == "base" else s.model_type)


# the walk of a tiny classifier of two stages, with a layer scale and a GRN: the paths of the name signature and
# from_tensors' look-ups
WALKED = walked(walk, "convnext", head="imgcls", image_size=8, num_labels=2, variant=ConvNextVariant(
    channels=1, patch_size=2, widths=(4, 4), depths=(1, 1), layer_scale=True, grn=True))

_SIZES = dict(hidden_sizes=[8, 16, 24], depths=[2, 1, 2], num_stages=3, image_size=64, num_labels=5)

FAMILY = Family(
    name="convnext",
    model_types=("convnext", "convnextv2"),
    signature=signature(WALKED, "dwconv"),
    from_config=from_config, from_tensors=from_tensors, build=build, expected_tensors=expected_tensors,
    heads=("base", "imgcls"),
    head_rules=(HeadRule(r"(^|\.)classifier\.weight$", "imgcls"),),
    main_input="pixel_values",
    samples=(
        Sample("ConvNextConfig", _SIZES, ("ConvNextModel", "ConvNextForImageClassification")),
        # no layer scale, a 2-pixel patch, an odd side floored by the stem and the downsampling convs; no labels: the
        # classifier an Identity, so the names cannot tell it from the base model
        Sample("ConvNextConfig", dict(_SIZES, layer_scale_init_value=0.0, patch_size=2, image_size=30, num_labels=0),
               ("ConvNextForImageClassification",), infer=False),
        Sample("ConvNextV2Config", _SIZES, ("ConvNextV2Model", "ConvNextV2ForImageClassification")),
    ),
)
