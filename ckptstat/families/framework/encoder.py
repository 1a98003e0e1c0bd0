"""The recorder of the encoders that are not LLaMA-shaped (`Rec`) and the post-LayerNorm BERT-style encoder written with
it: embeddings, the layer (four attention projections, attention norm, FFN in and out, output norm), pooler and heads.
Every parameterised module a walk meets is recorded (a layout_base.Module: its path as save_pretrained names it, `{bid}`
the stored layer, its parameters' shapes, its llama.cpp name) in the same call that writes its op to the Builder, so
that the op template, the expected tensors (`Rec.shapes`, `tensors`) and the GGUF names derive from one walk. A run of
layers is a `Stack`: its modules under one path (BERT's encoder.layer.{bid}), or, where a model keeps them in per-kind
lists (XLM's attentions.{bid}.q_lin, layer_norm1.{bid}), each module's own path holds `{bid}`. Beside the layers'
pieces the recorder holds parameters a forward never runs (`Rec.held`) and einsum projections held as bare
[in, heads, d] parameters (`Rec.einsum`). Each family passes its own module names, and nothing here branches on which
family calls it (bert.py, albert.py, distilbert.py, xlm.py, xlnet.py, git.py, hrm_text.py, wav2vec2.py)."""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import infer
from .base import ArchSpec, HeadRule, Shapes, Tensors
from .layout_base import Module, module_shapes
from .ops import Builder
from .recorder import Stack, linear_shapes, lists  # noqa: F401  (until the encoders move)

# A layer's module names, in this order: query, key, value, attention (the bmm's), attention output,
# attention norm, FFN in, FFN activation, FFN out, output norm.
LayerNames = tuple[str, str, str, str, str, str, str, str, str, str]
# llama.cpp's names of a post-LN layer's modules in LayerNames' order, None where it has no tensor (gguf-py
# tensor_mapping.py's BERT names; recorded only by a walk asked for them: Rec.gguf)
LAYER_GGUF = ("attn_q", "attn_k", "attn_v", None, "attn_output", "attn_output_norm", "ffn_up", None, "ffn_down",
              "layer_output_norm")
# a module's parameters: (suffix, shape); suffix "" for a bare parameter whose path is its own name
Shape = tuple[tuple[str, tuple[int, ...]], ...]


class Rec:
    """Writes an encoder's ops to B and records each parameterised module in the same call (`modules`); `gguf`: record
    llama.cpp's names too (the family's GGUF table walks a plain BERT with it)."""

    def __init__(self, B: Builder, gguf: bool = False):
        self.B, self.s, self.gguf = B, B.s, gguf
        self.tok, self.first = (B.b, B.seq), (B.b,)   # the pooler and sentence heads read the first token only
        self.modules: list[Module] = []

    def record(self, path: str, shapes: Shape, stack: Stack | None = None, top: bool = False,
               gguf: str | None = None) -> None:
        """`top`: outside the base model (a head); `stack`: one module per stored layer."""
        if stack is not None:
            path, gguf = stack.at(path), gguf and f"blk.{{bid}}.{gguf}"
        layers = tuple(range(stack.stored)) if stack is not None else ()
        self.modules.append(Module(path, gguf if self.gguf else None, shapes, layers, stack.inner if stack else 0, top))

    def linear(self, path: str, bucket: str, fin: int, fout: int, tokens: tuple[int, ...] | None = None,
               stack: Stack | None = None, top: bool = False, tied: bool = False, label: str | None = None,
               gguf: str | None = None) -> None:
        """A biased nn.Linear (every one of these encoders' is); `tied`: its weight is another module's."""
        self.record(path, linear_shapes(fin, fout), stack, top, gguf)
        self.B.linear(label or _label(path, stack), bucket, tokens or self.tok, fin, fout, True,
                      stack.calls if stack else 1, stack.copies if stack else None, tied=tied)

    def norm(self, path: str, bucket: str, dim: int, stack: Stack | None = None, top: bool = False,
             residual: bool = True, gguf: str | None = None, tokens: tuple[int, ...] | None = None,
             label: str | None = None) -> None:
        """A LayerNorm (weight and bias); `residual`: it also adds the sublayer's input back."""
        self.record(path, (("weight", (dim,)), ("bias", (dim,))), stack, top, gguf)
        self.B.norm(label or _label(path, stack), bucket, tokens or self.tok, dim, stack.calls if stack else 1,
                    stack.copies if stack else None, residual=residual, kind="layernorm", bias=True)

    def embedding(self, path: str, bucket: str, rows: int, dim: int, gguf: str | None = None,
                  label: str | None = None) -> None:
        """A lookup table run on every token."""
        self.record(path, (("weight", (rows, dim)),), gguf=gguf)
        self.B.embedding(label or path, bucket, rows, dim, self.B.seq)

    def einsum(self, path: str, fin: int, heads: int, d: int, stack: Stack, rows: tuple[int, ...] | None = None,
               out: bool = False, label: str | None = None) -> None:
        """A bias-free projection held as one [fin, heads, d] parameter and run by einsum over `rows` (default every
        token): fin -> heads x d, or back (`out`)."""
        self.record(path, (("", (fin, heads, d)),), stack)
        fi, fo = (heads * d, fin) if out else (fin, heads * d)
        self.B.linear(label or stack.name(path), "encoder", rows or self.tok, fi, fo, False, stack.calls, stack.copies)

    def params(self, subs: tuple[tuple[str, Shape], ...], stack: Stack | None = None) -> int:
        """Records modules (path, its parameters); returns how many parameters they hold, every layer's together."""
        for path, shapes in subs:
            self.record(path, shapes, stack)
        return sum(math.prod(shape) for _, shapes in subs for _, shape in shapes) * (stack.copies if stack else 1)

    def held(self, label: str, subs: tuple[tuple[str, Shape], ...], stack: Stack | None = None) -> None:
        """Parameters a forward holds and never runs (no call, no cost: counted in the parameters alone)."""
        self.B.add(label, "embedding", "embedding", 0, self.tok, self.tok, params=self.params(subs, stack))

    def shapes(self, body: str) -> Shapes:
        """The expected tensors: every recorded parameter's name and shape, the base model's under `body` ("": none)."""
        return module_shapes(self.modules, body)

    def gguf_names(self) -> tuple[tuple[str, str], ...]:
        """HF module (as the base model names it) -> llama.cpp name, of the modules recorded with one."""
        return tuple((m.path, m.gguf) for m in self.modules if m.gguf is not None)


def tensors(walk: Callable[[Builder], Rec], body: str) -> Callable[[ArchSpec], Shapes]:
    """A family's expected tensors, derived from its walk (until the encoders move to recorder.Recorder)."""
    return lambda s: walk(Builder(s, 1, 1, 1, 1, 1)).shapes("" if s.head == "base" else body)


def _label(path: str, stack: Stack | None) -> str:
    return path if stack is None else stack.name(path)


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

def embeddings(r: Rec, norm: bool = True, positions: bool = True) -> None:
    """Word, position (unless positions is false: RoFormer's rotary table sits in its encoder) and (when the config has
    them) token-type lookups, then LayerNorm (unless norm is false: XLM-RoBERTa-XL's pre-LN layers normalise instead),
    width E."""
    s = r.s
    r.embedding("embeddings.word_embeddings", "embedding", s.vocab, s.emb, "token_embd")
    if positions:
        r.embedding("embeddings.position_embeddings", "embedding", s.positions, s.emb, "position_embd")
    if s.type_vocab:
        r.embedding("embeddings.token_type_embeddings", "embedding", s.type_vocab, s.emb, "token_types")
    if norm:
        r.norm("embeddings.LayerNorm", "embedding", s.emb, residual=False, gguf="token_embd_norm")


def stack_layers(r: Rec, stack: Stack, names: LayerNames, causal: bool = False) -> None:
    """The post-LN layers of `stack`; causal: GIT's text decoder masks its attention."""
    s, h, f = r.s, r.s.hidden, r.s.intermediate
    q, k, v, at, o, ln1, up, act, down, ln2 = names
    gq, gk, gv, _, go, g1, gup, _, gdown, g2 = LAYER_GGUF
    for name, g in ((q, gq), (k, gk), (v, gv)):
        r.linear(name, "encoder", h, h, stack=stack, gguf=g)
    r.B.attention(_label(at, stack), "encoder", s.heads, r.B.seq, r.B.seq, s.head_dim, stack.calls, causal=causal)
    r.linear(o, "encoder", h, h, stack=stack, gguf=go)
    r.norm(ln1, "encoder", h, stack, gguf=g1)
    r.linear(up, "encoder", h, f, stack=stack, gguf=gup)
    r.B.activation(_label(act, stack), "encoder", r.tok, f, s.activation, stack.calls)
    r.linear(down, "encoder", f, h, stack=stack, gguf=gdown)
    r.norm(ln2, "encoder", h, stack, gguf=g2)


def pooler(r: Rec, path: str = "pooler.dense") -> None:
    """Dense + tanh on the first token (transformers BertPooler; BigBird's and ALBERT's one Linear at `pooler`)."""
    h = r.s.hidden
    r.linear(path, "pooler", h, h, r.first, label="pooler.dense")
    r.B.activation("pooler act (tanh)", "pooler", r.first, h, "tanh")


def mlm_head(r: Rec, head: LMHead, width: int) -> None:
    """Transform dense (h -> width) + activation + LayerNorm, then the decoder, its weight tied to the word embeddings
    unless the config's tie_word_embeddings is false (LMHead)."""
    s = r.s
    fin = s.hidden
    if head.dense is not None:
        r.linear(head.dense, "cls", s.hidden, width, top=True)
        r.B.activation(head.dense.rsplit(".", 1)[0] + " act", "cls", r.tok, width, s.activation)
        r.norm(head.norm, "cls", width, top=True, residual=False)
        fin = width
    tied = s.tied_embeddings
    r.linear(head.decoder, "cls", fin, s.vocab, top=True, tied=tied,
             label=head.decoder + (" (tied to word_embeddings)" if tied else ""))
    if head.bias is not None:
        r.record(head.bias, (("", (s.vocab,)),), top=True)
        if not tied:
            r.B.add(f"{head.bias} (untied from the decoder's: held, unused)", "activation", "cls", 1, (s.vocab,),
                    (s.vocab,), params=s.vocab)


def sequence_classifier(r: Rec, dense: bool) -> None:
    """On the first token: one Linear on the pooled output (BERT's `classifier`), or `dense` RoBERTa's head (dense + tanh,
    then out_proj)."""
    h = r.s.hidden
    if dense:
        r.linear("classifier.dense", "cls", h, h, r.first, top=True)
        r.B.activation("classifier act (tanh)", "cls", r.first, h, "tanh")
    r.linear("classifier.out_proj" if dense else "classifier", "cls", h, r.s.num_labels, r.first, top=True)


def token_heads(r: Rec) -> None:
    """Per-token classifier and span (QA) heads (nn.Linear(h, num_labels): QA's 2 to run)."""
    s = r.s
    if s.head in ("tokcls", "qa"):
        r.linear("classifier" if s.head == "tokcls" else "qa_outputs", "cls", s.hidden, s.num_labels, top=True)


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
