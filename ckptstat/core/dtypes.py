"""One dtype table for every format.

Canonical names are safetensors' dtype codes (docs/formats.md section 1), plus codes of ours for what
other formats store: C128, STR, ONNX's I4 / U4 / I2 / U2, and torch's complex32, bcomplex32 and float4_e2m1fn_x2 (C32,
BC32, F4_X2: safetensors, numpy and ONNX have no code for them; docs/formats.md section 2). Each reader maps
its native codes into this table; nothing else branches on dtypes.
Values are decoded with numpy alone: bf16 is widened by shifting its bits into a float32, the
8-bit and smaller float formats go through a 256-entry lookup table built from their bit layout, and
C32 / BC32 (a float16 / bfloat16 real and imaginary part) are widened to complex64.

An element is `lanes` values of bits // lanes bits each: F4_X2 is torch's packed pair, two F4 codes in one
byte, low nibble first; it counts as one element (torch's numel) and decodes to its two values.

Block-quantised types (GGUF/ggml: Q4_0, Q8_0, Q4_K...) store `block` elements in `block_bytes` bytes
(gguf-py constants.py GGML_QUANT_SIZES); their `bits` is the per-element cost rounded down, for
estimates only. Those with a decoder in quants.py (QUANTS) dequantise to float32 a whole block at a time.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # numpy is imported where values are decoded, not by header-only commands
    import numpy as np
    from numpy.typing import NDArray

    F32 = NDArray[np.float32]
    U8 = NDArray[np.uint8]


# numpy / ml_dtypes dtype names (`arr.dtype.name`) -> canonical dtype. ml_dtypes' 4- and 6-bit types
# (int4, float4_e2m1fn...) take a whole byte per element in numpy: not in this table, refused.
NUMPY_NAMES = {
    "bool": "BOOL", "uint8": "U8", "int8": "I8", "uint16": "U16", "int16": "I16", "uint32": "U32", "int32": "I32",
    "uint64": "U64", "int64": "I64", "float16": "F16", "float32": "F32", "float64": "F64", "complex64": "C64",
    "complex128": "C128", "bfloat16": "BF16", "float8_e4m3fn": "F8_E4M3", "float8_e5m2": "F8_E5M2",
    "float8_e4m3fnuz": "F8_E4M3FNUZ", "float8_e5m2fnuz": "F8_E5M2FNUZ", "float8_e8m0fnu": "F8_E8M0",
}


# numpy dtype codes (kind + item size: `f4` of `<f4`, what `np.dtype(...).str` holds after its byte order, and what a
# pickle's `numpy.dtype('f4', ...)` call names) -> canonical dtype.
NUMPY_CODES = {
    "b1": "BOOL", "u1": "U8", "i1": "I8", "u2": "U16", "i2": "I16", "u4": "U32", "i4": "I32", "u8": "U64",
    "i8": "I64", "f2": "F16", "f4": "F32", "f8": "F64", "c8": "C64", "c16": "C128",
}


@dataclass(frozen=True)
class DType:
    name: str
    bits: int               # storage bits per element (0: variable-length, e.g. TF strings)
    kind: str               # "float", "int", "uint", "bool", "complex", "str"
    numpy: str | None       # numpy dtype the raw bytes can be viewed as, little-endian
    block: int = 1          # elements per quantisation block (1: not block-quantised)
    block_bytes: int = 0    # bytes per block, when block > 1
    lanes: int = 1          # values packed in one element (F4_X2: 2); decode() yields `lanes` values an element

    @property
    def is_float(self) -> bool:
        return self.kind in ("float", "complex")

    @property
    def is_blocked(self) -> bool:
        return self.block > 1

    @property
    def numbers(self) -> int:
        """Real numbers one element decodes to (what `stats` counts): its lanes, two each if complex."""
        return self.lanes * (2 if self.kind == "complex" else 1)

    def nbytes(self, numel: int) -> int:
        """Bytes for numel packed elements (sub-byte types round up to whole bytes, block types to
        whole blocks)."""
        if self.block > 1:
            return -(-numel // self.block) * self.block_bytes
        return (numel * self.bits + 7) // 8


_TABLE = [
    # name  bits  kind  raw view (BF16, F8, F6 and F4 decode to float32: see decode)
    DType("BOOL", 8, "bool", "|b1"),
    DType("U8", 8, "uint", "|u1"),
    DType("I8", 8, "int", "|i1"),
    DType("U16", 16, "uint", "<u2"),
    DType("I16", 16, "int", "<i2"),
    DType("U32", 32, "uint", "<u4"),
    DType("I32", 32, "int", "<i4"),
    DType("U64", 64, "uint", "<u8"),
    DType("I64", 64, "int", "<i8"),
    DType("F16", 16, "float", "<f2"),
    DType("F32", 32, "float", "<f4"),
    DType("F64", 64, "float", "<f8"),
    DType("C64", 64, "complex", "<c8"),
    DType("C128", 128, "complex", "<c16"),
    DType("C32", 32, "complex", None),   # torch complex32 (chalf): float16 real, float16 imaginary
    DType("BC32", 32, "complex", None),  # torch bcomplex32 (2.15): bfloat16 real, bfloat16 imaginary
    DType("BF16", 16, "float", "<u2"),
    DType("F8_E4M3", 8, "float", "|u1"),
    DType("F8_E5M2", 8, "float", "|u1"),
    DType("F8_E4M3FNUZ", 8, "float", "|u1"),
    DType("F8_E5M2FNUZ", 8, "float", "|u1"),
    DType("F8_E8M0", 8, "float", "|u1"),
    DType("F6_E2M3", 6, "float", None),
    DType("F6_E3M2", 6, "float", None),
    DType("F4", 4, "float", None),
    DType("F4_X2", 8, "float", None, lanes=2),   # torch float4_e2m1fn_x2: two F4 codes a byte, low nibble first
    DType("I4", 4, "int", None),     # ONNX INT4 / UINT4: two per byte, low nibble first (onnx.proto)
    DType("U4", 4, "uint", None),
    DType("I2", 2, "int", None),     # ONNX INT2 / UINT2 (onnx 1.20+): four per byte, lowest bits first
    DType("U2", 2, "uint", None),
    DType("STR", 0, "str", None),
]


def _quant(name: str, block: int, block_bytes: int) -> DType:
    return DType(name, max(1, block_bytes * 8 // block), "float", None, block, block_bytes)


# ggml block-quantised types (gguf-py constants.py GGML_QUANT_SIZES; ggml/src/ggml-common.h layouts).
_TABLE += [_quant(name, block, nbytes) for name, block, nbytes in [
    ("Q4_0", 32, 18), ("Q4_1", 32, 20), ("Q5_0", 32, 22), ("Q5_1", 32, 24), ("Q8_0", 32, 34), ("Q8_1", 32, 40),
    ("Q2_K", 256, 84), ("Q3_K", 256, 110), ("Q4_K", 256, 144), ("Q5_K", 256, 176), ("Q6_K", 256, 210),
    ("Q8_K", 256, 292), ("IQ2_XXS", 256, 66), ("IQ2_XS", 256, 74), ("IQ3_XXS", 256, 98), ("IQ1_S", 256, 50),
    ("IQ4_NL", 32, 18), ("IQ3_S", 256, 110), ("IQ2_S", 256, 82), ("IQ4_XS", 256, 136), ("IQ1_M", 256, 56),
    ("TQ1_0", 256, 54), ("TQ2_0", 256, 66), ("MXFP4", 32, 17), ("NVFP4", 64, 36), ("Q1_0", 128, 18),
]]
DTYPES: dict[str, DType] = {d.name: d for d in _TABLE}


def get(name: str) -> DType:
    return DTYPES[name]


def _minifloat_lut(ebits: int, mbits: int, bias: int, special: str) -> F32:
    """Value of every bit pattern of a 1-sign/ebits/mbits float (docs/formats.md section 1; OCP MX spec).

    special: "ieee" (max exponent is inf/nan), "fn" (only all-ones is nan), "fnuz" (0x80 is nan,
    no negative zero), "none" (every pattern finite), "e8m0" (exponent only, 0xff nan).
    """
    import numpy as np

    n = 1 << (ebits + mbits + (special != "e8m0"))  # E8M0 has no sign bit
    out = np.empty(n, dtype=np.float32)
    emax = (1 << ebits) - 1
    for code in range(n):
        if special == "e8m0":
            out[code] = np.nan if code == 0xFF else np.float32(2.0 ** (code - 127))
            continue
        sign = -1.0 if code >> (ebits + mbits) else 1.0
        e = (code >> mbits) & emax
        m = code & ((1 << mbits) - 1)
        if e == 0:
            value = sign * (m / (1 << mbits)) * 2.0 ** (1 - bias)
        else:
            value = sign * (1 + m / (1 << mbits)) * 2.0 ** (e - bias)
        if special == "ieee" and e == emax:
            value = sign * np.inf if m == 0 else np.nan
        elif special == "fn" and e == emax and m == (1 << mbits) - 1:
            value = np.nan
        elif special == "fnuz" and code == 1 << (ebits + mbits):
            value = np.nan
        out[code] = value
    return out


_LUT_SPECS = {
    "F8_E4M3": (4, 3, 7, "fn"),
    "F8_E5M2": (5, 2, 15, "ieee"),
    "F8_E4M3FNUZ": (4, 3, 8, "fnuz"),
    "F8_E5M2FNUZ": (5, 2, 16, "fnuz"),
    "F8_E8M0": (8, 0, 127, "e8m0"),
    "F6_E2M3": (2, 3, 1, "none"),
    "F6_E3M2": (3, 2, 3, "none"),
    "F4": (2, 1, 1, "none"),
    "F4_X2": (2, 1, 1, "none"),
}
# Complex dtypes numpy has no type for -> the dtype of each of an element's two parts (real, then imaginary).
_COMPLEX_PARTS = {"C32": "F16", "BC32": "BF16"}


@cache
def lut(name: str) -> F32:
    return _minifloat_lut(*_LUT_SPECS[name])


def unpack_bits(raw: U8, bits: int, count: int) -> U8:
    """Split a packed little-endian bit stream into `count` codes of `bits` bits (F4, F6; mlx's 2-8 bit codes).

    F4 packs two codes per byte, the first in the low nibble (as torch float4_e2m1fn_x2 and
    ml_dtypes do). F6 packs four codes into three bytes, least significant bits first (inferred).
    """
    import numpy as np

    if bits == 8:
        return raw[:count]
    if bits == 4:
        codes = np.empty(raw.size * 2, dtype=np.uint8)
        codes[0::2] = raw & 0x0F
        codes[1::2] = raw >> 4
        return codes[:count]
    stream = np.unpackbits(raw, bitorder="little").reshape(-1)[: count * bits].reshape(count, bits)
    weights = (1 << np.arange(bits, dtype=np.uint8)).astype(np.uint8)
    packed: U8 = (stream * weights).sum(axis=1, dtype=np.uint8)
    return packed


def can_decode(dtype: str) -> bool:
    """Whether decode() turns this dtype's bytes into numbers (false for strings and for block types
    ckptstat has no decoder for yet: Q8_1, Q8_K)."""
    d = DTYPES[dtype]
    if d.is_blocked:
        from .quants import CODEBOOKS, QUANTS

        return dtype in QUANTS or dtype in CODEBOOKS
    return d.kind != "str"


def decode(raw: NDArray[Any] | bytes | memoryview, dtype: str, count: int, byteorder: str = "little") -> NDArray[Any]:
    """Decode `count` packed elements of `dtype` from raw bytes into a flat numpy array (of count * lanes
    values: F4_X2's two a byte). Block types start at a block boundary; their last block is decoded whole
    and cut to `count`."""
    import numpy as np

    d = DTYPES[dtype]
    buf = np.frombuffer(raw, dtype=np.uint8) if not isinstance(raw, np.ndarray) else raw.view(np.uint8).reshape(-1)
    if d.is_blocked:
        from .quants import dequantize

        if not can_decode(dtype):
            raise ValueError(f"values of {dtype} tensors are not decoded yet")
        n = -(-count // d.block)
        if byteorder != "little" or buf.size < n * d.block_bytes:
            raise ValueError(f"{dtype}: need {n * d.block_bytes} little-endian bytes, got {buf.size}")
        return dequantize(buf[: n * d.block_bytes].reshape(n, d.block_bytes), dtype).reshape(-1)[:count]
    if d.numpy is None:
        if d.kind == "str":
            raise ValueError("string tensors have no numeric values")
        if dtype in _COMPLEX_PARTS:   # C32 / BC32: each part decoded (and byte-swapped) as its own dtype, widened
            parts = decode(buf, _COMPLEX_PARTS[dtype], 2 * count, byteorder)
            return parts.astype(np.float32).view(np.complex64)
        codes = unpack_bits(buf, d.bits // d.lanes, count * d.lanes)
        if d.kind in ("int", "uint"):   # I4 / U4, I2 / U2: sign-extended for I4 and I2
            half = 1 << (d.bits - 1)
            return (codes.astype(np.int8) ^ half) - half if d.kind == "int" else codes
        return lut(dtype)[codes]
    view_dtype = np.dtype(d.numpy)
    if byteorder == "big" and view_dtype.itemsize > 1:
        view_dtype = view_dtype.newbyteorder(">")
    values = buf[: count * view_dtype.itemsize].view(view_dtype)
    if dtype == "BF16":
        return (values.astype(np.uint32) << 16).view(np.float32)
    if dtype in _LUT_SPECS:
        return np.take(lut(dtype), values)
    if view_dtype.byteorder == ">":
        return values.astype(view_dtype.newbyteorder("<"))
    return values


def bits16(x: NDArray[Any], dtype: str) -> NDArray[Any]:
    """float64 values rounded to F16 or BF16 (to nearest, ties to even, once: from the float64, not through a float32
    rounding first), as their 16-bit patterns (uint16). Past the dtype's range: +-Inf; NaN: the quiet NaN."""
    import numpy as np

    if dtype == "F16":   # (numpy rounds a double to half from its own bits)
        with np.errstate(over="ignore"):
            return np.asarray(x, dtype=np.float64).astype(np.float16).view(np.uint16)
    if dtype != "BF16":
        raise ValueError(f"no 16-bit patterns for {dtype}")
    shape = np.shape(x)
    x = np.asarray(x, dtype=np.float64).reshape(-1)   # (flat: the ties and NaNs below are found by flat index)
    with np.errstate(over="ignore", invalid="ignore"):
        f = x.astype(np.float32)   # nearest float32: the same side of every bfloat16 tie, unless on one
    u = f.view(np.uint32)
    out = ((u + ((u >> 16) & 1) + 0x7FFF) >> 16).astype(np.uint16)   # ties to even
    tie = np.flatnonzero((u & 0xFFFF) == 0x8000)
    if tie.size:   # a float32 exactly on a bfloat16 tie that x was not: x's own side decides
        off = tie[x[tie] != f[tie]]
        out[off] = (u[off] >> 16) + (np.abs(x[off]) > np.abs(f[off])).astype(np.uint32)
    nan = np.flatnonzero(f != f)
    if nan.size:   # (a NaN's payload would carry into the exponent)
        out[nan] = 0x7FC0
    return out.reshape(shape)
