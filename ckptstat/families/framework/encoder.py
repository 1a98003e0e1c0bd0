"""The post-LayerNorm BERT-style encoder, written with framework/recorder.py's `Recorder` (each module recorded while
its op is written, so the op template, the expected tensors and the GGUF names derive from one walk): embeddings, the
layer (four attention projections, attention norm, FFN in and out, output norm) of a recorder.Stack (BERT's
encoder.layer.{bid}, or per-kind lists: XLM's attentions.{bid}.q_lin), pooler and heads. Each family passes its own
module names, and nothing here branches on which family calls it (bert.py, albert.py, distilbert.py, xlm.py, xlnet.py,
git.py, hrm_text.py, wav2vec2.py)."""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import infer
from .base import HeadRule, Tensors
from .recorder import Recorder, Stack
from .summary import PER_CHOICE, SequenceSummary
from .summary import walk as summary_walk
from .walk_names import find, pattern

# A layer's module names, in this order: query, key, value, attention (the bmm's), attention output,
# attention norm, FFN in, FFN activation, FFN out, output norm.
LayerNames = tuple[str, str, str, str, str, str, str, str, str, str]
# llama.cpp's names of a post-LN layer's modules in LayerNames' order, None where it has no tensor (gguf-py
# tensor_mapping.py's BERT names; the family's GGUF table reads them off a plain BERT's walk)
LAYER_GGUF = ("attn_q", "attn_k", "attn_v", None, "attn_output", "attn_output_norm", "ffn_up", None, "ffn_down",
              "layer_output_norm")


@dataclass(frozen=True)
class LMHead:
    """An MLM head's modules: its transform's dense (hidden -> the head's width) and LayerNorm (dense None: none, the
    decoder reads hidden: BertGeneration's lm_head), its decoder to the vocabulary (its weight the word embeddings'
    when they tie), and a bias parameter held beside the decoder (None: none) that transformers 5 ties to the decoder's
    bias only when the weights tie (their _tied_weights_keys); untied it is a parameter held apart and unused."""
    decoder: str
    dense: str | None = None
    norm: str = ""
    bias: str | None = None


# ---- the pieces, in forward order ----

def embeddings(r: Recorder, norm: bool = True, positions: bool = True) -> None:
    """Word, position (unless positions is false: RoFormer's rotary table sits in its encoder) and (when the config has
    them) token-type lookups, then LayerNorm (unless norm is false: XLM-RoBERTa-XL's pre-LN layers normalise instead),
    width E."""
    s = r.s
    n = r.B.seq
    r.embedding("embeddings.word_embeddings", s.vocab, s.emb, n, bucket="embedding", gguf="token_embd")
    if positions:
        r.embedding("embeddings.position_embeddings", s.positions, s.emb, n, bucket="embedding", gguf="position_embd")
    if s.type_vocab:
        r.embedding("embeddings.token_type_embeddings", s.type_vocab, s.emb, n, bucket="embedding", gguf="token_types")
    if norm:
        r.norm("embeddings.LayerNorm", r.tok, s.emb, residual=False, bucket="embedding", gguf="token_embd_norm")


def stack_layers(r: Recorder, stack: Stack, names: LayerNames, causal: bool = False, value_conv: int = 0,
                 attend: Callable[[Recorder, Stack], None] | None = None) -> None:
    """The post-LN layers of `stack`; causal: GIT's text decoder masks its attention; value_conv: the kernel of a
    depthwise Conv2d (k, 1) over each head's values along the sequence, added to the attention's context (YOSO's
    conv_window, Nystromformer's conv_kernel_size: `{attention}.conv`, [heads, 1, k, 1], no bias; FlopCounterMode
    counts k MACs an output element); attend: the attention between the projections and its output, where not the
    full square (Longformer's sliding chunks and global tokens: longformer.py)."""
    s, h, f = r.s, r.s.hidden, r.s.intermediate
    q, k, v, at, o, ln1, up, act, down, ln2 = names
    gq, gk, gv, _, go, g1, gup, _, gdown, g2 = (g and f"blk.{{bid}}.{g}" for g in LAYER_GGUF)
    tok = r.tok
    for name, g in ((q, gq), (k, gk), (v, gv)):
        r.linear(name, tok, h, h, True, stack, gguf=g)
    if attend is not None:
        attend(r, stack)
    else:
        r.B.attention(stack.name(at), "encoder", s.heads, r.B.seq, r.B.seq, s.head_dim, stack.calls, causal=causal)
    if value_conv:
        shape = (r.B.b, s.heads, r.B.seq, s.head_dim)
        r.record(f"{at}.conv", (("weight", (s.heads, 1, value_conv, 1)),), stack)
        r.B.add(stack.name(f"{at}.conv") + f" (depthwise {value_conv}x1 over the values)", "conv", "encoder", stack.calls,
                shape, shape, params=s.heads * value_conv * stack.calls, macs=math.prod(shape) * value_conv,
                weights_per_call=s.heads * value_conv)
    r.linear(o, tok, h, h, True, stack, gguf=go)
    r.norm(ln1, tok, h, stack, gguf=g1)
    r.linear(up, tok, h, f, True, stack, gguf=gup)
    r.B.activation(stack.name(act), "encoder", tok, f, s.activation, stack.calls)
    r.linear(down, tok, f, h, True, stack, gguf=gdown)
    r.norm(ln2, tok, h, stack, gguf=g2)


def pooler(r: Recorder, path: str = "pooler.dense") -> None:
    """Dense + tanh on the first token (transformers BertPooler; BigBird's and ALBERT's one Linear at `pooler`)."""
    h = r.s.hidden
    r.linear(path, r.first, h, h, True, bucket="pooler", label="pooler.dense")
    r.B.activation("pooler act (tanh)", "pooler", r.first, h, "tanh")


def mlm_head(r: Recorder, head: LMHead, width: int) -> None:
    """Transform dense (h -> width) + activation + LayerNorm, then the decoder, its weight tied to the word embeddings
    unless the config's tie_word_embeddings is false (LMHead)."""
    s = r.s
    fin = s.hidden
    if head.dense is not None:
        r.linear(head.dense, r.tok, s.hidden, width, True, bucket="cls", top=True)
        r.B.activation(head.dense.rsplit(".", 1)[0] + " act", "cls", r.tok, width, s.activation)
        r.norm(head.norm, r.tok, width, residual=False, bucket="cls", top=True)
        fin = width
    tied = s.tied_embeddings
    r.linear(head.decoder, r.tok, fin, s.vocab, True, bucket="cls", top=True, tied=tied,
             label=head.decoder + (" (tied to word_embeddings)" if tied else ""))
    if head.bias is not None:
        r.record(head.bias, (("", (s.vocab,)),), top=True)
        if not tied:
            r.B.add(f"{head.bias} (untied from the decoder's: held, unused)", "activation", "cls", 1, (s.vocab,),
                    (s.vocab,), params=s.vocab)


def sequence_classifier(r: Recorder, dense: bool) -> None:
    """On the first token: one Linear on the pooled output (BERT's `classifier`), or `dense` RoBERTa's head (dense + tanh,
    then out_proj)."""
    h = r.s.hidden
    if dense:
        r.linear("classifier.dense", r.first, h, h, True, bucket="cls", top=True)
        r.B.activation("classifier act (tanh)", "cls", r.first, h, "tanh")
    r.linear("classifier.out_proj" if dense else "classifier", r.first, h, r.s.num_labels, True, bucket="cls", top=True)


def token_heads(r: Recorder, qa: str = "qa_outputs") -> None:
    """Per-token classifier and span (QA, its module `qa`) heads (nn.Linear(h, num_labels): QA's 2 to run)."""
    s = r.s
    if s.head in ("tokcls", "qa"):
        r.linear("classifier" if s.head == "tokcls" else qa, r.tok, s.hidden, s.num_labels, True, bucket="cls",
                 top=True)


# the label of a multiple-choice head's op: what the batch counts
CHOICE_NOTE = f" (multiple choice: one logit a sequence{PER_CHOICE})"


def multiple_choice(r: Recorder, summary: SequenceSummary | None = None, pre: str | None = None) -> None:
    """*ForMultipleChoice's head (transformers 5): the body ran over the input's [batch, num_choices, seq] viewed as
    [batch x num_choices, seq] (B.b counts those sequences), one vector a sequence (the pooler's, the summary's, or the
    first token's through `pre`, DistilBERT's pre_classifier + ReLU), dropout, `classifier` Linear(hidden, 1); the
    logits viewed as [batch, num_choices] (no FLOPs)."""
    h, B = r.s.hidden, r.B
    if summary is not None:   # (its width is the classifier's: summary.from_config refuses another)
        summary_walk(r, summary, None)
    if pre is not None:
        r.linear(pre, r.first, h, h, True, bucket="cls", top=True)
        B.activation(f"{pre} act (relu)", "cls", r.first, h, "relu")
    r.linear("classifier", r.first, h, 1, True, bucket="cls", top=True, note=CHOICE_NOTE)


# ---- head and shape inference ----

_MLM_OR_DISCRIMINATOR = r"(^|\.)(cls\.predictions|predictions\.dense|discriminator_predictions)\."
# Which head a BERT-style checkpoint's (canonical) tensor names show, first rule that holds wins.
HEAD_RULES = (
    # BertForPreTraining, AlbertForPreTraining; a sentence head without the MLM head is not *ForPreTraining
    # (BertForNextSentencePrediction)
    HeadRule(r"(^|\.)(cls\.seq_relationship|sop_classifier)\.", "pretraining", requires=_MLM_OR_DISCRIMINATOR),
    HeadRule(r"(^|\.)cls\.seq_relationship\.", "nsp"),
    HeadRule(r"(^|\.)(cls\.predictions|predictions\.dense|lm_head\.dense|generator_predictions)\.", "mlm"),
    HeadRule(r"(^|\.)discriminator_predictions\.", "pretraining", requires=_MLM_OR_DISCRIMINATOR),  # ELECTRA
    HeadRule(r"(^|\.)qa_outputs\.weight$", "qa"),
    # sequence classifiers: on the pooler (BERT/ALBERT) or with their own dense (RoBERTa/ELECTRA)
    HeadRule(r"(^|\.)classifier\.(dense|out_proj)\.", "seqcls"),
    # (ALBERT's pooler is one Linear, `albert.pooler.weight`; BERT's `bert.pooler.dense.weight`)
    HeadRule(r"(^|\.)classifier\.weight$", "tokcls", unless=r"(^|\.)pooler(\.dense)?\.weight$", otherwise="seqcls"),
)


def dims(T: Tensors, r: Recorder, names: LayerNames) -> dict[str, Any]:
    """Vocabulary, embedding width, positions, type vocabulary, hidden and intermediate widths from the embedding tables
    and the first layer's query and FFN-in weights, found at the paths the walk `r` (walk_names.walked) records under
    `names` (no token types where it records none: GIT's)."""
    V, E = infer.shape(T, pattern(r, "embeddings.word_embeddings"), "word embeddings")
    P = infer.shape(T, pattern(r, "embeddings.position_embeddings"), "position embeddings")[0]
    types = pattern(r, "embeddings.token_type_embeddings") if find(r, "embeddings.token_type_embeddings") else None
    TV = infer.shape(T, types, "token type embeddings")[0] if types and infer.has(T, types) else 0
    h = infer.shape(T, pattern(r, names[0]), "attention query")[0]
    f = infer.shape(T, pattern(r, names[6]), "intermediate dense")[0]
    return dict(vocab=V, embedding_size=E, positions=P, type_vocab=TV, hidden=h, intermediate=f)
