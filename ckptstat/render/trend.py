"""`ckptstat trend`: the rich tables, the markdown and HTML reports, and the two figures of a ckptstat.trend/1 dict:
a layer x step heatmap of the relative change since the previous step, and lines per bucket (relative change and
norm by step). matplotlib is imported only when a report is written. Names from files are printed inert."""
from __future__ import annotations

import html
import math

from rich.console import Console
from rich.table import Table
from rich.text import Text

from . import optimizer_mapping_lines
from .fmt import layer_label, table, value_cell
from .names import Name, fit_names, safe
from .report_common import CSS, figure_png, html_table, img_tag, md_cell, md_table, num, plot_text

COLUMNS = ("norm", "rel_prev", "max_abs_prev", "rel_first", "max_abs_first", "update_ratio")
HEADER = ["norm", "rel prev", "max abs prev", "rel first", "max abs first", "update ratio"]
FIGURES = {"heatmap": "relative change since the previous step, per layer (rows) and step (columns)",
           "buckets": "relative change since the previous step and norm, per bucket"}


def _cells(r: dict) -> list[str]:
    return [num(r[c]) for c in COLUMNS]


def _lr(s: dict) -> str:
    return "" if s.get("learning_rate") is None else format(s["learning_rate"], ".4g")


def _step_rows(r: dict) -> list[list[str]]:
    opt = {o["step"]: o for o in r["optimizer"] if o}
    return [[str(s["step"]), _lr(s), *_cells(x), num((opt.get(s["step"]) or {}).get("mean")),
             num((opt.get(s["step"]) or {}).get("mean_sqrt"))]
            for s, x in zip(r["steps"], r["total"]["series"])]


STEP_HEADER = ["step", "lr", *HEADER, "Adam v mean", "mean sqrt(v)"]


def _last_rows(r: dict) -> list[tuple[str, dict, list[str]]]:
    """(group, its last step's row, its flags) for each bucket and layer."""
    out = [(b["bucket"], b["series"][-1], b["flags"]) for b in r["buckets"]]
    return out + [(layer_label(x), x["series"][-1], x["flags"]) for x in r["layers"]]


VALUE_LINES = 20   # non-tensor values that change listed in the terminal; the reports and --json have them all


def _value_rows(r: dict) -> list[list[str]]:
    """The non-tensor values that change across the steps: name, first step's, last step's, how many steps changed it."""
    return [[v["name"], value_cell(v["series"][0], 40), value_cell(v["series"][-1], 40), str(v["changes"])]
            for v in r.get("values") or []]


VALUE_HEADER = ["value", "first", "last", "changes"]


def _findings(r: dict) -> list[str]:
    out = [f"jump at step {j['step']} in {j['group']}: relative change {j['rel_prev']:.3g}, {j['factor']:.1f}x the "
           f"median {j['median_before']:.3g} of its earlier steps" for j in r["jumps"]]
    if r["frozen"]:
        out.append(f"{len(r['frozen'])} frozen tensor(s) (never changed): " + ", ".join(r["frozen"][:8])
                   + (" ..." if len(r["frozen"]) > 8 else ""))
    if r["dead"]:
        out.append(f"{len(r['dead'])} dead tensor(s) (all zero at the last step): " + ", ".join(r["dead"][:8])
                   + (" ..." if len(r["dead"]) > 8 else ""))
    for what in ("frozen_layers", "dead_layers"):
        if r[what]:
            out.append(f"{what.replace('_', ' ')}: " + ", ".join(r[what]))
    return (out or ["no jump, frozen or dead tensor"]) + _mapping(r)


def _mapping(r: dict) -> list[str]:
    """Which parameter each optimizer state of the last step holding one belongs to (analysis/optimizer_names.py)."""
    last = next((o for o in reversed(r["optimizer"]) if o), None)
    return [f"optimizer state at step {last['step']}, {line}"
            for line in optimizer_mapping_lines(last.get("mapping") or [])] if last else []


def _numbers(t: Table, rows: list[list[str]], first: int) -> Table:
    """Numeric columns (from `first`, the last of a group table's aside) never folded nor cropped: as wide as
    their longest cell, their headers on two lines."""
    for i, c in enumerate(t.columns):
        if i >= first and c.header != "flags":
            c.no_wrap, c.min_width = True, max([len(row[i]) for row in rows] + [1])
            c.header = str(c.header).replace(" ", "\n", 1)
    return t


def render_trend(r: dict, console: Console) -> None:
    console.print(Text(f"run          {len(r['steps'])} checkpoints ({r['layout']}), steps "
                       f"{r['steps'][0]['step']} .. {r['steps'][-1]['step']}; {len(r['tensors'])} parameter tensors "
                       "tracked"))
    # the terminal's per-step table leaves out max abs first and mean sqrt(v) (in --json and the reports), and its
    # headers take two lines: its numbers fit 80 columns whole
    shown = [i for i, h in enumerate(STEP_HEADER) if h not in ("max abs first", "mean sqrt(v)")]
    rows = [[cells[i] for i in shown] for cells in _step_rows(r)]
    t = _numbers(table("Per step (all tracked parameters)", *(STEP_HEADER[i] for i in shown)), rows, 0)
    for cells in rows:
        t.add_row(*cells)
    console.print(t)
    last = _last_rows(r)
    t = _numbers(table(f"Per bucket and layer at step {r['steps'][-1]['step']}", "group", *HEADER, "flags"),
                 [["", *_cells(row), ""] for _, row, _ in last], 1)
    for group, row, flags in last:
        t.add_row(Name(group), *_cells(row), ", ".join(flags))
    console.print(fit_names(t, console))
    console.print(Text(f"rel = ||w_t - w_s|| / ||w_s|| since the previous step (prev) or the first; update ratio = "
                       f"std(w_t - w_(t-1)) / std(w_(t-1)); jump rule: {r['conventions']['jump']}", style="dim"))
    if factored := max((s.get("factored_second_moments") or 0 for s in r["steps"]), default=0):
        console.print(Text(f"v (Adam v mean, mean sqrt(v)) covers the unfactored exp_avg_sq tensors only: {factored:,} "
                           "factored second moments (Adafactor's exp_avg_sq_row / exp_avg_sq_col) are left out",
                           style="yellow"))
    values = _value_rows(r)
    if values:
        t = table("Non-tensor values that change across the steps", *VALUE_HEADER)
        for name, first, final, changes in values[:VALUE_LINES]:
            t.add_row(Name(name), safe(first), safe(final), changes)
        console.print(fit_names(t, console))
        more = len(values) - VALUE_LINES + r.get("values_left_out", 0)
        if more > 0:
            console.print(Text(f"... {more:,} more (--json, the reports)", style="dim"))
    for line in _findings(r):
        console.print(safe(line))
    if r["skipped"]:
        console.print(Text(f"{len(r['skipped'])} left out: ", style="dim").append_text(
            safe("; ".join(f"{s['name']} ({s['reason']})" for s in r["skipped"][:6]))))


# ------------------------------------------------------------------------------------------ figures
def heatmap_png(r: dict) -> bytes | None:
    """Layers (rows) x steps after the first (columns): the relative change since the previous step."""
    if not r["layers"] or len(r["steps"]) < 2:
        return None
    import numpy as np
    from matplotlib.figure import Figure

    rows = [layer_label(x) for x in r["layers"]]
    values = np.array([[s["rel_prev"] if s["rel_prev"] is not None else math.nan for s in x["series"][1:]]
                       for x in r["layers"]], dtype=float)
    steps = [str(s["step"]) for s in r["steps"][1:]]
    fig = Figure(figsize=(min(4 + 0.4 * len(steps), 24), min(1.8 + 0.28 * len(rows), 40)), dpi=100)
    ax = fig.add_subplot()
    im = ax.imshow(np.ma.masked_invalid(values), aspect="auto", cmap="Reds", interpolation="nearest", vmin=0.0)
    ax.set_xticks(range(len(steps)), labels=steps, fontsize=8, rotation=60 if len(steps) > 12 else 0)
    ax.set_yticks(range(len(rows)), labels=[plot_text(x) for x in rows], fontsize=8)
    ax.set_xlabel("step", fontsize=8)
    ax.set_title(FIGURES["heatmap"], fontsize=9)
    fig.colorbar(im, ax=ax).set_label("||w_t - w_(t-1)|| / ||w_(t-1)||", fontsize=8)
    fig.tight_layout()
    return figure_png(fig, tight=True)


def buckets_png(r: dict) -> bytes | None:
    if not r["buckets"]:
        return None
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    steps = [s["step"] for s in r["steps"]]
    fig = Figure(figsize=(10, 4), dpi=100)
    ax1, ax2 = fig.subplots(1, 2)
    for b in r["buckets"]:
        rel = [(st, s["rel_prev"]) for st, s in zip(steps, b["series"]) if s["rel_prev"]]
        if rel:
            ax1.plot(*zip(*rel), marker="o", label=plot_text(b["bucket"]))
        ax2.plot(steps, [s["norm"] for s in b["series"]], marker="o", label=plot_text(b["bucket"]))
    if ax1.has_data():
        ax1.set_yscale("log")
    ax1.set_title("relative change since the previous step", fontsize=9)
    ax2.set_title("L2 norm", fontsize=9)
    for ax in (ax1, ax2):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))   # steps are whole numbers
        ax.set_xlabel("step", fontsize=8)
        ax.legend(fontsize=7)
    fig.tight_layout()
    return figure_png(fig, tight=True)


def figures(r: dict) -> dict[str, bytes]:
    out = {}
    for name, draw in (("heatmap", heatmap_png), ("buckets", buckets_png)):
        png = draw(r)
        if png is not None:
            out[name] = png
    return out


# ------------------------------------------------------------------------------------------ reports
def _sections(r: dict) -> list[tuple[str, list[str], list[list[str]]]]:
    """(title, header, rows) of each table, the same in markdown and HTML."""
    groups = [[g, *_cells(row), ", ".join(flags)] for g, row, flags in _last_rows(r)]
    out = [("Per step (all tracked parameters)", STEP_HEADER, _step_rows(r)),
           (f"Per bucket and layer at step {r['steps'][-1]['step']}", ["group", *HEADER, "flags"], groups)]
    if _value_rows(r):
        out.append(("Non-tensor values that change across the steps", VALUE_HEADER, _value_rows(r)))
    opt = [o for o in r["optimizer"] if o and o["groups"]]
    if opt:
        out.append(("Adam second moments per group (state attributed to a parameter)",
                    ["step", "group", "v mean", "v max", "mean sqrt(v)"],
                    [[str(o["step"]), g["group"], num(g["mean"]), num(g["max"]), num(g["mean_sqrt"])]
                     for o in opt for g in o["groups"]]))
    return out


def _head(r: dict) -> list[tuple[str, str]]:
    return [("run", f"{', '.join(r['paths'])} ({r['layout']})"),
            ("steps", ", ".join(f"{s['step']} ({s['label']})" for s in r["steps"])),
            ("tracked", f"{len(r['tensors'])} parameter tensors"),
            ("jump rule", r["conventions"]["jump"]),
            ("update ratio", r["conventions"]["update_ratio"])]


def trend_markdown(r: dict, links: dict[str, str]) -> str:
    lines = ["# ckptstat trend", ""] + [f"- **{k}**: {md_cell(v)}" for k, v in _head(r)] + [""]
    findings = _findings(r)
    lines += ["## Findings", ""] + [f"- {md_cell(x)}" for x in findings] + [""]
    for name, alt in FIGURES.items():
        if name in links:
            lines += [f"![{md_cell(alt)}]({links[name]})", ""]
    for title, header, rows in _sections(r):
        lines += [f"## {md_cell(title)}", ""] + md_table(header, [[md_cell(c) for c in row] for row in rows])
    return "\n".join(lines).rstrip("\n") + "\n"


def trend_html(r: dict, pngs: dict[str, bytes]) -> str:
    e = html.escape
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8"><title>ckptstat trend</title>',
           f"<style>{CSS}</style></head><body>", "<h1>ckptstat trend</h1>",
           "<ul>" + "".join(f"<li><b>{e(k)}</b>: {e(v)}</li>" for k, v in _head(r)) + "</ul>", "<h2>Findings</h2>",
           "<ul>" + "".join(f"<li>{e(x)}</li>" for x in _findings(r)) + "</ul>"]
    out += [img_tag(pngs[name], alt, name) for name, alt in FIGURES.items() if name in pngs]
    for title, header, rows in _sections(r):
        out += [f"<h2>{e(title)}</h2>", *html_table(header, rows, align="n" if header[0] == "group" else "r")]
    return "\n".join(out + ["</body></html>"]) + "\n"


def write_trend(r: dict, output: str, fmt: str) -> list[str]:
    """The report in `fmt` (md: its figures into `<name>_files/` beside it), each file through a temporary one."""
    from .report import write_with_figures

    pngs = figures(r)
    return write_with_figures(output, fmt, pngs, lambda: trend_html(r, pngs), lambda links: trend_markdown(r, links))
