"""Task heads of the encoders laid out as a DecoderLayout (causal false) beside their MLM head, as transformers 5 builds
them (`with_heads` adds them to the Family fields layout.family_fields gives): the layout walks the body (its walk writes
no head for these), `walk` the head after it, recording each module as its op is written (framework/recorder.py), so
the op template and the expected tensors derive from one walk.

* ModernBERT (modeling_modernbert.py) *ForSequenceClassification, *ForTokenClassification, *ForQuestionAnswering and
  *ForMultipleChoice: `head` (ModernBertPredictionHead: dense, classifier_activation, norm), dropout, `classifier`
  Linear(hidden, num_labels; 1 for multiple choice): on one vector a sequence (classifier_pooling "cls": the first token,
  "mean": the tokens averaged) for the sequence heads, on every token for the others (QA's classifier is num_labels wide);
* EuroBERT (modeling_eurobert.py) *ForSequenceClassification: `dense` + GELU, `classifier`, on the first token
  (classifier_pooling "bos"), the tokens' mean ("mean"), or every token, the logits then averaged ("late");
  *ForTokenClassification: `classifier` on every token;
* GTE and NomicBERT (modeling_gte.py, modeling_nomic_bert.py) *ForSequenceClassification: the body's `pooler` (dense +
  tanh on the first token: add_pooling_layer), `classifier`; *ForTokenClassification: `classifier` on every token.
* ModernBERT-decoder (modeling_modernbert_decoder.py) *ForSequenceClassification: ModernBERT's `head` and `classifier`
  (biased by classifier_bias) on every token, the last non-pad token's logits then picked (classifier_pooling "last":
  an index, no FLOPs).

A multiple-choice model's body runs over the input's [batch, num_choices, seq] viewed as [batch x num_choices, seq]:
the batch counts those sequences (encoder.CHOICE_NOTE)."""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from ...errors import NoAnalyticModel
from . import decoder_heads, encoder
from .archspec import Variant
from .base import CHOICE, FROM_CLASS, ArchSpec, Cfg, HeadRule, Shapes, Tensors
from .layout_base import DecoderLayout
from .ops import Builder
from .recorder import Recorder

SEQUENCE = ("seqcls", CHOICE)   # the heads reading one vector a sequence


@dataclass(frozen=True)
class EncoderHeads:
    """What a family's task heads hold (module docstring): `heads`, of seqcls, tokcls, qa and mc."""
    heads: tuple[str, ...]
    prediction: bool = False   # ModernBERT's `head` before every classifier
    dense: bool = False        # EuroBERT's `dense` + GELU before the sequence classifier
    pooler: bool = False       # GTE's and NomicBERT's sequence classifier reads the body's pooler
    poolings: tuple[str, ...] = ("cls",)   # the classifier_pooling values transformers runs (the first: none read)
    bias: bool = True          # the classifier's bias (ModernBERT-decoder's: classifier_bias, its layout requires false)


@dataclass(frozen=True)
class Pooling(Variant):
    """A sequence head's config: classifier_pooling (`kind`: cls / bos the first token, mean, late) and ModernBERT's
    classifier_activation."""
    kind: str = "cls"
    activation: str = "gelu"


def pooling_of(c: Cfg, heads: EncoderHeads) -> Pooling:
    kind = str(c.get("classifier_pooling", default=FROM_CLASS)) if len(heads.poolings) > 1 else heads.poolings[0]
    if kind not in heads.poolings:
        raise NoAnalyticModel(f"{c.path}: config classifier_pooling = {kind!r}: transformers runs "
                              f"{', '.join(heads.poolings)}")
    return Pooling(kind, str(c.get("classifier_activation", default=FROM_CLASS)) if heads.prediction else "gelu")


def walk(B: Builder, lay: DecoderLayout, heads: EncoderHeads) -> Recorder:
    """The head of B.s (after the body), its modules recorded."""
    r, s = Recorder(B, bucket="cls"), B.s
    h, pool = s.hidden, s.variant if isinstance(s.variant, Pooling) else Pooling()
    one = s.head in SEQUENCE and pool.kind not in ("late", "last")   # one vector a sequence, else every token
    rows = r.first if one else r.tok
    if s.head in SEQUENCE and pool.kind == "mean":
        B.add("pooling (mean over the tokens)", "activation", "cls", 1, r.tok + (h,), r.first + (h,), ew=B.b * B.seq * h)
    if heads.pooler and s.head == "seqcls":
        encoder.pooler(r)
    if heads.prediction:   # as the MLM head's transform (layout_parts.output_heads): the layout's biases
        r.linear("head.dense", rows, h, h, lay.lm_dense_bias, top=True)
        B.activation(f"head.dense act ({pool.activation})", "cls", rows, h, pool.activation)
        bias = lay.norm == "layernorm"
        r.record("head.norm", (("weight", (h,)),) + ((("bias", (h,)),) if bias else ()), top=True)
        B.norm("head.norm", "cls", rows, h, residual=False, kind="layernorm", bias=bias)
    if heads.dense and s.head == "seqcls":
        r.linear("dense", rows, h, h, True, top=True)
        B.activation("dense act (gelu)", "cls", rows, h, "gelu")
    out = 1 if s.head == CHOICE else s.num_labels
    r.linear("classifier", rows, h, out, heads.bias, top=True, note=encoder.CHOICE_NOTE if s.head == CHOICE else "")
    if s.head in SEQUENCE and pool.kind == "late":
        B.add("logits averaged over the tokens (late pooling)", "activation", "cls", 1, r.tok + (out,), r.first + (out,),
              ew=B.b * B.seq * out)
    return r


def with_heads(fields: dict[str, Any], lay: DecoderLayout, heads: EncoderHeads) -> dict[str, Any]:
    """The Family fields of an encoder layout (layout.family_fields) with `heads` beside its MLM head. Without
    config.json, a pooler's family tells its sequence classifier (the body's pooler and `classifier`) from its token
    classifier (`classifier` alone), the classes from the classifier's rows; ModernBERT's heads hold the same names
    (`head`, `classifier`): config.json's architectures alone tells them (read as the sequence classifier)."""
    from_config: Callable[[Cfg], ArchSpec] = fields["from_config"]
    from_tensors: Callable[[Tensors, dict[str, Any]], ArchSpec] = fields["from_tensors"]
    build: Callable[[Builder], None] = fields["build"]
    expected: Callable[[ArchSpec], Shapes] = fields["expected_tensors"]

    def config(c: Cfg) -> ArchSpec:
        s = from_config(c)
        return replace(s, variant=pooling_of(c, heads)) if s.head in heads.heads else s

    def names(T: Tensors, common: dict[str, Any]) -> ArchSpec:
        s = from_tensors(T, common)
        return replace(s, num_labels=decoder_heads.labels(T)) if s.head in heads.heads else s

    def ops(B: Builder) -> None:
        build(B)
        if B.s.head in heads.heads:
            walk(B, lay, heads)

    def tensors(s: ArchSpec) -> Shapes:
        out = expected(s)
        if s.head in heads.heads:
            out.update(walk(Builder(s, 1, 1, 1, 1, 1), lay, heads).shapes(lay.paths.body))
        return out

    pooled = HeadRule(r"^classifier\.weight$", "tokcls", unless=rf"^{re.escape(lay.paths.body)}\.pooler\.", otherwise="seqcls")
    return dict(fields, from_config=config, from_tensors=names, build=ops, expected_tensors=tensors,
                heads=fields["heads"] + heads.heads, head_rules=(pooled,) * heads.pooler + tuple(fields["head_rules"]))
