"""The tie audit: evidence, and every counting convention checked against the tool that defines it
(model.parameters(), named_parameters(remove_duplicate=False), torchinfo 1.8 itself)."""
import json
import tracemalloc

import numpy as np
import pytest
from conftest import fixture

from ckptstat import open_checkpoint, summarize
from ckptstat.analysis.diff import diff
from ckptstat.analysis.ties import audit
from ckptstat.census.ties import find_ties, identical_tensors

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")
torchinfo = pytest.importorskip("torchinfo")

SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37, vocab_size=99)
MODELS = {
    "BertForMaskedLM": lambda: T.BertForMaskedLM(T.BertConfig(**SMALL)),
    "BertForPreTraining": lambda: T.BertForPreTraining(T.BertConfig(**SMALL)),
    "BertModel": lambda: T.BertModel(T.BertConfig(**SMALL)),
    "RobertaForMaskedLM": lambda: T.RobertaForMaskedLM(T.RobertaConfig(**SMALL)),
    "AlbertForMaskedLM": lambda: T.AlbertForMaskedLM(T.AlbertConfig(embedding_size=16, **SMALL)),
    "DistilBertForMaskedLM": lambda: T.DistilBertForMaskedLM(T.DistilBertConfig(
        dim=32, n_layers=2, n_heads=4, hidden_dim=37, vocab_size=99)),
    "ElectraForMaskedLM": lambda: T.ElectraForMaskedLM(T.ElectraConfig(embedding_size=16, **SMALL)),
    "GPT2LMHeadModel": lambda: T.GPT2LMHeadModel(T.GPT2Config(n_embd=32, n_layer=2, n_head=4, vocab_size=99)),
    "LlamaForCausalLM-tied": lambda: T.LlamaForCausalLM(T.LlamaConfig(tie_word_embeddings=True, **SMALL)),
    "LlamaForCausalLM": lambda: T.LlamaForCausalLM(T.LlamaConfig(**SMALL)),
    "AlbertForPreTraining": lambda: T.AlbertForPreTraining(T.AlbertConfig(embedding_size=16, **SMALL)),
    "DistilBertForSequenceClassification": lambda: T.DistilBertForSequenceClassification(T.DistilBertConfig(
        dim=32, n_layers=2, n_heads=4, hidden_dim=37, vocab_size=99)),
    "MixtralForCausalLM": lambda: T.MixtralForCausalLM(T.MixtralConfig(num_key_value_heads=2, num_local_experts=4, **SMALL)),
    "T5ForConditionalGeneration": lambda: T.T5ForConditionalGeneration(T.T5Config(
        d_model=32, d_kv=8, d_ff=37, num_layers=2, num_heads=4, vocab_size=99)),
}


def rows(report: dict) -> dict:
    """convention -> params; the model.parameters() row is keyed without the class it is labelled with."""
    return {r["convention"].split(" of ")[0]: r["params"] for r in report["counting"]["rows"]}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_conventions_match_the_tools_on_save_pretrained_files(tmp_path, name):
    torch.manual_seed(0)
    model = MODELS[name]()
    model.save_pretrained(tmp_path)  # safetensors: tied names are dropped from the file
    r = audit(open_checkpoint(tmp_path))
    got = rows(r)
    assert got["unique parameters"] == sum(p.numel() for p in model.parameters())
    assert got["every name counted"] == sum(p.numel() for _, p in model.named_parameters(remove_duplicate=False))
    assert got["torchinfo 1.8 summary"] == torchinfo.summary(model, verbose=0).total_params
    # Every difference from the unique count is itemised, down to the element.
    for row in r["counting"]["rows"]:
        assert row["params"] - got["unique parameters"] == sum(d["elements"] for d in row["differences"]), row


def test_gpt2_head_absent_is_tied_per_config(expected_st):
    r = audit(open_checkpoint(fixture("gpt2-tiny")))
    (tie,) = r["ties"]
    assert (tie["alias"], tie["target"]) == ("lm_head.weight", "transformer.wte.weight")
    assert tie["evidence"] == "config tie_word_embeddings" and tie["status"] == "absent from file"
    assert rows(r)["unique parameters"] == expected_st["gpt2-tiny"]["parameters"]
    assert rows(r)["every name counted"] == expected_st["gpt2-tiny"]["named_parameters_all"]
    verdict = summarize(fixture("gpt2-tiny"))["ties"]
    assert verdict["count"] == 1 and verdict["pairs"][0]["alias"] == "lm_head.weight"
    assert "config tie_word_embeddings" in verdict["text"]


def test_bert_mlm_head_absent_is_tied(expected_st):
    r = audit(open_checkpoint(fixture("bert-tiny-mlm")))
    ties = {t["alias"]: t for t in r["ties"]}
    assert ties["cls.predictions.decoder.weight"]["target"] == "bert.embeddings.word_embeddings.weight"
    assert ties["cls.predictions.decoder.bias"]["evidence"] == "config tie_word_embeddings"   # transformers 5: with the switch
    assert rows(r)["unique parameters"] == expected_st["bert-tiny-mlm"]["parameters"]
    assert rows(r)["every name counted"] == expected_st["bert-tiny-mlm"]["named_parameters_all"]


def test_save_model_metadata_records_the_dropped_name(expected_st):
    ckpt = open_checkpoint(fixture("gpt2-tiny-save-model"))
    (tie,) = find_ties(ckpt)
    assert ckpt.metadata[tie.alias] == tie.target and tie.alias not in ckpt.tensors
    assert tie.evidence == "safetensors metadata" and tie.status == "absent from file"
    r = audit(ckpt)
    assert rows(r)["unique parameters"] == expected_st["gpt2-tiny-save-model"]["parameters"]
    assert rows(r)["every name counted"] == expected_st["gpt2-tiny-save-model"]["named_parameters_all"]


def test_untied_model_has_no_ties():
    assert find_ties(open_checkpoint(fixture("llama-tiny-sharded"))) == []
    assert summarize(fixture("llama-tiny-sharded"))["ties"]["count"] == 0


def test_deep_finds_copies_in_bounded_memory(tmp_path):
    from safetensors.numpy import save_file

    rng = np.random.default_rng(0)
    big = rng.standard_normal((1024, 2048)).astype(np.float32)  # 8 MiB, 8x the chunk below
    path = tmp_path / "twice.safetensors"
    save_file({"a.weight": big, "b.weight": big.copy(), "c.weight": rng.standard_normal((1024, 2048)).astype(np.float32),
               "z1.bias": np.zeros(64, np.float32), "z2.bias": np.zeros(64, np.float32)}, str(path))
    ckpt = open_checkpoint(path)
    assert find_ties(ckpt) == []
    tracemalloc.start()
    pairs = identical_tensors(ckpt, chunk_bytes=1 << 20)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert pairs == [("a.weight", "b.weight")]  # the all-zero biases are equal, but not evidence
    assert peak < 4 << 20, peak  # a few chunks, never the 8 MiB tensor
    r = audit(ckpt, deep=True)
    (tie,) = r["ties"]
    assert tie["evidence"] == "identical contents" and tie["status"] == "stored twice"
    assert rows(r)["unique parameters"] == rows(r)["stored parameter elements"] - big.size


def test_ties_cli_json(cli):
    rc, out, _ = cli("ties", fixture("bert-tiny-mlm"), "--json")
    r = json.loads(out)
    assert rc == 0 and r["schema"] == "ckptstat.ties/1"
    assert [row["convention"] for row in r["counting"]["rows"]] == [
        "unique parameters", "model.parameters() of BertForMaskedLM", "every name counted", "torchinfo 1.8 summary",
        "stored parameter elements", "file tensor list"]
    rc, out, _ = cli("ties", fixture("bert-tiny-mlm"))
    assert rc == 0 and "torchinfo" in out and "cls.predictions.decoder.weight" in out


def test_oracle_worked_example_bert_base_mlm(tmp_path):
    """docs/oracles.md: bert-base BertForMaskedLM, from a real save (not committed)."""
    torch.manual_seed(0)
    T.BertForMaskedLM(T.BertConfig()).save_pretrained(tmp_path)
    got = rows(audit(open_checkpoint(tmp_path)))
    assert got["unique parameters"] == 109_514_298
    assert got["every name counted"] == 132_985_716
    assert got["torchinfo 1.8 summary"] == 132_955_194


def test_oracle_worked_example_from_torch_save(tmp_path):
    """docs/oracles.md's worked example from real torch.save files at bert-base size (not committed)."""
    torch.manual_seed(0)
    torch.save(T.BertForMaskedLM(T.BertConfig()).state_dict(), tmp_path / "mlm.bin")
    torch.save(T.BertModel(T.BertConfig()).state_dict(), tmp_path / "base.bin")
    mlm = audit(open_checkpoint(tmp_path / "mlm.bin"))
    got = rows(mlm)
    assert got["unique parameters"] == 109_514_298
    assert got["every name counted"] == 132_985_716 == 109_514_298 + 23_440_896 + 30_522
    assert got["torchinfo 1.8 summary"] == 132_955_194 == 109_514_298 + 23_440_896
    ties = {t["alias"]: t for t in mlm["ties"]}
    assert ties["cls.predictions.decoder.weight"]["evidence"] == "shared storage"
    assert ties["cls.predictions.decoder.weight"]["target"] == "bert.embeddings.word_embeddings.weight"
    assert ties["cls.predictions.decoder.bias"]["target"] == "cls.predictions.bias"
    # BertModel vs BertForMaskedLM, itemised.
    d = diff(open_checkpoint(tmp_path / "base.bin"), open_checkpoint(tmp_path / "mlm.bin"))
    assert (d["a_params"], d["b_params"]) == (109_482_240, 109_514_298)
    deltas = {r["module"]: r["delta"] for r in d["rows"]}
    assert deltas == {"pooler.dense": -590_592, "cls.predictions.transform.dense": 590_592,
                      "cls.predictions.transform.LayerNorm": 1_536, "cls.predictions": 30_522,
                      "cls.predictions.decoder": 0}
    assert sum(deltas.values()) == d["delta"] == 32_058


@pytest.mark.parametrize("name", sorted(MODELS))
def test_config_cross_check_on_faithful_files(tmp_path, name):
    model = MODELS[name]()
    model.save_pretrained(tmp_path)
    r = audit(open_checkpoint(tmp_path))
    cc = r["cross_check"]
    assert cc["available"], cc   # every model here has a tensor template (ELECTRA's generator head: families/bert.py)
    assert cc["unexpected"] == [] and cc["shape_mismatches"] == []
    assert all(m["why"].startswith("tied to") for m in cc["missing"]), cc["missing"]
    assert rows(r)["model.parameters()"] == sum(p.numel() for p in model.parameters())


def test_config_cross_check_finds_gaps(tmp_path, expected_st):
    from safetensors.numpy import save_file

    ckpt = open_checkpoint(fixture("bert-tiny"))
    tensors = {n: ckpt.read(n) for n in ckpt.tensors if not n.startswith("pooler.")}  # the pooler dropped
    tensors["encoder.layer.0.attention.self.query.lora_A.weight"] = np.zeros((4, 32), np.float32)  # an adapter
    tensors["embeddings.word_embeddings.weight"] = np.zeros((98, 32), np.float32)  # one row short
    save_file(tensors, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_bytes(open(fixture("bert-tiny", "config.json"), "rb").read())
    r = audit(open_checkpoint(tmp_path))
    cc = r["cross_check"]
    assert {m["name"] for m in cc["missing"]} == {"pooler.dense.weight", "pooler.dense.bias"}
    assert all(m["why"] == "not in the file" for m in cc["missing"])
    assert [u["name"] for u in cc["unexpected"]] == ["encoder.layer.0.attention.self.query.lora_A.weight"]
    assert cc["shape_mismatches"] == [{"name": "embeddings.word_embeddings.weight", "file": [98, 32], "config": [99, 32]}]
    # model.parameters() of the config's BertModel: what the file lacks added, the adapter taken off.
    assert rows(r)["model.parameters()"] == expected_st["bert-tiny"]["parameters"]


def test_diff_cli(cli, expected_st):
    rc, out, _ = cli("diff", fixture("bert-tiny"), fixture("bert-tiny-mlm"), "--json")   # they differ: 1, as diff(1)
    d = json.loads(out)
    assert rc == 1 and not d["same"] and d["schema"] == "ckptstat.diff/4"
    assert d["delta"] == expected_st["bert-tiny-mlm"]["parameters"] - expected_st["bert-tiny"]["parameters"]


def _torch_save_without_architectures(tmp_path, model):
    """A state_dict written by torch.save beside a config.json that names no architectures class."""
    torch.save(model.state_dict(), tmp_path / "pytorch_model.bin")
    cfg = model.config.to_dict()
    cfg.pop("architectures", None)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    return open_checkpoint(tmp_path)


def test_model_parameters_row_follows_the_census_head_regression(tmp_path):
    """Issue 15: BertForMaskedLM by torch.save, no `architectures`: the row built BertModel and took the
    aliased decoder off twice (86,010,822 for 109,514,298 at bert-base size). Now the census's head
    (the MLM head, from the names) is the model of the row, and an alias is never 'unexpected'."""
    torch.manual_seed(0)
    model = T.BertForMaskedLM(T.BertConfig(**SMALL))
    r = audit(_torch_save_without_architectures(tmp_path, model))
    want = sum(p.numel() for p in model.parameters())
    assert rows(r)["model.parameters()"] == rows(r)["unique parameters"] == want
    row = next(x for x in r["counting"]["rows"] if x["convention"].startswith("model.parameters()"))
    assert row["model"] == "bert 'mlm' head" and row["convention"] == "model.parameters() of bert 'mlm' head"
    assert r["cross_check"]["head"] == "mlm" and r["cross_check"]["unexpected"] == []
    # the summary's analytic model is the same one
    s = summarize(open_checkpoint(tmp_path))
    assert s["analytic"]["predicted_params"] == want and s["analytic"]["agree"]


def test_model_parameters_row_is_labelled_with_its_class(tmp_path):
    torch.manual_seed(0)
    model = T.BertForPreTraining(T.BertConfig(**SMALL))
    model.save_pretrained(tmp_path)
    r = audit(open_checkpoint(tmp_path))
    assert r["counting"]["rows"][1]["convention"] == "model.parameters() of BertForPreTraining"
    assert r["rules"] == {"family": "bert", "model_type": "bert", "head": "pretraining", "model": "BertForPreTraining",
                          "head_source": "config.json architectures", "available": True}


def _unregistered_model():
    """A tied LM of a model type ckptstat has no family module for (PEGASUS-X ties lm_head and the encoder's and
    decoder's embed_tokens to model.shared; CTRL was one until families/ctrl.py, XLNet until families/xlnet.py,
    Funnel until families/funnel.py, LED until families/led.py)."""
    from ckptstat.families import by_model_type

    assert by_model_type("pegasus_x") is None
    torch.manual_seed(0)
    return T.PegasusXForConditionalGeneration(T.PegasusXConfig(
        d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2, decoder_attention_heads=2,
        encoder_ffn_dim=24, decoder_ffn_dim=24, vocab_size=97, num_global_tokens=2, block_size=4,
        max_position_embeddings=64))


def _groups(ties: list[dict]) -> set[frozenset[str]]:
    """The tied groups the (alias, target) pairs join (PEGASUS-X's four names of one weight: three pairs)."""
    groups: list[set[str]] = []
    for t in ties:
        pair = {t["alias"], t["target"]}
        joined = [g for g in groups if g & pair]
        groups = [g for g in groups if not g & pair] + [pair.union(*joined)]
    return {frozenset(g) for g in groups}


def test_unregistered_family_reports_file_and_class_evidence(tmp_path):
    """A model_type no family module covers: no rule of another family is borrowed (issue 15: Phi got
    RoBERTa's `lm_head.decoder.bias`); ties come from the file (torch.save: shared storage) and from the ties
    of the class config.json names (save_pretrained dropped the copy; families/tie_table.py), and the output
    says so."""
    model = _unregistered_model()
    model.save_pretrained(tmp_path / "hf")
    torch.save(model.state_dict(), tmp_path / "sd.bin")
    by_storage: dict[int, set[str]] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        by_storage.setdefault(p.data_ptr(), set()).add(name)
    want = {frozenset(g) for g in by_storage.values() if len(g) > 1}
    assert want   # PEGASUS-X ties its LM head
    r = audit(open_checkpoint(tmp_path / "hf"))
    assert r["rules"]["available"] is False and "no family rules" in r["rules"]["note"]
    assert _groups(r["ties"]) == want
    # (PEGASUS-X's shared embeddings: the structural encoder-decoder rule, a family's rule it is not)
    assert all(t["evidence"] in ("config.json architectures PegasusXForConditionalGeneration", "structural")
               for t in r["ties"])
    sd = audit(open_checkpoint(tmp_path / "sd.bin"))
    assert _groups(sd["ties"]) == want
    assert all(t["evidence"] == "shared storage" for t in sd["ties"])


def test_ties_cli_says_when_no_family_rules(cli, tmp_path):
    _unregistered_model().save_pretrained(tmp_path)
    rc, out, _ = cli("ties", str(tmp_path))
    assert rc == 0 and "no family rules" in out


def test_a_parameter_over_a_buffers_storage_counts_itself(tmp_path):
    """torch.save of a module whose parameter views a buffer's storage (the buffer saved first): the
    parameter is no tie of a parameter, so it counts once, as parameters() does (ties crashed here)."""
    torch = pytest.importorskip("torch")

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bn = torch.nn.Module()
            self.bn.register_buffer("running_mean", torch.zeros(4))
            self.z = torch.nn.Module()
            self.z.weight = torch.nn.Parameter(self.bn.running_mean)   # the same storage

    m = M()
    torch.save(m.state_dict(), tmp_path / "m.pt")
    assert list(m.state_dict()) == ["bn.running_mean", "z.weight"]
    audit(open_checkpoint(tmp_path / "m.pt"))
    assert summarize(open_checkpoint(tmp_path / "m.pt"))["parameters"]["unique"] == sum(p.numel() for p in m.parameters())


@pytest.mark.parametrize("name", ["LlamaForCausalLM-tied", "T5ForConditionalGeneration"])
def test_parameters_row_of_a_shard_without_the_tied_pair(name, tmp_path):
    """Was: a shard holding neither name of a tie (the embeddings in another shard, the head dropped as
    tied) made model.parameters() count the head apart (+V x h), and the config check list it missing.
    Oracle: the real model's parameters() and the files save_pretrained wrote."""
    model = MODELS[name]()
    model.save_pretrained(tmp_path, max_shard_size="8KB")
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())["weight_map"]
    embed = model.get_input_embeddings().weight
    embed_name = next(n for n, p in model.named_parameters() if p is embed)
    shard = next(f for f in sorted(set(index.values())) if f != index[embed_name])
    r = audit(open_checkpoint(str(tmp_path / shard)))
    row = r["counting"]["rows"][1]
    assert row["convention"].startswith("model.parameters()")
    assert row["params"] == sum(p.numel() for p in model.parameters())
    held = {n for n, f in index.items() if f == shard}
    not_in_file = {m["name"] for m in r["cross_check"]["missing"] if m["why"] == "not in the file"}
    assert not_in_file == set(index) - held
