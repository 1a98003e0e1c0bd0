"""DINOv2 (transformers modeling_dinov2.py, configuration_dinov2.py): ViT's patch embedding (Conv2d, k = stride =
patch_size, default 14), a cls token, a mask token [1, h] (use_mask_token, default true) and learned positions
sized by the config's image_size, always interpolated (bicubic, no matmul) to the input's size. Layers: norm1,
q/k/v (qkv_bias) and output dense, layer_scale1 (a learned per-channel scale, h parameters), norm2, an MLP
fc1 / gelu / fc2 of int(h x mlp_ratio), or with use_swiglu_ffn a SwiGLU weights_in [2f, h] / silu x / weights_out
(f = (int(int(h x mlp_ratio) x 2/3) + 7) // 8 x 8), layer_scale2; a final layernorm. Dinov2Model has no pooler
(its pooled output is the cls token's state); Dinov2ForImageClassification's classifier reads the cls token
concatenated with the mean of the patch tokens: Linear(2h, num_labels).

DINOv2 with registers (modeling_dinov2_with_registers.py, model_type dinov2_with_registers) adds
num_register_tokens (default 4) learned tokens after the cls token, without positions, and always has the
mask token; its classifier averages the patch tokens only.

The side analysed is ArchSpec.image_size, the rest a Dinov2Variant (vit.py's Patches, swiglu and registers). The
architecture is stated once, in `walk` (framework/walk_vision.py: ViT's patch embedding, encoder layers with the layer
scale and, where use_swiglu_ffn, the SwiGLU MLP typed in an EncoderLayer): the op template and the expected tensors
derive from it."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ..errors import UsageError
from . import vit
from .framework import infer
from .framework.base import ArchSpec, Cfg, Family, HeadRule, Sample, Shapes, Tensors
from .framework.ops import Builder
from .framework.recorder import Recorder
from .framework.walk_names import layers, pattern, signature, walked
from .framework.walk_vision import EncoderLayer, LayerPaths, encoder_layers
from .vit import Patches


@dataclass(frozen=True)
class Dinov2Variant(Patches):
    swiglu: bool      # use_swiglu_ffn: weights_in / silu x / weights_out
    registers: int    # num_register_tokens (dinov2_with_registers; 0 else)


def _hidden_features(c: Cfg, h: int, swiglu: bool) -> int:
    ratio = c.get("mlp_ratio", default=4)
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 < ratio <= 1024:
        raise UsageError(f"{c.path}: config mlp_ratio = {ratio!r} is not a number in (0, 1024]")
    f = int(h * ratio)
    return (int(f * 2 / 3) + 7) // 8 * 8 if swiglu else f


def from_config(c: Cfg) -> ArchSpec:
    h, a, img, p = vit.image_sizes(c, 14)
    swiglu = bool(c.get("use_swiglu_ffn", default=False))
    reg = c.model_type == "dinov2_with_registers"
    v = Dinov2Variant(native_image_size=img, patch_size=p, channels=c.int("num_channels", default=3),
                      mask_token=reg or bool(c.get("use_mask_token", default=True)), swiglu=swiglu,
                      registers=c.int("num_register_tokens", default=4) if reg else 0)
    return ArchSpec(layers=c.int("num_hidden_layers"), hidden=h, heads=a, kv_heads=a, head_dim=h // a,
                    intermediate=_hidden_features(c, h, swiglu), vocab=0, gated_mlp=swiglu,
                    activation="silu" if swiglu else str(c.get("hidden_act", default="gelu")),
                    qkv_bias=bool(c.get("qkv_bias", default=True)), image_size=img, variant=v, **c.common)


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    W, G = WALKED, WALKED_SWIGLU
    h, ch, p, _ = infer.shape(T, pattern(W, "embeddings.patch_embeddings.projection"), "the patch embedding conv")
    n = infer.shape(T, pattern(W, "embeddings.position_embeddings"), "the position embeddings")[-2]
    side = int(round((n - 1) ** 0.5))
    lay = LAYER.paths   # the walk's names
    q = f"{lay.attn}.{lay.q}"
    swiglu = infer.has(T, pattern(G, lay.gated_in))
    f = infer.shape(T, pattern(G, lay.gated_out), lay.gated_out)[1] if swiglu else infer.shape(T, pattern(W, lay.up), lay.up)[0]
    cls = infer.find(T, pattern(W, "classifier"))
    reg = infer.find(T, pattern(W, "embeddings.register_tokens"))
    a, note = infer.heads_for(h, 64)
    img = side * p
    v = Dinov2Variant(native_image_size=img, patch_size=p, channels=ch, swiglu=swiglu,
                      mask_token=infer.has(T, pattern(W, "embeddings.mask_token")),
                      registers=reg.shape[1] if reg is not None and len(reg.shape) == 3 else 0)
    return ArchSpec(num_labels=cls.shape[0] if cls is not None and len(cls.shape) == 2 else 2,
                    layers=infer.count_layers(T, layers(W, q)), hidden=h, heads=a, kv_heads=a,
                    head_dim=h // a,
                    intermediate=f, vocab=0, gated_mlp=swiglu, activation="silu" if swiglu else "gelu",
                    qkv_bias=infer.has(T, pattern(W, q, "bias")), image_size=img, variant=v,
                    assumptions=(note, f"no config: image {img}x{img} from the {n - 1} learned patch positions"),
                    **{**common, "model_type": "dinov2_with_registers" if reg is not None else "dinov2"})


# DINOv2's layers: norm1, attention.attention.{query,key,value}, attention.output.dense, layer_scale1, norm2, mlp.fc1 /
# mlp.fc2 (or mlp.weights_in / mlp.weights_out), layer_scale2
LAYER = EncoderLayer(LayerPaths(attn_in="norm1", mlp_in="norm2", up="mlp.fc1", act="mlp act", down="mlp.fc2"),
                     layer_scale=True)
SWIGLU = replace(LAYER, mlp="swiglu")


def walk(B: Builder) -> Recorder:
    """The forward at B.s's sizes (Dinov2Model's, Dinov2WithRegistersModel's and their classifiers'): writes its ops to B
    and records the modules it meets."""
    s = B.s
    X = s.variant_as(Dinov2Variant)
    h, R = s.hidden, X.registers
    w = Recorder(B, "encoder")
    n = vit.patches(w) + 1 + R
    tokens = (("embeddings.cls_token", (1, 1, h)),) + ((("embeddings.mask_token", (1, h)),) if X.mask_token else ()) \
        + ((("embeddings.register_tokens", (1, R, h)),) if R else ()) \
        + (("embeddings.position_embeddings", (1, (X.native_image_size // X.patch_size) ** 2 + 1, h)),)
    w.params("embeddings.cls_token + position_embeddings (interpolated)" + (" + mask_token" if X.mask_token else "")
             + (f" + {R} register_tokens" if R else ""), tokens, (B.b, n - 1 - R, h), (B.b, n, h), ew=B.b * (n - R) * h,
             bucket="embedding")
    encoder_layers(w, SWIGLU if X.swiglu else LAYER, s.layers, n, h, s.heads, s.intermediate, s.activation, s.qkv_bias)
    w.norm("layernorm", (B.b, n), h, residual=False)
    if s.head == "imgcls" and s.num_labels:
        w.linear("classifier", (B.b,), 2 * h, s.num_labels, True, note=" (cls token ++ mean of patches)", bucket="cls",
                 top=True)
    return w


def build(B: Builder) -> None:
    walk(B)


def expected_tensors(s: ArchSpec) -> Shapes | None:
    if s.head not in FAMILY.heads:
        return None
    X = s.variant_as(Dinov2Variant)
    body = "" if s.head == "base" else ("dinov2_with_registers" if X.registers else "dinov2")
    return walk(Builder(replace(s, image_size=X.native_image_size), 1, 1, 1, 1, 1)).shapes(body)


# the walks of a tiny Dinov2WithRegistersForImageClassification with a mask token, its MLP plain and SwiGLU: the paths
# of the name signature and from_tensors' look-ups
WALKED, WALKED_SWIGLU = (walked(walk, "dinov2", head="imgcls", image_size=4, variant=Dinov2Variant(
    native_image_size=4, patch_size=4, channels=1, mask_token=True, swiglu=swiglu, registers=1)) for swiglu in (False, True))

_SIZES = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, mlp_ratio=4, image_size=28, patch_size=7,
              num_channels=3)

FAMILY = Family(
    name="dinov2",
    before=("vit",),   # tried before them: its embeddings.patch_embeddings.projection names match vit's signature
    model_types=("dinov2", "dinov2_with_registers"),
    # the layer scale: ViT's files share embeddings.patch_embeddings.projection (registered before vit)
    signature=signature(WALKED, LAYER.paths.scales[0]),
    from_config=from_config, from_tensors=from_tensors, build=build, expected_tensors=expected_tensors,
    heads=("base", "imgcls"),
    head_rules=(HeadRule(r"^classifier\.weight$", "imgcls"),),
    main_input="pixel_values",
    samples=(
        Sample("Dinov2Config", dict(_SIZES, num_labels=5), ("Dinov2Model", "Dinov2ForImageClassification")),
        Sample("Dinov2Config", dict(_SIZES, use_swiglu_ffn=True, qkv_bias=False, use_mask_token=False, mlp_ratio=3),
               ("Dinov2Model", "Dinov2ForImageClassification")),
        Sample("Dinov2WithRegistersConfig", dict(_SIZES, num_labels=3, num_register_tokens=2),
               ("Dinov2WithRegistersModel", "Dinov2WithRegistersForImageClassification")),
    ),
)
