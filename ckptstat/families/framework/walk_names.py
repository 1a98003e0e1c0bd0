"""The name regexes of a family derived from the modules its walk records (layout_base.Module: a path with `{bid}` the
stored layer and `{xid}` an inner index, its parameters, its llama.cpp name), so that a module path is written only
where the walk records it: its name signature (Family.signature) and the look-ups of its from_tensors. One set for both
kinds of walk: a layout_base.Walk family's (rwkv, recurrent_gemma, dory, gemma4, gemma3n, inkling, inkling2: its walk
returns the Modules) and a framework/recorder.py Recorder family's (the encoders, vision towers, encoder-decoders:
its walk returns the Recorder, or the Modules of several, CLIP's towers). `walked` walks a tiny spec; a module is picked
(`find`, `module`) by its llama.cpp name (Module.gguf, or the walk's Module.role: "inp_gate", "ffn_up") or, where none
is, by the last components of its path ("attention.self.query"), the first one recorded; `signature`, `pattern`,
`layers`, `numbered` and `shape` read its path (layout.signature and layout.pattern are a DecoderLayout's). Beside them,
layout_shape and layout_has: a DecoderLayout family's look-ups by layout.pattern."""
from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any, overload

from . import infer, layout
from .archspec import ArchSpec
from .base import Tensors
from .layout_base import DecoderLayout, Module, path_parts
from .ops import Builder
from .recorder import Recorder

# a walk's modules: its Recorder, or the Modules a layout_base.Walk (or a walk of several Recorders) returns
Walked = Recorder | Sequence[Module]

# the sizes of the spec a family's names are walked at (one layer, every width 4); `fields` add what its variant needs
_TINY: dict[str, Any] = dict(source="", head="base", architecture=None, layers=1, hidden=4, heads=1, kv_heads=1,
                             head_dim=4, intermediate=4, vocab=4, positions=4)
# a decoder's fields over them (the layout_base.Walk families'): its LM head, two layers (one of each kind it alternates)
LM: dict[str, Any] = dict(head="lm", layers=2)


@overload
def walked(walk: Callable[[Builder], Recorder], family: str = "", **fields: Any) -> Recorder: ...
@overload
def walked(walk: Callable[[Builder], list[Module]], family: str = "", **fields: Any) -> tuple[Module, ...]: ...


def walked(walk: Callable[[Builder], Recorder | list[Module]], family: str = "", **fields: Any
           ) -> Recorder | tuple[Module, ...]:
    """The walk of a tiny model of `family` (_TINY: a base model, one layer, every width 4) with `fields` set: one
    holding every part whose names the family reads. A Recorder walk's Recorder, else the Modules it returns."""
    w = walk(Builder(ArchSpec(**{**_TINY, "family": family, "model_type": family, **fields}), 1, 1, 1, 1, 1))
    return w if isinstance(w, Recorder) else tuple(w)


def _modules(w: Walked) -> Sequence[Module]:
    return w.modules if isinstance(w, Recorder) else w


def find(w: Walked, key: str) -> Module | None:
    """The first recorded module llama.cpp (or the walk) names `key` (`attn_q` or `blk.{bid}.attn_q`), else the first
    whose path ends in `key`'s components (`attention.self.query`: an encoder's before its decoder's); None if none."""
    ms, names = _modules(w), {key, f"blk.{{bid}}.{key}"}
    return (next((m for m in ms if {m.gguf, m.role} & names), None)
            or next((m for m in ms if f".{m.path}".endswith(f".{key}")), None))


def module(w: Walked, key: str) -> Module:
    """find()'s module; ValueError when the walk records none."""
    if (m := find(w, key)) is None:
        raise ValueError(f"the walk records no module named {key!r}")
    return m


def _bare(m: Module) -> bool:
    """Whether the module is a bare parameter (suffix ""): its path is the parameter's name."""
    return all(suffix == "" for suffix, _ in m.shapes)


def _under(w: Walked, key: str) -> str:
    """The path up to `key`'s components of the modules whose paths hold them (a container, AltUp's `altup`: the
    modules under it); ValueError unless there is one such path."""
    heads = {m.path[:i + len(key)] for m in _modules(w) if (i := f".{m.path}.".find(f".{key}.")) >= 0}
    if len(heads) != 1:
        raise ValueError(f"the walk records {len(heads) or 'no'} module path(s) holding {key!r}: {sorted(heads)}")
    return heads.pop()


# a `layer_1` component (XLNet's ff.layer_1) that infer.canonical_name spells `layer.1` (its google-research TF1 rule)
_TF1_LAYER = re.compile(r"layer_(\d+)")


def _parts(path: str, bid: str = r"\d+", xid: str = r"\d+", number: str | None = None) -> list[str]:
    """layout_base.path_parts with `{xid}` as `xid`, (`number` given) a literal index (T5's layer.0) as `number`, and a
    TF1 `layer_3` as either spelling."""
    return [xid if c == "{xid}" else number if number and c.isdigit()
            else _TF1_LAYER.sub(r"layer[._]\1", c) if _TF1_LAYER.fullmatch(c) else part
            for c, part in zip(path.split("."), path_parts(path, bid))]


def _signature_body(w: Walked, key: str, suffix: str | None, tf1: bool) -> str:
    """One alternative of signature(): `key`'s module path (or a container's, `_under`) and its end."""
    if (m := find(w, key)) is None:
        path, end = _under(w, key), "[./]"
    else:
        path, end = m.path, "$" if _bare(m) else f"[./]{re.escape(suffix)}$" if suffix else "[./]"
    body = "[./]".join(_parts(path, number=r"\d+"))
    return (body.replace(r"[./]\d+", r"[._/]\d+") if tf1 else body) + end


def signature(w: Walked, *keys: str, suffix: str | None = None, under: str = r"(^|[./])", tf1: bool = True) -> str:
    """A regex on normalised tensor names (Family.signature) that matches a parameter (or the `suffix` one alone) of
    any of the `keys` modules (module()), or of a module under a container the walk records (`_under`), after `under`
    (a regex: by default any component's start); any number where a path has one (detection reads every numbered
    component as 0: families/__init__.py). `tf1`: a number may follow an underscore too (google-research TF1's
    `layer_3`, which naming.normalize keeps); false where the family's files never come from TF1."""
    alts = [_signature_body(w, key, suffix, tf1) for key in keys]
    return under + (alts[0] if len(alts) == 1 else f"({'|'.join(alts)})")


def pattern(w: Walked, key: str, suffix: str | None = None, layer: str = r"\d+", under: str = r"(?:^|\.)") -> str:
    r"""A regex on canonical tensor names (infer.find, has, shape) that matches the `key` module's `suffix` parameter
    (None: the first it records; a bare parameter: its path, whatever `suffix`) after `under` (a regex: by default any
    component's start), `{bid}` as `layer` (r"(\d+)": group 1, as infer.count_layers reads it; "0": the first layer)."""
    m = module(w, key)
    suffix = "" if _bare(m) else m.shapes[0][0] if suffix is None else suffix
    # a bare `*_embeddings` parameter read from a TF file: infer.canonical_name's TF1 rule appends `.weight` (ViT's)
    end = rf"\.{suffix}$" if suffix else r"(\.weight)?$" if m.path.endswith("_embeddings") else "$"
    return under + r"\.".join(_parts(m.path, layer)) + end


def layers(w: Walked, key: str, inner: bool = False, under: str = r"(?:^|\.)") -> str:
    """A regex for infer.count_layers: `key`'s module's stored layer (`{bid}`; `inner`: its layer within a group,
    `{xid}`: ALBERT's) as its group 1, after `under` (a regex without a group)."""
    parts = _parts(module(w, key).path, *((r"\d+", r"(\d+)") if inner else (r"(\d+)",)))
    return under + r"\.".join(parts) + r"(?:\.|$)"


def numbered(w: Walked, key: str, suffix: str = "weight") -> str:
    """A regex on canonical tensor names for `key`'s module's `suffix` parameter whose groups 2, 3... capture every
    number in its path, in order: a stored layer (`{bid}`), a literal index (`stages.0`), a component's trailing digits
    (torchvision's `layer1`, `conv1`); `suffix` "": a bare parameter's (its path is its name)."""
    parts = [r"(\d+)" if c in ("{bid}", "{xid}") or c.isdigit() else re.sub(r"\d+$", r"(\\d+)", re.escape(c))
             for c in module(w, key).path.split(".")]
    return r"(^|\.)" + r"\.".join(parts) + (rf"\.{suffix}$" if suffix else "$")


def shape(T: Tensors, w: Walked, key: str, suffix: str | None = None) -> tuple[int, ...]:
    """The shape of the `key` module's `suffix` parameter (pattern's); UsageError naming its path when T has none."""
    return infer.shape(T, pattern(w, key, suffix), module(w, key).path.format(bid="N", xid="0"))


def layout_shape(T: Tensors, lay: DecoderLayout, gguf: str, suffix: str = "weight") -> tuple[int, ...]:
    """The shape of the `suffix` parameter of the DecoderLayout's module llama.cpp names `gguf` (layout.pattern);
    UsageError naming its path when T has none."""
    m = layout.module(lay, gguf)
    return infer.shape(T, layout.pattern(lay, gguf, suffix), m.path.format(bid="N", xid="0") if m else gguf)


def layout_has(T: Tensors, lay: DecoderLayout, gguf: str, suffix: str = "weight") -> bool:
    """Whether T holds the `suffix` parameter of the DecoderLayout's module llama.cpp names `gguf` (layout.pattern)."""
    return infer.has(T, layout.pattern(lay, gguf, suffix))
