"""Keras 3 int8 / int4 kernels (census/quant/keras.py) read as the float32 values Keras itself dequantises them to
(docs/quantized.md, "Keras 3 quantised layers"); keras 3.15 keras/src/layers/core:
- Dense `_int8_call`'s gradient and `_int4_call` per channel, EinsumDense `_int4_call` per channel (its
  `_dequantize_kernel` on the [rows, columns] kernel, then reshaped): `cast(code, float32) / kernel_scale`, a scale a
  column;
- Embedding `_int8_call` and per-channel `_int4_call`: `cast(code, float32) / embeddings_scale`, a scale a row;
- int4 sub-channel (quantizers.dequantize_with_sz_map): `(code - zero) x scale`, in float32, the group of a Dense /
  EinsumDense value its row's (`g_idx`, group_axis 0 of scale [groups, columns]), of an Embedding value its column's
  (group_axis -1 of scale [vocabulary, groups]);
- int4 codes two a byte along the last axis, the first in the low nibble, each a signed 4-bit value
  (quantizers.unpack_int4).
Each value is one float32 operation on exact operands (a code, a code minus an int8 zero point), as numpy and torch
both round it, in a model whose config.json says its quantised layers compute in float32 (their policies'
`source_name`, the default): a mixed-precision one's Keras computes in its 16-bit compute dtype (the scale autocast
to it), and a bare `.weights.h5` does not say which. Left as stored (None): those, EinsumDense int8 (its scale's
layout follows the equation: `_adjust_scale_for_dequant`), a square kernel with one scale a row or column (a Dense's
or an Embedding's: the shapes cannot tell), an untied ReversibleEmbedding's reverse table (Keras divides its logits,
never the table)."""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from ..census.quant import QuantWeight, layout
from ..census.quant.keras import computes_float32
from ..core import Checkpoint
from ..core.dtypes import decode

RULE = ("Keras 3's int8 / int4 Dense, EinsumDense (int4) and Embedding kernels as Keras dequantises them, in float32: "
        "code / scale (a scale a column; an Embedding's a row), sub-channel int4 (code - zero) x scale by group")


@dataclass(frozen=True)
class KerasValues:
    src: Checkpoint
    codes: str
    scale: str
    zero: str | None
    g_idx: str | None
    rows: int
    cols: int
    bits: int            # 8, or 4 (two codes a byte along the last axis)
    per_row: bool        # the scale (and group) of an Embedding: a row's
    method: str
    out_dtype: str = "F32"

    def _codes(self, r0: int, r1: int) -> np.ndarray:
        if self.bits == 8:
            raw = self.src.read_elements(self.codes, r0 * self.cols, (r1 - r0) * self.cols)
            return np.asarray(raw, dtype=np.int8).reshape(r1 - r0, self.cols)
        width = -(-self.cols // 2)   # (a row of an odd number of columns ends in a padding nibble)
        raw = np.asarray(self.src.read_stored(self.codes, r0 * width, (r1 - r0) * width), dtype=np.uint8)
        return decode(raw, "I4", 2 * raw.size).reshape(r1 - r0, 2 * width)[:, :self.cols]   # low nibble first, signed

    @functools.cached_property
    def _whole(self) -> dict[str, np.ndarray]:
        """What every chunk of rows uses whole, read once: the group index, and a Dense's scale and zero point (an
        Embedding's are read by rows, `_rows_of`)."""
        names = [self.g_idx] + ([] if self.per_row else [self.scale, self.zero])
        return {n: np.asarray(self.src.read(n), dtype=np.float32) for n in names if n is not None}

    def _rows_of(self, name: str, r0: int, r1: int) -> np.ndarray:
        """Rows [r0, r1) of a per-row scale or zero point ([rows] or [rows, groups]), float32 [r1 - r0, groups]."""
        per = self.src.tensors[name].numel // self.rows
        return np.asarray(self.src.read_elements(name, r0 * per, (r1 - r0) * per), dtype=np.float32).reshape(r1 - r0, per)

    def values(self, r0: int, r1: int) -> np.ndarray:
        """Rows [r0, r1) of the logical [rows, columns] kernel, float32."""
        q = self._codes(r0, r1).astype(np.float32)
        if self.zero is None:
            if self.per_row:
                return q / self._rows_of(self.scale, r0, r1)
            return q / self._whole[self.scale].reshape(1, -1)
        assert self.g_idx is not None and self.zero is not None
        g = self._whole[self.g_idx].astype(np.int64)
        if self.per_row:   # scale [vocabulary, groups], a column's group g_idx[column]
            return (q - self._rows_of(self.zero, r0, r1)[:, g]) * self._rows_of(self.scale, r0, r1)[:, g]
        scale, zero = self._whole[self.scale], self._whole[self.zero]   # [groups, columns], a row's group g_idx[row]
        return (q - zero[g[r0:r1]]) * scale[g[r0:r1]]

    def read(self, start: int, count: int) -> np.ndarray:
        r0, r1 = start // self.cols, -(-(start + count) // self.cols)
        flat = self.values(r0, r1).reshape(-1)
        at = start - r0 * self.cols
        return flat[at: at + count]


def keras_values(ckpt: Checkpoint, w: QuantWeight) -> KerasValues | None:
    """The weight's values reader (module docstring), or None where it is left as stored."""
    if (not w.method.startswith("keras int") or len(w.shape) != 2 or w.bits not in (4, 8) or not w.name.endswith("vars/0")
            or not computes_float32(ckpt.metadata)):
        return None   # (a ReversibleEmbedding's reverse table is its variable 2 or later)
    q = layout(ckpt)
    roles = q.roles if q is not None else {}
    T = ckpt.tensors
    k = T[w.name]
    pieces = {roles.get(m): T[m] for m in w.members if m != w.name}
    scale, zero, g_idx = pieces.get("scale"), pieces.get("zero-point"), pieces.get("group-index")
    rows, cols = w.shape
    if scale is None or scale.dtype != "F32" or len(k.shape) != 2 or k.shape[0] != rows:
        return None   # (a 16-bit scale: a model Keras computes in 16 bits, which this does not follow)
    if zero is None:
        if len(scale.shape) != 1 or rows == cols:
            return None
        per_row = scale.shape == (rows,)
        if not per_row and scale.shape != (cols,):
            return None
        return KerasValues(ckpt, k.name, scale.name, None, None, rows, cols, int(w.bits), per_row, w.method)
    if g_idx is None or zero.shape != scale.shape or len(scale.shape) != 2:
        return None
    per_row = g_idx.shape == (cols,) and scale.shape[0] == rows and g_idx.shape != (rows,)
    if not per_row and (g_idx.shape != (rows,) or scale.shape[1] != cols):
        return None
    groups = scale.shape[1] if per_row else scale.shape[0]
    g = np.asarray(ckpt.read(g_idx.name), dtype=np.float64)
    if g.size and (not np.all(np.isfinite(g)) or g.min() < 0 or g.max() >= groups or np.any(g != np.floor(g))):
        return None   # a group index no group has: left as stored
    return KerasValues(ckpt, k.name, scale.name, zero.name, g_idx.name, rows, cols, int(w.bits), per_row, w.method)
