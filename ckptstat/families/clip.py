"""CLIP: transformers' modeling_clip.py. CLIPModel (a text tower, a vision tower, visual_projection and
text_projection without bias, a learned logit_scale, and the text x image similarity matmul),
CLIPTextModel / CLIPVisionModel (one tower) and CLIPTextModelWithProjection /
CLIPVisionModelWithProjection (one tower and its projection); CLIPForImageClassification (head "imgcls": the vision
tower alone, under `vision_model.`, a classifier on the mean of the patch tokens). MetaCLIP 2 (modeling_metaclip_2.py,
model types metaclip_2, metaclip_2_text_model, metaclip_2_vision_model) is CLIP's classes under other names and default
sizes (TOWER_TYPES).

Text tower: token and learned position embeddings, pre-LayerNorm layers (layer_norm1, causal
self-attention with biased q/k/v/out projections, layer_norm2, fc1, quick_gelu, fc2), final_layer_norm;
the pooled output is the EOS token's state (a gather, no matmul). Vision tower: a Conv2d patch embedding
without bias (k = stride = patch_size), a class embedding and learned positions (sized by the config's
image_size; another --image-size interpolates them), pre_layrnorm, the same layers, post_layernorm on
the class token. The towers are reported apart: bucket and module prefix `text_model` / `vision_model`;
the projections, logit_scale and the similarity matmul are bucket `cls`. A file names a tower's tensors under
`text_model.` / `vision_model.` or, CLIPTextModel / CLIPVisionModel as transformers 5 writes them, bare
(TOWER_MARKERS); expected_tensors gives transformers 5's layout, docs/ties.md "The config cross-check".

ArchSpec's main sizes are the text tower's (the vision tower's for CLIPVisionModel*); both towers' sizes are a
Towers variant (TextTower, VisionTower), the side analysed ArchSpec.image_size. The architecture is stated once, in
`walk` (each tower a framework/recorder.py Recorder under its prefix, the layers walk_vision's encoder layers under
CLIP's names, `LAYER`): the op template and the expected tensors derive from it, GIT's image encoder's from `vision_walk`."""
from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any

from ..errors import UsageError
from .framework import infer, walk_names
from .framework.archspec import Variant
from .framework.base import FROM_CLASS, ArchSpec, Cfg, Family, HeadRule, Sample, Shapes, Tensors
from .framework.layout_base import Module, module_shapes
from .framework.ops import Builder
from .framework.recorder import Recorder
from .framework.walk_names import pattern, signature, walked
from .framework.walk_vision import EncoderLayer, LayerPaths, conv, encoder_layers


@dataclass(frozen=True)
class Tower:
    """One tower's encoder sizes (CLIP's, SigLIP's: siglip.py)."""
    layers: int
    hidden: int
    heads: int
    inter: int


@dataclass(frozen=True)
class TextTower(Tower):
    vocab: int
    positions: int
    proj: int = 0             # SigLIP's text head width (projection_size); CLIP's projection is the model's (Towers.proj)


@dataclass(frozen=True)
class VisionTower(Tower):
    native_image_size: int    # the config's image_size, which sizes the position table
    patch_size: int
    channels: int
    head: bool = False        # SigLIP's attention-pooling head (vision_use_head)


@dataclass(frozen=True)
class Towers(Variant):
    """A two-tower model's towers (None: the file has no such tower) and CLIP's projection_dim (SigLIP: 0)."""
    text: TextTower | None
    vision: VisionTower | None
    proj: int = 0


def towers(s: ArchSpec) -> Towers:
    return s.variant_as(Towers)


# A saved CLIPConfig's sub-configs may omit any size: each is then CLIPTextConfig's / CLIPVisionConfig's default
# (FROM_CLASS: families/config_defaults.json, read as the sub-config's model_type).
def _text(c: Cfg) -> TextTower:
    return TextTower(layers=c.int("num_hidden_layers", default=FROM_CLASS), hidden=c.int("hidden_size", default=FROM_CLASS),
                     heads=c.int("num_attention_heads", default=FROM_CLASS),
                     inter=c.int("intermediate_size", default=FROM_CLASS), vocab=c.int("vocab_size", default=FROM_CLASS),
                     positions=c.int("max_position_embeddings", default=FROM_CLASS))


def vision_tower(c: Cfg) -> VisionTower:
    img, p = c.int("image_size", default=FROM_CLASS), c.int("patch_size", default=FROM_CLASS)
    if not 0 < p <= img:
        raise UsageError(f"{c.path}: config needs 0 < patch_size <= image_size (patch_size {p}, image_size {img})")
    return VisionTower(layers=c.int("num_hidden_layers", default=FROM_CLASS), hidden=c.int("hidden_size", default=FROM_CLASS),
                       heads=c.int("num_attention_heads", default=FROM_CLASS),
                       inter=c.int("intermediate_size", default=FROM_CLASS),
                       native_image_size=img, patch_size=p, channels=c.int("num_channels", default=FROM_CLASS))


def tower_spec(X: Towers, common: dict[str, Any], act: str) -> ArchSpec:
    """The spec of a two-tower model (CLIP's, SigLIP's): its main sizes the text tower's, else the vision tower's."""
    main = X.text or X.vision
    if main is None:
        raise ValueError("a two-tower spec needs a tower")
    return ArchSpec(layers=main.layers, hidden=main.hidden, heads=main.heads, kv_heads=main.heads,
                    head_dim=main.hidden // main.heads, intermediate=main.inter, vocab=X.text.vocab if X.text else 0,
                    positions=X.text.positions if X.text else 0, activation=act,
                    image_size=X.vision.native_image_size if X.vision else 0, variant=X, **common)


def _spec(X: Towers, common: dict[str, Any], act: str = "quick_gelu", where: str = "tensor shapes") -> ArchSpec:
    for name, t in (("text", X.text), ("vision", X.vision)):
        if t is not None and t.hidden % t.heads:
            raise UsageError(f"{where}: {name} hidden size {t.hidden} is not a multiple of its {t.heads} heads")
    return tower_spec(X, common, act)


def from_config(c: Cfg) -> ArchSpec:
    act = str(c.get("hidden_act", default="quick_gelu"))
    proj = c.int("projection_dim", default=FROM_CLASS)
    if c.model_type in TOWER_TYPES and c.head == "imgcls":   # *ForImageClassification: the vision tower alone
        X = Towers(None, vision_tower(c.sub("vision_config", TOWER_TYPES[c.model_type][1])), proj)
    elif c.model_type in TOWER_TYPES:
        text_type, vision_type = TOWER_TYPES[c.model_type]
        t = c.sub("text_config", text_type)
        X = Towers(_text(t), vision_tower(c.sub("vision_config", vision_type)), proj)
        act = str(t.get("hidden_act", default=FROM_CLASS))
    elif c.model_type in TEXT_TYPES:
        X = Towers(_text(c), None, proj)
    else:
        X = Towers(None, vision_tower(c), proj)
    return _spec(X, c.common, act, c.path)


# A tower's names: under `text_model.` / `vision_model.` in CLIPModel, the *WithProjection classes and every
# transformers 4 save; transformers 5 builds CLIPTextModel / CLIPVisionModel (and SigLIP's, which its
# conversion_mapping.py maps to them) without the prefix, and its save_pretrained writes them so when the model
# was built from a config. Loading a prefixed file applies the mapping's PrefixChange(prefix_to_remove=
# "text_model"), the rename `^text_model\.(.+)` -> `\1`; saving what was loaded so applies its reverse: both
# layouts are real files. Each tower is found by its embedding, whatever precedes it.
TOWER_MARKERS = {"text": "embeddings.token_embedding.weight", "vision": "embeddings.patch_embedding.weight"}
# the two-tower model types and their towers' (each a sub-config's model_type, whose defaults it takes)
TOWER_TYPES = {"clip": ("clip_text_model", "clip_vision_model"),
               "metaclip_2": ("metaclip_2_text_model", "metaclip_2_vision_model")}
TEXT_TYPES = tuple(text for text, _ in TOWER_TYPES.values())
BARE_TOWERS = (*(t for pair in TOWER_TYPES.values() for t in pair), "siglip_text_model", "siglip_vision_model")


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


def tower_shapes(T: Tensors, pre: str) -> Tower:
    """A tower's sizes from its tensors (CLIP's and SigLIP's: siglip.py); `pre`: the tower's names' prefix
    (tower_prefix), the layers' paths the walk's (LAYER, as TOWERS records it)."""
    q, up = "^" + re.escape(pre), LAYER.paths.up
    f, h = infer.shape(T, pattern(TOWERS["text"], up, under=q), f"{pre}{LAYER.paths.layers}.0.{up}")
    a, _ = infer.heads_for(h, 64)
    return Tower(layers=infer.count_layers(T, walk_names.layers(TOWERS["text"], up, under=q)), hidden=h, heads=a, inter=f)


def vision_shapes(T: Tensors, pre: str) -> VisionTower:
    """A vision tower's sizes from its tensors under `pre` (tower_prefix; GIT's image encoder)."""
    q, V = "^" + re.escape(pre), TOWERS["vision"]
    _, ch, p, _ = infer.shape(T, pattern(V, "embeddings.patch_embedding", under=q), "the patch embedding")
    n = infer.shape(T, pattern(V, "embeddings.position_embedding.weight", under=q), "vision positions")[0]
    return VisionTower(**asdict(tower_shapes(T, pre)), native_image_size=int(round((n - 1) ** 0.5)) * p, patch_size=p,
                       channels=ch)


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    text = vision = None
    if (pre := tower_prefix(T, "text")) is not None:
        q, W = "^" + re.escape(pre), TOWERS["text"]
        V, _ = infer.shape(T, pattern(W, "embeddings.token_embedding", under=q), "the token embedding")
        P = infer.shape(T, pattern(W, "embeddings.position_embedding", under=q), "text positions")[0]
        text = TextTower(**asdict(tower_shapes(T, pre)), vocab=V, positions=P)
    if (pre := tower_prefix(T, "vision")) is not None:
        vision = vision_shapes(T, pre)
    if text is None and vision is None:
        raise UsageError("cannot infer the architecture from tensor names: no CLIP tower; pass --config")
    proj = infer.find(T, "|".join(pattern(WALKED, m) for m in ("text_projection", "visual_projection")))
    # what the stored towers show: both is CLIPModel, one is CLIPTextModel / CLIPVisionModel
    mt = "clip" if text and vision else "clip_text_model" if text else "clip_vision_model"
    common = dict(common, model_type=mt, head="base" if mt == "clip" else common["head"], num_labels=infer.num_labels(T),
                  assumptions=("no config: head_dim assumed 64 (head count only affects attention-score memory)",))
    return _spec(Towers(text, vision, proj.shape[0] if proj is not None else 512), common)


# CLIP's layers (SigLIP's too): layer_norm1, self_attn.{q,k,v}_proj, self_attn.out_proj, layer_norm2, mlp.fc1, mlp.fc2
LAYER = EncoderLayer(LayerPaths(layers="encoder.layers", attn_in="layer_norm1", attn="self_attn", q="q_proj", k="k_proj",
                                v="v_proj", o="self_attn.out_proj", mlp_in="layer_norm2", up="mlp.fc1", act="mlp act",
                                down="mlp.fc2"))


def layers(w: Recorder, t: Tower, n: int, causal: bool) -> None:
    """A tower's encoder layers over n tokens (CLIP's, SigLIP's: siglip.py): q/k/v biased."""
    encoder_layers(w, LAYER, t.layers, n, t.hidden, t.heads, t.inter, w.B.s.activation, True, causal=causal)


def text_embeddings(w: Recorder, text: TextTower) -> None:
    """The text tower's token and learned position tables (CLIP's, SigLIP's), over B.seq tokens."""
    B, tok = w.B, w.tok + (text.hidden,)
    w.embedding("embeddings.token_embedding", text.vocab, text.hidden, B.seq)
    w.embedding("embeddings.position_embedding", text.positions, text.hidden, B.seq)
    B.add(w.label("embeddings") + " token + positions", "activation", w.bucket, 1, tok, tok, ew=math.prod(tok),
          extra_in=B.seq * text.hidden)


def vision_walk(w: Recorder, vision: VisionTower, side: int) -> None:
    """CLIP's vision tower (GIT's image encoder too) on a side x side image: a bias-free patch conv, the class embedding
    and learned positions (sized by the config's image_size), pre_layrnorm, the layers, post_layernorm on the class
    token."""
    h, p, b = vision.hidden, vision.patch_size, w.B.b
    n = conv(w, "embeddings.patch_embedding", vision.channels, h, p, side, False) ** 2 + 1
    w.params("embeddings.class_embedding + position_embedding", (("embeddings.class_embedding", (h,)),
             ("embeddings.position_embedding.weight", ((vision.native_image_size // p) ** 2 + 1, h))), (b, n - 1, h),
             (b, n, h), ew=b * n * h)
    w.norm("pre_layrnorm", (b, n), h, residual=False)
    layers(w, vision, n, causal=False)
    w.norm("post_layernorm", (b,), h, residual=False, note=" (class token)")


def text_walk(w: Recorder, text: TextTower) -> None:
    """CLIP's text tower over B.seq tokens: the embeddings, the causal layers, final_layer_norm."""
    text_embeddings(w, text)
    layers(w, text, w.B.seq, causal=True)
    w.norm("final_layer_norm", (w.B.b, w.B.seq), text.hidden, residual=False)


def vision_tensors(out: Shapes, pre: str, vision: VisionTower, s: ArchSpec) -> None:
    """A vision tower's expected tensors under `pre` (GIT's `git.image_encoder.vision_model`), from its walk."""
    w = Recorder(Builder(s, 1, 1, 1, 1, 1), "vision", pre + ".")
    vision_walk(w, vision, vision.native_image_size)
    out.update(w.shapes())


def walk(B: Builder) -> list[Module]:
    """The forward at B.s's sizes (CLIPModel runs the vision tower first): writes its ops to B and returns the modules it
    met."""
    s = B.s
    X = towers(s)
    text, vision = X.text, X.vision
    two = s.model_type in TOWER_TYPES and s.head == "base"   # CLIPModel
    projected = two or s.head == "projection"
    modules: list[Module] = []
    if vision:
        w = Recorder(B, "vision", PREFIXES["vision"])
        vision_walk(w, vision, s.image_size)
        if projected:
            w.linear("visual_projection", (B.b,), vision.hidden, X.proj, False, bucket="cls", top=True)
        if s.head == "imgcls" and s.num_labels:
            w.linear("classifier", (B.b,), vision.hidden, s.num_labels, True, note=" (mean of the patch tokens)",
                     bucket="cls", top=True)
        modules += w.modules
    if text:
        w = Recorder(B, "text", PREFIXES["text"])
        text_walk(w, text)
        if projected:
            w.linear("text_projection", (B.b,), text.hidden, X.proj, False, bucket="cls", top=True)
        modules += w.modules
    if two:
        # normalised embeddings, logits_per_text = text @ image.T x exp(logit_scale): a (b x P) by (P x b) mm
        modules.append(Module("logit_scale", None, (("", ()),), top=True))
        B.add("logit_scale + similarity (text @ image.T)", "linear", "cls", 1, (B.b, X.proj), (B.b, B.b), params=1,
              macs=B.b * X.proj * B.b, ew=B.b * B.b + 6 * B.b * X.proj)
    return modules


def build(B: Builder) -> None:
    walk(B)


def expected_tensors(s: ArchSpec) -> Shapes | None:
    """CLIPModel (both towers, both projections, logit_scale), CLIPTextModel / CLIPVisionModel (one tower,
    bare: transformers 5's layout), their *WithProjection classes (one tower and its projection, bias-free) and
    CLIPForImageClassification (the vision tower and its classifier)."""
    if s.head not in FAMILY.heads:
        return None
    return tower_shapes_of(walk, s)


# each tower's module in the two-tower models (its names' prefix there)
PREFIXES = {"text": "text_model.", "vision": "vision_model."}
_TINY = Towers(TextTower(1, 4, 1, 4, vocab=4, positions=4),
               VisionTower(1, 4, 1, 4, native_image_size=4, patch_size=4, channels=1), proj=4)


def tower_walks(tiny: Towers, text: Callable[[Recorder, Any], object], vision: Callable[[Recorder, Any, int], object],
                family: str) -> dict[str, Recorder]:
    """The walks of each of `tiny`'s towers (`text`, `vision`: the family's tower walks), their paths bare (as under any
    prefix: tower_prefix)."""
    def one(kind: str) -> Recorder:
        def run(B: Builder) -> Recorder:
            w = Recorder(B, kind)
            if tiny.text and kind == "text":
                text(w, tiny.text)
            elif tiny.vision:
                vision(w, tiny.vision, tiny.vision.native_image_size)
            return w
        return walked(run, family)
    return {kind: one(kind) for kind in ("text", "vision")}


# the walks of a tiny CLIPModel and of its towers: the paths of the name signature and from_tensors' look-ups
WALKED = walked(walk, "clip", head="projection", image_size=4, variant=_TINY)
TOWERS = tower_walks(_TINY, text_walk, vision_walk, "clip")


def tower_signature(towers: dict[str, Recorder], kind: str, name: str, suffix: str = "weight", bare: bool = False) -> str:
    """A name signature of a tower's module's `suffix` parameter, under the tower's prefix (PREFIXES) or, `bare`, at the
    root (a one-tower model as transformers 5 writes it); `towers`: the walks of each (CLIP's, SigLIP's)."""
    under = "^" if bare else rf"(^|[./]){re.escape(PREFIXES[kind].rstrip('.'))}[./]"
    return signature(towers[kind], name, suffix=suffix, under=under)


# the towers' embeddings (TOWER_MARKERS) and their first layer's query
MARKERS = tuple((kind, name.removesuffix(".weight")) for kind, name in TOWER_MARKERS.items())
Q_PROJ = f"{LAYER.paths.attn}.{LAYER.paths.q}"


def tower_shapes_of(walker: Callable[[Builder], list[Module]], s: ArchSpec) -> Shapes:
    """A two-tower family's expected tensors from its walk (CLIP's, SigLIP's) at the config's image size, each one-tower
    model's names bare as transformers 5 writes them."""
    X = towers(s)
    at = replace(s, image_size=X.vision.native_image_size) if X.vision else s
    out = module_shapes(walker(Builder(at, 1, 1, 1, 1, 1)), "")
    return unprefixed(out) if bare(s) else out


_TEXT = dict(vocab_size=99, hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_attention_heads=4,
             max_position_embeddings=40, projection_dim=24)
_VISION = dict(hidden_size=48, intermediate_size=40, num_hidden_layers=3, num_attention_heads=6, image_size=30,
               patch_size=3, projection_dim=24)

FAMILY = Family(
    name="clip",
    before=("llama",),   # tried before them: its text_model.encoder.layers.N.self_attn.q_proj names match llama's signature
    model_types=tuple(t for mt, pair in TOWER_TYPES.items() for t in (mt, *pair)),
    # a tower under its prefix, or bare at the root (TOWER_MARKERS; a wrapper's bare `vision_tower.embeddings...` is not
    # one: LLaVA's names read as its language model's)
    signature="|".join([tower_signature(TOWERS, kind, name) for kind, name in (*MARKERS, ("text", Q_PROJ), ("vision", Q_PROJ))]
                       + [tower_signature(TOWERS, kind, name, bare=True) for kind, name in MARKERS]),
    from_config=from_config, from_tensors=from_tensors, build=build, expected_tensors=expected_tensors,
    heads=("base", "projection", "imgcls"),
    head_rules=(HeadRule(r"(^|\.)(text|visual)_projection\.weight$", "projection", unless=r"(^|\.)logit_scale$",
                         otherwise="base"), HeadRule(r"^classifier\.weight$", "imgcls")),
    samples=(
        Sample("CLIPConfig", dict(text_config=_TEXT, vision_config=_VISION, projection_dim=24, num_labels=5),
               ("CLIPModel", "CLIPForImageClassification")),
        Sample("CLIPTextConfig", _TEXT, ("CLIPTextModel", "CLIPTextModelWithProjection")),
        Sample("CLIPVisionConfig", _VISION, ("CLIPVisionModel", "CLIPVisionModelWithProjection")),
        Sample("MetaClip2Config", dict(text_config=_TEXT, vision_config=_VISION, projection_dim=24, num_labels=5),
               ("MetaClip2Model", "MetaClip2ForImageClassification")),
        Sample("MetaClip2TextConfig", _TEXT, ("MetaClip2TextModel", "MetaClip2TextModelWithProjection")),
        Sample("MetaClip2VisionConfig", _VISION, ("MetaClip2VisionModel", "MetaClip2VisionModelWithProjection")),
    ),
)
