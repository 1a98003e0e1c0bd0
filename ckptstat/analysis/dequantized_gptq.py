"""GPTQ and AWQ weights read as their values, as GPTQModel (the library transformers 5 loads both with) dequantises
them: the decoder analysis/dequantized.py uses for them (docs/quantized.md "Statistics of quantised weights").

Both store a linear's [out, in] weight as its transpose's integer codes, packed in int32 words (a little-endian bit
stream), with one float16/bfloat16 scale and one integer zero point per (input group, output column):
- GPTQ (auto-gptq, gptqmodel): `qweight` [in x bits / 32, out], the input axis packed; `qzeros` [groups, out x bits /
  32], the output axis packed; `scales` [groups, out]; `g_idx` [in], each input row's group (act-order permutes
  them). Checkpoint format `gptq` (v1, the default) stores each zero point minus one, and gptqmodel adds one back to
  the whole word on load (0x11111111 at 4 bits: a stored nibble of 15 carries into the next one; at 3 bits, whose
  codes cross words, to each code, modulo 8); `gptq_v2` stores them as they are.
- AWQ GEMM (AutoAWQ, gptqmodel): `qweight` [in, out x bits / 32] and `qzeros` [in / group, out x bits / 32], the
  output axis packed (at 4 bits in the order 0 2 4 6 1 3 5 7 of each 8 columns); `scales` [in / group, out].
Each value is gptqmodel's `scales[g] x (code - zero[g])`, the difference exact, the product rounded once to the scales'
dtype (TorchLinear.dequantize_weight, awq dequantize_gemm)."""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ..core import Checkpoint, TensorInfo
from ..core.dtypes import bits16, unpack_bits
from ..errors import CorruptCheckpointError

AWQ_ORDER = np.array([0, 2, 4, 6, 1, 3, 5, 7])   # the true column of each of 8 packed 4-bit slots
BITS = (2, 3, 4, 8)   # (3-bit codes cross words: a column's 32 codes fill 3; GPTQ only)


@dataclass(frozen=True)
class InputGrouped:
    """A GPTQ (`packed_inputs`) or AWQ GEMM weight of `inputs` x `outputs` values (the module docstring). `v1`: GPTQ's
    zero points stored minus one. `group`: AWQ's input rows a group (GPTQ reads g_idx)."""
    src: Checkpoint
    codes: str
    scales: str
    zeros: str
    g_idx: str | None
    bits: int
    inputs: int
    outputs: int
    packed_inputs: bool
    v1: bool = False
    group: int = 0
    out_dtype: str = "F16"   # (the scales')

    @cached_property
    def groups(self) -> np.ndarray:
        """Each input row's group (intp): g_idx's, checked against the scales' rows, or row // group."""
        count = self.src.tensors[self.scales].shape[0]
        if self.g_idx is None:
            return np.arange(self.inputs) // self.group
        g = np.asarray(self.src.read(self.g_idx)).astype(np.intp).reshape(-1)
        if g.size != self.inputs or (g.size and (g.min() < 0 or g.max() >= count)):
            info = self.src.tensors[self.g_idx]
            raise CorruptCheckpointError(info.file, f"tensor {info.name!r} names groups outside the {count} rows of "
                                                    f"{self.scales!r}")
        return g

    def reads(self, values: int) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray | None]]:
        """About `values` codes at a time (whole words, at least 32 input rows): for each group among them, its codes
        (outputs, rows of it) uint8 and its scale and zero point of each output column (float64)."""
        step = max(1, values // (self.outputs * 32)) * 32
        groups = self.src.tensors[self.scales].shape[0]
        every = (self._scales(0, groups), self._zeros(0, groups)) if np.any(np.diff(self.groups) < 0) else None
        for r0 in range(0, self.inputs, step):
            r1 = min(r0 + step, self.inputs)
            codes, g = self._codes(r0, r1), self.groups[r0:r1]
            g0, g1 = (0, groups) if every else (int(g.min()), int(g.max()) + 1)
            # (act-order: each read holds rows of nearly every group, whose scales and zero points are read once)
            scales, zeros = every or (self._scales(g0, g1), self._zeros(g0, g1))
            order = np.argsort(g, kind="stable")   # (act-order: a group's rows anywhere among them)
            for run in np.split(order, np.flatnonzero(np.diff(g[order])) + 1):
                k = int(g[run[0]]) - g0
                yield codes[:, run], scales[k], zeros[k]

    def logical_patterns(self, start: int, count: int) -> np.ndarray:
        """The 16-bit patterns (uint16) of elements [start, start + count) of the values in their logical [out, in] C
        order (diff): the output rows they fall in (a whole packed word of them), over all input rows, a block of
        input rows at a time; the stored words are read whole, each column of the stored transpose taken from them."""
        per = 1 if self.packed_inputs else 32 // self.bits   # (AWQ: a word's outputs together)
        o0, o1 = start // self.inputs // per * per, -(-(start + count) // self.inputs // per) * per
        o1 = min(max(o1, o0 + per), self.outputs)
        out = np.empty((o1 - o0, self.inputs), dtype=np.uint16)
        step = max(32, (1 << 20) // (o1 - o0) // 32 * 32)
        for r0 in range(0, self.inputs, step):
            r1 = min(r0 + step, self.inputs)
            g = self.groups[r0:r1]
            g0 = int(g.min())
            s, z = self._scales(g0, int(g.max()) + 1, o0, o1), self._zeros(g0, int(g.max()) + 1, o0, o1)
            out[:, r0:r1] = self.patterns(self._codes(r0, r1, o0, o1), s[g - g0].T, z[g - g0].T)
        if not self.packed_inputs and self.bits == 4:   # (AWQ's output rows back in their true order)
            out = out[np.argsort(_awq_slots(self.outputs)[o0:o1])]
        lo = start - o0 * self.inputs
        return out.reshape(-1)[lo: lo + count]

    def _codes(self, r0: int, r1: int, o0: int = 0, o1: int | None = None) -> np.ndarray:
        """The codes of input rows [r0, r1) and stored columns [o0, o1) (AWQ: whole words of them), (o1 - o0, r1 - r0)
        uint8, in the stored column order."""
        o1 = self.outputs if o1 is None else o1
        if self.packed_inputs:   # [in x bits / 32, out]: each column a stream of its input rows' codes, 32 codes
            stored = self.src.tensors[self.codes].shape[0]   # `bits` words (r0: whole 32s of rows)
            w0, w1 = r0 // 32 * self.bits, min(-(-r1 // 32) * self.bits, stored)
            raw = np.asarray(self.src.read_elements(self.codes, w0 * self.outputs, (w1 - w0) * self.outputs))
            columns = np.ascontiguousarray(raw.reshape(w1 - w0, self.outputs)[:, o0:o1].T).astype("<i4").view(np.uint8)
            per_column = (w1 - w0) * 32 // self.bits
            q = unpack_bits(columns.reshape(-1), self.bits, (o1 - o0) * per_column)
            return q.reshape(o1 - o0, per_column)[:, r0 % 32: r0 % 32 + r1 - r0]
        words, per = self.outputs * self.bits // 32, 32 // self.bits   # [in, out x bits / 32]: each row a stream of
        raw = np.asarray(self.src.read_elements(self.codes, r0 * words, (r1 - r0) * words))   # its columns' codes
        raw = np.ascontiguousarray(raw.reshape(r1 - r0, words)[:, o0 // per: o1 // per]).astype("<i4")
        return unpack_bits(raw.view(np.uint8).reshape(-1), self.bits, (r1 - r0) * (o1 - o0)).reshape(r1 - r0, -1).T

    def _scales(self, g0: int, g1: int, o0: int = 0, o1: int | None = None) -> np.ndarray:
        """Groups [g0, g1)'s scales of stored columns [o0, o1) (g1 - g0, o1 - o0), float64, in the codes' column
        order."""
        s = np.asarray(self.src.read_elements(self.scales, g0 * self.outputs, (g1 - g0) * self.outputs))
        s = s.astype(np.float64).reshape(g1 - g0, self.outputs)
        return (s if self.packed_inputs or self.bits != 4 else s[:, _awq_slots(self.outputs)])[:, o0:o1]

    def _zeros(self, g0: int, g1: int, o0: int = 0, o1: int | None = None) -> np.ndarray:
        """Groups [g0, g1)'s zero points of stored columns [o0, o1) (g1 - g0, o1 - o0), float64, as gptqmodel reads
        them (v1: the words + one a code, carries and all)."""
        words = self.outputs * self.bits // 32
        raw = np.asarray(self.src.read_elements(self.zeros, g0 * words, (g1 - g0) * words)).astype(np.int64)
        if self.v1 and 32 % self.bits == 0:
            raw = raw + sum(1 << (self.bits * k) for k in range(32 // self.bits))
        raw = (raw & 0xFFFFFFFF).astype("<u4")
        z = unpack_bits(raw.view(np.uint8), self.bits, (g1 - g0) * self.outputs)
        if self.v1 and 32 % self.bits:   # (3 bits: gptqmodel adds one to each code, not to the words)
            z = ((z + 1) & ((1 << self.bits) - 1)).astype(np.uint8)
        return z.reshape(g1 - g0, self.outputs)[:, o0:o1].astype(np.float64)

    def patterns(self, q: np.ndarray, s: np.ndarray, z: np.ndarray | None) -> np.ndarray:
        """The 16-bit patterns (uint16) of scale x (code - zero point), rounded once to out_dtype."""
        return bits16((np.asarray(q, dtype=np.float64) - (0 if z is None else z)) * s, self.out_dtype)


def _awq_slots(outputs: int) -> np.ndarray:
    """The true column of each stored 4-bit AWQ column (AutoAWQ packs each 8 in the order 0 2 4 6 1 3 5 7)."""
    return (np.arange(outputs).reshape(-1, 8)[:, AWQ_ORDER]).reshape(-1)


def gptq(ckpt: Checkpoint, members: dict[str, TensorInfo], shape: tuple[int, ...], bits: float | None,
         config: dict) -> InputGrouped | None:
    """A GPTQ weight whose stored pieces are what InputGrouped reads, else None (3-bit, Marlin and other layouts,
    32-bit scales: left out by role)."""
    qweight, qzeros, scales, g_idx = (members.get(k) for k in ("qweight", "qzeros", "scales", "g_idx"))
    fmt = str(config.get("checkpoint_format") or config.get("format") or "gptq").lower()
    if not _sized(qweight, qzeros, scales, shape, bits) or fmt not in ("gptq", "gptq_v2"):
        return None
    assert qweight is not None and qzeros is not None and scales is not None
    b, (out, inputs) = int(bits or 0), shape
    if (qweight.shape != (-(-inputs * b // 32), out) or qzeros.shape != (scales.shape[0], out * b // 32)
            or (g_idx is not None and (g_idx.shape != (inputs,) or g_idx.dtype not in ("I32", "I64")))
            or (g_idx is None and inputs % scales.shape[0])):
        return None
    return InputGrouped(ckpt, qweight.name, scales.name, qzeros.name, None if g_idx is None else g_idx.name, b, inputs,
                        out, True, fmt == "gptq", inputs // scales.shape[0], scales.dtype)


def awq(ckpt: Checkpoint, members: dict[str, TensorInfo], shape: tuple[int, ...], bits: float | None,
        config: dict) -> InputGrouped | None:
    """An AWQ GEMM weight whose stored pieces are what InputGrouped reads, else None (GEMV and other versions)."""
    qweight, qzeros, scales = (members.get(k) for k in ("qweight", "qzeros", "scales"))
    if not _sized(qweight, qzeros, scales, shape, bits) or str(config.get("version") or "gemm").lower() != "gemm":
        return None
    assert qweight is not None and qzeros is not None and scales is not None
    b, (out, inputs) = int(bits or 0), shape
    groups = scales.shape[0]
    if 32 % b:   # (AWQ packs whole codes a word)
        return None
    if (qweight.shape != (inputs, out * b // 32) or qzeros.shape != (groups, out * b // 32) or not groups
            or inputs % groups or (b == 4 and out % 8)):
        return None
    return InputGrouped(ckpt, qweight.name, scales.name, qzeros.name, None, b, inputs, out, False, False,
                        inputs // groups, scales.dtype)


def _sized(qweight: TensorInfo | None, qzeros: TensorInfo | None, scales: TensorInfo | None, shape: tuple[int, ...],
           bits: float | None) -> bool:
    """Whether the pieces are there and typed as InputGrouped reads them: int32 words, 16-bit scales [groups, out],
    whole codes a word, whole words a row of zero points."""
    return (qweight is not None and qzeros is not None and scales is not None and len(shape) == 2 and bits in BITS
            and qweight.dtype in ("I32", "U32") and qzeros.dtype in ("I32", "U32") and scales.dtype in ("F16", "BF16")
            and len(scales.shape) == 2 and scales.shape[1] == shape[0] and shape[0] * int(bits) % 32 == 0)
