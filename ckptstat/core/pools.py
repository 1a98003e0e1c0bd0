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



def worker_signals() -> None:
    """A pool worker's first act. Ctrl-C sends SIGINT to the whole foreground process group: it is the parent's to
    handle (it stops the pool and exits 130), and a worker the parent stops with SIGTERM just ends. With the
    parent's handlers (inherited by fork: KeyboardInterrupt, cli.py's SIGTERM -> SystemExit), each worker printed a
    traceback under the parent's clean exit. (Started inside `sigint_deferred`, it has SIGINT blocked until here.)"""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


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
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        signal.signal(signal.SIGINT, old)
        if got:
            raise KeyboardInterrupt
