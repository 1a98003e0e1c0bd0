"""`python -m ckptstat` and the console script: the quick path (commands/quick.py) first, else the typer CLI,
imported only then."""
from __future__ import annotations

import gc
import os
import sys

from .commands.quick import named_args, quick


def run() -> None:
    # numpy's bundled OpenBLAS starts a thread per core when numpy is imported, and each busy-waits for
    # work before sleeping: 0.05-0.14 s of CPU per process (and per --workers process) on a 2-core machine
    # (docs/performance.md). ckptstat makes no BLAS call, so its CLI asks for none unless the user set it.
    # numpy is not imported yet: nothing above it in this process imports numpy. Not for `run`: torch
    # (whose aarch64 wheels use OpenBLAS) measures real forward passes there.
    args = named_args(sys.argv[1:])   # (main() names sys.argv's URLs again)
    # CPython's cyclic collector runs every 700 new containers, and its older generations walk every survivor
    # again: a 200k-tensor header's dicts and TensorInfos cost `stats` a third of its time in collections
    # (docs/performance.md). Collect every 100,000: cycles are still reclaimed, a command's millions of
    # long-lived objects are walked a few times, not hundreds.
    gc.set_threshold(100_000, 50, 100)
    if next((a for a in args if not a.startswith("-")), None) != "run":
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    rc = quick([a for a in args if a != "--debug"], "--debug" in args)
    if rc is not None:   # answered: flush, and leave without freeing the answer's objects one by one
        try:
            sys.stdout.flush()
        except BrokenPipeError:   # the reader left, as quick's own boundary treats it
            pass
        sys.stderr.flush()
        os._exit(rc)
    from .cli import main

    rc = main()
    sys.exit(rc)


if __name__ == "__main__":
    run()
