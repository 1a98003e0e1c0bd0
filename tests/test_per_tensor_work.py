"""Work per tensor stays constant as the tensor count grows (issue 31: `stats` of 200,000 tiny tensors took over
12 s; issue 35: `tensors` of 20,000 took 24 s in rich's table layout). Never a wall clock (these machines are
noisy): the Python function calls each command makes, counted by cProfile, on files of many tiny tensors written by
safetensors' own writer. Between 1,000 and 3,000 tensors and between 3,000 and 5,000 the calls each added tensor
costs must be the same (linear: no pass over all tensors per tensor, no table re-measured per row) and under the
bound docs/performance.md states for the command."""
from __future__ import annotations

import cProfile
import pstats

import numpy as np
import pytest
from typer.testing import CliRunner

from ckptstat.cli import app

safetensors_numpy = pytest.importorskip("safetensors.numpy")

SIZES = (1_000, 3_000, 5_000)
# Python calls per added tensor at most (docs/performance.md "Work per tensor"); measured 2026-11-28, Python 3.11:
# summary 34-39, tensors 120 (3,806 before render/rows.py), stats 62, stats --tensors 153, stats --json 233,
# memory 81, diff of a file with itself 226-233 (the file named twice: "{f}").
BOUND = {("summary",): 60, ("tensors",): 160, ("tensors", "--json"): 160, ("stats",): 100,
         ("stats", "--tensors"): 200, ("stats", "--json"): 300, ("memory",): 120, ("diff", "{f}"): 300}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    rng = np.random.default_rng(0)
    out = {}
    for n in SIZES:
        t = {}
        for i in range(n):   # a MoE's layout: 64 expert tensors a layer, one to three F16 elements each
            layer, e = divmod(i, 64)
            t[f"model.layers.{layer}.mlp.experts.{e // 3}.w{e % 3}.weight"] = rng.standard_normal(1 + i % 3).astype(np.float16)
        out[n] = str(tmp_path_factory.mktemp("many") / f"{n}.safetensors")
        safetensors_numpy.save_file(t, out[n])
    return out


def _calls(argv: list[str]) -> int:
    profile = cProfile.Profile()
    profile.enable()
    result = CliRunner().invoke(app, argv)
    profile.disable()
    assert result.exit_code == 0, result.output
    return pstats.Stats(profile).total_calls


@pytest.mark.parametrize("cmd", list(BOUND), ids=lambda c: " ".join(c).replace("{f}", "FILE"))
def test_calls_per_tensor_constant(files, cmd, monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)   # output to a pipe: names whole (with a width, each row elides)
    def argv(n: int) -> list[str]:
        return [a.format(f=files[n]) for a in cmd] + [files[n]]

    _calls(argv(SIZES[0]))   # imports and first-use caches
    calls = [_calls(argv(n)) for n in SIZES]
    first = (calls[1] - calls[0]) / (SIZES[1] - SIZES[0])
    second = (calls[2] - calls[1]) / (SIZES[2] - SIZES[1])
    assert second <= 1.05 * first + 1, (cmd, calls)   # linear in the tensor count
    assert max(first, second) <= BOUND[cmd], (cmd, first, second)
