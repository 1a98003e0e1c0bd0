"""`ckptstat summary` on what is not one whole model: a PEFT adapter (with `--base`, beside its base
model and the merged model) and a diffusers pipeline folder (a total per component). docs/adapters.md."""
from __future__ import annotations

import os
from typing import Optional

import typer

from .common import console, emit_json

BaseOpt = typer.Option(None, "--base", help="A PEFT adapter's base model (file or folder): shows the adapter beside "
                       "the base's totals and the merged model's.")


def summary_other(path: str, base: Optional[str], as_json: bool, config: Optional[str]) -> bool:
    """Report an adapter or a pipeline and return True; False when `path` is neither (the plain summary)."""
    from ..core.files import as_snapshot
    from ..errors import UsageError
    from ..formats.folders import adapter_weights, is_pipeline

    path = as_snapshot(path)   # a cache's models--org--name: the snapshot refs/main names, as open_checkpoint reads it
    if is_pipeline(path):
        if base is not None:
            raise UsageError("--base applies to a PEFT adapter, not to a diffusers pipeline")
        from ..analysis.pipeline import pipeline_report

        r = pipeline_report(path)
        _show(r, as_json, "render_pipeline")
        return True
    weights = adapter_weights(path)
    if weights is None:
        if base is not None:
            raise UsageError(f"--base applies to a PEFT adapter (a folder with adapter_config.json); {path} is not one")
        return False
    from .. import open_checkpoint
    from ..analysis.adapter import adapter_report

    ckpt = open_checkpoint(weights)
    base_ckpt = open_checkpoint(base, config) if base is not None else None
    r = adapter_report(ckpt, base_ckpt)
    from ..formats.training import trainer_folder

    # a Trainer's checkpoint-N/ of a PEFT model: its step, learning rate and optimizer state
    if weights != path and trainer_folder(os.listdir(path)):
        from ..census import optimizer_state

        whole = open_checkpoint(path)
        r["training"], r["optimizer_state"] = whole.training, optimizer_state(whole)
    _show(r, as_json, "render_adapter")
    return True


def _show(r: dict, as_json: bool, renderer: str) -> None:
    if as_json:
        emit_json(r)
    else:
        from ..render import adapter

        getattr(adapter, renderer)(r, console())
