"""`ckptstat trend checkpoint-*/model.safetensors` (or `step_*/.metadata`): files whose names hold no step, each in a
folder per step, given in a shell glob's order (checkpoint-10 before checkpoint-2). They are ordered by their folder's
number, as a run folder's checkpoints are; before, they were kept in the glob's order (step = position), so step 10
came before step 2 and every rel_prev compared the wrong pair."""
import os

import pytest

torch = pytest.importorskip("torch")
safetensors_torch = pytest.importorskip("safetensors.torch")

from ckptstat.analysis.trend import trend  # noqa: E402

STEPS = (2, 4, 10)


def test_files_in_step_folders_are_ordered_by_the_folder(tmp_path):
    weights = {}
    for s in STEPS:
        torch.manual_seed(s)
        weights[s] = {"w": torch.randn(4, 4) * s}
        os.makedirs(tmp_path / f"checkpoint-{s}")
        safetensors_torch.save_file(weights[s], str(tmp_path / f"checkpoint-{s}" / "model.safetensors"))
    given = sorted(str(tmp_path / f"checkpoint-{s}" / "model.safetensors") for s in STEPS)   # a shell glob's order
    assert given != [str(tmp_path / f"checkpoint-{s}" / "model.safetensors") for s in STEPS]
    r = trend(given)
    assert [s["step"] for s in r["steps"]] == list(STEPS)
    loaded = [safetensors_torch.load_file(str(tmp_path / f"checkpoint-{s}" / "model.safetensors"))["w"].double()
              for s in STEPS]
    for t in (1, 2):
        want = ((loaded[t] - loaded[t - 1]).norm() / loaded[t - 1].norm()).item()
        assert r["total"]["series"][t]["rel_prev"] == pytest.approx(want, rel=1e-12)
