"""GIT (transformers modeling_git.py, configuration_git.py): a BERT-style text decoder (encoder.py's post-LayerNorm
layers under BERT's names, causal; word and position embeddings and their LayerNorm, no token types) beside a
CLIP-style vision tower (`git.image_encoder.vision_model`, clip.py's tensors), `visual_projection` (Linear, LayerNorm)
and, with num_image_with_embedding, one `img_temporal_embedding` row per image; GitForCausalLM's `output` is a biased
Linear tied to the word embeddings when tie_word_embeddings says so (untied by default). The op template is the
text-only forward: the vision tower, the projection and the temporal rows count as parameters and run on no token;
the cache is the text layers' DynamicCache. llama.cpp has no architecture for it.
Described once, as a walk (`walk`: framework/recorder.py's recorder and encoder.py's post-LN layer, the held tower's tensors
recorded as parameters): the op template and the expected tensors both derive from it."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from .bert import LAYER
from .clip import VisionTower, vision_shapes, vision_tensors, vision_tower
from .framework import base, encoder, infer
from .framework.archspec import Variant
from .framework.base import ArchSpec, Cfg, Family, Sample, Shapes, Tensors, TieRule, add_linear, add_norm, decoder_kv_cache
from .framework.encoder import stack_layers
from .framework.ops import Builder
from .framework.recorder import Recorder, Stack, tensors
from .framework.walk_names import layers, pattern, signature, walked

BODY = "git"   # the base model's attribute in the head model


@dataclass(frozen=True)
class GitVision(Variant):
    """What a text-only forward holds and never runs: the vision tower and the temporal rows (0: none)."""
    tower: VisionTower
    temporal: int


def from_config(c: Cfg) -> ArchSpec:
    h, a = c.int("hidden_size"), c.int("num_attention_heads")
    return ArchSpec(layers=c.int("num_hidden_layers"), hidden=h, heads=a, kv_heads=a, head_dim=h // a,
                    intermediate=c.int("intermediate_size"), vocab=c.int("vocab_size"),
                    positions=c.int("max_position_embeddings"), type_vocab=0, activation=str(c.get("hidden_act", default="gelu")),
                    tied_embeddings=bool(c.get("tie_word_embeddings", default=False)),
                    variant=GitVision(vision_tower(c.sub("vision_config", "git_vision_model")),
                                      c.int("num_image_with_embedding", default=0) or 0), **c.common)


def _outside(s: ArchSpec, p: str) -> Shapes:
    """The tensors a text-only forward never runs, under the base model's prefix `p`."""
    v = s.variant_as(GitVision)
    out: Shapes = {}
    vision_tensors(out, f"{p}image_encoder.vision_model", v.tower, s)
    add_linear(out, f"{p}visual_projection.visual_projection.0", s.hidden, v.tower.hidden)
    add_norm(out, f"{p}visual_projection.visual_projection.1", s.hidden)
    for i in range(v.temporal):
        out[f"{p}img_temporal_embedding.{i}"] = (1, 1, v.tower.hidden)
    return out


def walk(B: Builder) -> Recorder:
    """The text-only forward at B.s's sizes: writes its ops to B and records the modules it meets."""
    s, r, L = B.s, Recorder(B), B.s.layers
    h = s.hidden
    r.held("image_encoder, visual_projection (not run: no image)",
           tuple((name, (("", shape),)) for name, shape in _outside(s, "").items()))
    encoder.embeddings(r)   # no token types (type_vocab 0)
    stack_layers(r, Stack(f"encoder.layer[{L}]", "encoder.layer.{bid}", L, L), LAYER, causal=True)
    if s.head == "lm":
        r.linear("output", r.tok, h, s.vocab, True, bucket="cls", top=True, tied=s.tied_embeddings,
                 label="output" + (" (tied to word_embeddings)" if s.tied_embeddings else ""))
    return r


def build(B: Builder) -> None:
    walk(B)


# the walk of a tiny GitForCausalLM (a one-layer tower, an untied output): the paths of the name signature and
# from_tensors' look-ups
WALKED = walked(walk, "git", head="lm", variant=GitVision(VisionTower(1, 4, 1, 4, 4, 4, 3), 0))


_VISION = "image_encoder.vision_model."


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    d = encoder.dims(T, WALKED, LAYER)
    a, note = infer.heads_for(d["hidden"], 64)
    pre = next((n[: n.index(_VISION) + len(_VISION)] for n in T if _VISION in n), _VISION)
    temporal = len({n for n in T if re.search(r"(^|\.)img_temporal_embedding\.\d+$", n)})
    return ArchSpec(layers=infer.count_layers(T, layers(WALKED, LAYER[0])), heads=a, kv_heads=a, head_dim=d["hidden"] // a,
                    tied_embeddings=not infer.has(T, pattern(WALKED, "output")),
                    variant=GitVision(vision_shapes(T, pre), temporal), assumptions=(note,), **d, **common)


_TEXT = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37, vocab_size=99,
             max_position_embeddings=64)
_VISION_CONFIG = dict(hidden_size=24, intermediate_size=40, num_hidden_layers=2, num_attention_heads=4, image_size=12,
                      patch_size=4)

FAMILY = Family(
    name="git",
    before=("bert",),   # tried before it: the text decoder's encoder.layer.N.attention.self.query names are BERT's
    model_types=("git",),
    signature=signature(WALKED, "image_encoder.vision_model.embeddings.patch_embedding.weight"),
    from_config=from_config, from_tensors=from_tensors, build=build, expected_tensors=tensors(walk, BODY),
    heads=("base", "lm"),
    head_rules=base.decoder_head_rules(r"(^|\.)output\.weight$", r"^git\."),
    default_head="lm",
    tie_rules=(TieRule("output.weight", "git.embeddings.word_embeddings.weight", "config", heads=("lm",)),),
    kv_cache=decoder_kv_cache,
    gguf_architectures=(),   # llama.cpp has no architecture for it
    samples=(
        Sample("GitConfig", dict(_TEXT, vision_config=_VISION_CONFIG), ("GitModel", "GitForCausalLM")),
        Sample("GitConfig", dict(_TEXT, vision_config=_VISION_CONFIG, tie_word_embeddings=True, num_image_with_embedding=2),
               ("GitForCausalLM",)),
    ),
)
