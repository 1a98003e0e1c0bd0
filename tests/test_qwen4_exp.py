"""Qwen4-Exp's language model (families/qwen4_exp.py) beyond the registry walk of tests/test_families.py: the QSA
indexer's per-query block matmuls at sequence lengths and compression ratios that leave incomplete blocks, the cache
at several lengths, the layer kinds the config class derives, and the Per-Layer Embeddings (n-gram tables, saved
shards, the dilated conv and its cache)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")

from test_families import cache_bytes, fcm_flops, meta_model, ours, spec_of  # noqa: E402

from ckptstat.families import get  # noqa: E402
from ckptstat.families.framework.graph import predict_params  # noqa: E402
from ckptstat.families.framework.spec import from_config  # noqa: E402
from ckptstat.families.qwen4_exp import _SIZES  # noqa: E402

LM = T.Qwen4ExpForCausalLM


def _cfg(**kw):
    return T.Qwen4ExpTextConfig(**{**_SIZES, **kw})


@pytest.mark.parametrize("kw", [
    dict(indexer_compress_ratio=2, indexer_budget=4),
    dict(indexer_compress_ratio=3, indexer_budget=3, indexer_n_heads=1, indexer_head_dim=12),
    # more layers, every expert on every token, biased attention, untied, a wider gated residual
    dict(indexer_compress_ratio=5, indexer_budget=10, num_hidden_layers=4, num_experts_per_tok=3, attention_bias=True,
         hc_count=4, hc_lowrank=3, layer_types=["linear_attention", "full_attention", "linear_attention",
                                                 "indexed_attention"]),
])
@pytest.mark.parametrize("seq,batch", [(1, 1), (5, 2), (13, 1)])
def test_flops_params_and_cache_equal_transformers(kw, seq, batch):
    """FlopCounterMode's count (the indexer's [H, D] x [D, blocks] matmul per query included: floor((i + 1) / ratio)
    blocks, none for the first ratio - 1 queries), num_parameters() and the cache's bytes."""
    cfg = _cfg(**kw)
    model = meta_model(LM, cfg, "cpu")
    spec = spec_of(LM, cfg)
    assert ours(spec, seq, batch) == fcm_flops(model, seq, batch, "cpu")
    assert predict_params(spec)["total"] == model.num_parameters()
    assert get("qwen4_exp").kv_cache(spec, batch, seq, seq, 4)[0][1] == cache_bytes(model, seq, batch)


def test_layer_kinds_without_layer_types_are_the_config_classs():
    """A config.json without layer_types: every full_attention_interval-th layer indexed, as Qwen4ExpTextConfig's
    __post_init__ derives them (its layer_types read back from the class)."""
    kw = {k: v for k, v in _SIZES.items() if k != "layer_types"} | {"num_hidden_layers": 6}
    for interval in (None, 2):
        extra = {} if interval is None else {"full_attention_interval": interval}
        cfg = T.Qwen4ExpTextConfig(**kw, **extra)
        d = {**kw, **extra, "model_type": "qwen4_exp_text", "architectures": ["Qwen4ExpForCausalLM"]}
        spec = from_config(d)
        assert spec.linear_layers == tuple(i for i, t in enumerate(cfg.layer_types) if t == "linear_attention")
        assert predict_params(spec)["total"] == meta_model(LM, cfg).num_parameters()


@pytest.mark.parametrize("kw", [
    dict(ple_layer_ids=[1], ple_embed_dim=16, ngram_size=3, heads_per_ngram=2, ngram_vocab_size_base=101,
         split_ngram_parts=2),
    # three layers, two with PLE: their tables from consecutive primes past 1000, padded to 64, saved in 3 uneven shards;
    # a wider n-gram, kernel 2
    dict(num_hidden_layers=3, layer_types=["linear_attention", "indexed_attention", "linear_attention"],
         ple_layer_ids=[3, 1], ple_embed_dim=18, ngram_size=4, heads_per_ngram=3, ngram_vocab_size_base=1000,
         make_ngram_vocab_size_divisible_by=64, split_ngram_parts=3, ple_conv_kernel_size=2),
])
def test_per_layer_embeddings_equal_transformers(kw):
    """ple_layer_ids: the n-gram tables' rows (transformers' primes), the saved shards, FLOPs at several lengths (the
    dilated conv's s outputs per channel) and the cache (the conv state and the n-gram context ids)."""
    from census_audit import saved_shapes

    cfg = _cfg(**kw, eos_token_id=2)
    model = meta_model(LM, cfg, "cpu")
    assert model.model.layers[kw["ple_layer_ids"][0] - 1].ple is not None
    spec = spec_of(LM, cfg)
    family = get("qwen4_exp")
    assert predict_params(spec)["total"] == model.num_parameters()
    assert family.expected_tensors(spec) == saved_shapes(model)
    for seq, batch in ((1, 1), (2, 2), (7, 1)):
        assert ours(spec, seq, batch) == fcm_flops(model, seq, batch, "cpu"), seq
        assert family.kv_cache(spec, batch, seq, seq, 4)[0][1] == cache_bytes(model, seq, batch), seq


def test_per_layer_embeddings_configs_transformers_refuses_are_refused():
    """A PLE layer that is not linear_attention, or no eos_token_id: transformers' config refuses them, so does ckptstat."""
    from huggingface_hub.errors import StrictDataclassClassValidationError

    from ckptstat.errors import UsageError

    kw = dict(ple_layer_ids=[2], ple_embed_dim=16, ngram_size=3, heads_per_ngram=2, ngram_vocab_size_base=101)
    d = {**_SIZES, "model_type": "qwen4_exp_text", "architectures": ["Qwen4ExpForCausalLM"]}
    for bad in (dict(kw, eos_token_id=2), dict(kw, ple_layer_ids=[1])):
        with pytest.raises(StrictDataclassClassValidationError, match="PLE|eos_token_id"):
            T.Qwen4ExpTextConfig(**{**_SIZES, **bad})
        with pytest.raises(UsageError):
            from_config({**d, **bad})


@pytest.mark.parametrize("ple", [{}, dict(ple_layer_ids=[1, 2, 3, 5], eos_token_id=248044)])
def test_published_size_parameters_are_transformers_build(ple):
    """Qwen4ExpTextConfig's defaults (40 layers, 512 experts, hc_count 4) with a QSA indexer, built on the meta device;
    with PLE on four layers, their n-gram tables of 16 heads from the primes past 20,000,000 (~41e9 parameters each)."""
    cfg = T.Qwen4ExpTextConfig(indexer_n_heads=16, indexer_kv_heads=1, indexer_head_dim=128, indexer_budget=2048,
                               indexer_compress_ratio=4, rope_parameters={"rope_type": "default", "rope_theta": 1e7,
                                                                          "partial_rotary_factor": 0.25}, **ple)
    assert predict_params(spec_of(LM, cfg))["total"] == meta_model(LM, cfg).num_parameters()


def test_the_composite_configs_text_path_equals_transformers():
    """Qwen4ExpForConditionalGeneration (model_type qwen4_exp: text_config beside a vision_config) read through its text
    config (families/wrappers.py): its text-only forward's FLOPs and cache, its parameters less the vision tower's."""
    cfg = T.Qwen4ExpConfig(text_config=dict(_SIZES), vision_config=dict(depth=1, hidden_size=16, intermediate_size=24,
                                                                         num_heads=2, out_hidden_size=16))
    cls = T.Qwen4ExpForConditionalGeneration
    model = meta_model(cls, cfg, "cpu")
    spec = spec_of(cls, cfg)
    assert (spec.family, spec.head) == ("qwen4_exp", "lm")
    assert predict_params(spec)["total"] == sum(p.numel() for n, p in model.named_parameters() if ".visual." not in n)
    for seq in (5, 8):
        assert ours(spec, seq, 2) == fcm_flops(model, seq, 2, "cpu"), seq
        assert get("qwen4_exp").kv_cache(spec, 2, seq, seq, 4)[0][1] == cache_bytes(model, seq, 2), seq
