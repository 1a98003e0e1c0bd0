"""DiffLlama (transformers modeling_diffllama.py): the LLaMA layout (layout.py) with differential attention
(arXiv 2410.05258; DecoderLayout.differential): the same q/k/v/o projections, two eager attention calls over one
half of the value heads each, combined head pair by head pair with four learned [head_dim] lambdas
(self_attn.lambda_q1, lambda_k1, lambda_q2, lambda_k2) and a weightless RMSNorm; an unbiased MLP, the LM head untied
by default. Its cache is LLaMA's. transformers needs an even num_key_value_heads (the values split along them)."""
from __future__ import annotations

from .framework import layout
from .framework.base import Family, Sample
from .framework.layout import DecoderLayout, Paths

DIFFLLAMA = DecoderLayout(task_heads=("seqcls", "tokcls", "qa"), paths=Paths(tokcls="score", qa_body="transformer"),
                          differential=True, mlp_bias=False)

FAMILY = Family(
    name="diffllama",
    # its tensor names are LLaMA's and the lambdas
    **{**layout.family_fields({"diffllama": DIFFLLAMA}, "attn_q"), "signature": r"(^|[./])self_attn[./]lambda_q1$",
       "gguf_tensor_names": ()},   # llama.cpp has no architecture for it
    before=("llama",),   # LLaMA's q_proj signature matches its files too
    samples=(
        Sample("DiffLlamaConfig", dict(layout.TINY, head_dim=8), ("DiffLlamaModel", "DiffLlamaForCausalLM")),
        Sample("DiffLlamaConfig", dict(layout.TINY, num_key_value_heads=4, attention_bias=True, tie_word_embeddings=True),
               ("DiffLlamaForCausalLM",)),
        # the sequence classifier tests `pad_token_id in input_ids`: values
        Sample("DiffLlamaConfig", dict(layout.TINY, head_dim=8, num_labels=3, pad_token_id=0),
               ("DiffLlamaForSequenceClassification",),
               device="cpu"),
        Sample("DiffLlamaConfig", dict(layout.TINY, head_dim=8, num_labels=3, pad_token_id=0),
               ("DiffLlamaForTokenClassification", "DiffLlamaForQuestionAnswering"), device="cpu"),
    ),
)
