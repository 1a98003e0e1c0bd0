"""ckptstat: a static checkpoint inspector. Reads weight files directly, never builds the model.

The public API. The package is layered (docs/architecture.md): core -> formats -> naming -> families
-> census -> analysis -> render -> cli, each importing only from those before it.
"""
from __future__ import annotations

import os

from .core import Checkpoint, TensorInfo  # noqa: E402
from .errors import (  # noqa: E402
    CheckpointError,
    CkptstatError,
    CorruptCheckpointError,
    ExternalReferenceError,
    FileNotFound,
    MissingDependencyError,
    UnknownFormatError,
    UnsafeCheckpointError,
    UsageError,
)
from .formats.registry import open_checkpoint  # noqa: E402
from .version import __version__

PathLike = str | os.PathLike[str]


def summarize(path_or_ckpt: PathLike | Checkpoint, config: PathLike | None = None) -> dict:
    """The summary report (schema ckptstat.summary/1) of a path or an open Checkpoint."""
    from .analysis.summary import summarize as _summarize

    ckpt = path_or_ckpt if isinstance(path_or_ckpt, Checkpoint) else open_checkpoint(path_or_ckpt, config)
    return _summarize(ckpt)


def bert_stat(path: PathLike, input_size: tuple[int, int] = (1, 1), config: PathLike | None = None,
              show: bool = True) -> dict:
    """Bertstat's entry point, kept for its users: parameters per bucket for the checkpoint at `path`.

    input_size is (batch, seq_length), as in Bertstat. Returns the summary report, with FLOPs at that
    input size; with show=True also prints it.
    """
    from .analysis.summary import bert_stat as _bert_stat

    try:
        batch, seq = (int(x) for x in input_size)
    except (TypeError, ValueError):
        raise UsageError(f"input_size must be (batch, seq_length), got {input_size!r}") from None
    if batch < 1 or seq < 1:
        raise UsageError(f"input_size must be positive, got {input_size!r}")
    r = _bert_stat(open_checkpoint(path, config), batch, seq)
    if show:
        from rich.console import Console

        from .render import render_summary

        render_summary(r, Console(highlight=False), show_layers=True)
    return r


def adapter_summary(path: PathLike, base: PathLike | None = None, config: PathLike | None = None) -> dict:
    """A PEFT adapter's report (schema ckptstat.adapter/1); with `base` (config: the base's), the base's
    totals and the merged model's beside it (docs/adapters.md)."""
    from .analysis.adapter import adapter_report
    from .formats.folders import adapter_weights

    weights = adapter_weights(os.fspath(path)) or path
    return adapter_report(open_checkpoint(weights), open_checkpoint(base, config) if base is not None else None)


def pipeline_summary(path: PathLike) -> dict:
    """A diffusers pipeline folder's report (schema ckptstat.pipeline/1): parameters per component."""
    from .analysis.pipeline import pipeline_report

    return pipeline_report(os.fspath(path))


__all__ = [
    "Checkpoint", "TensorInfo", "open_checkpoint", "summarize", "bert_stat", "adapter_summary", "pipeline_summary",
    "CkptstatError", "CheckpointError", "CorruptCheckpointError", "FileNotFound", "UnknownFormatError",
    "UnsafeCheckpointError", "ExternalReferenceError", "UsageError", "MissingDependencyError", "__version__",
]
