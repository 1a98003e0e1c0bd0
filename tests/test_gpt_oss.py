"""gpt-oss (families/gpt_oss.py) on real saves: a tiny GptOssForCausalLM written by save_pretrained, its
MXFP4 layout as the release stores it, and the released configs' sizes on the meta device.

Oracles, all from transformers and torch: parameters from model.parameters() (active ones: the router and
top-k of the experts' own parameters); matmul FLOPs from FlopCounterMode on the model on the CPU (transformers
5's default grouped_mm experts, routed rows only: tests/test_families.py grouped_mm_flops); causal-halving pairs
from the probabilities eager attention returns; KV bytes from the DynamicCache / StaticCache a forward fills;
MXFP4 piece shapes from transformers' loader and dequantiser (integrations/mxfp4.py); layer defaults from
GptOssConfig. The registry walk (tests/test_families.py) checks the family's samples as it checks every family's."""
from __future__ import annotations

import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")
from conftest import fixture_script, held_bytes  # noqa: E402

mq = fixture_script("make_quantized")
from safetensors.numpy import save_file  # noqa: E402
from test_families import fcm_flops, meta_model  # noqa: E402

import ckptstat  # noqa: E402
from ckptstat.analysis import flops as fl  # noqa: E402
from ckptstat.analysis import memory  # noqa: E402
from ckptstat.census.model import load  # noqa: E402
from ckptstat.errors import UsageError  # noqa: E402
from ckptstat.families import detect  # noqa: E402
from ckptstat.families.framework.graph import build, predict_params  # noqa: E402
from ckptstat.families.framework.spec import from_config  # noqa: E402

BATCH = 2
SEQS = (3, 4, 9)      # below, at and above the window
SIZES = dict(vocab_size=97, hidden_size=32, intermediate_size=24, num_hidden_layers=4, num_attention_heads=4,
             num_key_value_heads=2, head_dim=16, num_local_experts=4, num_experts_per_tok=2, sliding_window=4,
             max_position_embeddings=64, rope_scaling=dict(rope_type="yarn", factor=2.0, beta_fast=32.0, beta_slow=1.0,
                                                           truncate=False, original_max_position_embeddings=32))
# the released configs' sizes (openai/gpt-oss-20b and -120b config.json)
RELEASED = dict(vocab_size=201088, hidden_size=2880, intermediate_size=2880, head_dim=64, num_attention_heads=64,
                num_key_value_heads=8, sliding_window=128, num_experts_per_tok=4, max_position_embeddings=131072)
RELEASES = {"gpt-oss-20b": dict(RELEASED, num_hidden_layers=24, num_local_experts=32),
            "gpt-oss-120b": dict(RELEASED, num_hidden_layers=36, num_local_experts=128)}


def _active(model) -> int:
    """model.parameters() less the experts a token does not visit: (E - k) of each layer's experts."""
    cfg, total = model.config, sum(p.numel() for p in model.parameters())
    experts = sum(p.numel() for layer in model.model.layers for p in layer.mlp.experts.parameters())
    return total - experts * (cfg.num_local_experts - cfg.num_experts_per_tok) // cfg.num_local_experts


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """(the eager model with real tiny weights, the folder save_pretrained wrote)."""
    cfg = T.GptOssConfig(**SIZES)
    model = meta_model(T.GptOssForCausalLM, cfg, "cpu")
    path = tmp_path_factory.mktemp("gpt_oss") / "tiny"
    model.save_pretrained(path)
    return model, str(path)


def test_summary_counts_family_head_and_analytic(saved):
    model, path = saved
    r = ckptstat.summarize(path)
    total = sum(p.numel() for p in model.parameters())
    assert r["architecture"]["family"] == "gpt_oss" and r["architecture"]["source"] == "config.json"
    assert r["resolved"]["head"] == "lm"
    assert r["parameters"]["unique"] == total
    buckets = {b["bucket"]: b["params"] for b in r["buckets"]}
    assert buckets["embedding"] == model.model.embed_tokens.weight.numel()
    assert buckets["cls"] == model.lm_head.weight.numel()
    an = r["analytic"]
    assert an["agree"] is True and an["predicted_params"] == total
    assert an["active_params"] == _active(model)
    assert r["notes"] == [] and r["non_parameters"] == []


def test_flops_equal_flop_counter_mode(saved):
    """The saved model's FLOPs report against FlopCounterMode on the model itself (CPU: the experts' loop)."""
    model, path = saved
    m = load(path)
    for seq in SEQS:
        assert fl.run(m, BATCH, seq)["totals"]["flops"] == fcm_flops(model, seq, BATCH, "cpu"), seq


def test_causal_halving_counts_the_pairs_the_masks_let_through(saved):
    """--causal-halving: score MACs = the (query, key) pairs with nonzero probability in the model's own eager
    attention (output_attentions: the sink column already dropped), sliding layers seeing their window, x head_dim."""
    model, path = saved
    m = load(path)
    for seq in SEQS:
        ids = torch.arange(BATCH * seq).reshape(BATCH, seq) % SIZES["vocab_size"]
        with torch.no_grad():
            out = model(input_ids=ids, output_attentions=True, use_cache=False)
        unmasked = sum(int((w > 0).sum()) for w in out.attentions)
        ops = build(m.spec, BATCH, seq, causal_halving=True)
        assert sum(op.macs * op.calls for op in ops if op.module.endswith("scores (QK^T)")) == unmasked * SIZES["head_dim"]


def _cache_bytes(cache) -> int:
    return held_bytes([t for layer in cache.layers for t in (layer.keys, layer.values)])


def test_memory_kv_cache_equals_transformers_caches(saved):
    """`ckptstat memory`'s KV lines: the first is DynamicCache after one forward (sliding layers keep their
    window), the second, where it differs, StaticCache(max_cache_len = s)."""
    model, path = saved
    m = load(path)
    for seq in SEQS:
        ids = torch.arange(BATCH * seq).reshape(BATCH, seq) % SIZES["vocab_size"]
        with torch.no_grad():
            dynamic = model(input_ids=ids, use_cache=True).past_key_values
            static = model(input_ids=ids, use_cache=True,
                           past_key_values=T.StaticCache(config=model.config, max_cache_len=seq)).past_key_values
        kv = [line for line in memory.report(m, BATCH, seq)["lines"] if line["group"] == "kv cache"]
        assert kv[0]["bytes"] == _cache_bytes(dynamic), seq
        assert kv[-1]["bytes"] == _cache_bytes(static), seq
    sliding = tuple(i for i, layer in enumerate(dynamic.layers) if type(layer).__name__ == "DynamicSlidingWindowLayer")
    assert m.spec.sliding_layers == sliding and m.spec.sliding_window == model.config.sliding_window


def test_without_config_the_names_resolve_the_family(saved, tmp_path):
    """No config.json: the sinks and fused experts show the family; shapes give the parameters and head
    (head_dim exact from the sinks); top-k and the window are assumed, with a note."""
    model, path = saved
    bare = tmp_path / "model.safetensors"
    bare.write_bytes(open(os.path.join(path, "model.safetensors"), "rb").read())
    r = ckptstat.summarize(str(bare))
    assert r["architecture"] == {"family": "gpt_oss", "source": "tensor names", "model_type": None, "architectures": []}
    assert r["resolved"]["head"] == "lm"
    total = sum(p.numel() for p in model.parameters())
    assert r["analytic"]["predicted_params"] == r["parameters"]["unique"] == total
    assert any("top-k" in n and "assumed" in n for n in r["analytic"]["notes"] + r["notes"])
    spec = load(str(bare)).spec
    assert (spec.heads, spec.kv_heads, spec.head_dim) == (4, 2, 16)
    # GptOssModel's names (no `model.` prefix, no lm_head): the base head
    base = {n: tuple(p.shape) for n, p in model.model.named_parameters()}
    assert detect(base, None).family == "gpt_oss"


def _mxfp4_folder(tmp_path, cfg, with_config: bool) -> str:
    """The release's layout: experts' gate_up_proj / down_proj as U8 `_blocks` and `_scales`, everything else
    16-bit (fixtures/make_quantized.py write_mxfp4, which transformers 5's from_pretrained loads:
    tests/test_quantized.py test_mxfp4_layout_is_what_transformers_loads)."""
    path = mq.write_mxfp4(meta_model(T.GptOssForCausalLM, cfg, "cpu"), str(tmp_path / "mxfp4"))
    if not with_config:
        os.remove(os.path.join(path, "config.json"))
    return path


@pytest.mark.parametrize("with_config", [True, False], ids=["config", "no-config"])
def test_mxfp4_checkpoint_resolves_with_the_bf16_models_count(tmp_path, with_config):
    """Header only: the MXFP4 blocks/scales read as the logical experts' tensors (census/quant/), so the
    family resolves and the logical count is the unquantised model's parameters()."""
    # MXFP4 packs 32 values a block along the input features: hidden and intermediate multiples of 32
    cfg = T.GptOssConfig(**dict(SIZES, hidden_size=64, intermediate_size=64))
    path = _mxfp4_folder(tmp_path, cfg, with_config)
    with torch.device("meta"):
        model = T.GptOssForCausalLM._from_config(cfg)
    total = sum(p.numel() for p in model.parameters())
    r = ckptstat.summarize(path)
    assert r["architecture"]["family"] == "gpt_oss"
    assert r["quantization"]["method"].startswith("mxfp4")
    assert r["parameters"]["unique"] == total
    assert r["analytic"]["agree"] is True and r["analytic"]["predicted_params"] == total
    if with_config:   # without it, top-k is assumed (4, as released): active parameters and FLOPs follow it
        assert r["analytic"]["active_params"] == _active(model)
        eager = meta_model(T.GptOssForCausalLM, cfg, "cpu")
        assert fl.run(load(path), 1, 16)["totals"]["flops"] == fcm_flops(eager, 16, 1, "cpu")


@pytest.mark.parametrize("name", RELEASES)
def test_released_sizes_total_and_active_parameters(name):
    """The released configs on the meta device: total and active parameters against the model itself. (The
    totals are the model card's 20.91B and 116.83B; its active 3.61B and 5.13B leave out the 579M-entry
    embedding table, which this active count, as Mixtral's, includes.)"""
    cfg = T.GptOssConfig(**RELEASES[name])
    model = meta_model(T.GptOssForCausalLM, cfg)
    d = cfg.to_dict()
    d["architectures"] = ["GptOssForCausalLM"]
    pred = predict_params(from_config(d))
    assert pred["total"] == sum(p.numel() for p in model.parameters())
    assert pred["active"] == _active(model)


def test_config_without_layer_types_or_window_takes_the_classs_defaults():
    """A config.json without layer_types / sliding_window: the layers and window GptOssConfig fills in."""
    d = T.GptOssConfig(**SIZES).to_dict()
    for k in ("layer_types", "sliding_window"):
        d.pop(k)
    filled = T.GptOssConfig(**{k: v for k, v in d.items() if k != "model_type"})
    spec = from_config(d)
    assert spec.sliding_window == filled.sliding_window
    assert spec.sliding_layers == tuple(i for i, t in enumerate(filled.layer_types) if t == "sliding_attention")


@pytest.mark.parametrize("bad", [{"layer_types": ["sliding_attention"]}, {"num_local_experts": 10**9},
                                 {"num_experts_per_tok": 0}, {"num_experts_per_tok": 5}])
def test_bad_config_values_are_one_line_usage_errors(bad):
    d = T.GptOssConfig(**SIZES).to_dict()
    d.update(bad)
    with pytest.raises(UsageError, match=f"config {next(iter(bad))}"):
        from_config(d, "cfg.json")


def test_shapes_that_are_not_gpt_oss_are_a_one_line_error(saved, tmp_path, cli):
    """No config and sinks that are not one logit per head: `flops` says so in one line, no traceback."""
    from safetensors.numpy import load_file

    _, path = saved
    tensors = load_file(os.path.join(path, "model.safetensors"))
    for name in [n for n in tensors if n.endswith("self_attn.sinks")]:
        tensors[name] = np.zeros((2, 2), dtype=np.float32)
    bad = tmp_path / "model.safetensors"
    save_file(tensors, str(bad))
    rc, out, err = cli("flops", str(bad))
    assert rc != 0 and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and "self_attn.sinks [2, 2]" in err
