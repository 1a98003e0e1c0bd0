"""Runs of tiny tensors read and reduced together (issue 35: a frontier MoE holds 45k-140k tensors, most of
them a few bytes to a few KiB: per tensor, Python's work, not the bytes, was the cost).

A run is consecutive selected tensors of one file (file order), each a plain contiguous F16, BF16 or F32
tensor of at most TINY_BYTES, the run spanning at most the chunk size. Its bytes are read in one request,
decoded once, and every statistic of every tensor comes from a few numpy reductions over the whole run,
keyed by tensor (bincount / reduceat); the run's contribution to each group (total, bucket, plot, layer) is
one accumulator, merged once, not once per tensor. The statistics follow the rules of analysis/stats/
(QUANTILE_RULE: the same histogram keys and representatives, so quantiles are the per-tensor path's; the
moments are float64 sums over elements, equal to the per-tensor path's to float64 rounding; F16, BF16 and
F32 values lie in [2^-400, 2^400), where Acc keeps its moments unscaled, so the run's columns and group
accumulators are plain sums too: accumulate.py scale_exp).

Runs are formed from the selected tensors by one left-to-right rule (`units`), so a task that starts at a
unit boundary forms the same runs: `split` cuts tasks only there, and the report is the same bits whatever
the number of workers or the cluster."""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from itertools import repeat
from operator import attrgetter, itemgetter

import numpy as np

from ...core import Checkpoint, TensorInfo
from ...core.io import read_bytes
from ...core.table import Table
from ...errors import reading
from .accumulate import QUANTILE_KEYS, QUANTILES, Acc, _f16_to_bf16, _ranks, rows_table, tables
from .kernel16 import plain

TINY_BYTES = 16 << 10
RUN_BYTES = 1 << 20     # a run's span at most (and at most the chunk size): ~40 bytes of arrays an element
SLICE = 8192            # tensors whose quantiles are read at once (_quantiles)
_WIDTH = {"F16": 2, "BF16": 2, "F32": 4}
_CODE = {"F16": 0, "BF16": 1, "F32": 2}


def tiny(ckpt: Checkpoint, info: TensorInfo) -> bool:
    """Whether a tensor is read as part of a run."""
    width = _WIDTH.get(info.dtype)
    return (width is not None and 0 < info.nbytes <= TINY_BYTES and info.byteorder == "little"
            and info.nbytes == math.prod(info.shape) * width and plain(ckpt, info))


def units(ckpt: Checkpoint, names: list[str], chunk_bytes: int) -> list[tuple[int, int]]:
    """[start, end) index ranges over `names` (file order): a run of at least two tiny tensors, or one tensor."""
    out: list[tuple[int, int]] = []
    infos = list(map(ckpt.tensors.__getitem__, names))
    small = list(map(tiny, repeat(ckpt), infos))
    limit = max(min(chunk_bytes, RUN_BYTES), TINY_BYTES)
    i, n = 0, len(names)
    while i < n:
        info = infos[i]
        j = i + 1
        if small[i]:
            assert info.offset is not None
            start, file = info.offset, info.file
            prev_end = start + info.nbytes
            while j < n:
                nxt = infos[j]
                if not (small[j] and nxt.file == file and (nxt.offset or 0) >= prev_end
                        and (nxt.offset or 0) + nxt.nbytes - start <= limit):
                    break
                prev_end = (nxt.offset or 0) + nxt.nbytes
                j += 1
        out.append((i, j))
        i = j
    return out


def _decode(raw: bytes, infos: list[TensorInfo], start: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(float64 values, 16-bit histogram key in the tensor's own domain, tensor index) of every element,
    gathered from the run's bytes in a few whole-run operations (whatever the alignment of each tensor)."""
    buf = np.frombuffer(raw, dtype=np.uint8)
    code = np.array(list(map(_CODE.__getitem__, map(_DTYPE, infos))), dtype=np.int8)
    numel = _numel(infos)
    rel = np.array(list(map(_OFFSET, infos)), dtype=np.int64) - start
    seg = np.repeat(np.arange(len(infos)), numel)
    c = code[seg]
    is32 = c == 2
    byte = rel[seg] + (np.arange(seg.size) - (np.cumsum(numel) - numel)[seg]) * np.where(is32, 4, 2)
    low = buf[byte].astype(np.uint32) | buf[byte + 1].astype(np.uint32) << 8     # an F16/BF16, or an F32's low half
    high = np.zeros_like(low)
    b32 = byte[is32]
    high[is32] = buf[b32 + 2].astype(np.uint32) | buf[b32 + 3].astype(np.uint32) << 8
    bits = np.where(is32, low | high << 16, low << 16)                             # the float32 of BF16 and F32
    f16 = c == 0
    with np.errstate(invalid="ignore"):   # a signalling NaN widened
        x = bits.view(np.float32).astype(np.float64)
        x[f16] = low[f16].astype(np.uint16).view(np.float16).astype(np.float64)
    key = np.where(is32, high, low).astype(np.int64)                               # F16: its bits; else bf16's
    return x, key, seg


_DTYPE, _OFFSET, _SHAPE = attrgetter("dtype"), attrgetter("offset"), attrgetter("shape")


def _numel(infos: list[TensorInfo]) -> np.ndarray:
    return np.array(list(map(math.prod, map(_SHAPE, infos))), dtype=np.int64)


def _bincount(idx: np.ndarray, size: int, w: np.ndarray | None = None) -> np.ndarray:
    return np.bincount(idx, weights=w, minlength=size)


@dataclass
class _Run:
    """A run's per-tensor columns (Acc's scalar fields, one entry a tensor) and its finite elements' keys and
    tensor indices, which the rows and the groups are read from."""
    f16: np.ndarray
    exact: np.ndarray
    count: np.ndarray
    n: np.ndarray
    nan: np.ndarray
    posinf: np.ndarray
    neginf: np.ndarray
    zeros: np.ndarray
    min: np.ndarray
    max: np.ndarray
    mean: np.ndarray
    m2: np.ndarray
    sum_abs: np.ndarray
    keys: np.ndarray       # each finite element's 16-bit key in its tensor's domain
    seg: np.ndarray        # ... and its tensor's index


_COUNTS = ("count", "nan", "posinf", "neginf", "zeros")   # Acc's integer counts, summed over a group's tensors


def run_stats(ckpt: Checkpoint, infos: list[TensorInfo], items: Sequence[Sequence], group_keys: Sequence[Sequence[tuple]],
              progress: Callable[[int], None] | None = None) -> tuple[Table, list[tuple[tuple, Acc]]]:
    """Each tensor's row (its item's name, bucket, layer and role, its dtype and shape: analysis/stats/ `head`'s
    fields; then Acc.row's) and the run's accumulator for each group its tensors belong to (`group_keys[t]`:
    tensor t's), by kind of group."""
    first, last = infos[0], infos[-1]
    start = first.offset or 0
    with reading(first.file, f"tensors {first.name!r} to {last.name!r}: cannot read their values"):
        raw = read_bytes(first.file, start, (last.offset or 0) + last.nbytes - start)
    r, starts = _columns(raw, infos, start)
    if progress:
        progress(int(sum(i.nbytes for i in infos)))
    return _rows(items, infos, r, _quantiles(r, starts)), _groups(group_keys, r)


def _columns(raw: bytes, infos: list[TensorInfo], start: int) -> tuple[_Run, np.ndarray]:
    """The run's columns, and where each tensor's finite elements start among the run's (the element-wise
    temporaries let go on return, before the quantiles, rows and groups are made)."""
    x, key, seg = _decode(raw, infos, start)
    T = len(infos)
    nan_m, pinf_m, ninf_m = np.isnan(x), x == np.inf, x == -np.inf
    fin = ~(nan_m | pinf_m | ninf_m)
    xf, kf, sf = x[fin], key[fin], seg[fin]
    n = _bincount(sf, T).astype(np.int64)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(n > 0, _bincount(sf, T, xf) / np.maximum(n, 1), 0.0)
    d = xf - mean[sf]
    has = n > 0
    starts = np.concatenate(([0], np.cumsum(n)[:-1]))
    tmin, tmax = np.full(T, np.inf), np.full(T, -np.inf)
    if xf.size:
        tmin[has] = np.minimum.reduceat(xf, starts[has])
        tmax[has] = np.maximum.reduceat(xf, starts[has])
    dtype = np.array(list(map(_DTYPE, infos)))
    r = _Run(f16=dtype == "F16", exact=dtype != "F32",   # new_acc: F16 and BF16 exact, F32 by its bf16 bin
             count=_numel(infos), n=n,
             nan=_bincount(seg[nan_m], T).astype(np.int64), posinf=_bincount(seg[pinf_m], T).astype(np.int64),
             neginf=_bincount(seg[ninf_m], T).astype(np.int64), zeros=_bincount(sf[xf == 0], T).astype(np.int64),
             min=tmin, max=tmax, mean=mean, m2=_bincount(sf, T, d * d), sum_abs=_bincount(sf, T, np.abs(xf)),
             keys=kf, seg=sf)
    return r, starts


def _quantiles(r: _Run, starts: np.ndarray) -> np.ndarray:
    """(tensors, QUANTILES) by QUANTILE_RULE, as Acc.quantiles reads them from the bins: each tensor's finite
    elements in the value order of their histogram keys, the order statistics' representatives clamped to
    [min, max] and interpolated; NaN for a tensor without a finite value. The representatives are read SLICE
    tensors at a time (each tensor's own arithmetic: the same values; a 100k-tensor run's (tensors, QUANTILES)
    temporaries were ~90 MB at once)."""
    quant = np.full((len(r.n), len(QUANTILES)), np.nan)
    has = np.flatnonzero(r.n > 0)
    if not has.size:
        return quant
    if int(r.n.max()) > 1:   # each tensor's keys by value: sorted by (tensor, rank in its domain)
        f16_el = r.f16[r.seg]
        rank = np.where(f16_el, _ranks("f16")[r.keys], _ranks("bf16")[r.keys])
        order = np.sort(r.seg.astype(np.int64) << 32 | rank)
        rank, f16 = order & 0xFFFFFFFF, r.f16[order >> 32]
        sorted_keys = np.empty_like(rank)   # each rank back to its key, in its tensor's domain
        sorted_keys[f16], sorted_keys[~f16] = tables("f16")[3][rank[f16]], tables("bf16")[3][rank[~f16]]
    else:   # (one finite element a tensor at most: already in order)
        sorted_keys = r.keys
    for s in range(0, has.size, SLICE):
        t = has[s:s + SLICE]
        quant[t] = _interpolated(r, sorted_keys, starts[t], t)
    return quant


def _interpolated(r: _Run, sorted_keys: np.ndarray, starts: np.ndarray, t: np.ndarray) -> np.ndarray:
    """_quantiles of the tensors `t` (each with a finite value; `starts`: where each one's sorted keys start)."""
    nn = r.n[t][:, None]
    hs = (nn - 1) * np.array(QUANTILES)[None, :]
    lo = np.floor(hs).astype(np.int64)
    g = hs - lo

    def rep(idx: np.ndarray) -> np.ndarray:
        k = sorted_keys[starts[:, None] + idx]
        v = np.where(r.f16[t][:, None], tables("f16")[0][k],
                     np.where(r.exact[t][:, None], tables("bf16")[0][k], tables("bf16")[1][k]))
        return np.minimum(np.maximum(v, r.min[t][:, None]), r.max[t][:, None])

    a, b = rep(lo), rep(np.minimum(lo + 1, nn - 1))
    return np.where((g == 0) | (lo + 1 >= nn), a, a + g * (b - a))


def _rows(items: Sequence[Sequence], infos: list[TensorInfo], r: _Run, quant: np.ndarray) -> Table:
    """Acc.row's fields of every tensor, column by column (the same IEEE operations in the same order, so the
    same floats as Acc.row on these scalars: tests/test_stats_tiny.py), the statistics numpy arrays (core/table.py:
    8 bytes a value, not a Python float's 32); NaN, which reads as None, where a tensor has no finite value."""
    n = r.n
    has = n > 0
    nz = np.maximum(n, 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        std = np.sqrt(np.maximum(r.m2, 0.0) / nz)
        mean_abs = r.sum_abs / nz
        l2 = np.where(has, np.sqrt(np.maximum(r.m2 + n * r.mean * r.mean, 0.0)), 0.0)
        zero_fraction = r.zeros / r.count

    def opt(v: np.ndarray) -> np.ndarray:
        return np.where(has, v, np.nan)

    shapes: dict[tuple[int, ...], list[int]] = {}   # one list a distinct shape, its rows' (a MoE's: a handful)
    rows = rows_table()
    quantiles = rows.columns["quantiles"]
    quantiles.columns = dict(zip(QUANTILE_KEYS, quant.T))
    rows.columns.update(
        name=list(map(itemgetter(0), items)), bucket=list(map(itemgetter(1), items)),
        layer=list(map(itemgetter(2), items)), role=list(map(itemgetter(3), items)),
        dtype=list(map(attrgetter("dtype"), infos)), shape=[shapes.setdefault(i.shape, list(i.shape)) for i in infos],
        count=r.count, finite=n, min=opt(r.min), max=opt(r.max), mean=opt(r.mean), std=opt(std),
        mean_abs=opt(mean_abs), l2=l2, zeros=r.zeros, zero_fraction=zero_fraction,
        nan=r.nan, inf=r.posinf + r.neginf, posinf=r.posinf, neginf=r.neginf,
        quantiles=quantiles, quantiles_exact=r.exact)
    return rows


def _group_sums(gi: np.ndarray, size: int, v: np.ndarray) -> np.ndarray:
    """Per group, the sum of a per-tensor column over the tensors of each (gi: a tensor's group, -1 for none)."""
    inside = gi >= 0
    return _bincount(gi[inside], size, v[inside].astype(np.float64))


def _groups(group_keys: Sequence[Sequence[tuple]], r: _Run) -> list[tuple[tuple, Acc]]:
    """The run's accumulator for each group: its tensors' scalars combined (Chan et al.'s update over all of
    them at once), its histogram in the bfloat16 domain (F16 keys rebinned, as Acc.merge_bins does). A
    tensor's groups are listed by kind (analysis/stats/ `_groups`: total, bucket, plot, then its layer), so
    each kind is one pass of bincounts over the run, however many layers it spans."""
    keymap, keeps = _f16_to_bf16()
    f16_el = r.f16[r.seg]
    brank = _ranks("bf16")[np.where(f16_el, keymap[r.keys], r.keys)]   # every finite element's bfloat16 rank
    lossy = _bincount(r.seg[f16_el & ~keeps[r.keys]], len(r.n)) > 0      # an F16 tensor holding a value bf16 cannot
    inexact = (lossy | ~r.exact).astype(np.float64)
    by_rank = tables("bf16")[3]
    nr = by_rank.size
    out: list[tuple[tuple, Acc]] = []
    distinct: dict[Sequence[tuple], int] = {}   # a MoE's 200k tensors share a few hundred tuples of groups
    which = np.array([distinct.setdefault(ks, len(distinct)) for ks in group_keys])
    for kind in range(max(map(len, distinct))):
        names: dict[tuple, int] = {}   # in the order of their first tensor (that of their first distinct tuple)
        gi = np.array([names.setdefault(ks[kind], len(names)) if kind < len(ks) else -1 for ks in distinct])[which]
        inside = gi >= 0
        G = len(names)
        add = partial(_group_sums, gi, G)
        ng = add(r.n)
        with np.errstate(invalid="ignore", divide="ignore"):
            gmean = add(r.n * r.mean) / np.maximum(ng, 1)
        gm2 = add(r.m2) + add(r.n * (r.mean - gmean[np.maximum(gi, 0)]) ** 2)
        gmin, gmax = np.full(G, np.inf), np.full(G, -np.inf)
        np.minimum.at(gmin, gi[inside], r.min[inside])
        np.maximum.at(gmax, gi[inside], r.max[inside])
        counts = {f: add(getattr(r, f)) for f in _COUNTS}
        tensors, sum_abs, bad = add(np.ones(len(r.n))), add(r.sum_abs), add(inexact) > 0
        ge = gi[r.seg]                                   # each finite element's group of this kind
        code, hist = np.unique(ge[ge >= 0] * nr + brank[ge >= 0], return_counts=True)
        bounds = np.searchsorted(code // nr, np.arange(G + 1))
        for name, j in names.items():
            acc = Acc(exact=not bad[j], n=int(ng[j]), sum_abs=float(sum_abs[j]), tensors=int(tensors[j]),
                      hist_keys=by_rank[code[bounds[j]:bounds[j + 1]] % nr].astype(np.int64),
                      hist_counts=hist[bounds[j]:bounds[j + 1]].astype(np.int64))
            for f in _COUNTS:
                setattr(acc, f, int(counts[f][j]))
            if ng[j]:
                acc.mean, acc.m2, acc.min, acc.max = float(gmean[j]), float(gm2[j]), float(gmin[j]), float(gmax[j])
            out.append((name, acc))
    return out
