"""Llama 4's op template (families/llama4.py) at the published size of Llama-4-Scout-17B-16E's text model, against
transformers 5 on the meta device (analysis/meta.py builds Llama4ForCausalLM from the same config; no weights):
parameters (model.parameters()), active parameters (the meta path's rule: each stacked-experts module's top_k / E;
the model card's 17B of 109B, the card's total with the vision tower), FLOPs (FlopCounterMode over one forward, every
expert's bmm's), cache bytes (the cache that forward returns: past the 8192-token chunk, the chunked layers keep 8191)
and the 8 x H100 plan at tp 8 (weights and KV cache per device, the verdict). The tiny samples' checks are
tests/test_families.py's."""
from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")

from ckptstat.analysis import flops, memory, meta  # noqa: E402
from ckptstat.analysis.memory.planner import Plan, kv_counted, kv_lines  # noqa: E402
from ckptstat.census.model import load  # noqa: E402
from ckptstat.families.framework.ops import causal_pairs  # noqa: E402

# meta-llama/Llama-4-Scout-17B-16E, config.json's text_config as published
SCOUT = dict(hidden_size=5120, intermediate_size=8192, intermediate_size_mlp=16384, num_hidden_layers=48,
             num_attention_heads=40, num_key_value_heads=8, head_dim=128, vocab_size=202048, num_local_experts=16,
             num_experts_per_tok=1, interleave_moe_layer_step=1, attention_chunk_size=8192, use_qk_norm=True,
             max_position_embeddings=10485760)


def _kv(m, b, n, ab):
    return sum(x for _, x, _ in kv_counted(m, kv_lines(m, b, n, n, ab)))


@pytest.mark.slow
def test_scout_at_its_published_size_is_what_transformers_builds_and_runs(tmp_path):
    cfg = T.AutoConfig.for_model("llama4_text", **SCOUT)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(dict(cfg.to_dict(), architectures=["Llama4ForCausalLM"], torch_dtype="bfloat16")))
    static = load(str(path))
    oracle = meta.model_of(json.loads(path.read_text()), str(path), str(path))
    assert static.oracle is None and oracle.oracle is not None and static.spec.family == "llama4"
    assert static.params == oracle.params
    assert static.predicted["active"] == oracle.predicted["active"]
    assert abs(static.params - 109e9) / 109e9 < 0.03 and abs(static.predicted["active"] - 17e9) / 17e9 < 0.03
    for seq in (32, 9000):   # 9000: past the chunk, where the chunked layers' cache stops growing
        assert flops.run(static, 1, seq)["totals"]["flops"] == flops.run(oracle, 1, seq)["totals"]["flops"], seq
        assert _kv(static, 1, seq, 2) == meta.cache_bytes(oracle.oracle.forward(1, seq)[1]), seq

    def fit(m):
        plan = Plan(tp=8, gpus=8, kv_dtype="bf16", capacity=80 << 30)   # an H100-80, as `memory --gpu H100` reads it
        r = memory.report(m, 1, 9000, plan=plan)["fit"]
        return {x["group"]: x["bytes"] for x in r["lines"] if x["group"] in ("weights", "kv cache")}, r["fits"]

    assert fit(static) == fit(oracle)
    assert fit(static)[1] is True


def test_chunked_pairs_are_a_triangle_per_chunk():
    """--causal-halving's pairs of chunked attention: transformers' chunked mask, counted."""
    from transformers.masking_utils import and_masks, causal_mask_function, chunked_overlay

    for n, chunk in ((11, 4), (8, 4), (3, 4), (9, 1)):
        mask = and_masks(causal_mask_function, chunked_overlay(chunk, torch.tensor([0])))
        kept = sum(bool(mask(0, 0, torch.tensor(q), torch.tensor(k))) for q in range(n) for k in range(n))
        assert causal_pairs(n, chunk, chunked=True) == kept, (n, chunk)


# Llama4TextConfig(attention_chunk_size=None), which transformers takes (`int | None`): every layer attends all tokens
NO_CHUNK = dict(vocab_size=128, hidden_size=64, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                head_dim=32, intermediate_size=48, intermediate_size_mlp=96, num_local_experts=3, num_experts_per_tok=1,
                interleave_moe_layer_step=1, attention_chunk_size=None, use_qk_norm=False, no_rope_layers=[1, 1, 0])


def test_a_saved_null_chunk_is_full_attention_as_transformers_runs_it(tmp_path):
    """config.json's "attention_chunk_size": null (save_pretrained writes it so): parameters (model.parameters()),
    FLOPs (FlopCounterMode, eager attention, the CPU forward's experts) and cache bytes (the DynamicCache that forward
    returns: every layer all s tokens) of the tiny model itself; a null the config class refuses is one line saying so."""
    from conftest import held_bytes
    from test_families import fcm_flops, meta_model

    from ckptstat.errors import UsageError

    model = meta_model(T.Llama4ForCausalLM, T.Llama4TextConfig(**NO_CHUNK), "cpu")
    model.set_experts_implementation("eager")
    model.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert "attention_chunk_size" in saved and saved["attention_chunk_size"] is None
    m = load(str(tmp_path))
    assert m.predicted["total"] == sum(p.numel() for p in model.parameters())
    for seq in (5, 9):
        assert flops.run(m, 2, seq)["totals"]["flops"] == fcm_flops(model, seq, 2, "cpu"), seq
        ids = torch.arange(2 * seq).reshape(2, seq) % NO_CHUNK["vocab_size"]
        with torch.no_grad():
            cache = model(input_ids=ids, use_cache=True).past_key_values
        assert _kv(m, 2, seq, 4) == held_bytes([t for layer in cache.layers for t in (layer.keys, layer.values)]), seq
    (tmp_path / "config.json").write_text(json.dumps(dict(saved, intermediate_size_mlp=None)))
    with pytest.raises(UsageError, match="intermediate_size_mlp is null, which the llama4_text config class does not take"):
        load(str(tmp_path))
    # chunked layers with a null chunk: transformers' forward cannot run it either
    chunked = dict(saved, layer_types=["chunked_attention"] * 2 + ["full_attention"])
    bad = meta_model(T.Llama4ForCausalLM, T.Llama4TextConfig(**dict(NO_CHUNK, layer_types=chunked["layer_types"])), "cpu")
    with pytest.raises(TypeError), torch.no_grad():
        bad(input_ids=torch.zeros((1, 4), dtype=torch.long))
    (tmp_path / "config.json").write_text(json.dumps(chunked))
    with pytest.raises(UsageError, match="attention_chunk_size is null, but layer_types has chunked_attention layers"):
        load(str(tmp_path))
