"""Routed models read from their weights alone (no config.json): the experts per token, which no tensor shows, are
assumed, said in a note, and never more than the experts the shapes show (spec.capped_top_k). Oracles from
transformers and torch: tiny models with real weights saved by save_pretrained, then the safetensors copied without
config.json; FLOPs from FlopCounterMode on the model itself (eager attention, the CPU forward), parameters from
model.parameters() (active: less the (E - k) / E of each experts module a token does not visit)."""
from __future__ import annotations

import shutil

import pytest

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")
from test_families import fcm_flops, meta_model  # noqa: E402

from ckptstat.analysis import flops  # noqa: E402
from ckptstat.census.model import load  # noqa: E402
from ckptstat.families.jamba import _SIZES as JAMBA  # noqa: E402

BATCH = 2


def _active(model, experts: int, top_k: int) -> int:
    total = sum(p.numel() for p in model.parameters())
    held = sum(p.numel() for n, mod in model.named_modules() if n.endswith(".experts") for p in mod.parameters())
    return total - held * (experts - top_k) // experts


def _saved(model, tmp_path):
    """(the folder save_pretrained wrote, a folder holding its safetensors alone)."""
    full, bare = tmp_path / "full", tmp_path / "bare"
    model.save_pretrained(full)
    bare.mkdir()
    shutil.copy(full / "model.safetensors", bare / "model.safetensors")
    return str(full), str(bare)


def test_jamba_without_config_assumes_the_class_default_top_k(tmp_path):
    """A Jamba whose config has JambaConfig's default num_experts_per_tok: from its weights alone, the FLOPs and the
    active parameters of the model itself (and of ckptstat's reading with the config), the assumption in a note."""
    cfg = T.JambaConfig(**{k: v for k, v in JAMBA.items() if k != "num_experts_per_tok"})
    assert cfg.num_experts_per_tok == T.JambaConfig().num_experts_per_tok
    model = meta_model(T.JambaForCausalLM, cfg, "cpu")
    full, bare = _saved(model, tmp_path)
    with_cfg, m = load(full), load(bare)
    assert m.spec.source == "tensor names" and m.spec.top_k == cfg.num_experts_per_tok
    assert any("experts per token (top-k) assumed" in n for n in m.spec.assumptions)
    assert m.predicted["active"] == with_cfg.predicted["active"] == _active(model, cfg.num_experts, cfg.num_experts_per_tok)
    for seq in (5, 9):
        got = flops.run(m, BATCH, seq)["totals"]["flops"]
        assert got == flops.run(with_cfg, BATCH, seq)["totals"]["flops"] == fcm_flops(model, seq, BATCH, "cpu"), seq


# (config class, model class, its sizes with fewer experts than the top-k assumed without config, the experts key)
SMALL = {
    "qwen3_moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM", dict(
        vocab_size=97, hidden_size=32, intermediate_size=48, moe_intermediate_size=16, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=8, num_experts=4), "num_experts"),
    "gpt_oss": ("GptOssConfig", "GptOssForCausalLM", dict(
        vocab_size=97, hidden_size=32, intermediate_size=24, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, num_local_experts=3), "num_local_experts"),
}


@pytest.mark.parametrize("name", sorted(SMALL))
def test_an_assumed_top_k_is_capped_at_the_experts_the_shapes_show(name, tmp_path):
    """Weights alone whose experts are fewer than the top-k assumed (Qwen3-30B-A3B's 8, gpt-oss's 4): every expert per
    token, as the same model with top-k = its experts runs (FLOPs, active parameters), said in a note."""
    config, cls, sizes, key = SMALL[name]
    E = sizes[key]
    model = meta_model(getattr(T, cls), getattr(T, config)(**sizes, num_experts_per_tok=E), "cpu")
    _, bare = _saved(model, tmp_path)
    m = load(bare)
    assert m.spec.source == "tensor names" and m.spec.experts == E and m.spec.top_k == E
    assert any(f"capped at {E}, the experts the shapes show" in n for n in m.spec.assumptions)
    assert m.predicted["active"] == _active(model, E, E) == sum(p.numel() for p in model.parameters())
    for seq in (3, 6):
        assert flops.run(m, BATCH, seq)["totals"]["flops"] == fcm_flops(model, seq, BATCH, "cpu"), seq
