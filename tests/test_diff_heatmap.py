"""The HTML diff report's heatmap (issue 20): mean relative L2 per layer and module, a PNG drawn by
matplotlib and embedded as a data URI. The pair is written by transformers (save_pretrained) with a
"fine-tune" that touched only some modules of the last layers; the oracle is that set of modules (from
torch's own module tree) and numpy's relative L2 of each changed tensor."""
from __future__ import annotations

import base64
import io
import subprocess
import sys
from html.parser import HTMLParser

import numpy as np
import pytest

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")

from ckptstat import open_checkpoint  # noqa: E402
from ckptstat.analysis.diff import diff  # noqa: E402
from ckptstat.render.diff import diff_html  # noqa: E402
from ckptstat.render.diff_heatmap import heatmap_matrix  # noqa: E402

LAYERS = 4


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """(a, b, {(layer, module): [rel L2 of each changed tensor]}) for a 4-layer LLaMA whose layer 2 MLP and
    layer 3 attention were changed."""
    root = tmp_path_factory.mktemp("heat")
    torch.manual_seed(0)
    model = T.LlamaForCausalLM(T.LlamaConfig(vocab_size=97, hidden_size=32, num_hidden_layers=LAYERS, num_attention_heads=4,
                                             num_key_value_heads=2, intermediate_size=48))
    model.save_pretrained(root / "a")
    changed: dict[tuple[int, str], list[float]] = {}
    with torch.no_grad():
        for i, layer in enumerate(model.model.layers):
            parent = {2: "mlp", 3: "self_attn"}.get(i)
            if parent is None:
                continue
            for mod_name, mod in layer.named_modules():
                if not mod_name.startswith(parent + ".") or not isinstance(mod, torch.nn.Linear):
                    continue
                before = mod.weight.detach().numpy().astype(np.float64).copy()
                mod.weight.add_(0.01 * torch.randn_like(mod.weight))
                after = mod.weight.detach().numpy().astype(np.float64)
                changed.setdefault((i, mod_name), []).append(float(np.linalg.norm(after - before) / np.linalg.norm(before)))
    model.save_pretrained(root / "b")
    return str(root / "a"), str(root / "b"), changed


def test_grid_cells_are_the_modules_that_changed(pair):
    a, b, changed = pair
    r = diff(open_checkpoint(a), open_checkpoint(b))
    grid = r["summary"]["grid"]
    assert {c["layer"] for c in grid} == set(range(LAYERS))
    got = {(c["layer"], c["module"]): c for c in grid if c["changed"]}
    assert set(got) == set(changed)
    for key, rels in changed.items():
        assert got[key]["mean_rel_l2"] == pytest.approx(float(np.mean(rels)), rel=1e-6)
    assert all(c["mean_rel_l2"] == 0 for c in grid if not c["changed"])


def test_heatmap_matrix_and_png_in_the_html(pair):
    a, b, changed = pair
    r = diff(open_checkpoint(a), open_checkpoint(b))
    rows, cols, values = heatmap_matrix(r)
    assert rows == [f"layer {i}" for i in range(LAYERS)]
    for (layer, module), rels in changed.items():
        assert values[layer][cols.index(module)] == pytest.approx(float(np.mean(rels)), rel=1e-6)
    assert sum(v > 0 for row in values for v in row) == len(changed)

    class Images(HTMLParser):
        def __init__(self):
            super().__init__()
            self.srcs: list[str] = []

        def handle_starttag(self, tag, attrs):
            if tag == "img":
                self.srcs.append(dict(attrs)["src"])

    page = diff_html(r)
    parser = Images()
    parser.feed(page)
    assert len(parser.srcs) == 1 and parser.srcs[0].startswith("data:image/png;base64,")
    png = base64.b64decode(parser.srcs[0].split(",", 1)[1])
    from PIL import Image

    img = Image.open(io.BytesIO(png))
    assert img.format == "PNG" and img.size[0] > 200 and img.size[1] > 100
    assert "http://" not in page and "https://" not in page and "<script" not in page


def test_no_heatmap_without_compared_layers(pair):
    a, _, _ = pair
    assert "<img" not in diff_html(diff(open_checkpoint(a), open_checkpoint(a)))   # same file: nothing read
    _, b, _ = pair
    assert "<img" not in diff_html(diff(open_checkpoint(a), open_checkpoint(b), names_only=True))


def test_markdown_and_json_do_not_load_matplotlib(pair):
    a, b, _ = pair
    code = ("import sys, json; from ckptstat import open_checkpoint; from ckptstat.analysis.diff import diff; "
            "from ckptstat.render.diff import diff_markdown; "
            f"r = diff(open_checkpoint({a!r}), open_checkpoint({b!r})); diff_markdown(r); json.dumps(r); "
            "assert 'matplotlib' not in sys.modules, 'matplotlib loaded'")
    subprocess.run([sys.executable, "-c", code], check=True)
