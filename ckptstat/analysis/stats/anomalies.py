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
PLURAL = {"vector": "vectors", "matrix": "matrices"}   # the kinds of peers


def _median(a: np.ndarray) -> float:
    """np.median's value (the middle element, or the mean of the two middle ones; NaN if any is NaN),
    without np.median's import of numpy.ma (~10 ms, serial in every run)."""
    s = np.sort(a)
    n = s.size
    if np.isnan(s[-1]):
        return math.nan
    return float(s[n // 2]) if n % 2 else float((s[n // 2 - 1] + s[n // 2]) / 2)


def _numbers(col: object) -> np.ndarray:
    """A column as a float64 array, None as NaN (an array column as it is held: core/table.py)."""
    return col if isinstance(col, np.ndarray) else np.array(col, dtype=np.float64)


def anomalies(rows: Table) -> list[dict]:
    """Flag tensors per ANOMALY_RULE; also adds each row's robust z as the column `spread_z` (an array: NaN, read as
    None, where a tensor has none). The columns are read as arrays, a flagged row's values as Python's."""
    c = rows.columns
    nan, inf, count, zeros = (np.asarray(c[k]) for k in ("nan", "inf", "count", "zeros"))
    bad, empty = (nan != 0) | (inf != 0), (count != 0) & (zeros == count)
    names = c["name"]
    flagged = np.flatnonzero(bad | empty)
    n_nan, posinf, neginf, n = (np.asarray(c[k])[flagged].tolist() for k in ("nan", "posinf", "neginf", "count"))
    out: list[dict] = []
    for j, i in enumerate(flagged.tolist()):
        if bad[i]:
            out.append({"name": names[i], "kind": "nan_or_inf",
                        "detail": f"{n_nan[j]} NaN, {posinf[j]} +Inf, {neginf[j]} -Inf"})
        if empty[i]:
            out.append({"name": names[i], "kind": "all_zero", "detail": f"all {n[j]} elements are 0"})
    stds = _numbers(c["std"])
    spread = (stds != 0) & ~np.isnan(stds)
    spread_z = np.full(len(rows), np.nan)
    peers: dict[tuple[str, str], list[int]] = {}
    for i, (role, ok, bucket, shape) in enumerate(zip(c["role"], spread.tolist(), c["bucket"], c["shape"])):
        if ok and role == "parameter":
            peers.setdefault((bucket, "vector" if len(shape) <= 1 else "matrix"), []).append(i)
    for (bucket, kind), group in peers.items():
        if len(group) < MIN_PEERS:
            continue
        logs = np.log10(stds[group])
        med = _median(logs)
        scale = max(1.4826 * _median(np.abs(logs - med)), MAD_FLOOR)
        z = (logs - med) / scale
        spread_z[group] = z
        far = np.abs(z) > Z_LIMIT
        for i, zi in zip(np.array(group)[far].tolist(), z[far].tolist()):
            out.append({"name": names[i], "kind": "spread_outlier",
                        "detail": f"std {float(stds[i]):.4g} vs median {10 ** med:.4g} of {len(group)} {bucket} "
                                  f"{PLURAL[kind]} (robust z {zi:+.1f})"})
    rows.add_column("spread_z", spread_z)
    return out
