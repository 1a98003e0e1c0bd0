"""ViT: transformers' modeling_vit.py (ViTModel with its pooler, ViTForImageClassification). A Conv2d
patch embedding (k = stride = patch_size), a learned cls token and learned positions, pre-LayerNorm
layers (layernorm_before, attention, layernorm_after, MLP), a final LayerNorm; the pooler (dense +
tanh on the cls token) in ViTModel, a linear classifier on the cls token in the classification head.

Inputs: an image_size x image_size image (--image-size; default the config's image_size), i.e.
(image_size // patch_size)^2 patches + the cls token. The position table is sized by the config's
image_size; another input size interpolates it (transformers' interpolate_pos_encoding), which costs
no matmul. The side analysed is ArchSpec.image_size, the rest a ViTVariant.

DeiT (modeling_deit.py, model_type deit) is ViT with a second learned token, the distillation token, after the
cls token (ViTVariant.dist_token: one more token and position row, h more parameters), under the prefix `deit.`;
DeiTForImageClassificationWithTeacher (a second classifier on the distillation token) is not modelled."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import UsageError
from .framework import infer
from .framework.archspec import Variant
from .framework.base import ArchSpec, Cfg, Family, HeadRule, Sample, Shapes, Tensors, add_linear, add_norm
from .framework.ops import Builder
from .resnet import conv2d


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


def pooler(model_type: str, head: str) -> bool:
    """ViTModel adds its pooler by default; ViTForImageClassification builds ViTModel without one."""
    return head == "base"


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
    v = ViTVariant(native_image_size=img, patch_size=p, channels=c.int("num_channels", default=3), mask_token=False,
                   pooler_size=c.int("pooler_output_size", default=h), dist_token=c.model_type == "deit")
    return ArchSpec(layers=c.int("num_hidden_layers"), hidden=h, heads=a, kv_heads=a, head_dim=h // a,
                    intermediate=c.int("intermediate_size"), vocab=0, activation=str(c.get("hidden_act", default="gelu")),
                    qkv_bias=bool(c.get("qkv_bias", default=True)), pooler=pooler(c.model_type, c.head),
                    image_size=img, variant=v, **c.common)


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    h, ch, p, _ = infer.shape(T, r"patch_embeddings\.projection\.weight$", "the patch embedding conv")
    n = infer.shape(T, r"embeddings\.position_embeddings(\.weight)?$", "the position embeddings")[-2]
    dist = int(infer.has(T, r"embeddings\.distillation_token$"))   # DeiT
    side = int(round((n - 1 - dist) ** 0.5))
    f = infer.shape(T, r"intermediate\.dense\.weight$", "the MLP's first dense")[0]
    pool = infer.find(T, r"pooler\.dense\.weight$")
    a, note = infer.heads_for(h, 64)
    img = side * p
    v = ViTVariant(native_image_size=img, patch_size=p, channels=ch, mask_token=infer.has(T, r"embeddings\.mask_token$"),
                   pooler_size=pool.shape[0] if pool is not None else h, dist_token=bool(dist))
    return ArchSpec(num_labels=infer.num_labels(T), layers=infer.count_layers(T, r"encoder\.layer\.(\d+)\."), hidden=h,
                    heads=a, kv_heads=a, head_dim=h // a, intermediate=f, vocab=0, pooler=pool is not None,
                    qkv_bias=infer.has(T, r"attention\.attention\.query\.bias$"), image_size=img, variant=v,
                    assumptions=(note, f"no config: image {img}x{img} from the {n - 1 - dist} learned patch positions"),
                    **{**common, "model_type": "deit" if dist else common["model_type"]})


def patch_tokens(B: Builder, prefix: str, bias: bool) -> int:
    """The patch embedding conv; returns the patches + the class token."""
    s = B.s
    v = s.variant_as(Patches)
    p = v.patch_size
    side = conv2d(B, prefix, "embedding", v.channels, s.hidden, p, p, s.image_size, 0, bias=bias)
    return side * side + 1


def build(B: Builder) -> None:
    s = B.s
    X = s.variant_as(ViTVariant)
    h, L, f = s.hidden, s.layers, s.intermediate
    dist = int(X.dist_token)
    n = patch_tokens(B, "embeddings.patch_embeddings.projection", True) + dist
    native = (X.native_image_size // X.patch_size) ** 2 + 1 + dist
    tok = (B.b, n)
    B.add("embeddings.cls_token" + (" + distillation_token" if dist else "") + " + position_embeddings"
          + (" + mask_token" if X.mask_token else ""), "embedding", "embedding",
          1, (B.b, n - 1 - dist, h), (B.b, n, h), params=(1 + dist) * h + native * h + (h if X.mask_token else 0),
          ew=B.b * n * h)
    lp = f"encoder.layer[{L}]"
    B.norm(f"{lp}.layernorm_before", "encoder", tok, h, L, residual=False)
    for m in ("query", "key", "value"):
        B.linear(f"{lp}.attention.attention.{m}", "encoder", tok, h, h, s.qkv_bias, L)
    B.attention(f"{lp}.attention.attention", "encoder", s.heads, n, n, s.head_dim, L, causal=False)
    B.linear(f"{lp}.attention.output.dense", "encoder", tok, h, h, True, L)
    B.norm(f"{lp}.layernorm_after", "encoder", tok, h, L)
    B.linear(f"{lp}.intermediate.dense", "encoder", tok, h, f, True, L)
    B.activation(f"{lp}.intermediate act", "encoder", tok, f, s.activation, L)
    B.linear(f"{lp}.output.dense (+residual)", "encoder", tok, f, h, True, L)
    B.norm("layernorm", "encoder", tok, h)
    if s.pooler:
        B.linear("pooler.dense", "pooler", (B.b,), h, X.pooler_size, True)
        B.activation("pooler act (tanh)", "pooler", (B.b,), X.pooler_size, "tanh")
    if s.head == "imgcls":
        B.linear("classifier", "cls", (B.b,), h, s.num_labels, True)


def expected_tensors(s: ArchSpec) -> Shapes | None:
    """ViTModel's parameters (`vit.` inside ViTForImageClassification, whose classifier is an Identity,
    without parameters, when num_labels is 0); the position table is sized by the config's image_size."""
    if s.head not in ("base", "imgcls"):
        return None
    X = s.variant_as(ViTVariant)
    h, f, p = s.hidden, s.intermediate, X.patch_size
    dist = int(X.dist_token)
    pre = "" if s.head == "base" else ("deit." if dist else "vit.")
    out: Shapes = {pre + "embeddings.cls_token": (1, 1, h)}
    if dist:
        out[pre + "embeddings.distillation_token"] = (1, 1, h)
    if X.mask_token:
        out[pre + "embeddings.mask_token"] = (1, 1, h)
    out[pre + "embeddings.position_embeddings"] = (1, (X.native_image_size // p) ** 2 + 1 + dist, h)
    out[pre + "embeddings.patch_embeddings.projection.weight"] = (h, X.channels, p, p)
    out[pre + "embeddings.patch_embeddings.projection.bias"] = (h,)
    for i in range(s.layers):
        q = f"{pre}encoder.layer.{i}."
        for m in ("query", "key", "value"):
            add_linear(out, q + "attention.attention." + m, h, h, s.qkv_bias)
        add_linear(out, q + "attention.output.dense", h, h)
        add_linear(out, q + "intermediate.dense", f, h)
        add_linear(out, q + "output.dense", h, f)
        add_norm(out, q + "layernorm_before", h)
        add_norm(out, q + "layernorm_after", h)
    add_norm(out, pre + "layernorm", h)
    if s.pooler:
        add_linear(out, pre + "pooler.dense", X.pooler_size, h)
    if s.head == "imgcls" and s.num_labels:
        add_linear(out, "classifier", s.num_labels, h)
    return out


_SIZES = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37, image_size=30,
              patch_size=3, num_channels=3)

FAMILY = Family(
    name="vit",
    model_types=("vit", "deit"),
    signature=r"(^|\.)embeddings\.patch_embeddings\.projection\.(weight|kernel)$",   # kernel: Flax (docs/flax.md)
    from_config=from_config, from_tensors=from_tensors, build=build, expected_tensors=expected_tensors,
    heads=("base", "imgcls"),
    head_rules=(HeadRule(r"(^|\.)classifier\.weight$", "imgcls"),),
    pooler=pooler,
    main_input="pixel_values",
    samples=(
        Sample("ViTConfig", dict(_SIZES, num_labels=5), ("ViTModel", "ViTForImageClassification")),
        Sample("ViTConfig", dict(_SIZES, qkv_bias=False, pooler_output_size=24, image_size=32, patch_size=4),
               ("ViTModel",)),
        Sample("DeiTConfig", dict(_SIZES, num_labels=5), ("DeiTModel", "DeiTForImageClassification")),
    ),
)
