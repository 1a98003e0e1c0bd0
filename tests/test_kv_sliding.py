"""Sliding-window KV caches of the decoder families (families/framework/decoders.py `sliding`, base.py
`decoder_kv_cache`; Gemma's layer pattern, families/gemma.py) against what transformers' caches hold.

For each config below, a tiny *ForCausalLM (real weights on the CPU: MoE routing needs values) runs one
forward with use_cache=True at lengths below, at and above its window. The oracles: the bytes of every
key and value storage in the DynamicCache it returns (ckptstat's first KV line: a sliding layer's window is a view
of all the forward's states), which of its layers are
DynamicSlidingWindowLayer (the spec's sliding layers), and the bytes a StaticCache(max_cache_len = s)
holds after the same forward (the second line where the window makes it differ)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")

from conftest import held_bytes  # noqa: E402

from ckptstat.errors import UsageError  # noqa: E402
from ckptstat.families import get  # noqa: E402
from ckptstat.families.framework.spec import from_config  # noqa: E402

BATCH = 2
SEQS = (2, 4, 5, 9, 16)
_SIZES = dict(hidden_size=32, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, intermediate_size=37,
              vocab_size=99, max_position_embeddings=64)
_QWEN_WINDOW = dict(use_sliding_window=True, sliding_window=4)
# intermediate 44: transformers 5's default experts implementation (grouped_mm) needs 16-byte rows, as released sizes have
_MOE = dict(num_local_experts=4, num_experts_per_tok=2, intermediate_size=44)
_QMOE = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16)

# (config class, model class, kwargs): windows shorter than most test lengths
CASES = [
    pytest.param("MistralConfig", "MistralForCausalLM", dict(_SIZES, sliding_window=4), id="mistral-all-layers"),
    pytest.param("MistralConfig", "MistralForCausalLM", dict(_SIZES, sliding_window=1), id="mistral-window-1"),
    pytest.param("MistralConfig", "MistralForCausalLM", dict(_SIZES, sliding_window=None), id="mistral-no-window"),
    pytest.param("Qwen2Config", "Qwen2ForCausalLM", dict(_SIZES, **_QWEN_WINDOW, max_window_layers=1), id="qwen2-window-layers"),
    pytest.param("Qwen2Config", "Qwen2ForCausalLM", dict(_SIZES, **_QWEN_WINDOW, max_window_layers=3), id="qwen2-all-full"),
    pytest.param("Qwen2Config", "Qwen2ForCausalLM", dict(_SIZES, sliding_window=4, max_window_layers=0), id="qwen2-unused"),
    pytest.param("Qwen3Config", "Qwen3ForCausalLM", dict(_SIZES, **_QWEN_WINDOW, max_window_layers=2, head_dim=16), id="qwen3"),
    pytest.param("Qwen3Config", "Qwen3ForCausalLM",
                 dict(_SIZES, **_QWEN_WINDOW, layer_types=["sliding_attention", "full_attention", "sliding_attention"]),
                 id="qwen3-layer-types"),
    pytest.param("Phi3Config", "Phi3ForCausalLM", dict(_SIZES, sliding_window=5, pad_token_id=0), id="phi3"),
    pytest.param("MixtralConfig", "MixtralForCausalLM", dict(_SIZES | _MOE, sliding_window=4), id="mixtral"),
    pytest.param("Qwen2MoeConfig", "Qwen2MoeForCausalLM", dict(_SIZES, **_QMOE, **_QWEN_WINDOW, max_window_layers=1,
                                                               shared_expert_intermediate_size=24), id="qwen2-moe"),
    pytest.param("Qwen3MoeConfig", "Qwen3MoeForCausalLM", dict(_SIZES, **_QMOE, **_QWEN_WINDOW, head_dim=16), id="qwen3-moe"),
    # families/gemma.py reads its own layer pattern and shares decoder_kv_cache
    pytest.param("Gemma2Config", "Gemma2ForCausalLM", dict(_SIZES, head_dim=8, sliding_window=4), id="gemma2"),
    pytest.param("Gemma2Config", "Gemma2ForCausalLM", dict(_SIZES, head_dim=8, sliding_window=4,
                                                           layer_types=["full_attention"] * 3), id="gemma2-all-full"),
    pytest.param("Gemma3TextConfig", "Gemma3ForCausalLM", dict(_SIZES, head_dim=8, sliding_window=4, sliding_window_pattern=2),
                 id="gemma3-pattern"),
    pytest.param("Gemma3TextConfig", "Gemma3ForCausalLM", dict(_SIZES, head_dim=8, sliding_window=1), id="gemma3-window-1"),
]

# Qwen2-MoE's eager attention slices a 4.x-style mask that a StaticCache's window does not fit
# (modeling_qwen2_moe.py: "The size of tensor a (5) must match the size of tensor b (4)"): DynamicCache only.
NO_STATIC = {"qwen2-moe"}


def _build(config: str, model: str, kwargs: dict):
    cfg = getattr(T, config)(**kwargs)
    torch.manual_seed(0)
    m = getattr(T, model)._from_config(cfg, attn_implementation="eager").eval()
    d = cfg.to_dict()
    d["architectures"] = [model]
    return m, d


def _bytes(cache) -> int:
    """The memory the cache's keys and values hold: each tensor's storage (a sliding layer's keys are a view of the
    states it concatenated, whose storage stays whole)."""
    return held_bytes([t for layer in cache.layers for t in (layer.keys, layer.values)])


def _forward(model, seq: int, cache=None):
    ids = torch.arange(BATCH * seq).reshape(BATCH, seq) % model.config.vocab_size
    with torch.no_grad():
        return model(input_ids=ids, use_cache=True, past_key_values=cache).past_key_values


@pytest.mark.parametrize("config,model_name,kwargs", CASES)
def test_kv_cache_lines_equal_transformers_caches(config, model_name, kwargs, request):
    static_too = request.node.callspec.id not in NO_STATIC
    model, d = _build(config, model_name, kwargs)
    spec = from_config(d)
    kv_cache = get(spec.family).kv_cache
    assert kv_cache is not None
    for seq in SEQS:
        dynamic = _forward(model, seq)
        lines = kv_cache(spec, BATCH, seq, seq, 4)
        assert lines[0][1] == _bytes(dynamic), (seq, lines[0])
        if static_too:
            static = _forward(model, seq, T.StaticCache(config=model.config, max_cache_len=seq))
            assert lines[-1][1] == _bytes(static), (seq, lines)
    # which layers slide: the cache's DynamicSlidingWindowLayers (all of them when the spec lists none)
    sliding = tuple(i for i, layer in enumerate(dynamic.layers) if type(layer).__name__ == "DynamicSlidingWindowLayer")
    if not sliding:
        assert spec.sliding_window is None
    else:
        assert spec.sliding_window == model.config.sliding_window
        assert (spec.sliding_layers or tuple(range(spec.layers))) == sliding


@pytest.mark.parametrize("config,model_name,kwargs", [c for c in CASES if "Qwen2Config" in c.values or "Qwen3Config" in c.values])
def test_qwen_configs_without_layer_types_derive_them_from_max_window_layers(config, model_name, kwargs):
    """config.json files written before transformers had layer_types (Qwen2, Qwen2.5): the layers follow
    max_window_layers, as Qwen2Config derives them."""
    _, d = _build(config, model_name, kwargs)
    old = dict(d)
    del old["layer_types"]
    if "layer_types" in kwargs:
        return
    assert from_config(old).sliding_layers == from_config(d).sliding_layers
    assert from_config(old).sliding_window == from_config(d).sliding_window


def test_config_defaults_the_class_would_apply():
    d = T.MistralConfig(**_SIZES).to_dict()
    del d["sliding_window"]        # MistralConfig's default: 4096
    assert from_config(d).sliding_window == 4096
    d = T.Qwen2Config(**_SIZES, sliding_window=4, max_window_layers=0).to_dict()
    d["sliding_window"] = 4        # as Qwen2.5's config.json: a window with use_sliding_window false
    assert from_config(d).sliding_window is None
    del d["use_sliding_window"]    # absent: Qwen2Config's default False
    assert from_config(d).sliding_window is None


@pytest.mark.parametrize("bad", [["sliding_attention"], "sliding_attention", [1, 2, 3], ["x", "y", "z"]])
def test_bad_layer_types_are_one_line_usage_errors(bad):
    d = T.Qwen2Config(**_SIZES, **_QWEN_WINDOW).to_dict()
    d["layer_types"] = bad
    with pytest.raises(UsageError, match="config layer_types"):
        from_config(d, "cfg.json")


def test_sliding_lines_keep_their_shape():
    """analysis/memory/planner.py reads (label, bytes, rule) lines, the first what transformers allocates."""
    _, d = _build(*CASES[3].values)
    spec = from_config(d)
    lines = get(spec.family).kv_cache(spec, 1, 100, 100, 2)
    assert [len(x) for x in lines] == [3, 3]
    assert all(isinstance(label, str) and isinstance(rule, str) for label, _, rule in lines)
    assert "DynamicSlidingWindowLayer" in lines[0][2] and lines[1][0] == "decoding or static cache, window 4"


# config classes that derive layer_types from a period when config.json has none (written before transformers 4.53:
# Command R7B's holds sliding_window_pattern, no layer_types): (config, model, kwargs, the period key config.json holds)
PERIODIC = [
    pytest.param("Cohere2Config", "Cohere2ForCausalLM", dict(_SIZES, num_hidden_layers=6, sliding_window=4),
                 {"sliding_window_pattern": 3}, id="cohere2"),
    pytest.param("Exaone4Config", "Exaone4ForCausalLM", dict(_SIZES, num_hidden_layers=6, sliding_window=4,
                                                             sliding_window_pattern=3), {}, id="exaone4"),
    pytest.param("Olmo3Config", "Olmo3ForCausalLM", dict(_SIZES, num_hidden_layers=6, sliding_window=4), {}, id="olmo3"),
    pytest.param("CwmConfig", "CwmForCausalLM", dict(_SIZES, num_hidden_layers=6, sliding_window=4), {}, id="cwm"),
    # a dense prefix with its own period, then the MoE layers' counted afresh (families/cohere2_moe.py)
    pytest.param("Cohere2MoeConfig", "Cohere2MoeForCausalLM",
                 dict(_SIZES, num_hidden_layers=6, sliding_window=4, num_experts=4, num_experts_per_tok=2, intermediate_size=44,
                      prefix_dense_intermediate_size=40, prefix_dense_sliding_window_pattern=2, sliding_window_pattern=3),
                 {"first_k_dense_replace": 2}, id="cohere2-moe"),
]


@pytest.mark.parametrize("config,model_name,kwargs,period", PERIODIC)
def test_periodic_configs_without_layer_types(config, model_name, kwargs, period):
    """Without layer_types, which layers slide is the config class's period rule (not every layer): the DynamicCache's
    DynamicSlidingWindowLayers, and the StaticCache's bytes on the second line."""
    model, d = _build(config, model_name, dict(kwargs, **period))
    d = {k: v for k, v in d.items() if k != "layer_types"} | period
    spec = from_config(d)
    seq = 9
    dynamic = _forward(model, seq)
    sliding = tuple(i for i, layer in enumerate(dynamic.layers) if type(layer).__name__ == "DynamicSlidingWindowLayer")
    assert 0 < len(sliding) < spec.layers
    assert spec.sliding_layers == sliding
    lines = get(spec.family).kv_cache(spec, BATCH, seq, seq, 4)
    assert lines[0][1] == _bytes(dynamic)
    assert lines[-1][1] == _bytes(_forward(model, seq, T.StaticCache(config=model.config, max_cache_len=seq)))
