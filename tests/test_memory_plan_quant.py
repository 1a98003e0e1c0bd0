"""`ckptstat memory` on a bare config that declares a quantization_config: the weights are planned as the checkpoint
stores them (docs/memory_planner.md, "A config's quantization_config").

Oracles: transformers 5 builds the model on the meta device and its own quantizer integrations replace the modules
they convert (replace_with_mxfp4_linear, replace_with_fp8_linear, with the skip list HfQuantizer computes); the
bytes are those modules' tensors (MXFP4's scales, kept outside the parameters by the triton kernels, shaped by
convert_moe_packed_tensors), every other parameter at the checkpoint's 16-bit dtype. A checkpoint written by
fixtures/make_quantized.py (the layouts transformers loads) must plan the same bytes as its config alone."""
from __future__ import annotations

import json
import os
import shutil

import pytest

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")

from conftest import fixture_script  # noqa: E402
from test_families import meta_model  # noqa: E402
from test_gpt_oss import RELEASES  # noqa: E402
from test_memory_planner import TINY_DSV3  # noqa: E402

mq = fixture_script("make_quantized")
FIX = os.path.join(os.path.dirname(__file__), "..", "fixtures", "quantized")

GPT_OSS_SKIP = ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]   # the release's
TINY_OSS = dict(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, head_dim=16, num_local_experts=4, num_experts_per_tok=2, sliding_window=4,
                tie_word_embeddings=False)
DSV3_QUANT = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": [128, 128]}


def _write(tmp_path, cfg, arch: str, quant: dict | None, name: str = "config.json") -> str:
    d = cfg.to_dict()
    d.update(architectures=[arch], torch_dtype="bfloat16")
    if quant is not None:
        d["quantization_config"] = quant
    p = tmp_path / name
    p.write_text(json.dumps(d))
    return str(p)


def _resident(cli, *args: str) -> dict:
    rc, out, err = cli("memory", *args, "--seq", "8", "--json")
    assert rc == 0, err
    r = json.loads(out)
    (w,) = [x for x in r["fit"]["lines"] if x["group"] == "weights"]
    return w


def _mxfp4_oracle(cfg, monkeypatch) -> int:
    """Bytes of gpt-oss as the MXFP4 release holds it: replace_with_mxfp4_linear's Mxfp4GptOssExperts (uint8 blocks,
    2 values a byte) plus a uint8 scale per 32 values, whose shape convert_moe_packed_tensors checks against the
    unquantised experts; everything else (the experts' biases included) bf16, as the checkpoint stores it."""
    from transformers.integrations import hub_kernels
    from transformers.integrations.mxfp4 import Mxfp4GptOssExperts, convert_moe_packed_tensors, replace_with_mxfp4_linear

    plain = meta_model(T.GptOssForCausalLM, cfg)
    shapes = {n: p.shape for n, p in plain.named_parameters()}
    model = meta_model(T.GptOssForCausalLM, cfg)
    monkeypatch.setattr(hub_kernels, "get_kernel", lambda *a, **k: None)   # the triton kernels only run the forward
    replace_with_mxfp4_linear(model, T.Mxfp4Config(modules_to_not_convert=GPT_OSS_SKIP), GPT_OSS_SKIP)
    total = 0
    for name, mod in model.named_modules():
        if isinstance(mod, Mxfp4GptOssExperts):
            for proj in ("gate_up_proj", "down_proj"):
                p = getattr(mod, proj)
                e, rows, half = p.shape
                blocks = torch.zeros(1, rows, half // 16, 16, dtype=torch.uint8)   # one expert, real, for the layout
                scales = torch.full((1, rows, half // 16), 127, dtype=torch.uint8)
                assert convert_moe_packed_tensors(blocks, scales).shape[1:] == shapes[f"{name}.{proj}"][1:]
                total += e * (blocks.numel() + scales.numel())
                total += 2 * getattr(mod, f"{proj}_bias").numel()
    converted = sum(1 for m in model.modules() if isinstance(m, Mxfp4GptOssExperts))
    assert converted == cfg.num_hidden_layers
    rest = [p for n, p in model.named_parameters() if "mlp.experts." not in n]
    return total + 2 * sum(p.numel() for p in rest)


def _fp8_oracle(cfg, cls) -> int:
    """replace_with_fp8_linear on the meta model (transformers' own skip list: lm_head): its float8 weights and float32
    weight_scale_inv blocks, everything else bf16 as the checkpoint stores it (the router's weight included)."""
    from transformers.integrations.finegrained_fp8 import replace_with_fp8_linear
    from transformers.quantizers.base import HfQuantizer

    model = meta_model(cls, cfg)
    skip = HfQuantizer.get_modules_to_not_convert(model, None, model._keep_in_fp32_modules)
    replace_with_fp8_linear(model, skip, T.FineGrainedFP8Config(weight_block_size=[128, 128]), pre_quantized=True)
    fp8 = {n for n, p in model.named_parameters() if p.dtype == torch.float8_e4m3fn}
    assert fp8
    total = 0
    for n, p in model.named_parameters():
        quantised = n in fp8 or n.removesuffix("_scale_inv").removesuffix(".weight") + ".weight" in fp8 \
            or n.removesuffix("_scale_inv") in fp8
        total += p.numel() * (p.element_size() if quantised else 2)
    return total


def test_gpt_oss_config_plans_mxfp4_experts(tmp_path, cli, monkeypatch):
    cfg = T.GptOssConfig(**TINY_OSS)
    path = _write(tmp_path, cfg, "GptOssForCausalLM", {"quant_method": "mxfp4", "modules_to_not_convert": GPT_OSS_SKIP})
    w = _resident(cli, path)
    assert w["bytes"] == _mxfp4_oracle(cfg, monkeypatch)
    assert "weights as the checkpoint stores them" in w["rule"] and "MXFP4 experts" in w["rule"]
    assert "bfloat16 elsewhere" in w["rule"]
    # an explicit --weights-dtype still wins; --weights-dtype mxfp4 on the unquantised config is the same layout
    plain = meta_model(T.GptOssForCausalLM, cfg)
    assert _resident(cli, path, "--weights-dtype", "bf16")["bytes"] == 2 * sum(p.numel() for p in plain.parameters())
    bare = _write(tmp_path, cfg, "GptOssForCausalLM", None, "plain.json")
    assert _resident(cli, bare, "--weights-dtype", "mxfp4")["bytes"] == w["bytes"]


def test_gpt_oss_20b_published_config(tmp_path, cli, monkeypatch):
    """openai/gpt-oss-20b's config (quantization_config mxfp4): ~12.8 GiB of weights, the release's size, not
    the 39 GiB of its parameters at bf16."""
    cfg = T.GptOssConfig(**RELEASES["gpt-oss-20b"])
    path = _write(tmp_path, cfg, "GptOssForCausalLM", {"quant_method": "mxfp4", "modules_to_not_convert": GPT_OSS_SKIP})
    w = _resident(cli, path)
    assert w["bytes"] == _mxfp4_oracle(cfg, monkeypatch)
    assert 12 * 2**30 < w["bytes"] < 14 * 2**30


def test_deepseek_v3_config_plans_fp8_blocks(tmp_path, cli):
    cfg = T.DeepseekV3Config(**TINY_DSV3)
    path = _write(tmp_path, cfg, "DeepseekV3ForCausalLM", DSV3_QUANT)
    w = _resident(cli, path)
    assert w["bytes"] == _fp8_oracle(cfg, T.DeepseekV3ForCausalLM)
    assert "block 128x128" in w["rule"] and "bfloat16 elsewhere" in w["rule"]
    # --weights-dtype fp8 on the unquantised config: the same layout (the router left alone, as transformers does)
    bare = _write(tmp_path, cfg, "DeepseekV3ForCausalLM", None, "plain.json")
    assert _resident(cli, bare, "--weights-dtype", "fp8")["bytes"] == w["bytes"]


GPTQMODEL = sorted(c for c in os.listdir(FIX) if c.startswith(("gptqmodel-", "modelopt-")) and "." not in c)


@pytest.mark.parametrize("case", GPTQMODEL)
def test_quantised_configs_plan_what_their_writer_stores(tmp_path, cli, case):
    """GPTQ (2, 3, 4 and 8 bits, groups of 32 and one group, act-order, MoE experts) and AWQ GEMM checkpoints
    GPTQModel wrote (fixtures/quantized/gptqmodel-*, fixtures/make_gptqmodel.py) and NVFP4 ones NVIDIA modelopt
    exported (fixtures/quantized/modelopt-*): their config.json alone plans exactly the bytes the file holds (each
    tensor's, read by safe_open), as the checkpoint itself does."""
    from safetensors import safe_open

    folder = os.path.join(FIX, case)
    with safe_open(os.path.join(folder, "model.safetensors"), "pt") as f:
        held = sum(f.get_tensor(k).nbytes for k in f.keys())
    shutil.copy(os.path.join(folder, "config.json"), tmp_path / "alone.json")
    alone = _resident(cli, str(tmp_path / "alone.json"))
    assert _resident(cli, folder)["bytes"] == alone["bytes"] == held
    method = "modelopt" if case.startswith("modelopt-") else case.split("-")[1].split("_")[0]
    assert f"config.json quantization_config ({method})" in alone["rule"] and "is not planned" not in alone["rule"]


@pytest.mark.parametrize("quant", [{"quant_method": "eetq"}, {"quant_method": "awq", "bits": 3, "group_size": 128},
                                   {"quant_method": "gptq", "bits": 4, "group_size": 128, "checkpoint_format": "marlin"},
                                   {"quant_method": "gptq", "bits": 4, "group_size": 128, "dynamic": {"-:.*mlp.*": {}}},
                                   {"quant_method": "gptq", "bits": 4, "group_size": 128, "lm_head": True},
                                   {"quant_method": "awq", "bits": 4, "group_size": 128, "version": "gemv"}])
def test_unmodelled_method_is_said(tmp_path, cli, quant):
    """A method or a layout the planner does not model (3-bit AWQ, Marlin, gptqmodel's per-module `dynamic`, a
    quantised lm_head, AWQ GEMV): said, and the weights planned at the config's dtype."""
    cfg = T.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4)
    path = _write(tmp_path, cfg, "LlamaForCausalLM", quant)
    w = _resident(cli, path)
    assert f"{quant['quant_method']!r} is not planned" in w["rule"]
    assert w["bytes"] == 2 * sum(p.numel() for p in meta_model(T.LlamaForCausalLM, cfg).parameters())
    rc, _, err = cli("memory", path, "--weights-dtype", "mxfp4")
    assert rc == 2 and "routed experts" in err


@pytest.mark.parametrize("kind", ["mxfp4", "fp8"])
def test_bare_config_and_its_checkpoint_plan_the_same_bytes(tmp_path, cli, kind):
    """The quantised checkpoint (census/quant/: its stored bytes) and its config.json alone plan the same weights."""
    if kind == "mxfp4":
        cfg = mq.tiny_config("gpt_oss")
        folder = mq.write_mxfp4(mq.build(cfg), str(tmp_path / kind))
    else:
        cfg = T.LlamaConfig(vocab_size=1000, hidden_size=256, intermediate_size=688, num_hidden_layers=2,
                            num_attention_heads=8, num_key_value_heads=4, tie_word_embeddings=False, torch_dtype="float16")
        folder = mq.write_fp8(mq.build(cfg), str(tmp_path / kind), block=(128, 128))
    shutil.copy(f"{folder}/config.json", tmp_path / "alone.json")
    stored, alone = _resident(cli, folder), _resident(cli, str(tmp_path / "alone.json"))
    assert stored["bytes"] == alone["bytes"]


CT_CASES = [("W4A16", "pack-quantized", 128, "bfloat16"), ("W4A16", "pack-quantized", 32, "float32"),
            ("W4A16_ASYM", "pack-quantized", 64, "bfloat16"), ("W8A16", "pack-quantized", None, "bfloat16"),
            ("W8A8", "int-quantized", None, "bfloat16"), ("FP8", "float-quantized", None, "float32"),
            ("FP8_DYNAMIC", "float-quantized", None, "bfloat16"), ("FP8_BLOCK", "float-quantized", None, "bfloat16"),
            ("NVFP4A16", "nvfp4-pack-quantized", None, "bfloat16"), ("NVFP4", "nvfp4-pack-quantized", None, "bfloat16"),
            ("MXFP4A16", "mxfp4-pack-quantized", None, "bfloat16"), ("W4A16", "naive-quantized", 128, "bfloat16"),
            ("MXFP6A16", "mxfp6-pack-quantized", None, "bfloat16"), ("MXFP8A16", "mxfp8-quantized", None, "bfloat16")]


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("scheme,fmt,group,dtype", CT_CASES, ids=[f"{c[0]}-{c[1]}-{c[2]}-{c[3]}" for c in CT_CASES])
def test_compressed_tensors_config_plans_what_its_compressor_stores(tmp_path, cli, scheme, fmt, group, dtype):
    """compressed-tensors (llm-compressor's format, what vLLM loads): a model compressed by compressed-tensors itself
    in each preset (fixtures/make_quantized.py write_compressed), and its config.json alone, plan the same weight
    bytes: the codes, scales (in the model's dtype), zero points, global and input scales its compressors store."""
    cfg = T.LlamaConfig(vocab_size=1000, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                        num_attention_heads=8, num_key_value_heads=4, tie_word_embeddings=False, torch_dtype=dtype)
    model = mq.build(cfg).to(getattr(torch, dtype))
    folder = mq.write_compressed(model, str(tmp_path / "ct"), scheme, fmt, group)
    shutil.copy(f"{folder}/config.json", tmp_path / "alone.json")
    stored, alone = _resident(cli, folder), _resident(cli, str(tmp_path / "alone.json"))
    assert stored["bytes"] == alone["bytes"] and "compressed-tensors" in alone["rule"], alone["rule"]


def test_compressed_tensors_configs_not_planned_are_said(tmp_path, cli):
    """Two config groups, or lm_head quantised too (the planner quantises the blocks' linears): said, and the weights
    at the config's dtype."""
    cfg = T.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4)
    weights = {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 32, "symmetric": True}
    one = {"targets": ["Linear"], "weights": weights, "format": "pack-quantized"}
    for quant in ({"quant_method": "compressed-tensors", "config_groups": {"a": one, "b": one}, "ignore": ["lm_head"]},
                  {"quant_method": "compressed-tensors", "config_groups": {"a": one}, "ignore": []}):
        w = _resident(cli, _write(tmp_path, cfg, "LlamaForCausalLM", quant))
        assert "quant_method 'compressed-tensors'" in w["rule"] and "is not planned" in w["rule"], w["rule"]
        assert w["bytes"] == 2 * sum(p.numel() for p in meta_model(T.LlamaForCausalLM, cfg).parameters())


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("skip", [["lm_head"], ["lm_head", "experts"], ["lm_head", "mlp.experts"]])
def test_fp8_config_leaving_the_experts_plans_what_transformers_holds(tmp_path, cli, monkeypatch, skip):
    """transformers' FineGrainedFP8 on a Qwen3-MoE (its quantizer run on the CPU, its GPU check bypassed): the
    experts are one module holding the fused projections, so `modules_to_not_convert: ["experts"]` (a suffix of that
    module's name) leaves them in bfloat16; the plan of its config.json alone is the bytes of the state_dict
    transformers loads from its save. Before, the plan matched the entry against the projections' names and
    quantised the experts anyway."""
    from transformers.quantizers.quantizer_finegrained_fp8 import FineGrainedFP8HfQuantizer

    cfg = T.Qwen3MoeConfig(vocab_size=128, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, head_dim=32, num_experts=4,
                           num_experts_per_tok=2, moe_intermediate_size=128, torch_dtype="bfloat16",
                           tie_word_embeddings=False)
    torch.manual_seed(0)
    T.AutoModelForCausalLM.from_config(cfg).to(torch.bfloat16).save_pretrained(str(tmp_path / "plain"))
    monkeypatch.setattr(FineGrainedFP8HfQuantizer, "validate_environment", lambda self, *a, **k: None)
    fp8 = T.FineGrainedFP8Config(weight_block_size=(32, 32), modules_to_not_convert=skip)
    q = T.AutoModelForCausalLM.from_pretrained(str(tmp_path / "plain"), quantization_config=fp8, device_map="cpu")
    q.save_pretrained(str(tmp_path / "fp8"))
    loaded = T.AutoModelForCausalLM.from_pretrained(str(tmp_path / "fp8"), device_map="cpu")
    held = sum(t.numel() * t.element_size() for t in loaded.state_dict().values())
    experts = loaded.state_dict()["model.layers.0.mlp.experts.down_proj"]
    assert (experts.dtype == torch.bfloat16) == (len(skip) > 1)   # (what the entry does in transformers)
    shutil.copy(tmp_path / "fp8" / "config.json", tmp_path / "alone.json")
    assert _resident(cli, str(tmp_path / "alone.json"))["bytes"] == held
