"""GPT-J and CodeGen (transformers modeling_gptj.py, modeling_codegen.py): one layout (layout.py), GPT-J's parallel
layer. Each layer has one LayerNorm (ln_1) whose output feeds attention and the MLP side by side
(x + attn(ln_1(x)) + mlp(ln_1(x))); q, k, v and out_proj have no bias (GPT-J: q_proj, k_proj, v_proj; CodeGen: one
fused qkv_proj [3h, h], its rows in 4 model-parallel groups, a reshape); rotary positions on the first `rotary_dim`
dims of each head (all of them when null), from a sinusoid table built at init and gathered by position (no product
in the forward: positions "rotary_table"); MLP fc_in / gelu_new / fc_out with biases, n_inner (default 4h) wide; ln_f;
and an LM head with a bias, untied by default (both configs default tie_word_embeddings to false; _tied_weights_keys:
lm_head.weight, the bias stays its own). No learned positions: n_positions only sizes the sinusoid table.
GPT-J also has score (sequence classification) and qa_outputs, the latter num_labels wide (DecoderLayout.task_heads).
gguf-py names GPT-J's tensors (architecture gptj); llama.cpp's converter writes none."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from .framework import infer, layout
from .framework.base import ArchSpec, Cfg, Family, Sample, Tensors
from .framework.layout import DecoderLayout, Paths
from .framework.layout_base import FFNWidth

GPTJ = DecoderLayout(norm="layernorm", placement="parallel", mlp="plain", qkv_bias=False, o_bias=False, mlp_bias=True,
                     lm_head_bias="always", positions="rotary_table", act_key="activation_function",
                     task_heads=("seqcls", "qa"), ffn_width=FFNWidth(times_hidden=4),   # n_inner: from_config
                     paths=Paths(body="transformer", embed="wte", layers="h", attn="attn", o="out_proj", up="fc_in",
                                 down="fc_out", attn_in="ln_1", norm="ln_f"))
# gguf-py has no name for CodeGen's fused qkv_proj (its rows in model-parallel groups: not llama.cpp's attn_qkv order)
CODEGEN = replace(GPTJ, fused_qkv=True, task_heads=(), gguf_renames=(("attn_qkv", None),))
_LAYOUTS = layout.Layouts({"gptj": GPTJ, "codegen": CODEGEN})


def _rotary(s: ArchSpec, rotary_dim: int | None) -> ArchSpec:
    """The rotated dims: rotary_dim (null: every dim of the head), no more than head_dim."""
    return replace(s, rope_dim=s.head_dim if rotary_dim is None else min(rotary_dim, s.head_dim))


def from_config(c: Cfg) -> ArchSpec:
    s = _LAYOUTS.from_config(c)
    inner = c.get("n_inner", default=None)   # null: 4 x hidden
    return replace(_rotary(s, c.get("rotary_dim", default=64)), intermediate=int(inner or 4 * s.hidden))


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    """The layout's widths; heads assumed (GPT-J-6B, CodeGen-6B/16B: head_dim 256; CodeGen-350M: 64) and rotary_dim
    its class default, 64 (neither shows in a tensor)."""
    s = _LAYOUTS.from_tensors(T, common)
    a, note = infer.heads_for(s.hidden, 256 if s.hidden >= 4096 else 64)
    s = replace(s, heads=a, kv_heads=a, head_dim=s.hidden // a, assumptions=(note, "no config: rotary_dim assumed 64"))
    return _rotary(s, 64)


_SIZES = dict(n_embd=32, n_layer=2, n_head=4, rotary_dim=4, vocab_size=99, n_positions=64)

FAMILY = Family(
    name="gptj",
    **{**layout.family_fields(_LAYOUTS.by_type, "ffn_up"), "from_config": from_config, "from_tensors": from_tensors},
    gguf_architectures=("gptj",),
    samples=(
        Sample("GPTJConfig", _SIZES, ("GPTJModel", "GPTJForCausalLM", "GPTJForQuestionAnswering")),
        Sample("GPTJConfig", dict(_SIZES, rotary_dim=8, n_inner=48, tie_word_embeddings=True, num_labels=3, pad_token_id=0),
               ("GPTJForCausalLM", "GPTJForSequenceClassification", "GPTJForQuestionAnswering")),   # (QA: 2 wide)
        Sample("CodeGenConfig", dict(_SIZES, n_ctx=64), ("CodeGenModel", "CodeGenForCausalLM")),
        Sample("CodeGenConfig", dict(_SIZES, n_ctx=64, tie_word_embeddings=True), ("CodeGenForCausalLM",)),
    ),
)
