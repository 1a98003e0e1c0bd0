"""GPT-NeoX / Pythia (transformers modeling_gpt_neox.py, configuration_gpt_neox.py): the LLaMA layout (layout.py) with
LayerNorms (weight and bias), embed_in, a fused query_key_value [3h, h] (its rows per head [q_h k_h v_h]; llama.cpp's
converter reorders them into [q; k; v] blocks for attn_qkv, which `ckptstat diff` replays: gguf_transforms) and dense, biased by
attention_bias (default true), rotary on the first rotary_pct of each head (transformers 5 saves it as
partial_rotary_factor; 0.25 by default), a plain biased MLP dense_h_to_4h / hidden_act / dense_4h_to_h,
final_layer_norm, an LM head `embed_out` (transformers 5's `lm_head` in memory) untied by default
(GPTNeoXForCausalLM's _tied_weights_keys: lm_head.weight), and the task heads score, classifier and qa_outputs.

Each layer has two LayerNorms, input_layernorm before the attention and post_attention_layernorm before the MLP
(pre-norm placement). use_parallel_residual (default true) feeds the MLP's norm the layer's input,
x + attn(ln1(x)) + mlp(ln2(x)), unlike Cohere's and GPT-J's parallel layer (one norm whose output both read); false
feeds it x + attn(ln1(x)). Either way the same modules, matmuls and two residual adds per layer: the one layout
describes both."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from .framework import base, decoders, infer, layout
from .framework.base import ArchSpec, Cfg, Family, Sample, Tensors
from .framework.layout import DecoderLayout, Paths

GPTNEOX = DecoderLayout(
    norm="layernorm", fused_qkv=True, mlp="plain", mlp_bias=True, partial_rotary=0.25,
    task_heads=("seqcls", "tokcls", "qa"),
    paths=Paths(body="gpt_neox", embed="embed_in", attn="attention", qkv="query_key_value", o="dense",
                up="dense_h_to_4h", down="dense_4h_to_h", norm="final_layer_norm", lm_head="embed_out"))

# The LM head as save_pretrained writes it (`embed_out`), and as transformers 5 names it in memory (`lm_head`,
# conversion_mapping.py renames it on load and back on save): a torch.save(state_dict) holds the latter.
_LM_HEAD = r"(^|\.)(embed_out|lm_head)\.weight$"


def from_config(c: Cfg) -> ArchSpec:
    """The layout's spec, the rotated fraction read under its older name rotary_pct too."""
    s = layout.spec_from_config(GPTNEOX, c)
    return replace(s, rope_dim=decoders.partial_rotary(c, s.head_dim, "rotary_pct"))


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    """The layout's widths; heads assumed (Pythia: head_dim 128 from 1.4B on, 64 below) and rotary_pct its class default
    (neither shows in a tensor); the LM head under either of its names."""
    s = layout.spec_from_tensors(GPTNEOX, T, dict(common, model_type="gpt_neox"))
    a, note = infer.heads_for(s.hidden, 128 if s.hidden >= 2048 else 64)
    d, pct = s.hidden // a, GPTNEOX.partial_rotary or 1.0
    return replace(s, heads=a, kv_heads=a, head_dim=d, rope_dim=int(d * pct), tied_embeddings=infer.find(T, _LM_HEAD) is None,
                   assumptions=(note, f"no config: rotary_pct assumed {pct}"))


_SIZES = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37, vocab_size=99,
              max_position_embeddings=64)


def gguf_config(arch: str, metadata: Mapping[str, str], tensors: Tensors) -> dict[str, Any] | None:
    """llama.cpp's `gptneox` files (Pythia, GPT-NeoX-20B): LLaMA's keys, `rope.dimension_count` as rotary_pct,
    `use_parallel_residual`, biases from `attn_qkv.bias`."""
    cfg = infer.gguf_config(arch, metadata, tensors, "GPTNeoXForCausalLM")
    if cfg is None:
        return None
    cfg.update(model_type="gpt_neox", attention_bias="blk.0.attn_qkv.bias" in tensors)
    infer.gguf_rotary(arch, metadata, cfg, "rotary_pct")
    parallel = str(metadata.get(f"{arch}.use_parallel_residual")).lower()   # a GGUF bool reads "true" / "false"
    if parallel in ("true", "false"):
        cfg["use_parallel_residual"] = parallel == "true"
    return cfg


FAMILY = Family(
    name="gptneox",
    # layers.N.attention.query_key_value (GPT-NeoX-Japanese's too: its dense_bias tells it apart)
    **{**layout.family_fields({"gpt_neox": GPTNEOX}, "attn_qkv"), "from_config": from_config, "from_tensors": from_tensors,
       "head_rules": base.decoder_head_rules(_LM_HEAD, r"^gpt_neox\.")},
    gguf_architectures=("gptneox",), gguf_config=gguf_config,
    # GPTNeoXModel.modify_tensors: query_key_value's weight and bias rows [heads, 3, d] -> [3, heads, d]
    gguf_transforms=layout.row_rewrites("gptneox", GPTNEOX, "qkv_groups"),
    samples=(
        Sample("GPTNeoXConfig", _SIZES, ("GPTNeoXModel", "GPTNeoXForCausalLM")),
        Sample("GPTNeoXConfig", dict(_SIZES, use_parallel_residual=False, attention_bias=False, rotary_pct=0.5,
                                     tie_word_embeddings=True), ("GPTNeoXForCausalLM",), infer=False),
        Sample("GPTNeoXConfig", dict(_SIZES, num_labels=3, pad_token_id=0),
               ("GPTNeoXForSequenceClassification", "GPTNeoXForTokenClassification", "GPTNeoXForQuestionAnswering")),
    ),
)
