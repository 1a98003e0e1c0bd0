"""ViT: transformers' modeling_vit.py (ViTModel with its pooler, ViTForImageClassification,
ViTForMaskedImageModeling). A Conv2d patch embedding (k = stride = patch_size), a learned cls token and learned
positions, pre-LayerNorm layers (layernorm_before, attention, layernorm_after, MLP), a final LayerNorm; the pooler
(dense + tanh on the cls token) in ViTModel, a linear classifier on the cls token in the classification head; the
masked-image-modeling head (head "mim": ViTModel with its mask token [1, 1, h] and no pooler) reshapes the patch tokens
to a side x side map and decodes it with a 1x1 Conv2d to encoder_stride^2 x num_channels (decoder.0) and a
PixelShuffle (no FLOPs); the loss, only with bool_masked_pos, is not counted.

Inputs: an image_size x image_size image (--image-size; default the config's image_size), i.e.
(image_size // patch_size)^2 patches + the cls token. The position table is sized by the config's
image_size; another input size interpolates it (transformers' interpolate_pos_encoding), which costs
no matmul. The side analysed is ArchSpec.image_size, the rest a ViTVariant.

DeiT (modeling_deit.py, model_type deit) is ViT with a second learned token, the distillation token, after the
cls token (ViTVariant.dist_token: one more token and position row, h more parameters), under the prefix `deit.`;
DeiTForImageClassificationWithTeacher (head "imgcls+distillation": DeiTModel without a pooler) runs cls_classifier on the
cls token and distillation_classifier on the distillation token and averages their logits.

I-JEPA (modeling_ijepa.py, model_type ijepa) is ViT without the cls token (ViTVariant.cls_token false: positions for
the patches only), its IJepaModel without a pooler, IJepaForImageClassification's classifier on the mean of the tokens;
under `ijepa.`. ViT MSN (modeling_vit_msn.py, model_type vit_msn) is ViT without a pooler, its classifier on the cls
token; transformers 5's save_pretrained writes ViTMSNForImageClassification's layers without the `vit.` prefix
(`encoder.layer.*`: the reverse of its conversion_mapping's `^encoder.` -> `vit.encoder.`), its other tensors under
`vit.` (MSN_LAYERS).

The architecture is stated once, in `walk` (framework/recorder.py's Recorder, walk_vision.py's encoder layers): the op
template and the expected tensors (every head's) both derive from it."""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from ..errors import UsageError
from .framework import infer
from .framework.archspec import Variant
from .framework.base import FROM_CLASS, ArchSpec, Cfg, Family, HeadRule, Sample, Shapes, Tensors
from .framework.ops import Builder
from .framework.recorder import Recorder
from .framework.walk_names import layers, pattern, signature, walked
from .framework.walk_vision import EncoderLayer, conv, encoder_layers


@dataclass(frozen=True)
class Patches(Variant):
    """A ViT-shaped model's patch input (ViT's, DeiT's, DINOv2's: dinov2.py)."""
    native_image_size: int   # the config's image_size, which sizes the position table
    patch_size: int
    channels: int
    mask_token: bool         # embeddings.mask_token


@dataclass(frozen=True)
class ViTVariant(Patches):
    pooler_size: int         # pooler_output_size
    dist_token: bool         # DeiT's distillation token
    encoder_stride: int = 0  # the *ForMaskedImageModeling decoder's upscale (encoder_stride; 0: no decoder)
    cls_token: bool = True   # false: I-JEPA's, positions for the patches only, the classifier on the tokens' mean


def pooler(model_type: str, head: str) -> bool:
    """ViTModel adds its pooler by default; ViTForImageClassification and ViTForMaskedImageModeling build ViTModel
    without one; IJepaModel and ViTMSNModel have none."""
    return head == "base" and model_type not in NO_POOLER


def image_sizes(c: Cfg, patch: int) -> tuple[int, int, int, int]:
    """(hidden_size, heads, image_size, patch_size) of a ViT-shaped config (DINOv2's too), checked; `patch` the
    model type's default patch size."""
    h, a = c.int("hidden_size"), c.int("num_attention_heads")
    img, p = c.int("image_size", default=224), c.int("patch_size", default=patch)
    if not (0 < p <= img) or h % a:
        raise UsageError(f"{c.path}: config needs 0 < patch_size <= image_size and hidden_size a multiple of "
                         f"num_attention_heads (patch_size {p}, image_size {img}, hidden_size {h}, heads {a})")
    return h, a, img, p


def from_config(c: Cfg) -> ArchSpec:
    h, a, img, p = image_sizes(c, 16)
    mim = c.head == "mim"   # ViTModel(add_pooling_layer=False, use_mask_token=True) and the decoder
    v = ViTVariant(native_image_size=img, patch_size=p, channels=c.int("num_channels", default=3), mask_token=mim,
                   pooler_size=c.int("pooler_output_size", default=h), dist_token=c.model_type == "deit",
                   encoder_stride=c.int("encoder_stride", default=FROM_CLASS) if mim else 0,
                   cls_token=c.model_type != "ijepa")
    return ArchSpec(layers=c.int("num_hidden_layers"), hidden=h, heads=a, kv_heads=a, head_dim=h // a,
                    intermediate=c.int("intermediate_size"), vocab=0, activation=str(c.get("hidden_act", default="gelu")),
                    qkv_bias=bool(c.get("qkv_bias", default=True)), pooler=pooler(c.model_type, c.head),
                    image_size=img, variant=v, **c.common)


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    W = WALKED
    h, ch, p, _ = infer.shape(T, pattern(W, "embeddings.patch_embeddings.projection"), "the patch embedding conv")
    n = infer.shape(T, pattern(W, "embeddings.position_embeddings"), "the position embeddings")[-2]
    dist = int(infer.has(T, pattern(W, "embeddings.distillation_token")))   # DeiT
    cls = infer.has(T, pattern(W, "embeddings.cls_token"))   # I-JEPA has none
    side = int(round((n - cls - dist) ** 0.5))
    lay = LAYER.paths   # the walk's names
    q = f"{lay.attn}.{lay.q}"
    f = infer.shape(T, pattern(W, lay.up), "the MLP's first dense")[0]
    pool = infer.find(T, pattern(W, "pooler.dense"))
    decoder = infer.find(T, pattern(W, "decoder.0"))   # *ForMaskedImageModeling's [stride^2 x channels, h, 1, 1]
    a, note = infer.heads_for(h, 64)
    img = side * p
    v = ViTVariant(native_image_size=img, patch_size=p, channels=ch, mask_token=infer.has(T, pattern(W, "embeddings.mask_token")),
                   pooler_size=pool.shape[0] if pool is not None else h, dist_token=bool(dist),
                   encoder_stride=math.isqrt(decoder.shape[0] // ch) if decoder is not None else 0, cls_token=cls)
    labels = infer.num_labels(T, r"(^|\.)(cls_)?classifier\.weight$")   # DeiT's teacher head: cls_classifier
    return ArchSpec(num_labels=labels, layers=infer.count_layers(T, layers(W, q)), hidden=h,
                    heads=a, kv_heads=a, head_dim=h // a, intermediate=f, vocab=0, pooler=pool is not None,
                    qkv_bias=infer.has(T, pattern(W, q, "bias")), image_size=img, variant=v,
                    assumptions=(note, f"no config: image {img}x{img} from the {n - cls - dist} learned patch positions"),
                    **{**common, "model_type": "deit" if dist else common["model_type"] if cls else "ijepa"})


# the model types whose base model has no pooler; the prefix of each model type's base model in its heads
NO_POOLER = ("ijepa", "vit_msn")
BODY = {"deit": "deit", "ijepa": "ijepa"}
# ViTMSNForImageClassification's layers as transformers 5 saves them (the module doc)
MSN_LAYERS = ("vit.encoder.layer.", "encoder.layer.")

# DeiTForImageClassificationWithTeacher's head and its classifiers (on the cls token, on the distillation token)
TEACHER = "imgcls+distillation"
TEACHER_HEADS = ("cls_classifier", "distillation_classifier")

# ViT's layers: layernorm_before, attention.attention.{query,key,value}, attention.output.dense, layernorm_after,
# intermediate.dense, output.dense (walk_vision.LayerPaths' defaults)
LAYER = EncoderLayer()


def patches(w: Recorder) -> int:
    """The patch embedding, a biased Conv2d (k = stride = patch_size; DINOv2's too); returns the patches' count."""
    s = w.B.s
    v = s.variant_as(Patches)
    side = conv(w, "embeddings.patch_embeddings.projection", v.channels, s.hidden, v.patch_size, s.image_size, True,
                  bucket="embedding")
    return side * side


def walk(B: Builder) -> Recorder:
    """The forward at B.s's sizes (ViTModel's, DeiTModel's and their classifiers'): writes its ops to B and records the
    modules it meets."""
    s = B.s
    X = s.variant_as(ViTVariant)
    h, f, p = s.hidden, s.intermediate, X.patch_size
    extra = int(X.cls_token) + int(X.dist_token)   # the learned tokens before the patches
    w = Recorder(B, "encoder")
    n = patches(w) + extra
    tokens = ((("embeddings.cls_token", (1, 1, h)),) if X.cls_token else ()) \
        + ((("embeddings.distillation_token", (1, 1, h)),) if X.dist_token else ()) \
        + ((("embeddings.mask_token", (1, 1, h)),) if X.mask_token else ()) \
        + (("embeddings.position_embeddings", (1, (X.native_image_size // p) ** 2 + extra, h)),)
    w.params("embeddings." + " + ".join(path.split(".")[-1] for path, _ in tokens), tokens, (B.b, n - extra, h),
             (B.b, n, h), ew=B.b * n * h, bucket="embedding")
    encoder_layers(w, LAYER, s.layers, n, h, s.heads, f, s.activation, s.qkv_bias)
    w.norm("layernorm", (B.b, n), h, residual=False)
    if s.pooler:
        w.linear("pooler.dense", (B.b,), h, X.pooler_size, True, bucket="pooler")
        B.activation("pooler act (tanh)", "pooler", (B.b,), X.pooler_size, "tanh")
    if s.head == "imgcls" and s.num_labels:   # an Identity, without parameters, when num_labels is 0
        w.linear("classifier", (B.b,), h, s.num_labels, True, note="" if X.cls_token else " (mean of the tokens)",
                 bucket="cls", top=True)
    if s.head == TEACHER and s.num_labels:   # DeiT's two classifiers, their logits averaged: (cls + distillation) / 2
        for path in TEACHER_HEADS:
            w.linear(path, (B.b,), h, s.num_labels, True, bucket="cls", top=True)
        B.add("logits (cls + distillation) / 2", "activation", "cls", 1, (B.b, s.num_labels), (B.b, s.num_labels),
              ew=2 * B.b * s.num_labels, extra_in=B.b * s.num_labels)
    if X.encoder_stride:   # the patch tokens as a side x side map, a 1x1 conv to stride^2 x channels, PixelShuffle (no FLOPs)
        conv(w, "decoder.0", h, X.encoder_stride ** 2 * X.channels, 1, math.isqrt(n - extra), True, bucket="cls", top=True)
    return w


def build(B: Builder) -> None:
    walk(B)


# the walk of a tiny ViTForMaskedImageModeling with every token and a pooler: the paths of the name signature and
# from_tensors' look-ups
WALKED = walked(walk, "vit", head="mim", pooler=True, image_size=4, variant=ViTVariant(
    native_image_size=4, patch_size=4, channels=1, mask_token=True, pooler_size=4, dist_token=True, encoder_stride=1))


def expected_tensors(s: ArchSpec) -> Shapes | None:
    """ViTModel's parameters (`vit.` inside ViTForImageClassification; DeiT's `deit.`, I-JEPA's `ijepa.`; ViT MSN's
    layers: MSN_LAYERS); the position table is sized by the config's image_size."""
    if s.head not in FAMILY.heads:
        return None
    X = s.variant_as(ViTVariant)
    body = "" if s.head == "base" else BODY.get(s.model_type, "deit" if X.dist_token else "vit")
    shapes = walk(Builder(replace(s, image_size=X.native_image_size), 1, 1, 1, 1, 1)).shapes(body)
    if s.model_type == "vit_msn":
        old, new = MSN_LAYERS
        return {(new + k[len(old):] if k.startswith(old) else k): v for k, v in shapes.items()}
    return shapes


_SIZES = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37, image_size=30,
              patch_size=3, num_channels=3)

FAMILY = Family(
    name="vit",
    model_types=("vit", "deit", "ijepa", "vit_msn"),
    signature=signature(WALKED, "embeddings.patch_embeddings.projection"),   # (its weight, or Flax's kernel: docs/flax.md)
    from_config=from_config, from_tensors=from_tensors, build=build, expected_tensors=expected_tensors,
    heads=("base", "imgcls", "mim", TEACHER),
    head_rules=(HeadRule(r"^cls_classifier\.weight$", TEACHER), HeadRule(r"(^|\.)classifier\.weight$", "imgcls"),
                HeadRule(r"^decoder\.0\.weight$", "mim")),
    pooler=pooler,
    main_input="pixel_values",
    samples=(
        Sample("ViTConfig", dict(_SIZES, num_labels=5), ("ViTModel", "ViTForImageClassification", "ViTForMaskedImageModeling")),
        Sample("ViTConfig", dict(_SIZES, qkv_bias=False, pooler_output_size=24, image_size=32, patch_size=4),
               ("ViTModel",)),
        Sample("DeiTConfig", dict(_SIZES, num_labels=5, encoder_stride=3),
               ("DeiTModel", "DeiTForImageClassification", "DeiTForMaskedImageModeling",
                "DeiTForImageClassificationWithTeacher")),
        Sample("IJepaConfig", dict(_SIZES, num_labels=5), ("IJepaModel", "IJepaForImageClassification")),
        Sample("ViTMSNConfig", dict(_SIZES, num_labels=5), ("ViTMSNModel", "ViTMSNForImageClassification")),
    ),
)
