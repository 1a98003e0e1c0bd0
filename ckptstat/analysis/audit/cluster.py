"""`ckptstat audit --scheduler tcp://host:8786`: the same per-checkpoint tasks as the local pool,
submitted to a Dask distributed cluster (the `dask` extra), their records streamed back as they
finish (`distributed.as_completed`).

Every worker must see the checkpoints under the same paths (a shared or mounted filesystem) and run
the same ckptstat. When a worker dies, the scheduler reschedules the tasks it held on the others;
a task whose workers die `distributed.scheduler.allowed-failures` times (default 3) fails with
KilledWorker, and becomes an error record here, never the end of the run. Each task is one
checkpoint's headers plus bounded chunked reads (the tie comparison, COMPARE_CHUNK), so the memory a
task needs does not grow with the checkpoint; `dask worker --memory-limit` bounds the worker.

Imported only on the `--scheduler` path: nothing of dask loads otherwise (tests/test_layering.py).
"""
from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from ...core.urls import is_url
from ...errors import UsageError, missing_extra, one_line
from . import Runner, Settings, audit_record, lost_record, settings
from .find import Unit


def distributed() -> Any:
    """dask's distributed module, or the one line naming the extra (the first thing every --scheduler
    path calls, before any other import of dask)."""
    try:
        import distributed
    except ImportError as e:
        raise missing_extra("--scheduler", e.name, "dask") from None
    return distributed


def client_for(scheduler: Any) -> tuple[Any, bool]:
    """(a distributed.Client, whether we own it): from an address, or a Client / cluster given as is."""
    Client = distributed().Client
    if isinstance(scheduler, Client):
        return scheduler, False
    if isinstance(scheduler, str) and "://" not in scheduler:
        raise UsageError(f"--scheduler takes a scheduler address such as tcp://host:8786, got {scheduler!r}")
    try:
        return Client(scheduler, set_as_default=False, timeout="30s"), True
    except OSError as e:
        raise UsageError(f"--scheduler {scheduler}: cannot reach the Dask scheduler ({one_line(str(e))})") from None


def _task(unit: Unit, values: bool, using: Settings) -> dict[str, Any]:
    from distributed import get_worker

    try:
        name = get_worker().address
    except ValueError:   # run outside a worker (client.submit on a local thread pool)
        name = None
    return audit_record(unit, values, worker=name, using=using)


def on_cluster(path: str) -> str:
    """`path` as a worker must open it: a local path made absolute, since a worker's working directory
    is its own (the client's relative paths mean nothing there); a URL as is."""
    return path if is_url(path) else os.path.abspath(path)


def _absolute(unit: Unit) -> Unit:
    return replace(unit, path=on_cluster(unit.path), files=tuple(on_cluster(f) for f in unit.files))


def _key(unit: Unit) -> str:
    digest = hashlib.blake2b(repr(unit.key).encode("utf-8", "backslashreplace"), digest_size=12).hexdigest()
    return f"ckptstat-audit-{digest}"


def runner(scheduler: Any) -> Runner:
    """analysis.audit.run's `cluster`: the records of its units computed on the Dask cluster at `scheduler`
    (tcp://host:port, or a distributed.Client / LocalCluster address)."""
    return lambda units, values: run_dask(units, scheduler, values)


def run_dask(units: list[Unit], scheduler: Any, values: bool = True, retries: int = 0) -> Iterator[dict[str, Any]]:
    """Records of `units` as the cluster finishes them. `retries`: extra attempts for a task that
    raised (a record never raises, so this is for the machinery: a worker lost mid-transfer)."""
    as_completed = distributed().as_completed
    client, owned = client_for(scheduler)
    try:
        # One map, one graph sent to the scheduler (a submit per unit costs a round trip each).
        submitted = client.map(_task, [_absolute(u) for u in units], values=values, using=settings(),
                               key=[_key(u) for u in units], pure=False, retries=retries)
        futures = {f.key: u for f, u in zip(submitted, units)}
        # The client is not the process's default (set_as_default=False: a library must not install one),
        # so as_completed is told its loop; without it, it looks for a default client and finds none.
        for fut in as_completed(submitted, loop=client.loop):
            unit = futures[fut.key]
            try:
                rec = fut.result()
            except Exception as e:  # noqa: BLE001 - KilledWorker, a lost connection: a record, not the end
                rec = lost_record(unit, 1 + retries, f"{type(e).__name__}: {e}")
            rec["path"] = unit.path   # the record keeps the user's spelling: the resume key, as a local run's
            yield rec
            fut.release()
    finally:
        if owned:
            client.close()
