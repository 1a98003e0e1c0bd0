"""ModernBERT-decoder (transformers modeling_modernbert_decoder.py, configuration_modernbert_decoder.py): the LLaMA
layout (layout.py) with LayerNorms without bias (norm_bias false; another value is answered by the meta path), a
LayerNorm over the token embeddings (`embed_norm`), no attention norm on the first layer (an Identity:
`first_attn_norm`), q/k/v and Wo, a gated MLP whose fused Wi holds input and gate (act(input) x gate) before Wo,
sliding layers of local_attention // 2 tokens with their own rotary table between the full ones (layer_types, by
default every global_attn_every_n_layers-th layer full), final_norm, then ModernBertDecoderPredictionHead (`lm_head`:
dense, classifier_activation, norm; `lm_transform`) and the biased `decoder` tied to the token embeddings
(ModernBertDecoderForCausalLM._tied_weights_keys). ModernBertDecoderForSequenceClassification: the same prediction head at
`head`, then `classifier` (unbiased: classifier_bias false) on every token, the last non-pad token's logits picked
(encoder_heads.py). llama.cpp has no architecture for the decoder."""
from __future__ import annotations

from .framework import layout
from .framework.base import ArchSpec, Cfg, Family, HeadRule, Sample
from .framework.encoder_heads import EncoderHeads, with_heads
from .framework.layout import DecoderLayout, Paths

MODERNBERT_DECODER = DecoderLayout(
    norm="layernorm_nobias", fused_gate_up=True, embeddings="normed", first_attn_norm=False, lm_transform="hidden_act",
    lm_dense_bias=False,
    lm_head_bias="always", local_rope=True, act_key="hidden_activation", tied_default=True,
    requires=(("norm_bias", False), ("classifier_bias", False), ("decoder_bias", True)),
    paths=Paths(embed="embeddings.tok_embeddings", embed_norm="embeddings.norm", attn="attn", o="Wo", gate_up="Wi",
                down="Wo", attn_in="attn_norm", mlp_in="mlp_norm", norm="final_norm", lm_head="decoder",
                lm_dense="lm_head.dense", lm_norm="lm_head.norm"))


def from_config(c: Cfg) -> ArchSpec:
    """The layout's spec, the sliding window and layer types derived as ModernBertDecoderConfig derives them where the
    file has none (sliding_window = local_attention // 2; every global_attn_every_n_layers-th layer full)."""
    L, local = c.int("num_hidden_layers"), c.get("local_attention", default=128)
    every = c.int("global_attn_every_n_layers", default=3)
    types = c.get("layer_types", default=None) or [
        "full_attention" if every and i % every == 0 else "sliding_attention" for i in range(L)]
    window = c.get("sliding_window", default=None) or (local // 2 if isinstance(local, int) and local else -1)
    return layout.spec_from_config(MODERNBERT_DECODER, Cfg({**c.cfg, "layer_types": types, "sliding_window": window},
                                                           c.path, c.model_type, c.head, c.common))


_SIZES = dict(hidden_size=32, num_hidden_layers=4, num_attention_heads=4, intermediate_size=37, vocab_size=99,
              max_position_embeddings=64, pad_token_id=0, bos_token_id=1, eos_token_id=2, cls_token_id=1, sep_token_id=2)

_FIELDS = with_heads({**layout.family_fields({"modernbert-decoder": MODERNBERT_DECODER}, "ffn_up"), "from_config": from_config},
                     MODERNBERT_DECODER, EncoderHeads(("seqcls",), prediction=True, poolings=("last",), bias=False))

FAMILY = Family(
    name="modernbert_decoder",
    # layers.N.attn.Wo and mlp.Wi under model.: no other family's; its one classifier is the sequence classifier's
    **{**_FIELDS, "gguf_tensor_names": (),
       "head_rules": (HeadRule(r"^classifier\.weight$", "seqcls"),) + tuple(_FIELDS["head_rules"])},
    gguf_architectures=(),   # llama.cpp has no architecture for it: no GGUF names either
    samples=(
        Sample("ModernBertDecoderConfig", dict(_SIZES, local_attention=8),
               ("ModernBertDecoderModel", "ModernBertDecoderForCausalLM")),
        Sample("ModernBertDecoderConfig", dict(_SIZES, attention_bias=True, mlp_bias=True, tie_word_embeddings=False,
                                               local_attention=4), ("ModernBertDecoderForCausalLM",)),
        # the sequence classifier picks the last non-pad token's logits: values
        Sample("ModernBertDecoderConfig", dict(_SIZES, local_attention=8, num_labels=3),
               ("ModernBertDecoderForSequenceClassification",), device="cpu"),
    ),
)
