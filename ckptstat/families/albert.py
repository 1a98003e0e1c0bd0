"""ALBERT (transformers modeling_albert.py): a BERT-style encoder (encoder.py) with factorised embeddings
(E -> h through embedding_hidden_mapping_in) and layers shared across depth: num_hidden_groups groups of
inner_group_num layers, each group reused until num_hidden_layers layers have run. One description: `walk`
(encoder.py's recorded pieces) gives the op template and the expected tensors of every head."""
from __future__ import annotations

from typing import Any

from .framework import encoder, infer
from .framework.base import CHOICE, FROM_CLASS, ArchSpec, Cfg, Family, Sample, Tensors, TieRule
from .framework.ops import Builder
from .framework.recorder import Recorder, Stack, tensors
from .framework.walk_names import layers, pattern, signature, walked

LAYER: encoder.LayerNames = (
    "attention.query", "attention.key", "attention.value", "attention", "attention.dense", "attention.LayerNorm",
    "ffn", "ffn act", "ffn_output", "full_layer_layer_norm")
LM = encoder.LMHead("predictions.decoder", "predictions.dense", "predictions.LayerNorm", "predictions.bias")


def pooler(model_type: str, head: str) -> bool:
    return head in ("base", "pretraining", "seqcls", CHOICE)


def from_config(c: Cfg) -> ArchSpec:
    h, a = c.int("hidden_size"), c.int("num_attention_heads")
    e = c.int("embedding_size", default=h)
    act = c.get("hidden_act", default="gelu")
    return ArchSpec(layers=c.int("num_hidden_layers"), hidden=h, heads=a, kv_heads=a, head_dim=h // a,
                    intermediate=c.int("intermediate_size"), vocab=c.int("vocab_size"),
                    positions=c.int("max_position_embeddings"), type_vocab=c.int("type_vocab_size", default=2),
                    embedding_size=e, activation=str(act), pooler=pooler(c.model_type, c.head),
                    shared_groups=c.int("num_hidden_groups", default=1), inner_group=c.int("inner_group_num", default=1),
                    tied_embeddings=bool(c.get("tie_word_embeddings", default=FROM_CLASS)), **c.common)


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    d = encoder.dims(T, WALKED, LAYER)
    groups = infer.count_layers(T, layers(WALKED, LAYER[0]))
    inner = infer.count_layers(T, layers(WALKED, LAYER[0], inner=True))
    a, note = infer.heads_for(d["hidden"], 64)
    # num_hidden_layers is not in the weights (layers are shared): albert-base/xxlarge use 12
    notes = ("no config: ALBERT's num_hidden_layers is not in the weights (shared layers); assumed 12", note)
    return ArchSpec(num_labels=infer.num_labels(T), layers=12, heads=a, kv_heads=a, head_dim=d["hidden"] // a,
                    pooler=infer.has(T, pattern(WALKED, "pooler")), shared_groups=groups, inner_group=inner or 1,
                    assumptions=notes, **d, **common)


def walk(B: Builder) -> Recorder:
    """The forward at B.s's sizes: writes its ops to B and records the modules it meets (recorder.Recorder)."""
    r, s = Recorder(B), B.s
    h, E, G, inner = s.hidden, s.emb, s.shared_groups or 1, s.inner_group
    encoder.embeddings(r)
    r.linear("encoder.embedding_hidden_mapping_in", r.tok, E, h, True, bucket="embedding")
    # shared layers: G groups of `inner` layers stored; num_hidden_layers group calls run, each its `inner` layers
    encoder.stack_layers(r, Stack(f"encoder.albert_layer_groups[{G} shared x{inner} layers]",
                                  "encoder.albert_layer_groups.{bid}.albert_layers.{xid}", G, s.layers * inner, inner),
                         LAYER)
    if s.pooler:
        encoder.pooler(r, "pooler")
    if s.head in ("mlm", "pretraining"):
        encoder.mlm_head(r, LM, E)
        if s.head == "pretraining":
            r.linear("sop_classifier.classifier", r.first, h, s.num_labels, True, bucket="cls", top=True)
    if s.head == "seqcls":
        encoder.sequence_classifier(r, dense=not s.pooler)
    elif s.head == CHOICE:   # on the pooled output
        encoder.multiple_choice(r)
    else:
        encoder.token_heads(r)
    return r


def build(B: Builder) -> None:
    walk(B)


# the walk of a tiny AlbertModel (pooler, token types): the paths of the name signature and from_tensors' look-ups
WALKED = walked(walk, "albert", type_vocab=2, pooler=True)


_SIZES = dict(hidden_size=32, num_attention_heads=4, intermediate_size=37, vocab_size=99, max_position_embeddings=64,
              embedding_size=16)

FAMILY = Family(
    name="albert",
    model_types=("albert",),
    signature=signature(WALKED, LAYER[0]),
    from_config=from_config, from_tensors=from_tensors, build=build, expected_tensors=tensors(walk, "albert"),
    heads=("base", "mlm", "pretraining", "seqcls", "tokcls", "qa", CHOICE),
    head_rules=encoder.HEAD_RULES,
    pooler=pooler,
    tie_rules=(TieRule(f"{LM.decoder}.weight", "albert.embeddings.word_embeddings.weight", "config",
                       heads=("mlm", "pretraining")),
               TieRule(f"{LM.decoder}.bias", str(LM.bias), "config", heads=("mlm", "pretraining"))),
    samples=(
        Sample("AlbertConfig", dict(_SIZES, num_hidden_layers=3),
               ("AlbertForMaskedLM", "AlbertForQuestionAnswering")),
        Sample("AlbertConfig", dict(_SIZES, num_hidden_layers=3, num_labels=3), ("AlbertForTokenClassification",)),
        Sample("AlbertConfig", dict(_SIZES, num_hidden_layers=3), ("AlbertModel", "AlbertForPreTraining")),
        Sample("AlbertConfig", dict(_SIZES, num_hidden_layers=3, num_labels=3), ("AlbertForSequenceClassification",)),
        # a one-label sequence classifier's names (classifier [1, hidden] on the pooler): config.json tells the head
        Sample("AlbertConfig", dict(_SIZES, num_hidden_layers=3), ("AlbertForMultipleChoice",), device="cpu", infer=False),
        # 4 layers run from 2 groups of 2 shared layers
        Sample("AlbertConfig", dict(_SIZES, num_hidden_layers=4, num_hidden_groups=2, inner_group_num=2),
               ("AlbertForMaskedLM",)),
    ),
)
