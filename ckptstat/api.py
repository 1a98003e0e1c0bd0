"""Python API helpers beyond open/summarize."""
from __future__ import annotations

from rich.console import Console

from .errors import UsageError
from .formats.registry import open_checkpoint
from .report import summarize


def bert_stat(path, input_size=(1, 1), config=None, show=True) -> dict:
    try:
        batch, seq = (int(x) for x in input_size)
    except (TypeError, ValueError):
        raise UsageError(f"input_size must be (batch, seq_length), got {input_size!r}") from None
    if batch < 1 or seq < 1:
        raise UsageError(f"input_size must be positive, got {input_size!r}")
    r = summarize(open_checkpoint(path, config))
    r["input_size"] = {"batch": batch, "seq": seq}
    if show:
        from .render import render_summary

        render_summary(r, Console(highlight=False), show_layers=True)
    return r
