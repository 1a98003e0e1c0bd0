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

import asyncio
import hashlib
import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from ...core.urls import is_url
from ...errors import CheckpointError, UsageError, missing_extra, one_line
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


CONNECT_SECONDS = 30   # to reach the scheduler and hear it say what it is
WORKER_SECONDS = 60    # to wait for a first worker on a scheduler that has none
REFUSED_SECONDS = 5    # to try a refused connection again (a scheduler still starting)
SCHEMES = ("tcp", "tls", "ws", "wss", "ucx")   # the addresses `dask scheduler` listens on (inproc: one process's own)


def client_for(scheduler: Any) -> tuple[Any, bool]:
    """(a distributed.Client, whether we own it): from an address, or a Client / cluster given as is. An address is
    first asked who it is (`_identify`): distributed.Client's own timeout does not bound its handshake, so a port that
    accepts and never answers as a scheduler (the dashboard's 8787, a web server) held it for good, and an address it
    cannot parse was a traceback ('internal error') after a minute in Client.__del__."""
    Client = distributed().Client
    if isinstance(scheduler, Client):
        return scheduler, False
    if not isinstance(scheduler, str) or "://" not in scheduler or scheduler.split("://")[0] not in SCHEMES:
        raise UsageError(f"--scheduler takes a scheduler address such as tcp://host:8786, got {scheduler!r}")
    _listening(scheduler)
    _identify(scheduler)
    try:
        with quiet_dask():
            return Client(scheduler, set_as_default=False, timeout=f"{CONNECT_SECONDS}s"), True
    except (OSError, ValueError, TypeError) as e:
        raise UsageError(f"--scheduler {scheduler}: cannot reach the Dask scheduler ({one_line(str(e))})") from None


def _listening(address: str) -> None:
    """One line at once for a tcp / tls / ws(s) address where nothing listens, or whose host does not resolve:
    distributed tries a refused connection again for its whole timeout (30 s), then says it timed out. A scheduler
    still starting (a script that has just launched it) gets REFUSED_SECONDS. Anything else is `_identify`'s."""
    from distributed.comm import parse_address, parse_host_port

    try:
        scheme, location = parse_address(address)
        host, port = parse_host_port(location)
    except (ValueError, TypeError):
        return
    if scheme not in ("tcp", "tls", "ws", "wss"):
        return
    deadline = time.monotonic() + REFUSED_SECONDS
    while True:
        try:
            socket.create_connection((host, port), timeout=CONNECT_SECONDS).close()
            return
        except ConnectionRefusedError:
            if time.monotonic() > deadline:
                raise UsageError(f"--scheduler {address}: connection refused: nothing listens at port {port} of "
                                 f"{host} (start `dask scheduler`, or check the address)") from None
            time.sleep(0.5)
        except socket.gaierror as e:
            raise UsageError(f"--scheduler {address}: cannot resolve host {host!r} ({e.strerror})") from None
        except OSError:   # unreachable, a timeout: distributed's own connection says it
            return


def _identify(address: str) -> None:
    """The one line that says why `address` is no Dask scheduler to run on: unreachable, not answering as one within
    CONNECT_SECONDS, another Dask process (a worker's address), or no worker joining within WORKER_SECONDS."""
    from distributed.core import rpc
    from distributed.security import Security

    async def ask(op: str) -> Any:
        async with rpc(address, timeout=CONNECT_SECONDS,
                       connection_args=Security().get_connection_args("client")) as r:
            return await getattr(r, op)()

    def answer(op: str) -> Any:
        try:
            with quiet_dask():
                return asyncio.run(asyncio.wait_for(ask(op), CONNECT_SECONDS))
        except (asyncio.TimeoutError, TimeoutError):
            raise UsageError(f"--scheduler {address}: nothing there answered as a Dask scheduler within "
                             f"{CONNECT_SECONDS} s (the scheduler's port, 8786 by default, not its dashboard's?)") from None
        except Exception as e:  # noqa: BLE001 - distributed's and the OS's errors of an address, as one line
            raise UsageError(f"--scheduler {address}: cannot reach the Dask scheduler "
                             f"({type(e).__name__}: {one_line(str(e))})") from None

    kind = answer("identity")
    if not isinstance(kind, dict) or kind.get("type") != "Scheduler":
        what = kind.get("type") if isinstance(kind, dict) else None
        raise UsageError(f"--scheduler {address}: a Dask {what or 'process'} answers there, not a scheduler")
    deadline = time.monotonic() + WORKER_SECONDS
    while not kind.get("workers"):
        if time.monotonic() > deadline:
            raise UsageError(f"--scheduler {address}: the Dask scheduler has no worker (none joined in "
                             f"{WORKER_SECONDS} s: start `dask worker {address}`)")
        time.sleep(1.0)
        kind = answer("identity")


@contextmanager
def quiet_dask() -> Iterator[None]:
    """distributed's loggers kept from the terminal: a lost scheduler or a refused connection logs its traceback
    (35 lines of `distributed.client - ERROR`) beside the one line ckptstat says of it."""
    import logging

    names = [n for n in list(logging.root.manager.loggerDict) if n == "distributed" or n.startswith("distributed.")]
    saved = {n: logging.getLogger(n).level for n in names}
    for n in names:
        logging.getLogger(n).setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        for n, level in saved.items():
            logging.getLogger(n).setLevel(level)


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
    KilledWorker = distributed().KilledWorker
    with connected(scheduler) as client:
        # One map, one graph sent to the scheduler (a submit per unit costs a round trip each).
        submitted = client.map(_task, [_absolute(u) for u in units], values=values, using=settings(),
                               key=[_key(u) for u in units], pure=False, retries=retries)
        futures = {f.key: u for f, u in zip(submitted, units)}
        # (no verdict on a file the run could not finish: no record; every later run resumes past a record)
        for fut, rec in completed(client, submitted, scheduler, "checkpoints", "; run again to audit the rest (the "
                                  "records written are kept)", keep=KilledWorker):
            unit = futures[fut.key]
            if isinstance(rec, KilledWorker):   # the workers running it died allowed-failures times: a verdict on it
                rec = lost_record(unit, _allowed_failures(), one_line(f"{type(rec).__name__}: {rec}"))
            yield as_given(rec, unit)


@contextmanager
def connected(scheduler: Any) -> Iterator[Any]:
    """A distributed.Client of the scheduler (`client_for`), closed at the end if it is ours, quietly (its scheduler
    may be gone)."""
    client, owned = client_for(scheduler)
    try:
        yield client
    finally:
        if owned:
            with quiet_dask():
                client.close(timeout=CONNECT_SECONDS)


def completed(client: Any, futures: list[Any], scheduler: Any, counted: str, hint: str = "",
              keep: type[BaseException] | None = None) -> Iterator[tuple[Any, Any]]:
    """(future, its result) for each of `futures` as the cluster finishes it (`keep`: a task's exception of that class
    given as its result). A run that cannot go on ends in one CheckpointError naming the scheduler, why and how far it
    got (`counted`: what a future is, `hint`: what to do next): the scheduler lost (a task cancelled), every worker
    gone for WORKER_SECONDS (`_Watch` cancels what is left), a task whose workers all died (KilledWorker: out of
    memory?), the machinery failing (a worker without ckptstat); never a traceback, nor a wait for good."""
    done, watch = 0, _Watch(client, futures)
    try:
        # The client is not the process's default (set_as_default=False: a library must not install one),
        # so as_completed is told its loop; without it, it looks for a default client and finds none.
        for fut in distributed().as_completed(futures, loop=client.loop):
            try:
                with quiet_dask():
                    result = fut.result()
            except (Exception, asyncio.CancelledError) as e:  # noqa: BLE001 - the run cannot go on: why, in one line
                if keep is not None and isinstance(e, keep):
                    result = e
                else:
                    raise CheckpointError(str(scheduler), f"{_why_stopped(e, client, watch)} ({type(e).__name__}) "
                                                          f"after {done} of {len(futures)} {counted}{hint}") from None
            yield fut, result
            done += 1
            fut.release()
    finally:
        watch.stop()


def _why_stopped(e: BaseException, client: Any, watch: _Watch) -> str:
    if watch.why:
        return watch.why
    if isinstance(e, distributed().KilledWorker):
        return (f"the workers running a task died {_allowed_failures()} time(s) (out of memory? `dask worker "
                "--memory-limit`)")
    if isinstance(e, (asyncio.CancelledError, OSError, TimeoutError)) or client.status != "running":
        return "lost the Dask scheduler"
    return f"the workers failed to run a task ({one_line(str(e))[:200]})"


class _Watch:
    """A thread that cancels the run's futures once the scheduler has had no worker for WORKER_SECONDS (every worker
    killed, its machines gone): the tasks would wait for one for good, the command silent. `why` then says so."""

    def __init__(self, client: Any, futures: list[Any]):
        self.client, self.futures, self.why = client, futures, ""
        self._stopped = threading.Event()
        threading.Thread(target=self._run, daemon=True, name="ckptstat-worker-watch").start()

    def stop(self) -> None:
        self._stopped.set()

    def _run(self) -> None:
        since: float | None = None
        while not self._stopped.wait(min(5.0, WORKER_SECONDS / 2)):
            try:
                with quiet_dask():
                    info = self.client.scheduler_info(n_workers=1)
            except Exception:  # noqa: BLE001 - the scheduler gone: the run's own futures say so
                return
            workers = info.get("n_workers", len(info.get("workers") or ()))
            since = None if workers else since or time.monotonic()
            if since is not None and time.monotonic() - since > WORKER_SECONDS:
                self.why = (f"the Dask scheduler has had no worker for {WORKER_SECONDS} s (start `dask worker "
                            f"{self.client.scheduler.address}`)")
                with quiet_dask():
                    self.client.cancel([f for f in self.futures if not f.done()])
                return


def _allowed_failures() -> int:
    """The attempts the scheduler makes before a task is KilledWorker (its config, as the client reads it)."""
    import dask

    return int(dask.config.get("distributed.scheduler.allowed-failures", 3)) + 1


def as_given(rec: dict[str, Any], unit: Unit) -> dict[str, Any]:
    """A record computed on the workers, the paths in it spelled as the user gave them: a relative root was sent
    absolute (`on_cluster`), and its files, errors and scan findings came back so (a local run's record has the
    user's spelling: the resume key among them)."""
    given = {p for p in (unit.path, *unit.files) if on_cluster(p) != p}
    # (and the folders they are in, a file the message names beside them: a shard an index names and the folder lacks;
    # longer paths first)
    pairs = sorted({(on_cluster(p), p) for p in given} | {(on_cluster(d or ".") + os.sep, d + os.sep if d else "")
                                                          for d in map(os.path.dirname, given)}, reverse=True)

    def spelled(v: Any) -> Any:
        if isinstance(v, str):
            for absolute, typed in pairs:
                v = v.replace(absolute, typed)
            return v
        if isinstance(v, dict):
            return {k: spelled(x) for k, x in v.items()}
        if isinstance(v, list):
            return [spelled(x) for x in v]
        return v
    rec = spelled(rec) if pairs else rec
    rec["path"] = unit.path   # the record keeps the user's spelling: the resume key, as a local run's
    return rec
