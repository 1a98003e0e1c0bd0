"""The summary's quantisation section and the tensor list's quantisation fields (docs/quantized.md), from
the census's quantised-weight layout (census/quant/). Headers and config only."""
from __future__ import annotations

from ..census import placements
from ..census.quant import bits_per_weight, layout
from ..core import Checkpoint

BITS_RULE = ("bits per weight = stored bytes x 8 / logical parameters; a quantised weight's stored bytes are those of "
             "all its pieces (packed values, scales, zero points, group indices, absmax, quant state...)")


def quantization(ckpt: Checkpoint) -> dict | None:
    """How the checkpoint is quantised: method, where it was recognised, the config fields that matter,
    the quantised weights' logical parameters, stored bytes and bits per weight, and the stored tensors
    by role. None when nothing is quantised."""
    q = layout(ckpt)
    if q is None:
        return None
    place = placements(ckpt)
    roles: dict[str, dict] = {}
    for name in q.roles:
        t = ckpt.tensors[name]
        row = roles.setdefault(place[name].role, {"role": place[name].role, "tensors": 0, "bytes": 0, "example": name})
        row["tensors"] += 1
        row["bytes"] += t.nbytes
    by_method: dict[str, dict] = {}
    for w in q.weights.values():
        row = by_method.setdefault(w.method, {"method": w.method, "weights": 0, "logical_params": 0, "stored_bytes": 0,
                                              "bits": w.bits})
        row["weights"] += 1
        row["logical_params"] += w.numel
        row["stored_bytes"] += w.stored_bytes
        if row["bits"] != w.bits:
            row["bits"] = None
    for row in by_method.values():
        row["bits_per_weight"] = bits_per_weight(row["stored_bytes"], row["logical_params"])
    logical_params = sum(r["logical_params"] for r in by_method.values())
    stored_bytes = sum(r["stored_bytes"] for r in by_method.values())
    return {
        "method": q.method, "source": q.source, "config": q.config,
        "weights": len(q.weights), "logical_params": logical_params, "stored_bytes": stored_bytes,
        "bits_per_weight": bits_per_weight(stored_bytes, logical_params),
        "methods": list(by_method.values()),
        "roles": sorted(roles.values(), key=lambda r: -r["bytes"]),
        "rule": BITS_RULE, "notes": list(q.notes),
    }


def member_fields(ckpt: Checkpoint) -> dict[str, dict]:
    """Per stored piece of a quantised weight: the logical weight it belongs to, its logical shape and
    method (added to `ckptstat tensors` rows)."""
    q = layout(ckpt)
    if q is None:
        return {}
    out: dict[str, dict] = {}
    for w in q.weights.values():
        for m in w.members:
            out[m] = {"quantized_weight": w.name, "logical_shape": list(w.shape), "quant_method": w.method}
    return out
