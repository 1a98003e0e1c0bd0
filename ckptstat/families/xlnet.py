"""XLNet (transformers modeling_xlnet.py: XLNetModel, XLNetLMHeadModel, XLNetForSequenceClassification,
XLNetForTokenClassification, XLNetForQuestionAnsweringSimple, XLNetForMultipleChoice, XLNetForQuestionAnswering): post-LN
layers of relative attention whose projections are [d_model, n_head, d_head] parameters run by einsum (q, k, v,
o and the position projection r, each one matmul over the tokens), and a two-layer FFN. Without `mems`,
`perm_mask` or `target_mapping` (a plain forward) the query stream runs alone: per layer Q K^T over the qlen
tokens (ac), Q R^T over the relative position encoding's klen + qlen rows (bd, attn_type "bi"), the sinusoidal
encoding itself computed element-wise, the position rows projected by r for every batch row, and P V; the segment
term (ef) only with token_type_ids, which a forward of input_ids alone leaves out. `mask_emb`, `seg_embed` and the
r_s bias are held and not run. The LM head (`lm_loss`, biased) is tied to the word embedding unless
tie_word_embeddings is false. The sequence classifier and the multiple-choice head are a SequenceSummary (by
default the last token, Linear(d_model, d_model) and tanh) then logits_proj Linear(d_model, num_labels or 1)
(framework/summary.py; multiple choice's FLOPs count batch x num_choices sequences), the QA head `qa_outputs`
Linear(d_model, num_labels) on every token; the beam-search SQuAD head of XLNetForQuestionAnswering (in no auto
mapping) is head `squad` (framework/squad.py). The model returns its `mems`, no cache object: no KV cache is counted
(tests/coverage_walk.py's oracle reads a cache or past_key_values). Refused (meta path): attn_type "uni" (klen + 1
position rows; transformers 5 cannot run it on a batch over 1 with an attention mask, so no test checks it) and
bi_data.
Described once, as a walk (`walk`: framework/recorder.py's recorder, each module recorded while its op is written):
the op template and the expected tensors both derive from it."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import NoAnalyticModel
from .framework import infer, squad, summary
from .framework.archspec import Variant
from .framework.base import CHOICE, FROM_CLASS, ArchSpec, Cfg, Family, HeadRule, Sample, Tensors, TieRule
from .framework.encoder import token_heads
from .framework.ops import Builder
from .framework.recorder import Recorder, Stack, tensors
from .framework.summary import PROJ, SequenceSummary
from .framework.walk_names import layers, pattern, signature, walked

BODY = "transformer"   # the base model's attribute in the head models


@dataclass(frozen=True)
class XLNetVariant(Variant):
    summary: SequenceSummary = SequenceSummary()   # the sequence classifier's and multiple-choice head's
    beams: squad.Beams = squad.Beams()   # XLNetForQuestionAnswering's SQuAD head (framework/squad.py)


def from_config(c: Cfg) -> ArchSpec:
    kind = c.get("attn_type", default=FROM_CLASS)
    if kind != "bi":
        raise NoAnalyticModel(f"{c.path}: XLNet attn_type {kind!r}: the op template describes 'bi' alone")
    if c.get("bi_data", default=FROM_CLASS):
        raise NoAnalyticModel(f"{c.path}: XLNet with bi_data (forward and backward position encodings per half batch)")
    h, a = c.int("d_model"), c.int("n_head")
    act = c.get("ff_activation", default=FROM_CLASS)
    # logits_proj reads d_model features
    sm = summary.from_config(c, h, c.common["num_labels"], h)
    return ArchSpec(layers=c.int("n_layer"), hidden=h, heads=a, kv_heads=a, head_dim=h // a,
                    intermediate=c.int("d_inner"), vocab=c.int("vocab_size"), activation=str(act),
                    tied_embeddings=bool(c.get("tie_word_embeddings", default=FROM_CLASS)),
                    variant=XLNetVariant(sm, squad.from_config(c)), **{**c.common, "head": squad.head(c)})


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    V, h = infer.shape(T, pattern(WALKED, "word_embedding"), "word embedding")
    _, a, d = infer.shape(T, pattern(WALKED, "rel_attn.q"), "rel_attn.q")
    f = infer.shape(T, pattern(WALKED, "ff.layer_1"), "ff.layer_1")[0]
    sm, sm_note = summary.from_tensors(T, "xlnet")
    head = common["head"]
    beams, beams_note = squad.from_names("xlnet", head)
    notes = (("no config: attn_type 'bi' assumed (klen + qlen relative positions)",) + ((sm_note,) if head == "seqcls" else ())
             + beams_note)
    return ArchSpec(num_labels=summary.labels(T) if head == "seqcls" else infer.num_labels(T),
                    layers=infer.count_layers(T, layers(WALKED, "rel_attn.q")), hidden=h, heads=a, kv_heads=a, head_dim=d,
                    intermediate=f, vocab=V, tied_embeddings=not infer.has(T, pattern(WALKED, "lm_loss")),
                    variant=XLNetVariant(sm, beams), assumptions=notes, **common)


def walk(B: Builder) -> Recorder:
    """The forward at B.s's sizes: writes its ops to B and records the modules it meets."""
    s, r, b, n = B.s, Recorder(B), B.b, B.seq
    h, a, d, f = s.hidden, s.heads, s.head_dim, s.intermediate
    L, R = s.layers, 2 * n   # relative positions klen + qlen (no mems: klen = qlen)
    every = Stack(f"layer[{L}]", "layer.{bid}", L, L)
    r.embedding("word_embedding", s.vocab, h, n, bucket="embedding")
    r.held("mask_emb (held: run only with target_mapping)", (("mask_emb", (("", (1, 1, h)),)),))
    for m in ("q", "k", "v"):
        r.einsum(f"rel_attn.{m}", h, a, d, every)
    r.einsum("rel_attn.r", h, a, d, every, rows=(b, R),
             label=every.name("rel_attn.r (the relative position rows, per batch row)"))
    B.attention(every.name("rel_attn (ac, P V)"), "encoder", a, n, n, d, L, causal=False)
    B.add(every.name("rel_attn (bd: Q R^T)"), "attention", "encoder", L, (b, a, n, d), (b, a, n, R),
          macs=b * a * n * R * d)
    # r_w_bias, r_r_bias (added to the queries); r_s_bias and seg_embed (the segment term, not run): held
    biases = r.count(tuple((f"rel_attn.{m}", (("", (a, d)),)) for m in ("r_w_bias", "r_r_bias", "r_s_bias"))
                      + (("rel_attn.seg_embed", (("", (2, a, d)),)),), every)
    B.add(every.name("rel_attn biases, seg_embed"), "activation", "encoder", L, (b, a, n, d), (b, a, n, d),
          params=biases, ew=2 * b * a * n * d)
    r.einsum("rel_attn.o", h, a, d, every, out=True)
    r.norm("rel_attn.layer_norm", r.tok, h, every)
    r.linear("ff.layer_1", r.tok, h, f, True, every)
    B.activation(every.name("ff act"), "encoder", r.tok, f, s.activation, L)
    r.linear("ff.layer_2", r.tok, f, h, True, every)
    r.norm("ff.layer_norm", r.tok, h, every)
    if s.head == "lm":
        r.linear("lm_loss", r.tok, h, s.vocab, True, bucket="cls", top=True, tied=s.tied_embeddings,
                 label="lm_loss" + (" (tied to word_embedding)" if s.tied_embeddings else ""))
    if s.head in ("seqcls", CHOICE):   # the summary, then logits_proj to the labels or to 1 a choice
        summary.walk(r, s.variant_as(XLNetVariant).summary, (h, 1 if s.head == CHOICE else s.num_labels))
    if s.head == squad.HEAD:
        squad.walk(r, "", s.variant_as(XLNetVariant).beams)
    token_heads(r)
    return r


def build(B: Builder) -> None:
    walk(B)


# the walk of a tiny, untied XLNetLMHeadModel: the paths of the name signature and from_tensors' look-ups
WALKED = walked(walk, "xlnet", head="lm", variant=XLNetVariant())
# ... and of a tiny XLNetForSequenceClassification: its heads' paths
WALKED_CLS = walked(walk, "xlnet", head="seqcls", variant=XLNetVariant(SequenceSummary(outputs=4)))
WALKED_BEAMS = walked(walk, "xlnet", head=squad.HEAD, variant=XLNetVariant(beams=squad.Beams(1, 1)))   # its SQuAD head


_SIZES = dict(vocab_size=99, d_model=32, n_layer=2, n_head=4, d_inner=37)

FAMILY = Family(
    name="xlnet",
    model_types=("xlnet",),
    signature=signature(WALKED, "rel_attn.r_w_bias"),
    from_config=from_config, from_tensors=from_tensors, build=build, expected_tensors=tensors(walk, BODY),
    heads=("base", "lm", "seqcls", "tokcls", "qa", CHOICE, squad.HEAD),
    # (logits_proj shows the sequence classifier: a multiple-choice model's is alike, [1, d_model])
    head_rules=(HeadRule(r"(^|\.)lm_loss\.", "lm"), HeadRule(r"(^|\.)classifier\.weight$", "tokcls"),
                HeadRule(r"(^|\.)qa_outputs\.weight$", "qa"), HeadRule(pattern(WALKED_BEAMS, squad.START), squad.HEAD),
                HeadRule(pattern(WALKED_CLS, PROJ), "seqcls")),
    min_seq=lambda s: squad.min_seq(s.head, s.variant_as(XLNetVariant).beams),
    tie_rules=(TieRule("lm_loss.weight", "transformer.word_embedding.weight", "config", heads=("lm",)),),
    samples=(
        # CPU: XLNetModel builds its position encoding on the device of its inputs
        Sample("XLNetConfig", _SIZES, ("XLNetModel", "XLNetLMHeadModel", "XLNetForSequenceClassification",
                                       "XLNetForTokenClassification", "XLNetForQuestionAnsweringSimple",
                                       "XLNetForQuestionAnswering"), device="cpu"),
        # names alone: its logits_proj [1, d_model] reads as a one-label sequence classifier's
        Sample("XLNetConfig", _SIZES, ("XLNetForMultipleChoice",), device="cpu", infer=False),
        # the summary's other fields: the first token, a projection to the labels (then num_labels = d_model, else
        # logits_proj cannot read it), relu
        Sample("XLNetConfig", dict(_SIZES, num_labels=32, summary_type="first", summary_proj_to_labels=True,
                                   summary_activation="relu"), ("XLNetForSequenceClassification",), device="cpu"),
        Sample("XLNetConfig", dict(_SIZES, ff_activation="relu", tie_word_embeddings=False), ("XLNetLMHeadModel",),
               device="cpu"),
    ),
)
