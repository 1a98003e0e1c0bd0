"""The HTML report of `ckptstat report` in a real headless browser (issue 20): Chromium (Debian's
`chromium` package) loads the page from disk with the network off; its DOM keeps every table and the
figure; a screenshot shows the page drawn. Runs where Chromium is installed, as tests/test_diff_browser.py
(whose launcher it shares); the HTML parser tests (tests/test_report.py) run everywhere."""
from __future__ import annotations

import pytest
from test_diff_browser import CHROMIUM, _chromium, screenshot_colours
from test_report import Page

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no Chromium here (Debian package `chromium`)")
torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")

from ckptstat.cli import main  # noqa: E402


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    root = tmp_path_factory.mktemp("report-browser")
    torch.manual_seed(0)
    model = T.LlamaForCausalLM(T.LlamaConfig(vocab_size=97, hidden_size=32, num_hidden_layers=4, num_attention_heads=4,
                                             num_key_value_heads=2, intermediate_size=48))
    model.save_pretrained(root / "llama")
    out = root / "report.html"
    assert main(["report", str(root / "llama"), "-o", str(out)]) == 0
    return root, out


def test_chromium_keeps_tables_and_figure(report):
    root, page = report
    dom = _chromium("--dump-dom", page.as_uri(), cwd=str(root)).stdout
    seen, source = Page(), Page()
    seen.feed(dom)
    source.feed(page.read_text())
    assert len(seen.tables) == len(source.tables) > 8
    assert [t["header"] for t in seen.tables] == [t["header"] for t in source.tables]
    assert len(seen.images) == 1 and seen.images[0].startswith("data:image/png;base64,")


def test_chromium_screenshot(report):
    root, page = report
    colours = screenshot_colours(root, page, 1100, 5000)   # tall enough for the whole page: the statistics come last
    assert colours is not None and len(colours) > 50   # drawn text and tables, not a blank page
    seen = {rgb for _, rgb in colours}
    assert (242, 242, 242) in seen   # the tables' header shading
    assert (0x6B, 0xAE, 0xD6) in seen   # the histograms' fill (render/plots.py), decoded from the data URI and drawn
