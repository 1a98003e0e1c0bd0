"""A diffusers pipeline folder's report (schema ckptstat.pipeline/1): every component model_index.json
names, each with weights read as a local model folder is (its own census: unique parameters, buffers
apart), a total per component and overall. Headers and JSON only (docs/adapters.md)."""
from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from ..census import aliases, architecture, parameters
from ..core.files import check_inside, scope_for, scoped
from ..core.switches import switches
from ..errors import CorruptCheckpointError, FileNotFound
from ..formats.configs import load_config
from ..formats.folders import PIPELINE_INDEX, component_name_ok
from ..formats.registry import open_checkpoint, resolve_folder

PIPELINE_SCHEMA = "ckptstat.pipeline/1"
COUNTING = ("per component: unique parameters of its weights (a tied weight once; buffers apart), as "
            "`ckptstat summary COMPONENT_FOLDER` counts them; total = their sum (components share no tensors)")


def pipeline_report(folder: str, progress: Callable[[str], None] | None = None) -> dict:
    index_path = os.path.join(folder, PIPELINE_INDEX)
    rows: list[dict[str, Any]] = []
    with scoped(scope_for(folder, switches().allow_external)):
        # model_index.json is one of the folder's files: a symlink out of it is refused before it is read
        check_inside(index_path, PIPELINE_INDEX)
        index = load_config(index_path)
        for name, value in index.items():
            # `_class_name`, `_diffusers_version`, `_name_or_path` describe the pipeline; other non-pair values
            # are its registered config flags (requires_safety_checker, force_zeros_for_empty_prompt...).
            if name.startswith("_") or not (isinstance(value, list) and len(value) == 2):
                continue
            library, cls = value
            row: dict[str, Any] = {"component": name, "library": library, "class": cls, "status": "weights",
                                   "params": 0, "bytes": 0, "tensors": 0, "buffers": 0}
            rows.append(row)
            if library is None and cls is None:
                row["status"] = "absent"   # [null, null]: saved without it
                continue
            if not component_name_ok(name):
                raise CorruptCheckpointError(index_path, f"component {name!r} is not the name of a subfolder")
            sub = os.path.join(folder, name)
            if not os.path.isdir(sub):
                row["status"] = "no subfolder"
                continue
            check_inside(sub, "component folder", index_path)
            try:
                resolve_folder(sub)
            except FileNotFound:
                row["status"] = "no weights"   # a scheduler, tokenizer or processor
                continue
            if progress is not None:
                progress(name)
            _component(row, sub)
    weighted = [r for r in rows if r["status"] == "weights"]
    return {
        "schema": PIPELINE_SCHEMA,
        "path": folder,
        "index": index_path,
        "pipeline": index.get("_class_name"),
        "diffusers_version": index.get("_diffusers_version"),
        "counting": COUNTING,
        "components": rows,
        "total": {"params": sum(r["params"] for r in weighted), "bytes": sum(r["bytes"] for r in weighted),
                  "tensors": sum(r["tensors"] for r in weighted), "buffers": sum(r["buffers"] for r in weighted),
                  "components": len(weighted)},
    }


def _component(row: dict[str, Any], sub: str) -> None:
    with open_checkpoint(sub) as ckpt:
        params = parameters(ckpt)
        alias_of = aliases(ckpt)
        kept = {t.name for t in params}
        a = architecture(ckpt)
        row.update({
            "path": ckpt.path, "format": ckpt.format, "files": len(ckpt.files),
            "params": sum(t.numel for t in params), "bytes": sum(t.byte_size for t in params), "tensors": len(params),
            "buffers": sum(t.numel for t in ckpt if t.name not in kept and t.name not in alias_of),
            "dtypes": sorted({t.dtype for t in params}), "config": ckpt.config_path,
            "architecture": a["family"] if a["family"] != "unknown" else None,
        })
