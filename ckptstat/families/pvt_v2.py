"""PVT v2 (transformers modeling_pvt_v2.py: PvtV2Model, PvtV2ForImageClassification): SegFormer's encoder under its
own names (framework/walk_pyramid.py: overlapping patch embeddings `encoder.layers.{i}.patch_embedding`, spatial-reduction
attention blocks `encoder.layers.{i}.blocks.{j}` with the Mix-FFN, each stage's `encoder.layers.{i}.layer_norm`), with
its switches: qkv_bias, and linear_attention (PVT v2-b2-Linear: keys and values from the map average-pooled to 7 x 7, a
biased 1x1 conv, a LayerNorm and GELU, whatever sr_ratios says; a ReLU after each Mix-FFN's first Linear). The
classifier: the last stage's tokens averaged, a Linear (an Identity when num_labels is 0). PvtV2Backbone is not
described.

The side analysed is ArchSpec.image_size (--image-size; default the config's image_size, 224, which sizes nothing).

The architecture is stated once, in `walk`: the op template and the expected tensors derive from it."""
from __future__ import annotations

from typing import Any

from .framework import infer
from .framework.base import FROM_CLASS, ArchSpec, Cfg, Family, HeadRule, Sample, Shapes, Tensors
from .framework.ops import Builder
from .framework.recorder import Recorder
from .framework.walk_names import signature, walked
from .framework.walk_pyramid import (
    STAGES_ASSUMED,
    PyramidVariant,
    SRPaths,
    StagePaths,
    config_stages,
    encoder,
    mean_classifier,
    tensor_stages,
)

DEFAULT_IMAGE = 224
PATHS = StagePaths("encoder.layers.{i}.patch_embedding", "encoder.layers.{i}.blocks", "encoder.layers.{i}.layer_norm",
                   SRPaths(q="attention.query", k="attention.key", v="attention.value", sr="attention.spatial_reduction",
                           sr_norm="attention.layer_norm", o="attention.proj"))


def _spec(common: dict[str, Any], v: PyramidVariant, act: str, image: int) -> ArchSpec:
    return ArchSpec(layers=sum(v.depths), hidden=v.widths[-1], heads=v.heads[-1], kv_heads=v.heads[-1],
                    head_dim=v.widths[-1] // v.heads[-1], intermediate=v.mlp[-1], vocab=0, activation=act,
                    norm="layernorm", image_size=image, variant=v, **common)


def from_config(c: Cfg) -> ArchSpec:
    v = PyramidVariant(**config_stages(c), qkv_bias=bool(c.get("qkv_bias", default=FROM_CLASS)),
                       linear=bool(c.get("linear_attention", default=FROM_CLASS)))
    img = c.get("image_size", default=DEFAULT_IMAGE)   # an int or [height, width] (config.json keeps the pair)
    side = img[0] if isinstance(img, (list, tuple)) and img else img if isinstance(img, int) else DEFAULT_IMAGE
    return _spec(c.common, v, str(c.get("hidden_act", default=FROM_CLASS)), side)


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    """The stages from the names and shapes (walk_pyramid.tensor_stages: linear_attention where every block's reducing
    conv is 1x1), qkv_bias from the query's bias."""
    v = PyramidVariant(**tensor_stages(T, WALKED, PATHS), qkv_bias=infer.has(T, r"(^|\.)attention\.query\.bias$"))
    notes = (f"no config: input {DEFAULT_IMAGE}x{DEFAULT_IMAGE} unless --image-size; {STAGES_ASSUMED}; the activation "
             "gelu",)
    cls = infer.find(T, r"(^|\.)classifier\.weight$")
    common = dict(common, num_labels=cls.shape[0] if cls is not None else 0,
                  assumptions=common.get("assumptions", ()) + notes)
    return _spec(common, v, "gelu", DEFAULT_IMAGE)


def walk(B: Builder) -> Recorder:
    """The forward at B.s's sizes (PvtV2Model's and the classifier): writes its ops to B and records the modules."""
    s = B.s
    X = s.variant_as(PyramidVariant)
    w = Recorder(B, "encoder")
    sides = encoder(w, X, PATHS, s.image_size, s.activation)
    if s.head == "imgcls":
        mean_classifier(w, sides[-1], X.widths[-1], s.num_labels)
    return w


def build(B: Builder) -> None:
    walk(B)


def expected_tensors(s: ArchSpec) -> Shapes | None:
    """PvtV2Model's parameters (`pvt_v2.` inside the classifier)."""
    if s.head not in FAMILY.heads:
        return None
    return walk(Builder(s, 1, 1, 1, 1, 1)).shapes("" if s.head == "base" else "pvt_v2")


_TINY = PyramidVariant(channels=1, widths=(2, 2), depths=(1, 1), heads=(1, 1), sr=(2, 1), mlp=(2, 2), patches=(3, 3),
                       strides=(2, 2), qkv_bias=True, linear=False)
# the walk of a tiny two-stage model, its first stage reduced: the paths of the signature and the look-ups
WALKED = walked(walk, "pvt_v2", image_size=16, variant=_TINY)

_SIZES = dict(hidden_sizes=[8, 16, 24], depths=[1, 2, 1], num_encoder_blocks=3, num_attention_heads=[1, 2, 4],
              sr_ratios=[4, 2, 1], mlp_ratios=[4, 2, 3], patch_sizes=[7, 3, 3], strides=[4, 2, 2], image_size=64,
              num_labels=5)

FAMILY = Family(
    name="pvt_v2",
    model_types=("pvt_v2",),
    signature=signature(WALKED, PATHS.block.dwconv),
    from_config=from_config, from_tensors=from_tensors, build=build, expected_tensors=expected_tensors,
    heads=("base", "imgcls"),
    head_rules=(HeadRule(r"^classifier\.weight$", "imgcls"),),
    main_input="pixel_values",
    samples=(
        Sample("PvtV2Config", _SIZES, ("PvtV2Model", "PvtV2ForImageClassification")),
        # PVT v2-b2-Linear's switch: pooled keys and values, a ReLU in the Mix-FFN; no q/k/v bias; odd kernels and strides
        Sample("PvtV2Config", dict(_SIZES, linear_attention=True, qkv_bias=False, patch_sizes=[5, 3, 3],
                                   strides=[3, 2, 2]), ("PvtV2Model", "PvtV2ForImageClassification"), infer=False),
    ),
)
