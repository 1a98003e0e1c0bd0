"""`stats --csv`: the report as one table, a row per tensor, layer, bucket and the total."""
from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from itertools import islice, repeat

from ...core.table import BLOCK, Table, is_array, iterate, values
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
    return "".join(csv_pieces(report))


def csv_pieces(report: dict) -> Iterator[str]:
    """to_csv's text, BLOCK rows at a time (a 200,000-tensor report's is never one string). Written column by
    column (a report's tensors are a Table of columns, no dict per row), each cell as a DictWriter of the rows
    would write it: None empty, a text cell through _csv_text, a number as the csv module writes it."""
    import csv
    import io

    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_FIELDS)
    layers = report["layers"]
    for level, rows, names in (("tensor", report["tensors"], "name"),
                               ("layer", layers, [f"{r['bucket']}.{r['layer']}" for r in layers]),
                               ("bucket", report["buckets"], "bucket"),
                               ("total", [report["total"]] if report["total"] else [], ["total"])):
        if not len(rows):
            continue
        cells = zip(*_csv_columns(level, rows, names))
        while block := list(islice(cells, BLOCK)):
            w.writerows(block)
            yield buf.getvalue()
            buf.seek(0)
            buf.truncate()
    yield buf.getvalue()


def _csv_columns(level: str, rows: Table | Sequence[dict], names: str | list[str]) -> list[Iterable[object]]:
    """The CSV_FIELDS columns of rows of one level (a Table, or dicts), each cell as to_csv writes it; `names` the
    rows' names, or the key that holds them."""
    table = rows if isinstance(rows, Table) else _as_table(rows)
    cols, n = table.columns, len(table)
    quantiles = cols["quantiles"].columns
    # a name from the file made inert (control, bidi and separator characters shown as \xNN, \uNNNN), as in every
    # other output but JSON (core/text.py); commas and quotes are the csv module's to quote
    if isinstance(names, str):
        names = values(cols[names])
    out: list[Iterable[object]] = []
    for key in CSV_FIELDS:
        if key == "level":
            out.append(repeat(level, n))
        elif key == "name":
            out.append(map(_cell, map(inert, names)))
        elif key == "shape" and key in cols:
            out.append("" if s is None else _csv_text("x".join(map(str, s))) for s in values(cols[key]))
        elif key == "flags":
            out.append(map(_cell, map(";".join, values(cols[key]))) if key in cols else repeat("", n))
        elif key in quantiles or key in cols:
            col = quantiles[key] if key in quantiles else cols[key]
            if not is_array(col):
                out.append(map(_cell, col))
            elif col.dtype.kind == "f":   # numbers, no text: only a NaN (read as None) is written empty
                out.append("" if v is None else v for v in iterate(col))
            else:
                out.append(iterate(col))
        else:
            out.append(repeat("", n))
    return out


def _as_table(rows: Sequence[dict]) -> Table:
    """Dict rows (a report's layers, buckets, total) as a Table of every key any of them has (None where one has not),
    the quantiles nested."""
    keys = list(dict.fromkeys(k for r in rows for k in r))
    table = Table(keys, {"quantiles": list(rows[0]["quantiles"])})
    table.extend([{k: r.get(k) for k in keys} for r in rows])
    return table


def _cell(v: object) -> object:
    return "" if v is None else _csv_text(v)
