"""ZAYA (families/zaya.py) beyond tests/test_families.py's walk: more config variants (kernels of one, grouped query
heads, sliding layers at lengths around the window, one token), the state in the model's dtype, and the experts (every
token through one, a token the router skips too), each against transformers' model on the CPU."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")

from test_families import BATCH, cache_bytes, fcm_flops, meta_model, ours, spec_of  # noqa: E402

from ckptstat.families import zaya  # noqa: E402
from ckptstat.families.framework.graph import predict_params  # noqa: E402

VARIANTS = {
    # kernels of one: no left padding, an empty conv state (which transformers 5.25's cache cannot hold: it keeps the
    # last [-0:] tokens, all of them; the oracle runs without a cache, and the cache is not compared)
    "kernels-1": dict(zaya._SIZES, cca_time0=1, cca_time1=1, use_cache=False),
    # one kernel of one, eight heads over two K/V heads, four experts' wider MLP, untied
    "gqa-4": dict(zaya._SIZES, num_attention_heads=8, num_key_value_heads=2, cca_time0=1, cca_time1=3,
                  moe_intermediate_size=40, tie_word_embeddings=False),
    # sliding layers of window 4 between full ones, biased attention and head, another rotary fraction
    "sliding": dict(zaya._SIZES, num_hidden_layers=3, sliding_window=4, attention_bias=True, lm_head_bias=True,
                    layer_types=["hybrid_sliding", "hybrid", "hybrid_sliding"],
                    rope_parameters={"hybrid": {"rope_type": "default", "rope_theta": 1e6, "partial_rotary_factor": 0.25},
                                     "hybrid_sliding": {"rope_type": "default", "rope_theta": 1e4,
                                                        "partial_rotary_factor": 1.0}}),
}


@pytest.mark.parametrize("name", list(VARIANTS))
def test_variants_params_flops_and_cache(name):
    cfg = T.ZayaConfig(**VARIANTS[name])
    model = meta_model(T.ZayaForCausalLM, cfg, "cpu")
    spec = spec_of(T.ZayaForCausalLM, cfg)
    assert predict_params(spec)["total"] == model.num_parameters()
    for seq in (1, 3, 4, 5, 9):
        assert ours(spec, seq, BATCH) == fcm_flops(model, seq, BATCH, "cpu"), seq
        if cfg.use_cache:
            assert zaya.FAMILY.kv_cache(spec, BATCH, seq, seq, 4)[0][1] == cache_bytes(model, seq, BATCH), seq


def test_cache_is_in_the_models_dtype():
    """K, V, the conv state and the delayed value's state all in the model's dtype (the residual stream's float32
    does not reach them)."""
    cfg = T.ZayaConfig(**VARIANTS["sliding"])
    model = meta_model(T.ZayaForCausalLM, cfg, "cpu").to(torch.bfloat16)
    spec = spec_of(T.ZayaForCausalLM, cfg)
    for seq in (2, 7):
        assert zaya.FAMILY.kv_cache(spec, BATCH, seq, seq, 2)[0][1] == cache_bytes(model, seq, BATCH), seq


def test_skipped_tokens_still_run_an_expert():
    """The template counts every token through one expert. A token the router sends to the skip class (its
    balancing bias raised, as a trained model's saved buffer may be) is re-indexed to expert 0 with weight 0
    (ZayaRouter.forward's masked_fill): it still runs one, so the count stays exact."""
    cfg = T.ZayaConfig(**zaya._SIZES)
    model = meta_model(T.ZayaForCausalLM, cfg, "cpu")
    spec, seq = spec_of(T.ZayaForCausalLM, cfg), 6
    for layer in model.model.layers:
        layer.mlp.gate.balancing_biases[-1] = 2.0   # above any probability: the skip class always wins
    for implementation in ("grouped_mm", "eager"):
        model.set_experts_implementation(implementation)
        assert ours(spec, seq, BATCH) == fcm_flops(model, seq, BATCH, "cpu"), implementation
