"""The optional torch executor on small real models from fixtures/ (CPU)."""
import json
import sys

import pytest
from conftest import fixture

from ckptstat import open_checkpoint

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from ckptstat.executor import build_model, execute  # noqa: E402


@pytest.mark.parametrize("name", ["bert-tiny", "gpt2-tiny", "llama-tiny-sharded"])
def test_measured_flops_match_analytic(name):
    r = execute(fixture(name), batch=2, seq=16, warmup=1, iters=2)
    assert r["outputs_finite"]
    assert r["weights"]["missing"] == []
    assert r["flops"]["measured"] > 0 and r["flops"]["analytic"] is not None
    assert abs(r["flops"]["difference"]) < 0.01, r["flops"]
    assert r["latency"]["median_s"] > 0 and r["peak_memory"]["bytes"] > 0


def assert_loaded_as_transformers_loads(folder: str) -> list[str]:
    """The executor's model holds, key for key, what transformers' own from_pretrained of the folder holds."""
    import transformers

    ckpt = open_checkpoint(folder)
    model, loaded, missing = build_model(ckpt, "cpu", "fp32", "eager")
    assert missing == [] and loaded
    reference = type(model).from_pretrained(folder)
    ours, theirs = model.state_dict(), reference.state_dict()
    assert set(loaded) == set(ours) == set(theirs)
    for key, tensor in theirs.items():
        assert torch.equal(ours[key], tensor), key
    assert isinstance(reference, transformers.PreTrainedModel)
    return list(ours)


@pytest.mark.parametrize("name", ["bert-tiny-mlm", "gpt2-tiny"])
def test_weights_loaded_equal_the_file(name):
    assert_loaded_as_transformers_loads(fixture(name))


def test_hub_kernels_are_never_asked_for(monkeypatch):
    """transformers 5 replaces layers with kernels fetched from the Hub on CUDA unless told not to (offline, that
    load fails; online, it runs code from the Hub): the executor's from_pretrained always says use_kernels=False."""
    from transformers import PreTrainedModel

    real, asked = PreTrainedModel.from_pretrained.__func__, []

    def recording(cls, *args, **kwargs):
        asked.append(kwargs.get("use_kernels", "unset"))
        return real(cls, *args, **kwargs)

    monkeypatch.setattr(PreTrainedModel, "from_pretrained", classmethod(recording))
    build_model(open_checkpoint(fixture("gpt2-tiny")), "cpu", "fp32", "eager")
    assert asked == [False]


@pytest.mark.parametrize("name", ["bert-tiny", "llama-tiny-sharded"])
def test_sdpa_on_cpu_counts_attention(cli, name):
    """SDPA's CPU kernel (no formula in torch) is counted: the measured FLOPs equal the eager run's, attention in."""
    flops = {}
    for attn in ("eager", "sdpa"):
        rc, out, _ = cli("run", fixture(name), "--seq", "8", "--attn", attn, "--iters", "1", "--json")
        r = json.loads(out)
        assert rc == 0 and r["notes"] == [], r["notes"]
        flops[attn] = r["flops"]["measured"]
    assert flops["sdpa"] == flops["eager"] > 0


@pytest.mark.parametrize("kv_heads", [8, 2, 1])
def test_fused_attention_flops_equal_torchs_count_of_the_math(kv_heads):
    """A fused kernel's FLOPs, grouped-query key/value unexpanded (transformers 5 on CUDA: enable_gqa), equal what
    torch's FlopCounterMode counts for the same attention written as matmuls over repeated key/value heads."""
    import torch.nn.functional as F
    from torch.utils.flop_counter import FlopCounterMode

    from ckptstat.analysis.torch_flops import flop_counter

    q, k, v = torch.randn(2, 8, 16, 4), torch.randn(2, kv_heads, 24, 4), torch.randn(2, kv_heads, 24, 6)
    with flop_counter() as fused:
        F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    rep = 8 // kv_heads
    with FlopCounterMode(display=False) as math:
        torch.softmax(q @ k.repeat_interleave(rep, 1).transpose(-1, -2), -1) @ v.repeat_interleave(rep, 1)
    assert fused.get_total_flops() == math.get_total_flops() > 0


def test_analytic_memory_is_the_memory_commands_plan(cli):
    """The run's analytic memory is what `ckptstat memory` plans for one device at the run's dtype, no reserve:
    SDPA's fused kernels keep no s x s scores (`--attention flash`), eager attention does."""
    planned = {}
    for attn, flag in (("eager", "eager"), ("sdpa", "flash")):
        r = execute(fixture("gpt2-tiny"), batch=2, seq=16, attn=attn, warmup=0, iters=1)
        rc, out, _ = cli("memory", fixture("gpt2-tiny"), "-b", "2", "-s", "16", "--weights-dtype", "fp32",
                         "--attention", flag, "--reserve", "0", "--json")
        planned[attn] = json.loads(out)["fit"]["per_device_bytes"]
        assert rc == 0 and r["peak_memory"]["analytic_bytes"] == planned[attn]
        assert f"--attention {flag}" in r["peak_memory"]["analytic_rule"]
    assert planned["eager"] > planned["sdpa"]


def test_usage_errors(cli):
    rc, _, err = cli("run", fixture("bert-tiny"), "--dtype", "fp8")
    assert rc == 2 and "--dtype" in err
    if not torch.cuda.is_available():
        rc, _, err = cli("run", fixture("bert-tiny"), "--device", "cuda")
        assert rc == 2 and "CUDA" in err


def test_without_torch_says_what_to_install(cli, monkeypatch, expected_st):
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch now raises ImportError
    rc, out, err = cli("run", fixture("bert-tiny"))
    assert rc == 1 and out == "" and "pip install 'ckptstat[run]'" in err
    rc, out, _ = cli(fixture("bert-tiny"))  # the rest keeps working
    assert rc == 0 and f"{expected_st['bert-tiny']['parameters']:,}" in out


# MoE families as transformers 5 saves them: its model holds each layer's experts fused (experts.gate_up_proj,
# a 3-D parameter) while save_pretrained writes them one module per expert (experts.0.gate_proj.weight ...):
# the executor loads through transformers' own conversion rules, and counts the experts' grouped_mm.
MOE_CONFIGS = {
    "Qwen3MoeForCausalLM": dict(num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32),
    "MixtralForCausalLM": dict(num_local_experts=4, num_experts_per_tok=2),
    "DeepseekV3ForCausalLM": dict(n_routed_experts=8, num_experts_per_tok=2, n_group=2, topk_group=1,
                                  first_k_dense_replace=1, moe_intermediate_size=32, q_lora_rank=32,
                                  kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=16),
    "OlmoeForCausalLM": dict(num_experts=8, num_experts_per_tok=2),
}


@pytest.fixture(scope="module")
def moe_saves(tmp_path_factory) -> dict:
    import transformers

    out = {}
    for arch, extra in MOE_CONFIGS.items():
        model_cls = getattr(transformers, arch)
        cfg = model_cls.config_class(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                     num_attention_heads=4, num_key_value_heads=2 if "Deepseek" not in arch else 4,
                                     architectures=[arch], **extra)
        torch.manual_seed(0)
        folder = tmp_path_factory.mktemp(arch)
        model_cls(cfg).save_pretrained(folder)
        out[arch] = str(folder)
    return out


@pytest.mark.parametrize("arch", MOE_CONFIGS)
def test_moe_loads_through_transformers_rules(moe_saves, arch):
    assert any(".experts.0." in n for n in open_checkpoint(moe_saves[arch]).tensors)   # one module per expert
    keys = assert_loaded_as_transformers_loads(moe_saves[arch])
    assert any(k.endswith("experts.gate_up_proj") for k in keys)   # ... loaded into the model's fused experts


@pytest.mark.parametrize("arch", [a for a in MOE_CONFIGS if a != "OlmoeForCausalLM"])   # OLMoE: no static model
def test_moe_measured_flops_match_analytic(moe_saves, arch):
    r = execute(moe_saves[arch], batch=1, seq=8, warmup=0, iters=1)
    assert r["weights"]["missing"] == [] and r["outputs_finite"]
    assert r["flops"]["analytic"] and r["flops"]["difference"] == 0, r["flops"]


def test_a_shape_the_model_does_not_take_is_one_line(moe_saves, tmp_path, cli):
    import shutil

    from safetensors.numpy import load_file, save_file

    folder = tmp_path / "bad"
    shutil.copytree(moe_saves["MixtralForCausalLM"], folder)
    tensors = load_file(folder / "model.safetensors")
    name = "model.layers.0.self_attn.q_proj.weight"
    expected = tensors[name].shape   # what the model takes, as save_pretrained wrote it
    tensors[name] = tensors[name][:, :-1].copy()
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    rc, out, err = cli("run", str(folder), "--seq", "4", "--iters", "1")
    assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert f"{name} has shape {tensors[name].shape}, MixtralForCausalLM expects {expected}" in err


# On a CUDA device (skipped without one; run on a GPU machine: docs/run.md "GPU"): the weights land on the GPU
# exactly as transformers' own from_pretrained puts them there, and a run's figures are the device's.
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here")


@cuda
@pytest.mark.parametrize("name", ["bert-tiny-mlm", "gpt2-tiny", "llama-tiny-sharded"])
def test_cuda_weights_equal_transformers_from_pretrained(name):
    model, loaded, missing = build_model(open_checkpoint(fixture(name)), "cuda", "bf16", "sdpa")
    reference = type(model).from_pretrained(fixture(name), dtype=torch.bfloat16, device_map={"": "cuda"},
                                            use_kernels=False)
    ours, theirs = model.state_dict(), reference.state_dict()
    assert missing == [] and set(loaded) == set(ours) == set(theirs)
    for key, tensor in theirs.items():
        assert ours[key].device.type == "cuda" and ours[key].dtype == tensor.dtype, key
        assert torch.equal(ours[key], tensor), key


@cuda
@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("name", ["bert-tiny", "gpt2-tiny", "llama-tiny-sharded"])
def test_cuda_run(name, attn):
    r = execute(fixture(name), device="cuda", batch=2, seq=16, dtype="bf16", attn=attn, warmup=1, iters=2)
    assert r["outputs_finite"] and r["weights"]["missing"] == []
    assert r["latency"]["timer"] == "CUDA events, synchronised" and r["latency"]["median_s"] > 0
    # the allocator's peak over the timed passes holds at least the weights at 2 B each
    params = sum(t.numel for t in open_checkpoint(fixture(name)).tensors.values())
    assert r["peak_memory"]["bytes"] >= 2 * params * 0.9, r["peak_memory"]
    # torch's own FlopCounterMode over the same forward, where it can count it (before torch 2.13 it raises on
    # grouped-query key/value given to a fused kernel unexpanded)
    from torch.utils.flop_counter import FlopCounterMode

    model = build_model(open_checkpoint(fixture(name)), "cuda", "bf16", attn)[0]
    ids = torch.randint(0, model.config.vocab_size, (2, 16), device="cuda")
    counted: int | None = None
    try:
        with FlopCounterMode(display=False) as torch_count, torch.inference_mode():
            model(input_ids=ids)
        counted = torch_count.get_total_flops()
    except AssertionError as e:   # torch's own formula refusing the unexpanded heads
        if "sdpa_flop_count" not in str(e):
            raise
    if counted is not None:
        assert r["flops"]["measured"] == counted, r["flops"]
    # SDPA's CUDA kernels pad a head dimension that is not a multiple of 8 (gpt2-tiny's 12 to 16) and compute on the
    # padding: torch counts those matmuls, the analytic figure the model's own
    if attn == "eager" or (model.config.hidden_size // model.config.num_attention_heads) % 8 == 0:
        assert abs(r["flops"]["difference"]) < 0.01, r["flops"]
    else:
        assert r["flops"]["measured"] > r["flops"]["analytic"], r["flops"]


@cuda
@pytest.mark.parametrize("arch", [a for a in MOE_CONFIGS if a != "OlmoeForCausalLM"])
def test_cuda_moe_run(moe_saves, arch):
    """transformers 5 runs the routed experts through its grouped kernels on a GPU: counted by the same rule."""
    r = execute(moe_saves[arch], device="cuda", batch=1, seq=8, dtype="bf16", warmup=0, iters=1)
    assert r["weights"]["missing"] == [] and r["outputs_finite"]
    assert r["flops"]["analytic"] and abs(r["flops"]["difference"]) < 0.01, r["flops"]
