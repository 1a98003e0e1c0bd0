"""The classifier on TensorFlow naming: google-research BERT, TF2 object-based keys, HF TF names."""
from __future__ import annotations

import pytest

from ckptstat.naming import classify
from ckptstat.naming.layout_ties import kernel_layout, out_in_shape, structural_ties

CASES = [
    # google-research BERT (TF1)
    ("bert/embeddings/word_embeddings", "embedding", None, "parameter"),
    ("bert/embeddings/LayerNorm/gamma", "embedding", None, "parameter"),
    ("bert/encoder/layer_3/attention/self/query/kernel", "encoder", 3, "parameter"),
    ("bert/encoder/layer_11/output/LayerNorm/beta", "encoder", 11, "parameter"),
    ("bert/pooler/dense/kernel", "pooler", None, "parameter"),
    ("cls/predictions/transform/dense/kernel", "cls", None, "parameter"),
    ("cls/predictions/output_bias", "cls", None, "parameter"),
    ("cls/seq_relationship/output_weights", "cls", None, "parameter"),
    ("bert/encoder/layer_3/attention/self/query/kernel/adam_m", "encoder", 3, "optimizer"),
    ("cls/predictions/output_bias/adam_v", "cls", None, "optimizer"),
    ("global_step", "other", None, "counter"),
    # TF2 object-based
    ("model/layer_with_weights-0/kernel/.ATTRIBUTES/VARIABLE_VALUE", "other", None, "parameter"),
    ("model/layer_with_weights-0/kernel/.OPTIMIZER_SLOT/optimizer/m/.ATTRIBUTES/VARIABLE_VALUE", "other", None, "optimizer"),
    ("optimizer/_variables/3/.ATTRIBUTES/VARIABLE_VALUE", "other", None, "optimizer"),
    ("save_counter/.ATTRIBUTES/VARIABLE_VALUE", "other", None, "counter"),
    ("_CHECKPOINTABLE_OBJECT_GRAPH", "other", None, "counter"),
    ("model/bert/encoder/layer_2/attention/self/key/bias/.ATTRIBUTES/VARIABLE_VALUE", "encoder", 2, "parameter"),
    # Hugging Face TF (tf_model.h5)
    ("tf_bert_model/bert/embeddings/word_embeddings/weight:0", "embedding", None, "parameter"),
    ("tf_bert_model/bert/encoder/layer_._5/intermediate/dense/kernel:0", "encoder", 5, "parameter"),
    ("tf_bert_model/bert/pooler/dense/bias:0", "pooler", None, "parameter"),
    ("tf_bert_for_pre_training/mlm___cls/predictions/bias:0", "cls", None, "parameter"),
    ("tf_bert_for_pre_training/nsp___cls/seq_relationship/kernel:0", "cls", None, "parameter"),
    # Keras 2 full-model optimizer state, Keras 3 optimizer vars
    ("optimizer_weights/Adam/m/hidden/kernel:0", "other", None, "optimizer"),
    ("optimizer/vars/3", "other", None, "optimizer"),
]


@pytest.mark.parametrize("name,bucket,layer,role", CASES)
def test_tf_names(name, bucket, layer, role):
    p = classify(name, "I64" if name == "global_step" else "F32")
    assert (p.bucket, p.layer, p.role) == (bucket, layer, role)


def test_layout():
    assert kernel_layout("bert/pooler/dense/kernel", (4, 5)) == "in_out"
    assert kernel_layout("hidden/kernel:0", (4, 5)) == "in_out"
    assert kernel_layout("model/_functional/_operations/1/_kernel/.ATTRIBUTES/VARIABLE_VALUE", (4, 5)) == "in_out"
    assert kernel_layout("cls/seq_relationship/output_weights", (2, 5)) == "out_in"
    assert kernel_layout("bert/pooler/dense/bias", (5,)) is None
    assert kernel_layout("bert/embeddings/word_embeddings", (9, 5)) is None
    assert out_in_shape((4, 5), "in_out") == (5, 4) and out_in_shape((2, 5), "out_in") == (2, 5)


def test_structural_ties():
    names = ["bert/embeddings/word_embeddings", "cls/predictions/output_bias", "cls/seq_relationship/output_bias"]
    ((absent, tied, _),) = structural_ties(names)
    assert (absent, tied) == ("cls/predictions/output_weights", "bert/embeddings/word_embeddings")
    # a checkpoint that does store the decoder has no structural tie, nor one without the head
    assert structural_ties(names + ["cls/predictions/output_weights"]) == []
    assert structural_ties(["bert/embeddings/word_embeddings"]) == []
