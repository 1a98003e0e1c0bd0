"""A DCP folder whose step is a Stateful's one-element tensor (torchtitan's TrainState.state_dict: `"step":
torch.tensor(self.step, dtype=torch.int32)`, saved under `train_state`): the training line's step is that tensor's
value as torch's own dcp.load gives it back. Before, a step stored as a tensor was not read (only plain items):
`summary` said no step and `trend`'s steps had no global_step."""
import pytest

torch = pytest.importorskip("torch")
dcp = pytest.importorskip("torch.distributed.checkpoint")

from ckptstat import open_checkpoint  # noqa: E402
from ckptstat.analysis.trend import trend  # noqa: E402


def _save(folder, step):
    torch.manual_seed(step)
    model = torch.nn.Linear(4, 3)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(2, 4)).sum().backward()
    opt.step()
    dcp.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
              "train_state": {"step": torch.tensor(step, dtype=torch.int32),
                              "ntokens_seen": torch.tensor(step * 64, dtype=torch.int64)}},
             checkpoint_id=str(folder), no_dist=True)


def _loaded_step(folder):
    got = {"train_state": {"step": torch.tensor(0, dtype=torch.int32)}}
    dcp.load(got, checkpoint_id=str(folder), no_dist=True)
    return got["train_state"]["step"].item()


def test_a_step_stored_as_a_tensor_is_the_training_step(tmp_path):
    for step in (10, 20):
        _save(tmp_path / f"step-{step}", step)
    ckpt = open_checkpoint(str(tmp_path / "step-20"))
    assert ckpt.training is not None and ckpt.training["global_step"] == _loaded_step(tmp_path / "step-20") == 20
    r = trend([str(tmp_path)])
    assert [s["global_step"] for s in r["steps"]] == [_loaded_step(tmp_path / f"step-{n}") for n in (10, 20)]


def test_a_tensor_step_that_cannot_be_read_leaves_the_folder_readable(tmp_path):
    """The same step saved through torch's ZStandard extension, read without zstandard (the import refused as an
    absent package is): the folder still opens, without a step; with zstandard its step is dcp.load's."""
    import json
    import subprocess
    import sys

    pytest.importorskip("zstandard")
    from test_extras import WRAPPER
    from torch.distributed.checkpoint._extension import ZStandard

    folder = tmp_path / "zstd"
    dcp.save({"w": torch.randn(4, 4), "train_state": {"step": torch.tensor(7, dtype=torch.int32)}},
             storage_writer=dcp.FileSystemWriter(str(folder), _extensions=[ZStandard()]), no_dist=True)
    assert open_checkpoint(str(folder)).training["global_step"] == _loaded_step(folder) == 7
    r = subprocess.run([sys.executable, "-c", WRAPPER, "zstandard", "summary", str(folder), "--json"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert (json.loads(r.stdout)["training"] or {}).get("global_step") is None
