"""GPT-2 (transformers modeling_gpt2.py, configuration_gpt2.py): the LLaMA layout (layout.py) with wte plus a learned
wpe, pre-LayerNorm layers (ln_1 before the attention, ln_2 before the MLP) of Conv1D weights (stored [in, out]): a
fused, biased attn.c_attn [h, 3h] and attn.c_proj, a plain biased MLP mlp.c_fc / activation_function / mlp.c_proj,
n_inner wide (null: 4 x n_embd); the final ln_f, and an LM head tied to wte unless the config says otherwise
(GPT2LMHeadModel._tied_weights_keys); the task heads score, classifier and qa_outputs, and GPT2DoubleHeadsModel's LM
head beside its multiple_choice_head (DecoderLayout.task_heads, framework/decoder_heads.py; its SequenceSummary
framework/summary.py's).
llama.cpp names it `gpt2`; its converter transposes the Conv1D weights, which `ckptstat diff` replays (gguf_transforms)."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ..errors import UsageError
from .framework import decoder_heads, infer, layout
from .framework.base import ArchSpec, Family, Sample, Tensors
from .framework.layout import DecoderLayout, Paths
from .framework.layout_base import FFNWidth

GPT2 = DecoderLayout(
    norm="layernorm", fused_qkv=True, mlp="plain", qkv_bias=True, o_bias=True, mlp_bias=True, positions="learned",
    conv1d=True, ffn_width=FFNWidth(key="n_inner", else_times=4), act_key="activation_function", tied_default=True,
    task_heads=("seqcls", "tokcls", "qa", decoder_heads.MC),
    paths=Paths(body="transformer", embed="wte", pos="wpe", layers="h", attn="attn", qkv="c_attn", o="c_proj",
                up="c_fc", down="c_proj", attn_in="ln_1", mlp_in="ln_2", norm="ln_f"))
_LAYOUTS = layout.Layouts({"gpt2": GPT2})


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    """The layout's widths; head_dim assumed 64 (GPT-2's every size), and the LM head tied when it is absent or
    stored as wte's alias (a torch.save keeps the shared storage). GPTBigCode's names are GPT-2's: its nn.Linear
    c_attn, [out, in], is refused rather than read transposed."""
    qkv, embed = (infer.shape(T, layout.pattern(GPT2, g), g) for g in ("attn_qkv", "token_embd"))
    if len(qkv) != 2 or qkv[0] != embed[1]:
        raise UsageError(f"attn.c_attn.weight is {list(qkv)}, not GPT-2's Conv1D [n_embd, 3 x n_embd] ([in, out]): "
                         "nn.Linear weights (a GPTBigCode save?); pass --config")
    s = _LAYOUTS.from_tensors(T, common)
    a, note = infer.heads_for(s.hidden, 64)
    lm, wte = infer.find(T, r"lm_head\.weight$"), infer.find(T, r"wte\.weight$")
    tied = lm is None or (wte is not None and lm.alias_key == wte.alias_key)
    return replace(s, heads=a, kv_heads=a, head_dim=s.hidden // a, tied_embeddings=tied,
                   assumptions=(note,) + tuple(n for n in s.assumptions if "head_dim" not in n))


def gguf_config(arch: str, metadata: Mapping[str, str], tensors: Tensors) -> dict[str, Any] | None:
    """GGUF gpt2 metadata under GPT-2's own config names (n_layer, n_embd, ...)."""
    cfg = infer.gguf_config(arch, metadata, tensors, "GPT2LMHeadModel")
    if cfg is None:
        return None
    out = {"n_layer": cfg["num_hidden_layers"], "n_embd": cfg["hidden_size"], "n_head": cfg["num_attention_heads"],
           "n_inner": cfg.get("intermediate_size"), "n_positions": cfg.get("max_position_embeddings", 1024)}
    out.update({k: cfg[k] for k in ("model_type", "architectures", "vocab_size", "tie_word_embeddings")})
    return out


_SIZES = dict(n_embd=32, n_layer=2, n_head=4, vocab_size=99, n_positions=64)

FAMILY = Family(
    name="gpt2",
    before=("gpt_bigcode",),   # tried before them: the same tensor names: a file without config.json reads as GPT-2
    **decoder_heads.double_heads({**layout.family_fields(_LAYOUTS.by_type, "attn_qkv"), "from_tensors": from_tensors}),
    gguf_config=gguf_config,
    # GPT2Model.modify_tensors: the Conv1D weights (.c_attn, .c_proj, .c_fc) transposed to [out, in]
    gguf_transforms=(("gpt2", r"(^|\.)c_(attn|proj|fc)\.weight$", "transpose"),),
    samples=(
        Sample("GPT2Config", _SIZES, ("GPT2Model", "GPT2LMHeadModel")),
        Sample("GPT2Config", dict(_SIZES, tie_word_embeddings=False), ("GPT2LMHeadModel",)),
        Sample("GPT2Config", dict(_SIZES, num_labels=3, pad_token_id=0),
               ("GPT2ForSequenceClassification", "GPT2ForTokenClassification", "GPT2ForQuestionAnswering"),
               device="cpu"),   # its sequence classifier tests `pad_token_id in input_ids`: values
        Sample("GPT2Config", _SIZES, ("GPT2DoubleHeadsModel",)),
        Sample("GPT2Config", dict(_SIZES, summary_proj_to_labels=False, summary_activation="tanh"),
               ("GPT2DoubleHeadsModel",), infer=False),   # the file shows the summary's width, not its activation
    ),
)
