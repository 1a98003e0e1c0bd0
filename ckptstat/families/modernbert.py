"""ModernBERT (transformers modeling_modernbert.py): an encoder (layout.py, DecoderLayout.causal false) of pre-LayerNorm
layers without biases by default: tok_embeddings then a LayerNorm (embeddings.norm), a fused Wqkv and Wo, rotary q/k,
the attention alternating global and local (layer_types; eager attention computes the whole square either way and masks
it, so the FLOPs are the same), no norm before layer 0's attention (nn.Identity), a gated GeGLU MLP (Wi holding input and
gate, Wo), final_norm, and ModernBertForMaskedLM's head (head.dense, gelu, head.norm) and decoder, biased, tied to the
embeddings. The norms' and the head's biases (norm_bias, classifier_bias, decoder_bias) other than the defaults: the
meta path answers."""
from __future__ import annotations

from .framework import layout
from .framework.base import CHOICE, Family, Sample
from .framework.encoder_heads import EncoderHeads, with_heads
from .framework.layout import DecoderLayout, Paths

MODERNBERT = DecoderLayout(causal=False, norm="layernorm_nobias", embeddings="normed", fused_qkv=True, fused_gate_up=True,
                           first_attn_norm=False, lm_transform="gelu", lm_dense_bias=False, lm_head_bias="always",
                           local_rope=True, tied_default=True,
                           requires=(("norm_bias", False), ("classifier_bias", False), ("decoder_bias", True)),
                           paths=Paths(embed="embeddings.tok_embeddings", embed_norm="embeddings.norm", attn="attn",
                                       qkv="Wqkv", o="Wo", attn_in="attn_norm", mlp_in="mlp_norm", gate_up="Wi",
                                       down="Wo", norm="final_norm", lm_dense="head.dense", lm_norm="head.norm",
                                       lm_head="decoder"))

_SIZES = dict(hidden_size=32, num_hidden_layers=3, num_attention_heads=4, intermediate_size=37, vocab_size=99,
              max_position_embeddings=64, pad_token_id=0, bos_token_id=1, eos_token_id=2, cls_token_id=1, sep_token_id=2)

FAMILY = Family(
    name="modernbert",
    before=("modernbert_decoder",),   # tried first: the decoder's signature (mlp.Wi) matches its files too; its Wqkv does not
    **with_heads({**layout.family_fields({"modernbert": MODERNBERT}, "attn_qkv"),
                  "gguf_tensor_names": ()},   # llama.cpp's modern-bert converter renames the HF names: not mapped here
                 MODERNBERT, EncoderHeads(("seqcls", "tokcls", "qa", CHOICE), prediction=True, poolings=("cls", "mean"))),
    samples=(
        Sample("ModernBertConfig", _SIZES, ("ModernBertModel", "ModernBertForMaskedLM")),
        Sample("ModernBertConfig", dict(_SIZES, attention_bias=True, mlp_bias=True, tie_word_embeddings=False,
                                        global_attn_every_n_layers=2), ("ModernBertModel", "ModernBertForMaskedLM")),
        # the task heads: their names (head.*, classifier) do not tell them apart (encoder_heads.with_heads)
        Sample("ModernBertConfig", dict(_SIZES, num_labels=3), ("ModernBertForSequenceClassification",
               "ModernBertForTokenClassification", "ModernBertForMultipleChoice"), device="cpu", infer=False),
        Sample("ModernBertConfig", dict(_SIZES, classifier_pooling="mean", classifier_activation="silu"),
               ("ModernBertForSequenceClassification", "ModernBertForQuestionAnswering", "ModernBertForMultipleChoice"),
               device="cpu", infer=False),
    ),
)
