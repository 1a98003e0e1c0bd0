"""ProphetNet's decoder alone (transformers modeling_prophetnet.py: ProphetNetForCausalLM, a ProphetNetDecoderWrapper
under `prophetnet.`; the encoder-decoder classes are answered by the meta path). The decoder runs the main stream
of s tokens and `ngram` predicting streams of s tokens each (ngram_embeddings + the next positions), cat'ed: every
projection, the FFN and the LayerNorms run over (1 + ngram) x s tokens; the n-gram self-attention scores the main
stream over its s keys (causal) and each predicting stream over the main stream's s keys and its own s, adds
relative-position logits from `relative_pos_embeddings` (a Linear h -> num_buckets x heads over every token), and
its cache keeps the main stream's K/V. Each layer holds a cross_attn (with add_cross_attention) that runs only with
encoder states: its parameters count, no FLOPs. The LM head reads the predicting streams (ngram x s tokens). The
wrapper's word_embeddings, the decoder's and lm_head are one tensor when tie_word_embeddings (by default),
three otherwise (ProphetNetForCausalLM._tied_weights_keys). Post-LayerNorm sublayers, learned positions,
embeddings_layer_norm. llama.cpp has no architecture for it.

The architecture is stated once, in `walk` (recorded with recorder.Recorder): the op template and the expected
tensors derive from it."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import NoAnalyticModel
from .framework import base, infer
from .framework.archspec import Variant
from .framework.base import (
    FROM_CLASS,
    ArchSpec,
    Cfg,
    Family,
    Sample,
    Shapes,
    Tensors,
    TieRule,
    decoder_kv_cache,
)
from .framework.ops import Builder, ew_cost
from .framework.recorder import Recorder
from .framework.walk_names import layers, pattern, signature, walked

_ATTN = ("query_proj", "key_proj", "value_proj", "out_proj")


@dataclass(frozen=True)
class Streams(Variant):
    """The predicting streams, the relative-position buckets, and whether the layers hold a cross_attn."""
    ngram: int
    buckets: int
    cross: bool


def from_config(c: Cfg) -> ArchSpec:
    if not (c.head == "lm" and str(c.common.get("architecture") or "").endswith("ForCausalLM")):
        raise NoAnalyticModel(f"{c.path}: the prophetnet op template describes ProphetNetForCausalLM (the decoder alone)")
    h, a = c.int("hidden_size"), c.int("num_decoder_attention_heads")
    return ArchSpec(layers=c.int("num_decoder_layers"), hidden=h, heads=a, kv_heads=a, head_dim=h // a,
                    intermediate=c.int("decoder_ffn_dim"), vocab=c.int("vocab_size"),
                    positions=c.int("max_position_embeddings"), activation=str(c.get("activation_function", default="gelu")),
                    tied_embeddings=bool(c.get("tie_word_embeddings", default=True)),
                    variant=Streams(c.int("ngram", default=FROM_CLASS), c.int("num_buckets", default=FROM_CLASS),
                                    bool(c.get("add_cross_attention", default=True))),
                    **c.common)


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    W = WALKED
    if infer.has(T, r"(^|\.)encoder\.layers\.\d+\."):   # (the walk is the decoder alone's: no encoder recorded)
        raise NoAnalyticModel("ProphetNet's encoder-decoder: the op template describes the decoder alone (pass --config)")
    # the wrapper's word_embeddings, or the decoder's (tied to it)
    V, h = infer.shape(T, pattern(W, "word_embeddings") + "|" + pattern(W, "decoder.word_embeddings"), "word_embeddings")
    f = infer.shape(T, pattern(W, "feed_forward.intermediate"), "feed_forward.intermediate")[0]
    a, note = infer.heads_for(h, 64)
    rel = infer.shape(T, pattern(W, "self_attn.relative_pos_embeddings"), "self_attn.relative_pos_embeddings")[0]
    return ArchSpec(layers=infer.count_layers(T, layers(W, "feed_forward.intermediate")), hidden=h, heads=a, kv_heads=a,
                    head_dim=h // a, intermediate=f, vocab=V,
                    positions=infer.shape(T, pattern(W, "decoder.position_embeddings"), "positions")[0],
                    tied_embeddings=not infer.has(T, pattern(W, "lm_head")),
                    variant=Streams(infer.shape(T, pattern(W, NGRAM), "ngram_embeddings")[0], rel // a,
                                    infer.has(T, pattern(W, "cross_attn.query_proj"))),
                    assumptions=(note,), **common)


def _attention(B: Builder, label: str, heads: int, q: int, k: int, L: int, causal: bool) -> None:
    """The n-gram attention's two einsums. Over a head_dim of 1, torch contracts Q K^T as a broadcast multiply, no
    matmul (FlopCounterMode counts none): the scores are then element-wise work, P V (over k keys) a bmm still."""
    d = B.s.head_dim
    if d > 1:
        B.attention(label, "encoder", heads, q, k, d, L, causal=causal, extra_ew=3)
        return
    scores = B.b * heads * q * k
    B.add(f"{label}.scores (QK^T, a multiply over head_dim 1)", "attention", "encoder", L, (B.b, heads, q, 1),
          (B.b, heads, q, k), ew=scores * (ew_cost("softmax") + 4), extra_in=B.b * heads * k)
    B.add(f"{label}.context (PV)", "attention", "encoder", L, (B.b, heads, q, k), (B.b, heads, q, 1), macs=scores,
          extra_in=B.b * heads * k)


def walk(B: Builder) -> Recorder:
    """The forward at B.s's sizes: writes its ops to B and records the modules it meets (the expected tensors, the
    wrapper's under `prophetnet.`)."""
    s, b, n = B.s, B.b, B.seq
    v = s.variant_as(Streams)
    h, L, g = s.hidden, s.layers, v.ngram
    every, predicting = (b, (1 + g) * n), (b, g * n)
    w = Recorder(B, "encoder")
    # the wrapper's word_embeddings and the decoder's: one tensor when tied, two otherwise
    w.embedding("word_embeddings", s.vocab, h, n, bucket="embedding", params=not s.tied_embeddings)
    w.embedding("decoder.word_embeddings", s.vocab, h, n, bucket="embedding")
    w.embedding("decoder.position_embeddings", s.positions, h, (1 + g) * n, bucket="embedding")
    w.params("decoder.ngram_embeddings", (("decoder.ngram_embeddings.weight", (g, h)),), (g, h), predicting + (h,),
             ew=b * g * n * h, bucket="embedding")
    w.norm("decoder.embeddings_layer_norm", every, h, residual=False, bucket="embedding")
    if L:   # (a Recorder's L 0 is a module outside the layers: none here)
        _layers(w, L, every)
    w.linear("lm_head", predicting, h, s.vocab, False, note=" (the predicting streams)" + (
        " (tied to word_embeddings)" if s.tied_embeddings else ""), bucket="cls", top=True, tied=s.tied_embeddings)
    return w


def _layers(w: Recorder, L: int, every: tuple[int, ...]) -> None:
    """The L decoder layers over the (1 + ngram) x s tokens of every stream."""
    B, s, n = w.B, w.B.s, w.B.seq
    v = s.variant_as(Streams)
    h, a, g, f = s.hidden, s.heads, v.ngram, s.intermediate
    lay = "decoder.layers.{bid}"
    for m in _ATTN[:3]:
        w.linear(f"{lay}.self_attn.{m}", every, h, h, True, L)
    w.linear(f"{lay}.self_attn.relative_pos_embeddings", every, h, v.buckets * a, True, L)
    _attention(B, w.label(f"{lay}.self_attn main stream", L), a, n, n, L, causal=True)
    # each predicting stream: its s queries over the main stream's s keys and its own s
    _attention(B, w.label(f"{lay}.self_attn predicting streams", L), g * a, n, 2 * n, L, causal=False)
    w.linear(f"{lay}.self_attn.out_proj", every, h, h, True, L)
    w.norm(f"{lay}.self_attn_layer_norm", every, h, L)
    if v.cross:   # stored, never called without encoder states: L copies, 0 calls
        for m in _ATTN:
            w.linear(f"{lay}.cross_attn.{m}", every, h, h, True, L, " (not run: no encoder)", runs=False)
        w.norm(f"{lay}.cross_attn_layer_norm", every, h, L, False, " (not run)", runs=False)
    w.linear(f"{lay}.feed_forward.intermediate", every, h, f, True, L)
    B.activation(w.label(f"{lay}.feed_forward act", L), "encoder", every, f, s.activation, L)
    w.linear(f"{lay}.feed_forward.output", every, f, h, True, L)
    w.norm(f"{lay}.feed_forward_layer_norm", every, h, L)


def build(B: Builder) -> None:
    walk(B)


def expected_tensors(s: ArchSpec) -> Shapes:
    """The walk's modules, ProphetNetForCausalLM's wrapper under `prophetnet.`."""
    return walk(Builder(s, 1, 1, 1, 1, 1)).shapes("prophetnet")


# the walk of a tiny, untied ProphetNetForCausalLM with cross_attn: the paths of the name signature and from_tensors'
# look-ups
WALKED = walked(walk, "prophetnet", head="lm", variant=Streams(1, 1, True))
NGRAM = "decoder.ngram_embeddings.weight"   # a bare parameter (Recorder.params): its path is its name


_SIZES = dict(hidden_size=32, num_encoder_layers=2, num_decoder_layers=2, num_encoder_attention_heads=4,
              num_decoder_attention_heads=4, encoder_ffn_dim=37, decoder_ffn_dim=37, vocab_size=99, max_position_embeddings=64,
              num_buckets=8, relative_max_distance=16)

FAMILY = Family(
    name="prophetnet",
    before=("opt",),   # tried before it: its decoder.layers.N.self_attn names match OPT's signature
    model_types=("prophetnet",),
    signature=signature(WALKED, NGRAM),
    from_config=from_config, from_tensors=from_tensors, build=build, expected_tensors=expected_tensors,
    heads=("lm",),
    head_rules=base.decoder_head_rules(r"(^|\.)lm_head\.weight$", r"^prophetnet\.decoder\."),
    default_head="lm",
    tie_rules=(TieRule("lm_head.weight", "prophetnet.word_embeddings.weight", "config", heads=("lm",)),
               TieRule("prophetnet.decoder.word_embeddings.weight", "prophetnet.word_embeddings.weight", "config",
                       heads=("lm",))),
    tied_by_default=True,
    kv_cache=decoder_kv_cache,
    gguf_architectures=(),   # llama.cpp has no architecture for it
    samples=(
        Sample("ProphetNetConfig", _SIZES, ("ProphetNetForCausalLM",)),
        Sample("ProphetNetConfig", dict(_SIZES, ngram=3, tie_word_embeddings=False, add_cross_attention=False),
               ("ProphetNetForCausalLM",)),
    ),
)
