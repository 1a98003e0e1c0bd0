"""Apertus 1.5's VQ image and audio tokenizers (model.vision_tokenizer, model.audio_tokenizer) are outside its analytic
language model, as every wrapper's towers are (families/wrappers.py VISION_MODULES): from config.json alone the prediction
plus those modules is num_parameters() of the model transformers builds (the class's default config, released sizes,
on the meta device: its tiny config fails transformers' own validation). The red-team sweep (/tmp/rt-arch/full.py)
found the prediction 226,457,088 parameters short of num_parameters(), the tokenizers neither predicted nor outside."""
from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")


def test_apertus1p5_tokenizers_are_outside(tmp_path):
    from ckptstat.analysis import meta
    from ckptstat.families.wrappers import is_outside

    cls = T.Apertus1p5ForConditionalGeneration
    cfg = cls.config_class()
    with torch.device("meta"):
        model = cls._from_config(cfg)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(dict(cfg.to_dict(), architectures=[cls.__name__]), default=str))
    m = meta.load(str(path))
    apart = sum(p.numel() for n, p in model.named_parameters() if is_outside(n, m.spec.outside))
    assert any(n.startswith("model.vision_tokenizer.") and is_outside(n, m.spec.outside) for n, _ in model.named_parameters())
    assert m.predicted["total"] + apart == model.num_parameters()
