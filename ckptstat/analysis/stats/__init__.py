"""Streaming weight statistics: per tensor, per layer and per bucket, in one pass over bounded chunks.

Every tensor is read with `Checkpoint.iter_chunks` (any reader, any dtype; `dtypes.decode` widens
bf16 / fp8 / fp6 / fp4 to float32), so peak memory is a few chunks plus fixed-size histograms,
whatever the checkpoint's size. F16 and BF16 tensors take a faster kernel (analysis/stats/kernel16.py):
their stored bit patterns are read once and counted, and every statistic comes from the counts;
F32 tensors take analysis/stats/kernel32.py's (one read, passes sized for the cache).
The accumulator (Acc) lives in analysis/stats/accumulate.py and is re-exported here.

Accumulators (all mergeable, so chunks, tensors, shards and worker processes combine freely):
- counts (elements, NaN, +Inf, -Inf, exact zeros) and min / max over finite values: exact;
- mean and M2 (sum of squared deviations) merged with Chan, Golub & LeVeque's parallel update in
  float64; each chunk's own mean and M2 come from a float64 copy of the chunk (two-pass within the
  chunk), so no sum-of-squares cancellation; a mean far from zero keeps its rounding (centred). std
  is the population std (ddof=0, numpy's default); L2 norm = sqrt(M2 + n * mean^2); mean |x| from
  a float64 sum; float64 values of magnitude beyond 2^+-400 have their moments kept of x / 2^e, a
  power of two, so they neither overflow nor underflow (accumulate.py scale_exp; docs/stats.md);
- a histogram of 65536 bins keyed by a 16-bit pattern, from which quantiles are read (see
  QUANTILE_RULE): F16 tensors are binned by their own 16 bits (exact); every other dtype by the top
  16 bits of its float32 value, i.e. truncated to bfloat16, which is exact for BF16, fp8, fp6, fp4,
  bool and integers of magnitude <= 256, and within a relative 2^-8 otherwise (F32, F64, big ints).
"""
from __future__ import annotations

import functools
import os
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter, itemgetter
from typing import NamedTuple

import numpy as np

from ...census import aliases, name_matches, placements
from ...core import Checkpoint, TensorInfo, dtypes, urls
from ...core.pools import quiet_stop_signals, sigint_deferred, stop, worker_signals
from ...core.table import Table
from ...core.tensor import STATS_CHUNK_BYTES
from ...errors import CkptstatError, UsageError
from ...naming import BUCKETS, is_norm_gain
from .. import dequantized
from .accumulate import (  # noqa: F401  (re-exported: analysis/stats/ is the accumulator's public home)
    EXACT_IN_BF16,
    NBINS,
    QUANTILES,
    Acc,
    _qkey,
    hist_quantiles,
    new_acc,
    rows_table,
    tables,
)
from .anomalies import ANOMALY_RULE, anomalies  # noqa: F401  (re-exported)
from .csv_table import CSV_FIELDS, csv_pieces, to_csv  # noqa: F401  (re-exported)
from .kernel16 import BUFFERS, DOMAINS, REMOTE_BUDGET, WINDOWS, dequantized_stats, tensor_stats16  # noqa: F401  (REMOTE_BUDGET re-exported)
from .kernel32 import tensor_stats32
from .readahead import REMOTE_AHEAD, REMOTE_PART, REMOTE_PREFETCH, ShardsAhead, remote_units  # noqa: F401  (re-exported)
from .tiny import run_stats, units

STATS_SCHEMA = "ckptstat.stats/1"
DEFAULT_STATS_CHUNK = STATS_CHUNK_BYTES   # stored bytes per chunk (core/tensor.py: the CLI's default too)
QUANTILE_RULE = (
    "quantiles follow numpy.quantile's default ('linear': order statistics x_(i), x_(i+1) at "
    "h = (n-1)p, interpolated), over finite values. exact=true: the order statistics are exact (F16 "
    "binned by its 16 bits; BF16, fp8/fp6/fp4, bool and integers within +-256 by the top 16 bits of float32, "
    "which hold them exactly). exact=false (F32, F64, bigger integers, or mixtures): each order statistic is "
    "known to its bfloat16 bin (float32 truncated to its top 16 bits) and reported as the bin's "
    "midpoint clamped to [min, max], so |error| <= 2^-8 * max(|x_(i)|, |x_(i+1)|) (+2^-133 near zero); "
    "float64 values are first rounded to float32 (one beyond its range, 2^128, leaves null a quantile it may be)")
VALUES_RULE = (
    "count and every statistic are over the numbers the elements decode to: a complex element is two (its real and "
    "imaginary parts), an F4_X2 element (torch float4_e2m1fn_x2, a packed pair) its two fp4 values, low nibble first; "
    "such a tensor's count is twice its shape's elements")
KERNELS = {*DOMAINS, "F32"}   # the dtypes whose values are counted where they are read, never widened (tensor_stats)
UPDATE_VALUES = 1 << 18   # values per Acc.update of any other dtype: ~6 MiB of float64 temporaries, whatever the chunk
# A layer's accumulator is sparse (its bins in value order: each merge a sort of the union), made dense once it holds
# DENSE_AFTER tensors while fewer than DENSE_LAYERS layers are (each merge then one scatter-add into 65,536 counts,
# 512 KiB; its row reads them once): a MoE layer of hundreds of expert tensors merged ~0.2 ms a tensor into a sparse
# one. Layers finish as their last tensor is merged (run_items' `finish`), so a file in order holds one or two open;
# a file that interleaves every layer's tensors (or a hostile header of 100,000 layers) keeps the rest sparse: at
# most 8 MiB of dense layers. A layer of a few tensors stays sparse (zeroing 512 KiB and reading it back cost more).
DENSE_LAYERS, DENSE_AFTER = 16, 4


# --- selection and the pass over the data ---------------------------------------------------------------

class Item(NamedTuple):   # a tuple: select() makes one per tensor
    name: str
    bucket: str
    layer: int | None
    role: str


def select(ckpt: Checkpoint, pattern: str | None = None, buckets: Sequence[str] = (),
           all_roles: bool = False) -> tuple[list[Item], list[dict]]:
    """Tensors to read, in file order, and the ones left out with the reason."""
    for b in buckets:
        if b not in BUCKETS:
            raise UsageError(f"unknown bucket {b!r}; buckets are {', '.join(BUCKETS)}")
    place = placements(ckpt)
    alias_of = aliases(ckpt)
    items, skipped = [], []
    undecoded: dict[str, str | None] = {}   # dtype -> why its values are not read (None: they are)
    for t in _file_order(ckpt):
        name = t.name
        p = place[name]
        if pattern and not name_matches(name, pattern):
            continue
        if buckets and p.bucket not in buckets:
            continue
        if t.dtype not in undecoded:
            undecoded[t.dtype] = ("string tensor" if t.dtype == "STR" or t.dt.bits == 0 else None
                                  if dtypes.can_decode(t.dtype) else f"values of {t.dtype} tensors are not decoded yet")
        why = undecoded[t.dtype]
        if name in alias_of:
            why = f"alias of {alias_of[name]} (counted once)"
        elif why is None and not all_roles and p.role != "parameter":
            why = f"role {p.role} (use --all-roles)"
        if why:
            skipped.append({"name": name, "reason": why})
        else:
            items.append(Item(name, p.bucket, p.layer, p.role))
    return items, skipped


def _file_order(ckpt: Checkpoint) -> list[TensorInfo]:
    """The tensors by file, then offset (no offset: 0); one file's with offsets sorted by C's key (issue 35)."""
    offset = attrgetter("offset")
    if len(ckpt.files) <= 1 and None not in map(offset, ckpt):
        return sorted(ckpt, key=offset)
    file_index = {f: i for i, f in enumerate(ckpt.files)}   # (a dequantised weight: at its codes' offset)
    return sorted(ckpt, key=lambda t: (file_index.get(t.file, 0), t.offset or t.extra.get("at", 0)))


GroupKey = tuple  # ("bucket", name) | ("layer", bucket, index) | ("total",)


def head(item: Item, info: TensorInfo) -> dict:
    """A tensor's row starts with what names it (then Acc.row's fields)."""
    return {"name": item.name, "bucket": item.bucket, "layer": item.layer, "role": item.role, "dtype": info.dtype,
            "shape": list(info.shape)}


def _group_keys(bucket: str, layer: int | None, gain: bool) -> tuple[GroupKey, ...]:
    """The groups a tensor adds to, by kind: the total, its bucket, its plot group ("plot", bucket: the bucket
    without its norm gains; ("gains",): every norm gain, which render/plots.py draws apart: gains near 1.0 squash
    a histogram of weights near 0), its layer."""
    plot: GroupKey = ("gains",) if gain else ("plot", bucket)
    return (("total",), ("bucket", bucket), plot) + ((("layer", bucket, layer),) if layer is not None else ())


def group_acc(key: GroupKey) -> Acc:
    """A new group accumulator: the total's and the buckets' (a handful) with a dense histogram, so that
    each of their many merges is one scatter-add; the layers' sparse (a hostile header can name 100,000)."""
    return Acc() if key[0] == "layer" else Acc(dense=np.zeros(NBINS, dtype=np.int64))


@dataclass(frozen=True)
class GroupRow:
    """A layer's finished row (Acc.row and its tensor count), computed by the worker process whose task held
    every tensor of the layer: only the layers a task boundary cuts cross processes as accumulators."""
    tensors: int
    fields: dict

    def row(self) -> dict:
        return self.fields


Group = Acc | GroupRow


def tensor_stats(ckpt: Checkpoint, info: TensorInfo, chunk_bytes: int,
                 progress: Callable[[int], None] | None = None) -> Acc:
    source = info.extra.get("dequantized")
    if isinstance(source, dequantized.Dequantized):   # a quantised weight's values (analysis/dequantized.py), counted as 16-bit
        acc = dequantized_stats(info, source, chunk_bytes, progress)
    elif info.dtype in DOMAINS:   # one count of the stored 16- or 8-bit patterns (analysis/stats/kernel16.py)
        acc = tensor_stats16(ckpt, info, chunk_bytes, progress)
    elif info.dtype == "F32":   # fewer passes, sized for the cache (analysis/stats/kernel32.py)
        acc = tensor_stats32(ckpt, info, chunk_bytes, progress)
    else:   # decoded a chunk at a time, widened to float64 UPDATE_VALUES at a time (its temporaries stay small)
        acc = new_acc(info.dtype)
        bits, lanes = info.dt.bits, info.dt.lanes
        for chunk in ckpt.iter_chunks(info.name, chunk_bytes):
            flat = chunk.reshape(-1)
            for at in range(0, flat.size, UPDATE_VALUES):
                acc.update(flat[at:at + UPDATE_VALUES])
            if progress:
                progress(chunk.size // lanes * bits // 8)
    acc.tensors = 1
    return acc


def _layers(items: Iterable[Item]) -> Counter[GroupKey]:
    """Each layer's number of tensors among `items` (counted by (bucket, layer) pairs: C's loop, not Python's)."""
    return Counter({("layer", b, n): k for (b, n), k in Counter(map(_BUCKET_LAYER, items)).items() if n is not None})


_NAME, _BUCKET, _LAYER, _BUCKET_LAYER = itemgetter(0), itemgetter(1), itemgetter(2), itemgetter(1, 2)   # an Item's


Contribution = list[tuple[GroupKey, Acc]]   # what one unit (a tensor, or a run of tiny ones) adds to its groups
UnitRows = list[dict] | Table                # a unit's rows: a tensor's dict, a run's table (tiny.py)


def unit_results(ckpt: Checkpoint, items: list[Item], chunk_bytes: int,
                 progress: Callable[[int], None] | None = None) -> Iterator[tuple[list[Item], UnitRows, Contribution]]:
    """Per unit (analysis/stats/tiny.py `units`: one tensor, or a run of tiny ones read together), in file order:
    its items, their rows, and the accumulators it adds to each group. A URL's units are read up to REMOTE_AHEAD
    at a time, holding at most REMOTE_BUDGET bytes of buffers (each unit's result is its own, and they are
    yielded in order: the same report, bit for bit)."""
    groups_of = functools.lru_cache(maxsize=4096)(_group_keys)   # a MoE's 200k tensors share a few hundred

    def single(it: Item, info: TensorInfo, acc: Acc) -> tuple[list[Item], UnitRows, Contribution]:
        """One tensor's unit: its row and its contribution to each of its groups."""
        return [it], [{**head(it, info), **acc.row()}], [(k, acc) for k in groups_of(it.bucket, it.layer,
                                                                                    is_norm_gain(it.name))]

    def one(span: tuple[int, int]) -> tuple[list[Item], UnitRows, Contribution]:
        part = items[span[0]:span[1]]
        if len(part) == 1:   # its row and merges read the bins
            info = ckpt[part[0].name]
            return single(part[0], info, tensor_stats(ckpt, info, chunk_bytes, progress).compact())
        names = list(map(_NAME, part))
        infos = list(map(ckpt.tensors.__getitem__, names))
        keys = list(map(groups_of, map(_BUCKET, part), map(_LAYER, part), map(is_norm_gain, names)))
        return part, *run_stats(ckpt, infos, part, keys, progress)

    def held(span: tuple[int, int]) -> int:
        """A unit's memory: its read buffer (a chunk at most; a run: its bytes), and where no kernel counts its dtype,
        Acc.update's float64 temporaries and, where decoding widens it (FP4, FP6, ggml blocks, C32), its chunk's float32
        numbers (16 I16 units held 908 MiB when a whole chunk was widened to float64 at once)."""
        infos = [ckpt[it.name] for it in items[span[0]:span[1]]]
        stored = min(sum(i.nbytes for i in infos), max(chunk_bytes, 1))
        if any("dequantized" in i.extra for i in infos):   # (dequantized_stats' float64 temporaries)
            return stored + max(chunk_bytes, 1)
        widened = [i for i in infos if i.dtype not in KERNELS]
        if not widened:
            return stored
        decoded = max((stored * 32 * i.dt.numbers // max(i.dt.bits, 1) for i in widened if i.dt.numpy is None), default=0)
        return stored + decoded + 24 * UPDATE_VALUES

    spans = units(ckpt, [it.name for it in items], chunk_bytes)
    try:
        if urls.is_url(ckpt.path):
            names = [it.name for it in items]
            yield from remote_units(ckpt, names, spans, chunk_bytes, one, lambda i, acc: single(items[i], ckpt[names[i]], acc),
                                    held, progress, _W.get("share", 1))
        else:
            yield from map(one, spans)
    finally:
        BUFFERS.clear()   # (the chunk buffers kept for reuse, the file mapped last: a long-lived process holds none
        WINDOWS.clear()   # between runs)
        urls.forget_ahead()   # (values read ahead that no read took: open_for_stats)


def merge_into(groups: dict[GroupKey, Acc], contrib: Contribution, dense: set[GroupKey] | None = None) -> None:
    """Fold one unit's contribution into the group accumulators (in file order: the float64 moments' bits). With
    `dense` (the layers whose accumulators are dense), a layer holding DENSE_AFTER tensors is made dense while fewer
    than DENSE_LAYERS are (integer counts either way: the same report)."""
    for key, acc in contrib:
        g = groups.get(key)
        if g is None:
            g = groups[key] = group_acc(key)
        elif dense is not None and g.dense is None and g.tensors >= DENSE_AFTER and len(dense) < DENSE_LAYERS:
            g.expand()
            dense.add(key)
        g.merge(acc)


def run_items(ckpt: Checkpoint, items: Iterable[Item], chunk_bytes: int,
              progress: Callable[[int], None] | None = None, merges: list[Contribution] | None = None,
              finish: Collection[GroupKey] = ()) -> tuple[Table, dict[GroupKey, Group]]:
    """Statistics of each item, and partial group accumulators (mergeable across workers); with `merges`, each
    unit's contribution without histograms is appended to it (Acc.scalars: what the parent replays). A layer in
    `finish` becomes its row (GroupRow) once its last tensor in `items` is merged, its histogram let go: a file of
    many layers holds the rows of those done and the histograms of those open only."""
    items = list(items)
    left = Counter({k: n for k, n in _layers(items).items() if k in finish})
    rows = rows_table()
    groups: dict[GroupKey, Acc] = {}
    dense: set[GroupKey] = set()   # the open layers whose accumulators are dense (merge_into)
    done: dict[GroupKey, GroupRow] = {}
    for part, part_rows, contrib in unit_results(ckpt, items, chunk_bytes, progress):
        rows.extend(part_rows)
        merge_into(groups, contrib, dense)
        if merges is not None:
            merges.append([(key, acc.scalars()) for key, acc in contrib])
        for key, n in (_layers(part).items() if left else ()):
            if left[key]:
                left[key] -= n
                if not left[key]:
                    layer = groups.pop(key)
                    done[key] = GroupRow(layer.tensors, layer.row())
                    dense.discard(key)
    return rows, {**groups, **done}


# Worker processes take contiguous runs of tensors and return their rows, each tensor's scalar
# accumulator, the rows of the layers wholly in their run (GroupRow) and partial group accumulators
# (the total, buckets, layers a task boundary cuts). With the fork start method they inherit the open
# Checkpoint (readers need not be picklable); otherwise each reopens it by path. The parent merges the
# groups' histograms (integer counts) as tasks finish, and replays the tensors' scalar merges (float64
# sums, whose last bits depend on the order) in file order: the report is byte for byte the one
# process's, whatever the number of workers and the order tasks finish in.
_W: dict = {}


def _fetched_since_mark() -> dict | None:
    """A URL: what this worker fetched since its last report (the reopen included), for the parent to add
    to its own `fetched` (docs/remote.md). A forked worker's meter starts at the parent's counts: the mark."""
    src = sys.modules.get("ckptstat.sources")
    if src is None:
        return None
    out = src.METER.since(_W.get("mark") or {})
    _W["mark"] = src.METER.report()
    return out


def _worker_init(path: str, config: str | None, counter, workers: int) -> None:  # noqa: ANN001
    """A worker's start. Over a URL the workers share one process's limits (SETTINGS.concurrency requests to a host,
    REMOTE_AHEAD units, REMOTE_BUDGET bytes): `-w 8` keeps 64 requests in flight to the Hub's CDN in all, not 512."""
    worker_signals()
    if urls.is_url(path):
        from ...sources.meter import SETTINGS

        SETTINGS.concurrency = max(1, SETTINGS.concurrency // workers)   # (before the worker's source makes a slot)
        _W["share"] = workers
    src = sys.modules.get("ckptstat.sources")
    _W["mark"] = src.METER.report() if src is not None else {}
    if _W.get("ckpt") is None:
        from ...formats.registry import open_checkpoint

        _W["ckpt"] = dequantized.view(open_checkpoint(path, config))
    _W["counter"] = counter


def _worker_run(task: tuple[list[Item], int, set[GroupKey]]) -> tuple:
    items, chunk_bytes, whole = task
    counter = _W["counter"]

    def tick(nbytes: int) -> None:
        with counter.get_lock():
            counter.value += nbytes

    try:
        merges: list[Contribution] = []
        rows, groups = run_items(_W["ckpt"], items, chunk_bytes, tick, merges, whole)
        partial = {k: g for k, g in groups.items() if isinstance(g, Acc)}
        done = {k: g for k, g in groups.items() if isinstance(g, GroupRow)}
        return "ok", rows, merges, partial, done, _fetched_since_mark()
    except CkptstatError as e:   # the tree's exceptions take extra __init__ args: send them as data
        return ("error", type(e).__name__, getattr(e, "path", None), getattr(e, "reason", str(e)))


def split(ckpt: Checkpoint, items: list[Item], parts: int, chunk_bytes: int) -> list[list[Item]]:
    """Contiguous runs of tensors (file order, for sequential reads) of about equal bytes, none empty, cut only
    between units (a run of tiny tensors stays whole: each task then forms the runs one process would, and the
    report is the same bits): the pool's tasks, and the Dask cluster's (analysis/stats/cluster.py)."""
    total = sum(ckpt[i.name].nbytes for i in items) or 1
    out: list[list[Item]] = [[]]
    acc = 0
    for a, b in units(ckpt, [it.name for it in items], chunk_bytes):
        if out[-1] and acc >= total * len(out) / parts:
            out.append([])
        out[-1] += items[a:b]
        acc += sum(ckpt[it.name].nbytes for it in items[a:b])
    return [p for p in out if p]


def _raise_worker_error(kind: str, path: str | None, reason: str) -> None:
    from ... import errors

    cls = getattr(errors, kind, errors.CkptstatError)
    if issubclass(cls, errors.CheckpointError):
        raise cls(path, reason)
    raise cls(reason)


def _run_pool(ckpt: Checkpoint, items: list[Item], chunk_bytes: int, workers: int,
              progress: Callable[[int], None] | None) -> tuple[Table, dict[GroupKey, Group]]:
    ctx = pool_context()
    counter = ctx.Value("q", 0)
    members = _layers(items)   # a layer whose every tensor is in one task: that worker computes its row
    tasks = [(part, chunk_bytes, {k for k, n in _layers(part).items() if n == members[k]})
             for part in split(ckpt, items, workers * 4, chunk_bytes)]
    _W["ckpt"] = ckpt if ctx.get_start_method() == "fork" else None
    try:
        return _pool_loop(ctx, ckpt, items, tasks, workers, counter, progress)
    finally:
        _W.clear()


def pool_context():  # noqa: ANN201  (a multiprocessing context)
    """fork on Linux, where a worker inherits the open checkpoint (no reopen, no second header parse or remote
    fetch); Python 3.14 made forkserver Linux's default. Elsewhere the platform's default (spawn on macOS,
    where fork is unsafe, and Windows): each worker reopens the checkpoint by path."""
    import multiprocessing as mp

    return mp.get_context("fork") if sys.platform == "linux" else mp.get_context()


def _pool_loop(ctx, ckpt: Checkpoint, items: list[Item], tasks: list, workers: int, counter,  # noqa: ANN001
               progress: Callable[[int], None] | None) -> tuple[Table, dict[GroupKey, Group]]:
    # concurrent.futures, not mp.Pool: a worker that dies (killed, out of memory) raises BrokenProcessPool, not a hang
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
    from concurrent.futures.process import BrokenProcessPool

    results: list[tuple[Table, list[Contribution]]] = [(rows_table(), []) for _ in tasks]
    groups: dict[GroupKey, Acc] = {}
    done_rows: dict[GroupKey, GroupRow] = {}
    seen = 0
    pool = ProcessPoolExecutor(workers, mp_context=ctx, initializer=_worker_init,
                               initargs=(ckpt.path, ckpt.config_path, counter, workers))
    quiet_stop_signals(pool)
    died = CkptstatError(f"{ckpt.path}: a stats worker process died (killed, or out of memory?); no statistics "
                         "were reported")
    try:
        with sigint_deferred():   # (the first submit forks the workers)
            index = {pool.submit(_worker_run, t): i for i, t in enumerate(tasks)}
        pending = set(index)
        while pending:
            done, pending = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
            if not done and any(p.exitcode not in (None, 0) for p in getattr(pool, "_processes", {}).values()):
                raise died   # (the executor marks its futures broken; a worker left on a lock the dead one held may not)
            if progress:
                now = counter.value
                progress(now - seen)
                seen = now
            for fut in done:
                try:
                    res = fut.result()
                except BrokenProcessPool:
                    raise died from None
                if res[0] == "error":
                    _raise_worker_error(*res[1:])
                _, part, part_merges, part_groups, part_done, fetched = res
                results[index[fut]] = (part, part_merges)
                done_rows.update(part_done)
                if fetched:   # the worker's network counts (docs/remote.md, `fetched`)
                    sys.modules["ckptstat.sources"].METER.merge(fetched)
                for key, acc in part_groups.items():
                    g = groups.get(key)
                    if g is None:
                        g = groups[key] = group_acc(key)
                    g.merge_bins(acc)
    finally:   # on an error the run is over: tasks not started are cancelled, the workers stopped, none waited for
        stop(pool, failed=sys.exc_info()[1] is not None)
    if progress:
        progress(counter.value - seen)
    rows = rows_table()
    for part, part_merges in results:   # tasks in file order, their units in order: as run_items merges them
        rows.extend(part)
        for contrib in part_merges:
            for key, acc in contrib:
                if key in groups:
                    groups[key].merge_scalars(acc)
    return rows, {**groups, **done_rows}


# --- anomalies and the report -----------------------------------------------------------------------------

@dataclass
class StatsRun:
    report: dict
    bucket_acc: dict[str, Acc]
    plot_acc: dict[str, Acc]     # what `plot` draws: each bucket without its norm gains, and "norm gains"


Progress = Callable[[int, int], None]   # (bytes read so far, bytes to read); the caller draws it


def _counter(progress: Progress, total: int) -> Callable[[int], None]:
    """A per-chunk tick (bytes just read) that reports the running total, never past `total` (from the threads
    that read a URL's units, too)."""
    done = 0
    lock = threading.Lock()

    def tick(nbytes: int) -> None:
        nonlocal done
        with lock:
            done = min(total, done + nbytes)
            progress(done, total)

    return tick


def open_for_stats(path: str, config: str | None, pattern: str | None = None, buckets: Sequence[str] = (),
                   all_roles: bool = False, chunk_bytes: int = DEFAULT_STATS_CHUNK, workers: int = 1) -> Checkpoint:
    """open_checkpoint for `collect` with these options: a sharded URL read by this process with no filter has its
    first value reads started as each shard's header comes in (readahead.py ShardsAhead), which collect's reads take."""
    from ...formats.registry import open_checkpoint

    if not urls.is_url(path) or pattern or buckets or workers != 1 or chunk_bytes < 1:
        return open_checkpoint(path, config)
    try:
        return open_checkpoint(path, config, opened=ShardsAhead(
            lambda shard: [it.name for it in select(shard, all_roles=all_roles)[0]], chunk_bytes))
    except BaseException:
        urls.forget_ahead()
        raise


def collect(ckpt: Checkpoint, pattern: str | None = None, buckets: Sequence[str] = (), all_roles: bool = False,
            chunk_bytes: int = DEFAULT_STATS_CHUNK, workers: int = 1, progress: Progress | None = None) -> StatsRun:
    """Read every selected tensor once and build the stats report (schema ckptstat.stats/1).

    `progress(done, total)`, when given, is called with stored bytes read so far and to read: once
    before the first read, after every chunk (with workers, a few times a second) and once at the end."""
    if chunk_bytes < 1:
        raise UsageError(f"chunk size must be positive, got {chunk_bytes}")
    if workers < 0:
        raise UsageError(f"--workers must be >= 0, got {workers}")
    workers = workers or (os.cpu_count() or 1)
    ckpt = dequantized.view(ckpt)
    items, skipped = select(ckpt, pattern, buckets, all_roles)
    total_bytes = sum(ckpt[i.name].nbytes for i in items)
    t0 = time.perf_counter()
    tick = _counter(progress, total_bytes) if progress else None
    if progress:
        progress(0, total_bytes)
    groups: Mapping[GroupKey, Group]
    if workers > 1 and len(items) > 1:
        rows, groups = _run_pool(ckpt, items, chunk_bytes, min(workers, len(items)), tick)
    else:
        rows, groups = run_items(ckpt, items, chunk_bytes, tick, finish=_layers(items))
    if progress:
        progress(total_bytes, total_bytes)
    return build_report(ckpt, pattern, buckets, all_roles, chunk_bytes, workers, total_bytes,
                        time.perf_counter() - t0, rows, groups, skipped)


def build_report(ckpt: Checkpoint, pattern: str | None, buckets: Sequence[str], all_roles: bool, chunk_bytes: int,
                 workers: int, total_bytes: int, elapsed: float, rows: Table, groups: Mapping[GroupKey, Group],
                 skipped: list[dict]) -> StatsRun:
    """The report (schema ckptstat.stats/1) from the per-tensor rows and the merged group accumulators,
    however they were computed (one process, a pool, a Dask cluster)."""
    flags = anomalies(rows)
    flagged: dict[str, list[str]] = {}
    for f in flags:
        flagged.setdefault(f["name"], []).append(f["kind"])
    none: list[str] = []   # (one list for every row without a flag: 8 bytes a row, not a list each)
    rows.add_column("flags", [flagged.get(name, none) for name in rows.columns["name"]])

    def grow(acc: Group) -> dict:
        return {"tensors": acc.tensors, **acc.row()}

    bucket_acc = {k[1]: a for k, a in groups.items() if k[0] == "bucket" and isinstance(a, Acc)}
    report = {
        "schema": STATS_SCHEMA,
        "path": ckpt.path,
        "format": ckpt.format,
        "selection": {"filter": pattern, "buckets": list(buckets), "roles": "all" if all_roles else "parameter"},
        "chunk_bytes": chunk_bytes,
        "workers": workers,
        "bytes_read": total_bytes,
        "seconds": elapsed,
        "conventions": {
            "std": "population standard deviation (ddof=0) over finite values; mean, min, max, mean_abs, "
                   "l2 and quantiles also over finite values; zero_fraction over all elements",
            "moments": "float64 accumulators, chunks merged with Chan et al.'s parallel update",
            "quantiles": QUANTILE_RULE,
            "anomalies": ANOMALY_RULE,
            "aliases": "a tied weight stored under two names is read once, under its first name",
            "values": VALUES_RULE,
        },
        "quantile_levels": list(QUANTILES),
        "total": grow(groups[("total",)]) if ("total",) in groups else None,
        "buckets": [{"bucket": b, **grow(bucket_acc[b])} for b in BUCKETS if b in bucket_acc],
        "layers": [{"bucket": k[1], "layer": k[2], **grow(a)}
                   for k, a in sorted((k, a) for k, a in groups.items() if k[0] == "layer")],
        "tensors": rows,
        "anomalies": flags,
        "skipped": skipped,
        "dequantized": dequantized.read_as_values(ckpt, rows.columns["name"]),
        "left_quantized": dequantized.left_as_stored(ckpt),   # quantised weights whose values are not read, by method
    }
    plot_acc = {("norm gains" if k == ("gains",) else k[1]): a for k, a in groups.items()
                if k[0] in ("plot", "gains") and isinstance(a, Acc)}
    return StatsRun(report, bucket_acc, plot_acc)


def counts_numbers(report: dict) -> bool:
    """Whether a tensor the report read decodes to more numbers than it has elements (complex, F4_X2), so that its
    count is not its shape's: the human outputs then print VALUES_RULE."""
    return any(dtypes.get(d).numbers > 1 for d in set(report["tensors"].columns["dtype"]))


def stats(ckpt: Checkpoint, **kw) -> dict:
    """The stats report of an open Checkpoint (see `collect` for the options)."""
    return collect(ckpt, **kw).report
