"""Lightning and DeepSpeed checkpoints written by those libraries on CPU (fixtures/make_training.py, the versions in
fixtures/expected_training.json): read as a whole, the model apart from the optimizer state, the step and learning
rate the files hold; `trend` over each run equal to torch's figures on the states the libraries load back."""
import json
import math
import os
import shutil
import zipfile

import numpy as np
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
RUNS = ("lightning", "deepspeed-zero0", "deepspeed-zero1", "deepspeed-zero2", "deepspeed-zero3")


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
    for stage in (0, 1, 2, 3):
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


@pytest.mark.parametrize("run", ["deepspeed-zero1", "deepspeed-zero2"])
def test_zero_second_moments_per_layer(run):
    """ZeRO keeps Adam's state as one flat partition (zero2: one a rank, a parameter split across them): each
    parameter's slices, as DeepSpeed's own param_slice_mappings place them, summed per layer and bucket."""
    r = trend([fixture("training", run)])
    for got, want in zip(r["optimizer"], EXPECTED[run]["steps"]):
        per = want["second_moments_per_param"]
        slices = sum(v["tensors"] for v in per.values())   # a parameter split across two ranks: two slices
        assert got["attributed"] == slices and got["tensors"] == want["second_moments"]["tensors"]
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


@pytest.mark.parametrize("run", ["deepspeed-zero2", "deepspeed-zero3"])
def test_zero_values_equal_deepspeeds_own_gather(run):
    """ZeRO 2 and 3 over two and three ranks (ZeRO-3: the model states hold empty placeholders, the parameters live
    in the ranks' fp32 partitions, padded, one parameter frozen): every value equal to DeepSpeed's own
    get_fp32_state_dict_from_zero_checkpoint (fixtures/make_training.py recorded it)."""
    for step in EXPECTED[run]["steps"]:
        ckpt = open_checkpoint(fixture(step["folder"]))
        assert sorted(_model(ckpt)) == sorted(step["fp32"])
        for name, values in step["fp32"].items():
            got = ckpt.read(f"module.{name}")
            assert list(got.shape) == step["tensors"][name] and got.dtype == np.float32
            np.testing.assert_array_equal(got.ravel(), np.array(values, dtype=np.float32), err_msg=name)
            chunks = list(ckpt.iter_chunks(f"module.{name}", chunk_bytes=8))   # 8 elements: across ranks' pieces
            assert len(chunks) == -(-len(values) // 8)
            np.testing.assert_array_equal(np.concatenate(chunks), np.array(values, dtype=np.float32), err_msg=name)


def test_zero3_second_moments_attributed():
    """ZeRO-3's optimizer state is each rank's flat partition: every element but the padding is attributed to its
    parameter (the parameters' elements, counted once)."""
    r = trend([fixture("training", "deepspeed-zero3")])
    want = EXPECTED["deepspeed-zero3"]["steps"]
    trainable = sum(math.prod(s) for n, s in want[0]["tensors"].items() if n != "layers.0.bias")   # (frozen)
    shapes = want[0]["tensors"]
    for got in r["optimizer"]:
        groups = {g["group"]: g["elements"] for g in got["groups"]}
        assert groups["total"] == trainable < got["elements"], got   # the rest: padding
        assert groups["encoder.0"] == math.prod(shapes["layers.0.weight"])
        assert groups["encoder.1"] == math.prod(shapes["layers.1.weight"]) + math.prod(shapes["layers.1.bias"])


def _zero3_copy(tmp_path):
    bad = tmp_path / "zero3"
    shutil.copytree(fixture("training", "deepspeed-zero3", "global_step2"), bad)
    return bad


def test_zero3_hostile(tmp_path, capsys):
    """A rank's file missing, or shapes that do not fit the partitions: one line naming the file."""
    from ckptstat.cli import main

    torch = pytest.importorskip("torch")
    bad = _zero3_copy(tmp_path)
    os.remove(bad / "zero_pp_rank_2_mp_rank_00_optim_states.pt")
    with pytest.raises(CheckpointError, match="dp_world_size is 3"):
        open_checkpoint(str(bad))
    bad = _zero3_copy(tmp_path / "b")
    p = bad / "zero_pp_rank_0_mp_rank_00_model_states.pt"
    obj = torch.load(p, weights_only=False)   # the fixture DeepSpeed wrote: trusted here
    obj["param_shapes"][0]["head.bias"] = torch.Size([4, 4])
    torch.save(obj, p)
    with pytest.raises(CheckpointError, match="head.bias.* past the end of the fp32 partition"):
        open_checkpoint(str(bad))
    assert main(["stats", str(bad), "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and "past the end of the fp32 partition" in err, err
