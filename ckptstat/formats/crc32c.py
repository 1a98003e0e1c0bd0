"""CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), table-driven, in numpy, for TF bundle checks.

Used by LevelDB block trailers and BundleEntryProto.crc32c, both stored *masked*
(`((crc >> 15) | (crc << 17)) + 0xa282ead8`, tensorflow/core/lib/hash/crc32c.h `Mask`).

Speed without a C extension: a buffer is cut into K lanes that are stepped one byte at a time in
parallel (one numpy table lookup per byte position for all lanes), then the lane CRCs are folded
together with the "shift by n zero bytes" operator, which is linear over GF(2) (zlib's crc32_combine
idea). The shift operator is applied through four 256-entry tables, so folding is vectorised too.
Big tensors are fed in chunks: crc(A || B) = shift_len(B)(crc(A)) ^ crc0(B).
"""
from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np
from numpy.typing import NDArray

POLY = 0x82F63B78
MASK_DELTA = 0xA282EAD8
_M32 = 0xFFFFFFFF


def _make_table() -> NDArray[np.uint32]:
    table = np.zeros(256, dtype=np.uint32)
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ POLY if c & 1 else c >> 1
        table[i] = c
    return table


TABLE = _make_table()
_TABLE_LIST = [int(x) for x in TABLE]


def _raw_py(crc: int, data: bytes | memoryview) -> int:
    """The raw register update (no pre/post inversion), one byte at a time."""
    t = _TABLE_LIST
    for b in bytes(data):
        crc = t[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc


# ---- the linear "append n zero bytes" operator, as a 32x32 GF(2) matrix (list of 32 column ints)
def _mat_vec(mat: list[int], vec: int) -> int:
    out, i = 0, 0
    while vec:
        if vec & 1:
            out ^= mat[i]
        vec >>= 1
        i += 1
    return out


def _mat_mul(a: list[int], b: list[int]) -> list[int]:
    return [_mat_vec(a, col) for col in b]


@lru_cache(maxsize=64)
def _zeros_matrix(n: int) -> tuple[int, ...]:
    one = [_raw_py(1 << i, b"\x00") for i in range(32)]   # one zero byte
    result = [1 << i for i in range(32)]                 # identity
    power = one
    while n:
        if n & 1:
            result = _mat_mul(power, result)
        n >>= 1
        if n:
            power = _mat_mul(power, power)
    return tuple(result)


_Tables = tuple[NDArray[np.uint32], NDArray[np.uint32], NDArray[np.uint32], NDArray[np.uint32]]


@lru_cache(maxsize=64)
def _zeros_tables(n: int) -> _Tables:
    """shift_n as four byte tables: shift(c) = T[0][c & 255] ^ T[1][c >> 8 & 255] ^ ..."""
    mat = list(_zeros_matrix(n))
    t0, t1, t2, t3 = (np.array([_mat_vec(mat, v << (8 * k)) for v in range(256)], dtype=np.uint32) for k in range(4))
    return t0, t1, t2, t3


def _shift(tables: _Tables, c: NDArray[np.uint32]) -> NDArray[np.uint32]:
    t0, t1, t2, t3 = tables
    return np.take(t0, c & 0xFF) ^ np.take(t1, (c >> 8) & 0xFF) ^ np.take(t2, (c >> 16) & 0xFF) ^ np.take(t3, (c >> 24) & 0xFF)


def shift(crc: int, n: int) -> int:
    return _mat_vec(list(_zeros_matrix(n)), crc) if n else crc


def _raw0_lanes(buf: NDArray[np.uint8], lanes: int) -> int:
    """Raw CRC (register starting at 0) of buf, whose size is a multiple of `lanes`."""
    length = buf.size // lanes
    cols = np.ascontiguousarray(buf.reshape(lanes, length).T)   # row j = byte j of every lane
    crc = np.zeros(lanes, dtype=np.uint32)
    for row in cols:
        crc = TABLE[(crc ^ row) & 0xFF] ^ (crc >> 8)
    # Fold pairs: crc(A || B) = shift_len(B)(crc(A)) ^ crc(B), halving the lane count each round.
    while crc.size > 1:
        if crc.size & 1:
            crc = np.concatenate([np.zeros(1, dtype=np.uint32), crc])  # a leading empty lane is a no-op
        crc = _shift(_zeros_tables(length), crc[0::2]) ^ crc[1::2]
        length *= 2
    return int(crc[0])


def raw_update(crc: int, data: bytes | memoryview | NDArray[Any], lanes: int = 4096) -> int:
    """Feed data into a raw CRC register (no inversions)."""
    buf = np.frombuffer(data, dtype=np.uint8) if not isinstance(data, np.ndarray) else data.view(np.uint8).reshape(-1)
    n = buf.size
    if n < 4 * lanes:
        return _raw_py(crc, buf.tobytes())
    main = n - n % lanes
    crc = shift(crc, main) ^ _raw0_lanes(buf[:main], lanes)
    return _raw_py(crc, buf[main:].tobytes())


def crc32c(data: bytes | memoryview | NDArray[Any], crc: int = 0) -> int:
    """Standard CRC-32C of data; pass a previous result as `crc` to extend it."""
    return raw_update(crc ^ _M32, data) ^ _M32


def mask(crc: int) -> int:
    return (((crc >> 15) | (crc << 17)) + MASK_DELTA) & _M32
