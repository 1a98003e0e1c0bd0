"""The name regexes of a family that walks with layout_base.Walk, derived from the modules its walk records (as
layout.signature and layout.pattern derive a DecoderLayout's): its name signature (Family.signature) and the look-ups
of its from_tensors. A module is picked by its llama.cpp name (Module.gguf, or the walk's Module.role: "inp_gate",
"ffn_up") or, where llama.cpp names none, by the last components of its path ("attention.time_first"); the regex is
its path as recorded, `{bid}` any layer. Beside them, layout_shape: a DecoderLayout family's look-up by layout.pattern."""
from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from . import infer, layout
from .archspec import ArchSpec
from .base import Tensors
from .layout_base import DecoderLayout, Module, path_parts
from .ops import Builder

# the sizes of the spec a family's names are walked at; the family's `fields` add what its variant needs
_TINY: dict[str, Any] = dict(family="", model_type="", source="", head="lm", architecture=None, layers=2, hidden=8, heads=2,
                             kv_heads=1, head_dim=4, intermediate=8, vocab=8)


def walked(walk: Callable[[Builder], list[Module]], **fields: Any) -> tuple[Module, ...]:
    """The modules `walk` records at a tiny LM spec (ArchSpec `fields` over small sizes): one holding every part whose
    names the family reads."""
    return tuple(walk(Builder(ArchSpec(**{**_TINY, **fields}), 1, 1, 1, 1, 1)))


def module(modules: Iterable[Module], key: str) -> Module:
    """The module llama.cpp (or the walk) names `key`, else the one whose path ends in `key`'s components; ValueError
    where no path or several do."""
    modules = tuple(modules)
    found = {m.path: m for m in modules if {m.gguf, m.role} & {key, f"blk.{{bid}}.{key}"}}
    found = found or {m.path: m for m in modules if f".{m.path}".endswith(f".{key}")}
    if len(found) != 1:
        raise ValueError(f"the walk records {len(found) or 'no'} module path(s) named {key!r}: {sorted(found)}")
    return next(iter(found.values()))


def _under(modules: tuple[Module, ...], key: str) -> str:
    """The path up to `key`'s components of the modules whose paths hold them (a container, AltUp's `altup`: the
    modules under it); ValueError unless there is one such path."""
    heads = {m.path[:i + len(key)] for m in modules if (i := f".{m.path}.".find(f".{key}.")) >= 0}
    if len(heads) != 1:
        raise ValueError(f"the walk records {len(heads) or 'no'} module path(s) holding {key!r}: {sorted(heads)}")
    return heads.pop()


def signature(modules: Iterable[Module], *keys: str) -> str:
    """A regex on normalised tensor names (Family.signature) that matches a parameter of any of the `keys` modules
    (module's pick), or of a module under a container the walk records (`_under`): the path, then a separator, or the
    name's end where the path is a parameter's own (suffix "")."""
    modules = tuple(modules)
    alts = []
    for key in keys:
        try:
            m = module(modules, key)
            path, end = m.path, "$" if all(suffix == "" for suffix, _ in m.shapes) else "[./]"
        except ValueError:
            path, end = _under(modules, key), "[./]"
        alts.append("[./]".join(path_parts(path)) + end)
    return r"(^|[./])" + (alts[0] if len(alts) == 1 else f"({'|'.join(alts)})")


def pattern(modules: Iterable[Module], key: str, suffix: str | None = None, layer: str = r"\d+") -> str:
    r"""A regex on canonical tensor names that matches the `key` module's `suffix` parameter (None: the first it records;
    "": the path itself), `{bid}` as `layer` (r"(\d+)": group 1, as infer.count_layers reads it)."""
    m = module(modules, key)
    suffix = m.shapes[0][0] if suffix is None else suffix
    return r"(?:^|\.)" + r"\.".join(path_parts(m.path, layer)) + (rf"\.{suffix}" if suffix else "") + "$"


def shape(T: Tensors, modules: Iterable[Module], key: str, suffix: str | None = None) -> tuple[int, ...]:
    """The shape of the `key` module's `suffix` parameter (pattern's); UsageError naming its path when T has none."""
    modules = tuple(modules)
    return infer.shape(T, pattern(modules, key, suffix), module(modules, key).path.format(bid="N", xid="0"))


def layout_shape(T: Tensors, lay: DecoderLayout, gguf: str, suffix: str = "weight") -> tuple[int, ...]:
    """The shape of the `suffix` parameter of the DecoderLayout's module llama.cpp names `gguf` (layout.pattern);
    UsageError naming its path when T has none."""
    m = layout.module(lay, gguf)
    return infer.shape(T, layout.pattern(lay, gguf, suffix), m.path.format(bid="N", xid="0") if m else gguf)


def layout_has(T: Tensors, lay: DecoderLayout, gguf: str, suffix: str = "weight") -> bool:
    """Whether T holds the `suffix` parameter of the DecoderLayout's module llama.cpp names `gguf` (layout.pattern)."""
    return infer.has(T, layout.pattern(lay, gguf, suffix))
