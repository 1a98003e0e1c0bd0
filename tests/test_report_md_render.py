"""Tensor names in the markdown reports (`diff -o x.md`, `report -o x.md`) read as written once rendered: no markup,
no character reference, no strikethrough. Was: `&` was left as it is, so a name holding `&lt;b&gt;` rendered as `<b>`,
and `~~x~~` as struck-through `x`. Oracle: markdown-it-py (CommonMark with GFM tables and strikethrough) renders the
file, html.parser reads each table row's first cell back; the names are those safetensors stores (no `/`, which
diff aligns as `.`)."""
from __future__ import annotations

import re
import subprocess
import sys
from html.parser import HTMLParser

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

markdown_it = pytest.importorskip("markdown_it")

NAMES = ["&lt;b&gt;.weight", "a&amp;b.weight", "&#60;i&#62;.weight", "~~struck~~.weight", "<i>x.weight",
         "[x](http:,,e,x).weight", "*y*_z_.weight", "p|q.weight", "back`tick`.weight", "a\\b.weight"]


class _FirstCells(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.cells: list[str] = []
        self._col = -1
        self._in = False

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag == "tr":
            self._col = -1
        elif tag in ("td", "th"):
            self._col += 1
            self._in = self._col == 0
            if self._in:
                self.cells.append("")

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th"):
            self._in = False

    def handle_data(self, data: str) -> None:
        if self._in:
            self.cells[-1] += data


def _rendered_first_cells(md: str) -> list[str]:
    html = markdown_it.MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(md)
    p = _FirstCells()
    p.feed(html)
    return p.cells


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("mdnames")
    g = torch.Generator().manual_seed(0)
    a = {n: torch.randn(3, generator=g) for n in NAMES}
    save_file(a, str(d / "a.safetensors"))
    save_file({n: v + 1 for n, v in a.items()}, str(d / "b.safetensors"))
    with safe_open(str(d / "a.safetensors"), "pt") as f:
        assert sorted(f.keys()) == sorted(NAMES)
    return d


@pytest.mark.parametrize("command", ["diff", "report"])
def test_names_read_as_written(files, command) -> None:
    out = files / f"{command}.md"
    args = [str(files / "a.safetensors")] + ([str(files / "b.safetensors")] if command == "diff" else [])
    p = subprocess.run([sys.executable, "-m", "ckptstat", command, *args, "-o", str(out)], capture_output=True, text=True)
    assert p.returncode == (1 if command == "diff" else 0), p.stderr
    cells = _rendered_first_cells(out.read_text())
    missing = [n for n in NAMES if n not in cells]
    assert not missing, (missing, cells)


def test_diff_text_columns_left_numbers_right(files) -> None:
    """docs/report.md: text columns `:---`, numbers `---:`. Was: the diff's change and detail columns (and a non-tensor
    value's A / B) were right-aligned as numbers."""
    out = files / "align.md"
    subprocess.run([sys.executable, "-m", "ckptstat", "diff", str(files / "a.safetensors"), str(files / "b.safetensors"),
                    "-o", str(out)], capture_output=True, text=True)
    html = markdown_it.MarkdownIt("commonmark").enable(["table"]).render(out.read_text())
    heads = re.findall(r'<th style="text-align:(\w+)">([^<]*)</th>', html)
    table = {text: align for align, text in heads[heads.index(("left", "tensor")):][:6]}
    assert [table.get(h) for h in ("tensor", "change", "detail", "max abs diff", "rel L2", "cosine")] == \
        ["left", "left", "left", "right", "right", "right"], heads
