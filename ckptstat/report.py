"""Plain, JSON-serialisable reports built from a Checkpoint. No I/O beyond the checkpoint's headers.

Schemas are versioned by the "schema" key; fields are only added within one version.
"""
from __future__ import annotations

import fnmatch
import os
from collections import defaultdict

from . import arch
from .classify import BUCKETS, ROLES, Placement, classify_all
from .tensor import Checkpoint, TensorInfo

SUMMARY_SCHEMA = "ckptstat.summary/1"
TENSORS_SCHEMA = "ckptstat.tensors/1"
COUNTING_RULE = ("unique parameters: tensors whose role is 'parameter', each storage and view counted once "
                 "(a tied weight stored under two names counts once)")


def _memoised(ckpt: Checkpoint, key: str, compute):  # noqa: ANN001, ANN202
    """A derived table computed once per checkpoint (and again if its tensors change)."""
    stamp = (key, len(ckpt.tensors), id(ckpt.config))
    if stamp not in ckpt.memo:
        ckpt.memo[stamp] = compute(ckpt)
    return ckpt.memo[stamp]


def placements(ckpt: Checkpoint) -> dict[str, Placement]:
    return _memoised(ckpt, "placements", lambda c: classify_all((t.name, t.dtype, t.shape) for t in c))


def aliases(ckpt: Checkpoint) -> dict[str, str]:
    """name -> the first name over the same storage and view, for every name that is an alias."""
    return _memoised(ckpt, "aliases", _aliases)


def _aliases(ckpt: Checkpoint) -> dict[str, str]:
    first: dict[tuple, str] = {}
    out: dict[str, str] = {}
    for t in ckpt:
        key = t.alias_key
        if key in first:
            out[t.name] = first[key]
        else:
            first[key] = t.name
    return out


def parameters(ckpt: Checkpoint) -> list[TensorInfo]:
    """The tensors the unique parameter count sums: role parameter, each storage and view once."""
    place, alias_of = placements(ckpt), aliases(ckpt)
    return [t for t in ckpt if t.name not in alias_of and place[t.name].role == "parameter"]


def architecture(ckpt: Checkpoint) -> dict:
    return dict(_memoised(ckpt, "architecture", _architecture))  # a copy: callers may extend it


def _architecture(ckpt: Checkpoint) -> dict:
    a = arch.detect(ckpt.tensors, ckpt.config, ckpt.metadata if ckpt.format == "gguf" else None)
    return {"family": a.family, "source": a.source, "model_type": a.model_type, "architectures": list(a.architectures)}


def _add(row: dict, t: TensorInfo) -> None:
    row["params"] += t.numel
    row["bytes"] += t.byte_size
    row["tensors"] += 1


def summarize(ckpt: Checkpoint) -> dict:
    place = placements(ckpt)
    alias_of = aliases(ckpt)
    zero = lambda: {"params": 0, "bytes": 0, "tensors": 0}  # noqa: E731
    buckets: dict[str, dict] = defaultdict(zero)
    layers: dict[tuple[str, int], dict] = defaultdict(zero)
    by_dtype: dict[str, dict] = defaultdict(zero)
    non_params: dict[str, dict] = {}
    unplaced: list[str] = []
    tensor_bytes = 0
    total = 0
    for t in ckpt:
        if t.name in alias_of:
            continue
        tensor_bytes += t.nbytes
        p = place[t.name]
        if p.role != "parameter":
            row = non_params.setdefault(p.role, {"role": p.role, "tensors": 0, "elements": 0, "bytes": 0, "names": []})
            row["tensors"] += 1
            row["elements"] += t.numel
            row["bytes"] += t.byte_size
            row["names"].append(t.name)
            continue
        total += t.numel
        _add(buckets[p.bucket], t)
        _add(by_dtype[t.dtype], t)
        if p.layer is not None:
            _add(layers[(p.bucket, p.layer)], t)
        if p.bucket == "other":
            unplaced.append(t.name)
    files = [{"path": f, "bytes": os.path.getsize(f)} for f in ckpt.files]
    file_bytes = sum(f["bytes"] for f in files)
    share = lambda n: (n / total) if total else 0.0  # noqa: E731
    return {
        "schema": SUMMARY_SCHEMA,
        "path": ckpt.path,
        "format": ckpt.format,
        "files": files,
        "config": ckpt.config_path,
        "architecture": architecture(ckpt),
        "counting": COUNTING_RULE,
        "parameters": {
            "unique": total,
            "tensors": sum(r["tensors"] for r in buckets.values()),
            "aliases": [{"name": a, "same_as": b} for a, b in alias_of.items()],
        },
        "buckets": [{"bucket": b, **buckets[b], "share": share(buckets[b]["params"])} for b in BUCKETS if b in buckets],
        "layers": [{"bucket": b, "layer": i, **layers[(b, i)]} for b, i in sorted(layers)],
        "dtypes": [{"dtype": d, **r} for d, r in sorted(by_dtype.items(), key=lambda kv: -kv[1]["bytes"])],
        "non_parameters": [non_params[r] for r in ROLES if r in non_params],
        "unplaced": unplaced,
        "storage": {"file_bytes": file_bytes, "tensor_bytes": tensor_bytes, "overhead_bytes": file_bytes - tensor_bytes},
        "metadata": dict(ckpt.metadata),
        "notes": list(ckpt.notes),
        "ties": _tie_verdict(ckpt),
        "analytic": _analytic(ckpt),
    }


def _tie_verdict(ckpt: Checkpoint) -> str:
    from .ties import verdict

    return verdict(ckpt)


def _analytic(ckpt: Checkpoint) -> dict | None:
    """Forward FLOPs per token and weight memory from the architecture (docs/flops_memory.md)."""
    from .arch.model import summary_fields

    return summary_fields(ckpt)


def name_matches(name: str, pattern: str | None) -> bool:
    """The `--filter` rule of every command: a glob (`*attention*`) or a plain substring."""
    return not pattern or fnmatch.fnmatchcase(name, pattern) or pattern in name


def tensors(ckpt: Checkpoint, pattern: str | None = None) -> dict:
    """Every tensor, optionally filtered by a glob (`*attention*`) or substring on its name."""
    place = placements(ckpt)
    alias_of = aliases(ckpt)
    rows = []
    for t in ckpt:
        if not name_matches(t.name, pattern):
            continue
        p = place[t.name]
        rows.append({
            "name": t.name, "bucket": p.bucket, "layer": p.layer, "role": p.role, "dtype": t.dtype,
            "shape": list(t.shape), "numel": t.numel, "bytes": t.byte_size,
            "alias_of": alias_of.get(t.name), "file": os.path.basename(t.file),
        })
    return {"schema": TENSORS_SCHEMA, "path": ckpt.path, "format": ckpt.format, "filter": pattern, "tensors": rows}
