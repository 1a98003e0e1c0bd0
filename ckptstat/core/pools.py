"""Process pools (concurrent.futures) as the commands run them."""
from __future__ import annotations

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
