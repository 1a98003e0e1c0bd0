"""The recorder of the walks outside a DecoderLayout (`Recorder`): layout_base.Walk's idea for the encoders, vision
towers and encoder-decoders. Every parameterised module a walk meets is recorded (a layout_base.Module: its path as
save_pretrained names it, `{bid}` the stored layer, its parameters' shapes, its llama.cpp name where the family has a
GGUF table) in the same call that writes its op to the Builder, so that the op template, the expected tensors
(`Recorder.shapes`, `tensors`) and the GGUF names derive from one walk. A run of layers is a `Stack` (or, where each
module's path holds `{bid}` and runs once per layer, just its count L): its modules under one path (BERT's
encoder.layer.{bid}), labelled `[L]` where `{bid}` goes, run `calls` times (more than stored where layers are shared).
Beside the layers' pieces it holds parameters a forward never runs (`held`), einsum projections held as bare
[in, heads, d] parameters (`einsum`) and bare parameters read by one element-wise op (`params`). Users:
framework/encoder.py's BERT pieces and their families, framework/walk_vision.py's ViT pieces (and its Conv2d's) and
theirs, framework/seq2seq.py, resnet.py, t5.py, prophetnet.py. A family's name signature and the shape look-ups of a file
without config.json read the paths of the walk of a tiny spec: framework/walk_names.py, the one set of those helpers
for these walks and layout_base.Walk's, so that a path is written only where the walk records it."""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from .base import ArchSpec, Shapes
from .layout_base import Module, module_shapes, walk_tensors
from .ops import Builder

Shape = tuple[int, ...]
# a module's parameters: (suffix, shape); suffix "" for a bare parameter whose path is its own name
Params = tuple[tuple[str, Shape], ...]


@dataclass(frozen=True)
class Stack:
    """A run of layers: stored at `path` (`{bid}` each of `stored` layers; `{xid}` each of `inner` within one: ALBERT's
    groups of layers), its ops labelled `label`, run `calls` times in one forward (more than stored where layers are
    shared). `path` and `label` "": the modules' own paths hold `{bid}` (per-kind lists), their labels `[stored]`."""
    label: str
    path: str
    stored: int
    calls: int
    inner: int = 0

    @property
    def copies(self) -> int:
        return self.stored * (self.inner or 1)

    def at(self, sub: str) -> str:
        """A module's path."""
        return f"{self.path}.{sub}" if self.path else sub

    def name(self, sub: str) -> str:
        """A module's op label."""
        return f"{self.label}.{sub}" if self.label else sub.replace(".{bid}", f"[{self.stored}]")


def lists(layers: int) -> Stack:
    """`layers` layers run once each whose modules sit in per-kind lists (their paths hold `{bid}`)."""
    return Stack("", "", layers, layers)


Layers = int | Stack   # a Stack, or L: lists(L) (0: not in a stack)


def _stack(L: Layers) -> Stack | None:
    return L if isinstance(L, Stack) else lists(L) if L else None


class Recorder:
    """Records each module and writes its op; `prefix` precedes every path and label (CLIP's `vision_model.`) except a
    `top` one's (a task head), `bucket` is the ops' bucket unless a call names another. `L` (a Stack or a count) puts
    a module in a run of layers. `tok` are every token's rows, `first` the first token's (a pooler, a sentence head)."""

    def __init__(self, B: Builder, bucket: str = "encoder", prefix: str = ""):
        self.B, self.s, self.bucket, self.prefix = B, B.s, bucket, prefix
        self.tok, self.first = (B.b, B.seq), (B.b,)
        self.modules: list[Module] = []

    def label(self, path: str, L: Layers = 0) -> str:
        st = _stack(L)
        return self.prefix + (path if st is None else st.name(path))

    def _label(self, path: str, L: Layers, top: bool, label: str | None) -> str:
        return label or (path if top else self.label(path, L))

    def record(self, path: str, shapes: Params, L: Layers = 0, top: bool = False,
               layers: tuple[int, ...] | None = None, gguf: str | None = None) -> None:
        """A module's parameters; `top`: outside the prefix and the body (a task head); `layers`: the indices `{bid}`
        takes, where not range(L) (ResNet's blocks 1..n-1); `gguf`: its llama.cpp name (`{bid}` the layer)."""
        st = _stack(L)
        path = path if st is None else st.at(path)
        stored = tuple(range(st.stored)) if st is not None else ()
        self.modules.append(Module(path if top else self.prefix + path, gguf, shapes,
                                   stored if layers is None else layers, st.inner if st else 0, top))

    def linear(self, path: str, tokens: Shape, fin: int, fout: int, bias: bool, L: Layers = 0, note: str = "",
               bucket: str | None = None, top: bool = False, tied: bool = False, runs: bool = True,
               gguf: str | None = None, label: str | None = None) -> None:
        """`tied`: the weight is another module's (counted there); `runs` false: stored, never called (a decoder
        alone's cross-attention); `label`: its op's, where not its path's."""
        st = _stack(L)
        self.record(path, (("weight", (fout, fin)),) + ((("bias", (fout,)),) if bias else ()), L, top, gguf=gguf)
        self.B.linear(self._label(path, L, top, label) + note, bucket or self.bucket, tokens, fin, fout, bias,
                      (st.calls if st else 1) if runs else 0, st.copies if st else None, tied=tied)

    def norm(self, path: str, tokens: Shape, dim: int, L: Layers = 0, residual: bool = True, note: str = "",
             bucket: str | None = None, runs: bool = True, top: bool = False, gguf: str | None = None,
             label: str | None = None, kind: str = "layernorm") -> None:
        """A LayerNorm (weight and bias; `kind` "no_norm": MobileBERT's NoNorm, the same two parameters, x * weight +
        bias); `residual`: the residual add before it counted with it."""
        st = _stack(L)
        self.record(path, (("weight", (dim,)), ("bias", (dim,))), L, top, gguf=gguf)
        self.B.norm(self._label(path, L, top, label) + note, bucket or self.bucket, tokens, dim,
                    (st.calls if st else 1) if runs else 0, st.copies if st else None, residual=residual,
                    kind=kind, bias=True)

    def params(self, label: str, parts: tuple[tuple[str, Shape], ...], in_shape: Shape, out_shape: Shape, ew: int,
               kind: str = "embedding", bucket: str | None = None, L: int = 0) -> None:
        """Bare parameters (learned tokens, positions, scales) at their paths, and the one element-wise op that reads them
        (`label` after the prefix; `[L]` calls, each reading its layer's copy, where L)."""
        for path, shape in parts:
            self.record(path, (("", shape),), L)
        per = sum(math.prod(shape) for _, shape in parts)
        self.B.add(self.prefix + label, kind, bucket or self.bucket, max(L, 1), in_shape, out_shape, params=per * max(L, 1),
                   ew=ew, weights_per_call=per if L else 0)

    def count(self, subs: tuple[tuple[str, Params], ...], L: Layers = 0) -> int:
        """Records modules (path, its parameters); returns how many parameters they hold, every layer's together."""
        st = _stack(L)
        for path, shapes in subs:
            self.record(path, shapes, L)
        return sum(math.prod(shape) for _, shapes in subs for _, shape in shapes) * (st.copies if st else 1)

    def held(self, label: str, subs: tuple[tuple[str, Params], ...], L: Layers = 0) -> None:
        """Parameters a forward holds and never runs (no call, no cost: counted in the parameters alone)."""
        self.B.add(label, "embedding", "embedding", 0, self.tok, self.tok, params=self.count(subs, L))

    def einsum(self, path: str, fin: int, heads: int, d: int, stack: Stack, rows: Shape | None = None,
               out: bool = False, label: str | None = None) -> None:
        """A bias-free projection held as one [fin, heads, d] parameter and run by einsum over `rows` (default every
        token): fin -> heads x d, or back (`out`)."""
        self.record(path, (("", (fin, heads, d)),), stack)
        fi, fo = (heads * d, fin) if out else (fin, heads * d)
        self.B.linear(label or self.label(path, stack), self.bucket, rows or self.tok, fi, fo, False, stack.calls,
                      stack.copies)

    def embedding(self, path: str, rows: int, dim: int, seq: int, note: str = "", bucket: str | None = None,
                  params: bool = True, gguf: str | None = None, label: str | None = None) -> None:
        """A lookup table of `rows` (nn.Embedding) read by `seq` tokens; `params` false: its weight counted elsewhere
        (a tied copy); `gguf`: its llama.cpp name."""
        self.record(path, (("weight", (rows, dim)),), gguf=gguf)
        self.B.embedding((label or self.label(path)) + note, bucket or self.bucket, rows, dim, seq, params=params)

    def shapes(self, body: str = "") -> Shapes:
        """The recorded parameters' names and shapes, those not `top` under `body` ("": none)."""
        return module_shapes(self.modules, body)

    def gguf_names(self) -> tuple[tuple[str, str], ...]:
        """HF module (as the base model names it) -> llama.cpp name, of the modules recorded with one."""
        return tuple((m.path, m.gguf) for m in self.modules if m.gguf is not None)


def tensors(walk: Callable[[Builder], Recorder], body: str) -> Callable[[ArchSpec], Shapes]:
    """A family's expected tensors, derived from its walk: every module it records, those inside the body under `body`
    in a head model's file (a base model's file has no prefix): layout_base.walk_tensors of the Recorder's records."""
    return walk_tensors(lambda B: walk(B).modules, body)


def linear_shapes(fin: int, fout: int) -> Params:
    """A biased nn.Linear's parameters."""
    return (("weight", (fout, fin)), ("bias", (fout,)))
