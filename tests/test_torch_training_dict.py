"""A training script's own torch.save'd dict (`{"model": ..., "optimizer": ..., "step": N, "epoch": E}`, nanoGPT's
`iter_num`): the training line's step and epoch are the dict's, as torch.load gives them back, and `trend` over the
files has them in its steps. Before, the line said `torch optimizer state_dict` with the learning rate alone, no
step or epoch, though the dict held them."""
import pytest

torch = pytest.importorskip("torch")

from ckptstat import open_checkpoint  # noqa: E402
from ckptstat.analysis.trend import trend  # noqa: E402


def _run(folder, key):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 2))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.5)
    paths = []
    for step in range(1, 4):
        model(torch.randn(3, 4)).sum().backward()
        opt.step()
        opt.zero_grad()
        sched.step()
        paths.append(str(folder / f"ckpt_{step}.pt"))
        torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), key: step * 100, "epoch": step // 2},
                   paths[-1])
    return paths


@pytest.mark.parametrize("key", ["step", "iter_num"])
def test_a_training_dicts_step_and_epoch(tmp_path, key):
    paths = _run(tmp_path, key)
    for p in paths:
        saved = torch.load(p, weights_only=True)
        t = open_checkpoint(p).training
        assert t is not None and t["global_step"] == saved[key] and t["epoch"] == saved["epoch"]
        assert t["learning_rate"] == saved["optimizer"]["param_groups"][0]["lr"]
    r = trend(paths)
    assert [s["global_step"] for s in r["steps"]] == [torch.load(p, weights_only=True)[key] for p in paths]
