"""Config keys by either name (families/config_aliases.json, written from transformers' config classes by
fixtures/make_config_aliases.py): a transformers 5 save that writes the other name gives the same figures."""
from __future__ import annotations

import json

import pytest

T = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

from conftest import fixture_script  # noqa: E402

_make_config_aliases = fixture_script("make_config_aliases")
OUT = _make_config_aliases.OUT
aliases = _make_config_aliases.aliases

from ckptstat.families.framework.graph import build, predict_params  # noqa: E402
from ckptstat.families.framework.spec import from_config  # noqa: E402


def test_table_is_what_the_installed_transformers_maps():
    with open(OUT, encoding="utf-8") as f:
        table = json.load(f)
    assert table["aliases"] == aliases(), f"regenerate (written by transformers {table['transformers']})"


QWEN3_MOE = dict(vocab_size=97, hidden_size=32, intermediate_size=48, moe_intermediate_size=16, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, head_dim=8, num_experts_per_tok=2, max_position_embeddings=64)


def _saved(tmp_path, config) -> dict:
    """config.json as save_pretrained writes it."""
    config.architectures = ["Qwen3MoeForCausalLM"]
    config.save_pretrained(tmp_path)
    return json.loads((tmp_path / "config.json").read_text())


def test_qwen3_moe_as_transformers_5_saves_it_equals_the_hubs_spelling(tmp_path):
    """Qwen3MoeConfig(...).save_pretrained writes num_local_experts; the Hub's files say num_experts. Both give
    the model's own parameter count and the same FLOPs."""
    saved = _saved(tmp_path, T.Qwen3MoeConfig(num_experts=6, **QWEN3_MOE))
    assert "num_local_experts" in saved and "num_experts" not in saved
    hub = {("num_experts" if k == "num_local_experts" else k): v for k, v in saved.items()}
    with torch.device("meta"):
        model = T.Qwen3MoeForCausalLM(T.Qwen3MoeConfig(num_experts=6, **QWEN3_MOE))
    a, b = from_config(saved), from_config(hub)
    assert predict_params(a)["total"] == predict_params(b)["total"] == sum(p.numel() for p in model.parameters())
    assert [op.macs for op in build(a, 1, 16)] == [op.macs for op in build(b, 1, 16)]


@pytest.mark.parametrize("cls,factor_key", [("GPTNeoXConfig", "rotary_pct"), ("PhiConfig", "partial_rotary_factor")])
def test_rotary_fraction_moved_into_rope_parameters_is_read(tmp_path, cls, factor_key):
    """transformers 5 saves the partial rotary fraction inside rope_parameters: the rotary dims follow it."""
    cfg = getattr(T, cls)(hidden_size=64, num_attention_heads=4, num_hidden_layers=2, intermediate_size=96,
                          vocab_size=97, **{factor_key: 0.75})
    cfg.architectures = [cls.replace("Config", "ForCausalLM")]
    cfg.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert factor_key not in saved or saved.get(factor_key) == 0.75
    assert saved["rope_parameters"]["partial_rotary_factor"] == 0.75
    assert from_config(saved).rope_dim == int(16 * 0.75)
