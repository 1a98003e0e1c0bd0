"""The model-family registry, and which architecture a checkpoint holds: from config.json when there is
one, else from a GGUF file's `general.architecture`, else from tensor names.

Each family is one module (families/<name>.py) exporting FAMILY (base.Family); FAMILIES lists them,
one line each. The order is the order tried: a family whose tensor names or GGUF files also match a
broader one's comes before it (Mixtral before LLaMA)."""
from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ..errors import UsageError
from ..naming import normalize
from . import albert, bert, distilbert, gpt2, llama, mixtral, t5
from .base import Family

FAMILIES: tuple[Family, ...] = (
    bert.FAMILY,
    albert.FAMILY,
    distilbert.FAMILY,
    gpt2.FAMILY,
    mixtral.FAMILY,
    llama.FAMILY,
    t5.FAMILY,
)

_BY_NAME = {f.name: f for f in FAMILIES}
# config.json model_type -> family name (the families ckptstat has analytic rules for).
MODEL_TYPES = {mt: f.name for f in FAMILIES for mt in f.model_types}
# Tensor-name signatures, tried in order when there is no config.
NAME_SIGNATURES = [(re.compile(f.signature), f.name) for f in FAMILIES]


def get(name: str) -> Family:
    """The registered family called `name` (ArchSpec.family); UsageError if there is none."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise UsageError(f"no analytic model for family {name!r}") from None


def by_model_type(model_type: object) -> Family | None:
    return _BY_NAME.get(MODEL_TYPES.get(model_type, "")) if isinstance(model_type, str) else None


def by_gguf(arch: str, metadata: Mapping[str, str]) -> Family | None:
    """The family of a GGUF file whose general.architecture is `arch`."""
    return next((f for f in FAMILIES if arch in f.gguf_names and f.gguf_accepts(arch, metadata)), None)


@dataclass(frozen=True)
class Architecture:
    family: str                     # a registered family's name, or "unknown"
    source: str                     # "config.json", "gguf general.architecture" or "tensor names"
    model_type: str | None = None
    architectures: tuple[str, ...] = ()


def detect(names: Iterable[str], config: dict | None, metadata: Mapping[str, str] | None = None) -> Architecture:
    """metadata: a GGUF file's key-values (Checkpoint.metadata of format "gguf"), else None."""
    if config:
        mt = config.get("model_type")
        archs = tuple(a for a in config.get("architectures") or () if isinstance(a, str))
        if isinstance(mt, str):
            return Architecture(MODEL_TYPES.get(mt, "unknown"), "config.json", mt, archs)
    # GGUF: general.architecture names llama.cpp's LLM_ARCH (llama, qwen2, gpt2, bert, t5... as
    # model_type does); a family's gguf_accepts tells apart files of one name (Mixtral's "llama" has experts).
    arch = (metadata or {}).get("general.architecture")
    if arch:
        f = by_gguf(arch, metadata or {})
        return Architecture(f.name if f else "unknown", "gguf general.architecture", arch)
    # naming.normalize: HF TF's `tf_bert_model/bert/encoder/layer_._0/...:0` reads `...layer.0...`
    names = [normalize(n) for n in names]
    for pattern, family in NAME_SIGNATURES:
        if any(pattern.search(n) for n in names):
            return Architecture(family, "tensor names")
    return Architecture("unknown", "tensor names")
