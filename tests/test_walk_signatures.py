"""The name signatures and from_tensors look-ups the Recorder families derive from their walk (framework/walk_names.py
signature, pattern, layers; the helpers' unit tests are tests/test_walk_names.py), against the library that wrote the
files: for every sample and every head model, the family's signature matches the tensors its walk records (its expected
tensors) and detection from the names that save_pretrained writes picks the family (as tests/test_families.py's
registry walk does); ALBERT's pooler, one Linear at `albert.pooler`, is read from a transformers save without
config.json."""
from __future__ import annotations

import os
import re

import pytest

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")
from census_audit import saved_shapes  # noqa: E402
from test_families import meta_model, spec_of  # noqa: E402

from ckptstat import summarize  # noqa: E402
from ckptstat.families import _name_shapes, detect, get  # noqa: E402

DERIVED = ("bert", "albert", "distilbert", "xlm", "xlnet", "git", "hrm_text", "wav2vec2", "vit", "dinov2", "beit", "clip",
           "siglip", "resnet", "convnext", "mobilenet", "regnet", "swin", "t5", "bart", "whisper", "prophetnet", "segformer",
           "pvt_v2", "poolformer", "pvt", "levit", "splinter", "luke", "fnet", "funnel")
CASES = [pytest.param(name, s, m, id=f"{name}-{s.config}-{i}-{m}") for name in DERIVED
         for i, s in enumerate(get(name).samples) for m in s.models]


@pytest.mark.parametrize("name,sample,model_name", CASES)
def test_the_derived_signature_finds_the_family(name, sample, model_name):
    cfg = getattr(T, sample.config)(**sample.kwargs)
    family, cls = get(name), getattr(T, model_name)
    spec = spec_of(cls, cfg)
    assert family.expected_tensors is not None
    names = _name_shapes(family.expected_tensors(spec))
    # the signature, or the names it lists together (SigLIP's bare text tower); a sample `detected_as` another family
    # has that family's names, which this family's signature leaves alone
    shown = any(re.search(family.signature, n) for n in names) or bool(family.signature_together) and all(
        any(re.search(p, n) for n in names) for p in family.signature_together)
    assert shown != bool(sample.detected_as)
    assert detect(list(saved_shapes(meta_model(cls, cfg), tied=False)), None).family == (sample.detected_as or name)


_ALBERT = dict(hidden_size=32, num_attention_heads=4, intermediate_size=37, vocab_size=99, max_position_embeddings=64,
               embedding_size=16, num_hidden_layers=3, num_labels=3)


@pytest.mark.parametrize("model_name", ["AlbertModel", "AlbertForSequenceClassification", "AlbertForPreTraining"])
def test_albert_without_config_keeps_its_pooler(tmp_path, model_name):
    """AlbertModel keeps its pooler (one Linear, `pooler`) in the base model and the heads on it: a save_pretrained
    folder whose config.json is removed is read with it (and AlbertForPreTraining's SOP head of num_labels rows)."""
    torch.manual_seed(0)
    model = getattr(T, model_name)(T.AlbertConfig(**_ALBERT))
    model.save_pretrained(tmp_path)
    os.remove(tmp_path / "config.json")
    analytic = summarize(str(tmp_path))["analytic"]
    assert analytic["family"] == "albert"
    assert analytic["predicted_params"] == sum(p.numel() for _, p in model.named_parameters())
