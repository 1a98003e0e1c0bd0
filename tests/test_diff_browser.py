"""The HTML diff report in a real headless browser (issue 20): Chromium (Debian's `chromium` package)
loads the page from disk with the network off, its DOM keeps the tables and the heatmap image, and a
screenshot shows it drawn. Runs where Chromium is installed (it is not a pip package); the HTML parser
tests (tests/test_diff.py, tests/test_diff_heatmap.py) run everywhere."""
from __future__ import annotations

import os
import shutil
import subprocess
from html.parser import HTMLParser

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no Chromium here (Debian package `chromium`)")
torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")

from ckptstat.cli import main  # noqa: E402

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
         "--proxy-server=127.0.0.1:9", "--proxy-bypass-list=<-loopback>"]   # any request it tried would fail


def _chromium(*args: str, cwd: str) -> subprocess.CompletedProcess:
    home = os.path.join(cwd, "home")
    os.makedirs(home, exist_ok=True)
    return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={home}", *args], capture_output=True, text=True,
                          cwd=cwd, env=dict(os.environ, HOME=home), check=True)


def screenshot_colours(root, page, width: int, height: int) -> list[tuple[int, tuple[int, int, int]]]:
    """(count, RGB) of every colour in Chromium's screenshot of `page` at width x height."""
    shot = root / "shot.png"
    _chromium(f"--screenshot={shot}", f"--window-size={width},{height}", "--hide-scrollbars", page.as_uri(), cwd=str(root))
    from PIL import Image

    img = Image.open(shot).convert("RGB")
    assert img.size == (width, height)
    colours = img.getcolors(maxcolors=1 << 20)
    assert colours is not None
    return colours


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    root = tmp_path_factory.mktemp("browser")
    torch.manual_seed(0)
    model = T.LlamaForCausalLM(T.LlamaConfig(vocab_size=97, hidden_size=32, num_hidden_layers=4, num_attention_heads=4,
                                             num_key_value_heads=2, intermediate_size=48))
    model.save_pretrained(root / "base")
    with torch.no_grad():
        for p in model.model.layers[3].parameters():
            p.add_(0.01 * torch.randn_like(p))
    model.save_pretrained(root / "tuned")
    out = root / "report.html"
    assert main(["diff", str(root / "base"), str(root / "tuned"), "-o", str(out)]) == 1
    return root, out


class _Dom(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tables = 0
        self.images: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.tables += 1
        elif tag == "img":
            self.images.append(dict(attrs).get("src", ""))


def test_chromium_keeps_tables_and_heatmap(report):
    root, page = report
    dom = _chromium("--dump-dom", page.as_uri(), cwd=str(root)).stdout
    seen, source = _Dom(), _Dom()
    seen.feed(dom)
    source.feed(page.read_text())
    assert seen.tables == source.tables > 0
    assert len(seen.images) == 1 and seen.images[0].startswith("data:image/png;base64,")


def test_chromium_screenshot(report):
    root, page = report
    colours = screenshot_colours(root, page, 1100, 1400)
    assert colours is not None and len(colours) > 50   # drawn text, tables and the heatmap, not a blank page
    # the heatmap's reds: strongly red pixels exist (the changed layer), as the report draws them
    assert any(r > 150 and g < 90 and b < 90 for _, (r, g, b) in colours)
