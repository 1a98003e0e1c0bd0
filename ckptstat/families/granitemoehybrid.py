"""Granite 4's hybrids (transformers modeling_granitemoehybrid.py, GraniteMoeHybridModel / GraniteMoeHybridForCausalLM):
GraniteMoE-Shared's layer (granitemoe.py: a top-k router over num_local_experts gated experts of intermediate_size held
[E, 2f, h], a gated shared_mlp of shared_intermediate_size summed in; Granite's embedding, residual, attention and logit
multipliers element-wise scalars, not counted) whose token mixer is, on the layers config layer_types marks "mamba",
the Mamba2 mixer (GraniteMoeHybridMambaLayer, Mamba2Mixer's code: layout_ssm.py, its sizes the config's mamba_* keys)
and attention elsewhere; rotary only where position_embedding_type is "rope" (GraniteMoeHybridConfig's default None:
no rotary module). The experts are saved as GraniteMoE's (conversion_mapping.py maps granitemoehybrid to granitemoe's
renames). The cache: K/V per attention layer, a conv and a recurrent state per Mamba2 layer (base.decoder_kv_cache).
A config without experts (num_local_experts 0: Granite 4 Micro) has the shared MLP alone, a dense gated MLP
(GRANITE4_DENSE). llama.cpp converts it, and Bamba, as `granitehybrid`, splitting shared_mlp.input_linear into ffn_gate
and ffn_up: a file with a router is this family's, one with a dense MLP and no router Bamba's names (gguf_table)."""
from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import replace
from typing import Any

from . import bamba, granitemoe
from .framework import infer, layout
from .framework.base import FROM_CLASS, ArchSpec, Cfg, Family, Sample, Tensors, class_default
from .framework.layout_base import BAMBA_KEYS

GRANITEMOEHYBRID = replace(granitemoe.GRANITEMOE, hybrid="layer_types", ssm_keys=BAMBA_KEYS, nope="embedding_type")
# num_local_experts 0: GraniteMoeHybridDecoderLayer's block_sparse_moe is None and the layer's MLP is shared_mlp alone;
# llama.cpp's converter (GraniteMoeModel.modify_tensors without experts) splits its input_linear into ffn_gate and ffn_up
GRANITE4_DENSE = replace(GRANITEMOEHYBRID, mlp="gated", shared="none", shared_beside=False, gguf_renames=(("ffn_up", None),),
                         paths=replace(GRANITEMOEHYBRID.paths, mlp="shared_mlp"))
_LAYOUTS = layout.Layouts({"granitemoehybrid": GRANITEMOEHYBRID, "granitemoehybrid_dense": GRANITE4_DENSE})


def from_config(c: Cfg) -> ArchSpec:
    shared = c.int("shared_intermediate_size", default=FROM_CLASS)
    if c.get("num_local_experts", default=FROM_CLASS) == 0:
        return replace(layout.spec_from_config(GRANITE4_DENSE, c), intermediate=shared, layout="granitemoehybrid_dense")
    spec = layout.with_experts(layout.spec_from_config(GRANITEMOEHYBRID, c), c, "num_local_experts")
    return replace(spec, shared_intermediate=shared)


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    """GraniteMoE's widths from the shapes (granitemoe.from_tensors), the Mamba2 mixer's and the layers holding it
    (layout.ssm_from_tensors); no rotary, as the config class defaults position_embedding_type. No router: Granite 4
    Micro's dense layers (GRANITE4_DENSE)."""
    if not infer.has(T, rf"(^|\.){re.escape(GRANITEMOEHYBRID.paths.mlp)}\."):   # (router and experts as saved or as held)
        spec = replace(layout.spec_from_tensors(GRANITE4_DENSE, T, common), layout="granitemoehybrid_dense")
    else:
        spec = granitemoe.from_tensors(T, common, "granitemoehybrid")
    hybrid = layout.ssm_from_tensors(GRANITEMOEHYBRID, T, "granitemoehybrid")
    rope = class_default("granitemoehybrid", "position_embedding_type")
    return replace(spec, ssm=hybrid["ssm"], ssm_layers=hybrid["ssm_layers"],
                   nope_layers=() if rope == "rope" else tuple(range(spec.layers)),
                   assumptions=spec.assumptions + hybrid["assumptions"]
                   + (f"no config: position_embedding_type assumed {rope} (the config class's default)",))


def gguf_table(arch: str, names: Collection[str]) -> tuple[tuple[str, str], ...]:
    """A granitehybrid file with a dense MLP (ffn_gate, ffn_up, ffn_down) and no router is Bamba's (llama.cpp converts
    both so; a Granite 4 without experts has no template here); any other, Granite 4's."""
    dense = any(re.search(r"\.ffn_(gate|up|down)\.", n) for n in names) and not any(".ffn_gate_inp." in n for n in names)
    return layout.gguf_tensor_names(bamba.BAMBA) if dense else FIELDS["gguf_tensor_names"]


FIELDS = {**layout.family_fields(_LAYOUTS.by_type, "ssm_in"), "model_types": ("granitemoehybrid",),
          "gguf_tensor_names": layout.gguf_tensor_names(GRANITEMOEHYBRID)}
_SIZES = dict(layout.TINY_MOE, num_hidden_layers=3, num_local_experts=4, shared_intermediate_size=16,
              layer_types=["mamba", "attention", "mamba"], mamba_n_heads=4, mamba_d_head=16, mamba_d_state=8,
              mamba_n_groups=2, mamba_d_conv=3, mamba_chunk_size=4)

FAMILY = Family(
    name="granitemoehybrid",
    **{**FIELDS, "from_config": from_config, "from_tensors": from_tensors},
    # Bamba's, Jamba's and FalconH1's mixers are at layers.N.mamba too, beside their MLP at feed_forward
    signature_without=r"(^|[./])feed_forward[./]",
    gguf_architectures=("granitehybrid",), gguf_table=gguf_table,
    # convert_hf_to_gguf.py GraniteHybridModel (undo_permute): its attention layers' q_proj / k_proj rows permuted as
    # LlamaModel's (Bamba's too); the K heads from its per-layer head_count_kv (analysis/conversion.py)
    # its attention layers' q/k rows permuted (GraniteMoeModel's, LlamaModel's), Mamba2Model's A = -exp(A_log)
    gguf_transforms=layout.row_rewrites("granitehybrid", GRANITEMOEHYBRID, "rope") + (
        ("granitehybrid", r"(^|\.)A_log$", "neg_exp"),),
    samples=(
        # routing needs real values (nonzero() has no meta kernel): tiny weights on the CPU
        Sample("GraniteMoeHybridConfig", _SIZES, ("GraniteMoeHybridForCausalLM", "GraniteMoeHybridModel"), device="cpu"),
        Sample("GraniteMoeHybridConfig", dict(_SIZES, layer_types=["attention", "mamba", "attention"],
                                              position_embedding_type="rope", attention_bias=True, mamba_proj_bias=True,
                                              mamba_conv_bias=False, mamba_chunk_size=16, tie_word_embeddings=True),
               ("GraniteMoeHybridForCausalLM",), device="cpu"),
        # Granite 4 Micro: no experts (no routing either)
        Sample("GraniteMoeHybridConfig", {**{k: v for k, v in _SIZES.items() if k != "num_experts_per_tok"},
                                          "num_local_experts": 0}, ("GraniteMoeHybridForCausalLM", "GraniteMoeHybridModel")),
    ),
)
