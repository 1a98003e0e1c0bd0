"""Masked-LM heads with tie_word_embeddings false (transformers 5 ties the decoder's weight to the word embeddings,
and its bias to the head's own `bias`, only when the config ties: their _tied_weights_keys): the decoder's weight is
then a parameter of its own and the head's bias a second one, held and unused. Parameters predicted from the config
alone and counted in the save equal model.parameters() of the class transformers builds, tied and untied."""
from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")

from ckptstat.census.model import load  # noqa: E402

SIZES = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37, vocab_size=99)
CASES = [("BertConfig", "BertForMaskedLM", {}), ("BertConfig", "BertForPreTraining", {}),
         ("BertConfig", "BertLMHeadModel", {"is_decoder": True}), ("RobertaConfig", "RobertaForMaskedLM", {}),
         ("ErnieConfig", "ErnieForMaskedLM", {}), ("ElectraConfig", "ElectraForMaskedLM", {}),
         ("AlbertConfig", "AlbertForMaskedLM", {}), ("DistilBertConfig", "DistilBertForMaskedLM", {}),
         ("BertGenerationConfig", "BertGenerationDecoder", {"is_decoder": True})]


@pytest.mark.parametrize("tie", [True, False])
@pytest.mark.parametrize("config,cls,extra", CASES, ids=[c[1] for c in CASES])
def test_untied_mlm_head_parameters_equal_transformers(tmp_path, config, cls, extra, tie):
    cfg = getattr(T, config)(**SIZES, tie_word_embeddings=tie, **extra)
    model = getattr(T, cls)(cfg)
    want = sum(p.numel() for p in model.parameters())
    model.save_pretrained(tmp_path)
    m = load(str(tmp_path))
    assert m.predicted["total"] == m.checkpoint_params == want
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(json.loads((tmp_path / "config.json").read_text())))
    assert load(str(bare)).predicted["total"] == want
