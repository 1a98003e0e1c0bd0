"""Runs many CLI invocations for tests/test_hostile_corpus.py, each in its own forked process with
bounded resources, from one interpreter that imports ckptstat and its libraries once.

Never imported by pytest: started as `python tests/hostile_runner.py`. Reads a JSON list of runs
`[{"id", "argv", "out", "err"}]` on stdin; for each run forks a child that caps its address space
(RLIMIT_AS: the runner's own size + HEADROOM) and its CPU time (RLIMIT_CPU: TIMEOUT_S, the hang guard
for loops; SIGXCPU kills it), arms SIGALRM (WALL_S, the guard for a blocked read; the default action
kills it), sends fd 1 and 2 to the files `out` and `err`, and calls `ckptstat.cli.main`. CPU time,
not wall time, bounds the work: on a loaded machine wall time says little.
The runner reaps each child with os.wait4 and prints one JSON line per run: `{"id", "rc", "signal",
"maxrss_kib", "seconds"}` (rc None when a signal ended it). Two children run at a time.
"""
from __future__ import annotations

import json
import os
import resource
import signal
import sys
import time

for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(var, "1")
os.environ.setdefault("COLUMNS", "100")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

# Everything a command may import, imported before the first fork: each child starts warm.
import h5py  # noqa: E402,F401
import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.backends.backend_agg  # noqa: E402,F401
import matplotlib.figure  # noqa: E402,F401
import numpy  # noqa: E402,F401

import ckptstat.analysis.stats  # noqa: E402,F401
import ckptstat.analysis.summary  # noqa: E402,F401
import ckptstat.analysis.ties  # noqa: E402,F401
import ckptstat.census.model  # noqa: E402,F401
import ckptstat.render  # noqa: E402,F401
import ckptstat.render.plots  # noqa: E402,F401
from ckptstat.cli import main  # noqa: E402
from ckptstat.formats import registry  # noqa: E402

registry._load_all()


def _warm_up() -> None:
    """One command run here, before any fork: typer builds its click command on the first call (about 0.2 s
    of CPU evaluating annotations), which every child would otherwise repeat."""
    sample = os.path.join(ROOT, "fixtures", "bert-tiny", "model.safetensors")
    saved = os.dup(1), os.dup(2)
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 1)
        os.dup2(null, 2)
        main(["summary", sample])
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (null, *saved):
            os.close(fd)


TIMEOUT_S = int(os.environ.get("CKPTSTAT_HOSTILE_TIMEOUT_S", 10))
WALL_S = int(os.environ.get("CKPTSTAT_HOSTILE_WALL_S", 120))
HEADROOM = int(os.environ.get("CKPTSTAT_HOSTILE_HEADROOM", 1 << 30))
PARALLEL = 2


def _vm_size() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def _child(run: dict, limit: int) -> None:
    rc = 99
    try:
        if limit:
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        resource.setrlimit(resource.RLIMIT_CPU, (TIMEOUT_S, TIMEOUT_S + 1))
        signal.alarm(WALL_S)
        for fd, name in ((1, run["out"]), (2, run["err"])):
            f = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(f, fd)
            os.close(f)
        rc = main(run["argv"])
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:   # noqa: BLE001 - reported as rc 99 with the traceback in `err`
        import traceback

        traceback.print_exc()
        sys.stderr.flush()
    os._exit(rc if isinstance(rc, int) else 98)


def serve(runs: list[dict]) -> None:
    _warm_up()
    vm = _vm_size()
    limit = vm + HEADROOM if vm else 0
    running: dict[int, tuple[dict, float]] = {}
    queue = list(runs)
    while queue or running:
        while queue and len(running) < PARALLEL:
            run = queue.pop(0)
            sys.stdout.flush()
            pid = os.fork()
            if pid == 0:
                _child(run, limit)
            running[pid] = (run, time.monotonic())
        pid, status, usage = os.wait4(-1, 0)
        if pid not in running:
            continue
        run, t0 = running.pop(pid)
        sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
        rc = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
        print(json.dumps({"id": run["id"], "rc": rc, "signal": sig, "maxrss_kib": usage.ru_maxrss,
                          "cpu_s": round(usage.ru_utime + usage.ru_stime, 3),
                          "seconds": round(time.monotonic() - t0, 3)}), flush=True)


if __name__ == "__main__":
    serve(json.load(sys.stdin))
