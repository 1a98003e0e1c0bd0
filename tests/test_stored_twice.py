"""A tie config.json asks for, stored twice: a consolidated state_dict of cloned tensors (what consolidation and
conversion tools write, safetensors refusing shared storage) or a sharded torch `.bin` whose tied names fall in two
shards. transformers loads the pair tied, so the summary, `flops` and `ties` count it once, as the model's
parameters() do; the file's bytes still count both copies. The oracle: the class from_pretrained builds from that
folder; the untied configs (BERT's decoder bias, T5 with tie_word_embeddings false) keep both."""
from __future__ import annotations

import json
import os

import pytest

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")

from ckptstat import summarize  # noqa: E402
from ckptstat.cli import main  # noqa: E402

CASES = {
    "gpt2": lambda tie: T.GPT2LMHeadModel(T.GPT2Config(n_embd=32, n_layer=2, n_head=2, vocab_size=100,
                                                       tie_word_embeddings=tie)),
    "llama": lambda tie: T.LlamaForCausalLM(T.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                                          num_attention_heads=2, vocab_size=100, tie_word_embeddings=tie)),
    "t5": lambda tie: T.T5ForConditionalGeneration(T.T5Config(d_model=32, d_ff=64, num_layers=1, num_heads=2, d_kv=16,
                                                              vocab_size=100, tie_word_embeddings=tie)),
    "bert-mlm": lambda tie: T.BertForMaskedLM(T.BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                                           intermediate_size=37, vocab_size=100, tie_word_embeddings=tie)),
    "longt5": lambda tie: T.LongT5ForConditionalGeneration(T.LongT5Config(
        d_model=32, d_ff=64, num_layers=1, num_heads=2, d_kv=16, vocab_size=100, tie_word_embeddings=tie)),
    "gemma3_text": lambda tie: T.Gemma3ForCausalLM(T.Gemma3TextConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
        head_dim=16, vocab_size=100, tie_word_embeddings=tie)),
}


def _write(model, folder, layout: str, named: bool, head: str | None = None) -> None:
    """The state_dict cloned name by name beside the model's config.json, naming its class (`named`, as a copy of
    the original folder's config does) or not (a config written from the config object)."""
    from safetensors.torch import save_file
    os.makedirs(folder)
    model.config.architectures = [type(model).__name__] if named else None
    model.config.save_pretrained(folder)
    sd = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}   # every name, its own storage
    if head is not None:   # the head's copy trained apart from the embedding (a fine-tune that untied it)
        sd[head] = sd[head] + 0.5
    if layout == "safetensors":
        save_file(sd, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
        return
    names = list(sd)
    halves = {"pytorch_model-00001-of-00002.bin": names[: len(names) // 2],
              "pytorch_model-00002-of-00002.bin": names[len(names) // 2:]}
    for shard, part in halves.items():
        torch.save({k: sd[k] for k in part}, os.path.join(folder, shard))
    index = {"metadata": {}, "weight_map": {k: shard for shard, part in halves.items() for k in part}}
    with open(os.path.join(folder, "pytorch_model.bin.index.json"), "w") as f:
        json.dump(index, f)


@pytest.mark.parametrize("named", [True, False], ids=["class-named", "no-class"])
@pytest.mark.parametrize("layout", ["safetensors", "bin-shards"])
@pytest.mark.parametrize("tie", [True, False])
@pytest.mark.parametrize("family", sorted(CASES))
def test_a_tie_stored_twice_counts_once(tmp_path, capsys, family, tie, layout, named):
    torch.manual_seed(0)
    folder = str(tmp_path / "m")
    _write(CASES[family](tie), folder, layout, named)
    loaded = getattr(T, CASES[family](tie).__class__.__name__).from_pretrained(folder)
    want = sum(p.numel() for p in loaded.parameters())
    s = summarize(folder)
    assert s["parameters"]["unique"] == want, (family, tie, layout)
    assert s["storage"]["tensor_bytes"] == sum(v.numel() * v.element_size() for v in CASES[family](tie).state_dict().values())
    assert main(["flops", folder, "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["parameters"]["checkpoint"] == r["parameters"]["predicted"] == want, (family, tie, layout)
    assert main(["ties", folder, "--json"]) == 0
    rows = {r["convention"]: r for r in json.loads(capsys.readouterr().out)["counting"]["rows"]}
    assert rows["unique parameters"]["params"] == want, (family, tie, layout)
    for r in rows.values():   # each name a row's total differs by, once (a copy stored twice was listed twice)
        names = [d["name"] for d in r["differences"]]
        assert len(names) == len(set(names)) and r["params"] - want == sum(d["elements"] for d in r["differences"]), r


@pytest.mark.parametrize("family", ["gpt2", "llama", "t5", "gemma3_text"])
def test_a_tied_state_dict_without_config_agrees(tmp_path, family):
    """torch.save(model.state_dict()) of a tied model, no config.json: the head over the embedding's storage is no
    tensor of its own, so the architecture the names show is tied and predicts the model's parameters()."""
    torch.manual_seed(0)
    model = CASES[family](True)
    torch.save(model.state_dict(), tmp_path / "model.pt")
    s = summarize(str(tmp_path / "model.pt"))
    want = sum(p.numel() for p in model.parameters())
    assert s["parameters"]["unique"] == s["analytic"]["predicted_params"] == want, family
    assert s["analytic"]["agree"] is True, family


HEADS = {"gpt2": "lm_head.weight", "llama": "lm_head.weight", "t5": "lm_head.weight", "gemma3_text": "lm_head.weight",
         "bert-mlm": "cls.predictions.decoder.weight"}


@pytest.mark.parametrize("layout", ["safetensors", "bin-shards"])
@pytest.mark.parametrize("family", sorted(HEADS))
def test_a_tie_stored_twice_with_different_copies_counts_twice(tmp_path, capsys, family, layout):
    """config.json asks for the tie, the file stores both copies and they differ: transformers 5.25's from_pretrained
    does not tie them ("both are present in the checkpoints with different values, so we will NOT tie them"), and its
    parameters() holds both; ckptstat counted the pair once. Now: the summary's count, `ties`' model.parameters() row
    and its `declined` list, and audit's `broken` verdict."""
    torch.manual_seed(0)
    folder = str(tmp_path / "m")
    _write(CASES[family](True), folder, layout, True, head=HEADS[family])
    T.logging.set_verbosity_error()
    loaded = getattr(T, CASES[family](True).__class__.__name__).from_pretrained(folder)
    want = sum(p.numel() for p in loaded.parameters())
    assert want > sum(p.numel() for p in CASES[family](True).parameters())   # (the oracle: untied)
    assert summarize(folder)["parameters"]["unique"] == want, family
    assert main(["ties", folder, "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert [t["alias"] for t in r["declined"]] == [HEADS[family]]
    assert HEADS[family] not in {t["alias"] for t in r["ties"]}
    rows = {row["convention"]: row["params"] for row in r["counting"]["rows"]}
    assert rows["unique parameters"] == rows[f"model.parameters() of {type(loaded).__name__}"] == want
    out = tmp_path / "audit.jsonl"
    assert main(["audit", folder, "--out", str(out)]) in (0, 1)
    (rec,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert rec["ties"]["verdict"] == "broken"
