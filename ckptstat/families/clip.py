"""CLIP: transformers' modeling_clip.py. CLIPModel (a text tower, a vision tower, visual_projection and
text_projection without bias, a learned logit_scale, and the text x image similarity matmul),
CLIPTextModel / CLIPVisionModel (one tower) and CLIPTextModelWithProjection /
CLIPVisionModelWithProjection (one tower and its projection).

Text tower: token and learned position embeddings, pre-LayerNorm layers (layer_norm1, causal
self-attention with biased q/k/v/out projections, layer_norm2, fc1, quick_gelu, fc2), final_layer_norm;
the pooled output is the EOS token's state (a gather, no matmul). Vision tower: a Conv2d patch embedding
without bias (k = stride = patch_size), a class embedding and learned positions (sized by the config's
image_size; another --image-size interpolates them), pre_layrnorm, the same layers, post_layernorm on
the class token. The towers are reported apart: bucket and module prefix `text_model` / `vision_model`;
the projections, logit_scale and the similarity matmul are bucket `cls`. A file names a tower's tensors under
`text_model.` / `vision_model.` or, CLIPTextModel / CLIPVisionModel as transformers 5 writes them, bare
(TOWER_MARKERS); expected_tensors gives transformers 5's layout, docs/ties.md "The config cross-check".

ArchSpec's main sizes are the text tower's (the vision tower's for CLIPVisionModel*); both towers'
sizes are in ArchSpec.extra: t_layers, t_hidden, t_heads, t_inter, t_vocab, t_positions, v_layers,
v_hidden, v_heads, v_inter, image_size (analysed), native_image_size, patch_size, channels, proj."""
from __future__ import annotations

import re
from typing import Any

from ..errors import UsageError
from .framework import infer
from .framework.base import FROM_CLASS, ArchSpec, Cfg, Family, HeadRule, Sample, Shapes, Tensors, add_linear, add_norm
from .framework.ops import Builder
from .resnet import conv2d


# A saved CLIPConfig's sub-configs may omit any size: each is then CLIPTextConfig's / CLIPVisionConfig's default
# (FROM_CLASS: families/config_defaults.json, read as the sub-config's model_type).
def _text(c: Cfg) -> dict[str, int]:
    return dict(t_layers=c.int("num_hidden_layers", default=FROM_CLASS), t_hidden=c.int("hidden_size", default=FROM_CLASS),
                t_heads=c.int("num_attention_heads", default=FROM_CLASS),
                t_inter=c.int("intermediate_size", default=FROM_CLASS), t_vocab=c.int("vocab_size", default=FROM_CLASS),
                t_positions=c.int("max_position_embeddings", default=FROM_CLASS))


def _vision(c: Cfg) -> dict[str, int]:
    img, p = c.int("image_size", default=FROM_CLASS), c.int("patch_size", default=FROM_CLASS)
    if not 0 < p <= img:
        raise UsageError(f"{c.path}: config needs 0 < patch_size <= image_size (patch_size {p}, image_size {img})")
    return dict(v_layers=c.int("num_hidden_layers", default=FROM_CLASS), v_hidden=c.int("hidden_size", default=FROM_CLASS),
                v_heads=c.int("num_attention_heads", default=FROM_CLASS),
                v_inter=c.int("intermediate_size", default=FROM_CLASS),
                image_size=img, native_image_size=img, patch_size=p, channels=c.int("num_channels", default=FROM_CLASS))


def _spec(X: dict[str, int], common: dict[str, Any], act: str = "quick_gelu", where: str = "tensor shapes") -> ArchSpec:
    t = "t_layers" in X
    p = "t_" if t else "v_"
    h, a = X[p + "hidden"], X[p + "heads"]
    if h % a:
        raise UsageError(f"{where}: {'text' if t else 'vision'} hidden size {h} is not a multiple of its {a} heads")
    if "v_hidden" in X and X["v_hidden"] % X["v_heads"]:
        raise UsageError(f"{where}: vision hidden size {X['v_hidden']} is not a multiple of its {X['v_heads']} heads")
    return ArchSpec(layers=X[p + "layers"], hidden=h, heads=a, kv_heads=a, head_dim=h // a, intermediate=X[p + "inter"],
                    vocab=X.get("t_vocab", 0), positions=X.get("t_positions", 0), activation=act,
                    extra=tuple(X.items()), **common)


def from_config(c: Cfg) -> ArchSpec:
    act = str(c.get("hidden_act", default="quick_gelu"))
    if c.model_type == "clip":
        t = c.sub("text_config", "clip_text_model")
        X = {**_text(t), **_vision(c.sub("vision_config", "clip_vision_model")),
             "proj": c.int("projection_dim", default=FROM_CLASS)}
        act = str(t.get("hidden_act", default=FROM_CLASS))
    elif c.model_type == "clip_text_model":
        X = {**_text(c), "proj": c.int("projection_dim", default=FROM_CLASS)}
    else:
        X = {**_vision(c), "proj": c.int("projection_dim", default=FROM_CLASS)}
    return _spec(X, c.common, act, c.path)


# A tower's names: under `text_model.` / `vision_model.` in CLIPModel, the *WithProjection classes and every
# transformers 4 save; transformers 5 builds CLIPTextModel / CLIPVisionModel (and SigLIP's, which its
# conversion_mapping.py maps to them) without the prefix, and its save_pretrained writes them so when the model
# was built from a config. Loading a prefixed file applies the mapping's PrefixChange(prefix_to_remove=
# "text_model"), the rename `^text_model\.(.+)` -> `\1`; saving what was loaded so applies its reverse: both
# layouts are real files. Each tower is found by its embedding, whatever precedes it.
TOWER_MARKERS = {"text": "embeddings.token_embedding.weight", "vision": "embeddings.patch_embedding.weight"}
BARE_TOWERS = ("clip_text_model", "clip_vision_model", "siglip_text_model", "siglip_vision_model")


def tower_prefix(T: Tensors, tower: str) -> str | None:
    """What precedes the `tower` ("text", "vision") embedding's name: `text_model.`, `` (a transformers 5 save of
    CLIPTextModel), `module.text_model.`...; None when the file has no such tower."""
    m = TOWER_MARKERS[tower]
    return next((n[: -len(m)] for n in T if n.endswith(m) and (n == m or n[-len(m) - 1] == ".")), None)


def bare(s: ArchSpec) -> bool:
    """Does transformers 5 build the model without its tower's prefix (CLIPTextModel, CLIPVisionModel,
    SiglipTextModel, SiglipVisionModel: a tower model_type with no head)?"""
    return s.model_type in BARE_TOWERS and s.head == "base"


def unprefixed(out: Shapes) -> Shapes:
    """A one-tower template as transformers 5 writes it: each name less its `text_model.` / `vision_model.`."""
    return {n.split(".", 1)[1]: shape for n, shape in out.items()}


def tower_shapes(T: Tensors, p: str, pre: str) -> dict[str, int]:
    """A tower's sizes from its tensors (CLIP's and SigLIP's: siglip.py), under the ArchSpec.extra prefix `p`;
    `pre`: the tower's names' prefix (tower_prefix)."""
    q = "^" + re.escape(pre)
    f, h = infer.shape(T, rf"{q}encoder\.layers\.0\.mlp\.fc1\.weight$", f"{pre}encoder.layers.0.mlp.fc1")
    a, _ = infer.heads_for(h, 64)
    return {f"{p}layers": infer.count_layers(T, rf"{q}encoder\.layers\.(\d+)\."), f"{p}hidden": h, f"{p}heads": a,
            f"{p}inter": f}


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    X: dict[str, int] = {}
    if (pre := tower_prefix(T, "text")) is not None:
        q = "^" + re.escape(pre)
        X.update(tower_shapes(T, "t_", pre))
        X["t_vocab"], _ = infer.shape(T, rf"{q}embeddings\.token_embedding\.weight$", "the token embedding")
        X["t_positions"] = infer.shape(T, rf"{q}embeddings\.position_embedding\.weight$", "text positions")[0]
    if (pre := tower_prefix(T, "vision")) is not None:
        q = "^" + re.escape(pre)
        X.update(tower_shapes(T, "v_", pre))
        _, ch, p, _ = infer.shape(T, rf"{q}embeddings\.patch_embedding\.weight$", "the patch embedding")
        n = infer.shape(T, rf"{q}embeddings\.position_embedding\.weight$", "vision positions")[0]
        img = int(round((n - 1) ** 0.5)) * p
        X.update(image_size=img, native_image_size=img, patch_size=p, channels=ch)
    if not X:
        raise UsageError("cannot infer the architecture from tensor names: no CLIP tower; pass --config")
    proj = infer.find(T, r"(^|\.)(text|visual)_projection\.weight$")
    X["proj"] = proj.shape[0] if proj is not None else 512
    # what the stored towers show: both is CLIPModel, one is CLIPTextModel / CLIPVisionModel
    mt = "clip" if "t_layers" in X and "v_layers" in X else "clip_text_model" if "t_layers" in X else "clip_vision_model"
    common = dict(common, model_type=mt, head="base" if mt == "clip" else common["head"],
                  assumptions=("no config: head_dim assumed 64 (head count only affects attention-score memory)",))
    return _spec(X, common)


def encoder(B: Builder, tower: str, p: str, n: int, causal: bool) -> None:
    """A tower's encoder layers (CLIP's, and SigLIP's: siglip.py), sizes from ArchSpec.extra under prefix `p`."""
    X = dict(B.s.extra)
    L, h, a, f = X[p + "layers"], X[p + "hidden"], X[p + "heads"], X[p + "inter"]
    tok = (B.b, n)
    lp = f"{tower}_model.encoder.layers[{L}]"
    B.norm(f"{lp}.layer_norm1", tower, tok, h, L, residual=False)
    for m in ("q_proj", "k_proj", "v_proj"):
        B.linear(f"{lp}.self_attn.{m}", tower, tok, h, h, True, L)
    B.attention(f"{lp}.self_attn", tower, a, n, n, h // a, L, causal=causal)
    B.linear(f"{lp}.self_attn.out_proj", tower, tok, h, h, True, L)
    B.norm(f"{lp}.layer_norm2", tower, tok, h, L)
    B.linear(f"{lp}.mlp.fc1", tower, tok, h, f, True, L)
    B.activation(f"{lp}.mlp act", tower, tok, f, B.s.activation, L)
    B.linear(f"{lp}.mlp.fc2 (+residual)", tower, tok, f, h, True, L)


def build(B: Builder) -> None:
    s = B.s
    X = dict(s.extra)
    text, vision = "t_layers" in X, "v_layers" in X
    projected = s.model_type == "clip" or s.head == "projection"
    if vision:   # CLIPModel runs the vision tower first
        h = X["v_hidden"]
        side = conv2d(B, "vision_model.embeddings.patch_embedding", "vision", X["channels"], h, X["patch_size"],
                      X["patch_size"], X["image_size"], 0)
        n = side * side + 1
        native = (X["native_image_size"] // X["patch_size"]) ** 2 + 1
        B.add("vision_model.embeddings.class_embedding + position_embedding", "embedding", "vision", 1, (B.b, n - 1, h),
              (B.b, n, h), params=h + native * h, ew=B.b * n * h)
        B.norm("vision_model.pre_layrnorm", "vision", (B.b, n), h, residual=False)
        encoder(B, "vision", "v_", n, causal=False)
        B.norm("vision_model.post_layernorm (class token)", "vision", (B.b,), h, residual=False)
        if projected:
            B.linear("visual_projection", "cls", (B.b,), h, X["proj"], False)
    if text:
        h = X["t_hidden"]
        B.embedding("text_model.embeddings.token_embedding", "text", X["t_vocab"], h, B.seq)
        B.embedding("text_model.embeddings.position_embedding", "text", X["t_positions"], h, B.seq)
        encoder(B, "text", "t_", B.seq, causal=True)
        B.norm("text_model.final_layer_norm", "text", (B.b, B.seq), h)
        if projected:
            B.linear("text_projection", "cls", (B.b,), h, X["proj"], False)
    if s.model_type == "clip":
        # normalised embeddings, logits_per_text = text @ image.T x exp(logit_scale): a (b x P) by (P x b) mm
        B.add("logit_scale + similarity (text @ image.T)", "linear", "cls", 1, (B.b, X["proj"]), (B.b, B.b), params=1,
              macs=B.b * X["proj"] * B.b, ew=B.b * B.b + 6 * B.b * X["proj"])


def tower_tensors(out: Shapes, pre: str, L: int, h: int, f: int) -> None:
    """A tower's expected encoder layers (CLIP's and SigLIP's)."""
    for i in range(L):
        q = f"{pre}.encoder.layers.{i}."
        for m in ("q_proj", "k_proj", "v_proj", "out_proj"):
            add_linear(out, q + "self_attn." + m, h, h)
        add_norm(out, q + "layer_norm1", h)
        add_linear(out, q + "mlp.fc1", f, h)
        add_linear(out, q + "mlp.fc2", h, f)
        add_norm(out, q + "layer_norm2", h)


def expected_tensors(s: ArchSpec) -> Shapes | None:
    """CLIPModel (both towers, both projections, logit_scale), CLIPTextModel / CLIPVisionModel (one tower,
    bare: transformers 5's layout), and their *WithProjection classes (one tower and its projection, bias-free)."""
    if s.head not in ("base", "projection"):
        return None
    X = dict(s.extra)
    projected = s.model_type == "clip" or s.head == "projection"
    out: Shapes = {"logit_scale": ()} if s.model_type == "clip" else {}
    if "t_layers" in X:
        h = X["t_hidden"]
        out["text_model.embeddings.token_embedding.weight"] = (X["t_vocab"], h)
        out["text_model.embeddings.position_embedding.weight"] = (X["t_positions"], h)
        tower_tensors(out, "text_model", X["t_layers"], h, X["t_inter"])
        add_norm(out, "text_model.final_layer_norm", h)
    if "v_layers" in X:
        h, p = X["v_hidden"], X["patch_size"]
        out["vision_model.embeddings.class_embedding"] = (h,)
        out["vision_model.embeddings.patch_embedding.weight"] = (h, X["channels"], p, p)
        out["vision_model.embeddings.position_embedding.weight"] = ((X["native_image_size"] // p) ** 2 + 1, h)
        add_norm(out, "vision_model.pre_layrnorm", h)
        tower_tensors(out, "vision_model", X["v_layers"], h, X["v_inter"])
        add_norm(out, "vision_model.post_layernorm", h)
    if projected and "v_layers" in X:
        add_linear(out, "visual_projection", X["proj"], X["v_hidden"], bias=False)
    if projected and "t_layers" in X:
        add_linear(out, "text_projection", X["proj"], X["t_hidden"], bias=False)
    return unprefixed(out) if bare(s) else out


_TEXT = dict(vocab_size=99, hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_attention_heads=4,
             max_position_embeddings=40, projection_dim=24)
_VISION = dict(hidden_size=48, intermediate_size=40, num_hidden_layers=3, num_attention_heads=6, image_size=30,
               patch_size=3, projection_dim=24)

FAMILY = Family(
    name="clip",
    before=("llama",),   # tried before them: its text_model.encoder.layers.N.self_attn.q_proj names match llama's signature
    model_types=("clip", "clip_text_model", "clip_vision_model"),
    # a tower under its prefix, or bare at the root (TOWER_MARKERS; a wrapper's bare `vision_tower.embeddings...` is not
    # one: LLaVA's names read as its language model's)
    signature=r"(^|\.)(text|vision)_model\.(embeddings\.(token|patch)_embedding|encoder\.layers\.\d+\.self_attn\.q_proj)\.weight$"
              r"|^embeddings\.(token|patch)_embedding\.weight$",
    from_config=from_config, from_tensors=from_tensors, build=build, expected_tensors=expected_tensors,
    heads=("base", "projection"),
    head_rules=(HeadRule(r"(^|\.)(text|visual)_projection\.weight$", "projection", unless=r"(^|\.)logit_scale$",
                         otherwise="base"),),
    samples=(
        Sample("CLIPConfig", dict(text_config=_TEXT, vision_config=_VISION, projection_dim=24), ("CLIPModel",)),
        Sample("CLIPTextConfig", _TEXT, ("CLIPTextModel", "CLIPTextModelWithProjection")),
        Sample("CLIPVisionConfig", _VISION, ("CLIPVisionModel", "CLIPVisionModelWithProjection")),
    ),
)
