"""SegFormer (transformers modeling_segformer.py: SegformerModel, SegformerForImageClassification,
SegformerForSemanticSegmentation): the Mix Transformer encoder, num_encoder_blocks stages, each an overlapping patch
embedding (patch_sizes[i] / strides[i]), depths[i] spatial-reduction attention blocks (sr_ratios[i], num_attention_heads[i])
with a Mix-FFN (mlp_ratios[i] x hidden_sizes[i] wide) and a LayerNorm: framework/walk_pyramid.py's pieces, under the
names save_pretrained writes (`encoder.patch_embeddings.{i}`, `encoder.block.{i}.{j}`, `encoder.layer_norm.{i}`).
The classifier: the last stage's tokens averaged, a Linear. The semantic segmentation head (`decode_head`, head
"semseg"): each stage's map projected to decoder_hidden_size by a Linear (`linear_c.{i}.proj`) and resized to the first
stage's side (bilinear: no matmul), concatenated (num_encoder_blocks x decoder_hidden_size), fused by a bias-free 1x1
Conv2d, a BatchNorm and ReLU, and the 1x1 Conv2d classifier.

The side analysed is ArchSpec.image_size (--image-size; default 224: the config has no image size, and nothing in the
model depends on one).

The architecture is stated once, in `walk`: the op template and the expected tensors derive from it."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .framework import infer
from .framework.base import FROM_CLASS, ArchSpec, Cfg, Family, HeadRule, Sample, Shapes, Tensors
from .framework.ops import Builder
from .framework.recorder import Recorder
from .framework.walk_names import pattern, signature, walked
from .framework.walk_pyramid import (
    STAGES_ASSUMED,
    PyramidVariant,
    StagePaths,
    config_stages,
    encoder,
    mean_classifier,
    tensor_stages,
)
from .framework.walk_vision import batchnorm, conv_strided

DEFAULT_IMAGE = 224
PATHS = StagePaths("encoder.patch_embeddings.{i}", "encoder.block.{i}", "encoder.layer_norm.{i}")


@dataclass(frozen=True)
class SegformerVariant(PyramidVariant):
    decoder: int   # decoder_hidden_size (the semseg head's)


def _spec(common: dict[str, Any], v: SegformerVariant, act: str, image: int) -> ArchSpec:
    return ArchSpec(layers=sum(v.depths), hidden=v.widths[-1], heads=v.heads[-1], kv_heads=v.heads[-1],
                    head_dim=v.widths[-1] // v.heads[-1], intermediate=v.mlp[-1], vocab=0, activation=act,
                    norm="layernorm", image_size=image, variant=v, **common)


def from_config(c: Cfg) -> ArchSpec:
    v = SegformerVariant(**config_stages(c), qkv_bias=True, linear=False,
                         decoder=c.int("decoder_hidden_size", default=FROM_CLASS))
    return _spec(c.common, v, str(c.get("hidden_act", default=FROM_CLASS)), DEFAULT_IMAGE)


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    """The stages from the names and shapes (walk_pyramid.tensor_stages); the decode head's width from linear_fuse."""
    fuse = infer.find(T, pattern(WALKED, "linear_fuse"))
    v = SegformerVariant(**dict(tensor_stages(T, WALKED, PATHS), linear=False), qkv_bias=True,
                         decoder=fuse.shape[0] if fuse is not None else 256)
    notes = (f"no config: input {DEFAULT_IMAGE}x{DEFAULT_IMAGE} unless --image-size; {STAGES_ASSUMED}; the activation "
             "gelu",)
    cls = infer.find(T, r"(^|\.)classifier\.weight$")
    common = dict(common, num_labels=cls.shape[0] if cls is not None else 0,
                  assumptions=common.get("assumptions", ()) + notes)
    return _spec(common, v, "gelu", DEFAULT_IMAGE)


def walk(B: Builder) -> Recorder:
    """The forward at B.s's sizes (SegformerModel's and its heads'): writes its ops to B and records the modules."""
    s = B.s
    X = s.variant_as(SegformerVariant)
    w = Recorder(B, "encoder")
    sides = encoder(w, X, PATHS, s.image_size, s.activation)
    side, cin = sides[-1], X.widths[-1]
    if s.head == "imgcls":
        mean_classifier(w, side, cin, s.num_labels)
    if s.head == "semseg":   # decode_head, outside the body
        d, s0, at = X.decoder, sides[0], "decode_head."
        for i, (c, si) in enumerate(zip(X.widths, sides)):
            w.linear(f"{at}linear_c.{i}.proj", (B.b, si * si), c, d, True, bucket="cls", top=True)
        B.add(f"{at}resize each map to the first stage's (bilinear)", "activation", "cls", 1, (B.b, d, side, side),
              (B.b, len(sides) * d, s0, s0), ew=4 * B.b * d * s0 * s0 * len(sides))
        w.bucket = "cls"
        conv_strided(w, at + "linear_fuse", at + "linear_fuse", len(sides) * d, d, 1, 1, s0, 0, top=True)
        batchnorm(w, at + "batch_norm", at + "batch_norm", d, s0, top=True)
        conv_strided(w, at + "classifier", at + "classifier", d, s.num_labels, 1, 1, s0, 0, bias=True, top=True)
    return w


def build(B: Builder) -> None:
    walk(B)


def expected_tensors(s: ArchSpec) -> Shapes | None:
    """SegformerModel's parameters (`segformer.` inside a head model) and the head's."""
    if s.head not in FAMILY.heads:
        return None
    return walk(Builder(s, 1, 1, 1, 1, 1)).shapes("" if s.head == "base" else "segformer")


# the walk of a tiny two-stage segmentation model, its first stage reduced: the paths of the signature and look-ups
WALKED = walked(walk, "segformer", head="semseg", image_size=16, num_labels=2, variant=SegformerVariant(
    channels=1, widths=(2, 2), depths=(1, 1), heads=(1, 1), sr=(2, 1), mlp=(2, 2), patches=(3, 3), strides=(2, 2),
    qkv_bias=True, linear=False, decoder=2))

_SIZES = dict(hidden_sizes=[8, 16, 24], depths=[1, 2, 1], num_encoder_blocks=3, num_attention_heads=[1, 2, 4],
              sr_ratios=[4, 2, 1], mlp_ratios=[4, 2, 3], patch_sizes=[7, 3, 3], strides=[4, 2, 2], decoder_hidden_size=16,
              num_labels=5)

FAMILY = Family(
    name="segformer",
    model_types=("segformer",),
    # and the names a torch.save of the model holds (transformers 5 renames them on save_pretrained only): the family
    # is found from them; sizes are read under the saved names
    signature=signature(WALKED, PATHS.block.dwconv) + r"|(^|\.)stages\.\d+\.blocks\.\d+\.mlp\.dwconv\.dwconv\.",
    from_config=from_config, from_tensors=from_tensors, build=build, expected_tensors=expected_tensors,
    heads=("base", "imgcls", "semseg"),
    head_rules=(HeadRule(r"(^|\.)decode_head\.classifier\.weight$", "semseg"),
                HeadRule(r"^classifier\.weight$", "imgcls")),
    main_input="pixel_values",
    samples=(
        Sample("SegformerConfig", _SIZES, ("SegformerModel", "SegformerForImageClassification",
                                           "SegformerForSemanticSegmentation")),
        # odd kernels and strides, no reduction anywhere, the last stage not reshaped
        Sample("SegformerConfig", dict(_SIZES, sr_ratios=[1, 1, 1], patch_sizes=[5, 3, 3], strides=[3, 2, 2],
                                       reshape_last_stage=False, hidden_act="relu"),
               ("SegformerModel", "SegformerForImageClassification"), infer=False),
    ),
)
