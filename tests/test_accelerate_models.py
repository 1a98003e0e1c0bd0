"""accelerate's save_state of two models and two optimizers (a GAN's generator and discriminator): the second model
is `model_1.safetensors`, or `pytorch_model_1.bin` with safe_serialization=False, the second optimizer
`optimizer_1.bin`. The note that only the first of each is read names every file left out, as accelerate wrote
them; before, `pytorch_model_1.bin` was missing from it (the note named only optimizer_1.bin)."""
import os

import pytest

torch = pytest.importorskip("torch")
accelerate = pytest.importorskip("accelerate")

from ckptstat import open_checkpoint  # noqa: E402


@pytest.mark.parametrize("safe", [True, False])
def test_every_second_model_and_optimizer_is_named(tmp_path, safe):
    torch.manual_seed(0)
    acc = accelerate.Accelerator(cpu=True)
    gen, disc = torch.nn.Linear(4, 8), torch.nn.Linear(8, 1)
    opt_g, opt_d = torch.optim.AdamW(gen.parameters(), lr=1e-3), torch.optim.SGD(disc.parameters(), lr=0.1)
    gen, disc, opt_g, opt_d = acc.prepare(gen, disc, opt_g, opt_d)
    acc.backward(disc(gen(torch.randn(3, 4))).sum())
    opt_g.step()
    opt_d.step()
    folder = str(tmp_path / "state")
    acc.save_state(folder, safe_serialization=safe)
    first = {"model.safetensors" if safe else "pytorch_model.bin", "optimizer.bin"}
    left_out = sorted(n for n in os.listdir(folder) if n.endswith((".bin", ".safetensors")) and n not in first
                      and not n.startswith(("scheduler", "sampler")))
    assert len(left_out) == 2   # the second model and optimizer, as accelerate named them
    (note,) = [n for n in open_checkpoint(folder).notes if "more than one model or optimizer" in n]
    assert all(n in note for n in left_out), (note, left_out)
