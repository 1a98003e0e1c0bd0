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

The side analysed is ArchSpec.image_size, the rest a Dinov2Variant (vit.py's Patches, swiglu and registers)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import UsageError
from . import vit
from .framework import infer
from .framework.base import ArchSpec, Cfg, Family, HeadRule, Sample, Shapes, Tensors, add_linear, add_norm
from .framework.ops import Builder
from .vit import Patches, patch_tokens


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
    h, ch, p, _ = infer.shape(T, r"patch_embeddings\.projection\.weight$", "the patch embedding conv")
    n = infer.shape(T, r"embeddings\.position_embeddings$", "the position embeddings")[-2]
    side = int(round((n - 1) ** 0.5))
    swiglu = infer.has(T, r"mlp\.weights_in\.weight$")
    f = infer.shape(T, r"mlp\.weights_out\.weight$", "mlp.weights_out")[1] if swiglu else \
        infer.shape(T, r"mlp\.fc1\.weight$", "mlp.fc1")[0]
    cls = infer.find(T, r"^classifier\.weight$")
    reg = infer.find(T, r"embeddings\.register_tokens$")
    a, note = infer.heads_for(h, 64)
    img = side * p
    v = Dinov2Variant(native_image_size=img, patch_size=p, channels=ch, mask_token=infer.has(T, r"embeddings\.mask_token$"),
                      swiglu=swiglu, registers=reg.shape[1] if reg is not None and len(reg.shape) == 3 else 0)
    return ArchSpec(num_labels=cls.shape[0] if cls is not None and len(cls.shape) == 2 else 2,
                    layers=infer.count_layers(T, r"encoder\.layer\.(\d+)\."), hidden=h, heads=a, kv_heads=a, head_dim=h // a,
                    intermediate=f, vocab=0, gated_mlp=swiglu, activation="silu" if swiglu else "gelu",
                    qkv_bias=infer.has(T, r"attention\.attention\.query\.bias$"), image_size=img, variant=v,
                    assumptions=(note, f"no config: image {img}x{img} from the {n - 1} learned patch positions"),
                    **{**common, "model_type": "dinov2_with_registers" if reg is not None else "dinov2"})


def build(B: Builder) -> None:
    s = B.s
    X = s.variant_as(Dinov2Variant)
    h, L, f = s.hidden, s.layers, s.intermediate
    R = X.registers
    n = patch_tokens(B, "embeddings.patch_embeddings.projection", True) + R
    native = (X.native_image_size // X.patch_size) ** 2 + 1
    tok = (B.b, n)
    B.add("embeddings.cls_token + position_embeddings (interpolated)" + (" + mask_token" if X.mask_token else "")
          + (f" + {R} register_tokens" if R else ""), "embedding", "embedding", 1, (B.b, n - 1 - R, h), (B.b, n, h),
          params=h + native * h + (h if X.mask_token else 0) + R * h, ew=B.b * (n - R) * h)
    lp = f"encoder.layer[{L}]"
    B.norm(f"{lp}.norm1", "encoder", tok, h, L, residual=False)
    for m in ("query", "key", "value"):
        B.linear(f"{lp}.attention.attention.{m}", "encoder", tok, h, h, s.qkv_bias, L)
    B.attention(f"{lp}.attention.attention", "encoder", s.heads, n, n, s.head_dim, L, causal=False)
    B.linear(f"{lp}.attention.output.dense", "encoder", tok, h, h, True, L)
    for i in (1, 2):
        if i == 2:
            B.norm(f"{lp}.norm2", "encoder", tok, h, L, residual=False)
            if X.swiglu:
                B.linear(f"{lp}.mlp.weights_in", "encoder", tok, h, 2 * f, True, L)
                B.activation(f"{lp}.mlp silu*x2", "encoder", tok, f, "silu", L, gated=True)
                B.linear(f"{lp}.mlp.weights_out", "encoder", tok, f, h, True, L)
            else:
                B.linear(f"{lp}.mlp.fc1", "encoder", tok, h, f, True, L)
                B.activation(f"{lp}.mlp act", "encoder", tok, f, s.activation, L)
                B.linear(f"{lp}.mlp.fc2", "encoder", tok, f, h, True, L)
        # the layer scale (x lambda) and the residual add
        B.add(f"{lp}.layer_scale{i} (+residual)", "activation", "encoder", L, tok + (h,), tok + (h,), params=h * L,
              ew=2 * B.b * n * h, weights_per_call=h)
    B.norm("layernorm", "encoder", tok, h, residual=False)
    if s.head == "imgcls" and s.num_labels:
        B.linear("classifier (cls token ++ mean of patches)", "cls", (B.b,), 2 * h, s.num_labels, True)


def expected_tensors(s: ArchSpec) -> Shapes | None:
    if s.head not in ("base", "imgcls"):
        return None
    X = s.variant_as(Dinov2Variant)
    h, f, p = s.hidden, s.intermediate, X.patch_size
    pre = "" if s.head == "base" else ("dinov2_with_registers." if X.registers else "dinov2.")
    out: Shapes = {pre + "embeddings.cls_token": (1, 1, h)}
    if X.mask_token:
        out[pre + "embeddings.mask_token"] = (1, h)
    if X.registers:
        out[pre + "embeddings.register_tokens"] = (1, X.registers, h)
    out[pre + "embeddings.position_embeddings"] = (1, (X.native_image_size // p) ** 2 + 1, h)
    out[pre + "embeddings.patch_embeddings.projection.weight"] = (h, X.channels, p, p)
    out[pre + "embeddings.patch_embeddings.projection.bias"] = (h,)
    for i in range(s.layers):
        q = f"{pre}encoder.layer.{i}."
        add_norm(out, q + "norm1", h)
        for m in ("query", "key", "value"):
            add_linear(out, q + "attention.attention." + m, h, h, s.qkv_bias)
        add_linear(out, q + "attention.output.dense", h, h)
        out[q + "layer_scale1.lambda1"] = (h,)
        add_norm(out, q + "norm2", h)
        if X.swiglu:
            add_linear(out, q + "mlp.weights_in", 2 * f, h)
            add_linear(out, q + "mlp.weights_out", h, f)
        else:
            add_linear(out, q + "mlp.fc1", f, h)
            add_linear(out, q + "mlp.fc2", h, f)
        out[q + "layer_scale2.lambda1"] = (h,)
    add_norm(out, pre + "layernorm", h)
    if s.head == "imgcls" and s.num_labels:
        add_linear(out, "classifier", s.num_labels, 2 * h)
    return out


_SIZES = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, mlp_ratio=4, image_size=28, patch_size=7,
              num_channels=3)

FAMILY = Family(
    name="dinov2",
    before=("vit",),   # tried before them: its embeddings.patch_embeddings.projection names match vit's signature
    model_types=("dinov2", "dinov2_with_registers"),
    # the layer scale: ViT's files share embeddings.patch_embeddings.projection (registered before vit)
    signature=r"(^|\.)encoder\.layer\.\d+\.layer_scale1\.lambda1$",
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
