"""EXAONE 4 (transformers modeling_exaone4.py): OLMo2's post-norm layers (layout.py: post_attention_layernorm and
post_feedforward_layernorm, none before) with Qwen3's per-head q_norm / k_norm, no biases, sliding attention on
the layers layer_types marks (by default all but every 4th) and rotary only on those sliding layers when a
window is set, and an LM head untied by default."""
from __future__ import annotations

from .framework import layout
from .framework.base import Family, Sample
from .framework.layout import DecoderLayout, Paths

EXAONE4 = DecoderLayout(
    task_heads=("seqcls", "tokcls", "qa"), paths=Paths(tokcls="score", qa_body="transformer"),
    placement="post", qk_norm="head", qkv_bias=False, o_bias=False, mlp_bias=False, nope="global")

_SIZES = dict(hidden_size=32, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, intermediate_size=37,
              vocab_size=99, max_position_embeddings=64, pad_token_id=0)

FAMILY = Family(
    name="exaone4",
    **{**layout.family_fields({"exaone4": EXAONE4}, "post_ffw_norm"),
       "signature": r"(?!)"},   # its tensor names are OLMo2's (q/k norms per head): files without config.json read as olmo
    samples=(
        Sample("Exaone4Config", dict(_SIZES, sliding_window=4), ("Exaone4Model", "Exaone4ForCausalLM"), detected_as="olmo"),
        Sample("Exaone4Config", dict(_SIZES, sliding_window_pattern=2, tie_word_embeddings=True), ("Exaone4ForCausalLM",),
               detected_as="olmo"),
        # the sequence classifier tests `pad_token_id in input_ids`: values
        Sample("Exaone4Config", dict(_SIZES, sliding_window=4, num_labels=3, pad_token_id=0),
               ("Exaone4ForSequenceClassification",), device="cpu", detected_as="olmo"),
        Sample("Exaone4Config", dict(_SIZES, sliding_window=4, num_labels=3, pad_token_id=0),
               ("Exaone4ForTokenClassification", "Exaone4ForQuestionAnswering"), device="cpu", detected_as="olmo"),
    ),
)
