"""The post-LayerNorm BERT-style encoder that the bert, albert and distilbert families share: embeddings,
the layer (four attention projections, attention norm, FFN in and out, output norm), pooler and heads,
as op-template pieces (ops.Builder) and expected-tensor pieces (Shapes). Each family passes its own
module names; nothing here knows which family calls it."""
from __future__ import annotations

from typing import Any

from . import infer
from .base import ArchSpec, HeadRule, Shapes, Tensors, add_linear, add_norm
from .ops import Builder

# A layer's module names, in this order: query, key, value, attention (the bmm's), attention output,
# attention norm, FFN in, FFN activation, FFN out, output norm.
LayerNames = tuple[str, str, str, str, str, str, str, str, str, str]


# ---- op template pieces ----

def embeddings(B: Builder, norm: bool = True, positions: bool = True) -> None:
    """Word, position (unless positions is false: RoFormer's rotary table sits in its encoder) and (when the config has
    them) token-type lookups, then LayerNorm (unless norm is false: XLM-RoBERTa-XL's pre-LN layers normalise instead),
    width E."""
    s, n = B.s, B.seq
    B.embedding("embeddings.word_embeddings", "embedding", s.vocab, s.emb, n)
    if positions:
        B.embedding("embeddings.position_embeddings", "embedding", s.positions, s.emb, n)
    if s.type_vocab:
        B.embedding("embeddings.token_type_embeddings", "embedding", s.type_vocab, s.emb, n)
    if norm:
        B.norm("embeddings.LayerNorm", "embedding", (B.b, n), s.emb, residual=False)


def layers(B: Builder, prefix: str, names: LayerNames, calls: int, copies: int, causal: bool = False) -> None:
    """`calls` layers run, `copies` of their weights stored (fewer when layers are shared); causal: GIT's text
    decoder masks its attention."""
    s, tok = B.s, (B.b, B.seq)
    h, f = s.hidden, s.intermediate
    q, k, v, at, o, ln1, up, act, down, ln2 = (f"{prefix}.{x}" for x in names)
    for name in (q, k, v):
        B.linear(name, "encoder", tok, h, h, True, calls, copies)
    B.attention(at, "encoder", s.heads, B.seq, B.seq, s.head_dim, calls, causal=causal)
    B.linear(o, "encoder", tok, h, h, True, calls, copies)
    B.norm(ln1, "encoder", tok, h, calls, copies)
    B.linear(up, "encoder", tok, h, f, True, calls, copies)
    B.activation(act, "encoder", tok, f, s.activation, calls)
    B.linear(down, "encoder", tok, f, h, True, calls, copies)
    B.norm(ln2, "encoder", tok, h, calls, copies)


def pooler(B: Builder) -> None:
    """Dense + tanh on the first token (transformers BertPooler)."""
    h = B.s.hidden
    B.linear("pooler.dense", "pooler", (B.b,), h, h, True)
    B.activation("pooler act (tanh)", "pooler", (B.b,), h, "tanh")


def mlm_head(B: Builder, prefix: str, width: int, held_bias: bool, transform: str = "transform.") -> None:
    """Transform dense (h -> width) + activation + LayerNorm, then the decoder, its weight tied to the word embeddings
    unless the config's tie_word_embeddings is false. `held_bias`: the head also holds a bias parameter of its own
    ({prefix}.bias: BERT's, RoBERTa's, ALBERT's) that transformers 5 ties to the decoder's bias only when the weights
    tie (their _tied_weights_keys); untied it is a parameter held apart and unused. `transform`: the dense and
    LayerNorm's module under {prefix} ("" where they sit beside the decoder: RemBERT's)."""
    s, tok = B.s, (B.b, B.seq)
    B.linear(f"{prefix}.{transform}dense", "cls", tok, s.hidden, width, True)
    B.activation(f"{prefix}.{transform}".rstrip(".") + " act", "cls", tok, width, s.activation)
    B.norm(f"{prefix}.{transform}LayerNorm", "cls", tok, width, residual=False)
    tied = s.tied_embeddings
    B.linear(f"{prefix}.decoder" + (" (tied to word_embeddings)" if tied else ""), "cls", tok, width, s.vocab, True,
             tied=tied)
    if held_bias and not tied:
        B.add(f"{prefix}.bias (untied from the decoder's: held, unused)", "activation", "cls", 1, (s.vocab,), (s.vocab,),
              params=s.vocab)


def token_heads(B: Builder) -> None:
    """Per-token classifier and span (QA) heads."""
    s, tok = B.s, (B.b, B.seq)
    if s.head == "tokcls":
        B.linear("classifier", "cls", tok, s.hidden, s.num_labels, True)
    elif s.head == "qa":
        B.linear("qa_outputs", "cls", tok, s.hidden, s.num_labels, True)   # nn.Linear(h, num_labels): 2 to run


# ---- expected-tensor pieces ----

def layer_tensors(out: Shapes, q: str, names: tuple[str, ...], h: int, f: int) -> None:
    """names: the 8 weight-holding modules of LayerNames (no attention bmm, no activation)."""
    *attention, attention_norm, ffn_in, ffn_out, out_norm = names
    for m in attention:
        add_linear(out, q + m, h, h)
    add_norm(out, q + attention_norm, h)
    add_linear(out, q + ffn_in, f, h)
    add_linear(out, q + ffn_out, h, f)
    add_norm(out, q + out_norm, h)


def embedding_tensors(out: Shapes, p: str, s: ArchSpec, dim: int, norm: bool = True, positions: bool = True) -> None:
    out[p + "embeddings.word_embeddings.weight"] = (s.vocab, dim)
    if positions:
        out[p + "embeddings.position_embeddings.weight"] = (s.positions, dim)
    if s.type_vocab:
        out[p + "embeddings.token_type_embeddings.weight"] = (s.type_vocab, dim)
    if norm:
        add_norm(out, p + "embeddings.LayerNorm", dim)


def token_head_tensors(out: Shapes, s: ArchSpec) -> None:
    """The per-token classifier and span (QA) heads' weights (token_heads)."""
    if s.head == "tokcls":
        add_linear(out, "classifier", s.num_labels, s.hidden)
    elif s.head == "qa":
        add_linear(out, "qa_outputs", s.num_labels, s.hidden)


def weights_of(names: LayerNames) -> tuple[str, ...]:
    """The weight-holding modules of a layer's names (layer_tensors' `names`)."""
    q, k, v, _, o, ln1, up, _, down, ln2 = names
    return (q, k, v, o, ln1, up, down, ln2)


# ---- head and shape inference ----

_MLM_OR_DISCRIMINATOR = r"(^|\.)(cls\.predictions|predictions\.dense|discriminator_predictions)\."
# Which head a BERT-style checkpoint's (canonical) tensor names show, first rule that holds wins.
HEAD_RULES = (
    # BertForPreTraining, AlbertForPreTraining; a sentence head without the MLM head is not *ForPreTraining
    # (BertForNextSentencePrediction)
    HeadRule(r"(^|\.)(cls\.seq_relationship|sop_classifier)\.", "pretraining", requires=_MLM_OR_DISCRIMINATOR),
    HeadRule(r"(^|\.)(cls\.predictions|predictions\.dense|lm_head\.dense|generator_predictions)\.", "mlm"),
    HeadRule(r"(^|\.)discriminator_predictions\.", "pretraining", requires=_MLM_OR_DISCRIMINATOR),  # ELECTRA
    HeadRule(r"(^|\.)qa_outputs\.weight$", "qa"),
    # sequence classifiers: on the pooler (BERT/ALBERT) or with their own dense (RoBERTa/ELECTRA)
    HeadRule(r"(^|\.)classifier\.(dense|out_proj)\.", "seqcls"),
    # (ALBERT's pooler is one Linear, `albert.pooler.weight`; BERT's `bert.pooler.dense.weight`)
    HeadRule(r"(^|\.)classifier\.weight$", "tokcls", unless=r"(^|\.)pooler(\.dense)?\.weight$", otherwise="seqcls"),
)


def dims(T: Tensors) -> dict[str, Any]:
    """Vocabulary, embedding width, positions, type vocabulary, hidden and intermediate widths from the
    embedding tables and the first layer's query and FFN-in weights."""
    V, E = infer.shape(T, r"word_embeddings\.weight$", "word embeddings")
    P = infer.shape(T, r"position_embeddings\.weight$", "position embeddings")[0]
    TV = infer.shape(T, r"token_type_embeddings\.weight$", "token type embeddings")[0] \
        if infer.has(T, r"token_type_embeddings") else 0
    h = infer.shape(T, r"attention\.(self\.)?query\.weight$", "attention query")[0]
    f = infer.shape(T, r"(intermediate\.dense|ffn)\.weight$", "intermediate dense")[0]
    return dict(vocab=V, embedding_size=E, positions=P, type_vocab=TV, hidden=h, intermediate=f)
