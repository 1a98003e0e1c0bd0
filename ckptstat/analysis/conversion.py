"""`ckptstat diff` of a model and its conversion: the value transforms llama.cpp's convert_hf_to_gguf.py
applies on the way, replayed on the HF side before comparing (docs/diff.md "Conversions"), and whether a
tensor stored in another dtype holds the source's values rounded to that dtype, within the dtype's own
rounding bound.

Transforms are named by the families (`Family.gguf_transforms`: GGUF architecture, a regex on the aligned
HF name, a kind below); the numbers they need (heads) come from the GGUF file's metadata."""
from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core import Checkpoint
from ..core.dtypes import DTYPES

Chunks = Iterator[np.ndarray]


@dataclass(frozen=True)
class Transform:
    """One converter transform of one tensor: `label` says it to the user, `apply` replays it on a C-order
    stream of the HF tensor's values (memory: one head's rows at most)."""
    label: str
    apply: Callable[[Chunks], Chunks]


def _regroup(chunks: Chunks, size: int, reorder: Callable[[np.ndarray], np.ndarray]) -> Chunks:
    """The stream cut into groups of `size` elements, each put through `reorder`."""
    buf: list[np.ndarray] = []
    held = 0
    for chunk in chunks:
        buf.append(chunk)
        held += len(chunk)
        if held < size:
            continue
        flat = np.concatenate(buf) if len(buf) > 1 else buf[0]
        whole = len(flat) // size * size
        yield reorder(flat[:whole].reshape(-1, size)).reshape(-1)
        buf, held = [flat[whole:]], len(flat) - whole
    if held:   # a tail shorter than a group: the shape did not split into heads (the caller checks it does)
        yield np.concatenate(buf)


def rope_permutation(heads: int, shape: tuple[int, ...], what: str) -> Transform | None:
    """llama.cpp's `LlamaModel.permute` (conversion/llama.py): each head's rows, HF's two rotary halves
    [h, 2, d/2], stored interleaved [h, d/2, 2], for its non-NeoX rope. None when the rows do not split."""
    rows = shape[0] if shape else 0
    if heads <= 0 or rows % (2 * heads):
        return None
    half = rows // heads // 2
    cols = int(np.prod(shape[1:], dtype=np.int64)) if len(shape) > 1 else 1

    def reorder(groups: np.ndarray) -> np.ndarray:
        return groups.reshape(-1, 2, half, cols).swapaxes(1, 2)

    return Transform(f"llama.cpp's rotary row permutation ({what}, {heads} heads)",
                     lambda chunks: _regroup(chunks, 2 * half * cols, reorder))


def _plus_one(chunks: Chunks) -> Chunks:
    # as the converter: `data_torch + 1` in the tensor's own float16, else in float32 (bf16 is widened first)
    for x in chunks:
        dt = np.float16 if x.dtype == np.float16 else np.float32
        yield x.astype(dt) + dt(1)


# llama.cpp's RMSNorm scales by w, Gemma's by 1 + w
PLUS_ONE = Transform("llama.cpp's norm + 1", _plus_one)


def transform_for(kind: str, gguf: Checkpoint, shape: tuple[int, ...]) -> Transform | None:
    """The transform `kind` (a family's gguf_transforms) for one tensor of `shape`, or None when the file
    does not say what it needs or the shape does not fit."""
    arch = gguf.declared_architecture or ""

    def count(key: str) -> int:
        try:
            return int(gguf.metadata.get(f"{arch}.attention.{key}", "0"))
        except ValueError:
            return 0

    if kind == "plus_one":
        return PLUS_ONE
    if kind == "rope_q":
        return rope_permutation(count("head_count"), shape, "q")
    if kind == "rope_k":
        return rope_permutation(count("head_count_kv") or count("head_count"), shape, "k")
    raise ValueError(f"unknown converter transform {kind!r}")


def gguf_transforms(gguf: Checkpoint) -> list[tuple[re.Pattern[str], str]]:
    """(regex on the aligned HF name, kind) for this GGUF file's architecture, from its family."""
    from ..census import architecture
    from ..errors import CkptstatError
    from ..families import get

    try:
        family = get(architecture(gguf)["family"])
    except CkptstatError:
        return []
    arch = gguf.declared_architecture or ""
    return [(re.compile(rx), kind) for a, rx, kind in family.gguf_transforms if a == arch]


# ------------------------------------------------------------------------------------------ rounding
_F16_SUBNORMAL_HALF_ULP = 2.0 ** -25


def _bf16(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 (round to nearest even), as float32 values."""
    u = x.astype(np.float32).view(np.uint32)
    r = ((u + (0x7FFF + ((u >> 16) & 1))) >> 16) << 16
    return r.astype(np.uint32).view(np.float32)


def _q8_0(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Q8_0 (ggml-common.h block_q8_0): 32 values, d = max|x| / 127 stored as f16, q = round(x / d): an
    element is off by d/2 and by q times d's own f16 rounding. d16 is read back from the dequantised block,
    whose largest element is +-127 d16."""
    blocks = y.reshape(-1, 32) if len(y) % 32 == 0 else None
    if blocks is None:
        return np.zeros_like(y)
    d16 = np.max(np.abs(blocks), axis=1, keepdims=True) / 127
    bound = d16 * 0.5 + 127 * np.maximum(d16 * 2.0 ** -11, _F16_SUBNORMAL_HALF_ULP) + d16 * 1e-6
    return np.broadcast_to(bound, blocks.shape).reshape(-1)


# dtype -> (elements a bound needs together, the allowed |x - y| per element of source x and stored y)
ROUNDING: dict[str, tuple[int, Callable[[np.ndarray, np.ndarray], np.ndarray]]] = {
    "F32": (1, lambda x, y: np.abs(x.astype(np.float32).astype(np.float64) - x)),
    "F16": (1, lambda x, y: np.abs(x.astype(np.float16).astype(np.float64) - x)),
    "BF16": (1, lambda x, y: np.abs(_bf16(x).astype(np.float64) - x)),
    "Q8_0": (32, _q8_0),
}


def rounding_target(a_dtype: str, b_dtype: str) -> str | None:
    """Of two float dtypes, the one a conversion rounds to (fewer bits; B when equal), when ckptstat knows
    its rounding bound; else None."""
    da, db = DTYPES.get(a_dtype), DTYPES.get(b_dtype)
    if da is None or db is None or a_dtype == b_dtype or "float" not in (da.kind, db.kind):
        return None
    target = a_dtype if da.bits < db.bits else b_dtype
    return target if target in ROUNDING else None


def whole_blocks(pairs: Iterator[tuple[np.ndarray, np.ndarray]], block: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Equal-length pieces re-cut to whole blocks of `block` elements (the last piece may be short)."""
    if block == 1:
        yield from pairs
        return
    ca: list[np.ndarray] = []
    cb: list[np.ndarray] = []
    held = 0
    for x, y in pairs:
        ca.append(x)
        cb.append(y)
        held += len(x)
        if held >= block:
            fx, fy = np.concatenate(ca), np.concatenate(cb)
            whole = held // block * block
            yield fx[:whole], fy[:whole]
            ca, cb, held = [fx[whole:]], [fy[whole:]], held - whole
    if held:
        yield np.concatenate(ca), np.concatenate(cb)


def conversion_row(target: str, use: float) -> dict[str, Any]:
    """What a row says of a faithful conversion: the dtype rounded to and the largest error's share of
    the rounding bound (<= 1)."""
    return {"rounded_to": target, "bound_used": use}
