"""`ckptstat diff`: the rich rendering and the markdown report of a ckptstat.diff/4 dict.
Names from the files are printed inert (rich) or escaped (markdown)."""
from __future__ import annotations

import html

from rich.console import Console, Group
from rich.text import Text

from .fmt import layer_label, table, value_cell
from .names import Name, fit_names, inert, name_line, safe
from .report_common import CSS
from .report_common import html_table as _html_table
from .report_common import md_cell as _md
from .report_common import md_table as _md_table
from .report_common import num as _num
from .rows import print_rows

_LABEL = {"added": "added", "removed": "removed", "shape": "shape changed", "dtype": "dtype changed",
          "values": "values changed", "converted": "converted (rounded)", "equal": "equal",
          "tied": "tied (one storage)", "unread": "not read (--names-only)",
          "dropped": "dropped by llama.cpp's converter"}


def _what(row: dict) -> str:
    after = f"after {row['transform']}" if row.get("transform") else ""
    # a NaN or an infinity facing another value (a bf16 value beyond float16's range cast to f16): out of max |a-b|
    bad = f"{row['nonfinite_mismatch']:,} NaN/Inf facing another value" if row.get("nonfinite_mismatch") else ""
    if row["status"] == "shape":
        return f"{row['a_shape']} -> {row['b_shape']}"
    if row["status"] in ("dtype", "converted"):
        rounded = (f", within {row['rounded_to']} rounding ({row['bound_used']:.0%} of its bound)"
                   if row.get("rounded_to") else "")
        return "; ".join(x for x in (f"{row['a_dtype']} -> {row['b_dtype']}{rounded}", bad, after) if x)
    if row.get("untransformed"):   # the HF layout stored where llama.cpp reads only its converter's
        return row["untransformed"]
    if row["status"] in ("equal", "values"):
        return "; ".join(x for x in (bad, after) if x)
    if row["status"] == "tied":
        return f"= {row['tied_to']}"
    if row["status"] in ("added", "removed", "dropped"):
        shape, dtype = (row["b_shape"], row["b_dtype"]) if row["a_name"] is None else (row["a_shape"], row["a_dtype"])
        return f"{dtype} {shape}"
    return ""


def _tensor_counts(r: dict) -> str:
    return ", ".join(f"{n} {_LABEL[s]}" for s, n in r["counts"].items() if n)


def _counts_line(r: dict) -> str:
    values = r.get("objects") or []
    return ", ".join(x for x in (_tensor_counts(r), f"{len(values)} non-tensor value(s) differ" if values else "") if x)


def _object_rows(r: dict) -> list[list[str]]:
    """The non-tensor values that differ: name, change, A, B."""
    return [[o["name"], o["status"], value_cell(o["a"], 80), value_cell(o["b"], 80)] for o in r.get("objects") or []]


def conversion_notes(r: dict) -> list[str]:
    """How a conversion was matched: tensors compared after a converter's transform, and those in another
    dtype within its rounding (with the largest error), one line each."""
    after: dict[str, int] = {}
    for t in r["tensors"]:
        if t.get("transform") and t["status"] in ("equal", "converted"):
            after[t["transform"]] = after.get(t["transform"], 0) + 1
    out = [f"{n} tensor(s) the same after {what}" for what, n in after.items()]
    if gone := [t["name"] for t in r["tensors"] if t["status"] == "dropped"]:
        out.append(f"{len(gone)} tensor(s) dropped by llama.cpp's converter by design (no difference): "
                   + ", ".join(gone[:6]) + (f", ... ({len(gone) - 6} more)" if len(gone) > 6 else ""))
    if bad := sum(bool(t.get("untransformed")) for t in r["tensors"]):
        out.append(f"{bad} tensor(s) stored in the HF layout, without llama.cpp's converter transform: llama.cpp "
                   "would read them wrong (a difference)")
    conv = [t for t in r["tensors"] if t["status"] == "converted"]
    for target in sorted({t["rounded_to"] for t in conv}):
        rows = [t for t in conv if t["rounded_to"] == target]
        worst = max(rows, key=lambda t: t["max_abs"] or 0.0)
        out.append(f"{len(rows)} tensor(s) rounded to {target}, each within its rounding bound "
                   f"(largest error {_num(worst['max_abs'])}, {max(t['bound_used'] for t in rows):.0%} of the bound)")
    unread: dict[str, int] = {}
    for t in r["tensors"]:
        if t.get("unread"):
            unread[t["unread"]] = unread.get(t["unread"], 0) + 1
    out += [f"{n} tensor(s) not compared: {why}" for why, n in unread.items()]
    return out


def render_diff(r: dict, console: Console) -> None:
    console.print(name_line("A  ", r["a"], f"  {r['a_params']:,} unique parameters"))
    console.print(name_line("B  ", r["b"], f"  {r['b_params']:,} unique parameters"))
    for side in ("a", "b"):
        if r["prefixes_stripped"][side]:
            console.print(Text(f"{side.upper()} names aligned without the prefix(es) ", style="dim")
                          .append_text(safe(", ".join(r["prefixes_stripped"][side]))))
    if r.get("builtin_map"):
        console.print(Text(f"names aligned through the built-in map: {r['builtin_map']}", style="dim"))
    for note in conversion_notes(r):
        console.print(Text(note, style="dim"))
    if r.get("objects_note"):
        console.print(Text(r["objects_note"], style="dim"))
    if r["same"]:
        tied = r["counts"].get("tied")
        console.print(Text(f"no differences ({r['compared']})"
                           + (f"; {tied} name(s) one side stores as another tensor's storage (tied)" if tied else "")))
        return
    if _tensor_counts(r):
        console.print(Text(f"tensors: {_tensor_counts(r)}"))
    if r.get("objects"):
        print_rows(console, table("Non-tensor values that differ", "value", "change", "A", "B"),
                   [(inert(name), None, (change, inert(va), inert(vb))) for name, change, va, vb in _object_rows(r)])
    changed = [t for t in r["tensors"] if t["status"] not in ("equal", "converted", "tied", "unread", "dropped")]
    if changed:
        print_rows(console, table("Tensors that differ", "tensor", "change", "detail", "max |a-b|", "rel L2", "cosine"),
                   [(inert(row["name"]), None, (_LABEL[row["status"]], inert(_what(row)), _num(row["max_abs"]),
                                                   _num(row["rel_l2"]), _num(row["cosine"], ".6f"))) for row in changed])
    layers = [x for x in r["summary"]["layers"] if x["changed"]]
    if r["summary"]["layers"] and layers:
        t = table("Per layer", "layer", "tensors", "changed", "mean rel L2")
        for x in r["summary"]["layers"]:
            t.add_row(layer_label(x), str(x["tensors"]), str(x["changed"]), _num(x["mean_rel_l2"]))
        console.print(t)
    if r["rows"]:
        t = table(f"Where they differ (B - A = {r['delta']:+,})", "module", "A", "B", "B - A")
        for c in t.columns[1:]:
            c.no_wrap = True
        for row in r["rows"]:
            lines = [Name(row["module"])]
            for tie in row["tied"]:   # "alias = target": each name elided on its own line
                alias, _, target = tie.partition(" = ")
                lines.append(Name(Text("  tied ", style="dim").append_text(safe(alias))))
                lines.append(Name(Text("    = ", style="dim").append_text(safe(target))))
            t.add_row(Group(*lines), "-" if row["a"] is None else f"{row['a']:,}",
                      "-" if row["b"] is None else f"{row['b']:,}", f"{row['delta']:+,}")
        console.print(fit_names(t, console))


# ------------------------------------------------------------------------------------------ markdown
def diff_markdown(r: dict) -> str:
    """A report to paste into a model card or an issue: header, counts, per-layer summary, a table per bucket."""
    lines = ["# ckptstat diff", "", f"- **A**: {_md(r['a'])} ({_md(r['a_format'])}, {r['a_params']:,} unique parameters)",
             f"- **B**: {_md(r['b'])} ({_md(r['b_format'])}, {r['b_params']:,} unique parameters)",
             f"- compared: {_md(r['compared'])}; atol {r['atol']:g}, rtol {r['rtol']:g}"]
    for side in ("a", "b"):
        if r["prefixes_stripped"][side]:
            lines.append(f"- {side.upper()} prefixes stripped: {_md(', '.join(r['prefixes_stripped'][side]))}")
    if r.get("builtin_map"):
        lines.append(f"- names aligned through the built-in map: {_md(r['builtin_map'])}")
    lines += [f"- {_md(note)}" for note in conversion_notes(r)]
    lines += [f"- result: **{'no differences' if r['same'] else 'different'}**"
              + (f" ({_md(_counts_line(r))})" if not r["same"] else ""), ""]
    s = r["summary"]
    lines += ["## Summary per bucket", ""]
    lines += _md_table(["bucket", "tensors", "changed", "values", "dtype", "shape", "added", "removed", "mean rel L2"],
                       [[_md(x["bucket"]), str(x["tensors"]), str(x["changed"]), str(x["values"]), str(x["dtype"]),
                         str(x["shape"]), str(x["added"]), str(x["removed"]), _num(x["mean_rel_l2"])] for x in s["buckets"]])
    if s["layers"]:
        lines += ["## Summary per layer", ""]
        lines += _md_table(["layer", "tensors", "changed", "mean rel L2"],
                           [[_md(layer_label(x)), str(x["tensors"]), str(x["changed"]), _num(x["mean_rel_l2"])]
                            for x in s["layers"]])
    for b in s["buckets"]:
        rows = [t for t in r["tensors"] if t["bucket"] == b["bucket"]]
        lines += [f"## {_md(b['bucket'])}", ""]
        lines += _md_table(["tensor", "change", "detail", "max abs diff", "rel L2", "cosine"],
                           [[_md(t["name"]), _LABEL[t["status"]], _md(_what(t)), _num(t["max_abs"]),
                             _num(t["rel_l2"]), _num(t["cosine"], ".6f")] for t in rows])
    if r.get("objects"):
        lines += ["## Non-tensor values that differ", ""]
        lines += _md_table(["value", "change", "A", "B"], [[_md(c) for c in row] for row in _object_rows(r)])
    if r["rows"]:
        lines += [f"## Unique parameters per module (B - A = {r['delta']:+,})", ""]
        lines += _md_table(["module", "A", "B", "B - A"],
                           [[_md(x["module"]), "-" if x["a"] is None else f"{x['a']:,}",
                             "-" if x["b"] is None else f"{x['b']:,}", f"{x['delta']:+,}"] for x in r["rows"]])
    return "\n".join(lines)


def diff_html(r: dict) -> str:
    """A self-contained page (inline CSS, no script, no network): the markdown report's tables, the
    per-layer relative L2 shaded as a heatmap."""
    e = html.escape
    s = r["summary"]
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8"><title>ckptstat diff</title>',
           f"<style>{CSS}</style></head><body>", "<h1>ckptstat diff</h1>", "<ul>",
           f"<li><b>A</b>: {e(str(r['a']))} ({e(str(r['a_format']))}, {r['a_params']:,} unique parameters)</li>",
           f"<li><b>B</b>: {e(str(r['b']))} ({e(str(r['b_format']))}, {r['b_params']:,} unique parameters)</li>",
           f"<li>compared: {e(r['compared'])}; atol {r['atol']:g}, rtol {r['rtol']:g}</li>"]
    for side in ("a", "b"):
        if r["prefixes_stripped"][side]:
            out.append(f"<li>{side.upper()} prefixes stripped: {e(', '.join(r['prefixes_stripped'][side]))}</li>")
    if r.get("builtin_map"):
        out.append(f"<li>names aligned through the built-in map: {e(r['builtin_map'])}</li>")
    out += [f"<li>{e(note)}</li>" for note in conversion_notes(r)]
    out += [f"<li>result: <b>{'no differences' if r['same'] else 'different'}</b>"
            + (f" ({e(_counts_line(r))})" if not r["same"] else "") + "</li>", "</ul>", "<h2>Summary per bucket</h2>"]
    out += _html_table(["bucket", "tensors", "changed", "values", "dtype", "shape", "added", "removed", "mean rel L2"],
                       [[x["bucket"], str(x["tensors"]), str(x["changed"]), str(x["values"]), str(x["dtype"]),
                         str(x["shape"]), str(x["added"]), str(x["removed"]), _num(x["mean_rel_l2"])] for x in s["buckets"]],
                       heat=8)
    if s["layers"]:
        out.append("<h2>Summary per layer</h2>")
        out += _html_table(["layer", "tensors", "changed", "mean rel L2"],
                           [[layer_label(x), str(x["tensors"]), str(x["changed"]), _num(x["mean_rel_l2"])]
                            for x in s["layers"]], heat=3)
    from .diff_heatmap import heatmap_img  # matplotlib loads only here, for an HTML report

    img = heatmap_img(r)
    if img is not None:
        out += ["<h2>Relative change per layer and module</h2>", img]
    for b in s["buckets"]:
        out.append(f"<h2>{e(b['bucket'])}</h2>")
        out += _html_table(["tensor", "change", "detail", "max abs diff", "rel L2", "cosine"],
                           [[t["name"], _LABEL[t["status"]], _what(t), _num(t["max_abs"]), _num(t["rel_l2"]),
                             _num(t["cosine"], ".6f")] for t in r["tensors"] if t["bucket"] == b["bucket"]], heat=4)
    if r.get("objects"):
        out.append("<h2>Non-tensor values that differ</h2>")
        out += _html_table(["value", "change", "A", "B"], _object_rows(r))
    if r["rows"]:
        out.append(f"<h2>Unique parameters per module (B - A = {r['delta']:+,})</h2>")
        out += _html_table(["module", "A", "B", "B - A"],
                           [[x["module"], "-" if x["a"] is None else f"{x['a']:,}", "-" if x["b"] is None else f"{x['b']:,}",
                             f"{x['delta']:+,}"] for x in r["rows"]])
    return "\n".join(out + ["</body></html>"])
