"""Buffers transformers 5 registers under names that read as weights (naming/ ROLE_RULES, "transformers 5
buffers"): LFM2-MoE's router expert_bias, Apertus' xIELU beta / eps, Gemma 4's per-layer layer_scalar. Each model
is built tiny, written by save_pretrained and by torch.save(state_dict); the oracle is the model object
(census_audit.model_oracle: parameters() and its persistent buffers). AfMoE's expert_bias is a parameter
(nn.Parameter, requires_grad=False), so the rule names LFM2-MoE's module, not the attribute alone."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")
from census_audit import model_oracle, reported, save_both  # noqa: E402

from ckptstat import open_checkpoint  # noqa: E402

_TINY = dict(vocab_size=97, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2)
CASES = [
    pytest.param("Lfm2MoeConfig", "Lfm2MoeForCausalLM", dict(_TINY, num_hidden_layers=3, moe_intermediate_size=16,
                 num_experts=4, num_experts_per_tok=2, num_dense_layers=1, layer_types=["conv", "full_attention", "conv"],
                 use_expert_bias=True), "feed_forward.expert_bias", id="lfm2-moe"),
    pytest.param("ApertusConfig", "ApertusForCausalLM", _TINY, "act_fn.beta", id="apertus"),
    pytest.param("Gemma4TextConfig", "Gemma4ForCausalLM", dict(_TINY, head_dim=8, global_head_dim=8,
                 hidden_size_per_layer_input=8, vocab_size_per_layer_input=97,
                 layer_types=["sliding_attention", "full_attention"]), "layer_scalar", id="gemma4"),
    # Sarvam-MoE is built by Glm4Moe's class; save_pretrained writes its router's e_score_correction_bias as expert_bias
    pytest.param("SarvamMoEConfig", "Glm4MoeForCausalLM", dict(_TINY, moe_intermediate_size=16, n_routed_experts=4,
                 num_experts_per_tok=2, n_shared_experts=1, first_k_dense_replace=1), "mlp.gate.expert_bias",
                 id="sarvam-moe"),
    pytest.param("AfmoeConfig", "AfmoeForCausalLM", dict(_TINY, moe_intermediate_size=16, num_experts=4,
                 num_experts_per_tok=2, num_dense_layers=1), "mlp.expert_bias", id="afmoe-parameter"),
]


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("config,model_name,kwargs,marker", CASES)
def test_buffers_are_not_counted_as_parameters(tmp_path, config, model_name, kwargs, marker):
    torch.manual_seed(0)
    model = getattr(T, model_name)(getattr(T, config)(**kwargs)).eval()
    oracle = model_oracle(model)
    paths = save_both(model, str(tmp_path))
    # the case holds the tensor it is about, as saved
    assert any(n.endswith(marker) for n in open_checkpoint(paths["save_pretrained"]).tensors)
    for variant, path in paths.items():
        got = reported(path)
        assert (got["params"], got["buffers"]) == (oracle["params"], oracle["buffers"]), variant


# Classes whose roles the name rules got wrong in transformers 5 (fixtures/make_buffer_table.py's sweep): EnCodec's
# codebook statistics and Gemma 4 audio's clip bounds (rules fixed), Sam2's positional embedding (a buffer, SAM's
# a parameter), RT-DETR's frozen batch norms and HunYuan V3's expert_bias (the class table: config.json names the
# class). A bare torch.save has no config.json: the rules decide alone, right where the name is not ambiguous.
BOTH = ("save_pretrained", "torch.save")
CLASS_CASES = [
    pytest.param("EncodecModel", dict(hidden_size=16, num_filters=4, codebook_size=16, codebook_dim=16), BOTH,
                 id="encodec"),
    pytest.param("Gemma4AudioModel", None, BOTH, id="gemma4-audio"),
    pytest.param("Sam2Model", None, BOTH, id="sam2"),
    pytest.param("HYV3ForCausalLM", None, BOTH, id="hunyuan-v3"),
    # names alone: `normalization.weight` is ResNet's parameter; only the class says RT-DETR's is a buffer
    pytest.param("RTDetrForObjectDetection", None, ("save_pretrained",), id="rt-detr"),
]


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("cls,kwargs,variants", CLASS_CASES)
def test_buffers_of_classes_the_rules_missed(tmp_path, cls, kwargs, variants):
    from census_audit import tiny_config

    T.logging.set_verbosity_error()
    model_cls = getattr(T, cls)
    torch.manual_seed(0)
    cfg = model_cls.config_class(**kwargs) if kwargs is not None else tiny_config(model_cls.config_class)
    model = model_cls(cfg).eval()
    oracle = model_oracle(model)
    assert oracle["buffers"]
    paths = save_both(model, str(tmp_path))
    for variant in variants:
        got = reported(paths[variant])
        assert (got["params"], got["buffers"]) == (oracle["params"], oracle["buffers"]), variant
