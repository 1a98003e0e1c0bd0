"""`ckptstat diff` between a TF-written BERT and the PyTorch BERT transformers converted it into (issue 20):
the built-in TF -> PyTorch name map and the [in, out] kernel read as [out, in].

The pairs are written by fixtures/make_keras_corpus.py with the real converters: an HF TF `.h5`
(TFBertForMaskedLM.save_pretrained) -> modeling_tf_pytorch_utils.load_tf2_checkpoint_in_pytorch_model, and a
google-research TF1 checkpoint -> modeling_bert.load_tf_weights_in_bert. Every TF variable holds distinct
random values, so the oracle (fixtures/expected_keras_corpus.json: TF name -> [PyTorch name, transposed?])
was read off the converted model's values, not typed from ckptstat's output.
"""
from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest

from ckptstat import open_checkpoint
from ckptstat.analysis.diff import TF_MAP, diff

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "..", "fixtures", "keras-corpus")
with open(os.path.join(HERE, "..", "fixtures", "expected_keras_corpus.json")) as _f:
    ORACLE = json.load(_f)
PAIRS = ["pair-hf-tf-bert-mlm", "pair-tf1-bert"]


def _tf_path(case: str) -> str:
    return os.path.join(CORPUS, case)


def _pt_path(case: str) -> str:
    return os.path.join(CORPUS, ORACLE[case]["pt"])


@pytest.mark.parametrize("case", PAIRS)
def test_tf_names_pair_as_transformers_converts_them(case):
    r = diff(open_checkpoint(_tf_path(case)), open_checkpoint(_pt_path(case)))
    assert r["builtin_map"] == TF_MAP
    pairs = {t["a_name"]: [t["b_name"], t.get("transposed") == "a"] for t in r["tensors"]}
    assert pairs == ORACLE[case]["names"]
    assert r["counts"]["equal"] == len(ORACLE[case]["names"]) == len(r["tensors"])
    assert all(t["identical"] and t["max_abs"] == 0 for t in r["tensors"])


@pytest.mark.parametrize("case", PAIRS)
def test_either_order_and_small_chunks(case):
    """B as the TF side; chunks far smaller than a kernel row, so the transpose runs block by block."""
    r = diff(open_checkpoint(_pt_path(case)), open_checkpoint(_tf_path(case)), chunk_bytes=64)
    pairs = {t["b_name"]: [t["a_name"], t.get("transposed") == "b"] for t in r["tensors"]}
    assert pairs == ORACLE[case]["names"]
    assert r["counts"]["equal"] == len(r["tensors"])


def test_a_changed_kernel_is_measured_against_the_transposed_tf_values(tmp_path):
    """One PyTorch weight changed: only it differs, by what numpy computes from the TF kernel transposed."""
    torch = pytest.importorskip("torch")
    from safetensors.torch import load_file, save_file

    case = "pair-hf-tf-bert-mlm"
    tf_name, (pt_name, transposed) = next((k, v) for k, v in ORACLE[case]["names"].items() if v[1] and "intermediate" in k)
    folder = tmp_path / "pt"
    shutil.copytree(_pt_path(case), folder)
    weights = load_file(str(folder / "model.safetensors"))
    torch.manual_seed(0)
    weights[pt_name] = weights[pt_name] + 0.01 * torch.randn_like(weights[pt_name])
    save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})

    r = diff(open_checkpoint(_tf_path(case)), open_checkpoint(str(folder)), chunk_bytes=256)
    changed = [t for t in r["tensors"] if t["status"] != "equal"]
    assert [(t["a_name"], t["b_name"], t["status"], t["transposed"]) for t in changed] == [(tf_name, pt_name, "values", "a")]
    import h5py

    with h5py.File(os.path.join(_tf_path(case), "tf_model.h5")) as f:
        a = next(np.asarray(f[layer][tf_name]) for layer in f.attrs["layer_names"] if tf_name in f[layer].attrs["weight_names"])
    a = a.T.astype(np.float64)
    b = weights[pt_name].numpy().astype(np.float64)
    assert changed[0]["max_abs"] == float(np.max(np.abs(a - b)))
    assert changed[0]["rel_l2"] == pytest.approx(float(np.linalg.norm(a - b) / np.linalg.norm(a)), rel=1e-9)
    assert changed[0]["cosine"] == pytest.approx(float((a * b).sum() / np.linalg.norm(a) / np.linalg.norm(b)), rel=1e-9)


def test_no_map_between_two_torch_files():
    case = "pair-hf-tf-bert-mlm"
    r = diff(open_checkpoint(_pt_path(case)), open_checkpoint(_pt_path(case)))
    assert r["builtin_map"] is None and r["same"]


# The other HF TF writers of the corpus against their PyTorch classes (random init, so values differ):
# names only, the oracle being transformers 4's own convert_tf_weight_name_to_pt_weight_name, with the base-model
# prefix dropped as load_tf2_weights_in_pytorch_model drops it: transformers 5 has no TF, so its answers are
# committed (fixtures/tf_to_pt_names.json, written by fixtures/make_tf_name_oracle.py under transformers 4).
with open(os.path.join(HERE, "..", "fixtures", "tf_to_pt_names.json")) as _f:
    TF_TO_PT = json.load(_f)["hf_tf"]
HF_TF = ["hf-tf-bert-base", "hf-tf-bert-pretraining", "hf-tf-bert-seqcls", "hf-tf-roberta-mlm", "hf-tf-electra-pretraining",
         "hf-tf-albert-mlm", "hf-tf-distilbert-mlm", "hf-tf-gpt2-lm", "hf-tf-t5", "hf-tf-bart"]


@pytest.mark.parametrize("case", HF_TF)
def test_hf_tf_writers_pair_as_transformers_names_them(case, tmp_path):
    T = pytest.importorskip("transformers")
    pytest.importorskip("torch")

    folder = _tf_path(case)
    model = getattr(T, ORACLE[case]["model"].removeprefix("TF"))(T.AutoConfig.from_pretrained(folder))
    model.save_pretrained(tmp_path)
    pt_names = set(open_checkpoint(str(tmp_path)).tensors)
    oracle = TF_TO_PT[case]["names"]
    r = diff(open_checkpoint(folder), open_checkpoint(str(tmp_path)), names_only=True)
    assert r["builtin_map"] == TF_MAP
    pairs = {t["a_name"]: t["b_name"] for t in r["tensors"] if t["a_name"]}
    assert pairs == {n: (pt if pt in pt_names else None) for n, pt in oracle.items()}
    # only TFAlbertMLMHead's own decoder_bias (tied in torch, so not saved) has no partner; no shape differs
    assert [n for n, pt in pairs.items() if pt is None] == [n for n in oracle if n.endswith("predictions/decoder/bias:0")]
    assert r["counts"]["shape"] == 0 and r["counts"]["added"] == 0
