"""The tensors an architecture should have, with their shapes, from its ArchSpec (transformers' naming,
PyTorch layout [out, in]), from its family's template (Family.expected_tensors). Used to cross-check a
checkpoint against its config: missing tensors (a dropped tied head, an absent pooler), unexpected ones
(adapters, EMA copies) and shape mismatches."""
from __future__ import annotations

from .. import get
from .base import ArchSpec, Shapes

__all__ = ["Shapes", "expected_tensors"]


def expected_tensors(spec: ArchSpec) -> Shapes | None:
    """name -> shape of every parameter the architecture has, or None when there is no template."""
    template = get(spec.family).expected_tensors
    return None if template is None else template(spec)
