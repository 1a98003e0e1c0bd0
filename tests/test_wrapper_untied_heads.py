"""A multimodal wrapper whose class ties nothing (no _tied_weights_keys: Qwen2-Audio, Voxtral, Audio Flamingo 3, Music
Flamingo) keeps its LM head apart from its embeddings even when its text_config says tie_word_embeddings true: the
analytic model's parameters from config.json (the language model's prediction plus the towers a checkpoint counts
outside it) equal num_parameters() of the model transformers builds from that config (the red-team sweep,
/tmp/rt-arch/flips.py, predicted the head tied: one vocab x hidden table short)."""
from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")

from census_audit import tiny_config  # noqa: E402

WRAPPERS = ["Qwen2AudioForConditionalGeneration", "VoxtralForConditionalGeneration",
            "AudioFlamingo3ForConditionalGeneration", "MusicFlamingoForConditionalGeneration"]


@pytest.mark.parametrize("cls_name", WRAPPERS)
def test_text_tie_flag_ignored_by_untying_wrapper(tmp_path, cls_name):
    from ckptstat.analysis import meta
    from ckptstat.families.wrappers import is_outside

    cls = getattr(T, cls_name)
    raw = tiny_config(cls.config_class).to_dict()
    raw["text_config"]["tie_word_embeddings"] = True
    cfg = cls.config_class.from_dict(raw)   # as from_pretrained reads config.json
    model = cls._from_config(cfg)
    assert model.get_output_embeddings().weight is not model.get_input_embeddings().weight
    path = tmp_path / "config.json"
    path.write_text(json.dumps(dict(cfg.to_dict(), architectures=[cls_name]), default=str))
    m = meta.load(str(path))
    towers = sum(p.numel() for n, p in model.named_parameters() if is_outside(n, m.spec.outside))
    assert m.predicted["total"] + towers == model.num_parameters()
