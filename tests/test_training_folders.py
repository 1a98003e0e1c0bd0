"""A Trainer's files outside the normal case: optimizer.pt opened alone (optimizer state, no model: no model figures,
`memory` refuses in one line), a checkpoint-N/ folder without trainer_state.json (still a Trainer folder by its
optimizer.pt and scheduler.pt / training_args.bin), and `audit` over a run folder (one record per checkpoint-N/, no
config cross-check of its side files). The run is written by transformers' own Trainer; every expected figure is
torch's, from torch.load(optimizer.pt, weights_only=True) and the Trainer's trainer_state.json."""
import json
import os
import shutil

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from test_trend import _Data, _tiny  # noqa: E402 - the tiny LLaMA and synthetic data test_trend trains

from ckptstat.analysis.audit import audit_record  # noqa: E402
from ckptstat.analysis.audit.find import discover  # noqa: E402
from ckptstat.analysis.summary import summarize  # noqa: E402
from ckptstat.formats.registry import open_checkpoint  # noqa: E402

STEPS = 2


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("runs") / "run")
    args = transformers.TrainingArguments(output_dir=out, max_steps=STEPS, save_steps=1, save_strategy="steps",
                                          per_device_train_batch_size=4, learning_rate=1e-2, logging_steps=1,
                                          report_to=[], use_cpu=True, optim="adamw_torch", disable_tqdm=True)
    transformers.Trainer(model=_tiny(), args=args, train_dataset=_Data()).train()
    return out


def _held(optimizer_pt):
    """What torch loads back: parameters with state, and that state's tensors, elements and bytes."""
    state = torch.load(optimizer_pt, weights_only=True)["state"]
    ts = [v for s in state.values() for v in s.values() if isinstance(v, torch.Tensor)]
    return {"entries": len(state), "tensors": len(ts), "elements": sum(t.numel() for t in ts),
            "bytes": sum(t.numel() * t.element_size() for t in ts)}


def test_optimizer_pt_alone(run, cli):
    opt = os.path.join(run, f"checkpoint-{STEPS}", "optimizer.pt")
    s = summarize(open_checkpoint(opt))
    assert s["optimizer_state"] == _held(opt)
    assert s["model_weights"] is False and s["parameters"]["unique"] == 0
    assert s["analytic"] is None   # no config-predicted weights beside a file of none
    code, out, _ = cli(opt)
    assert code == 0 and "optimizer state and no model weights" in " ".join(out.split())
    assert "as stored" not in out and "Parameters by bucket" not in out
    code, out, err = cli("memory", opt)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "optimizer state and no model weights" in err


def test_trainer_folder_without_trainer_state(run, tmp_path):
    src = os.path.join(run, f"checkpoint-{STEPS}")
    with open(os.path.join(src, "trainer_state.json")) as f:
        step = json.load(f)["global_step"]
    folder = tmp_path / f"checkpoint-{step}"
    shutil.copytree(src, folder)
    os.remove(folder / "trainer_state.json")
    ckpt = open_checkpoint(str(folder))
    opt = torch.load(folder / "optimizer.pt", weights_only=True)
    assert ckpt.training["library"] == "Hugging Face Trainer"
    assert ckpt.training["global_step"] == step and ckpt.training["epoch"] is None
    assert ckpt.training["learning_rate"] == opt["param_groups"][0]["lr"]
    assert summarize(ckpt)["optimizer_state"] == _held(str(folder / "optimizer.pt"))
    assert any("no trainer_state.json" in n for n in ckpt.notes)
    # optimizer.pt beside weights without scheduler.pt or training_args.bin: not taken for a Trainer folder
    for n in ("scheduler.pt", "training_args.bin"):
        os.remove(folder / n)
    assert open_checkpoint(str(folder)).training is None


def test_audit_one_record_per_trainer_folder(run, tmp_path):
    root = tmp_path / "runs"
    shutil.copytree(run, root / "run")
    lone = root / "lone"   # an optimizer.pt copied out beside its config.json: audited as what it is
    lone.mkdir()
    for n in ("optimizer.pt", "config.json"):
        shutil.copy(os.path.join(run, "checkpoint-1", n), lone / n)
    units, _ = discover(str(root))
    folders = sorted(d for d in os.listdir(root / "run") if d.startswith("checkpoint-"))
    assert sorted(u.path for u in units) == sorted([str(lone / "optimizer.pt")]
                                                   + [str(root / "run" / d) for d in folders])
    model = transformers.AutoModelForCausalLM.from_config(
        transformers.AutoConfig.from_pretrained(os.path.join(run, folders[0])))
    for u in units:
        rec = audit_record(u)
        assert rec["error"] is None
        if u.path.endswith("optimizer.pt"):
            assert rec["config"]["verdict"] == "unavailable" and rec["parameters"] == 0
            assert rec["training"]["optimizer_state"] == _held(u.path)
            continue
        with open(os.path.join(u.path, "trainer_state.json")) as f:
            state = json.load(f)
        assert rec["config"]["verdict"] == "match"
        assert rec["parameters"] == sum(p.numel() for p in model.parameters())
        assert rec["training"]["global_step"] == state["global_step"] and rec["training"]["epoch"] == state["epoch"]
        assert rec["training"]["optimizer_state"] == _held(os.path.join(u.path, "optimizer.pt"))
        assert {f["file"] for f in rec["scan"]["files"]} >= {os.path.join(u.path, n) for n in (
            "optimizer.pt", "scheduler.pt", "rng_state.pth", "training_args.bin")}   # every pickle still scanned


def test_a_trainer_folder_scans_safe_and_holds_its_arguments(run, tmp_path):
    """checkpoint-N/ as the Trainer wrote it (model.safetensors, optimizer.pt, scheduler.pt, rng_state.pth,
    trainer_state.json, training_args.bin): every file scans safe (training_args.bin's classes are plain data as pickle
    rebuilds them: tests/test_scan_plain_data.py), and the folder read as one checkpoint holds the run's arguments under
    `training_args.` as torch.load gives them back. With a training_args.bin the reader refuses (a payload), the folder
    is read without them and a note says why."""
    from test_scan_plain_data import _as_read, _torch_zip
    from test_torch_data_classes import _values

    from ckptstat.analysis.scan import scan_path

    folder = os.path.join(run, f"checkpoint-{STEPS}")
    r = scan_path(folder)
    files = {f["path"]: f for f in r["files"]}
    assert "training_args.bin" in files and r["totals"]["unsafe"] == r["totals"]["unknown"] == 0, r["files"]
    assert "transformers.training_args.TrainingArguments" in files["training_args.bin"]["plain_data_globals"]
    path = os.path.join(folder, "training_args.bin")
    want = _values(_as_read(torch.load(path, weights_only=False)))
    objects = open_checkpoint(folder).objects
    assert {k[len("training_args."):]: o["value"] for k, o in objects.items() if k.startswith("training_args.")} == want
    assert objects["training_args.learning_rate"]["value"] == torch.load(path, weights_only=False).learning_rate
    bad = tmp_path / "checkpoint-bad"
    shutil.copytree(folder, bad)
    payload = b"\x80\x02cos\nsystem\nX\x04\x00\x00\x00true\x85R."   # os.system("true")
    (bad / "training_args.bin").write_bytes(_torch_zip(payload))
    ckpt = open_checkpoint(str(bad))
    assert ckpt.tensors and not any(k.startswith("training_args.") for k in ckpt.objects)
    assert any(n.startswith("training_args.bin not read:") and "os.system" in n for n in ckpt.notes)


def test_a_peft_trainer_checkpoint_says_its_step_and_optimizer(tmp_path, cli, capsys):
    """A Trainer's checkpoint-N/ of a PEFT model holds the adapter, not a model: its summary is the adapter's, and
    said nothing of the step, learning rate or optimizer.pt beside it (audit and trend read them)."""
    peft = pytest.importorskip("peft")
    model = peft.get_peft_model(_tiny(), peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    out = str(tmp_path / "run")
    args = transformers.TrainingArguments(output_dir=out, max_steps=STEPS, save_steps=STEPS, per_device_train_batch_size=4,
                                          learning_rate=1e-2, logging_steps=1, report_to=[], use_cpu=True,
                                          disable_tqdm=True)
    transformers.Trainer(model=model, args=args, train_dataset=_Data()).train()
    capsys.readouterr()   # (the Trainer's own prints)
    folder = os.path.join(out, f"checkpoint-{STEPS}")
    code, text, _ = cli("summary", folder, "--json")
    r = json.loads(text)
    with open(os.path.join(folder, "trainer_state.json")) as f:
        state = json.load(f)
    assert code == 0 and r["schema"].startswith("ckptstat.adapter")
    assert r["training"]["global_step"] == state["global_step"] and r["training"]["epoch"] == state["epoch"]
    assert r["optimizer_state"] == _held(os.path.join(folder, "optimizer.pt"))
    code, text, _ = cli("summary", folder)
    assert "training     Hugging Face Trainer" in text and "parameters' state in" in text


def test_an_accelerate_save_state_folder(tmp_path, cli):
    """accelerate's Accelerator.save_state(folder): model.safetensors, optimizer.bin, scheduler.bin,
    random_states_0.pkl. Read as one checkpoint: the model, the optimizer state counted apart (torch's figures), the
    learning rate from optimizer.bin (it was read as a bare model, optimizer.bin ignored)."""
    accelerate = pytest.importorskip("accelerate")
    torch.manual_seed(0)
    model = _tiny()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.LinearLR(opt, 1.0, 0.1, total_iters=4)
    acc = accelerate.Accelerator(cpu=True)
    model, opt, sched = acc.prepare(model, opt, sched)
    for _ in range(2):
        x = torch.randint(0, model.config.vocab_size, (2, 8))
        acc.backward(model(input_ids=x, labels=x).loss)
        opt.step()
        sched.step()
        opt.zero_grad()
    folder = str(tmp_path / "state")
    acc.save_state(folder)
    assert {"model.safetensors", "optimizer.bin", "scheduler.bin"} <= set(os.listdir(folder))
    r = summarize(open_checkpoint(folder))
    assert r["optimizer_state"] == _held(os.path.join(folder, "optimizer.bin"))
    assert r["parameters"]["unique"] == sum(p.numel() for p in model.parameters())
    lr = torch.load(os.path.join(folder, "optimizer.bin"), weights_only=True)["param_groups"][0]["lr"]
    assert r["training"]["library"] == "accelerate Accelerator.save_state" and r["training"]["learning_rate"] == lr


def test_trend_says_adafactor_second_moments_are_left_out(tmp_path, cli, capsys):
    """Adafactor keeps factored second moments (exp_avg_sq_row / _col) for matrices and exp_avg_sq only for vectors:
    the trend's v columns cover those alone, and say so."""
    out = str(tmp_path / "run")
    args = transformers.TrainingArguments(output_dir=out, max_steps=STEPS, save_steps=1, per_device_train_batch_size=4,
                                          learning_rate=1e-2, logging_steps=1, report_to=[], use_cpu=True,
                                          optim="adafactor", disable_tqdm=True)
    transformers.Trainer(model=_tiny(), args=args, train_dataset=_Data()).train()
    capsys.readouterr()
    state = torch.load(os.path.join(out, f"checkpoint-{STEPS}", "optimizer.pt"), weights_only=True)["state"]
    factored = sum(k in ("exp_avg_sq_row", "exp_avg_sq_col") for s in state.values() for k in s)
    code, text, _ = cli("trend", out)
    assert code == 0 and factored and f"{factored:,} factored second moments" in " ".join(text.split())
