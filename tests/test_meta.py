"""The meta path (ckptstat/analysis/meta.py): transformers on the meta device answers what no op template describes.

Where the static path answers too, both give the same parameters, active parameters, FLOPs, cache bytes and planner
weights (families' own tiny samples). Where only the meta path answers (Llama 4, Qwen3-Next, Jamba, Falcon-H1,
GraniteMoeHybrid, Gemma 3n text), its parameters are those of a CPU build's model.parameters() and its cache bytes
those of the cache an actual CPU forward returns, at lengths other than the one the rule is read from."""
from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")

from ckptstat.analysis import flops, memory, meta  # noqa: E402
from ckptstat.analysis.planner import Plan, kv_counted, kv_lines  # noqa: E402
from ckptstat.census.model import load  # noqa: E402
from ckptstat.families import get  # noqa: E402


def _config(tmp_path, config_cls: str, kwargs: dict, arch: str, name: str = "config.json") -> str:
    d = getattr(T, config_cls)(**kwargs).to_dict()
    d["architectures"] = [arch]
    path = tmp_path / name
    path.write_text(json.dumps(d))
    return str(path)


def _kv(m, b, n, ab):
    return sum(x for _, x, _ in kv_counted(m, kv_lines(m, b, n, n, ab)))


def _weights(m, tp):
    fit = memory.report(m, 1, 8, plan=Plan(tp=tp, gpus=tp))["fit"]
    return next(x["bytes"] for x in fit["lines"] if x["group"] == "weights")


SAME = [("llama", "LlamaForCausalLM"), ("qwen_moe", "Qwen3MoeForCausalLM"), ("gemma", "Gemma2ForCausalLM"),
        ("qwen3", "Qwen3ForCausalLM")]


@pytest.mark.parametrize("family,arch", SAME)
def test_meta_path_equals_the_static_path_where_both_answer(tmp_path, family, arch):
    sample = next(s for s in get(family).samples if arch in s.models)
    path = _config(tmp_path, sample.config, dict(sample.kwargs), arch)
    static = load(path)
    cfg = json.loads(open(path).read())
    m = meta.model_of(cfg, path, path)
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


def test_grouped_mm_rule_on_real_offsets_counts_the_routed_rows():
    """On real tensors the rule reads offs[-1] (rows past it go through no expert), on meta every row."""
    a, b = torch.zeros(6, 4), torch.zeros(3, 4, 5)
    assert meta.grouped_mm_flops(a, b, torch.tensor([2, 3, 4])) == 2 * 4 * 4 * 5
    assert meta.grouped_mm_flops(a.to("meta"), b.to("meta"), torch.tensor([2, 3, 4], device="meta")) == 2 * 6 * 4 * 5


# tiny configs of architectures no family module models (transformers 5's config classes)
HYBRIDS = {
    "llama4_text": ("Llama4ForCausalLM", dict(
        hidden_size=32, intermediate_size=64, intermediate_size_mlp=48, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, vocab_size=99, num_local_experts=4, num_experts_per_tok=1,
        interleave_moe_layer_step=2, attention_chunk_size=4)),
    "qwen3_next": ("Qwen3NextForCausalLM", dict(
        hidden_size=32, intermediate_size=64, moe_intermediate_size=16, shared_expert_intermediate_size=16,
        num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=8, vocab_size=99, num_experts=4,
        num_experts_per_tok=2, linear_num_value_heads=4, linear_num_key_heads=2, linear_key_head_dim=8,
        linear_value_head_dim=8, linear_conv_kernel_dim=4)),
    "jamba": ("JambaForCausalLM", dict(
        hidden_size=32, intermediate_size=64, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
        vocab_size=99, num_experts=4, num_experts_per_tok=2, attn_layer_period=2, attn_layer_offset=1,
        expert_layer_period=2, expert_layer_offset=1, mamba_d_state=8, mamba_dt_rank=4)),
    "falcon_h1": ("FalconH1ForCausalLM", dict(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        head_dim=8, vocab_size=99, mamba_d_ssm=32, mamba_n_heads=4, mamba_d_head=8, mamba_d_state=8, mamba_n_groups=1,
        mamba_chunk_size=4)),
    "granitemoehybrid": ("GraniteMoeHybridForCausalLM", dict(
        hidden_size=32, intermediate_size=64, shared_intermediate_size=32, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=99, num_local_experts=4, num_experts_per_tok=2,
        layer_types=["mamba", "attention", "mamba", "attention"], mamba_d_state=8, mamba_n_heads=4, mamba_d_head=16,
        mamba_n_groups=1, mamba_chunk_size=4)),
    "gemma3n_text": ("Gemma3nForCausalLM", dict(
        hidden_size=32, intermediate_size=64, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
        head_dim=8, vocab_size=99, vocab_size_per_layer_input=99, hidden_size_per_layer_input=8, num_kv_shared_layers=2,
        laurel_rank=4, altup_num_inputs=2, sliding_window=4, activation_sparsity_pattern=[0.0] * 4,
        layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"])),
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
    arch, kwargs = HYBRIDS["jamba"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(dict(T.AutoConfig.for_model("jamba", **kwargs).to_dict(), architectures=[arch])))
    monkeypatch.setattr(meta, "available", lambda: False)
    code, out, err = cli("flops", str(path))
    assert code == 2 and not out and err.count("\n") == 1 and "`run` extra" in err and "meta device" in err
