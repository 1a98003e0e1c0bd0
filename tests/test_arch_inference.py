"""The analytic layer on checkpoints without a usable config: TF names (google-research TF1 BERT, HF
TF tf_model.h5), safetensors metadata-dropped names, heads inferred from tensor names, sequence
lengths beyond the learned positions, and the summary/human output around them."""
from __future__ import annotations

import json
import re
import shutil

import numpy as np
import pytest
from conftest import fixture

from ckptstat import open_checkpoint, summarize
from ckptstat.census.model import from_checkpoint, load
from ckptstat.errors import UsageError
from ckptstat.families.framework.spec import canonical_name, check_seq, from_config

ST = fixture("bert-tiny-pretraining", "model.safetensors")   # the same BertForPreTraining as tf1-bert
with open(fixture("bert-tiny-pretraining", "expected.json")) as _f:
    TORCH_PARAMS = json.load(_f)["parameters"]   # sum(p.numel() for p in model.parameters())
SHAPE_KEYS = ("layers", "hidden", "intermediate", "vocab", "positions", "type_vocab", "embedding_size", "pooler", "head")


def run_json(cli, *args) -> dict:
    rc, out, err = cli(*args, "--json")
    assert rc == 0, err
    return json.loads(out)


def assert_same_model(cli, path: str, seqs: str = "16,64") -> dict:
    """flops and memory of `path` equal those of the safetensors BertForPreTraining (same head)."""
    ref, got = (run_json(cli, "flops", p, "--seq", seqs) for p in (ST, path))
    assert {k: got["architecture"][k] for k in SHAPE_KEYS} == {k: ref["architecture"][k] for k in SHAPE_KEYS}
    assert got["architecture"]["head"] == "pretraining"
    assert got["parameters"]["predicted"] == got["parameters"]["checkpoint"] == ref["parameters"]["predicted"] == TORCH_PARAMS
    assert got["parameters"]["agree"] is True
    for a, b in zip(got["runs"], ref["runs"], strict=True):
        assert (a["totals"]["flops"], a["totals"]["macs"]) == (b["totals"]["flops"], b["totals"]["macs"])
    mref, mgot = (run_json(cli, "memory", p, "--seq", "64") for p in (ST, path))
    assert mgot["parameters"]["count"] == mref["parameters"]["count"] == TORCH_PARAMS
    same = lambda r: {(x["group"], x["item"]): x["bytes"] for x in r["lines"]  # noqa: E731
                      if x["group"] in ("weights", "weights what-if", "training state") and x["item"] != "total with activations"}
    assert same(mgot) == same(mref)
    return got


# ------------------------------------------------------------------------------- TF names (issue 1)
@pytest.mark.parametrize("name", ["tf1-bert", "tf1-bert-adam"])
def test_tf1_bert_flops_and_memory_equal_safetensors(cli, name):
    got = assert_same_model(cli, fixture(name))
    assert got["architecture"]["source"] == "tensor names"
    an, ref = summarize(fixture(name))["analytic"], summarize(ST)["analytic"]
    assert "error" not in an and an["flops_per_token"] == ref["flops_per_token"] and an["agree"] is True


def test_tf1_bert_kernels_are_read_out_in():
    """Dense kernels are stored [in, out]: the intermediate width is the kernel's second dimension."""
    ckpt = open_checkpoint(fixture("tf1-bert"))
    assert ckpt["bert/encoder/layer_0/intermediate/dense/kernel"].shape == (32, 37)
    assert from_checkpoint(ckpt).spec.intermediate == 37


HF_TF_TOP = "tf_bert_for_pre_training"


def hf_tf_name(pt: str, shape: tuple[int, ...]) -> tuple[str, bool]:
    """The name TFBertForPreTraining gives a BertForPreTraining tensor (modeling_tf_bert.py), and
    whether the value is transposed (Dense kernels are [in, out])."""
    n = pt.replace(".", "/")
    n = re.sub(r"^cls/predictions/", "mlm___cls/predictions/", n)
    n = re.sub(r"^cls/seq_relationship/", "nsp___cls/seq_relationship/", n)
    n = re.sub(r"/layer/(\d+)/", r"/layer_._\1/", n)      # TFBertEncoder: name=f"layer_._{i}"
    transpose = False
    if re.search(r"(position|token_type)_embeddings/weight$", n):
        n = n[: -len("weight")] + "embeddings"            # add_weight(name="embeddings")
    elif re.search(r"LayerNorm/(weight|bias)$", n):
        n = n[: n.rfind("/")] + ("/gamma" if n.endswith("weight") else "/beta")
    elif n.endswith("/weight") and len(shape) == 2 and "word_embeddings" not in n:
        n, transpose = n[: -len("weight")] + "kernel", True
    return f"{HF_TF_TOP}/{n}:0", transpose


def write_hf_tf_h5(folder) -> None:
    """tf_model.h5 as TF-Keras 2 save_weights lays it out (docs/formats.md): one group per top-level layer
    with weight_names, datasets at group[weight_name]; the MLM decoder is not stored (it is the
    input embedding). Written with h5py from the safetensors weights, transposing Dense kernels."""
    h5py = pytest.importorskip("h5py")
    ckpt = open_checkpoint(ST)
    layers: dict[str, dict[str, np.ndarray]] = {}
    for t in ckpt:
        name, transpose = hf_tf_name(t.name, t.shape)
        value = ckpt.read(t.name)
        layers.setdefault(name.split("/")[1], {})[name] = value.T if transpose else value
    with h5py.File(folder / "tf_model.h5", "w") as f:
        f.attrs["layer_names"] = np.array([k.encode() for k in layers])
        f.attrs["backend"], f.attrs["keras_version"] = b"tensorflow", b"2.15.0"
        for layer, weights in layers.items():
            g = f.create_group(layer)
            g.attrs["weight_names"] = np.array([w.encode() for w in weights])
            for w, value in weights.items():
                g.create_dataset(w, data=np.ascontiguousarray(value))


def test_hf_tf_names_are_what_transformers_converts():
    """canonical_name agrees with transformers 4's own TF -> PyTorch name conversion on every tensor
    (fixtures/tf_to_pt_names.json, written by fixtures/make_tf_name_oracle.py: transformers 5 has no TF)."""
    with open(fixture("tf_to_pt_names.json")) as f:
        oracle = json.load(f)["bert_pretraining"]
    for t in open_checkpoint(ST):
        name, _ = hf_tf_name(t.name, t.shape)
        assert oracle[name] == t.name
        assert canonical_name(name) == t.name


def test_hf_tf_h5_flops_and_memory_equal_safetensors(cli, tmp_path):
    write_hf_tf_h5(tmp_path)
    got = assert_same_model(cli, str(tmp_path))
    assert got["architecture"]["source"] == "tensor names"
    shutil.copy(fixture("bert-tiny-pretraining", "config.json"), tmp_path / "config.json")
    got = assert_same_model(cli, str(tmp_path))   # with the config: 4 heads, the weights still agree
    assert got["architecture"]["source"] == "config.json" and got["architecture"]["heads"] == 4


# ------------------------------------------------------------------ metadata-dropped names (issue 2)
def test_save_model_dropped_name_is_resolved(cli):
    path = fixture("gpt2-tiny-save-model")
    with open(fixture("expected_safetensors.json")) as f:
        params = json.load(f)["gpt2-tiny-save-model"]["parameters"]
    assert "transformer.wte.weight" not in open_checkpoint(path).tensors
    r = run_json(cli, "flops", path, "--seq", "8")
    ref = run_json(cli, "flops", fixture("gpt2-tiny"), "--seq", "8")   # same config, save_pretrained
    assert r["architecture"]["head"] == "lm" and r["architecture"]["tied_embeddings"] is True
    assert r["parameters"]["predicted"] == r["parameters"]["checkpoint"] == params == ref["parameters"]["predicted"]
    assert r["runs"][0]["totals"]["flops"] == ref["runs"][0]["totals"]["flops"]
    assert run_json(cli, "memory", path, "--seq", "8")["parameters"]["agree"] is True
    assert "error" not in summarize(path)["analytic"]


# --------------------------------------------------------- head from tensors, config lacks it (issue 3)
def test_config_without_architectures_head_from_tensors(cli):
    path = fixture("torch", "bert-mlm")   # BertForMaskedLM state dict; its config has no architectures
    assert "architectures" not in json.load(open(fixture("torch", "bert-mlm", "config.json")))
    r = run_json(cli, "flops", path, "--seq", "8")
    with open(fixture("expected_torch.json")) as f:
        params = json.load(f)["bert-mlm/pytorch_model.bin"]["parameters"]
    assert r["architecture"]["head"] == "mlm" and r["architecture"]["pooler"] is False
    assert r["parameters"]["predicted"] == r["parameters"]["checkpoint"] == params
    assert any("inferred from the tensor names" in n for n in r["notes"])
    assert not any("assumed the 'base' head" in n for n in r["notes"])


@pytest.mark.parametrize("cls_name, cfg_name, kwargs", [
    ("BertForMaskedLM", "BertConfig", {}),
    ("BertForSequenceClassification", "BertConfig", {"num_labels": 3}),
    ("BertForTokenClassification", "BertConfig", {"num_labels": 5}),
    ("BertForQuestionAnswering", "BertConfig", {}),
    ("RobertaForSequenceClassification", "RobertaConfig", {"num_labels": 3}),
    ("RobertaForMaskedLM", "RobertaConfig", {}),
    ("DistilBertForSequenceClassification", "DistilBertConfig", {}),
    ("GPT2Model", "GPT2Config", {}),
])
def test_head_inferred_matches_torch(tmp_path, cls_name, cfg_name, kwargs):
    """save_pretrained, then config.json rewritten without `architectures`: the prediction equals the
    checkpoint's count and torch's sum(p.numel())."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    sizes = {"BertConfig": dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37),
             "RobertaConfig": dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37),
             "DistilBertConfig": dict(dim=32, n_layers=2, n_heads=4, hidden_dim=37),
             "GPT2Config": dict(n_embd=24, n_layer=2, n_head=2, n_positions=32)}[cfg_name]
    torch.manual_seed(0)
    cfg = getattr(transformers, cfg_name)(vocab_size=99, max_position_embeddings=64, **sizes, **kwargs)
    model = getattr(transformers, cls_name)(cfg)
    model.save_pretrained(tmp_path)
    data = json.loads((tmp_path / "config.json").read_text())
    del data["architectures"]
    (tmp_path / "config.json").write_text(json.dumps(data))
    m = load(tmp_path)
    assert m.spec.architecture is None
    assert m.predicted["total"] == m.checkpoint_params == sum(p.numel() for p in model.parameters()), m.notes
    assert any("inferred from the tensor names" in n for n in m.notes)


# ------------------------------------------------------------------ seq vs learned positions (issue 4)
def test_seq_beyond_learned_positions_is_a_usage_error(cli):
    for args in (["flops", fixture("bert-tiny"), "--seq", "128"], ["flops", fixture("bert-tiny"), "--seq", "16,65"],
                 ["memory", fixture("bert-tiny"), "--seq", "128"], ["memory", fixture("tf1-bert"), "--seq", "100"]):
        rc, out, err = cli(*args)
        assert rc == 2 and out == "" and err.count("\n") == 1, (args, err)
        assert "exceeds the model's 64 learned positions" in err
    assert "--seq 128 exceeds" in cli("flops", fixture("bert-tiny"), "-s", "128")[2]
    # With no --seq, commands use 128 or, when the table is smaller, all of it.
    assert json.loads(cli("flops", fixture("bert-tiny"), "--json")[1])["runs"][0]["seq"] == 64
    assert json.loads(cli("memory", fixture("bert-tiny"), "--json")[1])["seq"] == 64
    assert cli("flops", fixture("bert-tiny"), "--seq", "64")[0] == 0
    assert cli("memory", fixture("gpt2-tiny"), "--seq", "33")[0] == 2   # n_positions 32


def test_check_seq_rules():
    transformers = pytest.importorskip("transformers")
    roberta = from_config(transformers.RobertaConfig(max_position_embeddings=514).to_dict())
    check_seq(roberta, 512)
    with pytest.raises(UsageError, match="--seq 513 exceeds the model's 512 learned positions"):
        check_seq(roberta, 513)   # positions start at padding_idx + 1: two rows are never a token's
    llama = from_config(transformers.LlamaConfig(max_position_embeddings=64).to_dict())
    check_seq(llama, 10_000)      # rotary: no table to run past
    t5 = from_config(transformers.T5Config().to_dict())
    check_seq(t5, 10_000, 10_000)


def test_run_seq_beyond_positions_exits_2(cli):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    rc, out, err = cli("run", fixture("bert-tiny"), "--seq", "128")   # 64 positions
    assert rc == 2 and out == "" and err.count("\n") == 1 and "Traceback" not in err
    assert "--seq 128 exceeds the model's 64 learned positions" in err


# ------------------------------------------------------------------ summary and human output (5, 6)
def test_summary_error_has_no_exception_class_name(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "bert"}))
    shutil.copy(fixture("bert-tiny", "model.safetensors"), tmp_path / "model.safetensors")
    err = summarize(str(tmp_path))["analytic"]["error"]
    assert "config has no hidden_size" in err and "UsageError" not in err


def test_human_flops_prints_model_notes(cli):
    rc, out, _ = cli("flops", fixture("tf1-bert"), "--seq", "8")
    assert rc == 0
    assert "no config: head_dim assumed" in " ".join(out.split())   # rich may wrap the line


def test_a_layout_file_without_attention_widths_is_a_usage_error(cli, tmp_path):
    # LLaMA's names with zero-row key and value projections (no config.json): one line saying why, exit 2, nothing on
    # stdout (the inference divided by the key/value width)
    from safetensors.numpy import save_file
    h, f = 16, 24
    t = {"model.embed_tokens.weight": np.zeros((32, h), np.float32), "model.norm.weight": np.ones(h, np.float32)}
    for i in range(2):
        p = f"model.layers.{i}."
        t.update({p + "self_attn.q_proj.weight": np.zeros((h, h), np.float32),
                  p + "self_attn.k_proj.weight": np.zeros((0, h), np.float32),
                  p + "self_attn.v_proj.weight": np.zeros((0, h), np.float32),
                  p + "self_attn.o_proj.weight": np.zeros((h, h), np.float32),
                  p + "mlp.gate_proj.weight": np.zeros((f, h), np.float32),
                  p + "mlp.up_proj.weight": np.zeros((f, h), np.float32),
                  p + "mlp.down_proj.weight": np.zeros((h, f), np.float32),
                  p + "input_layernorm.weight": np.ones(h, np.float32),
                  p + "post_attention_layernorm.weight": np.ones(h, np.float32)})
    save_file(t, str(tmp_path / "model.safetensors"))
    rc, out, err = cli("flops", str(tmp_path / "model.safetensors"))
    assert rc == 2 and out == "" and err.count("\n") == 1 and "Traceback" not in err, err
    assert "attention widths (16 query, 0 key/value)" in err and "--config" in err
