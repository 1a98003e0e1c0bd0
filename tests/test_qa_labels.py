"""Span (QA) heads built with num_labels other than 2: BertForQuestionAnswering and its kin make qa_outputs
nn.Linear(hidden, num_labels) (only 2 runs their forward, which splits the logits into start and end; a saved
config can hold another). Parameters predicted from the config alone and counted in the save equal
model.parameters() of the class transformers builds."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
T = pytest.importorskip("transformers")

from ckptstat.census.model import load  # noqa: E402

SIZES = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37, vocab_size=99)
CASES = [("BertConfig", "BertForQuestionAnswering"), ("RobertaConfig", "RobertaForQuestionAnswering"),
         ("ElectraConfig", "ElectraForQuestionAnswering"), ("AlbertConfig", "AlbertForQuestionAnswering"),
         ("XLMRobertaConfig", "XLMRobertaForQuestionAnswering"), ("ErnieConfig", "ErnieForQuestionAnswering"),
         ("XLMConfig", "XLMForQuestionAnsweringSimple"), ("FlaubertConfig", "FlaubertForQuestionAnsweringSimple"),
         ("XLNetConfig", "XLNetForQuestionAnsweringSimple")]
EXTRA = {"XLNetConfig": dict(d_head=8)}   # XLNetConfig checks d_head = d_model // n_head (its default is 64)


@pytest.mark.parametrize("labels", [2, 3])
@pytest.mark.parametrize("config,cls", CASES, ids=[c[1] for c in CASES])
def test_qa_head_is_num_labels_wide(tmp_path, config, cls, labels):
    cfg = getattr(T, config)(**SIZES, **EXTRA.get(config, {}), num_labels=labels)
    model = getattr(T, cls)(cfg)
    want = sum(p.numel() for p in model.parameters())
    model.save_pretrained(tmp_path)
    m = load(str(tmp_path))
    assert m.predicted["total"] == m.checkpoint_params == want
    bare = tmp_path / "bare.json"   # the config alone
    bare.write_text((tmp_path / "config.json").read_text())
    assert load(str(bare)).predicted["total"] == want
    (tmp_path / "config.json").unlink()   # the names alone
    assert load(str(tmp_path / "model.safetensors")).predicted["total"] == want
