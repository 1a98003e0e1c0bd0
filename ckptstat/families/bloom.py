"""BLOOM (transformers modeling_bloom.py, configuration_bloom.py): the LLaMA layout (layout.py) with word_embeddings
followed by a LayerNorm (word_embeddings_layernorm: `embeddings` "normed"), no position table (ALiBi: a per-head linear
bias on the scores, added by the baddbmm that computes Q K^T; FlopCounterMode counts it as that bmm), pre-LayerNorm layers
with a fused, biased self_attention.query_key_value [3h, h] (its rows per head [q_h k_h v_h]) and dense, a plain biased
MLP dense_h_to_4h / GELU / dense_4h_to_h that is 4h wide whatever the config says, ln_f, an LM head tied to
word_embeddings by default (BloomForCausalLM._tied_weights_keys), and the task heads score, classifier and qa_outputs.
`pretraining_tp` with `slow_but_exact` runs dense and dense_4h_to_h as tp slices of their input, summed (`tp_slices`,
layout_tp.py): the same MACs, tp more adds. apply_residual_connection_post_layernorm (the residual taken after the norm)
moves no module or add. llama.cpp names it `bloom`; its converter reorders query_key_value's rows into [q; k; v] blocks,
which `ckptstat diff` does not replay, so this family reads no GGUF file and has no GGUF table."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from .framework import decoder_heads, infer, layout, layout_tp
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
    return replace(s, heads=a, kv_heads=a, head_dim=s.hidden // a, num_labels=decoder_heads.labels(T), assumptions=(note,))


_SIZES = dict(hidden_size=32, n_layer=2, n_head=4, vocab_size=99)

FAMILY = Family(
    name="bloom",
    before=("falcon",),   # tried before them: its h.N.self_attention.query_key_value names match falcon's signature
    # the embedding LayerNorm: Falcon's files share h.N.self_attention.query_key_value but have none
    **{**layout.family_fields({"bloom": BLOOM}, "token_embd_norm"), "from_config": from_config, "from_tensors": from_tensors,
       # llama.cpp's converter reorders query_key_value's rows (per head [q k v] to [q; k; v]), which `ckptstat diff`
       # does not replay: its files are not read as BLOOM's (the walk's llama.cpp names: tests/test_layout.py)
       "gguf_tensor_names": ()},
    gguf_architectures=(),
    samples=(
        Sample("BloomConfig", _SIZES, ("BloomModel", "BloomForCausalLM", "BloomForQuestionAnswering")),
        Sample("BloomConfig", dict(_SIZES, n_head=8, tie_word_embeddings=False, num_labels=3, pad_token_id=0, pretraining_tp=2,
                                   slow_but_exact=True),
               ("BloomForCausalLM", "BloomForSequenceClassification", "BloomForTokenClassification")),
    ),
)
