"""The conv and recurrent states one tensor-parallel rank holds, as vLLM shards each hybrid mixer (its
model_executor/layers/mamba/mamba_utils.py MambaStateShapeCalculator; docs/memory_planner.md): one rank's share of
the mixers as a spec, whose cache at s = 0 (the states alone: they do not grow with s) is that rank's state bytes, in
transformers' layout (conv kernel length, float32 recurrent states) as the cache line counts them.

- Mamba2 (MambaMixer2: Mamba2, Bamba, NemotronH, FalconH1, Granite 4 hybrid): heads / tp; the conv's
  intermediate + 2 x groups x state channels / tp, groups padded to tp when tp does not divide them
  (extra_groups_for_head_shards: n_groups 1 is replicated to every rank; any other n_groups must be divisible).
- Mamba1 (MambaMixer: Mamba, Jamba): conv and recurrent state over intermediate / tp channels.
- gated DeltaNet and KDA (Qwen3-Next's GatedDeltaNet, Kimi's KimiDeltaAttention: gated_delta_net_state_shape,
  kda_state_shape): the conv's channels and the recurrent state's value heads / tp.
- short convolution (LFM2's ShortConv: short_conv_state_shape): hidden / tp channels.
- lightning attention (MiniMaxText01LinearAttention: linear_attention_state_shape): heads / tp.
"""
from __future__ import annotations

from dataclasses import replace

from ...errors import UsageError
from ...families.framework.base import ArchSpec

# families vLLM serves no model of, whose states are left split with the KV heads: Zamba (v1; vLLM has Zamba2 only)
NOT_SERVED = ("zamba",)


def _divide(n: int, tp: int, what: str) -> int:
    """n / tp, which vLLM's divide() asserts exact."""
    if n % tp:
        raise UsageError(f"--tp {tp} does not divide the {n} {what} (vLLM shards them over tp and requires it)")
    return n // tp


def extra_groups(groups: int, tp: int) -> int:
    """The B/C groups MambaMixer2 adds so that every head shard holds its group (extra_groups_for_head_shards)."""
    return 0 if groups % tp == 0 else tp - groups


def rank_states(s: ArchSpec, tp: int) -> tuple[ArchSpec, str] | None:
    """s with its mixers' state sizes as one of tp ranks holds them under vLLM, and the rule; None: no such mixer
    (or a family vLLM does not serve). UsageError where vLLM would refuse the split."""
    if s.family in NOT_SERVED:
        return None
    if s.ssm is not None:
        m = s.ssm   # Mamba1 is heads = intermediate of width 1 and no groups: the same rule is MambaMixer's
        if m.groups % tp and m.groups != 1:
            raise UsageError(f"--tp {tp} does not divide the {m.groups} state-space groups, nor are they 1 "
                             "(vLLM's MambaMixer2 requires one or the other)")
        g = (m.groups + extra_groups(m.groups, tp)) // tp
        ssm = replace(m, heads=_divide(m.heads, tp, "state-space heads"), intermediate=m.intermediate // tp, groups=g)
        rule = ("MambaMixer's intermediate / tp channels" if m.dt_rank else
                f"MambaMixer2's heads / tp, conv (intermediate + 2 x groups x state) / tp, {g} group(s) per rank"
                + (" (replicated)" if m.groups % tp else ""))
        return replace(s, ssm=ssm), rule
    if s.deltanet is not None and s.linear_layers:
        v = s.deltanet
        return (replace(s, deltanet=replace(v, key_heads=_divide(v.key_heads, tp, "linear key heads"),
                                            value_heads=_divide(v.value_heads, tp, "linear value heads"))),
                "linear key and value heads / tp (vLLM's gated DeltaNet / KDA)")
    if s.short_conv is not None:   # the states alone: the spec's hidden is read for the conv state only at s = 0
        return replace(s, hidden=_divide(s.hidden, tp, "short-convolution channels")), "ShortConv's hidden / tp channels"
    if s.lightning is not None:
        return (replace(s, heads=_divide(s.heads, tp, "attention heads")),
                "lightning attention's heads / tp (MiniMaxText01LinearAttention)")
    return None
