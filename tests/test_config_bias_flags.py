"""A config's bias flags read as the model transformers builds reads them (the red-team sweep that flipped each boolean
config key of every causal LM, /tmp/rt-arch/flips.py): AFMoE's attention_bias biases q, k, v and o; mlp_bias biases
DeepSeek's dense and shared MLPs but never the routed experts (transformers 5's stacked experts hold no bias), and
DeepSeek-V3.2's, GLM-5's, A.X-K2's, HY-V4's and Dots3Note's MLPs not at all. The oracle: num_parameters() of the
tiny model transformers builds from the same config."""
from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")

from census_audit import tiny_config  # noqa: E402

CASES = [("AfmoeForCausalLM", "attention_bias"), ("DeepseekV2ForCausalLM", "mlp_bias"), ("HYV3ForCausalLM", "mlp_bias"),
         ("DeepseekV32ForCausalLM", "mlp_bias"), ("GlmMoeDsaForCausalLM", "mlp_bias"), ("AXK2ForCausalLM", "mlp_bias"),
         ("Dots3NoteForCausalLM", "mlp_bias")]


@pytest.mark.parametrize("cls_name,key", CASES)
def test_bias_flag_parameters(tmp_path, cls_name, key):
    from ckptstat.analysis import meta

    cls = getattr(T, cls_name)
    cfg = tiny_config(cls.config_class)
    setattr(cfg, key, True)
    model = cls._from_config(cfg)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(dict(cfg.to_dict(), architectures=[cls_name]), default=str))
    m = meta.load(str(path))
    assert m.oracle is None   # the op template answered, not the meta device
    assert m.predicted["total"] + m.outside_params == model.num_parameters()
