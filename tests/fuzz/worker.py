"""The fuzz worker: a separate process that opens one hostile case at a time and says what happened.

Run by tests/fuzz/fuzzlib.py (one long-lived process per test session), never by pytest itself. A
separate process because (1) its address space is capped with RLIMIT_AS, so a reader that tries to
allocate what a hostile header claims fails here instead of swapping the machine; (2) a crash in a C
library (HDF5) kills the worker, not the test run, and is reported as an escape.

Protocol: one JSON request per line on stdin, {"path": ..., "action": "open" | "scan" | "scan_path", "chunk": N}
(`scan`: torch.load's trace, analysis.scan.torch_load.scan; `scan_path`: what `ckptstat scan` runs, every loader's
rules); a path may be a file or a folder (a DCP folder, a SavedModel);
one JSON reply per line on stdout:
  {"outcome": "ok" | "<CkptstatError subclass name>", "message": ..., "escape": null | traceback,
   "peak": bytes traced by tracemalloc, "read": value bytes read, "seconds": ...}
"""
from __future__ import annotations

import hashlib
import json
import os
import resource
import sys
import time
import traceback
import tracemalloc

for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(var, "1")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

import h5py  # noqa: E402,F401  (imported before the cap: the baseline includes every library)
import numpy  # noqa: E402,F401

from ckptstat import CkptstatError, open_checkpoint  # noqa: E402
from ckptstat.analysis.scan import scan_path  # noqa: E402
from ckptstat.analysis.scan.torch_load import scan  # noqa: E402
from ckptstat.analysis.summary import summarize  # noqa: E402
from ckptstat.formats import registry  # noqa: E402

registry._load_all()
# Address space the worker may grow by, beyond what it holds once every reader is imported.
HEADROOM = int(os.environ.get("CKPTSTAT_FUZZ_HEADROOM", 1 << 30))


def _vm_size() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def cap_memory() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = _vm_size() + HEADROOM
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


def folder_state(folder: str) -> dict[str, tuple[int, int, str]]:
    """relative name -> (size, mtime_ns, sha256) of every file in the case's folder and its subfolders
    (a folder -> its mtime alone)."""
    out = {}
    for d, dirs, names in os.walk(folder):
        for name in sorted(dirs):
            p = os.path.join(d, name)
            out[os.path.relpath(p, folder) + "/"] = (0, os.stat(p).st_mtime_ns, "")
        for name in sorted(names):
            p = os.path.join(d, name)
            st = os.stat(p)
            with open(p, "rb") as f:
                out[os.path.relpath(p, folder)] = (st.st_size, st.st_mtime_ns, hashlib.sha256(f.read()).hexdigest())
    return out


def _hidden(e: BaseException) -> BaseException | None:
    """A MemoryError behind one of our errors (`raise ... from None` keeps __context__): the reader tried to
    allocate what the file said, and the cap stopped it. A RecursionError behind one is not an escape: the readers
    turn the interpreter's recursion limit on nesting a file describes into their error on purpose (the npy
    header's literal, the pickle machine, jsontext), and the limit is the bound."""
    seen = set()
    c: BaseException | None = e
    while c is not None and id(c) not in seen:
        seen.add(id(c))
        if isinstance(c, MemoryError):
            return c
        c = c.__cause__ or c.__context__
    return None


def run_case(path: str, action: str, chunk: int, budget: int) -> dict:
    read = 0
    if action in ("scan", "scan_path"):
        r = scan(path) if action == "scan" else scan_path(path)
        json.dumps(r)
        if r.get("status", "safe") not in ("safe", "unsafe", "unknown"):
            raise AssertionError(f"scan answered status {r.get('status')!r}, not safe/unsafe/unknown")
        return {"read": 0}
    ckpt = open_checkpoint(path)
    json.dumps(summarize(ckpt))
    for t in list(ckpt):
        if t.dt.kind == "str":       # string tensors (TF) have no numeric values to read
            continue
        for values in ckpt.iter_chunks(t.name, chunk):
            read += values.nbytes
            if read > budget:       # a file may legitimately describe more values than it stores
                return {"read": read, "budget_hit": True}
    return {"read": read}


def handle(req: dict) -> dict:
    path, action = req["path"], req.get("action", "open")
    folder = path if os.path.isdir(path) else (os.path.dirname(path) or ".")
    before = folder_state(folder)
    budget = int(req.get("budget", 64 << 20))
    reply: dict = {"outcome": "ok", "message": None, "escape": None}
    tracemalloc.start()
    tracemalloc.reset_peak()
    t0 = time.perf_counter()
    try:
        reply.update(run_case(path, action, int(req.get("chunk", 256)), budget))
    except CkptstatError as e:
        reply["outcome"] = type(e).__name__
        reply["message"] = str(e)
        hidden = _hidden(e)
        if hidden is not None:
            reply["escape"] = (f"{type(e).__name__} hides a {type(hidden).__name__} (the reader tried to "
                               f"allocate what the file claims): {e}")
    except BaseException as e:  # noqa: BLE001 - the point is to see anything that escapes
        reply["outcome"] = type(e).__name__
        reply["message"] = str(e)[:500]
        reply["escape"] = "".join(traceback.format_exception(type(e), e, e.__traceback__))[-4000:]
    reply["seconds"] = time.perf_counter() - t0
    reply["peak"] = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    after = folder_state(folder)
    if after != before:
        changed = sorted(set(before) ^ set(after) | {k for k in before if k in after and before[k] != after[k]})
        reply["escape"] = (reply["escape"] or "") + f"\nthe case's folder changed: {changed}"
    return reply


def main() -> None:
    out = sys.stdout
    sys.stdout = sys.stderr     # nothing a reader prints may corrupt the protocol
    cap_memory()
    for line in sys.stdin:
        if not line.strip():
            continue
        reply = handle(json.loads(line))
        out.write(json.dumps(reply) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
