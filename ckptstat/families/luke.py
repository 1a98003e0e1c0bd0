"""LUKE (transformers modeling_luke.py): RoBERTa's embeddings (positions from padding_idx + 1) and BERT's post-LN layers
(encoder.py, bert.LAYER's names) with entity inputs beside the words: LukeEntityEmbeddings (`entity_embeddings`: a table
of entity_vocab_size x entity_emb_size, a bias-free entity_embedding_dense to hidden where they differ, position and
token-type tables, a LayerNorm) and, with use_entity_aware_attention, each layer's w2e_query, e2w_query and e2e_query.

The template is the word-only forward (input_ids, no entity_ids), which is what a forward of the words alone runs: the
entity modules are held (their parameters counted) and never called, each layer's attention the words' own query, key
and value. Entity inputs add the entity tokens to every layer (and the entity-aware queries): not described, and the
heads that need them (LukeForEntityClassification, LukeForEntityPairClassification, LukeForEntitySpanClassification)
are not modelled. Heads: LukeForMaskedLM (the pooler kept; LukeLMHead: dense, GELU whatever hidden_act, layer_norm, an
untied decoder whose bias is lm_head.bias by tie_word_embeddings; EntityPredictionHead held: transform dense h ->
entity_emb_size, LayerNorm, decoder tied to the entity table by tie_word_embeddings, bias), *ForSequenceClassification
and *ForMultipleChoice on the pooler, *ForTokenClassification and *ForQuestionAnswering without it. One description:
`walk` gives the op template and the expected tensors of every head."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from .bert import LAYER
from .framework import encoder, infer
from .framework.archspec import Variant
from .framework.base import CHOICE, FROM_CLASS, ArchSpec, Cfg, Family, Sample, Tensors, TieRule
from .framework.ops import Builder
from .framework.recorder import Recorder, Stack, linear_shapes, tensors
from .framework.walk_names import layers, pattern, signature, walked

ENTITY = "entity_embeddings"
QUERIES = ("w2e_query", "e2w_query", "e2e_query")
# what the output's notes say of the template
WORD_ONLY = ("LUKE: the word-only forward (input_ids, no entity_ids): the entity embeddings and entity-aware queries are "
             "held, not run; entity inputs add tokens to every layer and are not counted")


@dataclass(frozen=True)
class LukeEntities(Variant):
    """The entity table (entity_vocab_size rows of entity_emb_size) and whether each layer holds the entity-aware
    queries (use_entity_aware_attention)."""
    vocab: int
    width: int
    aware: bool


def pooler(model_type: str, head: str) -> bool:
    """LukeModel's add_pooling_layer: false under *ForTokenClassification and *ForQuestionAnswering."""
    return head not in ("tokcls", "qa")


def from_config(c: Cfg) -> ArchSpec:
    h, a = c.int("hidden_size"), c.int("num_attention_heads")
    entities = LukeEntities(c.int("entity_vocab_size", default=FROM_CLASS), c.int("entity_emb_size", default=FROM_CLASS),
                            bool(c.get("use_entity_aware_attention", default=FROM_CLASS)))
    return ArchSpec(layers=c.int("num_hidden_layers"), hidden=h, heads=a, kv_heads=a, head_dim=h // a,
                    intermediate=c.int("intermediate_size"), vocab=c.int("vocab_size"),
                    positions=c.int("max_position_embeddings"), type_vocab=c.int("type_vocab_size", default=FROM_CLASS),
                    embedding_size=h, activation=str(c.get("hidden_act", default=FROM_CLASS)), variant=entities,
                    pooler=pooler(c.model_type, c.head),
                    tied_embeddings=bool(c.get("tie_word_embeddings", default=FROM_CLASS)),
                    **dict(c.common, assumptions=(*c.common.get("assumptions", ()), WORD_ONLY)))


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    d = encoder.dims(T, WALKED, LAYER)
    a, note = infer.heads_for(d["hidden"], 64)
    ve, we = infer.shape(T, pattern(WALKED, f"{ENTITY}.{ENTITY}"), "entity embeddings")
    return ArchSpec(num_labels=infer.num_labels(T), layers=infer.count_layers(T, layers(WALKED, LAYER[0])), heads=a,
                    kv_heads=a, head_dim=d["hidden"] // a, pooler=infer.has(T, pattern(WALKED, "pooler.dense")),
                    variant=LukeEntities(ve, we, infer.has(T, pattern(WALKED, f"attention.self.{QUERIES[0]}"))),
                    # a tied entity decoder is not saved
                    tied_embeddings=not infer.has(T, r"(^|\.)entity_predictions\.decoder\.weight$"),
                    assumptions=(note, WORD_ONLY), **d, **common)


def walk(B: Builder) -> Recorder:
    """The word-only forward at B.s's sizes: writes its ops to B and records the modules it meets (recorder.Recorder)."""
    r, s = Recorder(B), B.s
    h, L, e = s.hidden, s.layers, s.variant_as(LukeEntities)
    encoder.embeddings(r)
    table = ((f"{ENTITY}.{ENTITY}", (("weight", (e.vocab, e.width)),)),) + (
        ((f"{ENTITY}.entity_embedding_dense", (("weight", (h, e.width)),)),) if e.width != h else ()) + (
        (f"{ENTITY}.position_embeddings", (("weight", (s.positions, h)),)),
        (f"{ENTITY}.token_type_embeddings", (("weight", (s.type_vocab, h)),)),
        (f"{ENTITY}.LayerNorm", (("weight", (h,)), ("bias", (h,)))))
    r.held(f"{ENTITY} (held: entity inputs not described)", table)
    stack = Stack(f"encoder.layer[{L}]", "encoder.layer.{bid}", L, L)
    encoder.stack_layers(r, stack, LAYER)
    if e.aware:
        r.held(stack.name("attention.self entity-aware queries (held: entity inputs not described)"),
               tuple((f"attention.self.{q}", linear_shapes(h, h)) for q in QUERIES), stack)
    if s.pooler:
        encoder.pooler(r)
    if s.head == "mlm":
        r.linear("lm_head.dense", r.tok, h, h, True, bucket="cls", top=True)
        B.activation("lm_head act (gelu)", "cls", r.tok, h, "gelu")
        r.norm("lm_head.layer_norm", r.tok, h, residual=False, bucket="cls", top=True)
        r.linear("lm_head.decoder", r.tok, h, s.vocab, True, bucket="cls", top=True)
        # the decoder's bias where tied (tie_word_embeddings), else a parameter held apart and unused
        r.record("lm_head.bias", (("", (s.vocab,)),), top=True)
        if not s.tied_embeddings:
            B.add("lm_head.bias (untied from the decoder's: held, unused)", "embedding", "cls", 0, (s.vocab,), (s.vocab,),
                  params=s.vocab)
        # EntityPredictionHead: runs on entity outputs only (held); its decoder the entity table where tied
        held = (("transform.dense", linear_shapes(h, e.width)),
                ("transform.LayerNorm", (("weight", (e.width,)), ("bias", (e.width,)))), ("bias", (("", (e.vocab,)),)),
                ("decoder", (("weight", (e.vocab, e.width)),)))
        for path, shapes in held:
            r.record(f"entity_predictions.{path}", shapes, top=True)
        B.add("entity_predictions (held: entity inputs not described)", "embedding", "embedding", 0, r.tok, r.tok,
              params=sum(math.prod(shape) for _, shapes in held[:None if not s.tied_embeddings else -1]
                         for _, shape in shapes))
    elif s.head == "seqcls":
        encoder.sequence_classifier(r, dense=False)
    elif s.head == CHOICE:
        encoder.multiple_choice(r)
    else:
        encoder.token_heads(r)
    return r


def build(B: Builder) -> None:
    walk(B)


# the walk of a tiny LukeModel (entity-aware, entity width apart from hidden): the name signature's and from_tensors'
# paths
WALKED = walked(walk, "luke", type_vocab=2, pooler=True, variant=LukeEntities(5, 3, True))

_SIZES = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37, vocab_size=99,
              max_position_embeddings=64, entity_vocab_size=50, entity_emb_size=16)

FAMILY = Family(
    name="luke",
    model_types=("luke",),
    signature=signature(WALKED, f"{ENTITY}.{ENTITY}"),
    before=("bert",),   # its layers' attention.self.query is BERT's signature too
    from_config=from_config, from_tensors=from_tensors, build=build, expected_tensors=tensors(walk, "luke"),
    heads=("base", "mlm", "seqcls", "tokcls", "qa", CHOICE),
    head_rules=encoder.HEAD_RULES,
    pooler=pooler,
    # LukeForMaskedLM._tied_weights_keys
    tie_rules=(TieRule("entity_predictions.decoder.weight", f"luke.{ENTITY}.{ENTITY}.weight", "config", heads=("mlm",)),
               TieRule("lm_head.decoder.bias", "lm_head.bias", "config", heads=("mlm",))),
    position_offset={"luke": 2},   # RoBERTa's position ids from padding_idx + 1 (pad_token_id 1)
    # (on the CPU: LukeModel.forward's warn_if_padding_and_no_attention_mask reads input_ids)
    samples=(
        Sample("LukeConfig", dict(_SIZES, num_labels=3),
               ("LukeModel", "LukeForMaskedLM", "LukeForSequenceClassification", "LukeForTokenClassification"),
               device="cpu"),
        Sample("LukeConfig", _SIZES, ("LukeForQuestionAnswering",), device="cpu"),
        # a one-label classifier on the pooler: config.json tells the head
        Sample("LukeConfig", _SIZES, ("LukeForMultipleChoice",), device="cpu", infer=False),
        # entity table as wide as hidden (no entity_embedding_dense), no entity-aware queries, untied entity decoder
        Sample("LukeConfig", dict(_SIZES, entity_emb_size=32, use_entity_aware_attention=False, tie_word_embeddings=False),
               ("LukeModel", "LukeForMaskedLM"), device="cpu"),
    ),
)
