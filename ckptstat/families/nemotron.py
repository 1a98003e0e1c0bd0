"""Nemotron (transformers modeling_nemotron.py): the LLaMA layout (layout.py) with LayerNorm1P norms (a LayerNorm
with weight and bias, its weight stored less one: the same tensors), a plain MLP down(act(up(x))) with ReLU^2
(hidden_act relu2), half of head_dim rotated (partial_rotary_factor 0.5) and an LM head untied by default."""
from __future__ import annotations

from .framework import layout
from .framework.base import Family, Sample
from .framework.layout import DecoderLayout, Paths

NEMOTRON = DecoderLayout(task_heads=("seqcls", "tokcls", "qa"), paths=Paths(tokcls="score", qa_body="transformer"),
                         norm="layernorm", mlp="plain", partial_rotary=0.5)

_SIZES = dict(layout.TINY, head_dim=8)

FAMILY = Family(
    name="nemotron",
    # its tensor names are Jais2's (Arcee's with the norms' biases), its counts too (the rotated fraction has no
    # weight): files without config.json read as arcee, as Jais2's do
    **{**layout.family_fields({"nemotron": NEMOTRON}, "ffn_up"), "signature": r"(?!)"},
    gguf_config=layout.gguf_reader(NEMOTRON, "NemotronForCausalLM"),
    # convert_hf_to_gguf.py NemotronModel.modify_tensors: every `norm.weight` + 1 (LayerNorm1P as a plain LayerNorm)
    gguf_transforms=(("nemotron", r"norm\.weight$", "plus_one"),),
    samples=(
        Sample("NemotronConfig", _SIZES, ("NemotronModel", "NemotronForCausalLM"), detected_as="arcee"),
        Sample("NemotronConfig", dict(_SIZES, attention_bias=True, mlp_bias=True, tie_word_embeddings=True),
               ("NemotronForCausalLM",), detected_as="arcee"),
        # the sequence classifier tests `pad_token_id in input_ids`: values
        Sample("NemotronConfig", dict(_SIZES, num_labels=3, pad_token_id=0), ("NemotronForSequenceClassification",),
               device="cpu", detected_as="arcee"),
        Sample("NemotronConfig", dict(_SIZES, num_labels=3, pad_token_id=0),
               ("NemotronForTokenClassification", "NemotronForQuestionAnswering"), device="cpu", detected_as="arcee"),
    ),
)
