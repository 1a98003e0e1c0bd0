"""`ckptstat stats --scheduler tcp://host:8786`: one checkpoint's statistics fanned out over a Dask
cluster (the `dask` extra), merged so that the report equals a one-machine run's.

The tasks are contiguous runs of whole tensors (file order, about equal bytes, several per worker).
Each worker opens the checkpoint by path (every worker must see it under that path) and computes
each tensor's accumulator with analysis/stats/'s own `tensor_stats` (bounded chunks, as on one
machine); it returns the rows and the per-tensor accumulators, histograms sent sparse. The client
then folds the accumulators into the bucket, layer and total groups in file order, as `run_items`
does: counts, min/max and histograms (hence quantiles) are exact whatever the order, and folding in
the same order makes the float64 moments the same bits too. A tensor is never split across tasks.
"""
from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from ...core import Checkpoint
from ...errors import CkptstatError, UsageError
from ..audit import Settings, applied, settings
from ..dequantized import view as dequantized_view
from . import (
    DEFAULT_STATS_CHUNK,
    Acc,
    Contribution,
    GroupKey,
    Item,
    StatsRun,
    UnitRows,
    build_report,
    merge_into,
    rows_table,
    select,
    split,
    unit_results,
)

Progress = Callable[[int, int], None]
TASKS_PER_WORKER = 4
# Per worker process: checkpoints opened, keyed by path, config and the files' (size, mtime) so that a
# long-lived worker never reuses the headers of a file rewritten since; the last few only.
_OPEN: dict[tuple, Checkpoint] = {}
_KEEP = 4


def _stamp(ckpt: Checkpoint) -> tuple:
    """The checkpoint's files as they are now: a local file's size and mtime, a URL's size and version
    (the store's ETag, as audit's resume key: sources/listing.py)."""
    import os

    from ...core.urls import is_url

    def one(f: str) -> tuple:
        if is_url(f):
            from ...sources.listing import stat

            e = stat(f)
            return (f, e.size, e.etag)
        st = os.stat(f)
        return (f, st.st_size, st.st_mtime_ns)

    return tuple(one(f) for f in ckpt.files)


def _task(path: str, config: str | None, stamp: tuple, items: list[Item], chunk_bytes: int, using: Settings) -> Any:
    """("ok", the part's rows and packed accumulators, what the task fetched over the network or None),
    or ("error", class name, path, reason): the tree's exceptions take extra __init__ arguments and
    would not unpickle on the client as themselves. The fetched counts are the worker process's meter
    over the task: exact with one thread per worker (`dask worker --nthreads 1`, docs/audit.md)."""
    src = sys.modules.get("ckptstat.sources")
    before = src.METER.report() if src is not None else {}
    try:
        with applied(using):   # the client's --limit and --allow-external
            out = _part(path, config, stamp, items, chunk_bytes)
        src = sys.modules.get("ckptstat.sources")   # imported by the first open of a URL
        return "ok", out, src.METER.since(before) if src is not None else None
    except CkptstatError as e:
        return ("error", type(e).__name__, getattr(e, "path", None), getattr(e, "reason", str(e)))


def raise_task_error(kind: str, path: str | None, reason: str) -> None:
    from ... import errors

    cls = getattr(errors, kind, CkptstatError)
    if isinstance(cls, type) and issubclass(cls, errors.CheckpointError):
        raise cls(path, reason)
    raise CkptstatError(reason)


def _part(path: str, config: str | None, stamp: tuple, items: list[Item], chunk_bytes: int,
          ) -> list[tuple[UnitRows, Contribution]]:
    from ...formats.registry import open_checkpoint

    key = (path, config, stamp)
    ckpt = _OPEN.get(key)
    if ckpt is None:
        while len(_OPEN) >= _KEEP:
            _OPEN.pop(next(iter(_OPEN)))
        ckpt = _OPEN[key] = dequantized_view(open_checkpoint(path, config))
    return [(rows, contrib) for _, rows, contrib in unit_results(ckpt, items, chunk_bytes)]   # histograms sparse


def collect_dask(ckpt: Checkpoint, scheduler: Any, pattern: str | None = None, buckets: Sequence[str] = (),
                 all_roles: bool = False, chunk_bytes: int = DEFAULT_STATS_CHUNK,
                 progress: Progress | None = None) -> StatsRun:
    """analysis.stats.collect's report (schema ckptstat.stats/1), the tensors read on the cluster."""
    from ..audit.cluster import completed, connected, on_cluster

    if chunk_bytes < 1:
        raise UsageError(f"chunk size must be positive, got {chunk_bytes}")
    ckpt = dequantized_view(ckpt)
    items, skipped = select(ckpt, pattern, buckets, all_roles)
    total_bytes = sum(ckpt[i.name].nbytes for i in items)
    t0 = time.perf_counter()
    with connected(scheduler) as client:
        nworkers = max(1, len(client.scheduler_info(n_workers=-1).get("workers", {})))
        parts = split(ckpt, items, nworkers * TASKS_PER_WORKER, chunk_bytes)
        stamp = _stamp(ckpt)
        config = ckpt.config_path and on_cluster(ckpt.config_path)
        using = settings()
        futures = [client.submit(_task, on_cluster(ckpt.path), config, stamp, p, chunk_bytes, using, pure=False,
                                 retries=1) for p in parts]
        index = {f.key: i for i, f in enumerate(futures)}
        results: list[list[tuple[UnitRows, Contribution]]] = [[] for _ in parts]
        done = 0
        if progress:
            progress(0, total_bytes)
        for fut, res in completed(client, futures, scheduler, "parts of the checkpoint"):
            i = index[fut.key]
            if res[0] == "error":
                raise_task_error(*res[1:])   # a task's CkptstatError, raised here as on one machine
            results[i] = res[1]
            if res[2]:   # the worker's network counts, in the command's `fetched` (docs/remote.md)
                sys.modules["ckptstat.sources"].METER.merge(res[2])
            done += sum(ckpt[it.name].nbytes for it in parts[i])
            if progress:
                progress(done, total_bytes)
    rows = rows_table()
    groups: dict[GroupKey, Acc] = {}
    dense: set[GroupKey] = set()   # (merge_into: up to DENSE_LAYERS layers' counts dense)
    for res in results:   # tasks in file order, their units in order: as run_items merges them
        for unit_rows, contrib in res:
            rows.extend(unit_rows)
            merge_into(groups, contrib, dense)
    return build_report(ckpt, pattern, buckets, all_roles, chunk_bytes, nworkers, total_bytes,
                   time.perf_counter() - t0, rows, groups, skipped)
