"""Lightning and DeepSpeed checkpoints written by those libraries on CPU (fixtures/make_training.py, the versions in
fixtures/expected_training.json): read as a whole, the model apart from the optimizer state, the step and learning
rate the files hold; `trend` over each run equal to torch's figures on the states the libraries load back."""
import json
import math
import os
import shutil
import zipfile

import pytest
from conftest import fixture

from ckptstat import open_checkpoint
from ckptstat.analysis.summary import summarize
from ckptstat.analysis.trend import trend
from ckptstat.census import placements
from ckptstat.errors import CheckpointError, UnsafeCheckpointError

with open(fixture("expected_training.json")) as f:
    EXPECTED = json.load(f)
REL = 1e-9
RUNS = ("lightning", "deepspeed-zero0", "deepspeed-zero1")


def _model(ckpt):
    """name (its wrapper prefix as `diff` strips it) -> shape, of the parameter tensors."""
    place = placements(ckpt)
    out = {}
    for t in ckpt:
        if place[t.name].role == "parameter":
            name = t.name
            for prefix in ("state_dict.", "module."):
                name = name.removeprefix(prefix)
            out[name] = list(t.shape)
    return out


def _step_paths(run):
    return [fixture(s.get("file") or s["folder"]) for s in EXPECTED[run]["steps"]]


@pytest.mark.parametrize("run", RUNS)
def test_each_checkpoint_read_as_a_whole(run):
    for want, path in zip(EXPECTED[run]["steps"], _step_paths(run)):
        ckpt = open_checkpoint(path)
        r = summarize(ckpt)
        assert r["training"]["global_step"] == want["global_step"]
        assert r["training"]["learning_rate"] == want["learning_rate"]
        if "epoch" in want:
            assert r["training"]["epoch"] == want["epoch"]
        got = _model(ckpt)
        assert got == {k.removeprefix("model."): v for k, v in want["tensors"].items()} or got == want["tensors"]
        assert r["parameters"]["unique"] == sum(math.prod(s) for s in want["tensors"].values())
        roles = {n["role"]: n for n in r["non_parameters"]}
        assert roles["optimizer"]["tensors"] >= want["second_moments"]["tensors"]


def test_deepspeed_latest_pointer():
    for stage in (0, 1):
        run = EXPECTED[f"deepspeed-zero{stage}"]
        ckpt = open_checkpoint(fixture("training", f"deepspeed-zero{stage}"))
        assert ckpt.path == fixture("training", f"deepspeed-zero{stage}", run["latest"])
        assert ckpt.training["global_step"] == run["steps"][-1]["global_step"]


@pytest.mark.parametrize("run", RUNS)
def test_trend_equals_torch(run):
    r = trend([fixture("training", run)])
    want = EXPECTED[run]
    steps = [s for s in want["steps"] if "last.ckpt" not in s.get("file", "")]
    assert [s["step"] for s in r["steps"]] == [s["global_step"] for s in steps]
    for got, exp in zip(r["total"]["series"], want["trend"]):
        for k, v in exp.items():
            assert got[k] == pytest.approx(v, rel=REL), (k, got[k], v)
    for got, exp in zip(r["optimizer"], steps):
        for k, v in exp["second_moments"].items():
            assert got[k] == pytest.approx(v, rel=REL), (k, got[k], v)
    assert [s["learning_rate"] for s in r["steps"]] == [s["learning_rate"] for s in steps]
    if run == "lightning":
        assert r["skipped"] == [{"name": "last.ckpt", "reason": "a .ckpt without step=N in its name"}]


def test_deepspeed_hostile(tmp_path):
    src = fixture("training", "deepspeed-zero1")
    bad = tmp_path / "ds"
    shutil.copytree(src, bad)
    (bad / "latest").write_text("../../etc")
    with pytest.raises(CheckpointError, match="not a DeepSpeed tag"):
        open_checkpoint(str(bad))
    (bad / "latest").write_text("global_step9")
    with pytest.raises(CheckpointError, match="global_step9"):
        open_checkpoint(str(bad))
    # an optimizer-state pickle naming any other global is refused, nothing imported
    optim = bad / "global_step2" / "zero_pp_rank_0_mp_rank_00_optim_states.pt"
    with zipfile.ZipFile(optim) as z:
        members = {n: z.read(n) for n in z.namelist()}
    pkl = next(n for n in members if n.endswith("data.pkl"))
    # (GLOBAL's operands are newline-ended lines: the pickle stays well-formed)
    members[pkl] = members[pkl].replace(b"deepspeed.utils.tensor_fragment\nfragment_address\n", b"os\nsystem\n")
    assert b"os\nsystem\n" in members[pkl]
    with zipfile.ZipFile(optim, "w") as z:
        for n, data in members.items():
            z.writestr(n, data)
    with pytest.raises(UnsafeCheckpointError, match="os.system"):
        open_checkpoint(str(bad / "global_step2"))
    # scan judges the file by DeepSpeed's loader: its own classes allowed, os.system not (the genuine file is safe)
    from ckptstat.analysis.scan import scan_local

    genuine = scan_local(os.path.join(src, "global_step2", optim.name))
    assert genuine["status"] == "safe" and genuine["format"] == "DeepSpeed ZeRO optimizer state"
    r = scan_local(str(optim))
    assert r["status"] == "unsafe" and r["unsafe_globals"] == ["os.system"], r["verdict"]


def test_trainer_folder_cli_line(cli, tmp_path):
    """A Lightning file on the command line: one summary line says the library, step, epoch and learning rate."""
    step = EXPECTED["lightning"]["steps"][-2]
    code, out, _ = cli(fixture(step["file"]))
    assert code == 0
    line = next(x for x in out.splitlines() if x.startswith("training"))
    assert f"step {step['global_step']}" in line and "PyTorch Lightning" in line
    assert os.path.basename(step["file"]).startswith("epoch=")


def test_zero_second_moments_per_layer():
    """ZeRO keeps Adam's state as one flat partition: each parameter's slice, as DeepSpeed's own param_slice_mappings
    place it, summed per layer and bucket."""
    r = trend([fixture("training", "deepspeed-zero1")])
    for got, want in zip(r["optimizer"], EXPECTED["deepspeed-zero1"]["steps"]):
        per = want["second_moments_per_param"]
        assert got["attributed"] == len(per) and got["tensors"] == want["second_moments"]["tensors"]
        groups = {g["group"]: g for g in got["groups"]}
        for layer in (0, 1):
            mine = [v for k, v in per.items() if k.startswith(f"layers.{layer}.")]
            g = groups[f"encoder.{layer}"]
            n = sum(v["elements"] for v in mine)
            assert g["elements"] == n and g["max"] == max(v["max"] for v in mine)
            assert g["mean"] == pytest.approx(sum(v["mean"] * v["elements"] for v in mine) / n, rel=REL)
            assert g["mean_sqrt"] == pytest.approx(sum(v["mean_sqrt"] * v["elements"] for v in mine) / n, rel=REL)


def test_shared_containers_are_walked_once(tmp_path):
    """A pickle's memo puts one big param group (or slice map) in its list a million times: read in linear time."""
    torch = pytest.importorskip("torch")
    group = {"lr": 0.5, "params": list(range(2_000)), "param_names": [f"p{i}" for i in range(2_000)]}
    nested: list = [group]
    for _ in range(5):
        nested = [nested] * 100   # 100^5 paths to one group
    path = tmp_path / "opt.pt"
    torch.save({"state": {}, "param_groups": [group] * 20_000, "deep": nested,
                "optimizer_state_dict": {"param_slice_mappings": [{}] * 20_000}}, path)
    import time
    t0 = time.perf_counter()
    ckpt = open_checkpoint(str(path))
    assert time.perf_counter() - t0 < 5   # (without the walk's memory of containers: 20,000 x 2,000 and 100^5 visits)
    assert ckpt.training["learning_rate"] == 0.5 and len(ckpt.optimizer_params) == 2_000
