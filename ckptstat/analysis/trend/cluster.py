"""`ckptstat trend --scheduler tcp://host:8786`: a run's steps read on a Dask cluster (the `dask` extra); the report
equals a one-machine run's, bit for bit.

One task per step, as the local pool's: the worker opens the step's checkpoint, the previous one and the first by
path (every worker must see them under those paths; audit's `on_cluster` makes a relative path absolute) and returns
analysis/trend/'s own `step_result`, the same float64 sums in the same order whichever machine computes them. The
client's limits and --allow-external travel with each task (audit's `settings`), as for `stats --scheduler`."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...core import Checkpoint
from ...errors import CkptstatError
from ..audit import Settings, applied, settings
from ..audit.cluster import completed, connected, on_cluster
from ..stats.cluster import raise_task_error
from .steps import Plan, step_result


def _task(paths: list[str], p: Plan, t: int, chunk_bytes: int, using: Settings) -> Any:
    from ...formats.registry import open_checkpoint

    try:
        with applied(using):
            ckpts: dict[int, Checkpoint] = {i: open_checkpoint(paths[i]) for i in {0, max(t - 1, 0), t}}
            try:
                return "ok", step_result(ckpts, p, t, chunk_bytes)
            finally:
                for c in ckpts.values():
                    c.close()
    except CkptstatError as e:   # the tree's exceptions take extra __init__ arguments: sent as data
        return ("error", type(e).__name__, getattr(e, "path", None), getattr(e, "reason", str(e)))


def run_dask(p: Plan, chunk_bytes: int, scheduler: Any, progress: Callable[[int, int], None] | None = None) -> list:
    """Each step's (sums per tensor, second moments), computed on the cluster, in step order."""
    paths = [on_cluster(s.path) for s in p.steps]
    n = len(paths)
    results: list[Any] = [None] * n
    done = 0
    with connected(scheduler) as client:
        using = settings()
        futures = [client.submit(_task, paths, p, t, chunk_bytes, using, pure=False, retries=1) for t in range(n)]
        index = {f.key: t for t, f in enumerate(futures)}
        for fut, res in completed(client, futures, scheduler, "steps"):
            if res[0] == "error":
                raise_task_error(*res[1:])
            results[index[fut.key]] = res[1]
            done += 1
            if progress:
                progress(done, n)
    return results
