"""BLOOM (transformers modeling_bloom.py, configuration_bloom.py): the LLaMA layout (layout.py) with word_embeddings
followed by a LayerNorm (word_embeddings_layernorm: `embeddings` "normed"), no position table (ALiBi: a per-head linear
bias on the scores, added by the baddbmm that computes Q K^T; FlopCounterMode counts it as that bmm), pre-LayerNorm layers
with a fused, biased self_attention.query_key_value [3h, h] (its rows per head [q_h k_h v_h]) and dense, a plain biased
MLP dense_h_to_4h / GELU / dense_4h_to_h that is 4h wide whatever the config says, ln_f, an LM head tied to
word_embeddings by default (BloomForCausalLM._tied_weights_keys), and the task heads score, classifier and qa_outputs.
`pretraining_tp` with `slow_but_exact` runs dense and dense_4h_to_h as tp slices of their input, summed (`tp_slices`,
layout_tp.py): the same MACs, tp more adds. apply_residual_connection_post_layernorm (the residual taken after the norm)
moves no module or add. llama.cpp names it `bloom` (convert_hf_to_gguf.py BloomModel): gguf_config reads its metadata,
the layout's GGUF table names its tensors (the converter strips `transformer.` before mapping), and its reordering of
query_key_value's rows into [q; k; v] blocks is replayed by `ckptstat diff` (gguf_transforms)."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from .framework import infer, layout, layout_tp
from .framework.base import ArchSpec, Cfg, Family, Sample, Tensors
from .framework.layout import DecoderLayout, Paths
from .framework.layout_base import FFNWidth

BLOOM = DecoderLayout(
    norm="layernorm", fused_qkv=True, mlp="plain", qkv_bias=True, o_bias=True, mlp_bias=True, positions="alibi",
    embeddings="normed", ffn_width=FFNWidth(times_hidden=4), activation="gelu", tied_default=True,
    task_heads=("seqcls", "tokcls", "qa"), tp_slices=True,
    paths=Paths(body="transformer", embed="word_embeddings", embed_norm="word_embeddings_layernorm", layers="h",
                attn="self_attention", qkv="query_key_value", o="dense", up="dense_h_to_4h", down="dense_4h_to_h",
                norm="ln_f"))


def from_config(c: Cfg) -> ArchSpec:
    """The layout's spec, hidden_size read under its older name n_embed too (BloomConfig takes it as a keyword), and
    the tensor-parallel slices of the slow, exact path."""
    h = c.int("hidden_size", "n_embed")
    s = layout.spec_from_config(BLOOM, Cfg({**c.cfg, "hidden_size": h}, c.path, c.model_type, c.head, c.common))
    return replace(s, variant=layout_tp.from_config(c))


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    """The layout's widths; heads assumed (bloom-560m..3b: head_dim 64; 7b1 and 176B: 128), which no tensor shows."""
    s = layout.spec_from_tensors(BLOOM, T, dict(common, model_type="bloom"))
    a, note = infer.heads_for(s.hidden, 128 if s.hidden >= 4096 else 64)
    return replace(s, heads=a, kv_heads=a, head_dim=s.hidden // a, assumptions=(note,))


_SIZES = dict(hidden_size=32, n_layer=2, n_head=4, vocab_size=99)

# BloomModel.set_gguf_parameters writes block_count (n_layer), embedding_length, head_count (n_head), head_count_kv (n_head
# again), feed_forward_length 4h (BLOOM's MLP is 4h whatever the config says), a context_length of seq_length or the width
# (BLOOM has no position table: nothing to read) and layer_norm_eps
_GGUF_KEYS = {"block_count": "n_layer", "embedding_length": "hidden_size", "attention.head_count": "n_head"}


def gguf_config(arch: str, metadata: Mapping[str, str], tensors: Tensors) -> dict[str, Any] | None:
    """llama.cpp's `bloom` files under BloomConfig's names; the vocabulary from token_embd, tied when no output.weight."""
    return infer.gguf_config(arch, metadata, tensors, "BloomForCausalLM", keys=_GGUF_KEYS) if arch == "bloom" else None


FAMILY = Family(
    name="bloom",
    before=("falcon",),   # tried before them: its h.N.self_attention.query_key_value names match falcon's signature
    # the embedding LayerNorm: Falcon's files share h.N.self_attention.query_key_value but have none
    **{**layout.family_fields({"bloom": BLOOM}, "token_embd_norm"), "from_config": from_config, "from_tensors": from_tensors},
    gguf_architectures=("bloom",), gguf_config=gguf_config,
    # BloomModel.modify_tensors: query_key_value's weight and bias rows [heads, 3, d] -> [3, heads, d]
    gguf_transforms=layout.row_rewrites("bloom", BLOOM, "qkv_groups"),
    samples=(
        Sample("BloomConfig", _SIZES, ("BloomModel", "BloomForCausalLM", "BloomForQuestionAnswering")),
        Sample("BloomConfig", dict(_SIZES, n_head=8, tie_word_embeddings=False, num_labels=3, pad_token_id=0, pretraining_tp=2,
                                   slow_but_exact=True),
               ("BloomForCausalLM", "BloomForSequenceClassification", "BloomForTokenClassification")),
    ),
)
