"""`ckptstat report -o report.md|report.html`: a ckptstat.report/1 dict as a markdown report (tables in
gguf_dump --markdown's style, figures as PNG files beside it) or a self-contained HTML page (inline
CSS, figures as data URIs, no script, no network). Both are drawn from one list of blocks, so the two
documents always hold the same sections, tables and figures (docs/report.md)."""
from __future__ import annotations

import html
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import quote

from . import training_line
from .fmt import (
    COMPONENTS_TITLE,
    LORA_TITLE,
    UNPLACED_FAMILIES,
    counts_text,
    human_bytes,
    image_text,
    lora_file_text,
    object_text,
    one_image,
    seq_source,
    single_file_text,
)
from .report_common import CSS, html_table, img_tag, md_cell, md_table, num

if TYPE_CHECKING:
    from ..analysis.report import ReportRun

OBJECT_TEXT = 120    # characters of a non-tensor value's JSON a report shows
FIGURE = "weights"   # the one figure: histograms per bucket, box plots per layer and bucket (render/plots.py)
FIGURE_ALT = {FIGURE: "weight histograms per bucket, box plots per layer and per bucket"}


# --------------------------------------------------------------------------------------- the blocks
@dataclass
class Block:
    kind: str                                  # h1 h2 h3 p why items table img details
    text: str = ""                             # heading, paragraph, an image's alt text, details summary
    name: str = ""                             # an image: the figure's name (FIGURE)
    items: list[tuple[str, str]] = field(default_factory=list)   # (label, value)
    header: list[str] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)
    align: str = ""                            # per column n name, l text, r number (report_common._aligns)
    body: list[Block] = field(default_factory=list)


def _int(n: int | None) -> str:
    return "" if n is None else f"{n:,}"


def _approx(n: float) -> str:
    """gguf_dump's `element_count_rounded_notation`: ~7B, ~124M, ~18K."""
    for scale, suffix in ((1e15, "Q"), (1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n > scale:
            return f"~{round(n / scale)}{suffix}"
    return f"{round(n)}"


def _g(x: float | None) -> str:
    return num(x, ".6g")


def _shape(shape: list[int]) -> str:
    return " x ".join(map(str, shape)) or "scalar"


def _summary(r: dict) -> list[Block]:
    s, p = r["summary"], r["summary"]["parameters"]
    a = s["architecture"]
    arch = a["family"] + (f" ({a['model_type']})" if a["model_type"] and a["model_type"] != a["family"] else "")
    if a["architectures"]:
        arch += " " + ", ".join(a["architectures"])
    items = [("checkpoint", f"{s['path']} ({s['format']}, {len(s['files'])} file(s), {s['storage']['file_bytes']:,} B)"),
             ("architecture", f"{arch} (from {a['source']})"), ("config", s["config"] or "none found"),
             ("unique parameters", f"{p['unique']:,} ({_approx(p['unique'])}) in {p['tensors']} tensors"),
             ("counting", s["counting"]),
             ("stored", f"{p['stored_bytes']:,} B of parameters, "
                        + (f"{p['bits_per_weight']:.4f} bits per weight" if p["bits_per_weight"] else "no parameter")),
             ("ties", s["ties"]["text"])]
    items[3:3] = list((s.get("gguf") or {}).items())   # after config: a GGUF file's own metadata
    if s.get("training"):   # a Trainer / Lightning / DeepSpeed checkpoint, as `summary` says it
        items.insert(3, ("training", training_line(s["training"])))
    if p.get("partial"):
        items.append(("PARTIAL", p["partial"]))
    an = s.get("analytic")
    if an and "error" not in an:
        at = image_text(an) or (f"frame at seq {an['seq']}" if an["input"] == "mel frames" else f"token at seq {an['seq']}")
        items.append(("forward", f"{an['flops_per_token']:,.0f} FLOPs per {at} (matmul FLOPs = 2 x MACs); training 3x"))
        if im := an.get("image"):   # a vision-language wrapper whose image path is modelled (families/images/)
            items.append(("image", one_image(im, f"{im['flops']:,}") if im["side"] else
                                   "any size: `ckptstat flops --images N --image-size S` counts it"))
    one, lora = s.get("single_file"), s.get("lora_file")   # by component or by adapted part, not by bucket
    if one:
        items.insert(2, ("one file", single_file_text(one)))
    if lora:
        items.insert(2, ("lora file", lora_file_text(lora)))
    by = ([Block("h3", COMPONENTS_TITLE),
           Block("table", header=["Component", "Parameters", "Bytes", "Tensors", "Buffers"], align="l",
                 rows=[[c["component"], _int(c["params"]), _int(c["bytes"]), str(c["tensors"]), str(c["buffers"])]
                       for c in one["components"]])] if one else
          [Block("h3", LORA_TITLE),
           Block("table", header=["Part", "Modules", "Parameters", "Network", "Ranks"], align="l",
                 rows=[[p["part"], str(p["modules"]), _int(p["params"]), counts_text(p["networks"]),
                        counts_text(p["ranks"])] for p in lora["parts"]])] if lora else
          [Block("h3", "Parameters by bucket"),
           Block("table", header=["Bucket", "Parameters", "Share", "Bytes", "BPW", "Tensors"], align="l",
                 rows=[[b["bucket"], _int(b["params"]), f"{100 * b['share']:.2f}%", _int(b["bytes"]),
                        num(b["bits_per_weight"], ".4f"), str(b["tensors"])] for b in s["buckets"]])])
    out = [Block("h2", "Summary"), Block("items", items=items), *by,
           Block("h3", "Parameters by stored dtype"),
           Block("table", header=["Dtype", "Parameters", "Bytes", "Tensors"], align="l",
                 rows=[[d["dtype"], _int(d["params"]), _int(d["bytes"]), str(d["tensors"])] for d in s["dtypes"]])]
    if s["layers"]:
        out.append(Block("details", f"Parameters by layer ({len(s['layers'])} layers)", body=[Block(
            "table", header=["Bucket", "Layer", "Parameters", "Bytes", "Tensors"], align="l",
            rows=[[x["bucket"], str(x["layer"]), _int(x["params"]), _int(x["bytes"]), str(x["tensors"])]
                  for x in s["layers"]])]))
    if a["family"] in UNPLACED_FAMILIES and s.get("modules"):
        out.append(_modules(s["modules"]))
    if s["non_parameters"]:
        out += [Block("h3", "Not parameters (counted apart)"),
                Block("table", header=["Role", "Tensors", "Elements", "Bytes", "e.g."], align="lrrrn",
                      rows=[[n["role"], str(n["tensors"]), _int(n["elements"]), _int(n["bytes"]), n["names"][0]]
                            for n in s["non_parameters"]])]
    if s.get("objects"):   # what the checkpoint keeps beside its tensors (a run's epoch, args, hyper-parameters)
        rows = [[name, object_text(o, OBJECT_TEXT)] for name, o in s["objects"].items()]
        out.append(Block("details", f"Non-tensor values ({len(rows):,})", body=[
            Block("table", header=["Name", "Value"], align="nl", rows=rows)]))
    out += [Block("p", f"note: {n}") for n in s["notes"]]
    return out


def _modules(nodes: list[dict]) -> Block:
    """The summary's module tree (no architecture known), indented, numbered blocks folded (`x N`:
    totals over all N, children one block's), as `ckptstat summary` prints it, up to MODULE_LINES rows."""
    from .fmt import MODULE_LINES

    rows: list[list[str]] = []

    def walk(ns: list[dict], depth: int) -> None:
        for n in ns:
            rows.append(["\u00a0\u00a0" * depth + n["name"] + (f" x{n['repeat']}" if n["repeat"] > 1 else ""),
                         _int(n["params"]), _int(n["bytes"]), str(n["tensors"])])
            walk(n["children"], depth + 1)

    walk(nodes, 0)
    more = f"; the first {MODULE_LINES} shown, --json has them all" if len(rows) > MODULE_LINES else ""
    return Block("details", f"Parameters by module ({len(rows)} modules, no analytic model{more})", body=[Block(
        "table", header=["Module", "Parameters", "Bytes", "Tensors"], rows=rows[:MODULE_LINES])])


def _ties(r: dict) -> list[Block]:
    t = r["ties"]
    out = [Block("h2", "Tied weights and parameter counts")]
    if t["ties"]:
        out.append(Block("table", header=["Alias", "Target", "Elements", "Evidence", "Status"], align="nnrll",
                         rows=[[x["alias"], x["target"], _int(x["numel"]), x["evidence"], x["status"]] for x in t["ties"]]))
    else:
        out.append(Block("p", "No tied weights found (headers and config; `ckptstat ties --deep` also compares contents)."))
    rows = t["counting"]["rows"]
    base = rows[0]["params"]
    out.append(Block("table", header=["Convention", "Parameters", "vs unique", "Equals"], align="lrrl",
                     rows=[[x["convention"], _int(x["params"]), f"{x['params'] - base:+,}" if x["params"] != base else "",
                            x["equals"]] for x in rows]))
    cc = t["cross_check"]
    if cc["available"]:
        from ..analysis.ties import relaid_text, restacked_text

        out.append(Block("p", f"Config check ({cc['architecture'] or cc['head']}): {cc['expected']} tensors expected; "
                              f"{len(cc['missing'])} missing, {len(cc['unexpected'])} unexpected, "
                              f"{len(cc['shape_mismatches'])} shape mismatch(es)."
                              + (f" {restacked_text(cc['restacked'])}." if cc["restacked"] else "")
                              + (f" {relaid_text(cc['relaid'])}." if cc["relaid"] else "")))
    else:
        out.append(Block("why", f"Config check not available: {cc['reason']}"))
    return out


def _frames(r: dict) -> bool:
    """Whether the report's seq counts an audio encoder's mel frames (Whisper)."""
    return ((r["summary"] or {}).get("analytic") or {}).get("input") == "mel frames"


def _flops(r: dict) -> list[Block]:
    f = r["flops"]
    out = [Block("h2", "FLOPs")]
    if f is None:
        return out + [Block("why", f"Not available: {r['skipped'].get('flops', 'not computed')}")]
    run = f["runs"][0]
    t = run["totals"]
    arch = f["architecture"]
    image = image_text(f)
    per = [] if image else [["FLOPs per token", num(t["flops_per_token"], ",.6g")]]
    out += [Block("items", items=[
        ("model", f"{arch['family']} ({arch['model_type']}) {arch.get('architecture') or arch['head']}"),
        ("input", f"batch {f['batch']}, " + (f"one {image} each (figures per image)" if image else f"seq {run['seq']}"
                  + (f", decoder seq {run['dec_seq']}" if run["dec_seq"] else "")
                  + f" ({seq_source('--seq' if r['options']['seq'] else None, _frames(r))})")),
        ("counting", f["counting"]["flops"]), ("head", f["counting"]["head"])]),
        Block("table", header=["Quantity", "Value"], align="lr", rows=[
            ["forward FLOPs (matmul, 2 per MAC)", _int(t["flops"])], ["forward MACs", _int(t["macs"])],
            *per, ["attention FLOPs", _int(t["attention_flops"])],
            ["training FLOPs (3 x forward)", _int(t["training_flops"])],
            ["element-wise FLOPs (estimate)", _int(t["elementwise_flops"])],
            ["parameters predicted", _int(f["parameters"]["predicted"])],
            ["parameters in the checkpoint", _int(f["parameters"]["checkpoint"])]]),
        Block("details", f"Per module ({len(run['modules'])} rows; shapes per sample, sums over calls)", body=[Block(
            "table", header=["Module", "Kind", "Calls", "Parameters", "FLOPs", "Element-wise"], align="nlrrrr",
            rows=[[m["module"], m["kind"], str(m["calls"]), _int(m["params"]), _int(m["flops"]), _int(m["elementwise_flops"])]
                  for m in run["modules"]])])]
    return out + [Block("p", f"note: {n}") for n in f["notes"] + run["notes"]]


def _memory(r: dict) -> list[Block]:
    m = r["memory"]
    out = [Block("h2", "Memory")]
    if m is None:
        return out + [Block("why", f"Not available: {r['skipped'].get('memory', 'not computed')}")]
    image = image_text(m)
    out.append(Block("p", f"batch {m['batch']}, " + (f"one {image} each" if image else f"seq {m['seq']}")
                          + f"; {m['parameters']['count']:,} parameters "
                          f"(from the {m['parameters']['source']}). One device, no parallelism."))
    out.append(Block("table", header=["Group", "Item", "Bytes", "Size", "Rule"], align="llrrl",
                     rows=[[x["group"], x["item"], _int(x["bytes"]), human_bytes(x["bytes"]), x["rule"]] for x in m["lines"]]))
    need = m.get("needs_architecture")
    if need:
        out.append(Block("why", f"Not computed ({need['reason']}): {', '.join(need['lines'])}"))
    return out + [Block("p", f"note: {n}") for n in m["notes"]]


def _stats(r: dict, figures: dict[str, str], no_plot: str | None) -> list[Block]:
    from ..analysis.stats import counts_numbers

    st = r["stats"]
    out = [Block("h2", "Weight statistics")]
    if st is None:
        return out + [Block("why", f"Not available: {r['skipped'].get('stats', 'not computed')}")]
    q = ("p1", "p50", "p99")
    tot = st["total"]
    out.append(Block("p", f"{len(st['tensors'])} tensors, {st['bytes_read']:,} stored bytes read ({st['selection']['roles']} "
                          f"roles); {tot['count']:,} values, {tot['finite']:,} finite." if tot else
                          f"{len(st['tensors'])} tensors."))
    out.append(Block("table", header=["Bucket", "Tensors", "Values", "Min", "Max", "Mean", "Std", *q, "Zeros"], align="l",
                     rows=[[b["bucket"], str(b["tensors"]), _int(b["count"]), _g(b["min"]), _g(b["max"]), _g(b["mean"]),
                            _g(b["std"]), *(_g(b["quantiles"].get(k)) for k in q), _int(b["zeros"])] for b in st["buckets"]]))
    if FIGURE in figures:
        out.append(Block("img", figures[FIGURE], name=FIGURE))
    elif no_plot:
        out.append(Block("why", f"No plot: {no_plot}"))
    if st["anomalies"]:
        out += [Block("h3", "Anomalies"), Block("table", header=["Tensor", "Kind", "Detail"], align="nll",
                                                rows=[[a["name"], a["kind"], a["detail"]] for a in st["anomalies"]])]
    out.append(Block("details", f"Per tensor ({len(st['tensors'])} tensors)", body=[Block(
        "table", header=["Tensor", "Dtype", "Shape", "Min", "Max", "Mean", "Std", "Zeros", "Flags"], align="nllrrrrrl",
        rows=[[t["name"], t["dtype"], _shape(t["shape"]), _g(t["min"]), _g(t["max"]), _g(t["mean"]), _g(t["std"]),
               _int(t["zeros"]), ", ".join(t["flags"])] for t in st["tensors"]])]))
    c = st["conventions"]
    values = [("values", c["values"])] if counts_numbers(st) else []
    out.append(Block("items", items=[("std", c["std"]), ("quantiles", c["quantiles"]), ("anomalies", c["anomalies"]),
                                     *values]))
    return out


def _title(path: str) -> str:
    """The checkpoint's file with its folder: `llama-7b/model.safetensors` says more than the file alone."""
    parts = str(path).replace("\\", "/").rstrip("/").split("/")
    return "/".join(p for p in parts[-2:] if p not in ("", ".")) or str(path)


def blocks(r: dict, figures: dict[str, str], no_plot: str | None = None) -> list[Block]:
    """The document: `figures` maps a figure's name to its alt text (those drawn); `no_plot`: why none."""
    from .. import __version__

    name = _title(r["path"])
    opts = r["options"]
    head = [Block("h1", f"ckptstat report: {name}"),
            Block("p", f"Written by ckptstat {__version__} from the checkpoint's headers"
                       + (" and values (streamed, bounded memory)." if opts["read_values"] else " only (--no-stats).")
                       + f" Schema {r['schema']}.")]
    return head + _summary(r) + _ties(r) + _flops(r) + _memory(r) + _stats(r, figures, no_plot)


# ------------------------------------------------------------------------------------- the renderers
def report_markdown(r: dict, figure_links: dict[str, str] | None = None, no_plot: str | None = None) -> str:
    """Markdown; `figure_links` maps a drawn figure's name to its relative path (none: no image)."""
    links = figure_links or {}
    lines: list[str] = []

    def put(b: Block) -> None:
        if b.kind in ("h1", "h2", "h3"):
            lines.extend(["#" * int(b.kind[1]) + " " + md_cell(b.text), ""])
        elif b.kind == "p":
            lines.extend([md_cell(b.text), ""])
        elif b.kind == "why":
            lines.extend([f"_{md_cell(b.text)}_", ""])
        elif b.kind == "items":
            lines.extend([f"- **{md_cell(k)}**: {md_cell(v)}" for k, v in b.items] + [""])
        elif b.kind == "table":
            lines.extend(md_table(b.header, [[md_cell(c) for c in row] for row in b.rows], b.align or None))
        elif b.kind == "img" and b.name in links:
            lines.extend([f"![{md_cell(b.text)}]({quote(links[b.name])})", ""])
        elif b.kind == "details":   # GitHub and the Hugging Face Hub render <details> in markdown
            lines.extend([f"<details><summary>{html.escape(b.text)}</summary>", ""])
            for x in b.body:
                put(x)
            lines.extend(["</details>", ""])

    for b in blocks(r, {k: v for k, v in FIGURE_ALT.items() if k in links}, no_plot):
        put(b)
    return "\n".join(lines).rstrip("\n") + "\n"


def report_html(r: dict, pngs: dict[str, bytes] | None = None, no_plot: str | None = None) -> str:
    """A self-contained page: inline CSS, figures as PNG data URIs, no script, nothing fetched."""
    pngs = pngs or {}
    e = html.escape
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           f"<title>ckptstat report: {e(_title(r['path']))}</title>",
           f"<style>{CSS}</style></head><body>"]

    def put(b: Block) -> None:
        if b.kind in ("h1", "h2", "h3"):
            out.append(f"<{b.kind}>{e(b.text)}</{b.kind}>")
        elif b.kind in ("p", "why"):
            out.append(f'<p class="{b.kind}">{e(b.text)}</p>')
        elif b.kind == "items":
            out.append("<ul>" + "".join(f"<li><b>{e(k)}</b>: {e(v)}</li>" for k, v in b.items) + "</ul>")
        elif b.kind == "table":
            out.extend(html_table(b.header, b.rows, align=b.align or None))
        elif b.kind == "img" and b.name in pngs:
            out.append(img_tag(pngs[b.name], b.text, b.name))
        elif b.kind == "details":
            out.append(f"<details><summary>{e(b.text)}</summary>")
            for x in b.body:
                put(x)
            out.append("</details>")

    for b in blocks(r, {k: v for k, v in FIGURE_ALT.items() if k in pngs}, no_plot):
        put(b)
    return "\n".join(out + ["</body></html>"]) + "\n"


def figures(run: ReportRun) -> tuple[dict[str, bytes], str | None]:
    """The PNG figures of a report run (matplotlib, imported here only when values were read), and why
    there is none when the statistics hold nothing to draw."""
    if run.stats is None:
        return {}, None   # the statistics section says why
    from .plots import nothing_to_plot, stats_figure
    from .report_common import figure_png

    blank = nothing_to_plot(run.stats)
    if blank:
        return {}, blank
    fig, _ = stats_figure(run.stats)
    return {FIGURE: figure_png(fig)}, None


# ------------------------------------------------------------------------------------------ writing
FORMATS = {".md": "md", ".markdown": "md", ".html": "html", ".htm": "html"}


def figures_folder(output: str) -> str:
    """Where a markdown report's figures go: `report.md` -> `report_files/` beside it."""
    return os.path.splitext(os.path.abspath(output))[0] + "_files"


def check_report_output(output: str, inputs: list[str | None]) -> str:
    """The report's format from `output`'s suffix; a UsageError (one line) before anything is read or
    written when the suffix is unknown, the folder is missing, or the report or a figure beside it
    would overwrite an input."""
    from ..core.files import check_output
    from ..errors import UsageError

    fmt = FORMATS.get(os.path.splitext(output)[1].lower())
    if fmt is None:
        raise UsageError(f"{output}: the report file must end in .md or .html")
    check_output(output, inputs)
    if fmt == "md":
        folder = figures_folder(output)
        if os.path.islink(folder) or os.path.lexists(folder) and not os.path.isdir(folder):
            raise UsageError(f"{output}: {folder} (where the figures go) exists and is not a folder")
        if os.path.isdir(folder):
            check_output(os.path.join(folder, f"{FIGURE}.png"), inputs)
    return fmt


def write_report(output: str, run: ReportRun, inputs: list[str | None]) -> list[str]:
    """Render the whole report in memory, then write it: the figures first (markdown: into
    `<name>_files/`), each through a temporary file renamed into place, the report last. An error
    before the writing leaves nothing behind. Returns the paths written."""
    fmt = check_report_output(output, inputs)
    pngs, no_plot = figures(run)
    return write_with_figures(output, fmt, pngs, lambda: report_html(run.report, pngs, no_plot),
                              lambda links: report_markdown(run.report, links, no_plot))


def write_with_figures(output: str, fmt: str, pngs: dict[str, bytes], html: Callable[[], str],
                       markdown: Callable[[dict[str, str]], str]) -> list[str]:
    """A report and its figures: HTML with the figures inside, or markdown linking them in `<name>_files/` (written
    first); each file through a temporary one renamed into place. Returns the paths written."""
    from ..core.files import atomic_output

    written: list[tuple[str, bytes]] = []
    if fmt == "html":
        text = html()
    else:
        folder = figures_folder(output)
        text = markdown({name: f"{os.path.basename(folder)}/{name}.png" for name in pngs})
        written = [(os.path.join(folder, f"{name}.png"), png) for name, png in pngs.items()]
        if written:
            os.makedirs(folder, exist_ok=True)
    for path, data in [*written, (output, text.encode("utf-8"))]:
        with atomic_output(path) as tmp, open(tmp, "wb") as f:
            f.write(data)
    return [p for p, _ in written] + [output]
