"""Walks of encoders that are not LLaMA-shaped, written with the layout's recorder (layout_base.Walk: each parameterised
module recorded once while its op is written, the expected tensors derived from the records by `tensors`): the
embeddings, parameters a forward holds but never runs, einsum projections held as bare [in, heads, d] parameters, a
post-LayerNorm BERT-style layer under any module names, and the heads outside the body (LM head, token classifier, span
head). A module path may hold `{bid}` where its layer index goes, for models that keep their modules in per-kind lists
(XLM's attentions.{bid}.q_lin, layer_norm1.{bid}) or in more than one stack (HRM-Text's L_module.layers.{bid},
H_module.layers.{bid}); without it a layer's module sits under `Paths.layers`. The family modules using it: xlm.py,
xlnet.py, git.py, hrm_text.py."""
from __future__ import annotations

import math
from collections.abc import Callable

from .archspec import ArchSpec
from .base import Shapes
from .encoder import LayerNames
from .layout_base import Module, Walk, module_shapes
from .ops import Builder

# a module's parameters: (suffix, shape); suffix "" for a bare parameter whose path is its own name
Params = tuple[tuple[str, tuple[int, ...]], ...]


class EncoderWalk(Walk):
    """layout_base.Walk for encoders: paths with `{bid}`, buckets other than "encoder", held parameters, heads."""

    def record(self, sub: str, gguf: str | None, shapes: Params, layers: tuple[int, ...] | None, experts: int = 0,
               top: bool = False) -> None:
        if layers is not None and "{bid}" in sub:
            self.modules.append(Module(sub, gguf, shapes, layers, experts, top))
        else:
            super().record(sub, gguf, shapes, layers, experts, top)

    def label(self, sub: str, layers: tuple[int, ...]) -> str:
        return sub.replace(".{bid}", f"[{len(layers)}]") if "{bid}" in sub else super().label(sub, layers)

    def embedding(self, sub: str, rows: int, dim: int, label: str | None = None) -> None:
        """A lookup table run on every token."""
        self.record(sub, None, (("weight", (rows, dim)),), None)
        self.B.embedding(label or sub, "embedding", rows, dim, self.B.seq)

    def params(self, subs: tuple[tuple[str, Params], ...], layers: tuple[int, ...] | None = None) -> int:
        """Records modules (sub, its parameters); returns how many parameters they hold, every layer's together."""
        for sub, shapes in subs:
            self.record(sub, None, shapes, layers)
        return sum(math.prod(shape) for _, shapes in subs for _, shape in shapes) * (len(layers) if layers else 1)

    def held(self, label: str, subs: tuple[tuple[str, Params], ...], layers: tuple[int, ...] | None = None) -> None:
        """Parameters a forward holds and never runs (no call, no cost: counted in the parameters alone)."""
        self.B.add(label, "embedding", "embedding", 0, self.tok, self.tok, params=self.params(subs, layers))

    def einsum(self, sub: str, fin: int, heads: int, d: int, layers: tuple[int, ...], rows: tuple[int, ...] | None = None,
               out: bool = False, label: str | None = None) -> None:
        """A bias-free projection held as one [fin, heads, d] parameter and run by einsum over `rows` (default every
        token): fin -> heads x d, or back (`out`)."""
        self.record(sub, None, (("", (fin, heads, d)),), layers)
        fi, fo = (heads * d, fin) if out else (fin, heads * d)
        self.B.linear(label or self.label(sub, layers), "encoder", rows or self.tok, fi, fo, False, len(layers))

    def layer_norm(self, sub: str, dim: int, layers: tuple[int, ...] | None = None, bucket: str = "encoder",
                   residual: bool = True) -> None:
        """A LayerNorm with weight and bias (outside the layers: the embeddings' own, bucket "embedding")."""
        self.record(sub, None, (("weight", (dim,)), ("bias", (dim,))), layers)
        calls = len(layers) if layers else 1
        self.B.norm(sub if layers is None else self.label(sub, layers), bucket, self.tok, dim, calls, residual=residual,
                    kind="layernorm", bias=True)

    def head(self, sub: str, fin: int, fout: int, tied: bool = False, label: str | None = None) -> None:
        """A biased head outside the body run on every token; `tied`: its weight is the embeddings' (held once)."""
        self.record(sub, None, (("weight", (fout, fin)), ("bias", (fout,))), None, top=True)
        self.B.linear(label or sub, "cls", self.tok, fin, fout, True, tied=tied)

    def token_heads(self) -> None:
        """The per-token classifier and span (QA) heads (nn.Linear(h, num_labels): QA's 2 to run)."""
        s = self.s
        if s.head in ("tokcls", "qa"):
            self.head("classifier" if s.head == "tokcls" else "qa_outputs", s.hidden, s.num_labels)


def post_ln_layers(w: EncoderWalk, names: LayerNames, layers: tuple[int, ...], causal: bool = False) -> None:
    """BERT's post-LayerNorm layer (encoder.py's names, in its order; `{bid}` or under Paths.layers): q, k, v (h -> h,
    biased), the attention's bmm's, o, its LayerNorm after the residual, the FFN (h -> intermediate -> h, biased, the
    config's activation) and the output LayerNorm; `causal` only masks (GIT's text decoder)."""
    s, h, f, L = w.s, w.s.hidden, w.s.intermediate, len(layers)
    q, k, v, attention, o, ln1, up, act, down, ln2 = names
    for sub in (q, k, v):
        w.linear(sub, None, h, h, True, layers)
    w.B.attention(w.label(attention, layers), "encoder", s.heads, w.B.seq, w.B.seq, s.head_dim, L, causal=causal)
    w.linear(o, None, h, h, True, layers)
    w.layer_norm(ln1, h, layers)
    w.linear(up, None, h, f, True, layers)
    w.B.activation(w.label(act, layers), "encoder", w.tok, f, s.activation, L)
    w.linear(down, None, f, h, True, layers)
    w.layer_norm(ln2, h, layers)


def tensors(walk: Callable[[Builder], list[Module]], body: str) -> Callable[[ArchSpec], Shapes]:
    """A family's expected tensors, derived from its walk: every module it records, those inside the body under `body`
    in a head model's file (a base model's file has no prefix)."""
    return lambda s: module_shapes(walk(Builder(s, 1, 1, 1, 1, 1)), "" if s.head == "base" else body)
