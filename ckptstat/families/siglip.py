"""SigLIP (transformers modeling_siglip.py, configuration_siglip.py): SiglipModel (a text tower, a vision tower,
logit_scale and logit_bias, the text x image similarity matmul), SiglipTextModel and SiglipVisionModel (one tower).

Both towers are CLIP's encoder layers (layer_norm1, biased q/k/v/out_proj, layer_norm2, fc1 / gelu_pytorch_tanh /
fc2), without a causal mask in the text tower. Vision: a Conv2d patch embedding with bias (k = stride =
patch_size), learned positions for the patches only (no class token; sized by the config's image_size, another
--image-size interpolates them: no matmul), post_layernorm, and, unless vision_use_head is false, the attention
pooling head: a learned probe (1 query) attends the patches through torch's nn.MultiheadAttention (in_proj:
the probe's q and the patches' fused k and v, out_proj), then layernorm and a residual MLP. Text: token and
learned position embeddings, final_layer_norm, and `head` Linear(h, projection_size) on the last token.

ArchSpec's main sizes are the text tower's (the vision tower's for siglip_vision_model); both towers' sizes are
clip.py's Towers (TextTower.proj: the text head's width, VisionTower.head: the pooling head), the side analysed
ArchSpec.image_size. The architecture is stated once, in `walk` (clip.py's tower layers and text embeddings, each tower a
framework/recorder.py Recorder): the op template and the expected tensors derive from it."""
from __future__ import annotations

import re
from dataclasses import asdict, replace
from typing import Any

from ..errors import UsageError
from . import clip
from .clip import TextTower, Tower, Towers, VisionTower
from .framework import infer
from .framework.base import FROM_CLASS, ArchSpec, Cfg, Family, HeadRule, Sample, Shapes, Tensors
from .framework.layout_base import Module
from .framework.ops import Builder
from .framework.recorder import Recorder
from .framework.walk_names import pattern, walked
from .framework.walk_vision import conv


# Sizes a saved SiglipConfig's sub-config omits are SiglipTextConfig's / SiglipVisionConfig's defaults (FROM_CLASS).
def _tower(c: Cfg) -> Tower:
    h, a = c.int("hidden_size", default=FROM_CLASS), c.int("num_attention_heads", default=FROM_CLASS)
    if h % a:
        raise UsageError(f"{c.path}: hidden_size {h} is not a multiple of num_attention_heads {a}")
    return Tower(layers=c.int("num_hidden_layers", default=FROM_CLASS), hidden=h, heads=a,
                 inter=c.int("intermediate_size", default=FROM_CLASS))


def _text(c: Cfg) -> TextTower:
    t = _tower(c)
    return TextTower(**asdict(t), vocab=c.int("vocab_size", default=FROM_CLASS),
                     positions=c.int("max_position_embeddings", default=FROM_CLASS),
                     proj=c.int("projection_size", default=t.hidden))   # None in the class: the hidden size


def vision_tower(c: Cfg) -> VisionTower:
    """A SigLIP vision tower's sizes from its SiglipVisionConfig (T5Gemma2's encoder's too)."""
    img, p = c.int("image_size", default=FROM_CLASS), c.int("patch_size", default=FROM_CLASS)
    if not 0 < p <= img:
        raise UsageError(f"{c.path}: config needs 0 < patch_size <= image_size (patch_size {p}, image_size {img})")
    return VisionTower(**asdict(_tower(c)), native_image_size=img, patch_size=p,
                       channels=c.int("num_channels", default=FROM_CLASS),
                       head=bool(c.get("vision_use_head", default=FROM_CLASS)))


def from_config(c: Cfg) -> ArchSpec:
    if c.model_type == "siglip" and c.head == "imgcls":   # SiglipForImageClassification: the vision tower alone
        v = c.sub("vision_config", "siglip_vision_model")
        X, act = Towers(None, vision_tower(v)), str(v.get("hidden_act", default=FROM_CLASS))
    elif c.model_type == "siglip":
        t, v = c.sub("text_config", "siglip_text_model"), c.sub("vision_config", "siglip_vision_model")
        tt, vt = _text(t), vision_tower(v)
        if tt.proj != vt.hidden:
            raise UsageError(f"{c.path}: text projection_size {tt.proj} differs from the vision hidden_size "
                             f"{vt.hidden} (SiglipModel multiplies the two embeddings)")
        X = Towers(tt, vt)
        act = str(t.get("hidden_act", default=FROM_CLASS))
    else:   # siglip_text_model / siglip_vision_model
        X = Towers(_text(c), None) if c.model_type == "siglip_text_model" else Towers(None, vision_tower(c))
        act = str(c.get("hidden_act", default=FROM_CLASS))
    return clip.tower_spec(X, c.common, act)


def vision_shapes(T: Tensors, pre: str) -> VisionTower:
    """A SigLIP vision tower's sizes from its tensors under `pre` (clip.tower_prefix; T5Gemma2's encoder's too)."""
    q, W = "^" + re.escape(pre), TOWERS["vision"]
    tower = clip.tower_shapes(T, pre)
    conv = infer.shape(T, pattern(W, "embeddings.patch_embedding", under=q), "the patch embedding")
    if len(conv) != 4:   # SigLIP2's patch embedding is a Linear over flattened patches
        raise UsageError(f"{pre}embeddings.patch_embedding.weight is {list(conv)}, not a Conv2d kernel: not a SigLIP "
                         "vision tower (SigLIP2's Linear patch embedding is not modelled); pass --config")
    _, ch, p, _ = conv
    n = infer.shape(T, pattern(W, "embeddings.position_embedding.weight", under=q), "vision positions")[0]
    return VisionTower(**asdict(tower), native_image_size=int(round(n ** 0.5)) * p, patch_size=p, channels=ch,
                       head=infer.has(T, pattern(W, "head.probe", under=q)))


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    text = vision = None
    if (pre := clip.tower_prefix(T, "text")) is not None:   # `text_model.`, or bare (clip.TOWER_MARKERS)
        q, W = "^" + re.escape(pre), TOWERS["text"]
        text = TextTower(**asdict(clip.tower_shapes(T, pre)),
                         vocab=infer.shape(T, pattern(W, "embeddings.token_embedding", under=q), "the token embedding")[0],
                         positions=infer.shape(T, pattern(W, "embeddings.position_embedding", under=q), "text positions")[0],
                         proj=infer.shape(T, pattern(W, "head", under=q), "the text head")[0])
    if (pre := clip.tower_prefix(T, "vision")) is not None:
        vision = vision_shapes(T, pre)
    if text is None and vision is None:
        raise UsageError("cannot infer the architecture from tensor names: no SigLIP tower; pass --config")
    mt = "siglip" if text and vision else "siglip_text_model" if text else "siglip_vision_model"
    cls = infer.find(T, pattern(WALKED_CLS, "classifier", under="^"))
    common = dict(common, model_type=mt, head="imgcls" if cls is not None and mt == "siglip_vision_model" else "base",
                  num_labels=cls.shape[0] if cls is not None and len(cls.shape) == 2 else 2,
                  assumptions=("no config: head_dim assumed 64 (head count only affects attention-score memory)",))
    return clip.tower_spec(Towers(text, vision), common, "gelu_pytorch_tanh")


def _pooling_head(w: Recorder, v: VisionTower, n: int) -> None:
    """SiglipMultiheadAttentionPoolingHead: one probe query over the n patch tokens (torch's multi-head
    attention: q from the probe, k and v fused from the patches as key is value), out_proj, layernorm, MLP."""
    h, a, f, B = v.hidden, v.heads, v.inter, w.B
    b = B.b
    w.params("head.probe", (("head.probe", (1, 1, h)),), (1, 1, h), (b, 1, h), ew=0)
    # in_proj_weight [3h, h] and in_proj_bias [3h]: the probe's q, the patches' k and v
    w.record("head.attention", (("in_proj_weight", (3 * h, h)), ("in_proj_bias", (3 * h,))))
    B.linear(w.label("head.attention.in_proj (q, probe)"), w.bucket, (b, 1), h, h, True)
    B.linear(w.label("head.attention.in_proj (k, v)"), w.bucket, (b, n), h, 2 * h, True)
    B.attention(w.label("head.attention"), w.bucket, a, 1, n, h // a, 1, causal=False)
    w.linear("head.attention.out_proj", (b, 1), h, h, True)
    w.norm("head.layernorm", (b, 1), h, residual=False)
    w.linear("head.mlp.fc1", (b, 1), h, f, True)
    B.activation(w.label("head.mlp act"), w.bucket, (b, 1), f, B.s.activation)
    w.linear("head.mlp.fc2", (b, 1), f, h, True, note=" (+residual)")


def vision_walk(w: Recorder, vision: VisionTower, side: int) -> int:
    """SigLIP's vision tower on a side x side image: the biased patch conv, learned positions (sized by the config's
    image_size), the layers, post_layernorm and (vision_use_head) the pooling head; returns the patches' count."""
    B, h, p = w.B, vision.hidden, vision.patch_size
    n = conv(w, "embeddings.patch_embedding", vision.channels, h, p, side, True) ** 2
    w.params("embeddings.position_embedding", (("embeddings.position_embedding.weight",
                                                ((vision.native_image_size // p) ** 2, h)),),
             (B.b, n, h), (B.b, n, h), ew=B.b * n * h)
    clip.layers(w, vision, n, causal=False)
    w.norm("post_layernorm", (B.b, n), h, residual=False)
    if vision.head:
        _pooling_head(w, vision, n)
    return n


def text_walk(w: Recorder, text: TextTower) -> None:
    """SigLIP's text tower over B.seq tokens: the embeddings, the layers (no causal mask), final_layer_norm, the head on
    the last token."""
    B = w.B
    clip.text_embeddings(w, text)
    clip.layers(w, text, B.seq, causal=False)
    w.norm("final_layer_norm", (B.b, B.seq), text.hidden, residual=False)
    w.linear("head", (B.b,), text.hidden, text.proj, True, note=" (last token)")


def walk(B: Builder) -> list[Module]:
    """The forward at B.s's sizes (SiglipModel runs the vision tower first): writes its ops to B and returns the modules
    it met."""
    s = B.s
    text, vision = clip.towers(s).text, clip.towers(s).vision
    modules: list[Module] = []
    if vision:
        w = Recorder(B, "vision", clip.PREFIXES["vision"])
        n = vision_walk(w, vision, s.image_size)
        if s.head == "imgcls" and s.num_labels:   # the patch tokens' mean, then the classifier
            B.add("mean of patch tokens", "activation", "cls", 1, (B.b, n, vision.hidden), (B.b, vision.hidden),
                  ew=B.b * n * vision.hidden)
            w.linear("classifier", (B.b,), vision.hidden, s.num_labels, True, bucket="cls", top=True)
        modules += w.modules
    if text:
        w = Recorder(B, "text", clip.PREFIXES["text"])
        text_walk(w, text)
        modules += w.modules
    if text and vision:
        # normalised embeddings, logits_per_text = text @ image.T x exp(logit_scale) + logit_bias
        P = text.proj
        modules += [Module(name, None, (("", (1,)),), top=True) for name in ("logit_scale", "logit_bias")]
        B.add("logit_scale, logit_bias + similarity (text @ image.T)", "linear", "cls", 1, (B.b, P), (B.b, B.b), params=2,
              macs=B.b * P * B.b, ew=2 * B.b * B.b + 6 * B.b * P)
    return modules


def build(B: Builder) -> None:
    walk(B)


def expected_tensors(s: ArchSpec) -> Shapes:
    return clip.tower_shapes_of(walk, s)


_TINY = Towers(TextTower(1, 4, 1, 4, vocab=4, positions=4, proj=4),
               VisionTower(1, 4, 1, 4, native_image_size=4, patch_size=4, channels=1, head=True))


# the walks of a tiny SiglipForImageClassification and of SigLIP's towers (each with its head): the paths of the name
# signature and from_tensors' look-ups
WALKED_CLS = walked(walk, "siglip", head="imgcls", image_size=4, variant=replace(_TINY, text=None))
TOWERS = clip.tower_walks(_TINY, text_walk, vision_walk, "siglip")

_TEXT = dict(vocab_size=99, hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_attention_heads=4,
             max_position_embeddings=40, projection_size=48)
_VISION = dict(hidden_size=48, intermediate_size=40, num_hidden_layers=2, num_attention_heads=6, image_size=30, patch_size=3)

FAMILY = Family(
    name="siglip",
    before=("clip", "llama"),   # tried before them: its towers' names match clip's signature, and their q_proj llama's
    model_types=("siglip", "siglip_text_model", "siglip_vision_model"),
    # the text head, the vision pooling head's probe, the patch conv's bias (CLIP's towers have none of them), the
    # vision tower's under its prefix or bare at the root (clip.TOWER_MARKERS); registered before clip
    signature="|".join([clip.tower_signature(TOWERS, "text", "head")]
                       + [clip.tower_signature(TOWERS, "vision", name, suffix, bare) for bare in (False, True)
                          for name, suffix in (("head.probe", ""), ("embeddings.patch_embedding", "bias"))]),
    # a bare text tower: CLIP's, and a head
    signature_together=tuple(clip.tower_signature(TOWERS, "text", name, bare=True)
                             for name in ("head", "embeddings.token_embedding")),
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
