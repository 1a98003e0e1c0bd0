"""transformers 5 records `model.num_parameters()` in a sharded save's index (metadata `total_parameters`): the
summary shows it beside its own count, and where they part, by how much. The oracle: the models transformers 5.25
builds and saves here, their num_parameters()."""
from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")

from ckptstat.cli import main  # noqa: E402

MODELS = {
    "gpt2-tied": lambda: T.GPT2LMHeadModel(T.GPT2Config(n_embd=32, n_layer=2, n_head=2, vocab_size=100)),
    "llama": lambda: T.LlamaForCausalLM(T.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                                      num_attention_heads=2, vocab_size=100)),
    "bert-mlm": lambda: T.BertForMaskedLM(T.BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                                       intermediate_size=37, vocab_size=100)),
    "t5": lambda: T.T5ForConditionalGeneration(T.T5Config(d_model=32, d_ff=64, num_layers=2, num_heads=2, d_kv=16,
                                                          vocab_size=100)),
    "qwen3-moe": lambda: T.Qwen3MoeForCausalLM(T.Qwen3MoeConfig(
        hidden_size=32, intermediate_size=64, moe_intermediate_size=16, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, head_dim=16, num_experts=4, num_experts_per_tok=2, vocab_size=100)),
}


def _saved(tmp_path, name):
    torch.manual_seed(0)
    model = MODELS[name]()
    model.save_pretrained(tmp_path / name, max_shard_size="20KB")
    index = tmp_path / name / "model.safetensors.index.json"
    assert json.loads(index.read_text())["metadata"]["total_parameters"] == model.num_parameters()
    return tmp_path / name, model


@pytest.mark.parametrize("name", MODELS)
def test_the_count_transformers_recorded_is_shown_and_agrees(tmp_path, capsys, name):
    folder, model = _saved(tmp_path, name)
    assert main(["summary", str(folder), "--json"]) == 0
    p = json.loads(capsys.readouterr().out)["parameters"]
    assert p["recorded"]["count"] == p["recorded"]["expected"] == model.num_parameters() and p["recorded"]["difference"] == 0
    assert main(["summary", str(folder)]) == 0
    assert "recorded" in capsys.readouterr().out


def test_an_index_whose_record_parts_from_its_files_says_by_how_much(tmp_path, capsys):
    """A shard replaced after the save (a tensor cut): the record stays the saved model's."""
    folder, model = _saved(tmp_path, "llama")
    index = folder / "model.safetensors.index.json"
    data = json.loads(index.read_text())
    data["metadata"]["total_parameters"] = model.num_parameters() + 4096
    index.write_text(json.dumps(data))
    assert main(["summary", str(folder), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["parameters"]["recorded"]["difference"] == 4096
    assert main(["summary", str(folder)]) == 0
    assert "+4,096 against" in capsys.readouterr().out.replace("\n", " ")


def test_no_record_no_line(tmp_path, capsys):
    model = MODELS["llama"]()
    model.save_pretrained(tmp_path)   # one file: no index
    assert main(["summary", str(tmp_path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["parameters"]["recorded"] is None


def test_the_audit_record_keeps_it(tmp_path, capsys):
    (tmp_path / "zoo").mkdir()
    _, model = _saved(tmp_path / "zoo", "gpt2-tied")
    out = tmp_path / "audit.jsonl"
    main(["audit", str(tmp_path / "zoo"), "--out", str(out), "--no-progress"])
    records = [json.loads(line) for line in out.read_text().splitlines()]
    rec = next(r for r in records if r["parameters"] is not None)
    assert rec["parameters_recorded"]["count"] == model.num_parameters() and rec["parameters_recorded"]["difference"] == 0
