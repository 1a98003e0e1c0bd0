"""ggml's block-quantised types, decoded with numpy (ggml/src/ggml-common.h block_q*; gguf-py quants.py
`dequantize_blocks`).

Every type decoded here stores each element as an integer code q times a scale, plus an offset, the
scale and offset shared by a sub-block: value = scale * q + add. `parts` returns the three arrays of whole
blocks ((n, sub-blocks) scales and adds, (n, sub-blocks, elements) codes), from which `dequantize` computes
the values in float32 in gguf-py's order, bit for bit its `dequantize`, and `analysis/conversion.py` the
grid of values a block can hold (its rounding bound). Inputs are (n_blocks, block_bytes) uint8 arrays:
callers pass the blocks a range touches, so memory is a few times that range.

    type  block  layout (bytes)                                            value
    Q8_0     32  d f16, qs[32] int8                                        d * q,            q in [-128, 127]
    Q4_0     32  d f16, qs[16] nibbles                                     d * (q - 8),      q - 8 in [-8, 7]
    Q4_1     32  d f16, m f16, qs[16]                                      d * q + m,        q in [0, 15]
    Q5_0     32  d f16, qh u32 (5th bits), qs[16]                          d * (q - 16)
    Q5_1     32  d f16, m f16, qh u32, qs[16]                              d * q + m,        q in [0, 31]
    Q2_K    256  scales[16] (4-bit scale | 4-bit min << 4), qs[64], d, dmin     16 x 16: d*sc * q - dmin*m, q in [0, 3]
    Q3_K    256  hmask[32], qs[64], scales[12] (16 x 6 bits), d           16 x 16: d*(sc - 32) * q, q in [-4, 3]
    Q4_K    256  d, dmin, scales[12] (8 x 6-bit sc, 8 x 6-bit m), qs[128] 8 x 32: d*sc * q - dmin*m, q in [0, 15]
    Q5_K    256  d, dmin, scales[12], qh[32], qs[128]                     8 x 32: d*sc * q - dmin*m, q in [0, 31]
    Q6_K    256  ql[128], qh[64], scales[16] int8, d                      16 x 16: d*sc * q, q in [-32, 31]
    TQ1_0   256  qs[48] (5 trits a byte), qh[4] (4 trits a byte), d       d * (q - 1),      q - 1 in [-1, 1]
    TQ2_0   256  qs[64] (4 two-bit codes a byte), d                       d * (q - 1),      q - 1 in [-1, 1]

(TQ1_0 and TQ2_0 are llama.cpp's ternary types, BitNet b1.58's and TriLM's weights; a TQ1_0 byte holds 5 trits as
a fixed-point fraction of 243: trit k is the top of (byte * 3^k mod 256) * 3, i.e. >> 8.)

(Q8_K, llama.cpp's intermediate type for dot products, is never a tensor's type in a file, and gguf-py has no
dequantize for it to test against: not decoded.)

The 4-bit float types store each element as an E2M1 code (its value doubled, ggml's kvalues_mxfp4) times a
power-of-two or FP8 scale; their grid is not evenly spaced, so they are decoded (CODEBOOKS) but have no
rounding bound in analysis/conversion.py:

    MXFP4    32  e (E8M0), qs[16] nibbles                              2^(e-128) * kv[q]  (gpt-oss's experts)
    NVFP4    64  d[4] (UE4M3, 16 elements each), qs[32] nibbles        d/2 * kv[q]

and the two non-linear 4-bit i-quants store a code into a fixed table of 16 integers (ggml's kvalues_iq4nl):

    IQ4_NL   32  d f16, qs[16] nibbles                                 d * nl[q]
    IQ4_XS  256  d f16, scales_h u16, scales_l[4], qs[128]             8 x 32: d * (sc - 32) * nl[q], sc 6 bits
                 (sub-block i: low 4 bits of sc from scales_l[i / 2] >> 4 * (i % 2), high 2 from scales_h >> 2 * i)

The grid i-quants code 8 (IQ3: 4) elements at once as an index into a fixed grid of points (ggml-common.h's
iq*_grid; iq_grids.json, written from gguf-py by fixtures/make_iq_grids.py and read on their first decode), each
element's sign from a 7-bit index into ksigns (its 8th sign the parity) or from one bit of its own; 4-bit scales
s, 3-bit ones for IQ1 (decoded in CODEBOOKS, no rounding bound):

    IQ2_XXS 256  d, 8 x (grid[4] bytes, u32: 4 x 7-bit signs, s << 28)  8 x 32: d * (0.5 + s) / 4 * grid * sign
    IQ2_XS  256  d, qs[32] u16 (9-bit grid, 7-bit signs), scales[8]     16 x 16: d * (0.5 + s) / 4 * grid * sign
    IQ2_S   256  d, qs[32], signs[32], qh[8] (2 grid bits each), sc[8]   16 x 16: as IQ2_XS, 10-bit grid, sign bits
    IQ3_XXS 256  d, qs[64] (grid of 4), 8 x u32 (4 x 7-bit signs, s)    8 x 32: d * (0.5 + s) / 2 * grid * sign
    IQ3_S   256  d, qs[64], qh[8] (9th grid bit), signs[32], sc[4]      8 x 32: d * (1 + 2s) * grid * sign
    IQ1_S   256  d, qs[32], qh[8] u16 (3 x 3 grid bits, s, delta sign)  8 x 32: d * (2s + 1) * (grid +- 1/8)
    IQ1_M   256  qs[32], qh[16] (3 grid bits, delta sign a nibble), scales[4] u16 (12 bits of 3-bit s, d's 4 bits
                 in the top nibbles)                                     16 x 16: d * (2s + 1) * (grid +- 1/8)

Q1_0, llama.cpp's 1-bit type, stores each element's sign and one scale: value = d where the bit is set, else -d
(decoded in CODEBOOKS: its codes are never 0, so no rounding bound; gguf-py has no dequantize for it, and its test
compares with llama.cpp's own C decoder, fixtures/make_q1_0.py):

    Q1_0    128  d f16, qs[16] (element j: bit j % 8 of byte j / 8)   d * (2 * bit - 1)

(Q8_1, a dot-product intermediate too, is not decoded.)
"""
from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

F32 = NDArray[np.float32]
U8 = NDArray[np.uint8]
Parts = tuple[F32, F32, "F32 | None"]   # scale (n, S), code (n, S, E), add (n, S) or None


def _f16(col: U8) -> F32:
    return np.ascontiguousarray(col).view("<f2").astype(np.float32)


def _nibbles(qs: U8) -> U8:
    """16 bytes -> 32 codes: element j is the low nibble of byte j, element j + 16 its high nibble."""
    return np.concatenate([qs & 0x0F, qs >> 4], axis=1)


def _fifth_bits(qh: U8) -> U8:
    """4 bytes (u32 LE) -> bit j of the u32 for element j (Q5_0, Q5_1)."""
    return np.unpackbits(np.ascontiguousarray(qh), axis=1, bitorder="little")


def _fields(packed: U8, run: int, shifts: tuple[int, ...], mask: int) -> U8:
    """(n, k * run) bytes -> (n, k * len(shifts) * run) codes: each run of `run` bytes read once per shift,
    element order (run index, shift, byte) as ggml-common.h lays the k-quants out."""
    n = packed.shape[0]
    sh = np.array(shifts, dtype=np.uint8).reshape(1, 1, -1, 1)
    codes: U8 = ((packed.reshape(n, -1, 1, run) >> sh) & np.uint8(mask)).reshape(n, -1)
    return codes


def _nibble_pairs(packed: U8) -> U8:
    """(n, k) bytes -> (n, 2k) codes, each byte's low nibble then its high one (the i-quants' scales, IQ1_M's qh)."""
    pairs: U8 = np.stack([packed & 0x0F, packed >> 4], axis=-1).reshape(len(packed), -1)
    return pairs


def _k_scales_mins(scales: U8) -> tuple[U8, U8]:
    """Q4_K/Q5_K: 12 bytes -> 8 six-bit scales and 8 six-bit mins (ggml-quants.c get_scale_min_k4)."""
    n = scales.shape[0]
    d, m, m_d = np.split(scales.reshape(n, 3, 4), 3, axis=1)
    sc = np.concatenate([d & 0x3F, (m_d & 0x0F) | ((d >> 2) & 0x30)], axis=-1)
    mn = np.concatenate([m & 0x3F, (m_d >> 4) | ((m >> 2) & 0x30)], axis=-1)
    return sc.reshape(n, 8), mn.reshape(n, 8)


def _one(scale: F32, code: NDArray[np.generic], add: F32 | None = None) -> Parts:
    """A whole block as one sub-block."""
    return scale.reshape(-1, 1), code.astype(np.float32).reshape(len(code), 1, -1), \
        None if add is None else add.reshape(-1, 1)


def _q8_0(b: U8) -> Parts:
    return _one(_f16(b[:, :2]), b[:, 2:].view(np.int8))


def _q4_0(b: U8) -> Parts:
    return _one(_f16(b[:, :2]), _nibbles(b[:, 2:]).astype(np.int8) - 8)


def _q4_1(b: U8) -> Parts:
    return _one(_f16(b[:, :2]), _nibbles(b[:, 4:]), _f16(b[:, 2:4]))


def _q5_0(b: U8) -> Parts:
    return _one(_f16(b[:, :2]), (_nibbles(b[:, 6:]) | (_fifth_bits(b[:, 2:6]) << 4)).astype(np.int8) - 16)


def _q5_1(b: U8) -> Parts:
    return _one(_f16(b[:, :2]), _nibbles(b[:, 8:]) | (_fifth_bits(b[:, 4:8]) << 4), _f16(b[:, 2:4]))


def _q2_k(b: U8) -> Parts:   # scales[16], qs[64], d, dmin
    n = len(b)
    scales, qs = b[:, :16], b[:, 16:80]
    d, dmin = _f16(b[:, 80:82]), _f16(b[:, 82:84])
    q = _fields(qs, 32, (0, 2, 4, 6), 3).reshape(n, 16, 16)
    return d * (scales & 0xF).astype(np.float32), q.astype(np.float32), -(dmin * (scales >> 4).astype(np.float32))


def _q3_k(b: U8) -> Parts:   # hmask[32], qs[64], scales[12], d
    n = len(b)
    hmask, qs, scales, d = b[:, :32], b[:, 32:96], b[:, 96:108], _f16(b[:, 108:110])
    low = _fields(scales[:, :8], 8, (0, 4), 0x0F)
    high = _fields(scales[:, 8:], 4, (0, 2, 4, 6), 0x03)
    sc = ((low | (high << 4)).astype(np.int8) - np.int8(32)).astype(np.float32)
    ql = _fields(qs, 32, (0, 2, 4, 6), 3).reshape(n, 16, 16)
    qh = _fields(hmask, 32, tuple(range(8)), 1).reshape(n, 16, 16) ^ np.uint8(1)   # bit set: no -4
    return d * sc, (ql.astype(np.int8) - (qh << 2).astype(np.int8)).astype(np.float32), None


def _q4_k(b: U8) -> Parts:   # d, dmin, scales[12], qs[128]
    n = len(b)
    d, dmin = _f16(b[:, :2]), _f16(b[:, 2:4])
    sc, m = _k_scales_mins(b[:, 4:16])
    q = _fields(b[:, 16:], 32, (0, 4), 0x0F).reshape(n, 8, 32)
    return d * sc.astype(np.float32), q.astype(np.float32), -(dmin * m.astype(np.float32))


def _q5_k(b: U8) -> Parts:   # d, dmin, scales[12], qh[32], qs[128]
    n = len(b)
    d, dmin = _f16(b[:, :2]), _f16(b[:, 2:4])
    sc, m = _k_scales_mins(b[:, 4:16])
    ql = _fields(b[:, 48:], 32, (0, 4), 0x0F)
    qh = _fields(b[:, 16:48], 32, tuple(range(8)), 1)
    q = (ql | (qh << 4)).reshape(n, 8, 32)
    return d * sc.astype(np.float32), q.astype(np.float32), -(dmin * m.astype(np.float32))


def _q6_k(b: U8) -> Parts:   # ql[128], qh[64], scales[16] int8, d
    n = len(b)
    ql = _fields(b[:, :128], 64, (0, 4), 0x0F)
    qh = _fields(b[:, 128:192], 32, (0, 2, 4, 6), 0x03)
    q = ((ql | (qh << 4)).astype(np.int8) - np.int8(32)).reshape(n, 16, 16)
    return _f16(b[:, 208:210]) * b[:, 192:208].view(np.int8).astype(np.float32), q.astype(np.float32), None


def _trits(packed: U8, powers: tuple[int, ...]) -> U8:
    """TQ1_0's base-3 bytes -> codes 0..2: each byte read once per power of 3 (the product wrapping at 256), element
    order (power, byte) as gguf-py's dequantize_blocks reads them."""
    n, k = packed.shape
    p = np.array(powers, dtype=np.uint8).reshape(1, -1, 1)
    shifted = (packed.reshape(n, 1, k) * p).reshape(n, -1)
    codes: U8 = ((shifted.astype(np.uint16) * 3) >> 8).astype(np.uint8)
    return codes


def _tq1_0(b: U8) -> Parts:   # qs[48]: 32 bytes then 16, 5 trits each; qh[4], 4 trits each; d
    five, four = (1, 3, 9, 27, 81), (1, 3, 9, 27)
    q = np.concatenate([_trits(b[:, :32], five), _trits(b[:, 32:48], five), _trits(b[:, 48:52], four)], axis=1)
    return _one(_f16(b[:, 52:54]), q.astype(np.int8) - np.int8(1))


def _tq2_0(b: U8) -> Parts:   # qs[64]: 2 runs of 32 bytes, 4 two-bit codes each; d
    return _one(_f16(b[:, 64:66]), _fields(b[:, :64], 32, (0, 2, 4, 6), 3).astype(np.int8) - np.int8(1))


@dataclass(frozen=True)
class Quant:
    """One block type: its parts, the range of its codes, and whether llama.cpp's quantizer picks the codes
    with the scale (and offset) before their f16 rounding (the 32-element types) or with the stored ones
    (the k-quants re-quantise every element with the block's stored d, dmin and sub-block scales)."""
    parts: Callable[[U8], Parts]
    qmin: int
    qmax: int
    coded_before_rounding: bool


QUANTS: dict[str, Quant] = {
    "Q8_0": Quant(_q8_0, -128, 127, True),
    "Q4_0": Quant(_q4_0, -8, 7, True),
    "Q4_1": Quant(_q4_1, 0, 15, True),
    "Q5_0": Quant(_q5_0, -16, 15, True),
    "Q5_1": Quant(_q5_1, 0, 31, True),
    "Q2_K": Quant(_q2_k, 0, 3, False),
    "Q3_K": Quant(_q3_k, -4, 3, False),
    "Q4_K": Quant(_q4_k, 0, 15, False),
    "Q5_K": Quant(_q5_k, 0, 31, False),
    "Q6_K": Quant(_q6_k, -32, 31, False),
    "TQ1_0": Quant(_tq1_0, -1, 1, True),   # (d = max |x| of the block, its codes picked before d's f16 rounding)
    "TQ2_0": Quant(_tq2_0, -1, 1, True),
}


_FP4 = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], dtype=np.float32)   # E2M1 x 2


def _e8m0_halves() -> F32:
    """ggml_e8m0_to_fp32_half of each byte: 2^(e - 128), as float32 bits (e 0 and 1: subnormal)."""
    e = np.arange(256, dtype=np.uint32)
    bits = np.where(e < 2, np.uint32(0x00200000) << np.minimum(e, np.uint32(1)), (np.maximum(e, np.uint32(1)) - 1) << 23)
    halves: F32 = bits.astype(np.uint32).view(np.float32)
    return halves


def _ue4m3_halves() -> F32:
    """Half of each byte read as an unsigned E4M3 (bias 7, 0x7F none), as gguf-py's NVFP4 reads its scales."""
    x = np.arange(256, dtype=np.uint8)
    exp, man = (x >> 3).astype(np.int32) & 0xF, (x & 7).astype(np.float32)
    raw = np.where(exp == 0, man * np.float32(2.0 ** -9), (1 + man / 8) * np.exp2(exp.astype(np.float32) - 7))
    halves: F32 = np.where((x == 0) | (x == 0x7F), np.float32(0), raw * np.float32(0.5)).astype(np.float32)
    return halves


_E8M0, _UE4M3 = _e8m0_halves(), _ue4m3_halves()


def _q1_0(b: U8) -> Parts:   # d, qs[16]: element j the bit j % 8 of byte j / 8; set: d, clear: -d
    return _one(_f16(b[:, :2]), np.unpackbits(b[:, 2:18], axis=1, bitorder="little").astype(np.int8) * 2 - 1)


def _mxfp4(b: U8) -> Parts:   # e, qs[16]
    return _one(_E8M0[b[:, 0]], _FP4[_nibbles(b[:, 1:17])])


def _nvfp4(b: U8) -> Parts:   # d[4], qs[32]: four sub-blocks of 16, each its 8 bytes' low nibbles then high ones
    qs = b[:, 4:36].reshape(len(b), 4, 8)
    return _UE4M3[b[:, :4]], _FP4[np.concatenate([qs & 0x0F, qs >> 4], axis=2)], None


_IQ4_NL = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], dtype=np.float32)


def _iq4_nl(b: U8) -> Parts:   # d, qs[16]
    return _one(_f16(b[:, :2]), _IQ4_NL[_nibbles(b[:, 2:])])


def _iq4_xs(b: U8) -> Parts:   # d, scales_h u16, scales_l[4], qs[128]: 8 sub-blocks of 32, each 16 bytes of nibbles
    n = len(b)
    low = _fields(b[:, 4:8], 4, (0, 4), 0x0F).reshape(n, 2, 4).transpose(0, 2, 1).reshape(n, 8)
    high = (np.ascontiguousarray(b[:, 2:4]).view("<u2") >> (2 * np.arange(8, dtype=np.uint16))) & 3
    sc = ((low | (high.astype(np.uint8) << 4)).astype(np.int8) - np.int8(32)).astype(np.float32)
    qs = b[:, 8:].reshape(n * 8, 16)
    return _f16(b[:, :2]) * sc, _IQ4_NL[_nibbles(qs)].reshape(n, 8, 32), None


_GRIDS = os.path.join(os.path.dirname(__file__), "iq_grids.json")   # fixtures/make_iq_grids.py, from gguf-py


@functools.cache
def _grid(name: str) -> F32:
    """The grid of an i-quant (IQ1_M reads IQ1_S's) as (entries, 8 or 4) float32, or "ksigns" as (128, 8) signs +-1."""
    with open(_GRIDS, encoding="utf-8") as f:
        table = json.load(f)
    if name == "ksigns":
        bits = np.unpackbits(np.frombuffer(bytes.fromhex(table["ksigns"]), np.uint8).reshape(128, 1), axis=1,
                             bitorder="little")
        signs: F32 = np.where(bits == 0, np.float32(1), np.float32(-1))
        return signs
    g = table["IQ1_S" if name == "IQ1_M" else name]
    grid: F32 = np.frombuffer(bytes.fromhex(g["values"]), np.int8).reshape(g["shape"]).astype(np.float32)
    return grid


def _sign_bits(signs: U8) -> F32:
    """Bytes -> +-1 a bit, bit j of byte i for element 8i + j (IQ2_S, IQ3_S)."""
    bits = np.unpackbits(np.ascontiguousarray(signs), axis=1, bitorder="little")
    out: F32 = np.where(bits == 0, np.float32(1), np.float32(-1))
    return out


def _ksigns(words: NDArray[np.uint32]) -> F32:
    """(n, k) u32 -> (n, k, 4, 8) signs: four 7-bit ksigns indices a word, at bits 0, 7, 14, 21."""
    idx = (words[..., None] >> np.array([0, 7, 14, 21], dtype=np.uint32)) & np.uint32(0x7F)
    signs: F32 = _grid("ksigns")[idx]
    return signs


def _iq2_xxs(b: U8) -> Parts:   # d, 8 x (4 grid bytes, u32 signs and scale)
    n = len(b)
    words = np.ascontiguousarray(b[:, 2:]).view("<u4").reshape(n, 8, 2)
    db = _f16(b[:, :2]) * (np.float32(0.5) + (words[..., 1] >> 28).astype(np.float32)) * np.float32(0.25)
    grid = _grid("IQ2_XXS")[b[:, 2:].reshape(n, 8, 8)[:, :, :4]]
    return db, (grid * _ksigns(words[..., 1])).reshape(n, 8, 32), None


def _iq2_scales(d: F32, scales: U8) -> F32:
    """IQ2_XS / IQ2_S: 8 bytes -> 16 sub-block scales d * (0.5 + s) / 4, low nibble first."""
    s = _nibble_pairs(scales)
    db: F32 = d * (np.float32(0.5) + s.astype(np.float32)) * np.float32(0.25)
    return db


def _iq2_xs(b: U8) -> Parts:   # d, qs[32] u16 (grid index | ksigns index << 9), scales[8]
    n = len(b)
    qs = np.ascontiguousarray(b[:, 2:66]).view("<u2")
    grid = _grid("IQ2_XS")[qs & np.uint16(511)]
    return _iq2_scales(_f16(b[:, :2]), b[:, 66:74]), (grid * _grid("ksigns")[qs >> 9]).reshape(n, 16, 16), None


def _iq2_s(b: U8) -> Parts:   # d, qs[32], signs[32], qh[8], scales[8]
    n = len(b)
    high = (b[:, 66:74, None] >> np.array([0, 2, 4, 6], dtype=np.uint8)) & 3
    grid = _grid("IQ2_S")[b[:, 2:34].astype(np.uint16) | (high.reshape(n, 32).astype(np.uint16) << 8)]
    code = grid.reshape(n, 256) * _sign_bits(b[:, 34:66])
    return _iq2_scales(_f16(b[:, :2]), b[:, 74:82]), code.reshape(n, 16, 16), None


def _iq3_xxs(b: U8) -> Parts:   # d, qs[64] (a grid index a byte), 8 x u32 (signs, scale << 28)
    n = len(b)
    words = np.ascontiguousarray(b[:, 66:98]).view("<u4")
    db = _f16(b[:, :2]) * (np.float32(0.5) + (words >> 28).astype(np.float32)) * np.float32(0.5)
    grid = _grid("IQ3_XXS")[b[:, 2:66]].reshape(n, 8, 32)
    return db, grid * _ksigns(words).reshape(n, 8, 32), None


def _iq3_s(b: U8) -> Parts:   # d, qs[64], qh[8], signs[32], scales[4]
    n = len(b)
    high = (b[:, 66:74, None] >> np.arange(8, dtype=np.uint8)) & 1
    grid = _grid("IQ3_S")[b[:, 2:66].astype(np.uint16) | (high.reshape(n, 64).astype(np.uint16) << 8)]
    code = grid.reshape(n, 256) * _sign_bits(b[:, 74:106])
    s = _nibble_pairs(b[:, 106:110])
    return _f16(b[:, :2]) * (1 + 2 * s).astype(np.float32), code.reshape(n, 8, 32), None


_IQ1_DELTA = np.float32(0.125)


def _iq1_s(b: U8) -> Parts:   # d, qs[32], qh[8] u16: 3 x 3 high grid bits, 3-bit scale << 12, delta's sign << 15
    n = len(b)
    qh = np.ascontiguousarray(b[:, 34:50]).view("<u2")
    high = (qh[..., None] >> np.array([0, 3, 6, 9], dtype=np.uint16)) & 7
    grid = _grid("IQ1_S")[b[:, 2:34].astype(np.uint16) | (high.reshape(n, 32) << 8)].reshape(n, 8, 32)
    delta = np.where((qh & np.uint16(0x8000)) == 0, _IQ1_DELTA, -_IQ1_DELTA)
    dl = _f16(b[:, :2]) * (2 * ((qh >> 12) & 7) + 1).astype(np.float32)
    return dl, grid + delta[..., None], None


def _iq1_m(b: U8) -> Parts:   # qs[32], qh[16] (a nibble a group of 8: 3 grid bits, delta's sign), scales[4] u16
    n = len(b)
    sc = np.ascontiguousarray(b[:, 48:56]).view("<u2")
    d16 = (sc & np.uint16(0xF000)) >> np.array([12, 8, 4, 0], dtype=np.uint16)   # d's nibbles, low first
    d = np.ascontiguousarray(d16[:, 0] | d16[:, 1] | d16[:, 2] | d16[:, 3]).view("<f2").astype(np.float32)
    s = ((sc[..., None] >> np.array([0, 3, 6, 9], dtype=np.uint16)) & 7).reshape(n, 16)
    nib = _nibble_pairs(b[:, 32:48])
    grid = _grid("IQ1_M")[b[:, :32].astype(np.uint16) | ((nib & 7).astype(np.uint16) << 8)]
    delta = np.where((nib & 8) == 0, _IQ1_DELTA, -_IQ1_DELTA)
    code = (grid + delta[..., None]).reshape(n, 16, 16)
    return d[:, None] * (2 * s + 1).astype(np.float32), code, None


CODEBOOKS: dict[str, Callable[[U8], Parts]] = {
    "Q1_0": _q1_0, "MXFP4": _mxfp4, "NVFP4": _nvfp4, "IQ4_NL": _iq4_nl, "IQ4_XS": _iq4_xs, "IQ2_XXS": _iq2_xxs, "IQ2_XS": _iq2_xs,
    "IQ2_S": _iq2_s, "IQ3_XXS": _iq3_xxs, "IQ3_S": _iq3_s, "IQ1_S": _iq1_s, "IQ1_M": _iq1_m,
}


def dequantize(blocks: U8, dtype: str) -> F32:
    """(n, block_bytes) -> (n, block) float32, bit-identical to gguf-py's `dequantize`."""
    # an E8M0 scale of 2^127 times 6: inf, as in gguf-py (stats count it); an f16 signalling-NaN scale: NaN, silently;
    # so is an f16 d of inf times a sub-block scale of 0 (Q2_K..Q5_K, IQ*: NaN in gguf-py too), within the parts
    with np.errstate(over="ignore", invalid="ignore"):
        scale, code, add = (QUANTS[dtype].parts if dtype in QUANTS else CODEBOOKS[dtype])(blocks)
        values = scale[..., None] * code
        if add is not None:
            values = values + add[..., None]
    return values.reshape(len(blocks), -1)
