"""SwitchTransformers' capacity-limited top-1 routing (families/switch_transformers.py): the eager forward runs each
expert on the tokens it keeps (at most expert_capacity per row), so FlopCounterMode's count depends on the router's
choices once a row is longer than the capacity. The op template counts every token once per sparse block: equal to
FlopCounterMode up to the capacity whatever the routing (a router sending every token to one expert included), and
refused by name beyond it, where the same weights count differently with a larger capacity."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")

from test_families import fcm_flops, ours, spec_of  # noqa: E402

from ckptstat.analysis import meta  # noqa: E402
from ckptstat.errors import NoAnalyticModel  # noqa: E402

CAP = 8
# block 1 of each stack sparse (num_layers 2 / 1 sparse: step 2), four experts, a router bias to steer it
KW = dict(d_model=32, d_kv=8, d_ff=37, num_layers=2, num_heads=4, vocab_size=99, num_experts=4,
          num_sparse_encoder_layers=1, num_sparse_decoder_layers=1, expert_capacity=CAP, router_bias=True)
LM = T.SwitchTransformersForConditionalGeneration


def _model(capacity: int, one_expert: bool):
    """A CPU build (seed 0); `one_expert`: every router's logits favour expert 0 (zero weight, bias [1, 0, 0, 0])."""
    torch.manual_seed(0)
    model = LM._from_config(T.SwitchTransformersConfig(**dict(KW, expert_capacity=capacity)),
                            attn_implementation="eager").eval().requires_grad_(False)
    if one_expert:
        for mod in model.modules():
            if isinstance(mod, T.models.switch_transformers.modeling_switch_transformers.SwitchTransformersTop1Router):
                mod.classifier.weight.zero_()
                mod.classifier.bias.copy_(torch.tensor([1.0, 0.0, 0.0, 0.0]))
    return model


@pytest.mark.parametrize("one_expert", [False, True])
def test_template_equals_flop_counter_up_to_the_capacity_whatever_the_routing(one_expert):
    model = _model(CAP, one_expert)
    spec = spec_of(LM, model.config)
    for seq in (CAP - 3, CAP):
        assert ours(spec, seq, 2) == fcm_flops(model, seq, 2, "cpu"), seq


def test_beyond_the_capacity_the_count_depends_on_routing_and_the_template_refuses(tmp_path):
    seq = CAP + 4
    dropped = fcm_flops(_model(CAP, True), seq, 2, "cpu")   # each row keeps CAP tokens per sparse block
    kept = _model(seq, True)   # the same weights with room for every token
    assert fcm_flops(kept, seq, 2, "cpu") == ours(spec_of(LM, kept.config), seq, 2) > dropped
    spec = spec_of(LM, _model(CAP, True).config)
    with pytest.raises(NoAnalyticModel, match="expert_capacity = 8"):
        ours(spec, seq, 2)
    cfg = T.SwitchTransformersConfig(**KW)
    cfg.architectures = [LM.__name__]
    cfg.save_pretrained(tmp_path)
    path = str(tmp_path / "config.json")
    assert meta.load(path, seqs=[CAP]).oracle is None   # static
    assert meta.load(path, seqs=[seq]).oracle is not None   # handed to the meta path (Family.longest_seq)
