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
