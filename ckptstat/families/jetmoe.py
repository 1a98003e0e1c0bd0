"""JetMoE (transformers modeling_jetmoe.py, configuration_jetmoe.py): LLaMA's pre-RMSNorm layer (layout.py) whose
attention and MLP are both mixtures of experts over num_local_experts, each token visiting num_experts_per_tok (k).
The attention (self_attention) is a mixture of attention heads (DecoderLayout.moa, mixers_moa.py): a router
(experts.router.layer) picks k query experts, each an input_linear [E, g x d, h] projection to num_key_value_heads (g)
heads of kv_channels (d), keys and values from one fused kv_proj [2 g d, h] repeated k times, so eager attention runs
k x g heads (JetMoeConfig's num_attention_heads), then each expert's output_linear [E, h, g x d], their weighted sum and
a [h] bias (experts.bias). The MLP (mlp) is a router (mlp.router.layer) over gated experts held stacked in nn.Linear's
orientation (DecoderLayout.linear_experts: input_linear [E, 2f, h], gate and up its halves, output_linear [E, h, f]) of
intermediate_size, plus a [h] bias (mlp.bias, DecoderLayout.moe_bias). Both run JetMoeParallelExperts' loop, one
F.linear per expert over the tokens routed to it: b x s x k rows in all (layout_moe.routed). Total parameters count
every expert, attention and MLP; active ones each token's top-k of both. The KV cache holds g heads of d per layer.
llama.cpp has no JetMoE architecture."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..errors import UsageError
from .framework import infer, layout, walk_names
from .framework.base import FROM_CLASS, ArchSpec, Cfg, Family, Sample, Tensors, class_default
from .framework.layout import DecoderLayout, Paths
from .framework.layout_parts import task_labels

JETMOE = DecoderLayout(mlp="routed", moa=True, linear_experts="weights", moe_bias=True, qkv_bias=False, o_bias=False,
                       mlp_bias=False, act_key="activation_function", tied_default=True,
                       paths=Paths(attn="self_attention", router="router.layer", experts="", stacked_in="input_linear",
                                   stacked_out="output_linear"), task_heads=("seqcls",))


def from_config(c: Cfg) -> ArchSpec:
    """JetMoeConfig derives num_attention_heads (num_key_value_heads x num_experts_per_tok) and reads head_dim as
    kv_channels."""
    g, k = c.int("num_key_value_heads", default=FROM_CLASS), c.int("num_experts_per_tok", default=FROM_CLASS)
    derived = Cfg({**c.cfg, "num_attention_heads": g * k}, c.path, c.model_type, c.head, c.common)
    spec = layout.spec_from_config(JETMOE, derived)
    return replace(layout.with_experts(spec, c, "num_local_experts"), head_dim=c.int("kv_channels", default=FROM_CLASS))


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    """Widths from the shapes: the attention experts' input_linear [E, g x d, h], the MLP's [E, 2f, h]; head_dim
    (kv_channels) and top-k JetMoeConfig's defaults where they divide, said in the assumptions."""
    V, h = walk_names.layout_shape(T, JETMOE, "token_embd")
    held = layout.every_module(JETMOE)   # the attention's experts and the MLP's, by their paths (no llama.cpp names)
    moa, mlp = walk_names.shape(T, held, "experts.input_linear"), walk_names.shape(T, held, "mlp.input_linear")
    if len(moa) != 3 or len(mlp) != 3 or mlp[1] % 2 or not moa[0] or not moa[1]:
        raise UsageError(f"cannot infer the architecture from tensor names: self_attention.experts.input_linear "
                         f"{list(moa)} and mlp.input_linear {list(mlp)} are not JetMoE's [experts, heads x kv_channels, "
                         "hidden] and [experts, 2 x intermediate, hidden]; pass --config")
    E, gd = moa[0], moa[1]
    d, k = int(class_default("jetmoe", "kv_channels")), int(class_default("jetmoe", "num_experts_per_tok"))
    d = d if gd % d == 0 else gd
    notes = (f"no config: kv_channels (head_dim) assumed {d} and experts per token (top-k) {k}, JetMoeConfig's "
             "defaults (FLOPs and active parameters depend on the top-k)",)
    return ArchSpec(layers=infer.count_layers(T, JETMOE.paths.numbered()), hidden=h, heads=k * gd // d, kv_heads=gd // d,
                    head_dim=d, vocab=V, intermediate=mlp[1] // 2, gated_mlp=True, norm="rmsnorm", activation="silu",
                    qkv_bias=False, o_bias=False, mlp_bias=False,
                    tied_embeddings=not walk_names.layout_has(T, JETMOE, "output"), experts=E, top_k=k,
                    assumptions=notes, num_labels=task_labels(JETMOE, T), **common)


_SIZES = dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_key_value_heads=2, kv_channels=8,
              intermediate_size=48, num_local_experts=4, num_experts_per_tok=2, max_position_embeddings=64)

FAMILY = Family(
    name="jetmoe",
    **{**layout.family_fields({"jetmoe": JETMOE}, "ffn_gate_inp"), "from_config": from_config,
       "from_tensors": from_tensors,
       "signature": r"(^|[./])layers[./]\d+[./]self_attention[./]experts[./]router[./]layer[./]",
       "gguf_tensor_names": ()},   # llama.cpp has no jetmoe architecture
    gguf_architectures=(),
    samples=(
        # routing needs real values (the experts' split sizes are .tolist() of the routing): tiny weights on the CPU
        Sample("JetMoeConfig", _SIZES, ("JetMoeModel", "JetMoeForCausalLM"), device="cpu"),
        Sample("JetMoeConfig", dict(_SIZES, tie_word_embeddings=False, num_experts_per_tok=1), ("JetMoeForCausalLM",),
               device="cpu"),
        # the sequence classifier tests `pad_token_id in input_ids`: values
        Sample("JetMoeConfig", dict(_SIZES, num_labels=3, pad_token_id=0), ("JetMoeForSequenceClassification",), device="cpu"),
    ),
)
