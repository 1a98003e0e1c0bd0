"""Families on real conversions by llama.cpp's convert_hf_to_gguf.py (fixtures/make_conversions_vocabless.py: the
0.3.36 converter, its set_vocab stubbed), against transformers 5's models: dense Granite (`granite`, GraniteModel, a
LlamaModel), BERT (`bert`, BertModel, whose converter drops the pooler and the MLM / NSP heads on purpose), Mamba
(`mamba`, MambaModel; `mamba2`, Mamba2Model: they store A_log as A = -exp(A_log)), Ernie 4.5 MoE (`ernie4_5_moe`,
whose router bias, an nn.Parameter, llama.cpp names as DeepSeek-V3's buffer), and DeepSeek-V3 (`deepseek2`,
DeepseekV2Model, which splits kv_b_proj per head into attn_k_b and attn_v_b)."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest
from safetensors.numpy import load_file
from test_diff_gguf_layout import rewrite

from ckptstat import open_checkpoint
from ckptstat.analysis.summary import summarize

HERE = os.path.join(os.path.dirname(__file__), "..", "fixtures", "conversions", "vocabless")
GRANITE, GRANITE_GGUF = os.path.join(HERE, "granite"), os.path.join(HERE, "granite.f32.gguf")


def test_granite_conversion_is_the_same_model(cli) -> None:
    rc, out, err = cli("diff", GRANITE, GRANITE_GGUF, "--json")
    r = json.loads(out)
    assert rc == 0 and r["same"] is True and err == "", [t for t in r["tensors"] if t["status"] != "equal"]
    assert "(llama family)" in r["builtin_map"]
    hf = load_file(os.path.join(GRANITE, "model.safetensors"))
    rows = {t["a_name"]: t for t in r["tensors"]}
    assert set(rows) == set(hf) and all(t["status"] == "equal" for t in rows.values())
    # GraniteModel is a LlamaModel: q and k permuted per head (GQA: k by its 2 heads), nothing else
    transformed = {n for n, t in rows.items() if t.get("transform")}
    assert transformed == {f"model.layers.{i}.self_attn.{p}_proj.weight" for i in range(2) for p in "qk"}
    assert "rotary row permutation (k, 2 heads)" in rows["model.layers.0.self_attn.k_proj.weight"]["transform"]


def test_granite_summary_counts_transformers_parameters() -> None:
    import torch
    import transformers

    config = transformers.AutoConfig.from_pretrained(GRANITE)
    with torch.device("meta"):
        model = transformers.GraniteForCausalLM(config)
    r = summarize(open_checkpoint(GRANITE_GGUF))
    assert r["resolved"]["family"] == "llama" and r["resolved"]["model"] == "GraniteForCausalLM"
    assert r["architecture"]["family"] == "llama"
    assert r["parameters"]["unique"] == sum(p.numel() for p in model.parameters())   # tied: the embedding once
    assert r["analytic"]["agree"] is True and r["analytic"]["predicted_params"] == r["parameters"]["unique"]
    # Granite's multipliers are keys, not tensors: read into the config the metadata stands for
    from ckptstat.families import get

    ckpt = open_checkpoint(GRANITE_GGUF)
    cfg = get("llama").gguf_config("granite", ckpt.metadata, ckpt.tensors)
    for key in ("embedding_multiplier", "attention_multiplier", "residual_multiplier", "logits_scaling"):
        assert np.float32(cfg[key]) == np.float32(getattr(config, key)), key   # written as f32


def test_granite_q_stored_unpermuted_is_a_difference(tmp_path, cli) -> None:
    hf = load_file(os.path.join(GRANITE, "model.safetensors"))["model.layers.1.self_attn.q_proj.weight"]
    dst = str(tmp_path / "granite.gguf")
    rewrite(GRANITE_GGUF, dst, {"blk.1.attn_q.weight": hf})
    rc, out, _ = cli("diff", GRANITE, dst, "--json")
    bad = [t for t in json.loads(out)["tensors"] if t["status"] != "equal"]
    assert rc == 1 and [t["b_name"] for t in bad] == ["blk.1.attn_q.weight"]
    assert "rotary row permutation (q, 4 heads)" in bad[0]["untransformed"]


@pytest.mark.parametrize("command", ["flops", "memory"])
def test_granite_metadata_stands_in_for_config(command, cli) -> None:
    rc, out, err = cli(command, GRANITE_GGUF, "--seq", "16", "--json")
    assert rc == 0 and json.loads(out)["parameters"]["agree"] is True, err


def _dropped_by_the_converter(model: str) -> set[str]:
    """The HF tensors the converter left out of its file: those whose gguf-py TensorNameMap name (after the prefix the
    converter strips) the GGUF file does not hold."""
    import gguf

    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.BERT, 2)
    held = {t.name for t in gguf.GGUFReader(os.path.join(HERE, f"{model}.f32.gguf")).tensors}
    hf = load_file(os.path.join(HERE, model, "model.safetensors"))
    return {n for n in hf if names.get_name(n.removeprefix("bert."), try_suffixes=(".weight", ".bias")) not in held}


@pytest.mark.parametrize("model,dropped", [
    ("bert", {"pooler.dense.weight", "pooler.dense.bias"}),
    ("bert-mlm", {"cls.predictions.bias", "cls.predictions.transform.dense.weight", "cls.predictions.transform.dense.bias",
                  "cls.predictions.transform.LayerNorm.weight", "cls.predictions.transform.LayerNorm.bias"}),
])
def test_bert_conversion_drops_by_design(model, dropped, cli) -> None:
    """A faithful conversion exits 0; the tensors BertModel.filter_tensors drops are listed as dropped, nothing else."""
    assert _dropped_by_the_converter(model) == dropped
    rc, out, err = cli("diff", os.path.join(HERE, model), os.path.join(HERE, f"{model}.f32.gguf"), "--json")
    r = json.loads(out)
    assert rc == 0 and r["same"] is True and err == ""
    assert {t["a_name"] for t in r["tensors"] if t["status"] == "dropped"} == dropped
    assert all(t["status"] in ("equal", "dropped", "tied") for t in r["tensors"])
    assert r["counts"]["dropped"] == len(dropped)
    hf = load_file(os.path.join(HERE, model, "model.safetensors"))
    assert r["a_params"] - r["b_params"] == sum(hf[n].size for n in dropped)
    assert r["rows"] and all(row.get("dropped") == -row["delta"] for row in r["rows"] if row["delta"])   # (a tie: 0)
    rc, out, _ = cli("diff", os.path.join(HERE, model), os.path.join(HERE, f"{model}.f32.gguf"))
    assert rc == 0 and f"{len(dropped)} tensor(s) dropped by llama.cpp's converter" in out and "no differences" in out


def test_only_what_the_converter_drops(tmp_path, cli) -> None:
    """Another tensor missing from the GGUF file, or an HF tensor the converter does not drop by name, is a difference."""
    dst = str(tmp_path / "bert.gguf")
    rewrite(os.path.join(HERE, "bert.f32.gguf"), dst, {}, drop=("blk.1.ffn_up.weight",))
    rc, out, _ = cli("diff", os.path.join(HERE, "bert"), dst, "--json")
    r = json.loads(out)
    bad = [(t["a_name"], t["status"]) for t in r["tensors"] if t["status"] not in ("equal", "dropped")]
    assert rc == 1 and bad == [("encoder.layer.1.intermediate.dense.weight", "removed")]
    from safetensors.numpy import save_file

    work = tmp_path / "hf"
    work.mkdir()
    tensors = load_file(os.path.join(HERE, "bert", "model.safetensors"))
    tensors["pooler.dense.weight_scale"] = np.ones(1, dtype=np.float32)   # not a name the converter drops
    save_file(tensors, str(work / "model.safetensors"))
    with open(os.path.join(HERE, "bert", "config.json")) as f:
        (work / "config.json").write_text(f.read())
    rc, out, _ = cli("diff", str(work), os.path.join(HERE, "bert.f32.gguf"), "--json")
    r = json.loads(out)
    assert rc == 1 and [(t["a_name"], t["status"]) for t in r["tensors"] if t["status"] not in ("equal", "dropped")] == [
        ("pooler.dense.weight_scale", "removed")]



A_LOGS = [f"backbone.layers.{i}.mixer.A_log" for i in range(2)]
SSM = ["mamba", "mamba2"]   # MambaModel: A_log [i, N] -> ssm_a [i, N]; Mamba2Model: A_log [h] -> ssm_a [h, 1]


def _ssm_a(path: str) -> dict[str, np.ndarray]:
    import gguf

    return {t.name: np.asarray(t.data) for t in gguf.GGUFReader(path).tensors if t.name.endswith(".ssm_a")}


@pytest.mark.parametrize("model", SSM)
def test_mamba_conversion_is_the_same_model(model, cli) -> None:
    """A = -exp(A_log), as the converter computes it (torch's float32 exp, which numpy's does not match bit for bit),
    is equal after the replay; before, a faithful Mamba or Mamba 2 conversion exited 1 with every A_log 'values
    changed'."""
    import torch

    hf = load_file(os.path.join(HERE, model, "model.safetensors"))
    stored = _ssm_a(os.path.join(HERE, f"{model}.f32.gguf"))
    for i, name in enumerate(A_LOGS):   # the fixture is the converter's arithmetic: torch's -exp, bit for bit
        a = stored[f"blk.{i}.ssm_a"]
        assert np.array_equal(a, (-torch.exp(torch.from_numpy(hf[name]))).numpy().reshape(a.shape))
    rc, out, err = cli("diff", os.path.join(HERE, model), os.path.join(HERE, f"{model}.f32.gguf"), "--json")
    r = json.loads(out)
    assert rc == 0 and r["same"] is True and err == "", [t for t in r["tensors"] if t["status"] != "equal"]
    rows = {t["a_name"]: t for t in r["tensors"]}
    assert set(rows) == set(hf) and all(t["status"] == "equal" for t in rows.values())
    assert {n for n, t in rows.items() if t.get("transform")} == set(A_LOGS)
    assert rows[A_LOGS[0]]["transform"] == "llama.cpp's A = -exp(A_log)"


@pytest.mark.parametrize("model", SSM)
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_mamba_half_source(model, dtype, tmp_path, cli) -> None:
    """A bf16 or f16 model: the converter widens bf16 to float32 before its -exp, and computes a float16 tensor's in
    float16 (torch), storing A as F32 either way."""
    import torch
    from safetensors.torch import load_file as load_torch
    from safetensors.torch import save_file

    work = tmp_path / "hf"
    work.mkdir()
    tensors = {n: t.to(getattr(torch, dtype)) for n, t in load_torch(os.path.join(HERE, model, "model.safetensors")).items()}
    save_file(tensors, str(work / "model.safetensors"))
    with open(os.path.join(HERE, model, "config.json")) as f:
        (work / "config.json").write_text(f.read())
    src = os.path.join(HERE, f"{model}.f32.gguf")
    shapes = {n: a.shape for n, a in _ssm_a(src).items()}

    def a(x: torch.Tensor, shape: tuple[int, ...]) -> np.ndarray:
        return (-torch.exp(x if x.dtype == torch.float16 else x.float())).float().numpy().reshape(shape)
    dst = str(tmp_path / "mamba.gguf")
    rewrite(src, dst, {f"blk.{i}.ssm_a": a(tensors[n], shapes[f"blk.{i}.ssm_a"]) for i, n in enumerate(A_LOGS)})
    rc, out, _ = cli("diff", str(work), dst, "--json")
    r = json.loads(out)
    assert rc == 0, [t for t in r["tensors"] if t["status"] not in ("equal", "converted")]
    assert {t["a_name"] for t in r["tensors"] if t.get("transform")} == set(A_LOGS)


@pytest.mark.parametrize("model", SSM)
def test_mamba_a_wrong_is_a_difference(model, tmp_path, cli) -> None:
    """A_log stored as it is (named: llama.cpp reads A), A's sign lost, or one element of A moved by 8 float32 ulps:
    exit 1 naming that layer's A_log."""
    hf = load_file(os.path.join(HERE, model, "model.safetensors"))
    src = os.path.join(HERE, f"{model}.f32.gguf")
    a = _ssm_a(src)["blk.1.ssm_a"]
    moved = a.copy().reshape(-1)
    moved[5] = np.float32(moved[5] * np.float32(1 + 2.0 ** -20))
    for name, values in (("as-is", hf[A_LOGS[1]].reshape(a.shape)), ("sign", -a), ("moved", moved.reshape(a.shape))):
        dst = str(tmp_path / f"{name}.gguf")
        rewrite(src, dst, {"blk.1.ssm_a": values})
        rc, out, _ = cli("diff", os.path.join(HERE, model), dst, "--json")
        bad = [t for t in json.loads(out)["tensors"] if t["status"] != "equal"]
        assert rc == 1 and [(t["a_name"], t["status"]) for t in bad] == [(A_LOGS[1], "values")], name
        assert ("untransformed" in bad[0]) == (name == "as-is"), name


ERNIE, ERNIE_GGUF = os.path.join(HERE, "ernie4_5_moe"), os.path.join(HERE, "ernie4_5_moe.f32.gguf")


def test_ernie_moe_router_bias_is_a_parameter(cli) -> None:
    """Ernie 4.5 MoE keeps moe_statics.e_score_correction_bias as an nn.Parameter, which the converter writes as
    exp_probs_b.bias, llama.cpp's name for DeepSeek-V3's router buffer: read as a buffer, the GGUF side counted 4
    parameters fewer than the HF side and transformers, and the faithful conversion exited 1 (module
    layers.1.mlp.moe_statics 4 -> -). Oracle: transformers' parameters() of the config's model."""
    import torch
    import transformers

    config = transformers.AutoConfig.from_pretrained(ERNIE)
    with torch.device("meta"):
        model = transformers.Ernie4_5_MoeForCausalLM(config)
    want = sum(p.numel() for p in model.parameters())
    assert any(n.endswith("e_score_correction_bias") for n, _ in model.named_parameters())
    r = summarize(open_checkpoint(ERNIE_GGUF))
    assert r["architecture"]["family"] == "ernie4_5_moe" and r["parameters"]["unique"] == want
    assert r["analytic"]["predicted_params"] == want
    rc, out, err = cli("diff", ERNIE, ERNIE_GGUF, "--json")
    d = json.loads(out)
    assert rc == 0 and d["same"] is True and err == "" and d["a_params"] == d["b_params"] == want
    assert all(t["status"] == "equal" for t in d["tensors"]) and not [row for row in d["rows"] if row["delta"]]


def test_deepseek_router_bias_stays_a_buffer(tmp_path) -> None:
    """DeepSeek-V3's e_score_correction_bias is a buffer (nn.Buffer): its exp_probs_b.bias is still left out of the
    count."""
    import gguf
    import transformers

    config = transformers.DeepseekV3Config(vocab_size=64, hidden_size=32, intermediate_size=64, moe_intermediate_size=16,
                                           num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                                           n_routed_experts=4, num_experts_per_tok=2, n_shared_experts=1,
                                           kv_lora_rank=16, q_lora_rank=16, qk_rope_head_dim=4, qk_nope_head_dim=4,
                                           v_head_dim=8, first_k_dense_replace=1, n_group=1, topk_group=1)
    model = transformers.DeepseekV3ForCausalLM(config)
    assert "model.layers.1.mlp.gate.e_score_correction_bias" in dict(model.named_buffers())
    w = gguf.GGUFWriter(str(tmp_path / "d.gguf"), "deepseek2")
    w.add_block_count(2)
    w.add_tensor("blk.1.exp_probs_b.bias", np.zeros(4, dtype=np.float32))
    w.add_tensor("blk.1.ffn_gate_inp.weight", np.zeros((4, 32), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    r = summarize(open_checkpoint(str(tmp_path / "d.gguf")))
    assert r["parameters"]["unique"] == 128
    assert [(x["role"], x["names"]) for x in r["non_parameters"]] == [("buffer", ["blk.1.exp_probs_b.bias"])]


DEEPSEEK, DEEPSEEK_GGUF = os.path.join(HERE, "deepseek_v3"), os.path.join(HERE, "deepseek_v3.f32.gguf")
KV_B = [f"model.layers.{i}.self_attn.kv_b_proj.weight" for i in range(2)]


def test_deepseek_kv_b_split_is_read_joined(cli) -> None:
    """The converter splits each kv_b_proj per head into attn_k_b (its k_nope rows, transposed) and attn_v_b: read
    joined back, a faithful conversion exits 0, either side first. Before, every kv_b_proj was removed and its halves
    added (exit 1). Oracle: the halves are torch's view / split / transpose of the HF tensor, bit for bit."""
    import gguf
    import torch

    hf = load_file(os.path.join(DEEPSEEK, "model.safetensors"))
    stored = {t.name: np.asarray(t.data) for t in gguf.GGUFReader(DEEPSEEK_GGUF).tensors}
    for i, name in enumerate(KV_B):
        kv = torch.from_numpy(hf[name]).view(4, 4 + 8, 16)
        k, v = torch.split(kv, [4, 8], dim=1)
        assert np.array_equal(stored[f"blk.{i}.attn_k_b.weight"], k.transpose(1, 2).numpy())
        assert np.array_equal(stored[f"blk.{i}.attn_v_b.weight"], v.numpy())
    for a, b, side in ((DEEPSEEK, DEEPSEEK_GGUF, "b_name"), (DEEPSEEK_GGUF, DEEPSEEK, "a_name")):
        rc, out, err = cli("diff", a, b, "--json")
        r = json.loads(out)
        assert rc == 0 and r["same"] is True and err == "", [t for t in r["tensors"] if t["status"] != "equal"]
        assert all(t["status"] == "equal" for t in r["tensors"]) and not r["rows"]
        rows = {t["name"].rpartition("layers.")[2]: t for t in r["tensors"] if t.get("transform")}
        assert sorted(rows) == [f"{i}.self_attn.kv_b_proj.weight" for i in range(2)]
        assert rows["1.self_attn.kv_b_proj.weight"][side] == "blk.1.attn_k_b.weight + blk.1.attn_v_b.weight"


def test_deepseek_kv_b_halves_wrong_are_a_difference(tmp_path, cli) -> None:
    """One element of attn_v_b moved, attn_k_b's heads in another order, or attn_k_b stored untransposed ([heads,
    nope, rank], which no longer rebuilds kv_b_proj): exit 1 naming that layer's kv_b_proj (or its halves)."""
    hf = load_file(os.path.join(DEEPSEEK, "model.safetensors"))
    kv = hf[KV_B[1]].reshape(4, 12, 16)
    k, v = kv[:, :4].transpose(0, 2, 1), kv[:, 4:]
    moved = v.copy()
    moved[2, 3, 5] += np.float32(1e-3)
    for name, values, bad in (("v", {"blk.1.attn_v_b.weight": moved}, [(KV_B[1], "values")]),
                              ("heads", {"blk.1.attn_k_b.weight": np.roll(k, 1, axis=0)}, [(KV_B[1], "values")]),
                              ("untransposed", {"blk.1.attn_k_b.weight": kv[:, :4]},
                               [("blk.1.attn_k_b.weight", "added"), ("blk.1.attn_v_b.weight", "added"),
                                (KV_B[1], "removed")])):
        dst = str(tmp_path / f"{name}.gguf")
        rewrite(DEEPSEEK_GGUF, dst, values)
        rc, out, _ = cli("diff", DEEPSEEK, dst, "--json")
        off = [(t["a_name"] or t["b_name"], t["status"]) for t in json.loads(out)["tensors"] if t["status"] != "equal"]
        assert rc == 1 and sorted(off) == sorted(bad), name


def _rope_tables(path: str) -> dict[str, np.ndarray]:
    import gguf

    return {t.name: np.asarray(t.data) for t in gguf.GGUFReader(path).tensors if t.name.startswith("rope_")}


def test_llama3_rope_freqs_is_generated(cli) -> None:
    """Llama 3.1+'s rope_type llama3: the converter adds rope_freqs.weight, the scaling factor of each rotary frequency
    (1, interpolated, 8). Before, every such conversion exited 1 with rope_freqs.weight 'added'. Oracle: transformers'
    own llama3 rope (ROPE_INIT_FUNCTIONS): the default inverse frequencies over the scaled ones."""
    import torch
    import transformers
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    model = os.path.join(HERE, "llama3")
    config = transformers.AutoConfig.from_pretrained(model)
    scaled, _ = ROPE_INIT_FUNCTIONS["llama3"](config, "cpu")
    default = 1.0 / (config.rope_parameters["rope_theta"] ** (torch.arange(0, 8, 2).float() / 8))
    factors = _rope_tables(os.path.join(HERE, "llama3.f32.gguf"))["rope_freqs.weight"]
    assert np.allclose(factors, (default / scaled).numpy(), rtol=1e-6) and 1 < factors[1] < 8   # the interpolated one
    rc, out, err = cli("diff", model, os.path.join(HERE, "llama3.f32.gguf"), "--json")
    r = json.loads(out)
    assert rc == 0 and r["same"] is True and err == "" and r["counts"]["generated"] == 1
    row = next(t for t in r["tensors"] if t["status"] == "generated")
    assert row["b_name"] == "rope_freqs.weight" and "rope_parameters (llama3)" in row["generated"]
    rc, out, _ = cli("diff", model, os.path.join(HERE, "llama3.f32.gguf"))
    assert rc == 0 and "generated by llama.cpp's converter from config.json" in out
    rc, out, _ = cli("diff", model, os.path.join(HERE, "llama3.f32.gguf"), "--names-only", "--json")   # no value read
    row = next(t for t in json.loads(out)["tensors"] if t["b_name"] == "rope_freqs.weight")
    assert rc == 0 and row["status"] == "generated" and row["generated"].endswith("(values not read)")


def test_phi3_long_rope_factors_are_generated(cli) -> None:
    """Phi-3's longrope: rope_factors_long / _short.weight hold the config's long_factor / short_factor."""
    import transformers

    model = os.path.join(HERE, "phi3-long")
    rope = transformers.AutoConfig.from_pretrained(model).rope_parameters
    tables = _rope_tables(os.path.join(HERE, "phi3-long.f32.gguf"))
    assert tables["rope_factors_long.weight"].tolist() == rope["long_factor"]
    assert tables["rope_factors_short.weight"].tolist() == rope["short_factor"]
    rc, out, _ = cli("diff", model, os.path.join(HERE, "phi3-long.f32.gguf"), "--json")
    r = json.loads(out)
    assert rc == 0 and {t["b_name"] for t in r["tensors"] if t["status"] == "generated"} == set(tables)


def test_rope_tables_not_the_configs_are_added(tmp_path, cli) -> None:
    """A rope_freqs whose values are not those the HF config gives, or one beside a config without llama3 scaling (the
    plain Llama fixture), stays 'added' (exit 1); so does a Phi-3 long factor off by one element."""
    import gguf

    src = os.path.join(HERE, "llama3.f32.gguf")
    dst = str(tmp_path / "ones.gguf")
    rewrite(src, dst, {"rope_freqs.weight": np.ones(4, dtype=np.float32)})
    for model, path in ((os.path.join(HERE, "llama3"), dst), (os.path.join(HERE, "..", "llama"), None)):
        if path is None:   # the llama3 file's rope_freqs beside an HF Llama without rope scaling
            path = str(tmp_path / "plain.gguf")
            w = gguf.GGUFWriter(path, "llama")
            w.add_tensor("rope_freqs.weight", _rope_tables(src)["rope_freqs.weight"])
            w.write_header_to_file()
            w.write_kv_data_to_file()
            w.write_tensors_to_file()
            w.close()
        rc, out, _ = cli("diff", model, path, "--json")
        rows = [t for t in json.loads(out)["tensors"] if t["b_name"] == "rope_freqs.weight"]
        assert rc == 1 and [t["status"] for t in rows] == ["added"], model
    long = _rope_tables(os.path.join(HERE, "phi3-long.f32.gguf"))["rope_factors_long.weight"].copy()
    long[2] += np.float32(0.5)
    dst = str(tmp_path / "phi3.gguf")
    rewrite(os.path.join(HERE, "phi3-long.f32.gguf"), dst, {"rope_factors_long.weight": long})
    rc, out, _ = cli("diff", os.path.join(HERE, "phi3-long"), dst, "--json")
    off = [(t["b_name"], t["status"]) for t in json.loads(out)["tensors"] if t["status"] not in ("equal", "generated")]
    assert rc == 1 and off == [("rope_factors_long.weight", "added")]


GEMMA3_CUT, GEMMA3_CUT_GGUF = os.path.join(HERE, "gemma3-cut"), os.path.join(HERE, "gemma3-cut.f32.gguf")


def test_gemma3_vocabulary_cut_is_replayed(cli) -> None:
    """Gemma 3's converter cuts embed_tokens to its tokenizer's tokens (60 of 64 rows here, 262,144 of 262,208 in the
    releases): compared over the rows kept, the rows cut left out of the count (the module row's `dropped`). Before,
    every Gemma 3 conversion whose config has more rows than its tokenizer exited 1 ('shape'). Oracle: the file's
    token_embd is the HF tensor's first 60 rows (gguf-py's reader), its token list 60 long."""
    import gguf

    hf = load_file(os.path.join(GEMMA3_CUT, "model.safetensors"))["model.embed_tokens.weight"]
    reader = gguf.GGUFReader(GEMMA3_CUT_GGUF)
    embd = next(np.asarray(t.data) for t in reader.tensors if t.name == "token_embd.weight")
    assert len(reader.fields["tokenizer.ggml.tokens"].data) == 60 and np.array_equal(embd, hf[:60])
    rc, out, err = cli("diff", GEMMA3_CUT, GEMMA3_CUT_GGUF, "--json")
    r = json.loads(out)
    assert rc == 0 and r["same"] is True and err == "", [t for t in r["tensors"] if t["status"] != "equal"]
    row = next(t for t in r["tensors"] if t["a_name"] == "model.embed_tokens.weight")
    assert row["status"] == "equal" and row["cut"] == 4 * 32 and "vocabulary cut" in row["transform"]
    assert r["a_params"] - r["b_params"] == 4 * 32
    assert r["rows"] == [{"module": "embed_tokens", "a": 64 * 32, "b": 60 * 32, "delta": -128, "tied": [], "dropped": 128}]
    rc, out, _ = cli("diff", GEMMA3_CUT, GEMMA3_CUT_GGUF, "--names-only")   # no value read: the cut still explains it
    assert rc == 0 and "no differences" in out


def test_gemma3_cut_rows_wrong_are_a_difference(tmp_path, cli) -> None:
    """A kept row changed is 'values' (exit 1); a file whose token list does not say 60 tokens is not cut: 'shape'."""
    hf = load_file(os.path.join(GEMMA3_CUT, "model.safetensors"))["model.embed_tokens.weight"]
    moved = hf[:60].copy()
    moved[10, 3] += np.float32(0.01)
    dst = str(tmp_path / "moved.gguf")
    rewrite(GEMMA3_CUT_GGUF, dst, {"token_embd.weight": moved})
    rc, out, _ = cli("diff", GEMMA3_CUT, dst, "--json")
    off = [(t["a_name"], t["status"]) for t in json.loads(out)["tensors"] if t["status"] != "equal"]
    assert rc == 1 and off == [("model.embed_tokens.weight", "values")]
    dst = str(tmp_path / "fewer.gguf")
    rewrite(GEMMA3_CUT_GGUF, dst, {"token_embd.weight": hf[:56]})   # 56 rows, 60 tokens
    rc, out, _ = cli("diff", GEMMA3_CUT, dst, "--json")
    off = [(t["a_name"], t["status"]) for t in json.loads(out)["tensors"] if t["status"] != "equal"]
    assert rc == 1 and off == [("model.embed_tokens.weight", "shape")]


# the SSM hybrids: (model, its A_log, its GGUF ssm_a, the HF tensors the converter transforms, a q it permutes)
HYBRIDS = [("jamba", "model.layers.0.mamba.A_log", "blk.0.ssm_a", {"model.layers.0.mamba.A_log"}, None),
           ("nemotron_h", "backbone.layers.0.mixer.A_log", "blk.0.ssm_a",
            {"backbone.layers.0.mixer.A_log", "backbone.layers.1.mixer.q_proj.weight",
             "backbone.layers.1.mixer.k_proj.weight"}, ("blk.1.attn_q.weight", "backbone.layers.1.mixer.q_proj.weight"))]


@pytest.mark.parametrize("model,a_log,ssm_a,transformed,q", HYBRIDS, ids=[h[0] for h in HYBRIDS])
def test_ssm_hybrid_conversion_is_the_same_model(model, a_log, ssm_a, transformed, q, tmp_path, cli) -> None:
    """Jamba (JambaModel) and Nemotron-H (NemotronHModel, a GraniteHybridModel) store A = -exp(A_log); Nemotron-H's
    converter also permutes its attention layers' q/k rows per head (LlamaModel's). Before, a faithful conversion
    exited 1 on A_log (and Nemotron-H's q, k). Oracle: torch's -exp of the HF A_log is the file's ssm_a bit for bit.
    A_log stored as it is, or Nemotron-H's q unpermuted, exit 1 naming it (stored without the transform)."""
    import torch

    hf = load_file(os.path.join(HERE, model, "model.safetensors"))
    path = os.path.join(HERE, f"{model}.f32.gguf")
    stored = _ssm_a(path)[ssm_a]
    assert np.array_equal(stored, (-torch.exp(torch.from_numpy(hf[a_log]))).numpy().reshape(stored.shape))
    rc, out, err = cli("diff", os.path.join(HERE, model), path, "--json")
    r = json.loads(out)
    assert rc == 0 and r["same"] is True and err == "", [t for t in r["tensors"] if t["status"] != "equal"]
    assert {t["a_name"] for t in r["tensors"] if t.get("transform")} == transformed
    for gguf_name, hf_name in [(ssm_a, a_log)] + ([q] if q else []):
        dst = str(tmp_path / "broken.gguf")
        rewrite(path, dst, {gguf_name: hf[hf_name].reshape(_ssm_a(path)[ssm_a].shape if gguf_name == ssm_a
                                                          else hf[hf_name].shape)})
        rc, out, _ = cli("diff", os.path.join(HERE, model), dst, "--json")
        bad = [t for t in json.loads(out)["tensors"] if t["status"] != "equal"]
        assert rc == 1 and [t["a_name"] for t in bad] == [hf_name] and "untransformed" in bad[0], gguf_name


GEMMA3_VLM = os.path.join(HERE, "gemma3-vlm")
GEMMA3_VLM_GGUF = os.path.join(HERE, "gemma3-vlm.f32.gguf")


def test_a_vision_language_models_conversion_is_its_language_model(cli) -> None:
    """Gemma3ForConditionalGeneration converted by llama.cpp's converter (fixtures/make_conversions_vocabless.py
    gemma3-vlm): the file holds the language model, the vision tower and projector going to the separate mmproj file.
    The diff said 27 language-model tensors removed and 27 added (the wrapper's language_model.model.*, as
    save_pretrained writes Gemma 3's, against the text model's names) and the 50 tower tensors removed, exit 1; now
    the language model is compared, the towers are dropped (its mmproj file's), exit 0. Oracle: the file's tensors
    (gguf-py) are the language model's."""
    from gguf import GGUFReader

    held = {t.name for t in GGUFReader(GEMMA3_VLM_GGUF).tensors}
    rc, out, _ = cli("diff", GEMMA3_VLM, GEMMA3_VLM_GGUF, "--json")
    r = json.loads(out)
    rows = r["tensors"]
    hf = load_file(os.path.join(GEMMA3_VLM, "model.safetensors"))
    towers = {n for n in hf if n.startswith(("vision_tower.", "multi_modal_projector."))}
    assert towers and len(towers) + len(held) == len(hf)
    assert rc == 0 and r["same"] is True
    assert {t["a_name"] for t in rows if t["status"] == "dropped"} == towers
    assert {t["b_name"] for t in rows if t["status"] != "dropped"} == held   # every GGUF tensor faces its HF one
    assert all(t["status"] in ("equal", "dropped") for t in rows)


def test_a_vision_language_models_conversion_changed_is_a_difference(tmp_path, cli) -> None:
    """One language-model weight moved in the file: values, exit 1 (the towers still dropped)."""
    from gguf import GGUFReader

    t = next(t for t in GGUFReader(GEMMA3_VLM_GGUF).tensors if t.name == "blk.1.ffn_down.weight")
    moved = np.array(t.data, dtype=np.float32).copy()
    moved.flat[7] += np.float32(0.01)
    dst = str(tmp_path / "moved.gguf")
    rewrite(GEMMA3_VLM_GGUF, dst, {"blk.1.ffn_down.weight": moved})
    rc, out, _ = cli("diff", GEMMA3_VLM, dst, "--json")
    off = [(t["a_name"], t["status"]) for t in json.loads(out)["tensors"] if t["status"] not in ("equal", "dropped")]
    assert rc == 1 and off == [("language_model.model.layers.1.mlp.down_proj.weight", "values")]
