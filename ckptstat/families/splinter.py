"""Splinter (transformers modeling_splinter.py): BERT's embeddings (word, position, token-type tables, LayerNorm) and
post-LN layers (encoder.py, bert.LAYER's names) with no pooler, and the Question-Aware Span Selection head
(QuestionAwareSpanSelectionHead, `splinter_qass`) of SplinterForQuestionAnswering and SplinterForPreTraining: the
question tokens' hidden states gathered, each through query_start_transform and query_end_transform (dense, GELU
whatever hidden_act, LayerNorm: SplinterFullyConnectedLayer), every token through start_transform and end_transform,
the gathered ones through start_classifier / end_classifier (h -> h, no bias), then each question's logits over the
sequence (a [questions, h] x [h, seq] matmul a sequence, start and end).

*ForQuestionAnswering without question_positions reads one question a sequence (the first question_token_id; position 0
where there is none): the template's. SplinterForPreTraining reads every question_token_id of the input (at least one a
sequence): how many is the input's, so its FLOPs are refused by name (QUESTIONS), its parameters described.
One description: `walk` gives the op template and the expected tensors of every head."""
from __future__ import annotations

from typing import Any

from ..errors import NoAnalyticModel
from .bert import LAYER
from .framework import encoder, infer
from .framework.base import FROM_CLASS, ArchSpec, Cfg, Family, HeadRule, Sample, Tensors
from .framework.ops import Builder
from .framework.recorder import Recorder, Stack, tensors
from .framework.walk_names import layers, signature, walked

QASS = "splinter_qass"
QUESTIONS = ("SplinterForPreTraining's question-aware span selection over every question token of the input (how many is "
             "the input's, not the config's)")


def from_config(c: Cfg) -> ArchSpec:
    h, a = c.int("hidden_size"), c.int("num_attention_heads")
    return ArchSpec(layers=c.int("num_hidden_layers"), hidden=h, heads=a, kv_heads=a, head_dim=h // a,
                    intermediate=c.int("intermediate_size"), vocab=c.int("vocab_size"),
                    positions=c.int("max_position_embeddings"), type_vocab=c.int("type_vocab_size", default=FROM_CLASS),
                    embedding_size=h, activation=str(c.get("hidden_act", default=FROM_CLASS)), **c.common)


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    d = encoder.dims(T, WALKED, LAYER)
    a, note = infer.heads_for(d["hidden"], 64)
    return ArchSpec(layers=infer.count_layers(T, layers(WALKED, LAYER[0])), heads=a, kv_heads=a,
                    head_dim=d["hidden"] // a, assumptions=(note,), **d, **common)


def qass(r: Recorder) -> None:
    """QuestionAwareSpanSelectionHead at one question a sequence (r.first: the gathered question token)."""
    B, h = r.B, r.s.hidden
    for side in ("start", "end"):
        for name, rows in ((f"query_{side}_transform", r.first), (f"{side}_transform", r.tok)):
            r.linear(f"{QASS}.{name}.dense", rows, h, h, True, bucket="cls", top=True)
            B.activation(f"{QASS}.{name} act (gelu)", "cls", rows, h, "gelu")
            r.norm(f"{QASS}.{name}.LayerNorm", rows, h, residual=False, bucket="cls", top=True)
        r.linear(f"{QASS}.{side}_classifier", r.first, h, h, False, bucket="cls", top=True)
        B.add(f"{QASS} {side} logits (question x tokens)", "attention", "cls", 1, r.first + (h,), r.tok,
              macs=B.b * B.seq * h)


def walk(B: Builder) -> Recorder:
    """The forward at B.s's sizes: writes its ops to B and records the modules it meets (recorder.Recorder)."""
    r, s = Recorder(B), B.s
    encoder.embeddings(r)
    encoder.stack_layers(r, Stack(f"encoder.layer[{s.layers}]", "encoder.layer.{bid}", s.layers, s.layers), LAYER)
    if s.head in ("qa", "pretraining"):
        qass(r)
    return r


def flops_refused(s: ArchSpec) -> str | None:
    return QUESTIONS if s.head == "pretraining" else None


def build(B: Builder) -> None:
    # SplinterForPreTraining: its parameters at one token (graph.predict_params), no FLOPs beyond
    if flops_refused(B.s) and B.seq > 1:
        raise NoAnalyticModel(f"{QUESTIONS}: not described by the op template")
    walk(B)


# the walk of a tiny SplinterForQuestionAnswering: the paths of the name signature and from_tensors' look-ups
WALKED = walked(walk, "splinter", type_vocab=2, head="qa")

_SIZES = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37, vocab_size=99,
              max_position_embeddings=64)

FAMILY = Family(
    name="splinter",
    model_types=("splinter",),
    # the QASS head: a SplinterModel's file holds BERT's names without a pooler (found as bert's)
    signature=signature(WALKED, f"{QASS}.start_classifier"),
    before=("bert",),   # its layers' attention.self.query is BERT's signature too
    from_config=from_config, from_tensors=from_tensors, build=build, expected_tensors=tensors(walk, "splinter"),
    heads=("base", "qa", "pretraining"),
    # SplinterForPreTraining holds SplinterForQuestionAnswering's names: config.json's architectures tells it
    head_rules=(HeadRule(rf"^{QASS}\.", "qa"),),
    flops_refused=flops_refused,
    samples=(
        # (on the CPU: SplinterModel.forward's warn_if_padding_and_no_attention_mask reads input_ids)
        Sample("SplinterConfig", _SIZES, ("SplinterModel",), device="cpu", detected_as="bert"),
        # (on the CPU: the question position is an argmax over input_ids)
        Sample("SplinterConfig", dict(_SIZES, question_token_id=5), ("SplinterForQuestionAnswering",), device="cpu"),
        Sample("SplinterConfig", dict(_SIZES, hidden_act="relu"), ("SplinterForQuestionAnswering",), device="cpu"),
        Sample("SplinterConfig", _SIZES, ("SplinterForPreTraining",), device="cpu", infer=False),
    ),
)
