"""GraniteMoE, GraniteMoE-Shared and GraniteMoE-SWA (transformers modeling_granitemoe.py, modeling_granitemoeshared.py,
modeling_granitemoe_swa.py): Granite's LLaMA layer (layout.py; its embedding, residual, attention and logit
multipliers are element-wise scalars, not counted) whose MLP is a router (block_sparse_moe.router, no bias; top-k
logits, a softmax over those) over num_local_experts gated experts of intermediate_size held as one 3-D tensor per
projection in nn.Linear's orientation (DecoderLayout.linear_experts: input_linear [E, 2f, h], gate and up its halves,
output_linear [E, h, f]). GraniteMoE-Shared adds, beside the experts, a gated shared MLP of shared_intermediate_size
(shared_mlp.input_linear [2f, h] fused, output_linear; none when 0) summed in. GraniteMoE-SWA is GraniteMoE-Shared
with GraniteSWA's attention (granite_swa.py: a learned sink per head, sliding layers by layer_types, no rotary where
layer_rope_theta is 0), its experts saved as held (experts.gate_up_proj, experts.down_proj, router.weight). The
routed experts' FLOPs are Mixtral's (transformers 5's grouped_mm: each token's top-k rows; layout_moe.routed).
llama.cpp names GraniteMoE and GraniteMoE-Shared granitemoe; it has no architecture for GraniteMoE-SWA (its own family,
granitemoe_swa.py, from this module's layout and functions)."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..errors import UsageError
from . import granite_swa
from .framework import decoders, infer, layout, walk_names
from .framework.base import FROM_CLASS, ArchSpec, Cfg, Family, Sample, Tensors, class_default
from .framework.layout import DecoderLayout, Paths

# as transformers 5 saves them (conversion_mapping.py's granitemoe renames, reverted on save); llama.cpp's converter
# splits shared_mlp.input_linear into ffn_gate_shexp and ffn_up_shexp: no name of its own
GRANITEMOE = DecoderLayout(mlp="routed", shared="summed", shared_beside=True, fused_gate_up=True, linear_experts="weights",
                           mlp_bias=False, gguf_renames=(("ffn_up_shexp", None),),
                           paths=Paths(mlp="block_sparse_moe", router="router.layer", experts="", stacked_in="input_linear",
                                       stacked_out="output_linear", shared="shared_mlp", gate_up="input_linear",
                                       down="output_linear"))
GRANITEMOE_SWA = replace(GRANITEMOE, sinks=True, nope="theta", linear_experts="parameters",
                         paths=replace(GRANITEMOE.paths, router="router", experts="experts", stacked_in="gate_up_proj",
                                       stacked_out="down_proj"))
_LAYOUTS = {"granitemoe": GRANITEMOE, "granitemoeshared": GRANITEMOE, "granitemoe_swa": GRANITEMOE_SWA}


def from_config(c: Cfg) -> ArchSpec:
    lay = _LAYOUTS[c.model_type]
    spec = granite_swa.from_config(c, lay) if lay.sinks else layout.spec_from_config(lay, c)
    shared = c.int("shared_intermediate_size", default=FROM_CLASS) if c.model_type != "granitemoe" else 0
    return replace(layout.with_experts(spec, c, "num_local_experts"), shared_intermediate=shared)


def from_tensors(T: Tensors, common: dict[str, Any], model_type: str | None = None) -> ArchSpec:
    """Widths from the shapes (the experts as saved or as held); head_dim exact from GraniteMoE-SWA's sinks, else assumed
    (decoders.attention_dims); top-k the config class's default (`model_type`'s where given: Granite 4's hybrids,
    granitemoehybrid.py); GraniteMoE-SWA's sliding layers no tensor shows."""
    V, h, q, kv, d = decoders.attention_dims(T)
    sinks = infer.find(T, layout.pattern(GRANITEMOE_SWA, "attn_sinks", ""))
    experts = infer.shape(T, r"block_sparse_moe\.(input_linear\.weight|experts\.gate_up_proj)$", "block_sparse_moe.input_linear")
    shared = infer.find(T, layout.pattern(GRANITEMOE, "ffn_up_shexp"))
    if len(experts) != 3 or experts[2] != h or experts[1] % 2:
        raise UsageError(f"cannot infer the architecture from tensor names: block_sparse_moe.input_linear {list(experts)} is "
                         f"not GraniteMoE's [experts, 2 x intermediate, {h}]; pass --config")
    mt = model_type or ("granitemoe_swa" if sinks is not None else "granitemoeshared" if shared is not None else "granitemoe")
    notes = [f"no config: experts per token (top-k) assumed {class_default(mt, 'num_experts_per_tok')}, "
             f"{mt}'s config class default"]
    if sinks is not None and len(sinks.shape) == 1 and 0 < sinks.shape[0] and q % sinks.shape[0] == 0:
        d = q // sinks.shape[0]
        notes.append("no config: no sliding layers assumed (only the KV cache depends on them)")
    else:
        notes.append(f"no config: head_dim assumed {d} (KV-cache bytes use the k_proj width, which is exact)")
    lay = GRANITEMOE
    return ArchSpec(layers=infer.count_layers(T, lay.paths.numbered()), hidden=h, heads=q // d, kv_heads=kv // d, head_dim=d,
                    vocab=V, intermediate=experts[1] // 2, gated_mlp=True, norm="rmsnorm", activation="silu", mlp_bias=False,
                    qkv_bias=walk_names.layout_has(T, lay, "attn_q", "bias"),
                    o_bias=walk_names.layout_has(T, lay, "attn_output", "bias"),
                    tied_embeddings=not walk_names.layout_has(T, lay, "output"), experts=experts[0],
                    top_k=int(class_default(mt, "num_experts_per_tok")),
                    shared_intermediate=shared.shape[0] // 2 if shared is not None else 0, assumptions=tuple(notes),
                    **dict(common, model_type=mt))


_SIZES = dict(layout.TINY_MOE, num_local_experts=4)

FAMILY = Family(
    name="granitemoe",
    before=("llama",),   # tried before it: its q_proj names are LLaMA's
    **{**layout.family_fields({"granitemoe": GRANITEMOE, "granitemoeshared": GRANITEMOE}, "ffn_gate_inp"),
       # the router as saved (router.layer) and as held (router.weight)
       "signature": r"(^|[./])layers[./]\d+[./]block_sparse_moe[./]router[./]",
       "from_config": from_config, "from_tensors": from_tensors},
    # GraniteMoE-SWA's sinks (granitemoe_swa.py); Granite 4's hybrid layers' Mamba2 mixer (GraniteMoeHybrid: no
    # template, its MoE names are these)
    signature_without=r"(^|[./])(self_attn[./]sinks$|mamba[./])",
    gguf_architectures=("granitemoe",), gguf_config=layout.gguf_reader(GRANITEMOE, "GraniteMoeForCausalLM"),
    # convert_hf_to_gguf.py GraniteMoeModel is a GraniteModel, a LlamaModel (undo_permute): q_proj / k_proj rows permuted
    gguf_transforms=layout.row_rewrites("granitemoe", GRANITEMOE, "rope"),
    samples=(
        # routing needs real values (nonzero() has no meta kernel): tiny weights on the CPU
        Sample("GraniteMoeConfig", _SIZES, ("GraniteMoeModel", "GraniteMoeForCausalLM"), device="cpu"),
        Sample("GraniteMoeSharedConfig", dict(_SIZES, shared_intermediate_size=16),
               ("GraniteMoeSharedModel", "GraniteMoeSharedForCausalLM"), device="cpu"),
        Sample("GraniteMoeSharedConfig", dict(_SIZES, attention_bias=True, tie_word_embeddings=True),
               ("GraniteMoeSharedForCausalLM",), device="cpu"),
    ),
)
