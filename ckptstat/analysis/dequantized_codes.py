"""The decoders of quantised weights whose values are a function of a group's scale (and zero point or bias) and a
code: Scaled (an integer, float8 or float4 code times its group's scale) and Codebook (bitsandbytes' 4-bit code book
times its block's absmax), each reading a weight's stored pieces a block of rows at a time and giving the 16-bit
patterns of the values its library dequantises them to. analysis/dequantized.py picks them by the census's method
(docs/quantized.md "Statistics of quantised weights")."""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ..core import Checkpoint
from ..core.dtypes import bits16, decode, lut, unpack_bits


@dataclass(frozen=True)
class Scaled:
    """A quantised weight of codes and scales. compressed-tensors' (formats pack-quantized, int-quantized,
    float-quantized): codes packed in int32 words as a little-endian bit stream a row, stored + 2^(bits-1), or one a
    byte, int8 or float8; a scale per group of a row, per row (channel), per tensor or per block; integer zero points
    stored as the scales are or packed along the rows; each value as its dequantize computes it in the scales' dtype,
    the code (minus its zero point: exact) times its scale, rounded once. transformers' block-scaled FP8: `weight`
    float8, `weight_scale_inv` one scale a block of `block_rows` rows x `group` columns (float32 or E8M0); each value
    as its Fp8Dequantize computes it, code x scale in float32, then rounded to the model's dtype (`float32` True).
    bitsandbytes' LLM.int8: `weight` int8, `SCB` float32 one a row; each value as its int8_vectorwise_dequant computes
    it, code x SCB in float32, x 1/127 in float32 (`factor`), then rounded to the model's dtype. transformers' Gemma
    quantisation: int8 codes, or int4 / int2 two / four a uint8 byte (low bits first), stored + 2^(bits-1); a float32
    scale a row (QuantizedLinear) or a block of a row (QuantizedEmbedding); code and scale cast to the model's dtype,
    their product rounded to it (`scale_rounded`)."""
    src: Checkpoint
    codes: str
    scales: str
    zeros: str | None
    kind: str            # "offset" (unsigned codes stored + 2^(bits-1)), "int8" (two's complement), a float8 dtype,
    bits: int            # "F4" (E2M1 codes two a byte, the first in the low nibble) or "F6_E2M3" (four in three bytes)
    group: int
    cols: int
    out_dtype: str       # the scales' dtype (F16 or BF16); block-scaled FP8: the model's; FP4: bfloat16
    block_rows: int = 1  # rows that share a row of scales (block-scaled FP8)
    float32: bool = False   # the product rounded to float32 first (transformers' Fp8Dequantize, NVFP4)
    global_scale: str | None = None   # NVFP4's one float32 each group scale is divided (compressed-tensors) or
    global_divides: bool = True       # multiplied (modelopt's weight_scale_2) by, in float32
    scale_rounded: bool = False       # the scale rounded to out_dtype first (modelopt's FP8: both factors cast)
    factor: float | None = None       # a float32 constant the float32 product is then multiplied by, in float32
                                      # (bitsandbytes' int8_vectorwise_dequant: x 1/127)
    scale_at: int = 0                 # the element its scales start at (a MoE expert's part of its block's fused grid)

    @property
    def rows(self) -> int:
        return self.src.tensors[self.codes].numel * self.src.tensors[self.codes].dt.bits // (self.cols * self.bits)

    def pieces(self, r0: int, r1: int, blocks: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """Rows [r0, r1): the codes (groups, group) uint8 (the stored bits: int8 two's complement, float8 codes,
        pack-quantized's offset ones; block-scaled, whole rows of blocks and `blocks`: a group a block, else the
        groups in C order), each group's scale and zero point (float64)."""
        n = (r1 - r0) * self.cols
        if self.kind in ("F4", "F6_E2M3"):   # (a little-endian bit stream of codes a row: whole bytes)
            raw = np.asarray(self.src.read_elements(self.codes, r0 * self.cols * self.bits // 8, n * self.bits // 8))
            q = unpack_bits(raw.astype(np.uint8, copy=False), self.bits, n)
        elif self.src.tensors[self.codes].dtype == "U8" and self.bits < 8:   # two or four codes a byte, low bits first
            per = 8 // self.bits
            raw = np.asarray(self.src.read_elements(self.codes, r0 * self.cols // per, n // per))
            q = unpack_bits(raw.astype(np.uint8, copy=False), self.bits, n)
        elif self.src.tensors[self.codes].dtype == "I32":
            words = self.cols * self.bits // 32
            raw = np.asarray(self.src.read_elements(self.codes, r0 * words, (r1 - r0) * words))
            q = unpack_bits(raw.astype("<i4").view(np.uint8), self.bits, n)
        else:
            q = np.asarray(self.src.read_stored(self.codes, r0 * self.cols, n))
        per_row = self.cols // self.group
        whole = self.src.tensors[self.scales].numel == 1   # (a tensor's one scale)
        b0, b1 = r0 // self.block_rows, (r1 - 1) // self.block_rows + 1   # the rows of scales the rows read
        at, count = (0, 1) if whole else (b0 * per_row, (b1 - b0) * per_row)
        s = self._scales(at, count)
        z = None if self.zeros is None else self._zeros(r0, r1, at, count)
        if whole:
            s = np.repeat(s, (r1 - r0) * per_row)
            z = None if z is None else np.repeat(z, (r1 - r0) * per_row)
        elif blocks and self.block_rows > 1 and r0 % self.block_rows == 0 and r1 % self.block_rows == 0:   # a block
            q = q.reshape(b1 - b0, self.block_rows, per_row, self.group).transpose(0, 2, 1, 3)
            return q.reshape(-1, self.block_rows * self.group), s, z
        elif self.block_rows > 1:   # rows within blocks: each row its block's row of scales
            s = s.reshape(-1, per_row)[np.arange(r0, r1) // self.block_rows - b0].reshape(-1)
        return q.reshape(-1, self.group), s, z

    def _zeros(self, r0: int, r1: int, at: int, count: int) -> np.ndarray:
        """The zero points of rows [r0, r1), one a group, float64: stored as the scales are (elements [at, at + count)),
        or pack-quantized's, packed along the rows (int32 [rows x bits / 32, groups], each column a little-endian bit
        stream of the rows' points, stored + 2^(bits-1) as the codes are)."""
        assert self.zeros is not None
        zeros = self.src.tensors[self.zeros]
        scale_shape = self.src.tensors[self.scales].shape
        if zeros.shape == scale_shape:
            return np.asarray(self.src.read_elements(zeros.name, at, count), dtype=np.float64)
        groups, per = scale_shape[-1], 32 // self.bits
        w0, w1 = r0 // per, -(-r1 // per)
        raw = np.asarray(self.src.read_elements(zeros.name, w0 * groups, (w1 - w0) * groups)).reshape(w1 - w0, groups)
        columns = np.ascontiguousarray(raw.T).astype("<i4").view(np.uint8)
        z = unpack_bits(columns.reshape(-1), self.bits, groups * (w1 - w0) * per).reshape(groups, -1)
        return (z[:, r0 - w0 * per: r1 - w0 * per].T.reshape(-1).astype(np.float64) - (1 << (self.bits - 1)))

    def _scales(self, at: int, count: int) -> np.ndarray:
        """Scales [at, at + count) in float64; E8M0 bytes as 2^(byte - 127) (in float32: 255 is +Inf)."""
        s = np.asarray(self.src.read_elements(self.scales, self.scale_at + at, count))
        if self.src.tensors[self.scales].dtype == "U8":
            with np.errstate(over="ignore"):
                return np.exp2(s.astype(np.float64) - 127).astype(np.float32).astype(np.float64)
        if self.scale_rounded:
            return decode(bits16(s.astype(np.float64), self.out_dtype), self.out_dtype, s.size).astype(np.float64)
        if self.global_scale is not None:   # (scale / or x the global scale, in float32)
            with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
                s32 = s.astype(np.float32)
                return (s32 / self._global if self.global_divides else s32 * self._global).astype(np.float64)
        return s.astype(np.float64)

    @cached_property
    def _global(self) -> np.float32:
        """NVFP4's global scale (float32)."""
        assert self.global_scale is not None
        return np.float32(np.asarray(self.src.read(self.global_scale), dtype=np.float32).reshape(-1)[0])

    def patterns(self, q: np.ndarray, s: np.ndarray, z: np.ndarray | None) -> np.ndarray:
        """The 16-bit patterns (uint16) of the values codes q give under scales s and zero points z (broadcast
        together), in out_dtype, rounded as the class docstring says."""
        code = np.asarray(q, dtype=np.int64)
        if self.kind == "offset":
            v = (code - (1 << (self.bits - 1))).astype(np.float64)
        elif self.kind == "int8":
            v = ((code + 128) % 256 - 128).astype(np.float64)
        else:
            v = lut(self.kind).astype(np.float64)[code]
        if z is not None:
            v = v - z
        v = v * s
        if self.float32:
            with np.errstate(over="ignore"):
                v = v.astype(np.float32).astype(np.float64)
                if self.factor is not None:   # (a float32 times a float32 is exact in float64: rounded once)
                    v = (v * np.float64(np.float32(self.factor))).astype(np.float32).astype(np.float64)
        return bits16(v, self.out_dtype)


@dataclass(frozen=True)
class Codebook:
    """A bitsandbytes 4-bit weight (Params4bit, nf4 or fp4): two 4-bit codes a byte, the first in the high nibble,
    indexing `quant_map` (16 float32 values), a block of `group` values sharing an absmax: float32, or (nested, double
    quantisation) a byte indexing `nested_quant_map`, times its block's `nested_absmax`, plus the nested offset. Each
    value as bitsandbytes' dequantize_4bit computes it: the absmax in float32 (product, then + offset), code value x
    absmax in float32, then rounded to the weight's dtype."""
    src: Checkpoint
    codes: str
    absmax: str
    quant_map: str
    nested: tuple[str, str, float, int] | None   # nested_absmax, nested_quant_map, offset, nested block size
    group: int
    values: int          # the weight's elements
    out_dtype: str
    bits: int = 4
    block_rows: int = 1

    @property
    def cols(self) -> int:   # (a row: a block)
        return self.group

    @cached_property
    def _code_values(self) -> np.ndarray:
        """quant_map's 16 values (float32, as float64)."""
        return np.asarray(self.src.read(self.quant_map), dtype=np.float32).astype(np.float64)

    @cached_property
    def _nested_values(self) -> np.ndarray:
        """nested_quant_map's 256 values (float32)."""
        assert self.nested is not None
        return np.asarray(self.src.read(self.nested[1]), dtype=np.float32)

    @property
    def rows(self) -> int:
        return self.values // self.group

    def pieces(self, r0: int, r1: int) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """Blocks [r0, r1): the codes (blocks, group) uint8, each block's absmax (float64 of its float32)."""
        raw = np.asarray(self.src.read_elements(self.codes, r0 * self.group // 2, (r1 - r0) * self.group // 2))
        q = unpack_bits(raw.astype(np.uint8, copy=False).reshape(-1), 4, (r1 - r0) * self.group)
        q = q.reshape(-1, 2)[:, ::-1].reshape(-1, self.group)   # (the high nibble first)
        a = np.asarray(self.src.read_elements(self.absmax, r0, r1 - r0))
        if self.nested is not None:
            nested_absmax, _, offset, block = self.nested
            first, last = r0 // block, (r1 - 1) // block + 1
            scale = np.asarray(self.src.read_elements(nested_absmax, first, last - first), dtype=np.float32)
            a = self._nested_values[a.astype(np.intp)] * scale[np.arange(r0, r1) // block - first] + np.float32(offset)
        return q, np.asarray(a, dtype=np.float32).astype(np.float64), None

    def patterns(self, q: np.ndarray, s: np.ndarray, _: np.ndarray | None) -> np.ndarray:
        with np.errstate(over="ignore"):
            v = (self._code_values[np.asarray(q, dtype=np.intp)] * s).astype(np.float32).astype(np.float64)
        return bits16(v, self.out_dtype)
