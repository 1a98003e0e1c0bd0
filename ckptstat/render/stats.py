"""Rich tables for the stats report (schema ckptstat.stats/1). Names from files go through `safe`."""
from __future__ import annotations

from collections import Counter

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..analysis.stats import counts_numbers
from .fmt import human, human_bytes, table
from .names import Name, inert, name_line, safe
from .rows import print_rows

MAX_ANOMALIES = 25


def _g(v: float | None) -> str:
    """At most 7 characters, so that 7 numbers and a label fit in 80 columns."""
    if v is None:
        return "-"
    for spec in (".3g", ".2g", ".1e", ".0e"):
        s = f"{v:{spec}}".replace("e-0", "e-").replace("e+0", "e+")
        if len(s) <= 7:
            return s
    return s


def _tbl(title: str, *columns: str) -> Table:
    t = table(title, *columns)
    t.padding = (0, 0, 0, 1)   # one space between columns
    return t


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.2f}%"


def _qcols(r: dict, keys: list[str]) -> list[str]:
    return [_g(r["quantiles"].get(k)) for k in keys]


def _skipped(rows: list[dict]) -> str:
    """Why tensors were left out, counted by kind (analysis/stats select's reasons): `2 aliased, 1 buffer, 3 TQ1_0
    not decoded`."""
    kinds: Counter[str] = Counter()
    for s in rows:
        why = s["reason"]
        if why.startswith("values of "):
            why = why.removeprefix("values of ").split(" ")[0] + " not decoded"
        elif why.startswith(("alias of", "role ")):
            why = "aliased" if why.startswith("alias") else why.split(" ")[1]
        kinds["strings" if why == "string tensor" else why] += 1
    return ", ".join(f"{n} {k}" for k, n in kinds.items())


def render_stats(r: dict, console: Console, show_layers: bool = False, show_tensors: bool = False) -> None:
    console.print(name_line("checkpoint ", r["path"], f"  [{r['format']}]"))
    head = Text()
    sel = r["selection"]
    n = len(r["tensors"])
    what = f"{n} tensor{'' if n == 1 else 's'} ({sel['roles']} roles"
    if sel["filter"]:
        what += ", filter "
    head.append(what)
    if sel["filter"]:
        head.append_text(safe(sel["filter"]))
    if sel["buckets"]:
        head.append(", buckets " + ", ".join(sel["buckets"]))
    rate = r["bytes_read"] / r["seconds"] if r["seconds"] > 0 else 0.0
    head.append(f"), {human_bytes(r['bytes_read'])} read in {r['seconds']:.2f} s ({human_bytes(rate)}/s)")
    if r["skipped"]:
        head.append(f"; {len(r['skipped'])} skipped ({_skipped(r['skipped'])}: see --json)")
    console.print(head)
    if not r["tensors"]:
        console.print("nothing selected")
        return

    rows = r["buckets"] + ([{"bucket": "total", **r["total"]}] if r["total"] and len(r["buckets"]) > 1 else [])
    t = _tbl("Weights by bucket (finite values; std is population std)", "bucket", "tensors", "elements",
               "mean", "std", "min", "max", "zeros")
    for b in rows:
        t.add_row(b["bucket"], str(b["tensors"]), human(b["count"]), _g(b["mean"]), _g(b["std"]), _g(b["min"]),
                  _g(b["max"]), _pct(b["zero_fraction"]))
    console.print(t)

    keys = [f"p{100 * p:g}" for p in r["quantile_levels"]]
    t = _tbl("Quantiles by bucket (* exact; others within 2^-8 relative)", "bucket", *keys)
    for b in rows:
        t.add_row(b["bucket"] + ("*" if b["quantiles_exact"] else ""), *_qcols(b, keys))
    console.print(t)

    if show_layers and r["layers"]:
        t = _tbl("By layer", "layer", "mean", "std", "mean |x|", "p1", "p50", "p99", "max |x|")
        for row in r["layers"]:
            amax = max(abs(row["min"]), abs(row["max"])) if row["min"] is not None else None
            t.add_row(f"{row['bucket']}.{row['layer']}", _g(row["mean"]), _g(row["std"]), _g(row["mean_abs"]),
                      *_qcols(row, ["p1", "p50", "p99"]), _g(amax))
        console.print(t)

    if show_tensors:
        print_rows(console, _tbl("By tensor", "name", "dtype", "std", "min", "max", "zeros", "flags"),
                   [(inert(row["name"]), None, (row["dtype"], _g(row["std"]), _g(row["min"]), _g(row["max"]),
                                                   _pct(row["zero_fraction"]), ",".join(row["flags"])))
                    for row in r["tensors"]])

    if r["anomalies"]:
        t = _tbl(f"{len(r['anomalies'])} anomalies", "tensor", "kind", "detail")
        for a in r["anomalies"][:MAX_ANOMALIES]:
            t.add_row(Name(a["name"]), a["kind"], a["detail"])
        if len(r["anomalies"]) > MAX_ANOMALIES:
            t.add_row(f"... {len(r['anomalies']) - MAX_ANOMALIES} more (see --json or --csv)", "", "")
        console.print(t, style="yellow")
    else:
        console.print(Text("anomalies    none (NaN/Inf, all-zero, spread outliers; rule in --json)", style="dim"))
    console.print(Text("quantiles    numpy 'linear' definition; exact for f16/bf16/fp8/small ints, else each order "
                       "statistic within 2^-8 relative (bfloat16 bins)", style="dim"))
    if r.get("dequantized"):
        d = r["dequantized"]
        methods = ", ".join(f"{m} {n}" for m, n in d["methods"].items())
        console.print(Text(f"dequantized  {d['weights']} quantised weight{'' if d['weights'] == 1 else 's'} read as the "
                           f"values their library dequantises them to ({methods}; rule in --json)", style="dim"))
    if left := r.get("left_quantized"):
        methods = ", ".join(f"{m} {n}" for m, n in left.items())
        console.print(Text(f"not decoded  {sum(left.values())} quantised weight(s) left as stored ({methods}): no "
                           "decoder reads their layout (docs/quantized.md lists what is read: a float32 scale is not), "
                           "so their values are in no row; their pieces are skipped by role", style="yellow"))
    if counts_numbers(r):
        console.print(Text("values       " + r["conventions"]["values"], style="dim"))
