"""`ckptstat report`: one checkpoint's summary, ties, FLOPs, memory and weight statistics gathered in
one plain dict (schema ckptstat.report/1) for the markdown and HTML renderers (render/report.py).

Each part is the report its own command gives (`summary`, `ties`, `flops`, `memory`, `stats`), under
its own key with its own schema. A part that cannot apply is None, and `skipped[part]` says why: no
architecture ckptstat models (no FLOPs, and memory from the tensors alone), no value read (--no-stats),
no numeric parameter to read. A part never fails the report; a broken file still does (one line)."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..census.model import from_checkpoint, weights_of
from ..core import Checkpoint
from ..errors import CkptstatError, UsageError
from ..families.framework.spec import audio_inputs, check_seq, default_seq, image_fields
from . import flops as fl
from . import memory as mem
from .stats import DEFAULT_STATS_CHUNK, Progress, StatsRun, collect
from .summary import summarize
from .ties import audit

REPORT_SCHEMA = "ckptstat.report/1"
PARTS = ("summary", "ties", "flops", "memory", "stats")


@dataclass
class ReportRun:
    report: dict
    stats: StatsRun | None   # the streamed accumulators the plots are drawn from (not part of the JSON)


def build(ckpt: Checkpoint, batch: int = 1, seq: int | None = None, read_values: bool = True,
          chunk_bytes: int = DEFAULT_STATS_CHUNK, workers: int = 1, progress: Progress | None = None) -> ReportRun:
    """The report of an open checkpoint. `seq` None: the length `flops` and `memory` default to
    (families.framework.spec.default_seq; an audio model's mel frames). `read_values` False: headers only."""
    if batch < 1 or (seq is not None and seq < 1):
        raise UsageError(f"--batch and --seq must be positive integers, got {batch} and {seq}")
    skipped: dict[str, str] = {}
    flops = memory = None
    try:
        model = from_checkpoint(ckpt)
    except UsageError as e:   # no family models it (NoArchitecture), or a config it cannot use
        model, why = None, str(e)
    if model is not None:
        lengths, dec_seq = audio_inputs(model.spec, [seq] if seq else [], None)
        n = lengths[0] if lengths else default_seq(model.spec)
        check_seq(model.spec, n, dec_seq)   # a --seq the model cannot run is the user's error, as on `flops`
        flops = _part(skipped, "flops", lambda: fl.report(model, batch, [n], dec_seq) | image_fields(model.spec))
        memory = _part(skipped, "memory", lambda: mem.report(model, batch, n, dec_seq) | image_fields(model.spec))
    else:
        skipped["flops"] = f"no architecture ckptstat can model: {why}"
        weights = weights_of(ckpt, why)
        if weights is not None:   # what the tensors alone give: weights, gradients, optimizer state
            memory = mem.weights_report(weights, batch, seq or 128)
        else:
            skipped["memory"] = f"no parameter tensor to count, and {skipped['flops']}"
    run = None
    if not read_values:
        skipped["stats"] = "--no-stats: a header-only report, no tensor value read"
    else:
        run = collect(ckpt, chunk_bytes=chunk_bytes, workers=workers, progress=progress)
        if not run.report["tensors"]:
            why = "no numeric parameter tensor to read"
            if run.report["skipped"]:
                why += f" ({len(run.report['skipped'])} tensor(s) skipped: {run.report['skipped'][0]['reason']}, ...)"
            skipped["stats"], run = why, None
    report = {
        "schema": REPORT_SCHEMA,
        "path": ckpt.path,
        "format": ckpt.format,
        "config": ckpt.config_path,
        "options": {"batch": batch, "seq": seq, "read_values": read_values},
        "summary": summarize(ckpt, seq),   # its FLOPs-per-token line at the report's seq, as the FLOPs part
        "ties": audit(ckpt),
        "flops": flops,
        "memory": memory,
        "stats": run.report if run is not None else None,
        "skipped": skipped,
    }
    return ReportRun(report, run)


def _part(skipped: dict[str, str], part: str, make: Callable[[], dict]) -> dict | None:
    """One analytic part; when the analytic model fails on this checkpoint, None and why (not fatal)."""
    try:
        return make()
    except CkptstatError as e:
        skipped[part] = f"the analytic model could not be applied: {e}"
        return None


def report(ckpt: Checkpoint, **kw) -> dict:
    """The report dict of an open Checkpoint (see `build` for the options)."""
    return build(ckpt, **kw).report
