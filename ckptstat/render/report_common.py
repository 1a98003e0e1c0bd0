"""What the shareable reports (`ckptstat diff -o`, `ckptstat report -o`) have in common: markdown
cells and tables in the style of gguf-py's `gguf_dump.py --markdown` (columns padded to their widest
cell, `:--` left / `--:` right alignment), a self-contained HTML page's style sheet and tables, and
PNG figures embedded as data URIs. Text from files is escaped here, once: a tensor name can hold
pipes, backticks, markdown emphasis or HTML."""
from __future__ import annotations

import base64
import html
import io
from typing import TYPE_CHECKING

from ..core.text import inert

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def num(x: float | None, fmt: str = ".3g") -> str:
    return "" if x is None else format(x, fmt)


def plot_text(x: object) -> str:
    """A file-derived string for a matplotlib label: inert, and its `$` escaped, so that a name holding
    `$\\cmd{$` is shown as written instead of parsed as mathtext (an unknown command raised ValueError
    when the figure was drawn)."""
    return inert(x).replace("$", "\\$")


def md_cell(x: object) -> str:
    """A cell: pipes, backticks, markdown emphasis and strikethrough, links, HTML and its character references
    (`&lt;`), newlines and control characters from file names made harmless: rendered, it reads as written."""
    s = str(x).replace("\\", "\\\\").replace("|", "\\|").replace("`", "\\`").replace("*", "\\*").replace("_", "\\_")
    s = s.replace("[", "\\[").replace("]", "\\]")   # a name `[x](https://...)` is no link, `![x](...)` no image
    s = s.replace("~", "\\~")   # `~~x~~` no strikethrough (GFM)
    s = s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("\r", " ").replace("\n", " ")
    return inert(s)


def _aligns(n: int, align: str | None) -> str:
    """One letter per column: n a name from a file (left, monospace in HTML), l other text (left), r a
    number (right); default: the first column a name, the rest numbers."""
    return (align or "n" + "r" * (n - 1)).ljust(n, "r")


def md_table(header: list[str], rows: list[list[str]], align: str | None = None) -> list[str]:
    """A table as gguf_dump's `markdown_table_with_alignment_support` draws it: every column padded to
    its widest cell, left-aligned (`:---`) or right-aligned (`---:`) by `align` (see `_aligns`).
    Cells must already be escaped (`md_cell`). Followed by a blank line."""
    al = _aligns(len(header), align)
    widths = [max([len(h)] + [len(r[i]) for r in rows]) + 2 for i, h in enumerate(header)]

    def line(cells: list[str]) -> str:
        return "|" + "|".join(" " + c.ljust(w - 1) if al[i] in "nl" else c.rjust(w - 1) + " "
                              for i, (c, w) in enumerate(zip(cells, widths))) + "|"

    rule = "|" + "|".join(":" + "-" * (w - 1) if al[i] in "nl" else "-" * (w - 1) + ":" for i, w in enumerate(widths)) + "|"
    return [line(header), rule, *(line(r) for r in rows), ""]


CSS = ("body{font-family:system-ui,sans-serif;margin:2em;color:#222}"
       "table{border-collapse:collapse;margin:0 0 1.5em;font-size:.9em}"
       "th,td{border:1px solid #ccc;padding:2px 6px}td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}"
       "th{background:#f2f2f2}td.name{font-family:monospace}img{max-width:100%;margin:0 0 1.5em}"
       "details{margin:0 0 1.5em}summary{cursor:pointer}p.why{color:#666;font-style:italic}")


def html_table(header: list[str], rows: list[list[str]], heat: int | None = None, align: str | None = None) -> list[str]:
    """A table; cells escaped, aligned as `md_table` (text columns as names in monospace, numbers
    right-aligned). `heat`: the column whose value (a relative L2) shades its cell."""
    al = _aligns(len(header), align)
    out = ["<table>", "<tr>" + "".join(f"<th>{html.escape(inert(h))}</th>" for h in header) + "</tr>"]
    for row in rows:
        cells = []
        for i, c in enumerate(row):
            style = ""
            if i == heat and c:
                level = min(1.0, max(0.0, float(c) * 10))   # rel L2 0.1 and up: full colour
                style = f' style="background:rgba(220,50,32,{level:.2f})"'
            cls = {"n": ' class="name"', "r": ' class="n"'}.get(al[i], "")
            cells.append(f'<td{cls}{style}>{html.escape(inert(c))}</td>')
        out.append("<tr>" + "".join(cells) + "</tr>")
    return out + ["</table>"]


def figure_png(fig: Figure, tight: bool = False) -> bytes:
    """A matplotlib figure as PNG bytes, without the `Software` tag (the same bytes on every run)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight" if tight else None, metadata={"Software": None})
    return buf.getvalue()


def img_tag(png: bytes, alt: str, cls: str = "") -> str:
    """An <img> holding the PNG as a data URI: the page stays one file and needs no network."""
    data = base64.b64encode(png).decode("ascii")
    klass = f' class="{cls}"' if cls else ""
    return f'<img{klass} alt="{html.escape(alt)}" src="data:image/png;base64,{data}">'
