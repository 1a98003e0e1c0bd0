"""gpt-oss GGUF files (llama.cpp's "gpt-oss" architecture) with real weights: a tiny GptOssForCausalLM with
random weights, saved by safetensors under HF names and converted as llama.cpp's convert_hf_to_gguf.py
GptOssModel converts it (modify_tensors: the fused experts split into gate / up stacks and transposed; the
metadata of set_gguf_parameters through GGUFWriter), the expert weight stacks in F32 or, as the MXFP4 release
converts, in ggml MXFP4 (gguf-py's quants.quantize).

What diff can align is equal value for value; the split and transposed stacks are removed / added at the same
parameter count; the metadata rebuilds a GptOssConfig whose model has the original's parameters (the oracle:
transformers). tests/test_gguf_families.py checks the summary and the analytic model on zero-valued files."""
from __future__ import annotations

import json
import os
import re
import shutil

import numpy as np
import pytest
import torch
import transformers
from safetensors.torch import save_file

from ckptstat import open_checkpoint
from ckptstat.analysis.diff import diff
from ckptstat.analysis.summary import summarize
from ckptstat.families import get
from ckptstat.families.gpt_oss import gguf_config

gguf = pytest.importorskip("gguf")
from gguf import quants  # noqa: E402
from test_gguf_families import _gpt_oss  # noqa: E402

# the family's first sample with an experts' width of 32: ggml's MXFP4 rows are whole 32-value blocks (2880 in the
# release); the nudged tensor: one that aligns, to show a changed value is seen there
KWARGS = dict(get("gpt_oss").samples[0].kwargs, intermediate_size=32)
NUDGED = ("model.layers.1.mlp.experts.down_proj_bias", "blk.1.ffn_down_exps.bias")
SPLIT = re.compile(r"experts\.(gate_up_proj(_bias)?|down_proj)$|\.ffn_(gate|up)_exps\.(weight|bias)$|\.ffn_down_exps\.weight$")


def _modify(name: str, t: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
    """GptOssModel.modify_tensors on unquantised weights (the names before TensorNameMap maps them)."""
    if name.endswith(".sinks"):
        return [(name + ".weight", t)]
    if name.endswith("gate_up_proj_bias"):   # [E, 2f], gate and up interleaved
        return [(name.replace("gate_up_proj_bias", "gate_proj.bias"), t[..., ::2]),
                (name.replace("gate_up_proj_bias", "up_proj.bias"), t[..., 1::2])]
    if name.endswith("gate_up_proj"):   # [E, h, 2f] -> [E, 2f, h], even rows gate, odd rows up
        t = t.transpose(-1, -2)
        return [(name.replace("gate_up_proj", "gate_proj.weight"), t[:, ::2, :]),
                (name.replace("gate_up_proj", "up_proj.weight"), t[:, 1::2, :])]
    if name.endswith("experts.down_proj"):   # [E, f, h] -> [E, h, f]
        return [(name + ".weight", t.transpose(-1, -2))]
    return [(name.replace("down_proj_bias", "down_proj.bias"), t)]


def _write(model: torch.nn.Module, path: str, mxfp4: bool, nudge: bool = True) -> dict[str, np.ndarray]:
    """The GGUF file as GptOssModel writes it, NUDGED's first value + 1 (`nudge`); returns what it wrote (GGUF name
    -> F32 values before quantising)."""
    c = model.config
    w = gguf.GGUFWriter(path, "gpt-oss")
    _gpt_oss(w, c)   # GptOssModel's metadata, as tests/test_gguf_families.py writes it
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.GPT_OSS, c.num_hidden_layers)
    out = {}
    for name, t in model.state_dict().items():
        for n, v in _modify(name, t.detach()):
            g = names.get_name(n, try_suffixes=(".weight", ".bias"))
            assert g is not None, f"convert_hf_to_gguf.py cannot map {n!r}"
            data = v.contiguous().float().numpy()
            if nudge and g == NUDGED[1]:
                data = data.copy()
                data[0, 0] += 1.0
            out[g] = data
            if mxfp4 and g.endswith("_exps.weight"):   # [E, out, in]: blocks of 32 along `in`
                w.add_tensor(g, quants.quantize(data, gguf.GGMLQuantizationType.MXFP4),
                             raw_dtype=gguf.GGMLQuantizationType.MXFP4)
            else:
                w.add_tensor(g, data)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out


@pytest.fixture(scope="module")
def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return transformers.GptOssForCausalLM(transformers.GptOssConfig(**KWARGS))


@pytest.fixture(scope="module")
def hf_path(model, tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("hf") / "model.safetensors")
    save_file({k: v.detach().contiguous() for k, v in model.state_dict().items()}, path)
    return path


@pytest.mark.parametrize("mxfp4", [False, True], ids=["f32", "mxfp4"])
def test_diff_aligns_what_the_converter_keeps(model, hf_path, mxfp4, tmp_path):
    written = _write(model, str(tmp_path / "m.gguf"), mxfp4)
    gg = open_checkpoint(str(tmp_path / "m.gguf"))
    r = diff(open_checkpoint(hf_path), gg)
    assert r["builtin_map"] and "(gpt_oss family)" in r["builtin_map"]
    assert r["a_params"] == r["b_params"] == sum(p.numel() for p in model.parameters())
    status = {(t["a_name"], t["b_name"]): t["status"] for t in r["tensors"]}
    paired = {k: s for k, s in status.items() if None not in k}
    # every HF tensor the converter keeps in place is compared with its GGUF tensor: equal, but the nudged one
    assert paired.pop(NUDGED) == "values" and set(paired.values()) == {"equal"}
    assert {b for _, b in paired} | {NUDGED[1]} == {g for g in written if not SPLIT.search(g)}
    # the rest: the fused HF experts removed, the converter's split / transposed stacks added
    L = model.config.num_hidden_layers
    removed = {a for (a, b), s in status.items() if b is None and s == "removed"}
    added = {b for (a, b), s in status.items() if a is None and s == "added"}
    assert removed == {f"model.layers.{i}.mlp.experts.{p}" for i in range(L)
                       for p in ("gate_up_proj", "gate_up_proj_bias", "down_proj")}
    assert added == {f"blk.{i}.ffn_{p}" for i in range(L)
                     for p in ("gate_exps.weight", "gate_exps.bias", "up_exps.weight", "up_exps.bias", "down_exps.weight")}
    assert len(status) == len(paired) + 1 + len(removed) + len(added)
    if mxfp4:
        assert {gg.tensors[b].dtype for b in added if b.endswith(".weight")} == {"MXFP4"}
    else:   # the added stacks are the HF experts rearranged: gate = gate_up_proj[..., ::2] transposed
        gate_up = model.model.layers[0].mlp.experts.gate_up_proj.detach()
        np.testing.assert_array_equal(gg.read("blk.0.ffn_gate_exps.weight").reshape(-1),
                                      gate_up[..., ::2].transpose(-1, -2).numpy().reshape(-1))


def test_mxfp4_summary_counts_the_model(model, tmp_path, cli):
    _write(model, str(tmp_path / "m.gguf"), mxfp4=True)
    r = summarize(open_checkpoint(str(tmp_path / "m.gguf")))
    assert r["resolved"]["family"] == "gpt_oss" and r["resolved"]["model"] == "GptOssForCausalLM"
    assert r["parameters"]["unique"] == sum(p.numel() for p in model.parameters())
    assert r["analytic"]["agree"] is True and r["analytic"]["predicted_params"] == r["parameters"]["unique"]
    rc, out, err = cli("memory", str(tmp_path / "m.gguf"), "--seq", "16")
    assert rc == 0, err


def test_metadata_rebuilds_the_config(model, tmp_path):
    """gguf_config's keys build a GptOssConfig whose model has the original's parameters, layer pattern, window
    and YaRN table (what the file says; the oracle is transformers)."""
    _write(model, str(tmp_path / "m.gguf"), mxfp4=False)
    gg = open_checkpoint(str(tmp_path / "m.gguf"))
    cfg = gguf_config("gpt-oss", gg.metadata, gg.tensors)
    assert cfg is not None and cfg["architectures"] == ["GptOssForCausalLM"]
    rebuilt = transformers.GptOssConfig(**{k: v for k, v in cfg.items() if k not in ("model_type", "architectures")})
    c = model.config
    for key in ("num_hidden_layers", "hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads",
                "head_dim", "num_local_experts", "num_experts_per_tok", "sliding_window", "max_position_embeddings",
                "vocab_size", "tie_word_embeddings", "attention_bias", "layer_types"):
        assert getattr(rebuilt, key) == getattr(c, key), key
    assert rebuilt.rms_norm_eps == pytest.approx(c.rms_norm_eps)
    rope = ("rope_theta", "rope_type", "factor", "original_max_position_embeddings")
    assert {k: rebuilt.rope_parameters[k] for k in rope} == {k: c.rope_parameters[k] for k in rope}
    with torch.device("meta"):
        again = transformers.GptOssForCausalLM(rebuilt)
    assert sum(p.numel() for p in again.parameters()) == sum(p.numel() for p in model.parameters())
    assert gguf_config("llama", gg.metadata, gg.tensors) is None


@pytest.mark.parametrize("seq", [3, 16])   # within the window of 4, and across it
def test_flops_from_metadata_as_from_config_json(model, hf_path, seq, tmp_path, cli):
    """The analytic model from the GGUF metadata is the one config.json gives (window, layer pattern, top-k, biases):
    the same ops, calls, parameters and FLOPs, module by module."""
    _write(model, str(tmp_path / "m.gguf"), mxfp4=False)
    (tmp_path / "hf").mkdir()
    shutil.copy(hf_path, tmp_path / "hf" / os.path.basename(hf_path))
    transformers.GptOssConfig(**KWARGS, architectures=["GptOssForCausalLM"]).save_pretrained(str(tmp_path / "hf"))
    reports = []
    for path in (str(tmp_path / "m.gguf"), str(tmp_path / "hf")):
        rc, out, err = cli("flops", path, "--seq", str(seq), "--json")
        assert rc == 0, err
        reports.append(json.loads(out))
    g, h = reports
    assert g["config"] is None and h["config"].endswith("config.json")
    # (the one difference: what held the config, as the output names it)
    assert (g["architecture"].pop("source"), h["architecture"].pop("source")) == ("GGUF metadata", "config.json")
    assert g["architecture"] == h["architecture"] and g["parameters"] == h["parameters"]
    keys = ("module", "calls", "params", "macs", "flops", "elementwise_flops")
    ops = [[{k: m[k] for k in keys} for run in r["runs"] for m in run["modules"]] for r in reports]
    assert ops[0] == ops[1] and any("sinks" in m["module"] for m in ops[0])


def test_release_layout_diffs_at_equal_counts(tmp_path):
    """The MXFP4 release layout (`*_blocks` / `*_scales`, the rest in bf16;
    fixtures/make_quantized.py) against its GGUF conversion: the same logical parameter count both sides (census/quant/
    counts the blocks as the weights they encode); the packed experts removed, the split stacks added, every other
    tensor paired (bf16 against F32: `converted`, the bf16 values the F32 ones rounded)."""
    from conftest import fixture_script

    mq = fixture_script("make_quantized")

    model = mq.build(mq.tiny_config("gpt_oss"))
    release = mq.write_mxfp4(model, str(tmp_path / "hf"))
    _write(model.float(), str(tmp_path / "m.gguf"), mxfp4=True, nudge=False)
    r = diff(open_checkpoint(release), open_checkpoint(str(tmp_path / "m.gguf")), rtol=1 / 128)
    assert r["a_params"] == r["b_params"] == sum(p.numel() for p in model.parameters())
    status = {(t["a_name"], t["b_name"]): t for t in r["tensors"]}
    removed = {a for (a, b), t in status.items() if b is None}
    L = model.config.num_hidden_layers
    assert removed == {f"model.layers.{i}.mlp.experts.{p}" for i in range(L) for p in (
        "gate_up_proj_blocks", "gate_up_proj_scales", "gate_up_proj_bias", "down_proj_blocks", "down_proj_scales")}
    assert {b for (a, b) in status if a is None} == {f"blk.{i}.ffn_{p}" for i in range(L) for p in (
        "gate_exps.weight", "gate_exps.bias", "up_exps.weight", "up_exps.bias", "down_exps.weight")}
    paired = [t for (a, b), t in status.items() if a and b]
    assert {t["status"] for t in paired} == {"converted"} and all(t["within_tolerance"] for t in paired)
