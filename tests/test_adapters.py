"""PEFT adapters (issue 18): adapters written at test time by peft itself (fixtures/make_adapters.py) on tiny
llama, bert, gpt2 and t5 models, checked against peft's own numbers: get_nb_trainable_parameters (trainable,
and 'all params' of the unmerged model), trainable parameters per target module and in modules_to_save
copies, every LoRA layer's r, alpha and scaling, and merge_and_unload().parameters() for the merged model."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import fixture_script

make_adapters = fixture_script("make_adapters")   # fixtures/make_adapters.py: the writer and its oracle

from ckptstat import open_checkpoint  # noqa: E402
from ckptstat.analysis.adapter import adapter_report, classify  # noqa: E402


@pytest.fixture(scope="session")
def written(tmp_path_factory) -> dict[str, tuple[str, dict]]:
    """Every case written once: name -> (folder with base/ and adapter/, peft's numbers)."""
    root = tmp_path_factory.mktemp("adapters")
    out = {}
    for case in make_adapters.CASES + make_adapters.SHARED_BANK:
        folder = os.path.join(root, case)
        out[case] = (folder, make_adapters.write_adapter(case, folder))
    return out


def _report(folder: str, base: bool = True) -> dict:
    ckpt = open_checkpoint(os.path.join(folder, "adapter"))
    return adapter_report(ckpt, open_checkpoint(os.path.join(folder, "base")) if base else None)


@pytest.mark.parametrize("case", make_adapters.CASES)
def test_counts_agree_with_peft(written, case):
    folder, oracle = written[case]
    r = _report(folder)
    p, b = r["parameters"], r["base"]
    assert r["type"]["peft_type"] == oracle["peft_type"]
    assert p["trainable"] == oracle["trainable"]            # peft's trainable parameters
    assert p["modules_to_save"] == oracle["modules_to_save"]
    assert b["params"] == oracle["base"]                     # the base model's parameters()
    assert b["unmerged"] == oracle["all"]                    # peft's 'all params'
    assert b["merged"] == oracle["merged"]                   # merge_and_unload().parameters(); None: not mergeable
    assert not b["modules_missing"] and not b["shape_mismatches"]
    per_leaf: dict[str, int] = {}
    for m in r["modules"]:
        if not m["target"].endswith("(trainable tokens)"):
            leaf = m["module"].rsplit(".", 1)[-1]
            per_leaf[leaf] = per_leaf.get(leaf, 0) + m["params"]
    assert per_leaf == oracle["targets"]                     # trainable tuner parameters per target module
    assert sum(g["params"] for g in r["targets"]) == sum(m["params"] for m in r["modules"])


@pytest.mark.parametrize("case", make_adapters.SHARED_BANK)
def test_shared_trainable_bank_counts_as_peft_does(written, case):
    """VB-LoRA's vector bank and Uni-LoRA's theta are saved once under base_model. and are trainable (before: called
    shared frozen tensors, 64 and 256 parameters short of peft's count)."""
    folder, oracle = written[case]
    r = _report(folder)
    assert r["parameters"]["trainable"] == oracle["trainable"]
    assert r["base"]["unmerged"] == oracle["all"] and r["base"]["merged"] == oracle["merged"]


def test_frozen_and_trainable_name_tables_are_peft_s():
    """FROZEN_IN_MODULE are tensors a tuner layer holds as buffers (its other_param_names), TRAINABLE_SHARED ones it
    trains (adapter_layer_names): both read from peft's own layer classes."""
    import importlib
    import pkgutil

    import peft.tuners

    from ckptstat.analysis.adapter import FROZEN_IN_MODULE, TRAINABLE_SHARED

    trained, other = set(), set()
    for mod in pkgutil.iter_modules(peft.tuners.__path__):
        try:
            layer = importlib.import_module(f"peft.tuners.{mod.name}.layer")
        except ImportError:
            continue
        for cls in vars(layer).values():
            if isinstance(cls, type):
                trained |= set(getattr(cls, "adapter_layer_names", ()))
                other |= set(getattr(cls, "other_param_names", ()))
    assert FROZEN_IN_MODULE <= other - trained
    assert TRAINABLE_SHARED <= trained - other


@pytest.mark.parametrize("case", ["llama-dora", "llama-lora-bin", "gpt2-lora-bias", "gpt2-adalora", "gpt-oss-lora-experts"])
def test_rank_alpha_and_scaling_per_module(written, case):
    """rank_pattern / alpha_pattern / use_rslora resolved per module as peft resolved them."""
    folder, oracle = written[case]
    r = _report(folder, base=False)
    rows = {m["module"]: m for m in r["modules"]}
    assert oracle["layers"]
    for name, want in oracle["layers"].items():
        got = rows[name]
        assert got["rank"] == want["r"], name
        assert got["alpha"] == want["alpha"], name
        assert got["scale"] == pytest.approx(want["scaling"]), name


def test_dora_is_named_and_patterns_reported(written):
    folder, _ = written["llama-dora"]
    r = _report(folder, base=False)
    assert r["type"]["name"].startswith("DoRA") and r["type"]["dora"]
    assert r["rank"]["r"] == 4 and r["rank"]["alpha"] == 8
    assert r["rank"]["stored_ranks"] == [4, 8]
    assert r["rank"]["rank_pattern"] == {"layers.1.self_attn.q_proj": 8}
    assert {m["module"] for m in r["modules_to_save"]["modules"]} == {"lm_head"}
    assert sorted(r["target_modules"]) == ["q_proj", "v_proj"]


def test_kinds(written):
    """Where each stored tensor is counted: VeRA's shared projections and the trainable-token rows apart."""
    folder, _ = written["bert-vera"]
    r = _report(folder, base=False)
    assert r["parameters"]["shared_frozen"] > 0
    assert {o["name"] for o in r["other_tensors"]} == {"base_model.vera_A", "base_model.vera_B"}
    folder, _ = written["t5-lora-tokens"]
    r = _report(folder, base=False)
    assert any(g["target"] == "shared (trainable tokens)" for g in r["targets"])
    folder, _ = written["gpt2-lora-bias"]
    r = _report(folder, base=False)
    assert r["parameters"]["biases"] == 2 * 96
    cfg = {"modules_to_save": ["classifier"], "bias": "none"}
    assert classify("base_model.model.bert.encoder.layer.0.attention.self.query.lora_A.weight", cfg) == \
        ("adapter", "bert.encoder.layer.0.attention.self.query", "lora_A.weight")
    assert classify("base_model.model.classifier.modules_to_save.default.weight", cfg)[:2] == ("modules_to_save", "classifier")
    assert classify("prompt_embeddings", cfg)[0] == "prompt"


def test_prompt_learning(written):
    folder, oracle = written["gpt2-prefix"]
    r = _report(folder)
    assert r["type"]["prompt_learning"] and r["prompt"]["num_virtual_tokens"] == 5
    assert r["parameters"]["adapter"] == oracle["trainable"]
    assert r["base"]["merged"] is None and "not merged" in r["base"]["merge_rule"]


def test_public_api(written):
    import ckptstat

    folder, oracle = written["bert-ia3"]
    r = ckptstat.adapter_summary(os.path.join(folder, "adapter"), os.path.join(folder, "base"))
    assert r["schema"] == "ckptstat.adapter/1" and r["base"]["merged"] == oracle["merged"]
    # the plain summary of an adapter names it an adapter, never a model found from tensor names
    assert ckptstat.summarize(os.path.join(folder, "adapter"))["architecture"]["family"] == "adapter"


def test_wrong_base_is_said(written):
    folder, _ = written["llama-dora"]
    other, _ = written["bert-ia3"]
    r = adapter_report(open_checkpoint(os.path.join(folder, "adapter")), open_checkpoint(os.path.join(other, "base")))
    assert r["base"]["modules_missing"] and "the adapter's base model?" in r["base"]["notes"][0]


def test_cli_summary_says_adapter(written, cli):
    folder, oracle = written["llama-dora"]
    rc, out, err = cli("summary", os.path.join(folder, "adapter"))
    assert rc == 0, err
    # no architecture claimed before the type line (the path, printed whole, holds the fixture's name)
    assert "PEFT adapter" in out and "DoRA" in out and "llama" not in out.split("type")[0].replace(folder, "")
    assert f"{oracle['trainable']:,}" in out
    rc, out, err = cli(os.path.join(folder, "adapter"), "--base", os.path.join(folder, "base"))
    assert rc == 0, err
    assert f"{oracle['merged']:,}" in out and f"{oracle['all']:,}" in out and "merge rule" in out
    rc, out, err = cli(os.path.join(folder, "adapter"), "--json")    # the quick path leaves adapters to typer
    assert rc == 0, err
    assert json.loads(out)["schema"] == "ckptstat.adapter/1"


def test_cli_misuse(written, cli):
    folder, _ = written["llama-dora"]
    rc, _, err = cli("summary", os.path.join(folder, "base"), "--base", os.path.join(folder, "base"))
    assert rc == 2 and "--base applies to a PEFT adapter" in err and len(err.strip().splitlines()) == 1
    rc, _, err = cli("flops", os.path.join(folder, "adapter"))
    assert rc != 0 and "PEFT adapter" in err and len(err.strip().splitlines()) == 1
    rc, out, _ = cli("tensors", os.path.join(folder, "adapter"), "--json")
    assert rc == 0 and any("lora_A" in t["name"] for t in json.loads(out)["tensors"])


@pytest.mark.parametrize("body", ["[]", '{"peft_type": "LORA", "r": [1], "lora_alpha": {"x": 1}, "target_modules": 5, '
                                  '"rank_pattern": {"(a+)+$": 4, "q_proj": "x"}, "modules_to_save": "lm_head"}'])
def test_hostile_config(written, tmp_path, cli, body):
    """A config of the wrong shape: one line naming the file, or a report that never trusts its fields."""
    folder, _ = written["llama-dora"]
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_model.safetensors").write_bytes(open(os.path.join(folder, "adapter", "adapter_model.safetensors"),
                                                             "rb").read())
    (adapter / "adapter_config.json").write_text(body)
    rc, out, err = cli("summary", str(adapter))
    if body == "[]":
        assert rc == 1 and "adapter_config.json" in err and len(err.strip().splitlines()) == 1
    else:
        assert rc == 0, err
        assert "internal error" not in err


@pytest.mark.parametrize("command", [["summary", "{a}", "--base", "{b}"], ["tensors", "{a}"], ["ties", "{a}"]])
def test_header_only(written, command):
    """Header-only commands on an adapter (summary with --base too) import no torch, transformers, peft, numpy
    or h5py."""
    folder, _ = written["llama-lora-bin"]   # adapter_model.bin: the pickle is walked, never unpickled
    args = [c.format(a=os.path.join(folder, "adapter"), b=os.path.join(folder, "base")) for c in command] + ["--json"]
    code = ("import sys; from ckptstat.cli import main; rc = main(" + repr(args) + "); "
            "print(rc, sorted(m for m in ('torch', 'h5py', 'matplotlib', 'transformers', 'peft', 'numpy') "
            "if m in sys.modules), file=sys.stderr)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.stderr.strip().splitlines()[-1] == "0 []", r.stderr


def test_adapter_folder_holding_a_model_too(written, tmp_path, cli):
    """A folder with adapter_config.json is summarised as the adapter even when a model's weights sit beside it."""
    import shutil

    folder, oracle = written["bert-ia3"]
    both = tmp_path / "both"
    shutil.copytree(os.path.join(folder, "adapter"), both)
    shutil.copy(os.path.join(folder, "base", "model.safetensors"), both / "model.safetensors")
    rc, out, err = cli(str(both), "--json")
    assert rc == 0, err
    r = json.loads(out)
    assert r["schema"] == "ckptstat.adapter/1" and r["parameters"]["trainable"] == oracle["trainable"]


def test_trained_adalora_ranks_and_scale_as_peft_loads_them(tmp_path):
    """AdaLoRA's budget prunes ranks while it trains; save_pretrained writes each module resized to the ranks kept and
    rank_pattern as their masks. peft loads it with those ranks and scales every module by alpha / ranknum, its
    init_r. Before, the scale was alpha / the stored rank (4.0 and 8.0 where peft has 1.33)."""
    import peft
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = make_adapters._llama()
    model.save_pretrained(tmp_path / "base")
    config = peft.AdaLoraConfig(init_r=6, target_r=2, target_modules=["q_proj", "v_proj"], total_step=20, tinit=2,
                                tfinal=4, deltaT=1, task_type="CAUSAL_LM")
    pm = peft.get_peft_model(model, config)
    opt = torch.optim.SGD(pm.parameters(), lr=0.1)
    for step in range(20):
        x = torch.randint(0, 96, (2, 8))
        pm(input_ids=x, labels=x).loss.backward()
        pm.base_model.update_and_allocate(step)
        opt.step()
        opt.zero_grad()
    pm.save_pretrained(tmp_path / "adapter")
    loaded = peft.PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tmp_path / "base"), tmp_path / "adapter",
                                            is_trainable=True)
    want = {n.removeprefix("base_model.model."): (m.lora_A["default"].shape[0],
                                                  m.scaling["default"] / float(m.ranknum["default"]))
            for n, m in loaded.named_modules() if hasattr(m, "ranknum") and "default" in m.r}
    r = _report(str(tmp_path))
    assert len({rank for rank, _ in want.values()}) > 1   # the budget kept different ranks
    assert {m["module"]: (m["rank"], pytest.approx(m["scale"])) for m in r["modules"]} == want
    trainable, all_params = loaded.get_nb_trainable_parameters()
    assert r["parameters"]["trainable"] == trainable and r["base"]["unmerged"] == all_params
    assert r["rank"]["rank_pattern"] == {k: sum(v) for k, v in loaded.peft_config["default"].rank_pattern.items()}
