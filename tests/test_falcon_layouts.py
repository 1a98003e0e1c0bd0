"""Falcon's configs against transformers' FalconDecoderLayer (families/falcon.py): the two flag combinations whose
layer never creates a norm its forward reads are refused (NoAnalyticModel, so the meta path is asked) rather than
described, and every layout the family lists is one some config picks."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")

from ckptstat.errors import NoAnalyticModel  # noqa: E402
from ckptstat.families import falcon  # noqa: E402
from ckptstat.families.framework.spec import from_config  # noqa: E402

SIZES = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, vocab_size=99, max_position_embeddings=64)
BROKEN = [dict(new_decoder_architecture=True, num_kv_heads=2, parallel_attn=False),
          dict(new_decoder_architecture=True, num_kv_heads=2, parallel_attn=False, num_ln_in_parallel_attn=1),
          dict(num_ln_in_parallel_attn=2)]


@pytest.mark.parametrize("kwargs", BROKEN, ids=["new-sequential", "new-sequential-one-ln", "old-two-ln"])
def test_configs_transformers_cannot_run_are_refused(kwargs):
    cfg = T.FalconConfig(**SIZES, **kwargs)
    model = T.FalconForCausalLM(cfg)
    with pytest.raises((AttributeError, UnboundLocalError)):
        model(torch.arange(4)[None])
    with pytest.raises(NoAnalyticModel, match="FalconDecoderLayer"):
        from_config(dict(cfg.to_dict(), architectures=["FalconForCausalLM"]))


def test_every_layout_is_picked_by_a_config():
    picked = set()
    for new in (False, True):
        for parallel in (False, True):
            for n_ln in (None, 1, 2):
                for alibi in (False, True):
                    cfg = T.FalconConfig(**SIZES, new_decoder_architecture=new, parallel_attn=parallel,
                                         num_ln_in_parallel_attn=n_ln, alibi=alibi)
                    try:
                        picked.add(from_config(dict(cfg.to_dict(), architectures=["FalconForCausalLM"])).layout)
                    except NoAnalyticModel:
                        pass
    assert picked == set(falcon._LAYOUTS.by_type)
