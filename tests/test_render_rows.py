"""Per-tensor tables past FAST_ROWS rows (render/rows.py) are written line by line instead of through rich's table
layout: the characters must be rich's own, at every width, for names that elide, aliases, control characters,
wide characters, and on the real files `ckptstat tensors` lists."""
from __future__ import annotations

import io
import os

import pytest

from ckptstat import open_checkpoint
from ckptstat.analysis.summary import tensors as tensors_report
from ckptstat.render import inert, render_tensors, table
from ckptstat.render import rows as rows_mod

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures")


def _console(width: int | None):
    """The commands' console (commands/common.py) on a file: with no width, as for a file or pipe with no $COLUMNS
    (names whole, lines not cropped); else a terminal's width."""
    from ckptstat.commands.common import _Console

    c = _Console(file=io.StringIO(), width=width or 80, color_system=None, highlight=False)
    c.names_whole = width is None
    return c


def _both(monkeypatch, draw, width, fits=True):
    """(rich's table, the fast path's) text; `fits`: the columns fit the width, so the fast path must have run."""
    out = []
    for fast in (10**9, 0):
        monkeypatch.setattr(rows_mod, "FAST_ROWS", fast)
        c = _console(width)
        if fast == 0 and fits:   # rich's table renderer never reached
            monkeypatch.setattr(rows_mod, "_rich_table", lambda *a: pytest.fail("fell back to rich"))
        draw(c)
        out.append(c.file.getvalue())
        monkeypatch.undo()
    return out


NAMES = ["model.layers.0.self_attn.q_proj.weight", "model.layers.11.mlp.experts.127.down_proj.weight",
         "a", "embed\x1b[31m.weight\n", "lm_head.weight", "x" * 150, "layer/dense/kernel:0", "w.\u202egnp.exe"]


@pytest.mark.parametrize("width", [None, 40, 50, 60, 80, 132, 400])
def test_synthetic_rows_equal_rich(monkeypatch, width):
    rows = [(inert(n), inert(NAMES[0]) if i % 3 == 1 else None,
             (f"encoder.{i}", "BF16", f"{i}x{7 * i}", f"{i * 123457:,}", f"{i}.5 MiB"))
            for i, n in enumerate(NAMES * 3)]

    def draw(c):
        rows_mod.print_rows(c, table("a title long enough to wrap at narrow widths, as the tensors title does",
                                     "name", "bucket", "dtype", "shape", "numel", "bytes"), rows)

    rich_text, fast_text = _both(monkeypatch, draw, width, fits=width is None or width >= 80)
    assert fast_text == rich_text


def test_wide_characters_unelided_equal_rich(monkeypatch):
    rows = [(inert(n), None, ("embedding", "F16", "2x2", "4", "8 B"))
            for n in ("嵌入.权重", "model.層.0.weight", "plain.weight")]
    draw = lambda c: rows_mod.print_rows(c, table("t", "name", "bucket", "dtype", "shape", "numel", "bytes"), rows)  # noqa: E731
    rich_text, fast_text = _both(monkeypatch, draw, None)
    assert fast_text == rich_text


def test_wide_characters_to_elide_take_rich(monkeypatch):
    """A non-ASCII name that must be cut: rich's layout, not the fast one."""
    monkeypatch.setattr(rows_mod, "FAST_ROWS", 0)
    c = _console(30)
    rows_mod.print_rows(c, table("t", "name", "dtype"), [(inert("嵌入" * 30), None, ("F16",))])
    assert "…" in c.file.getvalue()


@pytest.mark.parametrize("fixture", [("gpt2-tiny",), ("bert-tiny",), ("dtypes.safetensors",), ("llama-tiny-sharded",)])
@pytest.mark.parametrize("width", [None, 50, 100])
def test_tensors_listing_equal_rich(monkeypatch, fixture, width):
    r = tensors_report(open_checkpoint(os.path.join(FIXTURES, *fixture)))
    rich_text, fast_text = _both(monkeypatch, lambda c: render_tensors(r, c), width, fits=width != 50)
    assert fast_text == rich_text


@pytest.mark.parametrize("width", [None, 100])
def test_stats_by_tensor_equal_rich(monkeypatch, width):
    """`stats --tensors`: its table pads one space on the left of each column only."""
    from ckptstat.analysis.stats import collect
    from ckptstat.render.stats import render_stats

    r = collect(open_checkpoint(os.path.join(FIXTURES, "bert-tiny")), all_roles=True).report
    rich_text, fast_text = _both(monkeypatch, lambda c: render_stats(r, c, show_tensors=True), width)
    assert fast_text == rich_text


@pytest.mark.parametrize("width", [None, 120])
def test_diff_changed_tensors_equal_rich(monkeypatch, tmp_path, width):
    """`diff`'s table of changed tensors: values, dtype, shape, added and removed, a name that is markup and
    holds an escape; shown inert both ways."""
    import numpy as np
    from safetensors.numpy import save_file

    from ckptstat.analysis.diff import diff
    from ckptstat.render.diff import render_diff

    rng = np.random.default_rng(1)
    a = {f"model.layers.{i}.w": rng.standard_normal(4).astype(np.float32) for i in range(6)}
    b = {k: v + 1 for k, v in a.items()}
    b["model.layers.1.w"] = a["model.layers.1.w"].astype(np.float16)
    b["model.layers.2.w"] = rng.standard_normal(5).astype(np.float32)
    b["[bold]evil\x1b[31m.w"] = np.ones(2, np.float32)
    del b["model.layers.3.w"]
    save_file(a, str(tmp_path / "a.safetensors"))
    save_file(b, str(tmp_path / "b.safetensors"))
    r = diff(open_checkpoint(str(tmp_path / "a.safetensors")), open_checkpoint(str(tmp_path / "b.safetensors")))
    rich_text, fast_text = _both(monkeypatch, lambda c: render_diff(r, c), width)
    assert fast_text == rich_text
    assert "\x1b" not in fast_text and "[bold]evil\\x1b[31m.w" in fast_text


def test_compact_bytes_never_in_exponent_notation() -> None:
    """flops' read/write column: 1000 KiB printed as '1e+03K' (format '.3g')."""
    from ckptstat.render.fmt import human_bytes

    for n in [999.4, 999.6, 1000, 1023.4, 100.2, 99.94, 12.345, 1.5]:
        for unit, scale in (("K", 1 << 10), ("M", 1 << 20), ("G", 1 << 30)):
            s = human_bytes(n * scale, compact=True)
            assert s.endswith(unit) and "e" not in s, s
            assert float(s[:-1]) == pytest.approx(n, rel=0.005, abs=0.5), (n, s)
