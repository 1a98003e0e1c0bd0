"""Arcee (AFM; transformers modeling_arcee.py): the LLaMA layout (layout.py) with a plain MLP, down(act(up(x)))
with ReLU^2 by default (hidden_act relu2), and an LM head untied by default."""
from __future__ import annotations

from .framework import layout
from .framework.base import Family, Sample
from .framework.layout import DecoderLayout, Paths

ARCEE = DecoderLayout(task_heads=("seqcls", "tokcls", "qa"), paths=Paths(tokcls="score", qa_body="transformer"),
                      mlp="plain")   # hidden_act: relu2, ArceeConfig's default

_SIZES = dict(layout.TINY)

FAMILY = Family(
    name="arcee",
    # its tensor names are LLaMA's less gate_proj: a layer's mlp.up_proj with no gate (nor fused gate_up) beside it
    **layout.family_fields({"arcee": ARCEE}, "ffn_up"),
    signature_without=r"(^|[./])mlp[./]gate(_up)?_proj[./]",
    before=("llama",),   # LLaMA's q_proj signature matches its files too
    gguf_config=layout.gguf_reader(ARCEE, "ArceeForCausalLM"),
    # convert_hf_to_gguf.py ArceeModel is a LlamaModel (undo_permute): q_proj / k_proj rows permuted per head
    gguf_transforms=layout.row_rewrites("arcee", ARCEE, "rope"),
    samples=(
        Sample("ArceeConfig", _SIZES, ("ArceeModel", "ArceeForCausalLM")),
        Sample("ArceeConfig", dict(_SIZES, attention_bias=True, mlp_bias=True, tie_word_embeddings=True),
               ("ArceeForCausalLM",)),
        # the sequence classifier tests `pad_token_id in input_ids`: values
        Sample("ArceeConfig", dict(_SIZES, num_labels=3, pad_token_id=0), ("ArceeForSequenceClassification",),
               device="cpu"),
        Sample("ArceeConfig", dict(_SIZES, num_labels=3, pad_token_id=0),
               ("ArceeForTokenClassification", "ArceeForQuestionAnswering"), device="cpu"),
    ),
)
