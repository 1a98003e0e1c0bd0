"""KV-cache lines of the Gemma and DeepSeek families beyond tests/test_families.py's check of every decoder's
first line against the cache a forward leaves: Gemma's sliding layers, Gemma 4's and 3n's window line (StaticCache and
the cache after a decode step), DeepSeek's two lines. DeepSeek's first
line is the MLA latent transformers 5 caches (the width of the model's own kv_a_proj_with_mqa output: the
normalised latent plus the shared rope key); its second, transformers 4's per-head K and V."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")

from ckptstat.families import get  # noqa: E402
from ckptstat.families.framework.base import Sample  # noqa: E402
from ckptstat.families.framework.spec import from_config  # noqa: E402

FAMILY_NAMES = ("qwen_moe", "gemma", "deepseek")
SEQS = (2, 8, 16)
BATCH = 2


def _model(sample: Sample, name: str):
    cfg = getattr(T, sample.config)(**sample.kwargs)
    torch.manual_seed(0)
    model = getattr(T, name)._from_config(cfg, attn_implementation="eager").eval()
    d = cfg.to_dict()
    d["architectures"] = [name]
    return model, from_config(d)


def test_deepseek_lines_are_the_latent_then_transformers_4s_per_head_cache():
    """The first line (what memory and the planner count) is the latent DynamicCache holds, as the test above
    checks; it is the width of the model's own kv_a_proj_with_mqa output (the latent plus the shared rope key), every
    family sample's causal LM (DeepSeek-V2/V3/V3.2, GLM-4.7-Flash, GLM-5, Youtu, A.X-K1).
    The second, transformers 4's eager per-head K and V: kv_b_proj's output (k_nope, v) plus the rope key per head."""
    family = get("deepseek")
    for sample in family.samples:
        model, spec = _model(sample, next(m for m in sample.models if m.endswith("ForCausalLM")))
        # ... and, with DeepSeek Sparse Attention (V3.2, GLM-5), the indexer's key per token it caches beside the latent
        latent = sum(layer.self_attn.kv_a_proj_with_mqa.out_features
                     + (idx.wk.out_features if (idx := getattr(layer.self_attn, "indexer", None)) is not None else 0)
                     for layer in model.model.layers)
        per_head = sum(layer.self_attn.kv_b_proj.out_features + model.config.num_attention_heads
                       * model.config.qk_rope_head_dim for layer in model.model.layers)
        assert family.kv_cache is not None
        (label, nbytes, _), (full_label, full, _) = family.kv_cache(spec, BATCH, 16, 16, 2)
        assert label.startswith("MLA latent") and full_label.startswith("per-head K+V")
        assert (nbytes, full) == (latent * BATCH * 16 * 2, per_head * BATCH * 16 * 2)


def test_gemma_sliding_layers_follow_layer_types():
    """Which layers slide comes from the config's layer_types, as the model's cache layers show."""
    for sample in (s for s in get("gemma").samples if s.config != "GemmaConfig"):   # (Gemma 1 has no sliding layers)
        model, spec = _model(sample, "Gemma3ForCausalLM" if "Gemma3" in sample.config else "Gemma2ForCausalLM")
        with torch.no_grad():
            cache = model(input_ids=torch.zeros((1, 8), dtype=torch.long), use_cache=True).past_key_values
        sliding = tuple(i for i, layer in enumerate(cache.layers) if type(layer).__name__ == "DynamicSlidingWindowLayer")
        assert sliding and spec.sliding_layers == sliding


def test_gemma_causal_halving_counts_the_keys_the_mask_lets_through():
    """--causal-halving: the score MACs equal the unmasked (query, key) pairs of the model's own attention
    (nonzero probabilities from output_attentions), sliding layers seeing only their window, x head_dim."""
    from ckptstat.families.framework.graph import build

    sample = get("gemma").samples[3]
    model, spec = _model(sample, "Gemma3ForCausalLM")
    seq = 12
    with torch.no_grad():
        out = model(input_ids=torch.arange(BATCH * seq).reshape(BATCH, seq) % 97, output_attentions=True, use_cache=False)
    unmasked = sum(int((w > 0).sum()) for w in out.attentions)
    ops = build(spec, BATCH, seq, causal_halving=True)
    scores = sum(op.macs * op.calls for op in ops if op.module.endswith("scores (QK^T)"))
    assert scores == unmasked * spec.head_dim


def _held(cache) -> int:
    """The bytes of a cache's K/V storages (a DummyLayer, a KV-shared layer's, holds none)."""
    from conftest import held_bytes

    return held_bytes([t for layer in cache.layers for t in (getattr(layer, "keys", None), getattr(layer, "values", None))
                       if isinstance(t, torch.Tensor)])


@pytest.mark.parametrize("name,index", [("gemma4", 0), ("gemma4", 1), ("gemma4", 3), ("gemma3n", 0), ("gemma3n", 1)])
def test_gemma4_and_3n_window_line_is_the_static_and_decoding_cache(name, index, tmp_path):
    """`ckptstat memory`'s KV lines of Gemma 4 (text, unified) and Gemma 3n text, saved by save_pretrained (per-layer
    head sizes, KV-shared layers, windows of 4): the first is the DynamicCache a forward of s tokens leaves, the last,
    where sliding layers hold less, both transformers' StaticCache(max_cache_len = s) after that forward and the
    DynamicCache after one more decoded token (the line at s + 1)."""
    from ckptstat.analysis import memory
    from ckptstat.census.model import load

    sample = get(name).samples[index]
    cls = next(m for m in sample.models if m.endswith("ForCausalLM"))
    model, _ = _model(sample, cls)
    model.save_pretrained(tmp_path)
    m = load(str(tmp_path))

    def kv(seq):
        return [x["bytes"] for x in memory.report(m, BATCH, seq)["lines"] if x["group"] == "kv cache"]

    for seq in (3, 4, 9):   # below, at and past the window
        ids = torch.arange(BATCH * seq).reshape(BATCH, seq) % 50
        with torch.no_grad():
            dynamic = model(input_ids=ids, use_cache=True).past_key_values
            prefill = _held(dynamic)
            static = model(input_ids=ids, use_cache=True,
                           past_key_values=T.StaticCache(config=model.config, max_cache_len=seq)).past_key_values
            decoded = model(input_ids=ids[:, -1:], past_key_values=dynamic, use_cache=True).past_key_values
        lines = kv(seq)
        assert lines[0] == prefill and lines[-1] == _held(static), (seq, lines)
        assert (len(lines) == 2) == (prefill != _held(static)), (seq, lines)
        assert kv(seq + 1)[-1] == _held(decoded), seq
    assert len(kv(9)) == 2   # past the window the line is there


@pytest.mark.parametrize("model_type,bad", [("qwen2_moe", {"mlp_only_layers": "1"}), ("gemma2", {"layer_types": ["x"]}),
                                            ("deepseek_v3", {"kv_lora_rank": -1}),
                                            # per-layer tables are built one entry each: no looping 10^9 times
                                            ("gemma2", {"num_hidden_layers": 10**9}),
                                            ("deepseek_v3", {"n_routed_experts": 10**9})])
def test_bad_config_values_are_one_line_usage_errors(model_type, bad):
    from ckptstat.errors import UsageError

    cfg = {"qwen2_moe": T.Qwen2MoeConfig, "gemma2": T.Gemma2Config, "deepseek_v3": T.DeepseekV3Config}[model_type]().to_dict()
    cfg.update(bad)
    with pytest.raises(UsageError, match=f"config {next(iter(bad))}"):
        from_config(cfg, "cfg.json")



# The expected-tensor template of these families' samples: tests/test_families.py
# test_expected_tensors_are_the_models_named_parameters (as save_pretrained writes them: per-expert, not fused).
