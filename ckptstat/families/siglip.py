"""SigLIP (transformers modeling_siglip.py, configuration_siglip.py): SiglipModel (a text tower, a vision tower,
logit_scale and logit_bias, the text x image similarity matmul), SiglipTextModel and SiglipVisionModel (one tower).

Both towers are CLIP's encoder layers (layer_norm1, biased q/k/v/out_proj, layer_norm2, fc1 / gelu_pytorch_tanh /
fc2), without a causal mask in the text tower. Vision: a Conv2d patch embedding with bias (k = stride =
patch_size), learned positions for the patches only (no class token; sized by the config's image_size, another
--image-size interpolates them: no matmul), post_layernorm, and, unless vision_use_head is false, the attention
pooling head: a learned probe (1 query) attends the patches through torch's nn.MultiheadAttention (in_proj:
the probe's q and the patches' fused k and v, out_proj), then layernorm and a residual MLP. Text: token and
learned position embeddings, final_layer_norm, and `head` Linear(h, projection_size) on the last token.

ArchSpec's main sizes are the text tower's (the vision tower's for siglip_vision_model); both towers' sizes in
ArchSpec.extra: t_layers, t_hidden, t_heads, t_inter, t_vocab, t_positions, t_proj, v_layers, v_hidden, v_heads,
v_inter, image_size (analysed), native_image_size, patch_size, channels, v_head (0/1)."""
from __future__ import annotations

import re
from typing import Any

from ..errors import UsageError
from . import clip
from .framework import infer
from .framework.base import FROM_CLASS, ArchSpec, Cfg, Family, HeadRule, Sample, Shapes, Tensors, add_linear, add_norm
from .framework.ops import Builder
from .resnet import conv2d


# Sizes a saved SiglipConfig's sub-config omits are SiglipTextConfig's / SiglipVisionConfig's defaults (FROM_CLASS).
def _tower(c: Cfg, p: str) -> dict[str, int]:
    h, a = c.int("hidden_size", default=FROM_CLASS), c.int("num_attention_heads", default=FROM_CLASS)
    if h % a:
        raise UsageError(f"{c.path}: hidden_size {h} is not a multiple of num_attention_heads {a}")
    return {p + "layers": c.int("num_hidden_layers", default=FROM_CLASS), p + "hidden": h, p + "heads": a,
            p + "inter": c.int("intermediate_size", default=FROM_CLASS)}


def _text(c: Cfg) -> dict[str, int]:
    X = _tower(c, "t_")
    return dict(X, t_vocab=c.int("vocab_size", default=FROM_CLASS),
                t_positions=c.int("max_position_embeddings", default=FROM_CLASS),
                t_proj=c.int("projection_size", default=X["t_hidden"]))   # None in the class: the hidden size


def _vision(c: Cfg) -> dict[str, int]:
    img, p = c.int("image_size", default=FROM_CLASS), c.int("patch_size", default=FROM_CLASS)
    if not 0 < p <= img:
        raise UsageError(f"{c.path}: config needs 0 < patch_size <= image_size (patch_size {p}, image_size {img})")
    return dict(_tower(c, "v_"), image_size=img, native_image_size=img, patch_size=p,
                channels=c.int("num_channels", default=FROM_CLASS),
                v_head=int(bool(c.get("vision_use_head", default=FROM_CLASS))))


def _spec(X: dict[str, int], common: dict[str, Any], act: str) -> ArchSpec:
    p = "t_" if "t_layers" in X else "v_"
    h, a = X[p + "hidden"], X[p + "heads"]
    return ArchSpec(layers=X[p + "layers"], hidden=h, heads=a, kv_heads=a, head_dim=h // a, intermediate=X[p + "inter"],
                    vocab=X.get("t_vocab", 0), positions=X.get("t_positions", 0), activation=act,
                    extra=tuple(X.items()), **common)


def from_config(c: Cfg) -> ArchSpec:
    if c.model_type == "siglip" and c.head == "imgcls":   # SiglipForImageClassification: the vision tower alone
        v = c.sub("vision_config", "siglip_vision_model")
        X, act = _vision(v), str(v.get("hidden_act", default=FROM_CLASS))
    elif c.model_type == "siglip":
        t, v = c.sub("text_config", "siglip_text_model"), c.sub("vision_config", "siglip_vision_model")
        X = {**_text(t), **_vision(v)}
        if X["t_proj"] != X["v_hidden"]:
            raise UsageError(f"{c.path}: text projection_size {X['t_proj']} differs from the vision hidden_size "
                             f"{X['v_hidden']} (SiglipModel multiplies the two embeddings)")
        act = str(t.get("hidden_act", default=FROM_CLASS))
    else:   # siglip_text_model / siglip_vision_model
        X, act = (_text(c) if c.model_type == "siglip_text_model" else _vision(c)), str(c.get("hidden_act", default=FROM_CLASS))
    return _spec(X, c.common, act)


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    X: dict[str, int] = {}
    if (pre := clip.tower_prefix(T, "text")) is not None:   # `text_model.`, or bare (clip.TOWER_MARKERS)
        q = "^" + re.escape(pre)
        X.update(clip.tower_shapes(T, "t_", pre))
        X["t_vocab"] = infer.shape(T, rf"{q}embeddings\.token_embedding\.weight$", "the token embedding")[0]
        X["t_positions"] = infer.shape(T, rf"{q}embeddings\.position_embedding\.weight$", "text positions")[0]
        X["t_proj"] = infer.shape(T, rf"{q}head\.weight$", "the text head")[0]
    if (pre := clip.tower_prefix(T, "vision")) is not None:
        q = "^" + re.escape(pre)
        X.update(clip.tower_shapes(T, "v_", pre))
        conv = infer.shape(T, rf"{q}embeddings\.patch_embedding\.weight$", "the patch embedding")
        if len(conv) != 4:   # SigLIP2's patch embedding is a Linear over flattened patches
            raise UsageError(f"{pre}embeddings.patch_embedding.weight is {list(conv)}, not a Conv2d kernel: not a SigLIP "
                             "vision tower (SigLIP2's Linear patch embedding is not modelled); pass --config")
        _, ch, p, _ = conv
        n = infer.shape(T, rf"{q}embeddings\.position_embedding\.weight$", "vision positions")[0]
        img = int(round(n ** 0.5)) * p
        X.update(image_size=img, native_image_size=img, patch_size=p, channels=ch,
                 v_head=int(infer.has(T, rf"{q}head\.probe$")))
    if not X:
        raise UsageError("cannot infer the architecture from tensor names: no SigLIP tower; pass --config")
    mt = "siglip" if "t_layers" in X and "v_layers" in X else "siglip_text_model" if "t_layers" in X else "siglip_vision_model"
    cls = infer.find(T, r"^classifier\.weight$")
    common = dict(common, model_type=mt, head="imgcls" if cls is not None and mt == "siglip_vision_model" else "base",
                  num_labels=cls.shape[0] if cls is not None and len(cls.shape) == 2 else 2,
                  assumptions=("no config: head_dim assumed 64 (head count only affects attention-score memory)",))
    return _spec(X, common, "gelu_pytorch_tanh")


def _pooling_head(B: Builder, n: int) -> None:
    """SiglipMultiheadAttentionPoolingHead: one probe query over the n patch tokens (torch's multi-head
    attention: q from the probe, k and v fused from the patches as key is value), out_proj, layernorm, MLP."""
    X = dict(B.s.extra)
    h, a, f, b = X["v_hidden"], X["v_heads"], X["v_inter"], B.b
    pre = "vision_model.head"
    B.add(f"{pre}.probe", "embedding", "vision", 1, (1, 1, h), (b, 1, h), params=h)
    B.linear(f"{pre}.attention.in_proj (q, probe)", "vision", (b, 1), h, h, True)
    B.linear(f"{pre}.attention.in_proj (k, v)", "vision", (b, n), h, 2 * h, True)
    B.attention(f"{pre}.attention", "vision", a, 1, n, h // a, 1, causal=False)
    B.linear(f"{pre}.attention.out_proj", "vision", (b, 1), h, h, True)
    B.norm(f"{pre}.layernorm", "vision", (b, 1), h, residual=False)
    B.linear(f"{pre}.mlp.fc1", "vision", (b, 1), h, f, True)
    B.activation(f"{pre}.mlp act", "vision", (b, 1), f, B.s.activation)
    B.linear(f"{pre}.mlp.fc2 (+residual)", "vision", (b, 1), f, h, True)


def build(B: Builder) -> None:
    X = dict(B.s.extra)
    if "v_layers" in X:   # SiglipModel runs the vision tower first
        h = X["v_hidden"]
        side = conv2d(B, "vision_model.embeddings.patch_embedding", "vision", X["channels"], h, X["patch_size"],
                      X["patch_size"], X["image_size"], 0, bias=True)
        n, native = side * side, (X["native_image_size"] // X["patch_size"]) ** 2
        B.add("vision_model.embeddings.position_embedding", "embedding", "vision", 1, (B.b, n, h), (B.b, n, h),
              params=native * h, ew=B.b * n * h)
        clip.encoder(B, "vision", "v_", n, causal=False)
        B.norm("vision_model.post_layernorm", "vision", (B.b, n), h, residual=False)
        if X["v_head"]:
            _pooling_head(B, n)
        if B.s.head == "imgcls" and B.s.num_labels:   # the patch tokens' mean, then the classifier
            B.add("mean of patch tokens", "activation", "cls", 1, (B.b, n, h), (B.b, h), ew=B.b * n * h)
            B.linear("classifier", "cls", (B.b,), h, B.s.num_labels, True)
    if "t_layers" in X:
        h = X["t_hidden"]
        B.embedding("text_model.embeddings.token_embedding", "text", X["t_vocab"], h, B.seq)
        B.embedding("text_model.embeddings.position_embedding", "text", X["t_positions"], h, B.seq)
        clip.encoder(B, "text", "t_", B.seq, causal=False)   # no causal mask in SigLIP's text tower
        B.norm("text_model.final_layer_norm", "text", (B.b, B.seq), h, residual=False)
        B.linear("text_model.head (last token)", "text", (B.b,), h, X["t_proj"], True)
    if "t_layers" in X and "v_layers" in X:
        # normalised embeddings, logits_per_text = text @ image.T x exp(logit_scale) + logit_bias
        P = X["t_proj"]
        B.add("logit_scale, logit_bias + similarity (text @ image.T)", "linear", "cls", 1, (B.b, P), (B.b, B.b), params=2,
              macs=B.b * P * B.b, ew=2 * B.b * B.b + 6 * B.b * P)


def expected_tensors(s: ArchSpec) -> Shapes | None:
    X = dict(s.extra)
    out: Shapes = {}
    if "t_layers" in X:
        h = X["t_hidden"]
        out["text_model.embeddings.token_embedding.weight"] = (X["t_vocab"], h)
        out["text_model.embeddings.position_embedding.weight"] = (X["t_positions"], h)
        clip.tower_tensors(out, "text_model", X["t_layers"], h, X["t_inter"])
        add_norm(out, "text_model.final_layer_norm", h)
        add_linear(out, "text_model.head", X["t_proj"], h)
    if "v_layers" in X:
        h, p, f = X["v_hidden"], X["patch_size"], X["v_inter"]
        out["vision_model.embeddings.patch_embedding.weight"] = (h, X["channels"], p, p)
        out["vision_model.embeddings.patch_embedding.bias"] = (h,)
        out["vision_model.embeddings.position_embedding.weight"] = ((X["native_image_size"] // p) ** 2, h)
        clip.tower_tensors(out, "vision_model", X["v_layers"], h, f)
        add_norm(out, "vision_model.post_layernorm", h)
        if X["v_head"]:
            out.update({"vision_model.head.probe": (1, 1, h), "vision_model.head.attention.in_proj_weight": (3 * h, h),
                        "vision_model.head.attention.in_proj_bias": (3 * h,)})
            add_linear(out, "vision_model.head.attention.out_proj", h, h)
            add_norm(out, "vision_model.head.layernorm", h)
            add_linear(out, "vision_model.head.mlp.fc1", f, h)
            add_linear(out, "vision_model.head.mlp.fc2", h, f)
    if "t_layers" in X and "v_layers" in X:
        out.update({"logit_scale": (1,), "logit_bias": (1,)})
    if s.head == "imgcls" and s.num_labels:
        add_linear(out, "classifier", s.num_labels, X["v_hidden"])
    return clip.unprefixed(out) if clip.bare(s) else out


_TEXT = dict(vocab_size=99, hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_attention_heads=4,
             max_position_embeddings=40, projection_size=48)
_VISION = dict(hidden_size=48, intermediate_size=40, num_hidden_layers=2, num_attention_heads=6, image_size=30, patch_size=3)

FAMILY = Family(
    name="siglip",
    before=("clip", "llama"),   # tried before them: its towers' names match clip's signature, and their q_proj llama's
    model_types=("siglip", "siglip_text_model", "siglip_vision_model"),
    # the text head, the vision pooling head's probe, the patch conv's bias (CLIP's towers have none of them), the
    # vision tower's under its prefix or bare at the root (clip.TOWER_MARKERS); registered before clip
    signature=r"(^|\.)(text_model\.head\.weight|vision_model\.head\.probe|vision_model\.embeddings\.patch_embedding\.bias)$"
              r"|^(head\.probe|embeddings\.patch_embedding\.bias)$",
    # a bare text tower: CLIP's, and a head
    signature_together=(r"^head\.weight$", r"^embeddings\.token_embedding\.weight$"),
    from_config=from_config, from_tensors=from_tensors, build=build, expected_tensors=expected_tensors,
    heads=("base", "imgcls"),
    head_rules=(HeadRule(r"^classifier\.weight$", "imgcls"),),
    samples=(
        Sample("SiglipConfig", dict(text_config=_TEXT, vision_config=_VISION), ("SiglipModel",)),
        Sample("SiglipConfig", dict(text_config=_TEXT, vision_config=_VISION, num_labels=5), ("SiglipForImageClassification",)),
        Sample("SiglipTextConfig", _TEXT, ("SiglipTextModel",)),
        Sample("SiglipVisionConfig", _VISION, ("SiglipVisionModel",)),
        Sample("SiglipVisionConfig", dict(_VISION, vision_use_head=False), ("SiglipVisionModel",)),
    ),
)
