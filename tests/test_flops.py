"""Analytic parameters and FLOPs beyond the per-family registry walk (tests/test_families.py, which
checks every family's tiny samples against transformers and FlopCounterMode): published model sizes,
T5's separate decoder length, MoE active parameters, docs/oracles.md numbers, and the report."""
from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")
from test_families import fcm_flops, meta_model, ours, spec_of  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from ckptstat.analysis import flops as fl  # noqa: E402
from ckptstat.census.model import Model, load  # noqa: E402
from ckptstat.families.framework.graph import build, predict_params  # noqa: E402
from ckptstat.families.framework.spec import from_config  # noqa: E402

LLAMA2_7B = dict(vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                 num_attention_heads=32, num_key_value_heads=32, max_position_embeddings=4096)

# The registry walk's equality at the sizes published models use (meta device: no memory, no compute).
FULL_SIZE = [
    # (id, config class, kwargs, model class, sequence lengths, batch)
    ("bert-base", T.BertConfig, {}, T.BertModel, (128, 512), 1),
    ("bert-large-mlm", T.BertConfig, dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                                          intermediate_size=4096), T.BertForMaskedLM, (128,), 2),
    ("gpt2", T.GPT2Config, {}, T.GPT2LMHeadModel, (64, 256), 1),
    ("llama-2-7b", T.LlamaConfig, LLAMA2_7B, T.LlamaForCausalLM, (128, 2048), 1),
    ("t5-small", T.T5Config, {}, T.T5ForConditionalGeneration, (32, 128), 1),
]


@pytest.mark.parametrize("cfg_cls,kwargs,model_cls,seqs,batch", [c[1:] for c in FULL_SIZE], ids=[c[0] for c in FULL_SIZE])
def test_full_size_params_and_matmul_flops_match_torch(cfg_cls, kwargs, model_cls, seqs, batch):
    cfg = cfg_cls(**kwargs)
    model = meta_model(model_cls, cfg)
    spec = spec_of(model_cls, cfg)
    assert predict_params(spec)["total"] == sum(p.numel() for p in model.parameters())
    for seq in seqs:
        assert ours(spec, seq, batch) == fcm_flops(model, seq, batch)


def test_t5_separate_decoder_length():
    cfg = T.T5Config()
    model = meta_model(T.T5ForConditionalGeneration, cfg)
    with FlopCounterMode(display=False) as counter, torch.device("meta"):
        model(input_ids=torch.zeros((1, 64), dtype=torch.long), decoder_input_ids=torch.zeros((1, 16), dtype=torch.long))
    spec = spec_of(T.T5ForConditionalGeneration, cfg)
    assert sum(2 * o.macs * o.calls for o in build(spec, 1, 64, dec_seq=16)) == counter.get_total_flops()


def test_mixtral_active_parameters():
    """Active parameters: total less the experts a token does not visit (all but top-k per layer)."""
    cfg = T.MixtralConfig(vocab_size=97, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2,
                          max_position_embeddings=64)
    model = meta_model(T.MixtralForCausalLM, cfg)
    pred = predict_params(spec_of(T.MixtralForCausalLM, cfg))
    assert pred["total"] == sum(p.numel() for p in model.parameters())
    # transformers 5 holds a layer's experts fused (MixtralExperts: [experts, ...] per projection)
    one_expert = sum(p.numel() for p in model.model.layers[0].mlp.experts.parameters()) // cfg.num_local_experts
    assert pred["active"] == pred["total"] - cfg.num_hidden_layers * (4 - 2) * one_expert


def test_oracles():
    bert = from_config({**T.BertConfig().to_dict(), "architectures": ["BertModel"]})
    assert ours(bert, 128) == 22_348_431_360
    assert ours(bert, 512) == 96_637_943_808
    assert sum(o.macs * o.calls for o in build(bert, 1, 128)) == 11_174_215_680
    ops = build(bert, 1, 128)
    assert sum(o.macs * o.calls for o in ops if o.kind == "attention") == 301_989_888
    assert sum(o.macs * o.calls for o in ops if o.bucket == "pooler") == 589_824
    assert predict_params(bert)["total"] == 109_482_240
    assert predict_params(bert)["buckets"] == {"embedding": 23_837_184, "encoder": 85_054_464, "pooler": 590_592}
    llama = from_config({**T.LlamaConfig(**LLAMA2_7B).to_dict(), "architectures": ["LlamaForCausalLM"]})
    assert ours(llama, 128) == 1_700_001_742_848
    assert predict_params(llama)["total"] == 6_738_415_616
    gpt2 = from_config({**T.GPT2Config().to_dict(), "architectures": ["GPT2LMHeadModel"]})
    assert predict_params(gpt2)["total"] == 124_439_808
    chinese = from_config({**T.BertConfig(vocab_size=21128).to_dict(), "architectures": ["BertForMaskedLM"]})
    assert predict_params(chinese)["total"] == 102_290_312


def test_causal_halving_and_training():
    gpt2 = from_config({**T.GPT2Config().to_dict(), "architectures": ["GPT2LMHeadModel"]})
    m = Model(gpt2, "gpt2", None, predict_params(gpt2), None)
    full = fl.run(m, 1, 100)["totals"]
    half = fl.run(m, 1, 100, causal_halving=True)["totals"]
    # attention bmm's: 2 per layer, b*a*d*s^2 MACs each -> s(s+1)/2 pairs when halved
    assert full["attention_flops"] == 2 * 2 * 12 * 12 * 64 * 100 * 100
    assert half["attention_flops"] == 2 * 2 * 12 * 12 * 64 * (100 * 101 // 2)
    assert full["flops"] - half["flops"] == full["attention_flops"] - half["attention_flops"]
    assert full["training_flops"] == 3 * full["flops"]


def test_report_schema_and_sweep(tmp_path):
    cfg = {**T.MistralConfig(num_hidden_layers=2, sliding_window=64).to_dict(), "architectures": ["MistralForCausalLM"]}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    r = fl.report(load(p), 2, [32, 128], convention="macs")
    json.dumps(r)
    assert r["schema"] == "ckptstat.flops/1"
    assert [run["seq"] for run in r["runs"]] == [32, 128]
    assert r["parameters"]["checkpoint"] is None and r["parameters"]["agree"] is None
    assert not r["runs"][0]["notes"]                       # 32 <= window
    assert "sliding window 64" in r["runs"][1]["notes"][0]  # 128 > window
    t = r["runs"][1]["totals"]
    assert t["windowed_attention_flops"] < t["attention_flops"]
    assert t["macs"] * 2 == t["flops"] and t["flops_per_token"] == t["flops"] / 256
    assert sum(m["params"] for m in r["runs"][0]["modules"]) == r["parameters"]["predicted"]
