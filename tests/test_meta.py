"""The meta path (ckptstat/analysis/meta.py): transformers on the meta device answers what no op template describes.

Where the static path answers too, both give the same parameters, active parameters, FLOPs, cache bytes and planner
weights (families' own tiny samples, and Qwen3-Next at its published size). Where only the meta path answers (Jamba,
Falcon-H1, GraniteMoeHybrid, Gemma 3n text), its parameters are those of a CPU build's model.parameters() and its cache bytes
those of the cache an actual CPU forward returns, at lengths other than the one the rule is read from."""
from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")

from ckptstat.analysis import flops, memory, meta, torch_flops  # noqa: E402
from ckptstat.analysis.memory.planner import Plan, kv_counted, kv_lines  # noqa: E402
from ckptstat.analysis.memory.tp_states import rank_states  # noqa: E402
from ckptstat.census.model import load  # noqa: E402
from ckptstat.families import get  # noqa: E402
from ckptstat.formats.configs import load_config  # noqa: E402


def _config(tmp_path, config_cls: str, kwargs: dict, arch: str) -> str:
    """config.json as save_pretrained writes it (transformers 5 tags the floats JSON cannot hold: the Mamba2 mixers'
    time_step_limit [0.0, {"__float__": "Infinity"}], which ckptstat reads back as transformers does)."""
    cfg = getattr(T, config_cls)(**kwargs)
    cfg.architectures = [arch]
    cfg.save_pretrained(tmp_path)
    return str(tmp_path / "config.json")


def _kv(m, b, n, ab):
    return sum(x for _, x, _ in kv_counted(m, kv_lines(m, b, n, n, ab)))


def _weights(m, tp):
    fit = memory.report(m, 1, 8, plan=Plan(tp=tp, gpus=tp))["fit"]
    return next(x["bytes"] for x in fit["lines"] if x["group"] == "weights")


SAME = [("llama", "LlamaForCausalLM"), ("qwen_moe", "Qwen3MoeForCausalLM"), ("gemma", "Gemma2ForCausalLM"),
        ("qwen3", "Qwen3ForCausalLM"), ("cohere", "Cohere2ForCausalLM"), ("exaone4", "Exaone4ForCausalLM"),
        ("qwen3_next", "Qwen3NextForCausalLM"), ("mamba2", "Mamba2ForCausalLM"), ("bamba", "BambaForCausalLM"),
        ("jamba", "JambaForCausalLM"), ("granitemoehybrid", "GraniteMoeHybridForCausalLM"),
        ("falcon_h1", "FalconH1ForCausalLM"), ("nemotron_h", "NemotronHForCausalLM"), ("gemma3n", "Gemma3nForCausalLM"),
        ("gemma4", "Gemma4ForCausalLM"), ("zamba", "ZambaForCausalLM"), ("zamba2", "Zamba2ForCausalLM")]


@pytest.mark.parametrize("family,arch,nth",
                         [(f, a, 0) for f, a in SAME] + [("granitemoehybrid", "GraniteMoeHybridForCausalLM", 2),
                                                         ("zamba", "ZambaForCausalLM", 1),
                                                         ("zamba2", "Zamba2ForCausalLM", 1)])
def test_meta_path_equals_the_static_path_where_both_answer(tmp_path, family, arch, nth):
    """(nth: the family's nth sample of `arch`; Granite 4 Micro's, without experts, the third; Zamba's untied, the
    second; Zamba2's untied, two blocks and attention adapters, the second)"""
    sample = [s for s in get(family).samples if arch in s.models][nth]
    path = _config(tmp_path, sample.config, dict(sample.kwargs), arch)
    static = load(path)
    m = meta.model_of(load_config(path), path, path)   # (as the CLI reads it: formats/registry.py)
    assert m.oracle is not None and static.oracle is None
    assert m.params == static.params
    assert m.predicted.get("active") == static.predicted.get("active")
    for seq in (8, 16):
        assert flops.run(m, 2, seq)["totals"]["flops"] == flops.run(static, 2, seq)["totals"]["flops"], seq
        for ab in (2, 4):
            assert _kv(m, 2, seq, ab) == _kv(static, 2, seq, ab), (seq, ab)
    heads = static.spec.heads
    for tp in (1, 2) if heads % 2 == 0 else (1,):
        assert _weights(m, tp) == _weights(static, tp), tp


@pytest.mark.parametrize("arch", ["T5Gemma2ForConditionalGeneration", "T5Gemma2ForSequenceClassification"])
def test_meta_parameters_of_an_embedding_with_a_vector_beside_its_table(tmp_path, arch):
    """T5Gemma2's embed_tokens holds eoi_embedding beside its table: the meta path's parameter ops count it as a 1-D
    parameter (an IndexError once), as many parameters as the op template predicts (families/t5gemma2.py; its forward
    cannot run on meta: .item())."""
    sample = next(s for s in get("t5gemma2").samples if arch in s.models)
    path = _config(tmp_path, sample.config, dict(sample.kwargs), arch)
    m = meta.model_of(load_config(path), path, path)
    assert m.params == load(path).params == m.predicted["total"]


def test_grouped_mm_rule_on_real_offsets_counts_the_routed_rows():
    """On real tensors the rule reads offs[-1] (rows past it go through no expert), on meta every row."""
    a, b = torch.zeros(6, 4), torch.zeros(3, 4, 5)
    assert torch_flops.grouped_mm_flops(a, b, torch.tensor([2, 3, 4])) == 2 * 4 * 4 * 5
    assert torch_flops.grouped_mm_flops(a.to("meta"), b.to("meta"), torch.tensor([2, 3, 4], device="meta")) == 2 * 6 * 4 * 5


# tiny configs no family module models (transformers 5's config classes): variants the templates refuse
HYBRIDS = {
    # Cohere with use_qk_norm: a LayerNorm over each head's [heads, d], which the cohere layout refuses
    "cohere": ("CohereForCausalLM", dict(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        vocab_size=99, use_qk_norm=True)),
}


@pytest.mark.parametrize("model_type", HYBRIDS)
def test_meta_path_answers_what_no_template_models(tmp_path, cli, model_type):
    arch, kwargs = HYBRIDS[model_type]
    cfg = T.AutoConfig.for_model(model_type, **kwargs)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(dict(cfg.to_dict(), architectures=[arch])))
    torch.manual_seed(0)
    model = getattr(T, arch)._from_config(cfg, attn_implementation="eager").eval()   # fp32, on the CPU
    m = meta.load(str(path))
    assert m.oracle is not None and m.params == sum(p.numel() for p in model.parameters())
    for b, n in ((2, 3), (1, 11)):
        with torch.no_grad():
            out = model(input_ids=torch.arange(b * n).reshape(b, n) % cfg.vocab_size, use_cache=True)
        assert _kv(m, b, n, 4) == meta.cache_bytes(out["cache"] if "cache" in out else out.past_key_values), (b, n)
    r = json.loads(cli("flops", str(path), "--json")[1])
    assert r["computed_by"].startswith(f"computed by transformers {T.__version__} on the meta device: FlopCounterMode")
    assert r["runs"][0]["totals"]["flops"] > 0
    code, out, _ = cli("memory", str(path), "--json", "--gpu", "H100", "--tp", "2", "--gpus", "2")
    assert code == 0 and json.loads(out)["fit"]["fits"] is True


def test_refusal_names_the_run_extra_when_transformers_is_absent(tmp_path, monkeypatch, cli):
    arch, kwargs = HYBRIDS["cohere"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(dict(T.AutoConfig.for_model("cohere", **kwargs).to_dict(), architectures=[arch])))
    monkeypatch.setattr(meta, "available", lambda: False)
    code, out, err = cli("flops", str(path))
    assert code == 2 and not out and err.count("\n") == 1 and "`run` extra" in err and "meta device" in err


# ---- published sizes on the meta device (the text models' config.json values, as published) ----

PUBLISHED = {
    # Qwen/Qwen3-Next-80B-A3B-Instruct: 80B parameters, 3B active (model card)
    "qwen3_next": ("Qwen3NextForCausalLM", dict(
        hidden_size=2048, intermediate_size=5120, num_hidden_layers=48, num_attention_heads=16, num_key_value_heads=2,
        head_dim=256, vocab_size=151936, num_experts=512, num_experts_per_tok=10, moe_intermediate_size=512,
        shared_expert_intermediate_size=512, full_attention_interval=4, linear_num_key_heads=16,
        linear_num_value_heads=32, linear_key_head_dim=128, linear_value_head_dim=128, linear_conv_kernel_dim=4,
        partial_rotary_factor=0.25, max_position_embeddings=262144), (80e9, 3e9)),
    # FalconH1Config's defaults; a Granite-4 hybrid MoE at the sizes written here (recalled, not a checked config.json:
    # no model-card total asserted); Gemma3nTextConfig's defaults (Gemma-3n E4B's text model)
    "falcon_h1": ("FalconH1ForCausalLM", {}, None),
    "granitemoehybrid": ("GraniteMoeHybridForCausalLM", dict(
        hidden_size=4096, num_hidden_layers=40, num_attention_heads=32, num_key_value_heads=8, vocab_size=100352,
        num_local_experts=72, num_experts_per_tok=10, intermediate_size=1536, shared_intermediate_size=8192,
        mamba_n_heads=128, mamba_d_head=64, mamba_d_state=128, mamba_n_groups=1, mamba_expand=2, mamba_d_conv=4,
        layer_types=["attention" if i in (5, 15, 25, 35) else "mamba" for i in range(40)]), None),
    "gemma3n_text": ("Gemma3nForCausalLM", {}, None),
}


# published sizes an op template also answers (the static path)
STATIC = ("qwen3_next", "granitemoehybrid", "falcon_h1", "gemma3n_text")


# published sizes the static path answers (families/mamba2.py, bamba.py, jamba.py, granitemoehybrid.py: layout_ssm.py's
# mixers): Mamba2Config's defaults (Mamba-Codestral-7B's sizes); Bamba-9B's text sizes as recalled (attention on layers
# 9, 18 and 27), not a checked config.json; ai21labs/AI21-Jamba-Mini-1.5: 52B parameters, 12B active (model card). The
# token lengths: within one chunk of 256 and across chunks (Jamba's Mamba1 scan has no chunks and loops over tokens on
# meta: 32 alone)
PUBLISHED_STATIC = {
    "mamba2": ("Mamba2ForCausalLM", {}, (32, 300), None),
    "bamba": ("BambaForCausalLM", dict(
        hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
        vocab_size=128256, attn_layer_indices=[9, 18, 27], mamba_n_heads=128, mamba_d_head=64, mamba_d_state=128,
        mamba_n_groups=1, mamba_chunk_size=256, mamba_expand=2, mamba_d_conv=4), (32, 300), None),
    "jamba": ("JambaForCausalLM", dict(
        hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
        vocab_size=65536, num_experts=16, num_experts_per_tok=2, attn_layer_period=8, attn_layer_offset=4,
        expert_layer_period=2, expert_layer_offset=1, mamba_d_state=16, mamba_d_conv=4, mamba_expand=2,
        mamba_dt_rank=256), (32,), (52e9, 12e9)),
    # the Granite-4 hybrid MoE of PUBLISHED (families/granitemoehybrid.py)
    "granitemoehybrid": ("GraniteMoeHybridForCausalLM", PUBLISHED["granitemoehybrid"][1], (32, 300), None),
    # FalconH1Config's defaults (families/falcon_h1.py)
    "falcon_h1": ("FalconH1ForCausalLM", {}, (32, 300), None),
}


@pytest.mark.slow
@pytest.mark.parametrize("model_type", PUBLISHED_STATIC)
def test_published_sizes_static_equals_meta(tmp_path, model_type):
    """Where the static path answers at published size, the meta path gives the same parameters, active parameters,
    FLOPs, cache bytes at 4,096 tokens and 8 x H100 plan (and the model card's totals where it gives them)."""
    arch, kwargs, seqs, card = PUBLISHED_STATIC[model_type]
    cfg = T.AutoConfig.for_model(model_type, **kwargs)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(dict(cfg.to_dict(), architectures=[arch], torch_dtype="bfloat16")))
    static = load(str(path))
    m = meta.model_of(json.loads(path.read_text()), str(path), str(path))
    assert static.oracle is None and m.oracle is not None
    assert static.params == m.params
    assert static.predicted.get("active") == m.predicted.get("active")
    if card:
        assert abs(static.params - card[0]) / card[0] < 0.03 and abs(static.predicted["active"] - card[1]) / card[1] < 0.1
    for seq in seqs:
        assert flops.run(static, 1, seq)["totals"]["flops"] == flops.run(m, 1, seq)["totals"]["flops"], seq
    assert _kv(static, 1, 4096, 2) == _kv(m, 1, 4096, 2) > 0
    # the static path splits a hybrid's states over tp as vLLM shards its mixer (analysis/memory/tp_states.py); the
    # meta path, which has no mixer sizes, with the KV heads: its kv cache line at tp 8 is left out (a known gap)
    vllm_split = rank_states(static.spec, 8) is not None
    assert _h100_plan(static, vllm_split) == _h100_plan(m, vllm_split)


def _h100_plan(m, without_kv: bool = False) -> tuple[dict[str, int], bool | None]:
    """The 8 x H100-80 plan at tp 8 of one 4,096-token sequence (bf16 cache): per-device bytes by group (without the
    kv cache's), and the fit (without: None)."""
    r = memory.report(m, 1, 4096, plan=Plan(tp=8, gpus=8, kv_dtype="bf16", capacity=80 << 30))["fit"]
    return ({x["group"]: x["bytes"] for x in r["lines"] if not (without_kv and x["group"] == "kv cache")},
            None if without_kv else r["fits"])


@pytest.mark.slow
@pytest.mark.parametrize("model_type", PUBLISHED)
def test_published_sizes_on_the_meta_device(tmp_path, cli, model_type):
    """Parameters (model.parameters() of the meta build; the model card's totals where it gives them), active
    parameters, FLOPs (32 tokens: the reference state-space scans loop over tokens on meta too, Jamba's ~80 ms a
    token), cache bytes at 4,096 tokens and the 8 x H100 plan at tp 8."""
    arch, kwargs, card = PUBLISHED[model_type]
    cfg = T.AutoConfig.for_model(model_type, **kwargs)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(dict(cfg.to_dict(), architectures=[arch], torch_dtype="bfloat16")))
    m = meta.model_of(json.loads(path.read_text()), str(path), str(path))   # the meta path, even where a template answers
    with torch.device("meta"):
        model = getattr(T, arch)._from_config(cfg)
    assert m.params == sum(p.numel() for p in model.parameters())
    active = m.predicted.get("active")
    if card:
        # a card's active count with or without the embedding and head (Qwen3-Next's 3B leaves out their 0.62B)
        emb = sum(p.numel() for n, p in model.named_parameters() if "embed_tokens" in n or "lm_head" in n)
        assert abs(m.params - card[0]) / card[0] < 0.03, m.params
        assert min(abs(active - card[1]), abs(active - emb - card[1])) / card[1] < 0.1, (active, emb)
    total = flops.run(m, 1, 32)["totals"]["flops"]
    assert total > 2 * 32 * (active or m.params) * 0.5
    static = load(str(path)) if model_type in STATIC else None
    if static is not None:   # the meta path must give the same numbers where both answer
        assert static.oracle is None and static.params == m.params and static.predicted.get("active") == active
        assert flops.run(static, 1, 32)["totals"]["flops"] == total
        for n in (32, 4096):
            assert _kv(static, 1, n, 2) == _kv(m, 1, n, 2), n
    code, out, _ = cli("memory", str(path), "--json", "--seq", "4096", "--gpu", "H100", "--tp", "8", "--gpus", "8",
                       "--kv-dtype", "bf16")
    r = json.loads(out)
    assert (static is not None or r["computed_by"] == m.oracle.statement) and r["fit"]["fits"] is (code == 0)
    kv = next(x["bytes"] for x in r["lines"] if x["group"] == "kv cache")
    assert kv == _kv(m, 1, 4096, 2) > 0


def test_bigbird_is_static_while_it_attends_fully_and_meta_beyond(tmp_path):
    """BigBird's block-sparse attention (modeling_big_bird.py) runs only on sequences longer than (5 + 2 x
    num_random_blocks) x block_size tokens: up to that the BERT template answers (families/bert.py BlockSparse), beyond
    it the meta path; both equal FlopCounterMode over a CPU forward."""
    from test_families import fcm_flops

    kwargs = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37, vocab_size=99,
                  max_position_embeddings=128, block_size=4, num_random_blocks=1)
    path = _config(tmp_path, "BigBirdConfig", kwargs, "BigBirdForMaskedLM")
    longest = (5 + 2 * 1) * 4
    want = {}
    for seq in (longest - 1, longest, longest + 4, 2 * longest):
        torch.manual_seed(0)   # a model per length: a shorter forward switches it to full attention for good
        model = T.BigBirdForMaskedLM._from_config(T.BigBirdConfig(**kwargs), attn_implementation="eager").eval()
        want[seq] = fcm_flops(model, seq, 1, "cpu")
        m = meta.load(path, seqs=[seq])
        assert (m.oracle is None) == (seq <= longest), seq
        assert flops.run(m, 1, seq)["totals"]["flops"] == want[seq], seq
    m = meta.load(path, seqs=list(want))   # one meta-device model for every length, the short ones first
    assert m.oracle is not None
    assert [flops.run(m, 1, seq)["totals"]["flops"] for seq in want] == list(want.values())
    with pytest.raises(meta.NoAnalyticModel, match="block-sparse"):   # the template itself never counts past it
        flops.run(load(path), 1, longest + 4)
