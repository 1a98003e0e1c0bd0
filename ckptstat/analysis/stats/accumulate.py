"""The mergeable accumulator of `ckptstat stats` (analysis/stats/): counts, min/max, float64 moments
and a 65,536-bin histogram keyed by a 16-bit pattern, from which quantiles are read. Split from
stats.py (issue 22); stats.py re-exports every name here, and analysis/stats/kernel16.py holds the
fused per-chunk kernels that feed it. The accumulator's rules are in stats.py's docstring."""
from __future__ import annotations

import math
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from ...core import dtypes
from ...core.table import Table

QUANTILES = (0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99)
NBINS = 1 << 16
FLT_MAX = float(np.finfo(np.float32).max)
_TOP_KEY = 0x7F7F   # the bfloat16 key of the largest finite magnitudes: [~3.39e38, 2^128)
_LITTLE = sys.byteorder == "little"


# --- bin tables --------------------------------------------------------------------------------------

def _bf16_tables() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(value of each key, midpoint of each key's bin, finite mask) for the bfloat16-key domain."""
    keys = np.arange(NBINS, dtype=np.uint32)
    with np.errstate(invalid="ignore"):   # NaN bit patterns
        lo = (keys << 16).view(np.float32).astype(np.float64)
        mag = keys & 0x7FFF
        # A key covers magnitudes [|v(k)|, |v(k+1)|): the next magnitude key, 2^128 after the largest.
        nxt = ((mag + 1) << 16).view(np.float32).astype(np.float64)
    finite = np.isfinite(lo)
    nxt[mag == 0x7F7F] = 2.0 ** 128
    mid = np.where(keys & 0x8000, -(np.abs(lo) + nxt) / 2, (lo + nxt) / 2)
    mid[~finite] = np.nan
    # The bins of +-0 hold [0, 2^-133): report 0, what they almost always hold (exact zeros), rather
    # than a 4.6e-41 midpoint; still within the stated bound.
    mid[0] = mid[0x8000] = 0.0
    return lo, mid, finite


def _f16_tables() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    vals = np.arange(NBINS, dtype=np.uint16).view(np.float16).astype(np.float64)
    return vals, vals, np.isfinite(vals)


_TABLES: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = {}


def tables(domain: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(value, midpoint, finite, keys of finite bins sorted by value) for a histogram domain."""
    if domain not in _TABLES:
        lo, mid, finite = _bf16_tables() if domain == "bf16" else _f16_tables()
        idx = np.flatnonzero(finite)
        order = idx[np.argsort(lo[idx], kind="stable")]
        _TABLES[domain] = (lo, mid, finite, order)
    return _TABLES[domain]


_RANKS: dict[str, np.ndarray] = {}


def _ranks(domain: str) -> np.ndarray:
    """Each key's position in tables(domain)'s value order; -1 for the keys of NaN and Inf."""
    if domain not in _RANKS:
        order = tables(domain)[3]
        rank = np.full(NBINS, -1, dtype=np.int64)
        rank[order] = np.arange(order.size)
        _RANKS[domain] = rank
    return _RANKS[domain]


def by_value(hist: np.ndarray, domain: str) -> tuple[np.ndarray, np.ndarray]:
    """The nonzero bins of finite values of a dense histogram: (keys in value order, counts)."""
    keys = np.flatnonzero(hist != 0)   # 5x faster than np.flatnonzero(hist) on int64 counts
    return value_order(keys, hist[keys], domain)


def value_order(keys: np.ndarray, counts: np.ndarray, domain: str, unique: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Bins sorted into value order, those of NaN / Inf dropped, and (unless `unique`) repeated keys summed.

    The sort is a stable (timsort) argsort of the keys' ranks: keys in ascending order hold the negative
    values by falling rank and the positive ones by rising rank, and two sparse histograms each in value
    order are two runs; timsort merges runs in linear time (a few microseconds for a few thousand bins)."""
    rank = _ranks(domain)[keys]
    o = np.argsort(rank, kind="stable")
    rank, keys, counts = rank[o], keys[o], counts[o]
    start = int(np.searchsorted(rank, 0))   # NaN and Inf keys have rank -1: first
    if start:
        rank, keys, counts = rank[start:], keys[start:], counts[start:]
    if not unique and rank.size > 1:
        first = np.flatnonzero(np.concatenate(([True], rank[1:] != rank[:-1])))
        if first.size < rank.size:
            keys, counts = keys[first], np.add.reduceat(counts, first)
    return keys, counts


_F16_TO_BF16: tuple[np.ndarray, np.ndarray] | None = None


def _f16_to_bf16() -> tuple[np.ndarray, np.ndarray]:
    """For each F16 bit pattern: its bfloat16 key, and whether that key holds the value exactly."""
    global _F16_TO_BF16
    if _F16_TO_BF16 is None:
        v32 = np.arange(NBINS, dtype=np.uint16).view(np.float16).astype(np.float32)
        bits = v32.view(np.uint32)
        _F16_TO_BF16 = ((bits >> 16).astype(np.int64), (bits & 0xFFFF) == 0)
    return _F16_TO_BF16


# dtypes whose every value the bfloat16-key histogram holds exactly.
EXACT_IN_BF16 = frozenset({"BF16", "BC32", "F8_E4M3", "F8_E5M2", "F8_E4M3FNUZ", "F8_E5M2FNUZ", "F8_E8M0",
                           "F6_E2M3", "F6_E3M2", "F4", "F4_X2", "BOOL", "I8", "U8"})


_LOCAL = threading.local()   # per thread: Acc.update may run in a Dask worker's threads


def scratch(name: str, n: int, dtype: type = np.float64) -> np.ndarray:
    """A buffer of n values, this thread's own under `name`, reused from chunk to chunk (grown when a chunk is
    bigger): no fresh allocation, and its page faults, a chunk (here and in stats_kernel32.py)."""
    buf = getattr(_LOCAL, name, None)
    if buf is None or buf.size < n:
        buf = np.empty(n, dtype=dtype)
        setattr(_LOCAL, name, buf)
    return buf[:n]


_NO_BINS = np.zeros(0, dtype=np.int64)   # shared by accumulators without counts: never modified in place


# --- the scale of the moments (docs/stats.md, "Scale of the moments") ------------------------------------

# Below 2^400 in magnitude, a sum of squares of up to 2^63 values (< 2^865) and Chan's delta^2 * na * nb (< 2^928)
# stay finite; from 2^-400 up, a squared deviation is subnormal only below 2^-111 of the largest |x|, far under
# the rounding of the deviation itself. float32 and narrower, and every integer, always fall in between.
_PLAIN_LO, _PLAIN_HI = 2.0 ** -400, 2.0 ** 400


def scale_exp(m: float) -> int:
    """The power of two 2^e that the moments of values of largest magnitude m are kept in units of.

    0 (plain float64 sums) for m in [2^-400, 2^400) -- every dtype but float64 -- and for no value or only zeros;
    otherwise m's own binary exponent, so that m / 2^e is in [0.5, 1): the scaled values' sums and squares can
    neither overflow nor underflow. Monotone in m: merging only ever rescales the moments of the smaller side
    down (what underflows there is below 2^-1074 of the larger side's largest |x|)."""
    if not m > 0 or _PLAIN_LO <= m < _PLAIN_HI:
        return 0
    return math.frexp(m)[1]


def unscale(v: float, e: int) -> float:
    """v * 2^e: exact (but for a subnormal result, rounded once); +-inf where it passes float64's max."""
    if not e:
        return v
    try:
        return math.ldexp(v, e)
    except OverflowError:
        return math.copysign(math.inf, v)


# |mean| beyond 2^10 standard deviations (1e8 + noise of 1e-4): a mean rounded to float64, off by up to half an ulp
# of |mean|, is off by a part of the spread that Chan's delta between two sets no longer hides
_CANCEL = 2.0 ** 20


def centred(n: int, mean: float, m2: float, deviations: Callable[[], float]) -> tuple[float, float]:
    """(M2, the mean's low part) of n values whose squared deviations from `mean` (their sum / n, rounded) sum to m2.

    Where |mean| > 2^10 std (docs/stats.md, "Means far from zero") the sum s of the deviations (`deviations()`: one
    more pass, taken only then) gives the rounding of the mean, s / n, kept beside it (Acc.mean_lo), and M2 = m2 -
    s^2 / n (the corrected two-pass algorithm of Chan, Golub & LeVeque, 1983). Elsewhere 0 (as good as exact there)
    and m2 as given."""
    if mean * mean * n <= _CANCEL * m2:
        return m2, 0.0
    s = float(deviations())
    return max(m2 - s * s / n, 0.0), s / n


def _two_sum(a: float, b: float) -> tuple[float, float]:
    """a + b rounded, and its rounding error (Knuth's TwoSum: exact)."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def held(v: np.generic) -> float:
    """A chunk's min or max as a Python float, or as the int itself where float64 cannot hold it (an int64 or
    uint64 beyond 2^53: 2^53 + 1 read 2^53 before): min and max are exact, as numpy's are."""
    x = v.item()
    f = float(x)
    return x if isinstance(x, int) and not isinstance(x, bool) and f != x else f


# --- the accumulator -----------------------------------------------------------------------------------

@dataclass
class Acc:
    """Mergeable statistics of a set of values. `hist` counts finite values by 16-bit key in `domain`.

    `mean`, `m2` and `sum_abs` are kept in units of 2^exponent() (and m2 of 4^exponent()): a power of two
    read from min / max (scale_exp), 1 for every value of magnitude in [2^-400, 2^400), so that
    finite float64 values of any magnitude give moments that neither overflow nor lose their precision to
    underflow. Powers of two scale exactly, so a scaled accumulator's moments are, to the bit, what the plain
    sums would be wherever those neither overflow nor underflow; row() reports them unscaled."""

    domain: str = "bf16"
    exact: bool = True
    count: int = 0           # every element, finite or not
    n: int = 0               # finite elements
    nan: int = 0
    posinf: int = 0
    neginf: int = 0
    zeros: int = 0
    min: float = math.inf
    max: float = -math.inf
    mean: float = 0.0
    mean_lo: float = 0.0     # the mean's rounding error, so the mean is mean + mean_lo to ~2^-106 (centred())
    m2: float = 0.0
    sum_abs: float = 0.0
    tensors: int = 0
    # The histogram is held one of two ways. Sparse: the keys of the nonzero bins in value order (the order of
    # tables(domain)[3]) and their counts, which is what quantiles read and what merges combine (a few thousand
    # bins for most tensors); a layer's accumulator only merges, and a dense one is 512 KiB, so a file of many
    # tiny layers (a hostile header can name 100,000) would take gigabytes. Dense (`hist`) while chunks are
    # bincounted into it, and for the total and the buckets (group_acc: a handful, each merge a scatter-add).
    # Sparse arrays are never modified in place, so accumulators may share them.
    hist_keys: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64), repr=False)
    hist_counts: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64), repr=False)
    dense: np.ndarray | None = field(default=None, repr=False, compare=False)

    @property
    def hist(self) -> np.ndarray:
        """The 65,536 counts, dense (made dense on first use)."""
        if self.dense is None:
            self.dense = np.zeros(NBINS, dtype=np.int64)
            self.dense[self.hist_keys] = self.hist_counts
            self.hist_keys = self.hist_counts = np.zeros(0, dtype=np.int64)
        return self.dense

    @hist.setter
    def hist(self, value: np.ndarray) -> None:
        self.dense = value
        self.hist_keys = self.hist_counts = np.zeros(0, dtype=np.int64)

    def bins(self) -> tuple[np.ndarray, np.ndarray]:
        """The nonzero bins: (keys in value order, counts)."""
        if self.dense is None:
            return self.hist_keys, self.hist_counts
        return by_value(self.dense, self.domain)

    def expand(self) -> Acc:
        """The histogram dense (merges into it are then scatter-adds; `compact` makes it sparse again)."""
        _ = self.hist
        return self

    def compact(self) -> Acc:
        """The histogram sparse again (what crosses processes, and what a tensor's row and merges read)."""
        if self.dense is not None:
            self.hist_keys, self.hist_counts = self.bins()
            self.dense = None
        return self

    def __getstate__(self) -> dict:
        """Pickled (to and from --workers processes) with the histogram sparse, keys as uint16 and counts as
        uint32 where they fit: 6 bytes a bin on the wire rather than 16 (issue 22)."""
        state = dict(self.compact().__dict__)
        counts = self.hist_counts
        if not counts.size:   # (Acc.scalars: sent per tensor) no arrays to pickle
            del state["hist_keys"], state["hist_counts"]
            return state
        if int(counts.max()) < 1 << 32:
            state["hist_counts"] = counts.astype(np.uint32)
        state["hist_keys"] = self.hist_keys.astype(np.uint16)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        if "hist_keys" in state:
            self.hist_keys = self.hist_keys.astype(np.int64)
            self.hist_counts = self.hist_counts.astype(np.int64)
        else:
            self.hist_keys = self.hist_counts = _NO_BINS

    def exponent(self) -> int:
        """The power of two the moments are kept in units of (scale_exp of the largest finite |x|; 0 if none)."""
        m = max(-self.min, self.max)
        return 0 if _PLAIN_LO <= m < _PLAIN_HI else scale_exp(m)   # (the common case inline: merges are many)

    def _rescale(self, e_old: int) -> None:
        """The moments, kept in units of 2^e_old, into units of 2^exponent() (never larger: scale_exp is monotone)."""
        k = e_old - self.exponent()
        if k:
            self.mean, self.m2, self.sum_abs = math.ldexp(self.mean, k), math.ldexp(self.m2, 2 * k), math.ldexp(self.sum_abs, k)
            self.mean_lo = math.ldexp(self.mean_lo, k)

    def add_moments(self, n: int, mean: float, m2: float, mean_lo: float = 0.0) -> None:
        """Chan et al. (1979) pairwise update of (n, mean, M2), the means carried with their low parts (centred()):
        delta is then the difference of the true means, not of their roundings, whose error, up to half an ulp
        of |mean|, would enter M2 to first order (2 * delta * error * na * nb / n) at every merge."""
        if n == 0:
            return
        if self.n == 0:
            self.n, self.mean, self.mean_lo, self.m2 = n, mean, mean_lo, m2
            return
        tot = self.n + n
        delta = (mean - self.mean) + (mean_lo - self.mean_lo)
        hi, err = _two_sum(self.mean, delta * n / tot)
        self.mean, self.mean_lo = _two_sum(hi, self.mean_lo + err)
        self.m2 += m2 + delta * delta * self.n * n / tot
        self.n = tot

    def update(self, x: np.ndarray) -> None:
        """Add one flat chunk of decoded values."""
        if x.dtype.kind == "c":
            x = x.view(x.real.dtype)
        self.count += x.size
        if x.size == 0:
            return
        widened = x.dtype == np.float32
        with np.errstate(over="ignore", invalid="ignore"):   # a signalling NaN widened, inf - inf, or huge float64s
            if widened:   # widened into a reused buffer: no fresh 8-bytes-a-value allocation a chunk
                x64 = scratch("acc", x.size)
                np.copyto(x64, x)
            else:
                x64 = x.astype(np.float64, copy=False)
            total = float(np.add.reduce(x64)) if x64 is x or widened else float(np.add.reduce(x, dtype=np.float64))
            if not math.isfinite(total):
                # Slow path, only for chunks holding NaN / Inf (or f64 values whose sum overflows).
                nan = np.isnan(x)
                self.nan += int(nan.sum())
                self.posinf += int(np.count_nonzero(x == np.inf))
                self.neginf += int(np.count_nonzero(x == -np.inf))
                x = x[np.isfinite(x)]
                if x.size == 0:
                    return
                x64 = x.astype(np.float64, copy=False)
                widened = False
                total = float(np.add.reduce(x, dtype=np.float64))
        n = x.size
        self.zeros += n - int(np.count_nonzero(x))
        cmin, cmax = held(x.min()), held(x.max())
        e_old = self.exponent()
        self.min, self.max = min(self.min, cmin), max(self.max, cmax)
        if x.dtype.kind in "iu" and (cmin < -256 or cmax > 256):
            self.exact = False   # bfloat16 holds every integer of magnitude <= 256, not beyond
        self._rescale(e_old)
        e = self.exponent()
        if e:   # (float64 beyond 2^+-400 only) the moments of x / 2^e, from a scaled copy
            x64 = np.ldexp(x64, -e)
            widened = False
            total = float(np.add.reduce(x64))
            self.sum_abs += float(np.add.reduce(np.abs(x64)))
        elif not widened:   # |x| of the float64 values: an integer's own abs wraps at its minimum (int16's -32768)
            self.sum_abs += float(np.add.reduce(np.abs(x64)))
        mean = total / n
        if x64 is x:
            d = x64 - mean
        else:
            d = x64      # our own float64 copy: centre it in place
            d -= mean
        # Squared in place and summed by numpy's pairwise add, not np.dot: BLAS's dot threads, and
        # on a busy machine its threads cost more than the sum (docs/performance.md).
        np.multiply(d, d, out=d)

        def deviations() -> float:   # (d is squared) the float64 values again, less the mean
            y = x.astype(np.float64)
            return float(np.add.reduce((np.ldexp(y, -e) if e else y) - mean))

        self.add_moments(n, mean, *centred(n, mean, float(np.add.reduce(d)), deviations))
        if widened:   # |x| into the same buffer, now free
            self.sum_abs += float(np.add.reduce(np.abs(x, out=x64)))
        self.hist += np.bincount(self._keys(x), minlength=NBINS)

    def _keys(self, x: np.ndarray) -> np.ndarray:
        if self.domain == "f16":
            return x.view(np.uint16)
        if x.dtype == np.float64:   # round to float32 first; beyond its range clamp to +-FLT_MAX (_TOP_KEY)
            x = np.clip(x, -FLT_MAX, FLT_MAX)
        x32 = np.ascontiguousarray(x if x.dtype == np.float32 else x.astype(np.float32))
        if _LITTLE:   # the high half of each float32 is its bfloat16 key: a strided view, not a shifted copy
            return x32.view(np.uint16)[1::2]
        return x32.view(np.uint32) >> 16

    def merge(self, other: Acc) -> None:
        """Fold another accumulator in; an F16-domain histogram is rebinned to bfloat16 keys. A sparse
        accumulator (a layer's) stays sparse, a dense one (group_acc's total and buckets) dense."""
        self.merge_bins(other)
        self.merge_scalars(other)

    def scalars(self) -> Acc:
        """A copy without the histogram: what merge_scalars reads (sent per tensor by --workers processes)."""
        return replace(self, hist_keys=_NO_BINS, hist_counts=_NO_BINS, dense=None)

    def merge_bins(self, other: Acc) -> None:
        """The histogram half of merge, and the exactness flag: integer counts, so merged in any order the
        result is the same."""
        keys, counts = other.bins()
        exact = other.exact
        unique = other.domain == self.domain
        if not unique:
            if self.domain != "bf16":
                raise ValueError("only the bf16 domain accepts other domains")
            keymap, keeps = _f16_to_bf16()
            exact = exact and bool(keeps[keys].all())
            keys = keymap[keys]   # several F16 keys can share a bfloat16 key, and the order is no longer by value
        if self.dense is not None:
            if unique:
                self.dense[keys] += counts
            else:
                np.add.at(self.dense, keys, counts)
        elif not self.hist_keys.size and unique:
            self.hist_keys, self.hist_counts = keys, counts
        else:
            self.hist_keys, self.hist_counts = value_order(np.concatenate([self.hist_keys, keys]),
                                                           np.concatenate([self.hist_counts, counts]),
                                                           self.domain, unique=False)
        self.exact = self.exact and exact

    def merge_scalars(self, other: Acc) -> None:
        """The counts, min / max and float64 moments half of merge: floating-point sums, so the order of the
        merges decides the last bits (analysis/stats/ replays them in file order whatever the workers)."""
        for f in ("count", "nan", "posinf", "neginf", "zeros", "tensors"):
            setattr(self, f, getattr(self, f) + getattr(other, f))
        e_old, e_other = self.exponent(), other.exponent()
        self.min, self.max = min(self.min, other.min), max(self.max, other.max)
        e = self.exponent()
        if e_old or e_other or e:   # (MOMENT_RULE) both sides' moments into units of 2^e
            self._rescale(e_old)
            k = e_other - e
            self.sum_abs += math.ldexp(other.sum_abs, k)
            self.add_moments(other.n, math.ldexp(other.mean, k), math.ldexp(other.m2, 2 * k), math.ldexp(other.mean_lo, k))
        else:
            self.sum_abs += other.sum_abs
            self.add_moments(other.n, other.mean, other.m2, other.mean_lo)

    def quantiles(self, ps: Sequence[float]) -> list[float | None]:
        keys, counts = self.bins()
        return bins_quantiles(keys, counts, self.domain, self.exact, ps, self.min, self.max)

    def row(self, ps: Sequence[float] = QUANTILES, quantiles: dict | None = None) -> dict:
        """The report's fields; `quantiles`, when the caller computed them (analysis/stats/tiny.py), as given."""
        n, e = self.n, self.exponent()
        std = unscale(math.sqrt(max(self.m2, 0.0) / n), e) if n else None
        return {
            "count": self.count, "finite": n,
            "min": self.min if n else None, "max": self.max if n else None,
            "mean": unscale(self.mean, e) if n else None, "std": std,
            "mean_abs": unscale(self.sum_abs / n, e) if n else None,
            "l2": unscale(math.sqrt(max(self.m2 + n * self.mean * self.mean, 0.0)), e) if n else 0.0,
            "zeros": self.zeros, "zero_fraction": self.zeros / self.count if self.count else None,
            "nan": self.nan, "inf": self.posinf + self.neginf, "posinf": self.posinf, "neginf": self.neginf,
            "quantiles": quantiles if quantiles is not None else {_qkey(p): q for p, q in zip(ps, self.quantiles(ps))},
            "quantiles_exact": self.exact,
        }


def _qkey(p: float) -> str:
    return f"p{100 * p:g}"


# A tensor's row in the report: what names it (analysis/stats/ `head`), then Acc.row's fields
ROW_KEYS = ("name", "bucket", "layer", "role", "dtype", "shape", "count", "finite", "min", "max", "mean", "std",
            "mean_abs", "l2", "zeros", "zero_fraction", "nan", "inf", "posinf", "neginf", "quantiles", "quantiles_exact")
QUANTILE_KEYS = tuple(map(_qkey, QUANTILES))


def rows_table() -> Table:
    """An empty table of tensor rows (report["tensors"]: core/table.py), the quantiles a table of their own."""
    return Table(ROW_KEYS, {"quantiles": QUANTILE_KEYS})


def hist_quantiles(hist: np.ndarray, domain: str, exact: bool, ps: Sequence[float],
                   lo_clamp: float = -math.inf, hi_clamp: float = math.inf) -> list[float | None]:
    """numpy.quantile ('linear') from a 65536-bin histogram; see QUANTILE_RULE for the error."""
    keys, counts = by_value(hist, domain)
    return bins_quantiles(keys, counts, domain, exact, ps, lo_clamp, hi_clamp)


def bins_quantiles(keys: np.ndarray, counts: np.ndarray, domain: str, exact: bool, ps: Sequence[float],
                   lo_clamp: float = -math.inf, hi_clamp: float = math.inf) -> list[float | None]:
    """hist_quantiles from the nonzero bins in value order (Acc.bins): only the bins that hold values, so a
    checkpoint of many small tensors pays per row for what it holds (issue 22)."""
    value, mid, _, _ = tables(domain)
    rep = value if exact else mid
    cum = np.cumsum(counts)
    n = int(cum[-1]) if cum.size else 0
    if n == 0:
        return [None for _ in ps]
    hs = [(n - 1) * p for p in ps]
    lows = [int(math.floor(h)) for h in hs]
    # the i-th smallest value (0-based) is in the first bin whose running count passes i
    at = np.searchsorted(cum, lows + [min(i + 1, n - 1) for i in lows], side="right")
    picked: list[float | None] = [min(max(float(v), lo_clamp), hi_clamp) for v in rep[keys[at]]]
    unknown = {k for k, beyond in ((_TOP_KEY, hi_clamp > FLT_MAX), (_TOP_KEY | 0x8000, lo_clamp < -FLT_MAX)) if beyond}
    if domain == "bf16" and unknown:
        # float64 values beyond float32's range share the last finite bin with float32's largest (Acc._keys): an
        # order statistic there is known only to lie between ~3.4e38 and max (or min), so it has no value to report
        picked = [None if k in unknown else v for k, v in zip(keys[at].tolist(), picked)]
    out: list[float | None] = []
    for j, (h, i) in enumerate(zip(hs, lows)):
        g = h - i
        a, b = picked[j], picked[len(ps) + j]
        if g == 0 or i + 1 >= n:
            out.append(a)
        else:
            out.append(None if a is None or b is None else a + g * (b - a))
    return out


def new_acc(dtype: str) -> Acc:
    if dtype == "F16":
        return Acc(domain="f16", exact=True)
    kind = dtypes.get(dtype).kind
    return Acc(domain="bf16", exact=dtype in EXACT_IN_BF16 or kind in ("int", "uint"))
