"""`ckptstat trend` on a real short training run: transformers' own Trainer (save_steps=1) trains a tiny LLaMA with
torch.optim.AdamW for a few steps on CPU, with one weight frozen and one frozen at zero; every figure of the report
equals the same computation done with torch (float64) on the states torch loads back from the files. A loop that
saves the way users do (save_pretrained, optimizer.pt of an AdamW built from named_parameters(), trainer_state.json)
checks the second moments attributed per layer; hand-written steps check the jump rule."""
import json
import math
import os
import re
import shutil

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
safetensors_torch = pytest.importorskip("safetensors.torch")

from ckptstat.analysis.trend import JUMP_FACTOR, JUMP_HISTORY, trend  # noqa: E402
from ckptstat.analysis.trend.find import discover  # noqa: E402

STEPS = 4
FROZEN = "model.layers.0.mlp.down_proj.weight"
DEAD = "model.layers.1.mlp.up_proj.weight"
REL = 1e-9   # float64 sums in another order: equal to rounding


def _tiny():
    cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                   num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=32)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(cfg)


class _Data(torch.utils.data.Dataset):
    def __len__(self):
        return 32

    def __getitem__(self, i):
        ids = torch.randint(0, 64, (8,), generator=torch.Generator().manual_seed(i))
        return {"input_ids": ids, "labels": ids}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("trainer") / "out")
    model = _tiny()
    with torch.no_grad():
        model.get_parameter(DEAD).zero_()
    for name in (FROZEN, DEAD):
        model.get_parameter(name).requires_grad_(False)
    args = transformers.TrainingArguments(output_dir=out, max_steps=STEPS, save_steps=1, save_strategy="steps",
                                          per_device_train_batch_size=4, learning_rate=1e-2, logging_steps=1,
                                          report_to=[], use_cpu=True, optim="adamw_torch", disable_tqdm=True)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=_Data())
    trainer.train()
    return out, trainer


def _states(out):
    folders = sorted((d for d in os.listdir(out) if d.startswith("checkpoint-")), key=lambda d: int(d.split("-")[1]))
    return [(int(d.split("-")[1]), safetensors_torch.load_file(os.path.join(out, d, "model.safetensors")),
             torch.load(os.path.join(out, d, "optimizer.pt"), weights_only=True),
             json.load(open(os.path.join(out, d, "trainer_state.json")))) for d in folders]


def _figures(ws, t, names):
    """The report's row for `names` taken together at step t, computed with torch on the loaded tensors."""
    cat = [torch.cat([ws[s][n].double().flatten() for n in names]) for s in range(len(ws))]
    w = cat[t]
    row = {"norm": torch.linalg.vector_norm(w).item(), "elements": w.numel(), "zeros": int((w == 0).sum())}
    if t:
        d, f = w - cat[t - 1], w - cat[0]
        row.update(rel_prev=(d.norm() / cat[t - 1].norm()).item(), max_abs_prev=d.abs().max().item(),
                   rel_first=(f.norm() / cat[0].norm()).item(), max_abs_first=f.abs().max().item(),
                   update_ratio=(d.std(correction=0) / cat[t - 1].std(correction=0)).item())
    return row


def _same(got, want):
    for k, v in want.items():
        if isinstance(v, float) and math.isnan(v):   # 0 / 0 (a tensor all zero): torch's NaN, the report's null
            assert got[k] is None, k
            continue
        assert got[k] == pytest.approx(v, rel=REL, abs=1e-300), (k, got[k], v)


def test_every_figure_equals_torch(run):
    out, trainer = run
    states = _states(out)
    assert [s[0] for s in states] == list(range(1, STEPS + 1))
    ws = [s[1] for s in states]
    r = trend([out])
    assert r["layout"].startswith("Hugging Face Trainer")
    assert [s["step"] for s in r["steps"]] == [s[0] for s in states]
    names = [n for n in ws[0] if n in dict(trainer.model.named_parameters())]   # every parameter the model has
    assert sorted(t["name"] for t in r["tensors"]) == sorted(names)
    layers: dict[int, list[str]] = {}
    for n in names:
        m = re.match(r"model\.layers\.(\d+)\.", n)
        if m:
            layers.setdefault(int(m.group(1)), []).append(n)
    for t in range(STEPS):
        _same(r["total"]["series"][t], _figures(ws, t, names))
        for x in r["tensors"]:
            _same(x["series"][t], _figures(ws, t, [x["name"]]))
        for x in r["layers"]:
            _same(x["series"][t], _figures(ws, t, layers[x["layer"]]))
        # Adam's second moments, from the optimizer state torch loads: every exp_avg_sq of the step
        vs = torch.cat([st["exp_avg_sq"].double().flatten() for st in states[t][2]["state"].values()])
        opt = r["optimizer"][t]
        assert opt["tensors"] == len(states[t][2]["state"]) and opt["elements"] == vs.numel()
        assert opt["mean"] == pytest.approx(vs.mean().item(), rel=REL)
        assert opt["max"] == vs.max().item()
        assert opt["mean_sqrt"] == pytest.approx(vs.sqrt().mean().item(), rel=REL)
        # the step and learning rate the Trainer wrote
        logged = [e["learning_rate"] for e in states[t][3]["log_history"] if "learning_rate" in e]
        assert r["steps"][t]["learning_rate"] == logged[-1]
        assert r["steps"][t]["global_step"] == states[t][3]["global_step"] == states[t][0]
    assert r["steps"][-1]["learning_rate"] == trainer.state.log_history[-2]["learning_rate"]
    # frozen: never changed (requires_grad False); dead: all zero at the last step
    frozen = [n for n in names if all(torch.equal(ws[s][n], ws[0][n]) for s in range(STEPS))]
    dead = [n for n in names if not ws[-1][n].any()]
    # (a zero up_proj also stops layer 1's gate_proj and down_proj: their gradients are 0, and AdamW without weight
    # decay leaves them as they were)
    assert sorted(r["frozen"]) == sorted(frozen) and {FROZEN, DEAD} <= set(frozen)
    assert r["dead"] == dead == [DEAD]


def test_workers_give_the_same_report(run):
    out, _ = run
    one, two = trend([out], chunk_bytes=256), trend([out], workers=2, chunk_bytes=256)   # tensors across chunks
    for r in (one, two):
        r.pop("seconds"), r.pop("workers")
    assert one == two   # bit for bit: each step's sums are the same whichever process reads it


def _named_run(tmp_path, steps=3):
    """save_pretrained + optimizer.pt (AdamW over named_parameters: param_groups name each state) + trainer_state.json
    at each step, the Trainer's layout written by hand."""
    model = _tiny()
    opt = torch.optim.AdamW(model.named_parameters(), lr=1e-2)
    data = _Data()
    for step in range(1, steps + 1):
        batch = {k: torch.stack([data[i][k] for i in range(4 * step, 4 * step + 4)]) for k in ("input_ids", "labels")}
        model(**batch).loss.backward()
        opt.step()
        opt.zero_grad()
        d = tmp_path / f"checkpoint-{step}"
        model.save_pretrained(d)
        torch.save(opt.state_dict(), d / "optimizer.pt")
        (d / "trainer_state.json").write_text(json.dumps({"global_step": step, "epoch": step / 8, "log_history": []}))
    return model, opt


def test_second_moments_per_layer_where_the_optimizer_names_parameters(tmp_path):
    model, opt = _named_run(tmp_path)
    r = trend([str(tmp_path)])
    state = opt.state_dict()
    names = [n for g in state["param_groups"] for n in g["param_names"]]
    by_name = {n: state["state"][i]["exp_avg_sq"] for g in state["param_groups"] for i, n in zip(g["params"], g["param_names"])}
    last = r["optimizer"][-1]
    assert last["attributed"] == len(names) == len(state["state"])
    assert r["steps"][-1]["learning_rate"] == state["param_groups"][0]["lr"]   # no logged lr: the optimizer's
    groups = {g["group"]: g for g in last["groups"]}
    for layer in range(model.config.num_hidden_layers):
        vs = torch.cat([by_name[n].double().flatten() for n in names if n.startswith(f"model.layers.{layer}.")])
        g = next(v for k, v in groups.items() if k.endswith(f".{layer}"))
        assert g["elements"] == vs.numel() and g["max"] == vs.max().item()
        assert g["mean"] == pytest.approx(vs.mean().item(), rel=REL)


def test_jump_rule(tmp_path):
    """Steps written by hand: a steady drift, then one update 50x larger in one tensor at the last step."""
    torch.manual_seed(1)
    base = {"model.layers.0.mlp.up_proj.weight": torch.randn(8, 4), "model.layers.1.mlp.up_proj.weight": torch.randn(8, 4)}
    drift = {k: torch.randn_like(v) * 1e-3 for k, v in base.items()}
    paths = []
    for step in range(5):
        w = {k: v + drift[k] * step for k, v in base.items()}
        if step == 4:
            w["model.layers.1.mlp.up_proj.weight"] += drift["model.layers.1.mlp.up_proj.weight"] * 50
        p = tmp_path / f"step_{step * 100}.safetensors"
        safetensors_torch.save_file(w, str(p))
        paths.append(str(p))
    r = trend(list(reversed(paths)))   # names carry the steps: ordered by them
    assert [s["step"] for s in r["steps"]] == [0, 100, 200, 300, 400]
    rel = [r_["rel_prev"] for r_ in next(x for x in r["layers"] if x["layer"] == 1)["series"]]
    want = [i for i in range(1, 5) if i - 1 >= JUMP_HISTORY and rel[i] > JUMP_FACTOR * float(torch.tensor(rel[1:i]).median())]
    assert want == [4]
    jumps = {(j["group"], j["step"]) for j in r["jumps"]}
    assert any(step == 400 and group.endswith(".1") for group, step in jumps)
    assert not any(group.endswith(".0") for group, _ in jumps)


def test_discovery_of_each_layout(tmp_path):
    for name in ("checkpoint-10", "checkpoint-2", "runs"):
        (tmp_path / "hf" / name).mkdir(parents=True)
    steps, layout, _ = discover([str(tmp_path / "hf")])
    assert [s.step for s in steps] == [2, 10] and "Trainer" in layout
    for name in ("global_step5", "global_step15"):
        (tmp_path / "ds" / name).mkdir(parents=True)
    (tmp_path / "ds" / "latest").write_text("global_step15")
    assert [s.step for s in discover([str(tmp_path / "ds")])[0]] == [5, 15]
    (tmp_path / "pl").mkdir()
    for name in ("epoch=0-step=3.ckpt", "epoch=1-step=6.ckpt", "last.ckpt"):
        (tmp_path / "pl" / name).write_bytes(b"")
    steps, layout, skipped = discover([str(tmp_path / "pl")])
    assert [s.step for s in steps] == [3, 6]
    assert skipped == [{"name": "last.ckpt", "reason": "a .ckpt without step=N in its name"}]
    # numbered: the number ending the name before its extensions (model.h5's 5 is no step)
    (tmp_path / "num").mkdir()
    for name in ("step_10.safetensors", "step_2.safetensors", "model.ckpt-7.index", "model.h5", ".tmp3"):
        (tmp_path / "num" / name).write_bytes(b"")
    steps, layout, _ = discover([str(tmp_path / "num")])
    assert [(s.step, s.label) for s in steps] == [(2, "step_2.safetensors"), (10, "step_10.safetensors")]
    a, b = str(tmp_path / "num" / "model.h5"), str(tmp_path / "num" / "step_2.safetensors")
    assert [s.path for s in discover([a, b])[0]] == [a, b]   # not every name numbered: the order given


def test_cli(run, cli, tmp_path):
    out, _ = run
    code, stdout, _ = cli("trend", out, "--json")
    assert code == 0 and json.loads(stdout)["schema"] == "ckptstat.trend/1"
    code, stdout, _ = cli("trend", out)
    assert code == 0 and "Per bucket and layer" in stdout and "frozen" in stdout
    code, _, _ = cli("trend", out, "-o", str(tmp_path / "t.md"))
    assert code == 0 and (tmp_path / "t_files" / "heatmap.png").is_file() and (tmp_path / "t_files" / "buckets.png").is_file()
    assert "](t_files/heatmap.png)" in (tmp_path / "t.md").read_text()
    code, _, _ = cli("trend", out, "-o", str(tmp_path / "t.html"))
    assert code == 0 and (tmp_path / "t.html").read_text().count("data:image/png;base64,") == 2


def test_bad_input_is_one_line(run, cli, tmp_path):
    (tmp_path / "empty").mkdir()
    code, _, err = cli("trend", str(tmp_path / "empty"))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "no checkpoints found" in err
    bad = tmp_path / "bad"
    for step in (1, 2):
        (bad / f"checkpoint-{step}").mkdir(parents=True)
        (bad / f"checkpoint-{step}" / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json}    ")
        (bad / f"checkpoint-{step}" / "trainer_state.json").write_text("{}")
    code, _, err = cli("trend", str(bad))
    assert code == 1 and len(err.strip().splitlines()) == 1 and "model.safetensors" in err and "Traceback" not in err
    code, _, err = cli("trend", os.path.join(run[0], "checkpoint-1"))
    assert code == 2 and len(err.strip().splitlines()) == 1
    # a Trainer folder whose optimizer.pt links out of it: refused as any link out of a checkpoint folder
    link = tmp_path / "link" / "checkpoint-1"
    link.mkdir(parents=True)
    for name in ("model.safetensors", "config.json", "trainer_state.json"):
        shutil.copy(os.path.join(run[0], "checkpoint-1", name), link / name)
    os.symlink(os.path.join(run[0], "checkpoint-2", "optimizer.pt"), link / "optimizer.pt")
    code, _, err = cli(str(link))
    assert code == 1 and "outside the checkpoint" in err and len(err.strip().splitlines()) == 1
    (link / "trainer_state.json").write_text('{"global_step": ')
    code, _, err = cli(str(link), "--allow-external")
    assert code == 1 and "trainer_state.json: cannot read trainer state" in err


def test_non_tensor_values_that_change_across_the_steps(cli, tmp_path):
    """Lightning's checkpoints of one run (fixtures/training/lightning, written by Lightning): the values that are not
    the same at every step (the step, its loop counters, its schedulers' last learning rate, the callback's paths),
    each step's as torch.load gives it back (test_torch_data_classes' naming), the shallowest first; in the text
    output and the markdown report too."""
    from conftest import fixture
    from test_torch_data_classes import _values

    r = trend([fixture("training", "lightning")])
    per_step = [_values(torch.load(s["path"], weights_only=False), os.path.basename(s["path"])) for s in r["steps"]]
    names = set().union(*per_step)
    want = {n: [v.get(n) for v in per_step] for n in names}
    want = {n: s for n, s in want.items() if any(a != b for a, b in zip(s, s[1:]))}
    assert want and {v["name"]: v["series"] for v in r["values"]} == want
    depth = [v["name"].count(".") for v in r["values"]]
    assert depth == sorted(depth) and r["values_left_out"] == 0   # the shallowest first (global_step)
    assert all(v["changes"] == sum(a != b for a, b in zip(v["series"], v["series"][1:])) for v in r["values"])
    rc, out, _ = cli("trend", fixture("training", "lightning"))
    text = " ".join(out.split())   # (names are elided to the console's width)
    assert rc == 0 and "Non-tensor values that change across the steps" in text
    rc, _, _ = cli("trend", fixture("training", "lightning"), "-o", str(tmp_path / "t.md"))
    assert rc == 0 and "## Non-tensor values that change across the steps" in (tmp_path / "t.md").read_text()


def test_update_ratio_without_cancellation(tmp_path):
    """The bug: std(d) and std(w_(t-1)) were sqrt(sum(x^2)/n - mean^2), which cancels when the mean is far above the
    spread: an update that moved every element of a tensor by one step (as Adam's first, sign-like steps do to a bias
    pushed one way), std(d) ~6e-10 beside a mean of 1e-3, read its update ratio 3% off; a norm gain near 1 with a
    spread of 1e-6 read its std(w_(t-1)) ~1% off. The centred sums (Chan et al.'s update, as `stats`) give numpy's."""
    gen = torch.Generator().manual_seed(5)
    n = 1 << 20
    p = {"model.layers.0.mlp.up_proj.bias": torch.randn(n, generator=gen) * 0.02,
         "model.layers.0.input_layernorm.weight": 1 + torch.randn(n, generator=gen) * 1e-6}
    w = {"model.layers.0.mlp.up_proj.bias": p["model.layers.0.mlp.up_proj.bias"] - 1e-3,
         "model.layers.0.input_layernorm.weight": p["model.layers.0.input_layernorm.weight"]
         + torch.randn(n, generator=gen) * 1e-6}
    for step, sd in ((1, p), (2, w)):
        safetensors_torch.save_file(sd, str(tmp_path / f"step_{step}.safetensors"))
    back = [safetensors_torch.load_file(str(tmp_path / f"step_{s}.safetensors")) for s in (1, 2)]
    r = trend([str(tmp_path)], chunk_bytes=1 << 16)
    for row in r["tensors"]:
        a, b = (back[i][row["name"]].double() for i in (0, 1))
        want = float((b - a).std(unbiased=False) / a.std(unbiased=False))
        assert row["series"][1]["update_ratio"] == pytest.approx(want, rel=1e-9), row["name"]
    a = torch.cat([back[0][k].double() for k in sorted(back[0])])
    b = torch.cat([back[1][k].double() for k in sorted(back[0])])
    want = float((b - a).std(unbiased=False) / a.std(unbiased=False))
    assert r["total"]["series"][1]["update_ratio"] == pytest.approx(want, rel=1e-9)


def test_no_nan_from_float64_sums_that_overflow(tmp_path):
    """The bug: float64 values above ~1e154 overflow the plain sums of squares, and a ratio of two infinite norms
    was NaN in the report (rel_prev, rel_first, update_ratio: `NaN` in --json). Such a ratio is null now, as diff's
    rel_l2 is; max_abs stays exact."""
    for step, v in ((1, [1e200, 2e200]), (2, [1.5e200, 2e200])):
        safetensors_torch.save_file({"model.layers.0.w.weight": torch.tensor(v, dtype=torch.float64)},
                                    str(tmp_path / f"step_{step}.safetensors"))
    r = trend([str(tmp_path)])
    for series in (r["tensors"][0]["series"], r["total"]["series"]):
        last = series[-1]
        assert (last["rel_prev"], last["rel_first"], last["update_ratio"], last["max_abs_prev"]) == (None, None, None, 5e199)
        assert not any(isinstance(x, float) and math.isnan(x) for row in series for x in row.values())
