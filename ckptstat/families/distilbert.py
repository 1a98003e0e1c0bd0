"""DistilBERT (transformers modeling_distilbert.py): a BERT-style encoder (encoder.py) without token
types or pooler, its config spelled dim / n_heads / n_layers / hidden_dim. One description: `walk` (encoder.py's
recorded pieces) gives the op template and the expected tensors of every head."""
from __future__ import annotations

from typing import Any

from .framework import encoder, infer
from .framework.base import CHOICE, FROM_CLASS, ArchSpec, Cfg, Family, HeadRule, Sample, Tensors, TieRule
from .framework.ops import Builder
from .framework.recorder import Recorder, Stack, tensors
from .framework.walk_names import layers, pattern, signature, walked

LAYER: encoder.LayerNames = (
    "attention.q_lin", "attention.k_lin", "attention.v_lin", "attention", "attention.out_lin", "sa_layer_norm",
    "ffn.lin1", "ffn act", "ffn.lin2", "output_layer_norm")
LM = encoder.LMHead("vocab_projector", "vocab_transform", "vocab_layer_norm")   # no bias held beside the decoder's


def from_config(c: Cfg) -> ArchSpec:
    h, a = c.int("dim"), c.int("n_heads")
    return ArchSpec(layers=c.int("n_layers"), hidden=h, heads=a, kv_heads=a, head_dim=h // a,
                    intermediate=c.int("hidden_dim"), vocab=c.int("vocab_size"),
                    positions=c.int("max_position_embeddings"), activation=str(c.get("activation", default="gelu")),
                    tied_embeddings=bool(c.get("tie_word_embeddings", default=FROM_CLASS)), **c.common)


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    V, h = infer.shape(T, pattern(WALKED, "embeddings.word_embeddings"), "word embeddings")
    P = infer.shape(T, pattern(WALKED, "embeddings.position_embeddings"), "position embeddings")[0]
    f = infer.shape(T, pattern(WALKED, LAYER[6]), LAYER[6])[0]
    a, note = infer.heads_for(h, 64)
    return ArchSpec(num_labels=infer.num_labels(T), layers=infer.count_layers(T, layers(WALKED, LAYER[0])), hidden=h,
                    heads=a, kv_heads=a, head_dim=h // a, intermediate=f, vocab=V, positions=P, assumptions=(note,),
                    **common)


def walk(B: Builder) -> Recorder:
    """The forward at B.s's sizes: writes its ops to B and records the modules it meets (recorder.Recorder)."""
    r, s = Recorder(B), B.s
    h, L = s.hidden, s.layers
    encoder.embeddings(r)
    encoder.stack_layers(r, Stack(f"transformer.layer[{L}]", "transformer.layer.{bid}", L, L), LAYER)
    if s.head in ("mlm", "lm"):
        encoder.mlm_head(r, LM, h)
    if s.head == "seqcls":
        r.linear("pre_classifier", r.first, h, h, True, bucket="cls", top=True)
        B.activation("pre_classifier act (relu)", "cls", r.first, h, "relu")
        r.linear("classifier", r.first, h, s.num_labels, True, bucket="cls", top=True)
    elif s.head == CHOICE:   # on the first token, through its own pre_classifier
        encoder.multiple_choice(r, pre="pre_classifier")
    else:
        encoder.token_heads(r)
    return r


def build(B: Builder) -> None:
    walk(B)


# the walk of a tiny DistilBertModel: the paths of the name signature and from_tensors' look-ups
WALKED = walked(walk, "distilbert")


FAMILY = Family(
    name="distilbert",
    model_types=("distilbert",),
    signature=signature(WALKED, LAYER[0]),
    from_config=from_config, from_tensors=from_tensors, build=build, expected_tensors=tensors(walk, "distilbert"),
    heads=("base", "mlm", "seqcls", "tokcls", "qa", CHOICE),
    head_rules=(HeadRule(r"(^|\.)vocab_transform\.", "mlm"), HeadRule(r"(^|\.)qa_outputs\.", "qa"),
                HeadRule(r"(^|\.)pre_classifier\.", "seqcls"), HeadRule(r"(^|\.)classifier\.", "tokcls")),
    tie_rules=(TieRule(f"{LM.decoder}.weight", "distilbert.embeddings.word_embeddings.weight", "config", heads=("mlm",)),),
    samples=(
        Sample("DistilBertConfig", dict(dim=32, n_layers=2, n_heads=4, hidden_dim=37, vocab_size=99,
                                        max_position_embeddings=64),
               ("DistilBertModel", "DistilBertForMaskedLM", "DistilBertForSequenceClassification",
                "DistilBertForTokenClassification", "DistilBertForQuestionAnswering")),
        # a one-label sequence classifier's names (pre_classifier, classifier [1, dim]): config.json tells the head
        Sample("DistilBertConfig", dict(dim=32, n_layers=2, n_heads=4, hidden_dim=37, vocab_size=99,
                                        max_position_embeddings=64), ("DistilBertForMultipleChoice",), device="cpu",
               infer=False),
    ),
)
