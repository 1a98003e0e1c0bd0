"""Process pools (concurrent.futures) as the commands run them."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


def quiet_stop_signals(pool: Any) -> None:
    """Call on a ProcessPoolExecutor before its first submit: its call queue then says nothing of a stop signal (the
    None it sends each worker at shutdown) it could not send. When a worker dies and the others are stopped without
    waiting (analysis/stats `_pool_loop`), the queue's pipe is closed under its feeder thread, which printed a traceback
    (OSError: Bad file descriptor) after the run's one-line error. A task it could not send still fails its future
    (concurrent.futures' own handler); the feeder thread reads this handler when it starts, at the first put."""
    queue = getattr(pool, "_call_queue", None)
    if queue is not None:
        report = queue._on_queue_feeder_error
        queue._on_queue_feeder_error = lambda e, obj: None if obj is None else report(e, obj)


def stop(pool: Any, failed: bool) -> None:
    """Shut a ProcessPoolExecutor down at the end of a run: waiting for its workers; after a failure (a worker died, an
    error, Ctrl-C) its tasks cancelled and its workers terminated, not waited for (one killed while it held a queue's
    lock leaves the others waiting), and its manager thread joined, bounded. That thread closes its wake-up pipe as it
    ends, and concurrent.futures' exit handler writes to that pipe: on CPython 3.11, with no lock between the two, the
    write could meet the closed pipe and print "Exception ignored ... OSError: Bad file descriptor" at exit."""
    manager = getattr(pool, "_executor_manager_thread", None)   # (shutdown forgets it)
    if failed:
        for p in list((getattr(pool, "_processes", None) or {}).values()):
            p.terminate()
    pool.shutdown(wait=not failed, cancel_futures=True)
    if failed and manager is not None:
        manager.join(timeout=10)


def worker_signals() -> None:
    """A pool worker's first act. Ctrl-C sends SIGINT to the whole foreground process group: it is the parent's to
    handle (it stops the pool and exits 130), and a worker the parent stops with SIGTERM just ends. With the
    parent's handlers (inherited by fork: KeyboardInterrupt, cli.py's SIGTERM -> SystemExit), each worker printed a
    traceback under the parent's clean exit. (Started inside `sigint_deferred`, it has SIGINT and SIGTERM blocked until here.)"""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})


def start_forkserver() -> None:
    """Start multiprocessing's fork server inside `sigint_deferred`: it imports its preload modules before it
    ignores SIGINT itself (a Ctrl-C then printed its KeyboardInterrupt traceback), and its workers inherit the mask."""
    from multiprocessing import forkserver

    with sigint_deferred():
        forkserver.ensure_running()


@contextmanager
def sigint_deferred() -> Iterator[None]:
    """Ctrl-C inside the block raises KeyboardInterrupt when it ends, and the processes started inside begin with
    SIGINT blocked (a mask survives fork and exec; `worker_signals` then ignores it). Around a pool's submit, which
    starts its workers: interrupted there, a forked worker printed KeyboardInterrupt before its initializer ran, and
    a fork server's worker, started after the parent left, found the parent's semaphores gone (FileNotFoundError)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    got: list[int] = []
    old = signal.signal(signal.SIGINT, lambda signum, frame: got.append(signum))
    # SIGTERM too: a worker the parent terminates before its initializer has run would end in cli.py's handler
    # (SystemExit: 143, a traceback); blocked, it stays pending until `worker_signals` has restored the default
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
        signal.signal(signal.SIGINT, old)
        if got:
            raise KeyboardInterrupt
