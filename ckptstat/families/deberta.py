"""DeBERTa (transformers modeling_deberta.py) and, through the same walk, DeBERTa-v2 / v3 (modeling_deberta_v2.py:
deberta_v2.py holds its Family): post-LN encoder layers of disentangled attention.

* embeddings: word, position (only with position_biased_input), token type (type_vocab_size > 0) lookups, then
  `embed_proj` (bias-free, embedding_size -> hidden) where embedding_size differs from hidden_size, LayerNorm, the
  attention mask multiplied in;
* attention: v1 one bias-free `in_proj` (h -> 3h) plus q_bias / v_bias parameters; v2 query_proj / key_proj /
  value_proj. Q K^T and P V as two bmm's (matmuls). With relative_attention the encoder holds `rel_embeddings`
  (2 x span rows: v1 max_relative_positions, v2 position_buckets when > 0 else max_relative_positions;
  max_relative_positions < 1 means max_position_embeddings); v2 with norm_rel_ebd "layer_norm" normalises its rows once
  a forward (`encoder.LayerNorm`). Each layer projects R of those rows (v2 all 2 x span; v1 2 x min(seq, span)) once, not
  per batch row: c2p through pos_key_proj (v1 pos_proj, bias-free), p2c through pos_query_proj (v1 pos_q_proj), or
  with v2's share_att_key through the layer's own query_proj and key_proj (both, whatever pos_att_type holds). Then
  c2p is one bmm Q Kr^T and p2c one bmm K Qr^T, each batch x heads x seq x R x head_dim MACs; the relative-position
  gathers (log-bucketed in v2 where position_buckets > 0: only which rows are read) are not matmuls. v1's
  talking_head runs head_logits_proj and head_weights_proj (heads -> heads, bias-free) over every score;
* v2's ConvLayer (conv_kernel_size > 0): after the first layer, a Conv1d(h, h, kernel, groups) over the embeddings'
  output, conv_act, then LayerNorm with the layer's output (`encoder.conv`);
* heads: MLM with legacy (the default) `cls.predictions` (transform dense h -> embedding_size, act, LayerNorm, decoder
  tied to the word embeddings unless tie_word_embeddings is false, its bias tied to `cls.predictions.bias` likewise),
  else `lm_predictions.lm_head` (dense, act, LayerNorm, then a matmul with the word embeddings' weight and `bias`);
  sequence classifier and (v2) multiple choice: ContextPooler `pooler.dense` on the first token, pooler_hidden_act,
  `classifier` (num_labels; 1 a choice); token classifier `classifier` and QA `qa_outputs` on every token.

Described once, as a walk (`walk`: framework/recorder.py's Recorder, each module recorded while its op is written): the
op template and the expected tensors both derive from it."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..errors import NoAnalyticModel
from .framework import encoder, infer
from .framework.archspec import Variant
from .framework.base import CHOICE, FROM_CLASS, ArchSpec, Cfg, Family, HeadRule, Sample, Tensors, TieRule
from .framework.ops import Builder
from .framework.recorder import Recorder, Stack, tensors
from .framework.walk_names import layers, pattern, signature, walked

BODY = "deberta"
SELF = "attention.self."
LEGACY = encoder.LMHead("cls.predictions.decoder", "cls.predictions.transform.dense",
                        "cls.predictions.transform.LayerNorm", "cls.predictions.bias")
LM = "lm_predictions.lm_head."   # the non-legacy MLM head


@dataclass(frozen=True)
class DebertaVariant(Variant):
    """The disentangled attention's and heads' config (module docstring)."""
    v2: bool = False
    span: int = 0               # relative_attention: half rel_embeddings' rows; 0 without relative attention
    c2p: bool = False           # pos_att_type (with relative_attention)
    p2c: bool = False
    share_key: bool = False     # v2 share_att_key
    norm_rel: bool = False      # v2 norm_rel_ebd holds "layer_norm"
    conv_kernel: int = 0        # v2 conv_kernel_size (0: no ConvLayer)
    conv_groups: int = 1
    conv_act: str = "tanh"
    talking_head: bool = False  # v1
    legacy: bool = True         # the MLM head's kind
    pooler_act: str = "gelu"    # ContextPooler's pooler_hidden_act


def _names(value: Any) -> list[str]:
    """pos_att_type / norm_rel_ebd: a list, or a "|"-separated string (the config classes' parsing)."""
    return [x.strip() for x in value.lower().split("|")] if isinstance(value, str) else list(value or [])


def config(c: Cfg, v2: bool) -> ArchSpec:
    """config.json -> ArchSpec (v2: DebertaV2Config's keys, which v1 lacks, read with the model's getattr defaults)."""
    h, a, P = c.int("hidden_size"), c.int("num_attention_heads"), c.int("max_position_embeddings")
    d = c.int("attention_head_size", default=h // a) if v2 else h // a
    if a * d != h:
        raise NoAnalyticModel(f"{c.path}: attention_head_size x heads {a * d} != hidden_size {h}")
    if int(c.get("pooler_hidden_size", default=h)) != h:
        raise NoAnalyticModel(f"{c.path}: pooler_hidden_size != hidden_size (the classifier reads hidden_size)")
    span, kinds = 0, _names(c.get("pos_att_type", default=None))
    if c.get("relative_attention", default=FROM_CLASS):
        most = int(c.get("max_relative_positions", default=FROM_CLASS))
        buckets = int(c.get("position_buckets", default=-1)) if v2 else -1
        span = buckets if buckets > 0 else most if most >= 1 else P
    v = DebertaVariant(
        v2=v2, span=span, c2p=bool(span) and "c2p" in kinds, p2c=bool(span) and "p2c" in kinds,
        share_key=v2 and bool(c.get("share_att_key", default=False)),
        norm_rel=v2 and "layer_norm" in _names(c.get("norm_rel_ebd", default="none")),
        conv_kernel=int(c.get("conv_kernel_size", default=0)) if v2 else 0, conv_groups=c.int("conv_groups", default=1),
        conv_act=str(c.get("conv_act", default="tanh")), talking_head=not v2 and bool(c.get("talking_head", default=False)),
        legacy=bool(c.get("legacy", default=FROM_CLASS)), pooler_act=str(c.get("pooler_hidden_act", default=FROM_CLASS)))
    return ArchSpec(layers=c.int("num_hidden_layers"), hidden=h, heads=a, kv_heads=a, head_dim=d,
                    intermediate=c.int("intermediate_size"), vocab=c.int("vocab_size"),
                    positions=P if c.get("position_biased_input", default=FROM_CLASS) else 0,
                    type_vocab=c.int("type_vocab_size", default=FROM_CLASS), embedding_size=c.int("embedding_size", default=h),
                    activation=str(c.get("hidden_act", default=FROM_CLASS)),
                    tied_embeddings=bool(c.get("tie_word_embeddings", default=FROM_CLASS)), variant=v, **c.common)


def from_config(c: Cfg) -> ArchSpec:
    return config(c, v2=False)


def names(T: Tensors, common: dict[str, Any], v2: bool) -> ArchSpec:
    """The sizes from the tensors of a file without config.json (the walk of a tiny spec gives every path: `walk_of`)."""
    w = WALKED_V2 if v2 else WALKED
    q = "query_proj" if v2 else "in_proj"

    def has(key: str) -> bool:
        return infer.has(T, pattern(w, key))

    def shape(key: str) -> tuple[int, ...]:
        return infer.shape(T, pattern(w, key), key)

    V, E = shape("embeddings.word_embeddings")
    h = shape(SELF + q)[1]
    talking = not v2 and has(SELF + "head_logits_proj")
    a, note = (shape(SELF + "head_logits_proj")[0], "") if talking else infer.heads_for(h, 64)
    rows = shape("encoder.rel_embeddings")[0] if has("encoder.rel_embeddings") else 0
    proj = ("pos_key_proj", "pos_query_proj") if v2 else ("pos_proj", "pos_q_proj")
    c2p, p2c = (has(SELF + m) for m in proj)
    share = v2 and bool(rows) and not (c2p or p2c)
    conv = shape("encoder.conv.conv") if v2 and has("encoder.conv.conv") else (0, 0, 0)
    legacy = not infer.has(T, rf"(^|\.){re.escape(LM)}")
    notes = (note,) * bool(note) + (("no config: share_att_key with pos_att_type c2p|p2c assumed",) if share else ())
    v = DebertaVariant(v2=v2, span=rows // 2, c2p=c2p or share, p2c=p2c or share, share_key=share,
                       norm_rel=v2 and has("encoder.LayerNorm"), conv_kernel=conv[2],
                       conv_groups=conv[0] // conv[1] if conv[1] else 1,
                       talking_head=talking, legacy=legacy)
    return ArchSpec(num_labels=infer.num_labels(T), layers=infer.count_layers(T, layers(w, SELF + q)), hidden=h, heads=a,
                    kv_heads=a, head_dim=h // a, intermediate=shape("intermediate.dense")[0], vocab=V,
                    positions=shape("embeddings.position_embeddings")[0] if has("embeddings.position_embeddings") else 0,
                    type_vocab=shape("embeddings.token_type_embeddings")[0] if has("embeddings.token_type_embeddings") else 0,
                    embedding_size=E, tied_embeddings=legacy and not infer.has(T, rf"(^|\.){re.escape(LEGACY.decoder)}\.weight$"),
                    variant=v, assumptions=notes, **common)


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    return names(T, common, v2=False)


# ---- the walk, in forward order ----

def _embeddings(r: Recorder) -> None:
    s, n = r.s, r.B.seq
    for path, rows in (("word_embeddings", s.vocab), ("position_embeddings", s.positions),
                       ("token_type_embeddings", s.type_vocab)):
        if rows:
            r.embedding(f"embeddings.{path}", rows, s.emb, n, bucket="embedding")
    if s.emb != s.hidden:
        r.linear("embeddings.embed_proj", r.tok, s.emb, s.hidden, False, bucket="embedding")
    r.norm("embeddings.LayerNorm", r.tok, s.hidden, residual=False, bucket="embedding")
    r.B.add("embeddings x attention mask", "activation", "embedding", 1, r.tok + (s.hidden,), r.tok + (s.hidden,),
            ew=r.B.b * n * s.hidden)


def _attention(r: Recorder, st: Stack, rows: int) -> None:
    """One layer's disentangled self-attention (module docstring); `rows`: the relative-embedding rows it projects."""
    B, s, v = r.B, r.s, r.s.variant_as(DebertaVariant)
    b, n, h, a, d, L = B.b, B.seq, s.hidden, s.heads, s.head_dim, st.calls
    if v.v2:
        for m in ("query_proj", "key_proj", "value_proj"):
            r.linear(SELF + m, r.tok, h, a * d, True, st)
    else:
        r.linear(SELF + "in_proj", r.tok, h, 3 * a * d, False, st)
        r.params(st.name(SELF + "q_bias, v_bias"), tuple((f"encoder.layer.{{bid}}.{SELF}{m}", (a * d,))
                                                           for m in ("q_bias", "v_bias")),
                 r.tok + (a * d,), r.tok + (a * d,), ew=2 * b * n * a * d, kind="activation", bucket="encoder", L=L)
    terms = tuple(t for t, on in (("c2p (Q Kr^T)", v.c2p), ("p2c (K Qr^T)", v.p2c)) if on)
    B.attention(st.name("attention.self"), "encoder", a, n, n, d, L, causal=False, extra_ew=2 + 3 * len(terms))
    if v.talking_head:   # over every score's heads, before the softmax and after it
        for m in ("head_logits_proj", "head_weights_proj"):
            r.linear(SELF + m, (b, n, n), a, a, False, st)
    rel = (1, rows)
    if v.share_key:   # the layer's own query_proj and key_proj (counted there) on the relative rows
        for m in ("query_proj", "key_proj"):
            B.add(st.name(f"{SELF}{m} (on the relative-position rows)"), "linear", "encoder", L, rel + (h,),
                  rel + (a * d,), macs=rows * h * a * d, ew=rows * a * d, weights_per_call=(h + 1) * a * d)
    elif v.span:
        c2p, p2c = ("pos_key_proj", "pos_query_proj") if v.v2 else ("pos_proj", "pos_q_proj")
        if v.c2p:
            r.linear(SELF + c2p, rel, h, a * d, v.v2, st)
        if v.p2c:
            r.linear(SELF + p2c, rel, h, a * d, True, st)
    for term in terms:   # a bmm against the projected rows, then a gather (no matmul) into [seq, seq]
        B.add(st.name(f"attention.self {term}"), "attention", "encoder", L, (b, a, n, d), (b, a, n, rows),
              macs=b * a * n * rows * d, extra_in=rows * a * d)


def _conv(r: Recorder) -> None:
    """v2's ConvLayer after the first layer: Conv1d over the embeddings' output, its act, LayerNorm with the layer's."""
    B, s, v = r.B, r.s, r.s.variant_as(DebertaVariant)
    h, k, g = s.hidden, v.conv_kernel, v.conv_groups
    out = B.seq + 2 * ((k - 1) // 2) - k + 1
    r.record("encoder.conv.conv", (("weight", (h, h // g, k)), ("bias", (h,))))
    B.add("encoder.conv.conv (Conv1d, after layer 0)", "linear", "encoder", 1, r.tok + (h,), (B.b, out, h),
          params=h * (h // g) * k + h, macs=B.b * out * h * (h // g) * k, ew=B.b * out * h,
          weights_per_call=h * (h // g) * k + h)
    B.activation(f"encoder.conv act ({v.conv_act})", "encoder", r.tok, h, v.conv_act)
    r.norm("encoder.conv.LayerNorm", r.tok, h)


def _heads(r: Recorder) -> None:
    B, s, v = r.B, r.s, r.s.variant_as(DebertaVariant)
    h = s.hidden
    if s.head == "mlm" and v.legacy:
        encoder.mlm_head(r, LEGACY, s.emb)
    elif s.head == "mlm":
        r.linear(LM + "dense", r.tok, h, h, True, bucket="cls", top=True)
        B.activation(LM + "dense act", "cls", r.tok, h, s.activation)
        r.norm(LM + "LayerNorm", r.tok, h, residual=False, bucket="cls", top=True)
        r.record(LM + "bias", (("", (s.vocab,)),), top=True)
        B.linear(LM + "decoder (x word_embeddings^T, + bias)", "cls", r.tok, h, s.vocab, True, tied=True)
    if s.head in ("seqcls", CHOICE):   # ContextPooler on the first token, then the classifier
        r.linear("pooler.dense", r.first, h, h, True, bucket="pooler", top=True)
        B.activation(f"pooler act ({v.pooler_act})", "pooler", r.first, h, v.pooler_act)
        choice = s.head == CHOICE
        r.linear("classifier", r.first, h, 1 if choice else s.num_labels, True, bucket="cls", top=True,
                 note=encoder.CHOICE_NOTE if choice else "")
    encoder.token_heads(r)


def walk(B: Builder) -> Recorder:
    """The forward at B.s's sizes: writes its ops to B and records the modules it meets."""
    r, s = Recorder(B), B.s
    v = s.variant_as(DebertaVariant)
    h, f, L = s.hidden, s.intermediate, s.layers
    _embeddings(r)
    rows = 2 * (v.span if v.v2 else min(B.seq, v.span))
    if v.span:
        r.held("encoder.rel_embeddings (rows read by every layer's position projections)",
               (("encoder.rel_embeddings", (("weight", (2 * v.span, h)),)),))
        if v.norm_rel:   # once a forward, on the rows
            r.norm("encoder.LayerNorm", (2 * v.span,), h, residual=False, note=" (rel_embeddings)")
    st = Stack(f"encoder.layer[{L}]", "encoder.layer.{bid}", L, L)
    _attention(r, st, rows)
    r.linear("attention.output.dense", r.tok, h, h, True, st)
    r.norm("attention.output.LayerNorm", r.tok, h, st)
    r.linear("intermediate.dense", r.tok, h, f, True, st)
    B.activation(st.name("intermediate act"), "encoder", r.tok, f, s.activation, L)
    r.linear("output.dense", r.tok, f, h, True, st)
    r.norm("output.LayerNorm", r.tok, h, st)
    if v.conv_kernel:
        _conv(r)
    _heads(r)
    return r


def build(B: Builder) -> None:
    walk(B)


def walk_of(v2: bool) -> Recorder:
    """The walk of a tiny model holding every part whose names from_tensors reads."""
    v = DebertaVariant(v2=v2, span=2, c2p=True, p2c=True, norm_rel=v2, conv_kernel=3 if v2 else 0, talking_head=not v2)
    return walked(walk, "deberta-v2" if v2 else "deberta", type_vocab=2, embedding_size=2, variant=v)


WALKED = walk_of(v2=False)
WALKED_V2 = walk_of(v2=True)

HEAD_RULES = (HeadRule(rf"(^|\.)({re.escape(LEGACY.dense or '')}|{re.escape(LM)}dense)\.", "mlm"),
              HeadRule(r"(^|\.)qa_outputs\.weight$", "qa"),
              # the sequence classifier reads the ContextPooler (a multiple-choice model's too: config.json tells it)
              HeadRule(r"^classifier\.weight$", "tokcls", unless=r"^pooler\.dense\.", otherwise="seqcls"))


def tie_rules(heads: tuple[str, ...] = ("mlm",)) -> tuple[TieRule, ...]:
    """The legacy MLM head's ties (DebertaForMaskedLM's _tied_weights_keys; the non-legacy head ties none)."""
    return (TieRule(f"{LEGACY.decoder}.weight", f"{BODY}.embeddings.word_embeddings.weight", "config", heads=heads),
            TieRule(f"{LEGACY.decoder}.bias", str(LEGACY.bias), "config", heads=heads))


# tiny DebertaConfig sizes (deberta-base's relative attention: c2p|p2c, no absolute positions)
SIZES = dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37,
             max_position_embeddings=64, type_vocab_size=0)
BASE = dict(SIZES, relative_attention=True, pos_att_type="c2p|p2c", position_biased_input=False)
HEADS = ("base", "mlm", "seqcls", "tokcls", "qa")
_CLASSES = ("DebertaModel", "DebertaForMaskedLM", "DebertaForSequenceClassification", "DebertaForTokenClassification",
            "DebertaForQuestionAnswering")

FAMILY = Family(
    name="deberta",
    model_types=("deberta",),
    signature=signature(WALKED, SELF + "in_proj"),
    from_config=from_config, from_tensors=from_tensors, build=build, expected_tensors=tensors(walk, BODY),
    heads=HEADS,
    head_rules=HEAD_RULES,
    tie_rules=tie_rules(),
    samples=(
        # deberta-base-like (max_relative_positions -1: max_position_embeddings; the rows read: 2 x min(seq, span))
        Sample("DebertaConfig", BASE, _CLASSES, device="cpu"),
        # a span shorter than the sequence, c2p alone, token types, absolute positions, factorised embeddings,
        # talking heads, an untied MLM head
        Sample("DebertaConfig", dict(SIZES, relative_attention=True, pos_att_type=["c2p"], max_relative_positions=4,
                                     type_vocab_size=2, embedding_size=16, talking_head=True, tie_word_embeddings=False),
               ("DebertaModel", "DebertaForMaskedLM"), device="cpu"),
        # no relative attention (the config class's default); the non-legacy MLM head
        Sample("DebertaConfig", dict(SIZES, legacy=False), ("DebertaModel", "DebertaForMaskedLM"), device="cpu"),
    ),
)
