"""`stats`' anomaly flags (ANOMALY_RULE): NaN/Inf, all-zero tensors, and a tensor whose spread is far from its peers'
(a robust z-score of log10 std within one bucket and kind)."""
from __future__ import annotations

import math

import numpy as np

from ...core.table import Table

ANOMALY_RULE = (
    "nan_or_inf: any NaN or Inf; all_zero: every element is exactly 0; spread_outlier: among the "
    "parameter tensors of one bucket of the same kind (vectors: rank <= 1; matrices: rank >= 2; at "
    "least 5 with std > 0), robust z = (log10 std - median) / max(1.4826 * MAD, 0.1) exceeds 3.5 "
    "in absolute value (MAD = median absolute deviation of log10 std; the 0.1 floor means a flagged "
    "tensor's std is at least 10^0.35 = 2.2x away from the median)")
Z_LIMIT = 3.5
MAD_FLOOR = 0.1
MIN_PEERS = 5


def _median(a: np.ndarray) -> float:
    """np.median's value (the middle element, or the mean of the two middle ones; NaN if any is NaN),
    without np.median's import of numpy.ma (~10 ms, serial in every run)."""
    s = np.sort(a)
    n = s.size
    if np.isnan(s[-1]):
        return math.nan
    return float(s[n // 2]) if n % 2 else float((s[n // 2 - 1] + s[n // 2]) / 2)


def anomalies(rows: Table) -> list[dict]:
    """Flag tensors per ANOMALY_RULE; also adds each row's robust z as the column `spread_z`."""
    c = rows.columns
    out: list[dict] = []
    for name, nan, inf, posinf, neginf, count, zeros in zip(c["name"], c["nan"], c["inf"], c["posinf"], c["neginf"],
                                                             c["count"], c["zeros"]):
        if nan or inf:
            out.append({"name": name, "kind": "nan_or_inf", "detail": f"{nan} NaN, {posinf} +Inf, {neginf} -Inf"})
        if count and zeros == count:
            out.append({"name": name, "kind": "all_zero", "detail": f"all {count} elements are 0"})
    spread_z: list[float | None] = [None] * len(rows)
    peers: dict[tuple[str, str], list[int]] = {}
    for i, (role, std, bucket, shape) in enumerate(zip(c["role"], c["std"], c["bucket"], c["shape"])):
        if role == "parameter" and std:
            peers.setdefault((bucket, "vector" if len(shape) <= 1 else "matrix"), []).append(i)
    stds, names = c["std"], c["name"]
    for (bucket, kind), group in peers.items():
        if len(group) < MIN_PEERS:
            continue
        logs = np.log10([stds[i] for i in group])
        med = _median(logs)
        scale = max(1.4826 * _median(np.abs(logs - med)), MAD_FLOOR)
        for i, v in zip(group, logs):
            z = (float(v) - med) / scale
            spread_z[i] = z
            if abs(z) > Z_LIMIT:
                out.append({"name": names[i], "kind": "spread_outlier",
                            "detail": f"std {stds[i]:.4g} vs median {10 ** med:.4g} of {len(group)} {bucket} "
                                      f"{kind}s (robust z {z:+.1f})"})
    rows.add_column("spread_z", spread_z)
    return out
