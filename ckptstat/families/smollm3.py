"""SmolLM3 (transformers modeling_smollm3.py): the LLaMA layout (layout.py) with no rotary on the layers
no_rope_layers marks 0 (NoPE: by default every 4th layer), a sliding window only with use_sliding_window, and
the LM head tied by default."""
from __future__ import annotations

from .framework import layout
from .framework.base import Family, Sample
from .framework.layout import DecoderLayout, Paths

SMOLLM3 = DecoderLayout(task_heads=("seqcls", "tokcls", "qa"), paths=Paths(tokcls="score", qa_body="transformer"),
                        nope="flags", tied_default=True)

_SIZES = dict(hidden_size=32, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, intermediate_size=37,
              vocab_size=99, max_position_embeddings=64, pad_token_id=0)

FAMILY = Family(
    name="smollm3",
    **{**layout.family_fields({"smollm3": SMOLLM3}, "attn_q"),
       "signature": r"(?!)"},   # its tensor names are LLaMA's: files without config.json read as llama (same counts)
    gguf_config=layout.gguf_reader(SMOLLM3, "SmolLM3ForCausalLM"),
    # convert_hf_to_gguf.py SmolLM3Model is a LlamaModel (undo_permute): q_proj / k_proj rows permuted per head, the
    # NoPE layers' too
    gguf_transforms=layout.row_rewrites("smollm3", SMOLLM3, "rope"),
    samples=(
        Sample("SmolLM3Config", _SIZES, ("SmolLM3Model", "SmolLM3ForCausalLM"), detected_as="llama"),
        Sample("SmolLM3Config", dict(_SIZES, no_rope_layers=[1, 0, 0, 1], attention_bias=True, mlp_bias=True,
                                     tie_word_embeddings=False), ("SmolLM3ForCausalLM",), detected_as="llama"),
        Sample("SmolLM3Config", dict(_SIZES, use_sliding_window=True, sliding_window=4), ("SmolLM3ForCausalLM",),
               detected_as="llama"),
        # the sequence classifier tests `pad_token_id in input_ids`: values
        Sample("SmolLM3Config", dict(_SIZES, num_labels=3, pad_token_id=0), ("SmolLM3ForSequenceClassification",),
               device="cpu", detected_as="llama"),
        Sample("SmolLM3Config", dict(_SIZES, num_labels=3, pad_token_id=0),
               ("SmolLM3ForTokenClassification", "SmolLM3ForQuestionAnswering"), device="cpu", detected_as="llama"),
    ),
)
