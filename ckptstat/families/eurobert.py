"""EuroBERT (transformers modeling_eurobert.py): LLaMA's fields and module names (pre-RMSNorm layers, rotary q/k,
grouped-query attention, a gated SiLU MLP) as an encoder: every token attends to every other (is_causal False,
create_bidirectional_mask), no KV cache; EuroBertForMaskedLM's lm_head is biased when the MLP is (config mlp_bias),
tied to embed_tokens only with tie_word_embeddings (default false)."""
from __future__ import annotations

from .framework import layout
from .framework.base import Family, Sample
from .framework.encoder_heads import EncoderHeads, with_heads
from .framework.layout import DecoderLayout

EUROBERT = DecoderLayout(causal=False, lm_head_bias="mlp")

_SIZES = dict(layout.TINY, pad_token_id=0, bos_token_id=1, eos_token_id=2, mask_token_id=3)

FAMILY = Family(
    name="eurobert",
    **with_heads({**layout.family_fields({"eurobert": EUROBERT}, "attn_q"),
                  "signature": r"(?!)"},   # its tensor names are LLaMA's: files without config.json read as llama
                 EUROBERT, EncoderHeads(("seqcls", "tokcls"), dense=True, poolings=("late", "bos", "mean"))),
    samples=(
        Sample("EuroBertConfig", _SIZES, ("EuroBertModel", "EuroBertForMaskedLM"), detected_as="llama"),
        Sample("EuroBertConfig", dict(_SIZES, attention_bias=True, mlp_bias=True, tie_word_embeddings=True),
               ("EuroBertModel", "EuroBertForMaskedLM"), detected_as="llama"),
        Sample("EuroBertConfig", dict(_SIZES, num_labels=3), ("EuroBertForSequenceClassification",
               "EuroBertForTokenClassification"), device="cpu", detected_as="llama"),
        Sample("EuroBertConfig", dict(_SIZES, classifier_pooling="bos"), ("EuroBertForSequenceClassification",),
               device="cpu", detected_as="llama"),
        Sample("EuroBertConfig", dict(_SIZES, classifier_pooling="mean"), ("EuroBertForSequenceClassification",),
               device="cpu", detected_as="llama"),
    ),
)
