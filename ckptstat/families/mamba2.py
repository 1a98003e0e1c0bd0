"""Mamba2 (transformers modeling_mamba2.py, Mamba2Model / Mamba2ForCausalLM): the layout (layout.py) whose every layer
is an RMSNorm and the Mamba2 state-space mixer (layout_ssm.py: in_proj, a depthwise conv1d, the chunked scan, a gated
RMSNorm, out_proj), no attention and no MLP; embeddings, norm_f and the LM head under `backbone.`. The cache: per layer
a conv state and a recurrent state (base.decoder_kv_cache)."""
from __future__ import annotations

from typing import Any

from .framework import layout, layout_ssm, walk_names
from .framework.archspec import ArchSpec
from .framework.base import FROM_CLASS, Cfg, Family, HeadRule, Sample, Tensors, TieRule
from .framework.layout import DecoderLayout, Paths

MAMBA2 = DecoderLayout(mlp="none", hybrid="all",
                       paths=Paths(body="backbone", embed="embeddings", attn_in="norm", norm="norm_f", ssm="mixer"))


def from_config(c: Cfg) -> ArchSpec:
    """Mamba2Config: no attention (heads 0) and no MLP; the mixer's sizes from num_heads, head_dim, state_size,
    n_groups, conv_kernel, chunk_size and expand."""
    L = c.int("num_hidden_layers")
    return ArchSpec(layers=L, hidden=c.int("hidden_size"), heads=0, kv_heads=0, head_dim=0, intermediate=0,
                    vocab=c.int("vocab_size"), activation=str(c.get("hidden_act", default=FROM_CLASS)), norm="rmsnorm",
                    qkv_bias=False, o_bias=False, mlp_bias=False,
                    tied_embeddings=bool(c.get("tie_word_embeddings", default=FROM_CLASS)),
                    **layout_ssm.layers_from_config(MAMBA2, c, L), **c.common)


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    """The mixer's widths from its shapes (layout.ssm_from_tensors), the layers from those holding it."""
    V, h = walk_names.layout_shape(T, MAMBA2, "token_embd")
    ssm = layout.ssm_from_tensors(MAMBA2, T, "mamba2")
    return ArchSpec(layers=len(ssm["ssm_layers"]), hidden=h, heads=0, kv_heads=0, head_dim=0, intermediate=0, vocab=V,
                    activation="silu", norm="rmsnorm", qkv_bias=False, o_bias=False, mlp_bias=False,
                    tied_embeddings=not walk_names.layout_has(T, MAMBA2, "output"),
                    **dict(ssm, assumptions=ssm["assumptions"] + ("no config: activation assumed silu",)), **common)


_SIZES = dict(hidden_size=32, num_hidden_layers=2, num_heads=8, head_dim=8, state_size=8, n_groups=2, conv_kernel=3,
              chunk_size=4, vocab_size=99)

FAMILY = Family(
    name="mamba2",
    **{**layout.family_fields({"mamba2": MAMBA2}, "ssm_norm"),
       "from_config": from_config, "from_tensors": from_tensors,
       # Mamba2ForCausalLM nests the model under `backbone.` (Mamba2Model does not): that shows a tied, dropped lm_head
       "head_rules": (HeadRule(r"(^|\.)lm_head\.weight$", "lm"), HeadRule(r"^backbone\.", "lm")),
       # Mamba2ForCausalLM._tied_weights_keys
       "tie_rules": (TieRule("lm_head.weight", "backbone.embeddings.weight", "config", heads=("lm",)),),
       # the states are split by heads under tensor parallelism
       "cache_heads": lambda s: s.ssm.heads if s.ssm else 0},
    # NemotronH's files hold Mamba2 mixers at backbone.layers.N.mixer too, beside attention, MLP and MoE mixers
    signature_without=r"(^|[./])mixer[./](q_proj|up_proj|experts|gate)[./]",
    # Mamba2Model's converter stores A_log [h] as A = -exp(A_log) [h, 1] (ssm_a): replayed by diff
    gguf_transforms=(("mamba2", r"(^|\.)A_log$", "neg_exp"),),
    samples=(
        # the sequence 8 fills two chunks of 4 and 16 four; 2 groups of B and C over 8 heads
        Sample("Mamba2Config", _SIZES, ("Mamba2ForCausalLM", "Mamba2Model")),
        Sample("Mamba2Config", dict(_SIZES, tie_word_embeddings=True, use_bias=True, use_conv_bias=False, n_groups=1,
                                    chunk_size=5, conv_kernel=4), ("Mamba2ForCausalLM",)),
    ),
)
