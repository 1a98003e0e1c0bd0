"""`ckptstat report` (issue 20): one checkpoint's summary, ties, FLOPs, memory and weight statistics as
markdown (figures beside it) or one self-contained HTML page. Checkpoints are written by the real
writers (transformers save_pretrained of GPT-2 and BERT, torch.save, gguf's GGUFWriter through
fixtures/make_gguf.py); the figures in the tables are checked against the libraries' own: parameters
from model.parameters(), FLOPs from torch's FlopCounterMode on the eager model, min/max/mean of every
weight from numpy (GGUF: gguf.quants.dequantize)."""
from __future__ import annotations

import base64
import io
import json
import os
import re
import struct
import subprocess
import sys
from html.parser import HTMLParser

import numpy as np
import pytest

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "fixtures")
GGUF = os.path.join(FIXTURES, "gguf", "llama-tiny-q.gguf")


def _gpt2():
    return T.GPT2LMHeadModel(T.GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=97, n_positions=64,
                                          attn_implementation="eager"))


def _bert():
    return T.BertModel(T.BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                    intermediate_size=48, max_position_embeddings=64, attn_implementation="eager"))


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """{name: (folder, model)} written by save_pretrained."""
    root = tmp_path_factory.mktemp("report")
    torch.manual_seed(0)
    out = {}
    for name, make in (("gpt2", _gpt2), ("bert", _bert)):
        model = make().eval()
        model.save_pretrained(root / name)
        out[name] = (str(root / name), model)
    return out


class Page(HTMLParser):
    """Tables (with the h2 section they are under), images, paragraphs, and every URL the page names."""

    def __init__(self) -> None:
        super().__init__()
        self.section = ""
        self.tables: list[dict] = []
        self.images: list[str] = []
        self.urls: list[str] = []
        self.tags: set[str] = set()
        self.why: list[tuple[str, str]] = []
        self._cell: list[str] | None = None
        self._row: list[str] | None = None
        self._text: list[str] | None = None
        self._in: str | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.add(tag)
        self.urls += [v for k, v in attrs if k in ("src", "href") and v is not None]
        if tag == "table":
            self.tables.append({"section": self.section, "header": [], "rows": []})
        elif tag == "tr":
            self._row = []
        elif tag in ("td", "th"):
            self._cell = []
        elif tag == "img":
            self.images.append(a.get("src", ""))
        elif tag in ("h2", "p"):
            self._text, self._in = [], tag if tag == "h2" else a.get("class")

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None and self._row is not None:
            self._row.append("".join(self._cell))
            self._cell = None
        elif tag == "tr" and self._row is not None:
            t = self.tables[-1]
            if t["header"]:
                t["rows"].append(self._row)
            else:
                t["header"] = self._row
            self._row = None
        elif tag in ("h2", "p") and self._text is not None:
            text = "".join(self._text)
            if tag == "h2":
                self.section = text
            elif self._in == "why":
                self.why.append((self.section, text))
            self._text = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)
        if self._text is not None:
            self._text.append(data)

    def table(self, section: str, *header: str) -> list[dict[str, str]]:
        """The rows of the table under `section` whose header starts with `header`."""
        for t in self.tables:
            if t["section"] == section and tuple(t["header"][:len(header)]) == header:
                return [dict(zip(t["header"], r)) for r in t["rows"]]
        raise AssertionError(f"no table {header!r} under {section!r}")


def _page(path) -> Page:
    p = Page()
    p.feed(open(path, encoding="utf-8").read())
    return p


def _n(cell: str) -> float:
    return float(cell.replace(",", ""))


def _png(data: bytes) -> tuple[int, int]:
    from PIL import Image

    img = Image.open(io.BytesIO(data))
    img.verify()
    assert img.format == "PNG"
    return img.size


def _check_self_contained(page: Page) -> None:
    assert not page.tags & {"script", "link", "iframe", "object", "embed"}
    assert all(u.startswith("data:") or u.startswith("#") for u in page.urls), page.urls


def _check_stats(page: Page, arrays: dict[str, np.ndarray]) -> None:
    """Every weight in the per-tensor table, its min/max/mean against numpy on the writer's own array."""
    rows = page.table("Weight statistics", "Tensor", "Dtype")
    assert sorted(r["Tensor"] for r in rows) == sorted(arrays)
    for r in rows:
        a = arrays[r["Tensor"]].astype(np.float64)
        for col, want in (("Min", a.min()), ("Max", a.max()), ("Mean", a.mean())):
            # printed to 6 significant digits: within half a unit of the 6th
            assert _n(r[col]) == pytest.approx(want, rel=5.01e-6, abs=1e-12), (r["Tensor"], col)


def _flop_counter(model, seq: int, batch: int = 1) -> int:
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as fc, torch.no_grad():
        model(input_ids=torch.zeros(batch, seq, dtype=torch.long))
    return fc.get_total_flops()


@pytest.mark.parametrize("family", ["gpt2", "bert"])
def test_html_report_against_the_libraries(saved, family, cli, tmp_path) -> None:
    folder, model = saved[family]
    out = tmp_path / "report.html"
    rc, stdout, err = cli("report", folder, "-o", str(out))
    assert rc == 0 and err == "" and str(out) in stdout
    page = _page(out)
    _check_self_contained(page)
    params = sum(p.numel() for p in model.parameters())   # tied weights once, as torch counts them
    buckets = page.table("Summary", "Bucket")
    assert sum(_n(b["Parameters"]) for b in buckets) == params
    conventions = {r["Convention"]: _n(r["Parameters"]) for r in page.table("Tied weights and parameter counts", "Convention")}
    assert conventions[f"model.parameters() of {type(model).__name__}"] == params
    flops = {r["Quantity"]: r["Value"] for r in page.table("FLOPs", "Quantity")}
    assert _n(flops["forward FLOPs (matmul, 2 per MAC)"]) == _flop_counter(model, 64)   # seq: the 64 positions
    from safetensors.numpy import load_file

    stored = load_file(os.path.join(folder, "model.safetensors"))   # what save_pretrained wrote
    _check_stats(page, {k: v for k, v in stored.items() if k in dict(model.named_parameters())})
    assert len(page.images) == 1 and page.images[0].startswith("data:image/png;base64,")
    w, h = _png(base64.b64decode(page.images[0].split(",", 1)[1]))
    assert w > 400 and h > 300
    assert page.why == []   # every part applies


def test_every_figure_at_the_requested_seq_and_batch(saved, cli) -> None:
    """`report -s 32 -b 2`: the summary's FLOPs line, the FLOPs part and the memory part all at seq 32 (the
    summary line read seq 128); the forward FLOPs are FlopCounterMode's on a (2, 32) forward."""
    folder, model = saved["gpt2"]
    want = _flop_counter(model, 32, batch=2)
    rc, out, err = cli("report", folder, "-s", "32", "-b", "2", "--no-stats", "--json")
    assert rc == 0, err
    r = json.loads(out)
    run = r["flops"]["runs"][0]
    assert run["totals"]["flops"] == want and run["tokens"] == 2 * 32
    assert r["summary"]["analytic"]["seq"] == run["seq"] == r["memory"]["seq"] == 32 and r["memory"]["batch"] == 2
    assert r["summary"]["analytic"]["flops_per_token"] * 2 * 32 == want
    rc, md, err = cli("report", folder, "-s", "32", "-b", "2", "--no-stats")
    assert rc == 0, err
    line = re.search(r"- \*\*forward\*\*: ([\d,]+) FLOPs per token at seq (\d+) ", md)
    assert line and line.group(2) == "32", md[:2000]
    flops = {c[0]: c[1] for t in _md_tables(md) for c in map(_cells, t) if len(c) == 2}
    assert _n(flops["forward FLOPs (matmul, 2 per MAC)"]) == want
    assert _n(line.group(1)) == _n(flops["FLOPs per token"]) == want / (2 * 32)
    assert "batch 2, seq 32; " in md   # the memory part


def _md_tables(text: str) -> list[list[str]]:
    """Each run of `|` lines."""
    tables: list[list[str]] = []
    cur: list[str] = []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            cur.append(line)
        elif cur:
            tables.append(cur)
            cur = []
    return tables


def _cells(line: str) -> list[str]:
    return [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]


def test_markdown_report_tables_and_figure_files(saved, cli, tmp_path) -> None:
    folder, model = saved["gpt2"]
    out = tmp_path / "card.md"
    rc, _, err = cli("report", folder, "-o", str(out))
    assert rc == 0 and err == ""
    text = out.read_text()
    assert text.startswith("# ckptstat report: ")
    tables = _md_tables(text)
    assert len(tables) >= 8
    for t in tables:   # well-formed: one column count, an alignment rule, every line padded to one width (gguf_dump)
        assert len({len(_cells(line)) for line in t}) == 1
        assert all(re.fullmatch(r":-+|-+:", c) for c in _cells(t[1]))
        assert len({len(line) for line in t}) == 1
    bucket = next([_cells(line) for line in t] for t in tables if _cells(t[0])[:2] == ["Bucket", "Parameters"])
    assert sum(_n(r[1]) for r in bucket[2:]) == sum(p.numel() for p in model.parameters())
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    assert links == ["card_files/weights.png"]
    _png((tmp_path / links[0]).read_bytes())
    assert "base64" not in text
    assert sorted(os.listdir(tmp_path)) == ["card.md", "card_files"]   # no temporary file left


def test_torch_save_of_an_unknown_architecture(cli, tmp_path) -> None:
    torch.manual_seed(1)
    net = torch.nn.Sequential(torch.nn.Linear(12, 20), torch.nn.Tanh(), torch.nn.Linear(20, 3))
    path = tmp_path / "mlp.pt"
    torch.save(net.state_dict(), path)
    out = tmp_path / "r.html"
    rc, _, err = cli("report", str(path), "-o", str(out))
    assert rc == 0 and err == ""
    page = _page(out)
    _check_self_contained(page)
    why = dict(page.why)
    assert why["FLOPs"].startswith("Not available: no architecture ckptstat can model")
    lines = page.table("Memory", "Group")
    stored = next(r for r in lines if r["Group"] == "weights")
    assert _n(stored["Bytes"]) == sum(p.numel() * p.element_size() for p in net.parameters())
    assert "Memory" in why   # the lines that need an architecture, said
    modules = {r["Module"]: _n(r["Parameters"]) for r in page.table("Summary", "Module")}
    assert modules == {name: sum(p.numel() for p in m.parameters()) for name, m in net.named_children()
                       if any(True for _ in m.parameters())}
    _check_stats(page, {k: v.numpy() for k, v in net.state_dict().items()})
    assert len(page.images) == 1


def test_gguf_report_against_gguf_py(cli, tmp_path) -> None:
    from gguf import GGUFReader
    from gguf.quants import dequantize

    out = tmp_path / "r.html"
    rc, _, err = cli("report", GGUF, "-o", str(out))
    assert rc == 0 and err == ""
    page = _page(out)
    reader = GGUFReader(GGUF)
    # llama.cpp stores rope_freqs precomputed: a buffer of the model, not one of its parameters
    weights = {t.name: dequantize(t.data, t.tensor_type) for t in reader.tensors if t.name != "rope_freqs.weight"}
    buckets = page.table("Summary", "Bucket")
    assert sum(_n(b["Parameters"]) for b in buckets) == sum(int(t.n_elements) for t in reader.tensors
                                                            if t.name in weights)
    _check_stats(page, weights)


def test_header_only_report_reads_no_value_and_loads_no_plotting(saved, tmp_path) -> None:
    folder, _ = saved["gpt2"]
    out = tmp_path / "r.md"
    code = (f"import sys; from ckptstat.cli import main; rc = main(['report', {folder!r}, '--no-stats', '-o', {str(out)!r}]); "
            "print(rc, sorted(m for m in ('torch', 'matplotlib', 'transformers', 'h5py') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip().splitlines()[-1] == "0 []"
    text = out.read_text()
    assert "_Not available: --no-stats: a header-only report, no tensor value read_" in text
    assert "![" not in text and not (tmp_path / "r_files").exists()


def test_no_numeric_parameter_and_json(cli, tmp_path) -> None:
    from safetensors.numpy import save_file

    path = tmp_path / "ids.safetensors"
    save_file({"embeddings.position_ids": np.arange(16, dtype=np.int64)[None]}, str(path))
    rc, out, err = cli("report", str(path), "--json")
    assert rc == 0 and err == ""
    r = json.loads(out)
    assert r["schema"] == "ckptstat.report/1" and r["stats"] is None and r["flops"] is None and r["memory"] is None
    assert set(r["skipped"]) == {"flops", "memory", "stats"}
    assert r["skipped"]["stats"].startswith("no numeric parameter tensor to read")
    rc, _, err = cli("report", str(path), "-o", str(tmp_path / "r.html"))
    assert rc == 0
    why = dict(_page(tmp_path / "r.html").why)
    assert {"FLOPs", "Memory", "Weight statistics"} <= set(why)


def test_markdown_on_stdout(saved, cli) -> None:
    rc, out, err = cli("report", saved["bert"][0], "--no-stats")
    assert rc == 0 and out.startswith("# ckptstat report: ") and "## Weight statistics" in out


@pytest.mark.parametrize("fmt", ["md", "html"])
def test_every_hostile_format_writes_nothing(cli, tmp_path, fmt) -> None:
    """The damaged file of every format (tests/test_cli_hostile.py): one line naming it, no report, no figure."""
    from test_cli_hostile import _hostile_files

    os.makedirs(tmp_path / "in")
    for path in _hostile_files(tmp_path / "in").values():
        rc, out, err = cli("report", path, "-o", str(tmp_path / f"r.{fmt}"))
        assert rc == 1 and out == "" and err.count("\n") == 1 and os.path.basename(path) in err, err
        assert sorted(os.listdir(tmp_path)) == ["in"]


def test_hostile_and_refused_outputs(saved, cli, tmp_path) -> None:
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(struct.pack("<Q", 1 << 40) + b"{}")   # a header length past the end of the file
    before = sorted(os.listdir(tmp_path))
    rc, out, err = cli("report", str(bad), "-o", str(tmp_path / "r.md"))
    assert rc == 1 and out == "" and err.count("\n") == 1 and "bad.safetensors" in err and "Traceback" not in err
    assert sorted(os.listdir(tmp_path)) == before
    folder = saved["gpt2"][0]
    weights = os.path.join(folder, "model.safetensors")
    link = tmp_path / "r.html"
    link.symlink_to(weights)   # the output resolves to the input
    data = open(weights, "rb").read()
    rc, _, err = cli("report", folder, "-o", str(link))
    assert rc == 2 and "refusing to overwrite" in err and err.count("\n") == 1
    assert open(weights, "rb").read() == data
    for target, says in ((tmp_path / "r.txt", "must end in .md or .html"), (tmp_path / "no" / "r.md", "does not exist")):
        rc, _, err = cli("report", folder, "-o", str(target))
        assert rc == 2 and says in err and err.count("\n") == 1
    assert sorted(os.listdir(tmp_path)) == sorted(before + ["r.html"])


def test_a_training_checkpoints_record_and_values(cli) -> None:
    """A Lightning checkpoint (written by Lightning, fixtures/make_training.py): the report says its step and epoch as
    the file holds them, and lists every non-tensor value torch.load gives back (test_torch_data_classes' naming)."""
    from test_torch_data_classes import _values

    from ckptstat.render.report_common import md_cell

    path = os.path.join(FIXTURES, "training", "lightning", "last.ckpt")
    obj = torch.load(path, weights_only=False)
    want = _values(obj, "last.ckpt")
    rc, md, _ = cli("report", path, "--no-stats")
    assert rc == 0 and f"step {obj['global_step']}, epoch {obj['epoch']}" in md
    assert f"Non-tensor values ({len(want):,})" in md
    assert all(md_cell(name) in md for name in want)
