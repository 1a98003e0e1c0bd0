"""`ckptstat audit`: one record per checkpoint of a fleet, from the library's own analyses (summary,
ties, scan), and the run over many of them: serial, a local process pool, or a Dask cluster
(analysis/audit/cluster.py). Discovery and resume keys: analysis/audit/find.py; the results file:
analysis/audit/store.py. docs/audit.md describes the record.

A record never raises: a checkpoint that cannot be read is a record whose `error` says why. The
timing fields, `seconds` and `worker`, are the only ones that differ between two runs over the same
files (TIMING_FIELDS): records compare equal without them, whatever ran them.
"""
from __future__ import annotations

import os
import time
from collections.abc import Callable, Generator, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from ...census.ties import copies_differ
from ...core.pools import sigint_deferred, start_forkserver, stop, worker_signals
from ...core.urls import concurrently, is_url, parent
from ...errors import CheckpointError, CkptstatError, CorruptCheckpointError, short_text
from ..scan import nothing_inside, pickle_named, scan_url_if_pickle
from .find import Unit, unchanged

AUDIT_SCHEMA = "ckptstat.audit/1"
SUMMARY_SCHEMA = "ckptstat.audit_summary/1"
TIMING_FIELDS = ("seconds", "worker")
NOT_SCANNED = "not scanned (remote)"   # a URL's pickle whose scan the store cut short (a 404, a limit): never safe
SCAN_ORDER = ("unsafe", "unknown", "unreadable", NOT_SCANNED, "safe")   # worst first: a unit's verdict is its worst file's
TIE_VERDICTS = ("broken", "unchecked", "duplicated", "tied", "none", "error")
MAX_ATTEMPTS = 3   # a unit whose worker died this many times is recorded as an error


def _error_text(e: BaseException) -> str:
    if isinstance(e, CkptstatError):
        return short_text(e) if not isinstance(e, CheckpointError) else f"{e.path}: {short_text(Exception(e.reason))}"
    return f"internal error: {type(e).__name__}: {short_text(e)}"


def _scan_url(f: str) -> dict[str, Any] | None:
    """A URL's scan row, with range requests (analysis/scan/ scan_url), as the local file's would be; None when its
    bytes hold no pickle."""
    try:
        r = scan_url_if_pickle(f)   # judged by its bytes, as a local file is
    except CorruptCheckpointError as e:   # torch.load cannot read it: as locally
        return {"file": f, "status": "unreadable", "unsafe_globals": [], "error": _error_text(e)}
    except CkptstatError as e:   # the store failed (404, a limit): never `safe`, and says why
        return {"file": f, "status": NOT_SCANNED, "unsafe_globals": [], "error": _error_text(e)}
    return None if r is None else {"file": f, "status": r["status"], "unsafe_globals": list(r["unsafe_globals"])}


def _scan(files: Iterable[str]) -> dict[str, Any]:
    """The scan verdict of every pickle-bearing file (analysis/scan/; formats/torch scan): what
    torch.load(weights_only=False) would run. `none` when the unit holds no pickle."""
    # torch.load's path, or np.load's and Keras's (analysis/scan/loaders.py)
    from ..scan import scan_local as scan_file

    files = list(files)
    urls = [f for f in files if is_url(f)]   # their first bytes fetched together: a round trip, not one a shard
    remote = dict(zip(urls, concurrently(_scan_url, urls))) if urls else {}
    rows: list[dict[str, Any]] = []
    for f in files:
        if is_url(f):
            row = remote[f]
            if row is not None:
                rows.append(row)
            continue
        if not os.path.isfile(f):
            continue
        try:   # a file not named as a pickle counts when a loader would read a pickle from it (scan_local answers)
            r = scan_file(f)
            if nothing_inside(r):   # an archive of images or text
                continue
            rows.append({"file": f, "status": r["status"], "unsafe_globals": list(r["unsafe_globals"])})
        except CkptstatError as e:   # (no pickle a loader reads, unless it says pickle or scan could not look: as scan)
            if pickle_named(f) or not isinstance(e, CorruptCheckpointError):
                rows.append({"file": f, "status": "unreadable", "unsafe_globals": [], "error": _error_text(e)})
        except Exception as e:  # noqa: BLE001 - a record never raises
            rows.append({"file": f, "status": "unreadable", "unsafe_globals": [], "error": _error_text(e)})
    statuses = {r["status"] for r in rows}
    verdict = next((s for s in SCAN_ORDER if s in statuses), "none")
    return {"verdict": verdict, "files": rows}


def _ties(ckpt: Any, report: dict[str, Any], values: bool) -> dict[str, Any]:
    """The ties verdict: `broken` when a tie the config or architecture declares is stored twice with
    different values (transformers 5.25 then leaves it untied, census/ties.py declined_ties; transformers 4 tied it
    and lost one copy silently), `unchecked` when
    such a pair was not compared (values=False), `duplicated` when the copies are equal, `tied` when
    every tie is aliased or absent, `none` without ties. Discrepancies: every counting convention
    (analysis/ties.py) whose total differs from the unique count, with the difference."""
    pairs = []
    for t in report["ties"]:
        row = {"alias": t["alias"], "target": t["target"], "evidence": t["evidence"], "status": t["status"]}
        if t["status"] == "stored twice" and t["evidence"] != "identical contents":
            a, b = ckpt.tensors.get(t["target"]), ckpt.tensors.get(t["alias"])
            if values and a is not None and b is not None and a.dtype == b.dtype and a.shape == b.shape:
                differ = copies_differ(ckpt, t["target"], t["alias"], whole=True)   # (the census's comparison)
                row["equal_values"] = None if differ is None else not differ
            else:
                row["equal_values"] = None
        pairs.append(row)
    for t in report.get("declined", []):   # found different from a few reads already: not tied
        pairs.append({"alias": t["alias"], "target": t["target"], "evidence": t["evidence"], "status": t["status"],
                      "equal_values": False})
    compared = [p.get("equal_values") for p in pairs if "equal_values" in p]
    verdict = ("broken" if False in compared else "unchecked" if None in compared else "duplicated" if compared
               else "tied" if pairs else "none")
    rows = report["counting"]["rows"]
    unique = rows[0]["params"]
    discrepancies = [{"convention": r["convention"], "params": r["params"], "delta": r["params"] - unique}
                     for r in rows[1:] if r["params"] != unique]
    return {"verdict": verdict, "count": len(pairs), "pairs": pairs, "discrepancies": discrepancies}


def _config(report: dict[str, Any]) -> dict[str, Any]:
    """The config cross-check (analysis/ties.py cross_check) in counts, and how far the resolved model's
    parameters() total drifts from the file's unique count (`delta`)."""
    check = report["cross_check"]
    if not check["available"]:
        return {"verdict": "unavailable", "reason": check["reason"]}
    missing = [m for m in check["missing"] if m["why"] == "not in the file"]
    rows = report["counting"]["rows"]
    delta = rows[1]["params"] - rows[0]["params"]
    bad = missing or check["unexpected"] or check["shape_mismatches"]
    return {"verdict": "mismatch" if bad else "match", "model": check["model"], "expected": check["expected"],
            "missing": len(missing), "unexpected": len(check["unexpected"]),
            "shape_mismatches": len(check["shape_mismatches"]), "restacked": len(check["restacked"]),
            "relaid": len(check["relaid"]), "delta": delta,
            "examples": [m["name"] for m in missing[:3]] + [u["name"] for u in check["unexpected"][:3]]
            + [s["name"] for s in check["shape_mismatches"][:3]]}


def _not_a_model(summary: dict[str, Any]) -> dict[str, Any]:
    """No config cross-check for a unit without model parameters (an optimizer.pt, a scheduler.pt outside its
    Trainer folder): its config.json describes the model beside it, not this file."""
    from ...census import optimizer_only_text

    held = summary["optimizer_state"]
    return {"verdict": "unavailable", "reason": "the unit holds " + (optimizer_only_text(held) if held else
                                                                     "no model parameters")}


def _training(summary: dict[str, Any]) -> dict[str, Any] | None:
    """What a training checkpoint says of its run and what its optimizer state holds (docs/audit.md)."""
    t, held = summary["training"] or {}, summary["optimizer_state"]
    if not t and not held:
        return None
    return {**{k: t.get(k) for k in ("library", "global_step", "epoch", "learning_rate")}, "optimizer_state": held}


def _rel(f: str, unit_path: str) -> str:
    if is_url(unit_path):
        folder = parent(unit_path) + "/"
        return f[len(folder):] if f.startswith(folder) else f
    return os.path.relpath(f, os.path.dirname(unit_path) or ".")


def blank_record(unit: Unit) -> dict[str, Any]:
    """`etag` and `fetched` are a URL unit's (null for a local one): its files' versions (the resume key
    with path and bytes) and what auditing it fetched, from cold caches."""
    url = is_url(unit.path)
    return {"schema": AUDIT_SCHEMA, "path": unit.path, "files": [_rel(f, unit.path) for f in unit.files],
            "bytes": unit.bytes, "mtime_ns": None if url else unit.mtime_ns, "etag": unit.etag, "format": None,
            "parameters": None, "parameters_recorded": None, "tensor_bytes": None, "dtypes": {}, "buckets": {},
            "ties": None, "scan": None, "config": None, "error": None, "fetched": None, "training": None}


# (core.limits.Limits, core.switches.Switches, core.urls.logins()): the CLI's --limit, and --allow-external,
# --allow-full-download, --pickled-objects, and the user:password@ of the URLs it names
Settings = tuple[Any, Any, dict[str, str]]


def settings() -> Settings:
    """This process's limits, reading switches and the logins of the URLs the user named (core/urls.py `named`),
    for tasks run in other processes or machines."""
    from ...core import limits, switches, urls

    return limits.limits(), switches.switches(), urls.logins()


def audit_record(unit: Unit, values: bool = True, worker: str | None = None,
                 using: Settings | None = None) -> dict[str, Any]:
    """One checkpoint's record (docs/audit.md). Never raises: what goes wrong is its `error`.
    `using`: the settings of the process that asked (a worker's own are defaults)."""
    with applied(using):
        return _record(unit, values, worker)


@contextmanager
def applied(using: Settings | None) -> Iterator[None]:
    """Run with the asking process's settings (None: this process's own)."""
    from ...core import limits, switches, urls

    if using is None:
        yield
        return
    old = settings()
    limits.reset(using[0])
    switches.set_switches(using[1])
    urls.set_logins(using[2])
    try:
        yield
    finally:
        limits.reset(old[0])
        switches.set_switches(old[1])
        urls.set_logins(old[2])


def _record(unit: Unit, values: bool, worker: str | None) -> dict[str, Any]:
    from ...formats.registry import open_checkpoint
    from ..summary import summarize
    from ..ties import audit as ties_audit

    t0 = time.perf_counter()
    rec = blank_record(unit)
    meter = None
    if is_url(unit.path):   # cold caches: the counts are this unit's alone, whichever process runs it
        from ... import sources

        sources.forget_files()
        meter, before = sources.METER, sources.METER.report()
    try:
        if unit.error:
            raise CkptstatError(unit.error)
        if unit.files and not unchanged(unit):
            raise CheckpointError(unit.path, "changed since the audit found it (replaced, or a link put in its place): "
                                             "not read; the next run audits it as it is then")
        rec["scan"] = _scan(unit.files or (unit.path,))
        if not unit.files:
            raise CheckpointError(unit.path, "no such file or folder")
        ckpt = open_checkpoint(unit.path)
        s = summarize(ckpt)
        rec["format"] = s["format"]
        rec["parameters"] = s["parameters"]["unique"]
        rec["parameters_recorded"] = s["parameters"]["recorded"]
        rec["tensor_bytes"] = s["storage"]["tensor_bytes"]
        rec["dtypes"] = {d["dtype"]: d["bytes"] for d in s["dtypes"]}
        rec["buckets"] = {b["bucket"]: b["params"] for b in s["buckets"]}
        rec["training"] = _training(s)
        try:   # the file was read: an analysis that trips is that field's error, not the record's
            t = ties_audit(ckpt)
            rec["ties"] = _ties(ckpt, t, values)
            rec["config"] = _config(t) if s["model_weights"] else _not_a_model(s)
        except Exception as e:  # noqa: BLE001
            rec["ties"] = {"verdict": "error", "error": _error_text(e)}
            rec["config"] = {"verdict": "error", "error": _error_text(e)}
        def same(f: str) -> str:
            return f if is_url(f) else os.path.abspath(f)

        extra = [f for f in ckpt.files if same(f) not in {same(g) for g in unit.files}]
        if extra:   # a file the reader followed that discovery did not claim (scan it too)
            more = _scan(extra)
            rec["scan"]["files"] += more["files"]
            statuses = {r["status"] for r in rec["scan"]["files"]}
            rec["scan"]["verdict"] = next((x for x in SCAN_ORDER if x in statuses), "none")
    except Exception as e:  # noqa: BLE001 - a record never raises: the error is its field
        rec["error"] = _error_text(e)
    if meter is not None:
        rec["fetched"] = meter.since(before)
    rec["seconds"] = round(time.perf_counter() - t0, 6)
    rec["worker"] = worker or f"pid:{os.getpid()}"
    return rec


def strip_timing(rec: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in rec.items() if k not in TIMING_FIELDS}


# --- running many ------------------------------------------------------------------------------------

def run_serial(units: Iterable[Unit], values: bool = True) -> Iterator[dict[str, Any]]:
    for u in units:
        yield audit_record(u, values, "local")


def _pool_task(unit: Unit, values: bool, using: Settings) -> dict[str, Any]:
    return audit_record(unit, values, using=using)


def run_pool(units: list[Unit], workers: int, values: bool = True) -> Iterator[dict[str, Any]]:
    """Records as they finish, from `workers` processes. A worker that dies (killed, out of memory)
    breaks the pool; the units that were in flight are then retried one at a time, each alone in a
    fresh one-process pool (so that an innocent unit is never blamed), and a unit whose process dies
    MAX_ATTEMPTS times in all becomes an error record; the units not yet started go on in a fresh pool."""
    suspects: list[Unit] = []
    todo = list(units)
    while todo:
        todo = yield from _pool_pass(todo, workers, values, suspects)
    done = len(units) - len(suspects)
    for unit in suspects:
        for _ in range(MAX_ATTEMPTS - 1):
            lost: list[Unit] = []
            yield from _pool_pass([unit], 1, values, lost)
            if not lost:
                done += 1
                break
        else:
            if done == 0:   # not one unit audited: the processes cannot start, the units are not at fault
                raise CkptstatError("the audit's worker processes die before auditing anything "
                                    "(run ckptstat from a script or the command line, or --workers 1)")
            yield lost_record(unit, MAX_ATTEMPTS)


def _context() -> Any:
    """forkserver (no fork of a process whose progress-bar thread may hold a lock), with the readers
    and analyses imported once in the server: each worker forks from it warm, instead of importing
    them anew (seconds on a busy machine)."""
    import multiprocessing as mp

    from ...formats import registry

    if "forkserver" not in mp.get_all_start_methods():
        return mp.get_context("spawn")
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload([__name__, "ckptstat.analysis.summary", "ckptstat.analysis.ties",
                                *(f"ckptstat.formats.{m}" for m in registry._MODULES)])
    start_forkserver()
    return ctx


def _pool_pass(units: list[Unit], workers: int, values: bool,
               lost: list[Unit]) -> Generator[dict[str, Any], None, list[Unit]]:
    """Run `units` on a pool, at most 2 x workers in flight (so a break loses only those, into `lost`);
    returns the units not started when the pool broke."""
    from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
    from concurrent.futures.process import BrokenProcessPool

    with sigint_deferred():   # (its queues' semaphores start multiprocessing's resource tracker)
        pool = ProcessPoolExecutor(max(1, workers), mp_context=_context(), initializer=worker_signals)
    using = settings()
    queue = list(reversed(units))
    pending: dict[Future[dict[str, Any]], Unit] = {}
    broken = False
    try:
        while queue or pending:
            while queue and not broken and len(pending) < 2 * max(1, workers):
                try:
                    with sigint_deferred():
                        pending[pool.submit(_pool_task, queue[-1], values, using)] = queue[-1]
                except BrokenProcessPool:   # broke before we saw a failed future: the rest waits
                    broken = True
                    break
                queue.pop()
            if not pending:
                break
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                unit = pending.pop(fut)
                try:
                    rec = fut.result()
                except BrokenProcessPool:
                    broken = True
                    lost.append(unit)
                    continue
                yield rec
    finally:
        stop(pool, failed=broken)
    return list(reversed(queue))


def lost_record(unit: Unit, attempts: int, why: str = "") -> dict[str, Any]:
    rec = blank_record(unit)
    rec["error"] = (f"{unit.path}: the worker auditing it died {attempts} time(s) (killed, or out of memory?)"
                    + (f": {why}" if why else ""))
    rec["seconds"], rec["worker"] = 0.0, None
    return rec


Runner = Callable[[list[Unit], bool], Iterator[dict[str, Any]]]


def run(units: list[Unit], workers: int = 1, values: bool = True,
        progress: Callable[[dict[str, Any]], None] | None = None, cluster: Runner | None = None) -> Iterator[dict[str, Any]]:
    """Records of `units` as they finish: serial (workers 1), a process pool, or `cluster(units, values)`,
    records computed elsewhere (a Dask cluster: analysis/audit_dask.runner(scheduler))."""
    elsewhere = cluster is not None or (workers > 1 and len(units) > 1)
    if cluster is not None:
        it = cluster(units, values)
    elif elsewhere:
        it = run_pool(units, workers, values)
    else:
        it = run_serial(units, values)
    for rec in it:
        if elsewhere and rec.get("fetched"):   # what the workers fetched counts in this command's `fetched`
            from ... import sources

            sources.METER.merge(rec["fetched"])
        if progress:
            progress(rec)
        yield rec


# --- the summary ---------------------------------------------------------------------------------------

def summarize_records(records: list[dict[str, Any]], top: int = 10) -> dict[str, Any]:
    """Counts by verdict (scan, ties, config, errors) and the largest discrepancies: the records whose
    resolved model's parameters() total drifts most from the file's unique count (the config
    cross-check). Counting-convention differences stay in each record (`ties.discrepancies`): a tied
    model's "every name counted" total always parts from its unique count, which is no fault."""
    def count(field: str) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in records:
            v = (r.get(field) or {}).get("verdict") or ("error" if r.get("error") else "n/a")
            out[v] = out.get(v, 0) + 1
        return dict(sorted(out.items(), key=lambda kv: -kv[1]))

    drifts = []
    for r in records:
        cfg = r.get("config") or {}
        if cfg.get("delta"):
            drifts.append({"path": r["path"], "what": str(cfg.get("model")), "delta": cfg["delta"],
                           "missing": cfg["missing"], "unexpected": cfg["unexpected"],
                           "shape_mismatches": cfg["shape_mismatches"]})
    drifts.sort(key=lambda d: (-abs(d["delta"]), d["path"], d["what"]))
    return {
        "schema": SUMMARY_SCHEMA,
        "records": len(records),
        "errors": sum(1 for r in records if r.get("error")),
        "bytes": sum(r.get("bytes") or 0 for r in records),
        "parameters": sum(r.get("parameters") or 0 for r in records),
        "scan": count("scan"),
        "ties": count("ties"),
        "config": count("config"),
        "unsafe": sorted(r["path"] for r in records if (r.get("scan") or {}).get("verdict") == "unsafe"),
        # scan could not tell what torch.load would run (never "safe"): a gate must not pass it either
        "unknown": sorted(r["path"] for r in records if (r.get("scan") or {}).get("verdict") == "unknown"),
        # a file scan could not read (damaged, or not readable by this user while a loader may read it): not vouched for
        "unreadable": sorted(r["path"] for r in records if (r.get("scan") or {}).get("verdict") == "unreadable"),
        "broken_ties": sorted(r["path"] for r in records if (r.get("ties") or {}).get("verdict") == "broken"),
        "largest_discrepancies": drifts[:top],
        "error_examples": [{"path": r["path"], "error": r["error"]} for r in records if r.get("error")][:top],
    }
