"""NemotronH (transformers modeling_nemotron_h.py, NemotronHModel / NemotronHForCausalLM): each layer an RMSNorm and one
mixer at `mixer` (NemotronHBlock, DecoderLayout.one_mixer), by layers_block_type (or hybrid_override_pattern's letters
M, *, -, E): the Mamba2 mixer (NemotronHMamba2Mixer, Mamba2Mixer's code: layout_ssm.py, mamba_num_heads x
mamba_head_dim channels), attention without rotary, a plain MLP (up, relu2, down: ArchSpec.dense_layers) or a routed
MoE (a sigmoid top-k router over n_routed_experts plain experts of moe_intermediate_size, saved one module per expert,
and a plain shared expert of moe_shared_expert_intermediate_size summed in; with moe_latent_size, Nemotron 3 Super's
latent MoE: the routed experts run at that width, between fc1_latent_proj and fc2_latent_proj of every token, while
the router and the shared expert read the hidden state: ArchSpec.moe_latent); the layer count is the block list's
length. The router's grouping, its score-correction buffer and scaling are element-wise. Embeddings, norm_f and the
LM head as saved under `backbone.` (conversion_mapping.py's rename, reverted on save). The cache: K/V per attention
layer, a conv and a recurrent state per Mamba2 layer, nothing for an MLP or MoE layer (base.decoder_kv_cache).
Refused (the meta path answers): biased MLPs (mlp_bias: the experts
have none), a sliding window, the mixer keys under their legacy mamba_* names (NemotronHConfig renames them)."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from ..errors import NoAnalyticModel, UsageError
from .framework import layout, layout_ssm
from .framework.base import FROM_CLASS, ArchSpec, Cfg, Family, Sample, Tensors
from .framework.layout import DecoderLayout, Paths
from .framework.layout_base import NEMOTRON_H_KEYS

NEMOTRON_H = DecoderLayout(hybrid="blocks", ssm_keys=NEMOTRON_H_KEYS, one_mixer=True, mlp="routed", dense_layers=True, ties=False,
                           routed_mlp="plain", shared="summed", moe_latent=True, nope="all", qkv_bias=False, o_bias=False,
                           act_key="mlp_hidden_act", gguf_renames=(("ffn_up_exps", None), ("ffn_down_exps", None)),
                           requires=(("mlp_bias", False), ("sliding_window", None)),
                           paths=Paths(body="backbone", embed="embeddings", attn_in="norm", norm="norm_f", attn="mixer",
                                       ssm="mixer", mlp="mixer", up="up_proj", shared="shared_experts"))

# NemotronHConfig: hybrid_override_pattern's letters; the legacy layer-type names (configuration_utils); the block list
# when the config gives neither (its __post_init__); the mixer keys it renames on load
_LETTERS = {"M": "linear_attention", "E": "moe", "*": "full_attention", "-": "mlp"}
_LEGACY = {"mamba": "linear_attention", "attention": "full_attention"}
_DEFAULT = ["linear_attention", "moe", "full_attention", "mlp"]
_RENAMED = ("mamba_n_groups", "mamba_d_conv", "mamba_expand", "mamba_conv_bias", "mamba_chunk_size")


def _blocks(c: Cfg) -> list[str]:
    types = c.get("layers_block_type", default=None)
    pattern = c.get("hybrid_override_pattern", default=None)
    if types is None and isinstance(pattern, str) and all(ch in _LETTERS for ch in pattern):
        types = [_LETTERS[ch] for ch in pattern]
    elif types is None and pattern is not None:
        raise UsageError(f"{c.path}: config hybrid_override_pattern is not a string of M, *, - and E")
    types = _DEFAULT if types is None else types
    if not isinstance(types, list) or not types or any(_LEGACY.get(t, t) not in _LETTERS.values() for t in types):
        raise UsageError(f"{c.path}: config layers_block_type is not a list of {', '.join(_LETTERS.values())}")
    return [str(_LEGACY.get(t, t)) for t in types]


def from_config(c: Cfg) -> ArchSpec:
    if renamed := [k for k in _RENAMED if k in c.cfg]:
        raise NoAnalyticModel(f"{c.path}: config {', '.join(renamed)}: the nemotron_h op template reads NemotronHConfig's "
                              "own names of the mixer's sizes")
    types = _blocks(c)
    # the layer count is the block list's (NemotronHConfig.num_hidden_layers ignores a saved value)
    cc = Cfg(dict(c.cfg, num_hidden_layers=len(types)), c.path, c.model_type, c.head, c.common)
    spec = layout.with_experts(layout.spec_from_config(NEMOTRON_H, cc), cc, "n_routed_experts")
    def of(*kinds: str) -> tuple[int, ...]:
        return tuple(i for i, t in enumerate(types) if t in kinds)
    return replace(spec, ssm=layout_ssm.from_config(NEMOTRON_H_KEYS, cc, spec.hidden), ssm_layers=of("linear_attention"),
                   ffn_layers=of("mlp", "moe"), dense_layers=of("mlp"),
                   moe_intermediate=cc.int("moe_intermediate_size", default=FROM_CLASS),
                   shared_intermediate=cc.int("moe_shared_expert_intermediate_size", default=FROM_CLASS),
                   moe_latent=cc.int("moe_latent_size", default=0))


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    """Which layer is which block shows in its names, but not the router's top-k or the mixer's groups and chunks:
    not guessed."""
    raise UsageError("cannot infer a NemotronH's architecture from tensor names alone; pass --config")


_SIZES = dict(hidden_size=32, num_attention_heads=4, num_key_value_heads=2, head_dim=8, intermediate_size=37, vocab_size=99,
              layers_block_type=["linear_attention", "moe", "full_attention", "mlp", "linear_attention"],
              mamba_num_heads=4, mamba_head_dim=16, ssm_state_size=8, n_groups=2, conv_kernel=3, chunk_size=4,
              n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=48, moe_shared_expert_intermediate_size=16)

FAMILY = Family(
    name="nemotron_h",
    **{**layout.family_fields({"nemotron_h": NEMOTRON_H}, "ssm_in"),
       # an attention, MLP or MoE mixer (Mamba2's files hold the state-space mixer at backbone.layers.N.mixer too)
       "signature": r"(^|[./])layers[./]\d+[./]mixer[./](q_proj|up_proj|experts|gate)[./]",
       "from_config": from_config, "from_tensors": from_tensors},
    # llama.cpp converts the MoE ones as nemotron_h_moe; its converter stacks the experts itself (no TensorNameMap name)
    gguf_architectures=("nemotron_h", "nemotron_h_moe"),
    # NemotronHModel is a GraniteHybridModel: q/k rows permuted per head on the attention layers (LlamaModel's), and
    # Mamba2Model's A = -exp(A_log): both replayed by diff
    gguf_transforms=tuple(t for arch in ("nemotron_h", "nemotron_h_moe") for t in (
        *layout.row_rewrites(arch, NEMOTRON_H, "rope"), (arch, r"(^|\.)A_log$", "neg_exp"))),
    samples=(
        # routing needs real values (nonzero() has no meta kernel): tiny weights on the CPU
        Sample("NemotronHConfig", _SIZES, ("NemotronHForCausalLM", "NemotronHModel"), device="cpu", infer=False),
        Sample("NemotronHConfig", dict(_SIZES, layers_block_type=None, hybrid_override_pattern="M*-EM", use_bias=True,
                                       use_conv_bias=False, chunk_size=16, tie_word_embeddings=True),
               ("NemotronHForCausalLM",), device="cpu", infer=False),
        # Nemotron 3 Super's latent MoE
        Sample("NemotronHConfig", dict(_SIZES, moe_latent_size=24), ("NemotronHForCausalLM", "NemotronHModel"), device="cpu",
               infer=False),
    ),
)
