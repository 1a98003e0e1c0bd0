"""gpt-oss (transformers 5 models/gpt_oss/modeling_gpt_oss.py, configuration_gpt_oss.py): a LLaMA-shaped
decoder (pre-RMSNorm, rotary positions, grouped-query attention) with

- q/k/v/o biases (GptOssConfig sets attention_bias = True; a config.json value overrides it, as
  PretrainedConfig.__init__ sets the saved keys after the class's own);
- attention sinks: GptOssAttention.sinks, one learned logit per query head, appended as an extra column to
  every row of scores before the softmax and dropped after it (eager_attention_forward): `a` parameters a
  layer, no matmul;
- layers alternating between a sliding window (sliding_window, 128 in the release) and full attention
  (config.layer_types; GptOssConfig's default: even layers slide, odd ones attend everything);
- a mixture of experts as MLP (GptOssMLP): a router with bias (GptOssTopKRouter, E x h + E) picks
  num_experts_per_tok experts per token, softmax over their logits; the experts are stored fused, as
  3-D parameters without `.weight` (GptOssExperts): gate_up_proj [E, h, 2f] (gate and up interleaved
  along the last axis), gate_up_proj_bias [E, 2f], down_proj [E, f, h], down_proj_bias [E, h]; the
  activation is clamp(gate, max=7) x sigmoid(1.702 x gate) x (clamp(up, +-7) + 1).

FLOPs model transformers 5's default experts implementation, grouped_mm (integrations/moe.py
grouped_mm_experts_forward, what a model runs unless experts_implementation says otherwise): each token's k rows
pass through gate_up_proj and down_proj of the experts it was routed to, b x s x k rows in all, as the other MoE
families count them; the eager loop (GptOssExperts.forward, experts_implementation="eager") runs the same
matmuls expert by expert, and so do MegaBlocks and the MXFP4 integration's gather-scatter matmul_ogs
(integrations/mxfp4.py). (transformers 4's inference path off the CPU ran every expert on every token with two
bmm's: E / k times the experts' matmul work.)
Active parameters: the router and the top-k experts.

MXFP4 checkpoints (the release: experts' gate_up_proj / down_proj as `*_blocks` / `*_scales`) are read through
census/quant/'s logical view, which gives these same names and shapes (docs/quantized.md).

GGUF (llama.cpp's "gpt-oss" architecture): gguf_config reads the metadata as config.json; GGUF_TENSOR_NAMES maps
the names back for `ckptstat diff`, where the experts' split and transposed stacks cannot align (docs/gguf.md).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ..errors import UsageError
from .framework import decoders, infer, layout, walk_names
from .framework.base import ArchSpec, Cfg, Family, Sample, Tensors, class_default
from .framework.decoders import count
from .framework.layout import DecoderLayout, Paths
from .framework.layout_parts import task_labels

# the layout (layout.py): attention sinks, a biased top-k router, fused experts with biases and a clamped GLU;
# llama.cpp names post_attention_layernorm post_attention_norm (gguf-py MODEL_ARCH.GPT_OSS)
GPT_OSS = DecoderLayout(mlp="routed", router="topk_softmax", fused_experts=True, sinks=True, mlp_bias=True,
                        paths=Paths(router="router", tokcls="score"), gguf_renames=(("ffn_norm", "post_attention_norm"),),
                        task_heads=("seqcls", "tokcls"))

# GptOssConfig's defaults, which transformers uses for keys a config.json leaves out (config_defaults.json); also
# what a checkpoint without config.json is assumed to have
_WINDOW, _HEAD_DIM, _KV_HEADS, _TOP_K = (int(class_default("gpt_oss", k)) for k in
                                         ("sliding_window", "head_dim", "num_key_value_heads", "num_experts_per_tok"))
def _default_types(layers: int) -> list[str]:
    """GptOssConfig's layer_types when the config has none: sliding on even layers, full on odd ones."""
    return ["sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(layers)]


def from_config(c: Cfg) -> ArchSpec:
    spec = layout.spec_from_config(GPT_OSS, c)    # reads num_hidden_layers once (Cfg.int counts the blocks it makes)
    L, E = spec.layers, count(c, "num_local_experts")
    # the window and the layer pattern as GptOssConfig fills them in, then which layers keep a window in
    # DynamicCache (decoders.sliding, the rule every decoder shares)
    filled = dict(c.cfg)
    filled.setdefault("sliding_window", _WINDOW)
    if filled.get("layer_types") is None:
        filled["layer_types"] = _default_types(L)
    window = decoders.sliding(Cfg(filled, c.path, c.model_type, c.head, c.common), L)
    k = c.int("num_experts_per_tok", default=_TOP_K)
    if k > E:
        raise UsageError(f"{c.path}: config num_experts_per_tok = {k} is more than num_local_experts = {E}")
    return replace(spec, experts=E, top_k=k, **window)


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    V, h, q, kv, _ = decoders.attention_dims(T)
    sinks = walk_names.layout_shape(T, GPT_OSS, "attn_sinks", "")      # one sink per query head: head_dim is exact
    fused = walk_names.shape(T, layout.every_module(GPT_OSS), "experts.gate_up_proj")
    if len(sinks) != 1 or not 0 < sinks[0] <= q or q % sinks[0] or len(fused) != 3 or fused[2] % 2:
        raise UsageError(f"cannot infer the architecture from tensor names: self_attn.sinks {list(sinks)} and "
                         f"mlp.experts.gate_up_proj {list(fused)} are not gpt-oss's [heads] and [experts, hidden, "
                         f"2 x intermediate] for a q_proj of {q} rows; pass --config")
    a, (E, _, f2) = sinks[0], fused
    d = q // a
    L = infer.count_layers(T, GPT_OSS.paths.numbered())
    slide = tuple(range(0, L, 2))
    notes = (f"no config: experts per token (top-k) assumed {_TOP_K}, sliding window {_WINDOW} on the even layers "
             "(full attention on the odd ones), as in gpt-oss-20b and gpt-oss-120b (active parameters, FLOPs and the "
             "KV cache depend on them)",)
    return ArchSpec(layers=L, hidden=h, heads=a, kv_heads=kv // d, head_dim=d, vocab=V, intermediate=f2 // 2,
                    gated_mlp=True, norm="rmsnorm", qkv_bias=walk_names.layout_has(T, GPT_OSS, "attn_q", "bias"),
                    o_bias=walk_names.layout_has(T, GPT_OSS, "attn_output", "bias"), mlp_bias=True,
                    tied_embeddings=not walk_names.layout_has(T, GPT_OSS, "output"), experts=E, top_k=_TOP_K,
                    activation="silu", sliding_window=_WINDOW, sliding_layers=slide if len(slide) < L else (),
                    assumptions=notes, num_labels=task_labels(GPT_OSS, T), **common)


# llama.cpp's "gpt-oss" (convert_hf_to_gguf.py GptOssModel.set_gguf_parameters): TextModel's keys (expert_count from
# num_local_experts, key_length / value_length from head_dim) plus attention.sliding_window, expert_feed_forward_length
# (intermediate_size, the experts' width; read after feed_forward_length, which holds the same) and the YaRN keys.
_GGUF_KEYS = {**infer.GGUF_KEYS, "expert_feed_forward_length": "intermediate_size", "attention.sliding_window": "sliding_window"}


def gguf_config(arch: str, metadata: Mapping[str, str], tensors: Tensors) -> dict[str, Any] | None:
    """GptOssForCausalLM from `gpt-oss.*` keys. The file has no layer_types: llama.cpp slides on the even layers
    (llama-model.cpp, set_swa_pattern(2)), GptOssConfig's default, which from_config fills in. q/k/v/o biases from
    attn_q.bias; rope_theta, rms_norm_eps and the YaRN table (rope.scaling.*) as written."""
    cfg = infer.gguf_config(arch, metadata, tensors, "GptOssForCausalLM", keys=_GGUF_KEYS) if arch == "gpt-oss" else None
    if cfg is None:
        return None
    bias = "blk.0.attn_q.bias" in tensors
    cfg.update(model_type="gpt_oss", attention_bias=bias)
    for key, name in (("rope.freq_base", "rope_theta"), ("attention.layer_norm_rms_epsilon", "rms_norm_eps")):
        if (v := infer.gguf_float(metadata, f"{arch}.{key}")) is not None:
            cfg[name] = v
    factor = infer.gguf_float(metadata, f"{arch}.rope.scaling.factor")
    if metadata.get(f"{arch}.rope.scaling.type") == "yarn" and factor is not None:
        cfg["rope_scaling"] = dict(rope_type="yarn", factor=factor)
        if (orig := infer.gguf_int(metadata, f"{arch}.rope.scaling.original_context_length")) is not None:
            cfg["rope_scaling"]["original_max_position_embeddings"] = orig
    return cfg


# HF name -> llama.cpp GGUF name (gguf-py tensor_mapping.py, MODEL_ARCH.GPT_OSS; convert_hf_to_gguf.py GptOssModel).
# modify_tensors renames before mapping: `sinks` -> `sinks.weight`, `down_proj_bias` -> `down_proj.bias`, and splits
# the fused experts: gate_up_proj [E, h, 2f] transposed to [E, 2f, h], its even rows (gate) -> `gate_proj.weight`,
# odd rows (up) -> `up_proj.weight`, each [E, f, h] (ffn_gate_exps, ffn_up_exps), gate_up_proj_bias likewise
# (`gate_proj.bias`, `up_proj.bias`, [E, f]); down_proj [E, f, h] transposed to `down_proj.weight` [E, h, f]
# (ffn_down_exps). MXFP4 releases are repacked as ggml MXFP4 in the same layout. Of the experts' tensors only
# down_proj_bias keeps HF's values in HF's layout: the split and transposed stacks read back under the converter's
# intermediate names (`mlp.experts.gate_proj.weight`...), which no HF tensor has (diff: removed / added, the same
# count; docs/gguf.md).
# Whole-name entries come first: diff applies the rules in order, and a rule matches the GGUF module name. Then
# TensorNameMap's, from the layout's walk (the suffixless sinks and experts.down_proj included), and the converter's
# intermediate names of gate_up_proj's halves.
GGUF_TENSOR_NAMES = (
    ("model.layers.{bid}.self_attn.sinks", "blk.{bid}.attn_sinks.weight"),
    ("model.layers.{bid}.mlp.experts.down_proj_bias", "blk.{bid}.ffn_down_exps.bias"),
) + layout.gguf_tensor_names(GPT_OSS) + (
    ("model.layers.{bid}.mlp.experts.gate_proj", "blk.{bid}.ffn_gate_exps"),
    ("model.layers.{bid}.mlp.experts.up_proj", "blk.{bid}.ffn_up_exps"),
)

# tiny sizes; head_dim x heads != hidden as in the release (64 x 64 = 4096 vs 2880); a YaRN table as released,
# its factor matching max_position_embeddings / original_max_position_embeddings
_SIZES = dict(vocab_size=97, hidden_size=32, intermediate_size=24, num_hidden_layers=4, num_attention_heads=4,
              num_key_value_heads=2, head_dim=16, num_local_experts=4, num_experts_per_tok=2, sliding_window=4,
              max_position_embeddings=64, rope_scaling=dict(rope_type="yarn", factor=2.0, beta_fast=32.0, beta_slow=1.0,
                                                            truncate=False, original_max_position_embeddings=32))

FAMILY = Family(
    name="gpt_oss",
    before=("llama", "mixtral"),   # tried before them: its fused experts and q_proj names match their signatures
    # GptOssForCausalLM: `model.` + lm_head, _tied_weights_keys lm_head, untied by default
    **{**layout.family_fields({"gpt_oss": GPT_OSS}, "attn_sinks"),
       # the attention sinks and the experts' biases (every transformers 5 MoE holds fused experts in memory)
       "signature": r"(^|[./])layers[./]\d+[./](self_attn[./]sinks|mlp[./]experts[./]gate_up_proj_bias)",
       "from_config": from_config, "from_tensors": from_tensors, "gguf_tensor_names": GGUF_TENSOR_NAMES},
    gguf_architectures=("gpt-oss",), gguf_config=gguf_config,
    samples=(
        # routing needs real values (nonzero() has no meta kernel): tiny weights on the CPU, where the experts'
        # loop runs (the routed rows only)
        Sample("GptOssConfig", _SIZES, ("GptOssModel", "GptOssForCausalLM"), device="cpu"),
        # tied, no attention biases, a layer pattern of its own
        Sample("GptOssConfig", dict(_SIZES, tie_word_embeddings=True, attention_bias=False, num_hidden_layers=3,
                                    layer_types=["full_attention", "sliding_attention", "sliding_attention"]),
               ("GptOssForCausalLM",), device="cpu"),
        # the sequence classifier tests `pad_token_id in input_ids`: values
        Sample("GptOssConfig", dict(_SIZES, num_labels=3, pad_token_id=0), ("GptOssForSequenceClassification",), device="cpu"),
        Sample("GptOssConfig", dict(_SIZES, num_labels=3, pad_token_id=0), ("GptOssForTokenClassification",), device="cpu"),
    ),
)
