"""Index-keyed optimizer state mapped to its parameters (analysis/optimizer_names.py, docs/training.md): transformers'
own Trainer (AdamW, weight decay > 0: two param groups; a frozen parameter) on a tiny LLaMA and a GPT-2 with tied
embeddings, and the Lightning and DeepSpeed ZeRO-0 runs of fixtures/make_training.py. The oracle of each mapping is
the live optimizer: index i of its state_dict is the i-th parameter of its param_groups, all groups in order
(torch/optim/optimizer.py state_dict), named by the live model's named_parameters(). `trend`'s per-layer second
moments equal torch's on the states torch loads, under that mapping; a file whose shapes do not fit is refused per
group with the reason, never mapped."""
import json
import os
import re
import shutil

import pytest
from conftest import fixture, fixture_script

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
safetensors_torch = pytest.importorskip("safetensors.torch")

from ckptstat import open_checkpoint  # noqa: E402
from ckptstat.analysis import meta  # noqa: E402
from ckptstat.analysis.optimizer_names import META, NONE, ORDER, optimizer_names  # noqa: E402
from ckptstat.analysis.summary import summarize  # noqa: E402
from ckptstat.analysis.trend import trend  # noqa: E402

REL = 1e-9
LAYER = re.compile(r"\.(?:layers|h)\.(\d+)\.")


class _Data(torch.utils.data.Dataset):
    def __init__(self, vocab):
        self.vocab = vocab

    def __len__(self):
        return 16

    def __getitem__(self, i):
        ids = torch.randint(0, self.vocab, (8,), generator=torch.Generator().manual_seed(i))
        return {"input_ids": ids, "labels": ids}


def _train(out, model, frozen, steps=2):
    for name in frozen:
        model.get_parameter(name).requires_grad_(False)
    args = transformers.TrainingArguments(output_dir=str(out), max_steps=steps, save_steps=1, save_strategy="steps",
                                          per_device_train_batch_size=4, learning_rate=1e-2, weight_decay=0.1,
                                          report_to=[], use_cpu=True, optim="adamw_torch", disable_tqdm=True)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=_Data(model.config.vocab_size))
    trainer.train()
    return trainer


def _truth(trainer):
    """The live optimizer's state index -> parameter name."""
    name_of = {id(p): n for n, p in trainer.model.named_parameters()}
    flat = [p for g in trainer.optimizer.param_groups for p in g["params"]]
    return {f"optimizer.state.{i}": name_of[id(p)] for i, p in enumerate(flat)}


def _llama():
    cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                   num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=32)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(cfg)


def _gpt2():
    cfg = transformers.GPT2Config(vocab_size=64, n_embd=16, n_layer=2, n_head=2, n_positions=32, tie_word_embeddings=True)
    torch.manual_seed(0)
    return transformers.GPT2LMHeadModel(cfg)


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    out = tmp_path_factory.mktemp("llama")
    return out, _train(out, _llama(), ["model.embed_tokens.weight"])


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpt2")
    return out, _train(out, _gpt2(), ["transformer.wpe.weight"])


def _folders(out):
    return sorted((os.path.join(out, d) for d in os.listdir(out) if d.startswith("checkpoint-")),
                  key=lambda d: int(d.rsplit("-", 1)[1]))


def _per_layer_equals_torch(r, folders, truth):
    """trend's second moments per layer at every step equal torch's on optimizer.pt under the true mapping."""
    for t, folder in enumerate(folders):
        state = torch.load(os.path.join(folder, "optimizer.pt"), weights_only=True)["state"]
        got = {g["group"]: g for g in r["optimizer"][t]["groups"]}
        layers: dict[int, list] = {}
        for i, st in state.items():
            m = LAYER.search(truth[f"optimizer.state.{i}"])
            if m:
                layers.setdefault(int(m.group(1)), []).append(st["exp_avg_sq"].double().flatten())
        assert layers
        for layer, vs in layers.items():
            v = torch.cat(vs)
            g = next(g for k, g in got.items() if re.search(rf"\.{layer}$", k))
            assert g["elements"] == v.numel() and g["max"] == v.max().item()
            assert g["mean"] == pytest.approx(v.mean().item(), rel=REL)
            assert g["mean_sqrt"] == pytest.approx(v.sqrt().mean().item(), rel=REL)


@pytest.mark.parametrize("which", ["llama", "gpt2"])
def test_trainer_mapping_on_the_meta_device(which, request, cli, capsys, tmp_path):
    out, trainer = request.getfixturevalue(which)
    capsys.readouterr()   # (what the Trainer printed)
    truth = _truth(trainer)
    folders = _folders(out)
    for folder in folders:
        # what the Trainer writes: two groups (decay, then none), parameters by index, no param_names
        groups = torch.load(os.path.join(folder, "optimizer.pt"), weights_only=True)["param_groups"]
        assert [g["weight_decay"] for g in groups] == [0.1, 0.0] and not any("param_names" in g for g in groups)
        ckpt = open_checkpoint(folder)
        names, rows = optimizer_names(ckpt)
        assert names == truth   # every index, the frozen parameter left out
        assert [(x["group"], x["mapping"], x["parameters"]) for x in rows] == [
            (g, META, len(grp["params"])) for g, grp in enumerate(trainer.optimizer.param_groups)]
        # summary reads headers: it does not build the model, and says trend does (a safetensors folder: no order)
        assert [(x["mapping"], x["mapped"]) for x in summarize(ckpt)["training"]["optimizer_mapping"]] == [
            (NONE, 0)] * len(rows)
        assert "`ckptstat trend` builds it" in summarize(ckpt)["training"]["optimizer_mapping"][0]["reason"]
    code, stdout, _ = cli("trend", str(out), "--json")
    r = json.loads(stdout)
    assert code == 0 and r["optimizer"][-1]["attributed"] == len(truth)
    _per_layer_equals_torch(r, folders, truth)
    code, _, _ = cli("trend", str(out), "-o", str(tmp_path / "t.md"))
    assert code == 0 and f"group 1: {len(trainer.optimizer.param_groups[1]['params'])} of" in (tmp_path / "t.md").read_text()


def _bin_copy(out, trainer, dest):
    """The run's checkpoints with the weights as torch.save'd state_dicts in the model's own order, a tied weight
    saved as the tensor it shares (what torch.save(model.state_dict()) writes), no safetensors file."""
    live = trainer.model.state_dict()
    first = {}
    for k, v in live.items():
        first.setdefault(v.data_ptr(), k)
    for folder in _folders(out):
        to = os.path.join(dest, os.path.basename(folder))
        shutil.copytree(folder, to)
        sd = safetensors_torch.load_file(os.path.join(to, "model.safetensors"))
        os.remove(os.path.join(to, "model.safetensors"))
        torch.save({k: sd[first[v.data_ptr()]] for k, v in live.items()}, os.path.join(to, "pytorch_model.bin"))
    return dest


def test_trainer_without_transformers(llama, gpt2, tmp_path, monkeypatch):
    """Without the meta path: a safetensors folder has no parameter order (refused, saying why); a state_dict
    pickle keeps it, and the Trainer's split by its name rule is checked by shapes: LLaMA maps, GPT-2's LayerNorm
    (no decay by its type, which names do not show) makes its no-decay group not fit, refused, never guessed."""
    monkeypatch.setattr(meta, "available", lambda: False)
    out, trainer = llama
    names, rows = optimizer_names(open_checkpoint(_folders(out)[-1]))
    assert names == {} and {x["mapping"] for x in rows} == {NONE}
    assert all("does not keep the model's parameter order" in x["reason"] for x in rows)
    truth = _truth(trainer)
    binary = _bin_copy(out, trainer, tmp_path / "llama")
    names, rows = optimizer_names(open_checkpoint(_folders(binary)[-1]))
    assert names == truth and {x["mapping"] for x in rows} == {ORDER}
    assert "model.embed_tokens.weight" in rows[0]["reason"]   # the parameter not in the group, said
    _per_layer_equals_torch(trend([str(binary)]), _folders(binary), truth)
    out, trainer = gpt2
    truth = _truth(trainer)
    binary = _bin_copy(out, trainer, tmp_path / "gpt2")
    names, rows = optimizer_names(open_checkpoint(_folders(binary)[-1]))
    assert all(truth[k] == v for k, v in names.items())   # what is mapped is right
    assert rows[1]["mapping"] == NONE and "do not fit" in rows[1]["reason"]
    assert rows[0]["mapping"] == ORDER and "lm_head.weight" not in rows[0]["reason"]   # the tied head: once, as wte


def test_ambiguous_frozen_parameters_are_refused(tmp_path):
    """Two frozen weights of one shape among others of that shape: more than one assignment fits, so the group
    is refused (the no-decay group, with nothing frozen, maps)."""
    trainer = _train(tmp_path, _llama(), ["model.layers.0.mlp.down_proj.weight", "model.layers.1.mlp.up_proj.weight"],
                     steps=1)
    names, rows = optimizer_names(open_checkpoint(_folders(tmp_path)[-1]))
    assert rows[0]["mapping"] == NONE and "more than one assignment" in rows[0]["reason"]
    assert rows[1]["mapping"] == META
    truth = _truth(trainer)
    assert names and all(truth[k] == v for k, v in names.items())
    assert len(names) == len(trainer.optimizer.param_groups[1]["params"])


def test_tampered_shapes_are_refused(llama, tmp_path):
    out, trainer = llama
    shutil.copytree(_folders(out)[0], tmp_path / "checkpoint-8")
    folder = shutil.copytree(_folders(out)[-1], tmp_path / "checkpoint-9")
    sd = torch.load(folder / "optimizer.pt", weights_only=True)
    g0 = sd["param_groups"][0]["params"]
    a, b = next((x, y) for x, y in zip(g0, g0[1:]) if sd["state"][x]["exp_avg"].shape != sd["state"][y]["exp_avg"].shape)
    sd["state"][a], sd["state"][b] = sd["state"][b], sd["state"][a]   # two states swapped: their shapes do not fit
    torch.save(sd, folder / "optimizer.pt")
    names, rows = optimizer_names(open_checkpoint(str(folder)))
    assert rows[0]["mapping"] == NONE and "fits their shapes" in rows[0]["reason"] and rows[0]["mapped"] == 0
    assert all(not k.endswith((f".{a}", f".{b}")) for k in names) and rows[1]["mapping"] == META
    last = trend([str(tmp_path)])["optimizer"][-1]   # trend: the refused group's second moments not attributed
    assert last["mapping"] == rows and last["attributed"] == len(names) == len(sd["param_groups"][1]["params"])
    layer0 = torch.cat([sd["state"][i]["exp_avg_sq"].double().flatten() for i in sd["param_groups"][1]["params"]
                        if ".layers.0." in _truth(trainer)[f"optimizer.state.{i}"]])
    assert next(g for g in last["groups"] if g["group"].endswith(".0"))["elements"] == layer0.numel()
    sd["param_groups"][1]["params"].append(10_000)   # a group with more states than parameters
    torch.save(sd, folder / "optimizer.pt")
    _, rows = optimizer_names(open_checkpoint(str(folder)))
    assert rows[1]["mapping"] == NONE and "do not fit" in rows[1]["reason"]
    sd["param_groups"][1]["params"][-1] = sd["param_groups"][0]["params"][0]   # one index in both groups
    torch.save(sd, folder / "optimizer.pt")
    names, rows = optimizer_names(open_checkpoint(str(folder)))
    assert names == {} and all("listed twice" in x["reason"] for x in rows)


@pytest.mark.parametrize("run, prefix, wrap", [("lightning", "optimizer_states.0.state", "state_dict.model."),
                                               ("deepspeed-zero0", "optimizer.state", "module.")])
def test_lightning_and_deepspeed_state_dict_order(run, prefix, wrap):
    """One optimizer over the module's parameters: the state-dict order, shape-checked, is the live model's
    named_parameters() (the fixtures' Tiny model, built here)."""
    live = fixture_script("make_training").Tiny()
    truth = {f"{prefix}.{i}": wrap + n for i, (n, _) in enumerate(live.named_parameters())}
    r = trend([fixture("training", run)])
    paths = [s["path"] for s in r["steps"]]
    for t, path in enumerate(paths):
        ckpt = open_checkpoint(path)
        names, rows = optimizer_names(ckpt)
        assert names == truth and [x["mapping"] for x in rows] == [ORDER]
        obj = torch.load(path if os.path.isfile(path) else os.path.join(path, "mp_rank_00_model_states.pt"),
                         weights_only=True)
        state = (obj["optimizer_states"][0] if "optimizer_states" in obj else obj["optimizer"])["state"]
        got = {g["group"]: g for g in r["optimizer"][t]["groups"]}
        for layer in (0, 1):
            v = torch.cat([state[i]["exp_avg_sq"].double().flatten() for i in state
                           if truth[f"{prefix}.{i}"].startswith(f"{wrap}layers.{layer}.")])
            g = got[f"encoder.{layer}"]
            assert g["elements"] == v.numel() and g["max"] == v.max().item()
            assert g["mean"] == pytest.approx(v.mean().item(), rel=REL)


def test_several_optimizers_are_refused(tmp_path):
    """Lightning's dict with two optimizers (a GAN's): which parameters each holds is the training code's choice."""
    live = fixture_script("make_training").Tiny()
    opts = [torch.optim.AdamW(live.layers.parameters()), torch.optim.AdamW(live.head.parameters())]
    live(torch.ones(1, 4)).sum().backward()
    for o in opts:
        o.step()
    path = tmp_path / "epoch=0-step=1.ckpt"
    torch.save({"pytorch-lightning_version": "2.6.6", "global_step": 1, "epoch": 0,
                "state_dict": {f"model.{k}": v for k, v in live.state_dict().items()},
                "optimizer_states": [o.state_dict() for o in opts]}, path)
    names, rows = optimizer_names(open_checkpoint(str(path)))
    assert names == {} and len(rows) == 2 and all("2 optimizers" in x["reason"] for x in rows)
