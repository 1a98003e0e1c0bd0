"""DeBERTa-v2 and DeBERTa-v3 (model_type deberta-v2; transformers modeling_deberta_v2.py): deberta.py's walk with
separate query / key / value projections, log-bucketed relative positions (position_buckets), share_att_key,
norm_rel_ebd, the ConvLayer after the first layer (conv_kernel_size) and a multiple-choice head; deberta.py's
docstring describes them."""
from __future__ import annotations

from typing import Any

from . import deberta
from .framework.base import CHOICE, ArchSpec, Cfg, Family, Sample, Tensors
from .framework.recorder import tensors
from .framework.walk_names import signature


def from_config(c: Cfg) -> ArchSpec:
    return deberta.config(c, v2=True)


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    return deberta.names(T, common, v2=True)


_V3 = dict(deberta.BASE, relative_attention=True, pos_att_type="p2c|c2p", share_att_key=True, position_buckets=256,
           max_relative_positions=64, norm_rel_ebd="layer_norm")
_CLASSES = tuple(c.replace("Deberta", "DebertaV2") for c in deberta._CLASSES) + ("DebertaV2ForMultipleChoice",)

FAMILY = Family(
    name="deberta-v2",
    model_types=("deberta-v2",),
    signature=signature(deberta.WALKED_V2, deberta.SELF + "query_proj", suffix="weight"),
    from_config=from_config, from_tensors=from_tensors, build=deberta.build,
    expected_tensors=tensors(deberta.walk, deberta.BODY),
    heads=deberta.HEADS + (CHOICE,),
    head_rules=deberta.HEAD_RULES,
    tie_rules=deberta.tie_rules(),
    samples=(
        # v3-like (deberta-v3-base: shared attention keys, 256 log buckets, normalised rel_embeddings)
        Sample("DebertaV2Config", _V3, _CLASSES[:-1], device="cpu"),
        # a one-label sequence classifier's names (pooler, classifier [1, hidden]): config.json tells the head
        Sample("DebertaV2Config", _V3, _CLASSES[-1:], device="cpu", infer=False),
        # v2-xlarge-like: the ConvLayer, buckets, separate position projections, factorised embeddings, token types
        Sample("DebertaV2Config", dict(deberta.BASE, position_buckets=8, max_relative_positions=64, conv_kernel_size=3,
                                       norm_rel_ebd="layer_norm", embedding_size=16, type_vocab_size=2),
               _CLASSES[:-1], device="cpu"),
        # p2c alone, grouped conv with relu, absolute positions, no buckets; untied and non-legacy MLM heads
        Sample("DebertaV2Config", dict(deberta.SIZES, relative_attention=True, pos_att_type=["p2c"], conv_kernel_size=5,
                                       conv_groups=2, conv_act="relu", tie_word_embeddings=False),
               ("DebertaV2Model", "DebertaV2ForMaskedLM"), device="cpu"),
        Sample("DebertaV2Config", dict(_V3, legacy=False), ("DebertaV2ForMaskedLM",), device="cpu"),
    ),
)
