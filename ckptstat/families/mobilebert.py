"""MobileBERT (transformers modeling_mobilebert.py): a post-norm BERT-style encoder whose layers run narrow. Embeddings
of embedding_size, with trigram_input the token's, its right and left neighbours' concatenated (3 x E), mapped to hidden
by embedding_transformation (run when trigram_input or E != hidden), plus position and token-type tables of hidden.
Each layer (use_bottleneck): bottleneck.input maps hidden to intra_bottleneck_size (the true hidden width, t), and
with key_query_shared_bottleneck bottleneck.attention another such map feeds query and key (value then reads hidden;
use_bottleneck_attention: all three read bottleneck.input's), attention and its output at t, num_feedforward_networks
- 1 stacked FFNs (ffn.{i}) then the layer's own FFN at t, and output.bottleneck back to hidden. Its norms are NoNorm
(normalization_type "no_norm": x * weight + bias) or LayerNorm. The MLM head's transform (always a LayerNorm), then
one matmul with [decoder.weight^T; dense.weight] (the word embeddings' E rows and hidden - E more). One description:
`walk` gives the op template and the expected tensors of every head (MobileBertForNextSentencePrediction: no head
name, answered on the meta device)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import NoAnalyticModel
from .framework import encoder, infer
from .framework.archspec import Variant
from .framework.base import CHOICE, FROM_CLASS, ArchSpec, Cfg, Family, Sample, Shapes, Tensors, TieRule
from .framework.ops import Builder
from .framework.recorder import Recorder, Stack, linear_shapes
from .framework.walk_names import layers, pattern, signature, walked


@dataclass(frozen=True)
class MobileBert(Variant):
    """MobileBertConfig's switches (module docstring); `true_hidden` is intra_bottleneck_size with use_bottleneck, else
    hidden_size."""
    true_hidden: int
    use_bottleneck: bool = True
    bottleneck_attention: bool = False
    shared_kq: bool = True
    ffns: int = 4
    trigram: bool = True
    norm: str = "no_norm"
    pooler_dense: bool = True


def pooler(model_type: str, head: str) -> bool:
    return head in ("base", "pretraining", "seqcls", CHOICE)


def from_config(c: Cfg) -> ArchSpec:
    h, a = c.int("hidden_size"), c.int("num_attention_heads")
    use = bool(c.get("use_bottleneck", default=FROM_CLASS))
    t = c.int("intra_bottleneck_size", default=FROM_CLASS) if use else h
    m = MobileBert(t, use, bool(c.get("use_bottleneck_attention", default=FROM_CLASS)),
                   bool(c.get("key_query_shared_bottleneck", default=FROM_CLASS)),
                   c.int("num_feedforward_networks", default=FROM_CLASS), bool(c.get("trigram_input", default=FROM_CLASS)),
                   str(c.get("normalization_type", default=FROM_CLASS)),
                   bool(c.get("classifier_activation", default=FROM_CLASS)))
    if m.norm not in ("no_norm", "layer_norm"):
        raise NoAnalyticModel(f"{c.path}: normalization_type {m.norm!r}: transformers has no_norm and layer_norm")
    if t % a or (use and not (m.bottleneck_attention or m.shared_kq) and t != h):
        # (query and key, Linear(t, t), would read the hidden states: transformers' forward fails)
        raise NoAnalyticModel(f"{c.path}: MobileBERT with intra_bottleneck_size {t}, hidden {h}, {a} heads and these "
                              "bottleneck switches does not run in transformers")
    return ArchSpec(layers=c.int("num_hidden_layers"), hidden=h, heads=a, kv_heads=a, head_dim=t // a,
                    intermediate=c.int("intermediate_size"), vocab=c.int("vocab_size"),
                    positions=c.int("max_position_embeddings"), type_vocab=c.int("type_vocab_size", default=FROM_CLASS),
                    embedding_size=c.int("embedding_size", default=FROM_CLASS),
                    activation=str(c.get("hidden_act", default=FROM_CLASS)), pooler=pooler(c.model_type, c.head),
                    variant=m, tied_embeddings=bool(c.get("tie_word_embeddings", default=FROM_CLASS)), **c.common)


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    V, E = infer.shape(T, pattern(WALKED, "embeddings.word_embeddings"), "word embeddings")
    P, h = infer.shape(T, pattern(WALKED, "embeddings.position_embeddings"), "position embeddings")
    types = infer.shape(T, pattern(WALKED, "embeddings.token_type_embeddings"), "token type embeddings")[0]
    f, t = infer.shape(T, pattern(WALKED, "intermediate.dense"), "intermediate dense")
    fin = infer.shape(T, pattern(WALKED, "embeddings.embedding_transformation"), "embedding transformation")[1]
    # the stacked FFNs: ffn.{i} numbered as the first's path with its index captured
    ffns = infer.count_layers(T, pattern(WALKED, "ffn.0.intermediate.dense").replace(r"ffn\.0", r"ffn\.(\d+)")) + 1
    a, note = infer.heads_for(t, 32)
    m = MobileBert(t, infer.has(T, pattern(WALKED, "bottleneck.input.dense")), False,
                   infer.has(T, pattern(WALKED, "bottleneck.attention.dense")), ffns, fin == 3 * E,
                   pooler_dense=infer.has(T, pattern(WALKED, "pooler.dense")))
    return ArchSpec(num_labels=infer.num_labels(T), layers=infer.count_layers(T, layers(WALKED, "intermediate.dense")),
                    hidden=h, heads=a, kv_heads=a, head_dim=t // a, intermediate=f, vocab=V, positions=P,
                    type_vocab=types, embedding_size=E, pooler=m.pooler_dense, variant=m,
                    assumptions=(note, "no config: normalization_type assumed no_norm (NoNorm and LayerNorm hold the "
                                       "same tensors), use_bottleneck_attention false"), **common)


def _ffn(r: Recorder, stack: Stack, at: str, t: int, norm: str) -> None:
    """intermediate.dense t -> f, the activation, output.dense back, the norm on the residual sum."""
    f = r.s.intermediate
    r.linear(f"{at}intermediate.dense", r.tok, t, f, True, stack)
    r.B.activation(stack.name(f"{at}intermediate act"), "encoder", r.tok, f, r.s.activation, stack.calls)
    r.linear(f"{at}output.dense", r.tok, f, t, True, stack)
    r.norm(f"{at}output.LayerNorm", r.tok, t, stack, kind=norm)


def walk(B: Builder) -> Recorder:
    """The forward at B.s's sizes: writes its ops to B and records the modules it meets (recorder.Recorder)."""
    r, s = Recorder(B), B.s
    m = s.variant_as(MobileBert)
    h, E, t, L = s.hidden, s.emb, m.true_hidden, s.layers
    r.embedding("embeddings.word_embeddings", s.vocab, E, B.seq, bucket="embedding")
    fin = 3 * E if m.trigram else E
    if m.trigram or E != h:
        r.linear("embeddings.embedding_transformation", r.tok, fin, h, True, bucket="embedding")
    else:
        r.held("embeddings.embedding_transformation (not run: E = hidden, no trigram)",
               (("embeddings.embedding_transformation", linear_shapes(fin, h)),))
    r.embedding("embeddings.position_embeddings", s.positions, h, B.seq, bucket="embedding")
    r.embedding("embeddings.token_type_embeddings", s.type_vocab, h, B.seq, bucket="embedding")
    r.norm("embeddings.LayerNorm", r.tok, h, bucket="embedding", kind=m.norm)
    stack = Stack(f"encoder.layer[{L}]", "encoder.layer.{bid}", L, L)
    qk_in = v_in = h
    if m.use_bottleneck:
        for name, runs in (("input", True), ("attention", not m.bottleneck_attention)):
            if name == "input" or m.shared_kq:
                r.linear(f"bottleneck.{name}.dense", r.tok, h, t, True, stack, runs=runs)
                r.norm(f"bottleneck.{name}.LayerNorm", r.tok, t, stack, residual=False, runs=runs, kind=m.norm)
        qk_in = t if m.bottleneck_attention or m.shared_kq else h
        v_in = t if m.bottleneck_attention else h
    for name, width in (("query", qk_in), ("key", qk_in), ("value", v_in)):
        r.linear(f"attention.self.{name}", r.tok, width, t, True, stack)
    B.attention(stack.name("attention.self"), "encoder", s.heads, B.seq, B.seq, t // s.heads, L, causal=False)
    r.linear("attention.output.dense", r.tok, t, t, True, stack)
    r.norm("attention.output.LayerNorm", r.tok, t, stack, kind=m.norm)
    for i in range(m.ffns - 1):
        _ffn(r, stack, f"ffn.{i}.", t, m.norm)
    _ffn(r, stack, "", t, m.norm)
    if m.use_bottleneck:
        r.linear("output.bottleneck.dense", r.tok, t, h, True, stack)
        r.norm("output.bottleneck.LayerNorm", r.tok, h, stack, kind=m.norm)
    if s.pooler and m.pooler_dense:
        encoder.pooler(r)
    if s.head in ("mlm", "pretraining"):
        mlm_head(r)
        if s.head == "pretraining":
            r.linear("cls.seq_relationship", r.first, h, 2, True, bucket="cls", top=True)
    if s.head == "seqcls":
        r.linear("classifier", r.first, h, s.num_labels, True, bucket="cls", top=True)
    elif s.head == CHOICE:
        encoder.multiple_choice(r)
    else:
        encoder.token_heads(r)
    return r


def mlm_head(r: Recorder) -> None:
    """MobileBertLMPredictionHead: transform (dense, activation, LayerNorm) at hidden, then one matmul with
    [decoder.weight^T (the word embeddings' when tied); dense.weight] and decoder.bias; `bias` is the decoder's when the
    weights tie (_tied_weights_keys), else held apart and unused."""
    s, B, h, E, V = r.s, r.B, r.s.hidden, r.s.emb, r.s.vocab
    r.linear("cls.predictions.transform.dense", r.tok, h, h, True, bucket="cls", top=True)
    B.activation("cls.predictions.transform act", "cls", r.tok, h, s.activation)
    r.norm("cls.predictions.transform.LayerNorm", r.tok, h, residual=False, bucket="cls", top=True)
    r.record("cls.predictions.decoder", linear_shapes(E, V), top=True)
    r.record("cls.predictions.dense", (("weight", (h - E, V)),), top=True)
    r.record("cls.predictions.bias", (("", (V,)),), top=True)
    tied = s.tied_embeddings
    B.linear("cls.predictions (hidden x [decoder.weight^T; dense.weight]" + (", decoder tied to word_embeddings)"
             if tied else ")"), "cls", r.tok, h, V, True, tied=True)
    B.add("cls.predictions.dense" + ("" if tied else ", decoder.weight, bias (untied: held apart, unused)"), "embedding",
          "cls", 0, r.tok, r.tok, params=(h - E) * V + (0 if tied else V * E + V))


def build(B: Builder) -> None:
    walk(B)


def expected_tensors(s: ArchSpec) -> Shapes:
    return walk(Builder(s, 1, 1, 1, 1, 1)).shapes("" if s.head == "base" else "mobilebert")


# a tiny MobileBertModel with every part (bottleneck.attention, one stacked FFN, the pooler's dense): the paths of the
# name signature and from_tensors' look-ups
WALKED = walked(walk, "mobilebert", type_vocab=2, pooler=True, variant=MobileBert(4, ffns=2))

_SIZES = dict(hidden_size=32, num_attention_heads=4, intermediate_size=37, vocab_size=99, max_position_embeddings=64,
              embedding_size=16, intra_bottleneck_size=8, num_feedforward_networks=3, num_hidden_layers=2)
_HEADS = tuple("MobileBert" + x for x in ("Model", "ForMaskedLM", "ForPreTraining", "ForSequenceClassification",
                                          "ForTokenClassification"))

FAMILY = Family(
    name="mobilebert",
    model_types=("mobilebert",),
    signature=signature(WALKED, "embeddings.embedding_transformation"),
    before=("bert",),   # its layers' attention.self.query is BERT's signature too
    from_config=from_config, from_tensors=from_tensors, build=build, expected_tensors=expected_tensors,
    heads=("base", "mlm", "pretraining", "seqcls", "tokcls", "qa", CHOICE),
    head_rules=encoder.HEAD_RULES,
    pooler=pooler,
    tie_rules=(TieRule("cls.predictions.decoder.weight", "mobilebert.embeddings.word_embeddings.weight", "config",
                       heads=("mlm", "pretraining")),
               TieRule("cls.predictions.decoder.bias", "cls.predictions.bias", "config", heads=("mlm", "pretraining"))),
    samples=(
        Sample("MobileBertConfig", dict(_SIZES, num_labels=3), _HEADS),
        Sample("MobileBertConfig", _SIZES, ("MobileBertForQuestionAnswering",)),
        # a one-label sequence classifier's names: config.json tells the head
        Sample("MobileBertConfig", _SIZES, ("MobileBertForMultipleChoice",), device="cpu", infer=False),
        # LayerNorms (their names NoNorm's), every projection from bottleneck.input, no trigram, E = hidden, untied,
        # a pooler without its dense
        Sample("MobileBertConfig", dict(_SIZES, embedding_size=32, trigram_input=False, normalization_type="layer_norm",
                                        use_bottleneck_attention=True, key_query_shared_bottleneck=False,
                                        num_feedforward_networks=1, tie_word_embeddings=False,
                                        classifier_activation=False, num_labels=3),
               ("MobileBertForMaskedLM", "MobileBertForSequenceClassification"), infer=False),
        # no bottleneck (true hidden = hidden), both bottleneck switches' modules absent
        Sample("MobileBertConfig", dict(_SIZES, use_bottleneck=False, intermediate_size=40),
               ("MobileBertForPreTraining",), infer=False),
    ),
)
