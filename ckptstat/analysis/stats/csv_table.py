"""`stats --csv`: the report as one table, a row per tensor, layer, bucket and the total."""
from __future__ import annotations

from ...core.text import inert
from .accumulate import QUANTILES, _qkey

CSV_FIELDS = ["level", "name", "bucket", "layer", "dtype", "shape", "tensors", "count", "finite", "min", "max",
              "mean", "std", "mean_abs", "l2", "zeros", "zero_fraction", "nan", "posinf", "neginf",
              *(_qkey(p) for p in QUANTILES), "quantiles_exact", "flags"]




def _csv_text(v: object) -> object:
    """OWASP's CSV-injection rule (owasp.org/www-community/attacks/CSV_Injection): a text cell starting with
    = + - @ TAB or CR is a formula to a spreadsheet, so it gets a leading `'`; numbers are left as they are."""
    return "'" + v if isinstance(v, str) and v[:1] in ("=", "+", "-", "@", "\t", "\r") else v


def to_csv(report: dict) -> str:
    """One table: a row per tensor, layer, bucket and the total, told apart by `level`."""
    import csv
    import io

    buf = io.StringIO()
    w = csv.DictWriter(buf, CSV_FIELDS, lineterminator="\n")
    w.writeheader()

    def emit(level: str, name: str, r: dict) -> None:
        row = {k: r.get(k) for k in CSV_FIELDS if k in r}
        row.update({k: v for k, v in r["quantiles"].items()})
        # a name from the file made inert (control, bidi and separator characters shown as \xNN, \uNNNN), as in
        # every other output but JSON (core/text.py); commas and quotes are the csv module's to quote
        row["level"], row["name"] = level, inert(name)
        if "shape" in r:
            row["shape"] = "x".join(map(str, r["shape"]))
        row["flags"] = ";".join(r.get("flags", []))
        w.writerow({k: "" if row.get(k) is None else _csv_text(row[k]) for k in CSV_FIELDS})

    for r in report["tensors"]:
        emit("tensor", r["name"], r)
    for r in report["layers"]:
        emit("layer", f"{r['bucket']}.{r['layer']}", r)
    for r in report["buckets"]:
        emit("bucket", r["bucket"], r)
    if report["total"]:
        emit("total", "total", report["total"])
    return buf.getvalue()
