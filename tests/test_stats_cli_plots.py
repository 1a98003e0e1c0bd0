"""`ckptstat stats` / `ckptstat plot` in-process, and the rendered files checked as images."""
from __future__ import annotations

import csv
import io
import json
import os
import struct
import xml.etree.ElementTree as ET

from ckptstat.cli import main

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BERT = os.path.join(ROOT, "fixtures", "bert-tiny")
LLAMA = os.path.join(ROOT, "fixtures", "llama-tiny-sharded")


def test_stats_json(capsys) -> None:
    assert main(["stats", BERT, "--json", "--chunk-bytes", "256"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["schema"] == "ckptstat.stats/1"
    assert [b["bucket"] for b in r["buckets"]] == ["embedding", "encoder", "pooler"]
    assert [(x["bucket"], x["layer"]) for x in r["layers"]] == [("encoder", 0), ("encoder", 1)]
    assert r["total"]["count"] == sum(t["count"] for t in r["tensors"])
    assert set(r["tensors"][0]["quantiles"]) == {"p1", "p5", "p25", "p50", "p75", "p95", "p99"}


def test_stats_csv_and_filters(capsys) -> None:
    assert main(["stats", LLAMA, "--csv", "-B", "encoder", "-f", "*mlp*"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    tensors = [r for r in rows if r["level"] == "tensor"]
    assert len(tensors) == 9 and all(".mlp." in r["name"] for r in tensors)
    assert {r["level"] for r in rows} == {"tensor", "layer", "bucket", "total"}
    assert float(rows[0]["min"]) <= float(rows[0]["p1"]) <= float(rows[0]["p99"]) <= float(rows[0]["max"])


def test_stats_human_fits_80_columns(capsys, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")   # a terminal's width (piped with none, names are whole: test_cli_output.py)
    assert main(["stats", LLAMA, "--layers", "--tensors", "--workers", "2"]) == 0
    out = capsys.readouterr().out
    assert "Quantiles by bucket" in out and "encoder.2" in out
    assert max(len(ln) for ln in out.splitlines()) <= 80   # long names elided in the middle, never wrapped
    assert "model.layers.0…down_proj.weight" in out or "model.layers…down_proj.weight" in out


def test_stats_errors(tmp_path, capsys) -> None:
    assert main(["stats", BERT, "--json", "--csv"]) == 2
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{}")
    assert main(["stats", str(bad)]) == 1
    err = capsys.readouterr().err
    assert "bad.safetensors" in err and "Traceback" not in err
    assert main(["stats", BERT, "--bucket", "nope"]) == 2


def test_stats_truncated_data_is_one_line(tmp_path, capsys) -> None:
    """A truncated file: one line naming it, never a traceback."""
    src = os.path.join(BERT, "model.safetensors")
    data = open(src, "rb").read()
    p = tmp_path / "model.safetensors"
    p.write_bytes(data[:-100])
    assert main(["stats", str(p)]) == 1
    assert "Traceback" not in capsys.readouterr().err


def _png_size(path: str) -> tuple[int, int]:
    with open(path, "rb") as f:
        head = f.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR"
    return struct.unpack(">II", head[16:24])


def test_plot_png_size(tmp_path, capsys) -> None:
    out = str(tmp_path / "bert.png")
    assert main(["plot", BERT, "-o", out, "--log-count", "--size", "10x8", "--dpi", "50", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert _png_size(out) == (500, 400) == (info["width_px"], info["height_px"])
    assert info["panels"] == ["histogram:embedding", "histogram:encoder", "histogram:pooler", "histogram:norm gains",
                              "boxplot:layers:encoder", "boxplot:buckets"]


def test_plot_svg_and_pdf(tmp_path) -> None:
    svg = str(tmp_path / "llama.svg")
    assert main(["plot", LLAMA, "-o", svg, "--size", "12x9", "--clip", "0"]) == 0
    root = ET.parse(svg).getroot()
    assert root.tag.endswith("svg") and root.attrib["width"] == "864pt" and root.attrib["height"] == "648pt"
    pdf = str(tmp_path / "llama.pdf")
    assert main(["plot", LLAMA, "-o", pdf]) == 0
    with open(pdf, "rb") as f:
        assert f.read(5) == b"%PDF-"
    assert main(["plot", LLAMA, "-o", str(tmp_path / "x.gif")]) == 2


def test_plot_80_layer_decoder(tmp_path) -> None:
    """Many layers: one box per layer, drawn from quantiles only, labels thinned."""
    import torch
    from safetensors.torch import save_file

    g = torch.Generator().manual_seed(0)
    t = {f"model.layers.{i}.mlp.down_proj.weight": torch.randn(8, 8, generator=g).bfloat16() * (1 + i / 40)
         for i in range(80)}
    t["model.embed_tokens.weight"] = torch.randn(32, 8, generator=g).bfloat16()
    path = str(tmp_path / "model.safetensors")
    save_file(t, path)
    out = str(tmp_path / "deep.png")
    from ckptstat import open_checkpoint
    from ckptstat.analysis.stats import collect
    from ckptstat.render.plots import plot_stats

    run = collect(open_checkpoint(path))
    assert len(run.report["layers"]) == 80
    info = plot_stats(run, out, figsize=(14, 0), dpi=40)
    assert _png_size(out) == (info["width_px"], info["height_px"])
    assert "boxplot:layers:encoder" in info["panels"]


def test_norm_gains_are_plotted_apart() -> None:
    """LayerNorm/RMSNorm gains (1.0 at init) get their own histogram: the oracle is transformers' model, whose
    norm modules' weights are exactly the values in that panel; each bucket's panel holds the rest."""
    import torch
    import transformers

    from ckptstat import open_checkpoint
    from ckptstat.analysis.stats import collect
    from ckptstat.render.plots import stats_figure

    cfg = transformers.AutoConfig.from_pretrained(LLAMA)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(cfg)
    gains = sum(m.weight.numel() for m in model.modules() if "Norm" in type(m).__name__)
    run = collect(open_checkpoint(LLAMA))
    assert run.plot_acc["norm gains"].n == gains > 0
    assert run.plot_acc["norm gains"].min == run.plot_acc["norm gains"].max == 1.0
    for b, acc in run.bucket_acc.items():
        assert run.plot_acc[b].n + sum(run.report["tensors"][i]["finite"] for i, t in enumerate(run.report["tensors"])
                                       if t["bucket"] == b and "norm" in t["name"]) == acc.n
    fig, panels = stats_figure(run)
    assert "histogram:norm gains" in panels
    encoder = next(ax for ax in fig.axes if ax.get_title(loc="left").startswith("encoder\n"))
    assert encoder.get_xlim()[1] < 0.5 and encoder.get_xlabel() == "weight value"   # not stretched to the 1.0s
