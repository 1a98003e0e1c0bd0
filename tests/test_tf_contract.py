"""One model, three formats: the tiny BertForPreTraining in fixtures/bert-tiny-pretraining saved by
transformers (safetensors), by torch.save (pytorch_model.bin), and re-saved by TensorFlow under
google-research names (fixtures/tf1-bert) must give the same bucket totals."""
from __future__ import annotations

import json
import os

import pytest

from ckptstat import open_checkpoint, summarize

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIX = os.path.join(ROOT, "fixtures")
FORMATS = {
    "safetensors": os.path.join(FIX, "bert-tiny-pretraining", "model.safetensors"),
    "torch": os.path.join(FIX, "bert-tiny-pretraining", "pytorch_model.bin"),
    "tf-bundle": os.path.join(FIX, "tf1-bert", "model.ckpt-0"),
}


def buckets(path: str) -> dict:
    r = summarize(open_checkpoint(path))
    return {b["bucket"]: (b["params"], b["bytes"]) for b in r["buckets"]} | {"total": r["parameters"]["unique"]}


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_same_bucket_totals(fmt):
    path = FORMATS[fmt]
    with open(os.path.join(FIX, "bert-tiny-pretraining", "expected.json")) as f:
        torch_params = json.load(f)["parameters"]   # sum(p.numel() for p in model.parameters())
    got = buckets(path)
    assert got == buckets(FORMATS["safetensors"])
    assert got["total"] == torch_params
