"""Qwen2-MoE and Qwen3-MoE (transformers modeling_qwen2_moe.py, modeling_qwen3_moe.py): LLaMA layouts (layout.py)
whose MLP is, in the sparse layers, a router over num_experts gated MLPs of moe_intermediate_size of which each
token visits num_experts_per_tok. Qwen2-MoE adds a shared expert (shared_expert_intermediate_size) scaled by
sigmoid(shared_expert_gate(x)), and biases q/k/v (qkv_bias; o_proj never); Qwen3-MoE normalises q and k per
head (q_norm, k_norm over head_dim) and has no shared expert. A layer i is sparse when i is not in
mlp_only_layers and (i + 1) % decoder_sparse_step == 0; the others run a dense MLP of intermediate_size.

FLOPs of the routed experts model transformers 5's default experts implementation, grouped_mm (integrations/moe.py
grouped_mm_experts_forward, over the fused gate_up_proj [E, 2f, h] and down_proj [E, h, f] that save_pretrained
writes back as mlp.experts.N.{gate,up,down}_proj): each token's top-k rows, b x s x k rows in all; the eager loop
(experts_implementation="eager") runs the same matmuls expert by expert (layout_moe.routed)."""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ..errors import UsageError
from .framework import infer, layout
from .framework.base import ArchSpec, Cfg, Family, Sample, Tensors
from .framework.decoders import MAX_COUNT, count
from .framework.layout import BiasKeys, DecoderLayout, Paths

# llama.cpp's qwen2moe / qwen3moe make every layer sparse: a dense layer's MLP has no llama.cpp name (gguf-py
# MODEL_TENSORS has no FFN_GATE / FFN_UP / FFN_DOWN for them)
QWEN3_MOE = DecoderLayout(qk_norm="head", mlp="routed", dense_layers=True, mlp_bias=False,
                          gguf_renames=(("ffn_gate", None), ("ffn_up", None), ("ffn_down", None)),
                          task_heads=("seqcls", "tokcls", "qa"), paths=Paths(tokcls="score", qa_body="transformer"))
# Qwen2MoeForQuestionAnswering's body under `model`
QWEN2_MOE = replace(QWEN3_MOE, qk_norm="none", shared="gated", o_bias=False, bias_keys=BiasKeys(qkv="qkv_bias"),
                    paths=replace(QWEN3_MOE.paths, qa_body=""))
LAYOUTS = {"qwen2_moe": QWEN2_MOE, "qwen3_moe": QWEN3_MOE}


def from_config(c: Cfg) -> ArchSpec:
    return moe_spec(LAYOUTS[c.model_type], c)


def moe_spec(lay: DecoderLayout, c: Cfg) -> ArchSpec:
    """The spec of a Qwen-MoE-style config laid out as `lay` (Qwen3-Next's too): the sparse layers by mlp_only_layers
    and decoder_sparse_step, the experts' and the shared expert's widths."""
    spec = layout.spec_from_config(lay, c)      # reads num_hidden_layers once (Cfg.int counts the blocks it makes)
    L, E = spec.layers, count(c, "num_experts")
    step = c.int("decoder_sparse_step", default=1)
    only = c.get("mlp_only_layers", default=[])
    if not isinstance(only, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in only):
        raise UsageError(f"{c.path}: config mlp_only_layers = {only!r} is not a list of layer indices")
    dense = tuple(i for i in range(L) if i in only or not (E > 0 and step > 0 and (i + 1) % step == 0))
    return replace(spec, experts=E, top_k=c.int("num_experts_per_tok"), dense_layers=dense,
                   moe_intermediate=c.int("moe_intermediate_size"),
                   shared_intermediate=c.int("shared_expert_intermediate_size", default=0) if lay.shared != "none" else 0)


# a sparse layer's router (its index in group 1)
_ROUTER = re.compile(r"layers\.(\d+)\.mlp\.gate\.weight$")


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    """Qwen3-MoE when q_norm is there (head_dim exact from it), else Qwen2-MoE; top-k assumed as released."""
    q3 = infer.has(T, layout.pattern(QWEN3_MOE, "attn_q_norm"))
    mt = "qwen3_moe" if q3 else "qwen2_moe"
    lay = LAYOUTS[mt]
    spec = layout.spec_from_tensors(lay, T, dict(common, model_type=mt))
    sparse = {int(m.group(1)) for n in T if (m := _ROUTER.search(n))}
    fs = infer.find(T, layout.pattern(QWEN2_MOE, "ffn_gate_shexp"))
    k = 8 if q3 else 4
    # spec_from_tensors: intermediate a dense layer's gate_proj width (the experts' without one), moe_intermediate theirs
    return replace(spec, top_k=k, shared_intermediate=fs.shape[0] if fs is not None else 0,
                   dense_layers=tuple(i for i in range(spec.layers) if i not in sparse), mlp_bias=False,
                   assumptions=spec.assumptions + (f"no config: experts per token (top-k) assumed {k}, as in "
                                                   f"{'Qwen3-30B-A3B' if q3 else 'Qwen1.5-MoE-A2.7B'}",))


# llama.cpp architecture -> (model_type, class) (convert_hf_to_gguf.py Qwen2MoeModel, Qwen3MoeModel).
GGUF_CLASSES = {"qwen2moe": ("qwen2_moe", "Qwen2MoeForCausalLM"), "qwen3moe": ("qwen3_moe", "Qwen3MoeForCausalLM")}
_GGUF_KEYS = {**{g: k for g, k in infer.GGUF_KEYS.items() if g != "expert_count"}, "expert_count": "num_experts",
              "expert_feed_forward_length": "moe_intermediate_size",
              "expert_shared_feed_forward_length": "shared_expert_intermediate_size"}
_GGUF_ROUTER = re.compile(r"^blk\.(\d+)\.ffn_gate_inp\.weight$")


def gguf_config(arch: str, metadata: Mapping[str, str], tensors: Tensors) -> dict[str, Any] | None:
    """`{arch}.*` keys plus expert_count, expert_feed_forward_length (moe_intermediate_size) and Qwen2-MoE's
    expert_shared_feed_forward_length. llama.cpp makes every layer sparse; a layer without a router
    (ffn_gate_inp) in the file is listed in mlp_only_layers. q/k/v biases: from attn_q.bias."""
    if arch not in GGUF_CLASSES:
        return None
    model_type, cls = GGUF_CLASSES[arch]
    cfg = infer.gguf_config(arch, metadata, tensors, cls, keys=_GGUF_KEYS)
    if cfg is None:
        return None
    sparse = {int(m.group(1)) for n in tensors if (m := _GGUF_ROUTER.match(n))}
    L = cfg.get("num_hidden_layers", 0)
    bias = "blk.0.attn_q.bias" in tensors
    cfg.update(model_type=model_type, mlp_only_layers=[i for i in range(min(L, MAX_COUNT)) if i not in sparse],
               decoder_sparse_step=1, qkv_bias=bias, attention_bias=bias)
    if "shared_expert_intermediate_size" not in cfg and (t := tensors.get("blk.0.ffn_gate_shexp.weight")) is not None:
        cfg["shared_expert_intermediate_size"] = t.shape[0]
    return cfg


_SIZES = dict(vocab_size=97, hidden_size=32, intermediate_size=48, moe_intermediate_size=24, num_hidden_layers=3,
              num_attention_heads=4, num_key_value_heads=2, num_experts=4, num_experts_per_tok=2,
              max_position_embeddings=64)

FAMILY = Family(
    name="qwen_moe",
    before=("llama", "mixtral", "qwen3"),   # tried before them: its q_proj, experts and (Qwen3-MoE) q_norm names match theirs
    # llama.cpp's names (gguf-py MODEL_ARCH.QWEN2MOE / QWEN3MOE) from the layouts' walk: each layer's routed experts
    # stacked into one 3-D blk.N.ffn_{gate,up,down}_exps [experts, out, in] (expert {xid} its slice: ckptstat diff)
    **{**layout.family_fields(LAYOUTS, "ffn_gate_inp"),
       # the routed experts' gated MLPs under `mlp.experts.N` (DeepSeek's too, so deepseek is tried first), or
       # Qwen2-MoE's shared_expert_gate; transformers 5's fused experts (a torch.save of its state_dict) beside
       # Qwen3's q_norm
       "signature": r"(^|[./])layers[./]\d+[./]mlp[./](experts[./]\d+[./]gate_proj|shared_expert_gate[./])",
       "from_config": from_config, "from_tensors": from_tensors},
    signature_together=(infer.FUSED_EXPERTS, r"(^|[./])layers[./]\d+[./]self_attn[./]q_norm[./]"),
    gguf_architectures=tuple(GGUF_CLASSES), gguf_config=gguf_config,
    samples=(
        # routing needs real values (nonzero() has no meta kernel): tiny weights on the CPU
        Sample("Qwen2MoeConfig", dict(_SIZES, shared_expert_intermediate_size=40, mlp_only_layers=[1]),
               ("Qwen2MoeModel", "Qwen2MoeForCausalLM"), device="cpu"),
        Sample("Qwen2MoeConfig", dict(_SIZES, shared_expert_intermediate_size=40, decoder_sparse_step=2,
                                      tie_word_embeddings=True), ("Qwen2MoeForCausalLM",), device="cpu"),
        Sample("Qwen3MoeConfig", dict(_SIZES, head_dim=16, mlp_only_layers=[0]), ("Qwen3MoeModel", "Qwen3MoeForCausalLM"),
               device="cpu"),
        # the sequence classifier tests `pad_token_id in input_ids`: values
        Sample("Qwen2MoeConfig", dict(_SIZES, shared_expert_intermediate_size=40, mlp_only_layers=[1], num_labels=3,
                                      pad_token_id=0), ("Qwen2MoeForSequenceClassification",), device="cpu"),
        Sample("Qwen3MoeConfig", dict(_SIZES, head_dim=16, mlp_only_layers=[0], num_labels=3, pad_token_id=0),
               ("Qwen3MoeForSequenceClassification",), device="cpu"),
        Sample("Qwen2MoeConfig", dict(_SIZES, shared_expert_intermediate_size=40, mlp_only_layers=[1], num_labels=3,
                                      pad_token_id=0), ("Qwen2MoeForTokenClassification", "Qwen2MoeForQuestionAnswering"),
               device="cpu"),
        Sample("Qwen3MoeConfig", dict(_SIZES, head_dim=16, mlp_only_layers=[0], num_labels=3, pad_token_id=0),
               ("Qwen3MoeForTokenClassification", "Qwen3MoeForQuestionAnswering"), device="cpu"),
    ),
)
