"""OpenAI GPT (transformers modeling_openai.py, configuration_openai.py): the LLaMA layout (layout.py) with
tokens_embed plus a learned positions_embed, post-LayerNorm layers (ln_1 after the attention's residual, ln_2 after
the MLP's) of GPT-2's Conv1D weights (stored [in, out]): a fused, biased attn.c_attn [h, 3h] and attn.c_proj, a plain
biased MLP mlp.c_fc / afn / mlp.c_proj 4 x n_embd wide, no final norm, an LM head tied to tokens_embed
(OpenAIGPTLMHeadModel._tied_weights_keys), OpenAIGPTDoubleHeadsModel's LM head beside its multiple_choice_head
(DecoderLayout.task_heads, framework/decoder_heads.py; its SequenceSummary framework/summary.py's), and no cache (its
forward returns none). llama.cpp has no architecture for it."""
from __future__ import annotations

from typing import Any

from .framework import decoder_heads, infer, layout
from .framework.base import ArchSpec, Family, Sample, Tensors, TieRule
from .framework.layout import DecoderLayout, Paths
from .framework.layout_base import FFNWidth

OPENAI_GPT = DecoderLayout(
    norm="layernorm", placement="post", fused_qkv=True, mlp="plain", qkv_bias=True, o_bias=True, mlp_bias=True,
    positions="learned", conv1d=True, final_norm=False, ffn_width=FFNWidth(times_hidden=4), act_key="afn",
    tied_default=True, task_heads=("seqcls", decoder_heads.MC),
    paths=Paths(body="transformer", embed="tokens_embed", pos="positions_embed", layers="h", attn="attn", qkv="c_attn",
                o="c_proj", up="c_fc", down="c_proj", attn_out="ln_1", mlp_out="ln_2"))

_LAYOUTS = layout.Layouts({"openai-gpt": OPENAI_GPT})


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    """The layout's widths. OpenAIGPTDoubleHeadsModel._tied_weights_keys run the other way (tokens_embed.weight from
    lm_head.weight): its tied save keeps lm_head and drops the embedding, which is then read from lm_head."""
    lm, embed = infer.find(T, r"(^|\.)lm_head\.weight$"), infer.find(T, r"(^|\.)tokens_embed\.weight$")
    if lm is None or embed is not None:
        return _LAYOUTS.from_tensors(T, common)
    return _LAYOUTS.from_tensors({**{n: t for n, t in T.items() if t is not lm}, "transformer.tokens_embed.weight": lm},
                                 common)   # lm_head gone: tied


_SIZES = dict(n_embd=32, n_layer=2, n_head=4, vocab_size=99, n_positions=64)

# h.N.attn.c_attn is GPT-2's too: positions_embed shows this family's files (tokens_embed is not in a tied
# OpenAIGPTDoubleHeadsModel's)
_FIELDS = decoder_heads.double_heads({**layout.family_fields(_LAYOUTS.by_type, "position_embd"), "from_tensors": from_tensors,
                                      "gguf_tensor_names": (), "kv_cache": None})

FAMILY = Family(
    name="openai_gpt",
    **{**_FIELDS, "tie_rules": _FIELDS["tie_rules"] + (   # the double-heads model's tie, the other way (from_tensors)
        TieRule("transformer.tokens_embed.weight", "lm_head.weight", "config", heads=(decoder_heads.MC,)),)},
    before=("gpt2",),
    gguf_architectures=(),   # llama.cpp has no architecture for it: no GGUF names either
    samples=(
        Sample("OpenAIGPTConfig", _SIZES, ("OpenAIGPTModel", "OpenAIGPTLMHeadModel", "OpenAIGPTDoubleHeadsModel")),
        Sample("OpenAIGPTConfig", dict(_SIZES, tie_word_embeddings=False, afn="relu"),
               ("OpenAIGPTLMHeadModel", "OpenAIGPTDoubleHeadsModel")),
        Sample("OpenAIGPTConfig", dict(_SIZES, num_labels=3, pad_token_id=0), ("OpenAIGPTForSequenceClassification",),
               device="cpu"),   # its sequence classifier tests `pad_token_id in input_ids`: values
        Sample("OpenAIGPTConfig", dict(_SIZES, summary_use_proj=False), ("OpenAIGPTDoubleHeadsModel",),
               infer=False),   # without its projection the file holds no multiple_choice_head: it reads as the LM head
    ),
)
