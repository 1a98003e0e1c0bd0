"""YOSO's and Nystromformer's attention (families/bert.py ApproxAttention): where the op template counts it (YOSO's
expectation, Nystromformer with num_landmarks == segment_means_seq_len: tests/test_families.py's samples, FLOPs against
FlopCounterMode), and where it refuses it by name (YOSO's LSH cumulation, Nystromformer's landmarks, MRA's) with the
parameters still static, against num_parameters() of the model transformers builds."""
from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")

from ckptstat.census.model import load  # noqa: E402
from ckptstat.errors import NoAnalyticModel  # noqa: E402
from ckptstat.families import get  # noqa: E402
from ckptstat.families.framework.graph import build  # noqa: E402

_SIZES = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37, vocab_size=99,
              max_position_embeddings=64)
REFUSED = [("YosoConfig", "YosoForMaskedLM", dict(use_expectation=False), "LSH cumulation"),
           ("NystromformerConfig", "NystromformerForMaskedLM", dict(num_landmarks=16), "landmark attention"),
           ("MraConfig", "MraForMaskedLM", {}, "multi-resolution block attention")]


@pytest.mark.parametrize("config,model_name,kw,named", REFUSED, ids=[r[1] for r in REFUSED])
def test_a_refused_attention_is_named_and_its_parameters_stay_static(tmp_path, config, model_name, kw, named):
    cfg = getattr(T, config)(**_SIZES, **kw)
    with torch.device("meta"):
        expected = getattr(T, model_name)(cfg).num_parameters()
    (tmp_path / "config.json").write_text(json.dumps(dict(cfg.to_dict(), architectures=[model_name])))
    m = load(str(tmp_path / "config.json"))
    assert m.predicted["total"] == expected
    why = get("bert").flops_refused
    assert why is not None and named in str(why(m.spec))
    with pytest.raises(NoAnalyticModel, match=named):
        build(m.spec, seq=8)
