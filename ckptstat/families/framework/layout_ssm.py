"""The state-space token mixer of layout.py's walk, on the layers `layout.attention_kinds` marks "state_space":
transformers' Mamba2Mixer (modeling_mamba2.py; BambaMixer is the same code) as it runs off CUDA, where no
causal-conv1d or mamba-ssm kernel is loaded (causal_conv1d_fn, mamba2_chunk_scan: their torch fallbacks).

One forward of s tokens with a cache (what generation and the coverage walk run), per layer:
  in_proj       h -> intermediate (gate z) + conv_dim (x, B, C) + heads (dt), biased with the config's proj bias;
  conv1d        depthwise over conv_dim channels, kernel k, padding k - 1: the cache's update_conv_state pads a
                prefill shorter than k to k tokens, and FlopCounterMode counts convolution over the padded output
                length max(s, k) + k - 1 (2 x b x length x conv_dim x k), the forward keeping the last s;
  the scan      mamba2_chunk_scan: the sequence zero-padded to c chunks of l = chunk_size (c = ceil(s / l)), then five
                einsums, each a bmm FlopCounterMode counts (b x heads batches; p head_dim, N state):
                  G = C.B over N                (c x l x l x N)
                  Y_diag = M.x over l           (c x l x l x p)
                  states = B_decay.x over l     (c x p x l x N)
                  new_states over the c + 1 chunk starts ((c + 1) x (c + 1) x p x N)
                  C.states over N               (c x l x N x p)
                MACs (an einsum summing over a dimension of size 1, N or l, is an element-wise product: none);
                the discretisation (softplus, exp, the segment sums, D's skip) is element-wise;
  norm          MambaRMSNormGated: x silu(z), an RMSNorm over each of n_groups groups, a weight of intermediate;
  out_proj      intermediate -> h.
The parameters dt_bias, A_log and D, heads each, have no `.weight` suffix. The cache holds per such layer a conv
state [b, conv_dim, k] and a recurrent state [b, heads, head_dim, N], whatever s (base.decoder_kv_cache)."""
from __future__ import annotations

from dataclasses import replace
from typing import Any

from ...errors import NoAnalyticModel, UsageError
from .archspec import SSM
from .base import FROM_CLASS, Cfg
from .layout_base import DecoderLayout, SSMKeys, Walk
from .ops import ew_cost

# DecoderLayout.hybrid "layer_types": config layer_types' names of the two mixers (configuration_utils'
# _LEGACY_LAYER_TYPE_REMAP maps the first of each to the second)
_MAMBA, _ATTENTION = ("mamba", "linear_attention"), ("attention", "full_attention")


def from_config(keys: SSMKeys, c: Cfg, hidden: int) -> SSM:
    """The mixer's sizes as the config class reads them: intermediate = expand x hidden; a head_dim of "auto"
    (Bamba's, or none saved) is intermediate / heads. The mixer views its intermediate channels as heads x
    head_dim: a config where those differ builds no model this template describes."""
    if keys.dt_rank is not None:   # Mamba1: a head of width 1 per channel
        inter, r = c.int(keys.expand or "expand", default=FROM_CLASS) * hidden, c.get(keys.dt_rank, default=FROM_CLASS)
        inter = _given_width(keys, c, inter)
        return SSM(heads=inter, head_dim=1, state=c.int(keys.state, default=FROM_CLASS), groups=0,
                   conv_kernel=c.int(keys.conv_kernel, default=FROM_CLASS), chunk=0, intermediate=inter,
                   conv_bias=bool(c.get(keys.conv_bias, default=FROM_CLASS)), bias=bool(c.get(keys.bias, default=FROM_CLASS)),
                   dt_rank=-(-hidden // 16) if r in (None, "auto") else c.int(keys.dt_rank))
    heads = c.int(keys.heads, default=FROM_CLASS)
    # NemotronH's (expand None): heads x head_dim channels
    inter = c.int(keys.expand, default=FROM_CLASS) * hidden if keys.expand else heads * c.int(keys.head_dim, default=FROM_CLASS)
    inter = _given_width(keys, c, inter)
    d = c.get(keys.head_dim, default=None)
    head_dim = inter // max(heads, 1) if d in (None, "auto") else c.int(keys.head_dim)
    groups = c.int(keys.groups, default=FROM_CLASS)
    if not heads or heads * head_dim != inter or not groups or heads % groups or inter % groups:
        raise NoAnalyticModel(f"{c.path}: config {keys.heads} x {keys.head_dim} = {heads} x {head_dim} is not "
                              f"{keys.expand} x hidden_size = {inter}, or {keys.groups} = {groups} does not divide "
                              "them: the Mamba2 mixer template describes only heads x head_dim = intermediate")
    return SSM(heads=heads, head_dim=head_dim, state=c.int(keys.state, default=FROM_CLASS), groups=groups,
               conv_kernel=c.int(keys.conv_kernel, default=FROM_CLASS), chunk=c.int(keys.chunk, default=FROM_CLASS),
               intermediate=inter, conv_bias=bool(c.get(keys.conv_bias, default=FROM_CLASS)),
               bias=bool(c.get(keys.bias, default=FROM_CLASS)),
               out_bias=bool(c.get(keys.out_bias, default=FROM_CLASS)) if keys.out_bias else None,
               gated_norm=bool(c.get(keys.gated_norm, default=FROM_CLASS)) if keys.gated_norm else True)


def _given_width(keys: SSMKeys, c: Cfg, inter: int) -> int:
    """The mixer's width where the config gives it (SSMKeys.intermediate: FalconH1's mamba_d_ssm, Mamba's
    intermediate_size, which MambaConfig takes over its expand x hidden_size when set), else `inter`."""
    if keys.intermediate is not None and c.get(keys.intermediate, default=None) is not None:
        return c.int(keys.intermediate)
    return inter


def scan_macs(m: SSM, b: int, n: int) -> int:
    """The MACs of mamba2_chunk_scan's five einsums over n tokens (the module docstring)."""
    cl, p, N = m.chunk, m.head_dim, m.state
    c = -(-n // cl)
    # torch.einsum multiplies element-wise, no bmm, where the summed dimension has size 1 (N, or l: a chunk of 1)
    over_n = c * cl * cl + c * cl * p if N > 1 else 0       # G, C.states
    over_l = c * cl * cl * p + c * p * cl * N if cl > 1 else 0   # Y_diag, states
    return b * m.heads * (over_n * N + over_l + (c + 1) ** 2 * p * N)


def state_elements(m: SSM) -> int:
    """One sequence's cache of one state-space layer: the conv state (conv_dim x k) and the recurrent state
    (heads x head_dim x N)."""
    return m.conv_dim * m.conv_kernel + m.heads * m.head_dim * m.state


def _conv(w: Walk, layers: tuple[int, ...], m: SSM) -> None:
    """The depthwise conv1d over conv_dim channels (+ silu). Its weight here (the planner splits it over tensor
    parallelism like a linear's); its bias, a vector, with the mixer's other vectors (replicated)."""
    B, x, cd, k, L = w.B, f"{w.lay.paths.ssm}.", m.conv_dim, m.conv_kernel, len(layers)
    b, n = B.b, B.seq
    w.record(x + "conv1d", "ssm_conv1d", (("weight", (cd, 1, k)),) + ((("bias", (cd,)),) if m.conv_bias else ()), layers)
    B.add(w.label(x + "conv1d (+silu)", layers), "conv", "encoder", L, (b, cd, n), (b, cd, n), params=cd * k * L,
          macs=b * (max(n, k) + k - 1) * cd * k, ew=b * n * cd * (4 + (1 if m.conv_bias else 0)),
          weights_per_call=cd * k)


def mixer(w: Walk, layers: tuple[int, ...]) -> None:
    """The state-space mixer at {ssm} (Paths.ssm) of `layers`, after the layer's input norm: Mamba1's where the spec's
    SSM has a dt_rank, else Mamba2's."""
    m = w.s.ssm
    assert m is not None
    (mamba1 if m.dt_rank else mamba2)(w, layers, m)


def mamba1(w: Walk, layers: tuple[int, ...], m: SSM) -> None:
    """JambaMambaMixer off CUDA (modeling_jamba.py; mamba_selective_scan's recurrent loop; MambaMixer and
    FalconMambaMixer the same code, their norms DecoderLayout.ssm_norms): in_proj (h -> 2i: x and the gate), the conv1d
    over x, x_proj (i -> r + 2N), RMSNorms over dt, B and C (dt_layernorm, b_layernorm, c_layernorm), dt_proj's weight
    as a matmul (its bias added in the softplus), A_log [i, N] and D [i], the scan one [b, i, N] @ [b, N, 1] matmul per
    token, out_proj."""
    s, B, x = w.s, w.B, f"{w.lay.paths.ssm}."
    b, n, h, i, N, r, L = B.b, B.seq, s.hidden, m.intermediate, m.state, m.dt_rank, len(layers)
    w.linear(x + "in_proj", "ssm_in", h, 2 * i, m.bias, layers)
    _conv(w, layers, m)
    w.linear(x + "x_proj", "ssm_x", i, r + 2 * N, False, layers)
    for sub, gguf, dim in (("dt_layernorm", "ssm_dt_norm", r), ("b_layernorm", "ssm_b_norm", N),
                           ("c_layernorm", "ssm_c_norm", N)) if w.lay.ssm_norms != "none" else ():
        w.norm(x + sub, gguf, dim, layers, residual=False, kind="none" if w.lay.ssm_norms == "weightless" else None)
    w.linear(x + "dt_proj", "ssm_dt", r, i, True, layers)
    w.record(x + "A_log", "ssm_a", (("", (i, N)),), layers)
    w.record(x + "D", "ssm_d", (("", (i,)),), layers)
    # A_log [i, N], a matrix the planner splits by channels (as the meta path splits every 2-D parameter)
    B.add(w.label(x + "A_log (exp, x dt)", layers), "ssm_weight", "encoder", L, (i, N), (b, i, n, N), params=i * N * L,
          ew=b * n * i * N * 2, weights_per_call=i * N)
    vectors = i + (i if m.conv_bias else 0)
    B.add(w.label(x + "scan (state @ C per token; D, conv1d.bias)", layers), "ssm", "encoder", L, (b, i, n, N),
          (b, i, n), params=vectors * L, macs=b * n * i * N, ew=b * n * i * (4 * N + 6), weights_per_call=vectors)
    w.linear(x + "out_proj", "ssm_out", i, h, m.bias, layers)


def mamba2(w: Walk, layers: tuple[int, ...], m: SSM) -> None:
    """Mamba2Mixer (the module docstring)."""
    s, B, x = w.s, w.B, f"{w.lay.paths.ssm}."
    b, n, h, L, cd = B.b, B.seq, s.hidden, len(layers), m.conv_dim
    w.linear(x + "in_proj", "ssm_in", h, m.intermediate + cd + m.heads, m.bias, layers)
    _conv(w, layers, m)
    # dt_bias: llama.cpp's converters rename it dt_proj.bias, ssm_dt.bias (Mamba2Model.modify_tensors)
    for name, gguf in (("dt_bias", "ssm_dt.bias"), ("A_log", "ssm_a"), ("D", "ssm_d")):
        w.record(x + name, gguf, (("", (m.heads,)),), layers)
    # softplus(dt + dt_bias), x dt, A dt, the segment sums and their exps, D's skip: element-wise
    vectors = 3 * m.heads + (cd if m.conv_bias else 0)
    B.add(w.label(x + "scan (chunked, 5 einsums; dt_bias, A_log, D, conv1d.bias)", layers), "ssm", "encoder", L,
          (b, n, m.intermediate), (b, n, m.intermediate), params=vectors * L, macs=scan_macs(m, b, n),
          ew=b * n * m.intermediate * (2 * m.state + 6), weights_per_call=vectors)
    if m.gated_norm:
        w.norm(x + "norm", "ssm_norm", m.intermediate, layers, residual=False)
    else:   # FalconH1 without mamba_rms_norm: the scan's output x silu(gate)
        B.add(w.label(x + "scan x silu(gate)", layers), "activation", "encoder", L, (b, n, m.intermediate),
              (b, n, m.intermediate), ew=b * n * m.intermediate * (ew_cost("silu") + 1))
    w.linear(x + "out_proj", "ssm_out", m.intermediate, h, m.bias if m.out_bias is None else m.out_bias, layers)
    if m.beside:   # FalconH1: + the attention's output, a [b, s, h] add
        B.add(w.label(x + "out_proj + the attention's output (an add as a residual's)", layers), "activation", "encoder",
              L, (b, n, h), (b, n, h), ew=b * n * h)


def layers_from_config(lay: DecoderLayout, c: Cfg, layers: int) -> dict[str, Any]:
    """The ArchSpec fields of a layout's state-space layers (DecoderLayout.hybrid): the Mamba2 mixer's sizes and
    the layers it mixes (Bamba: those not in attn_layer_indices; Granite 4: those layer_types marks "mamba")."""
    if lay.hybrid in ("none", "blocks"):   # blocks: the family's from_config reads them (nemotron_h.py)
        return {}
    every = tuple(range(layers))
    if lay.hybrid == "all":
        return dict(ssm=from_config(lay.ssm_keys, c, c.int("hidden_size")), ssm_layers=every)
    if lay.hybrid == "beside":
        return dict(ssm=replace(from_config(lay.ssm_keys, c, c.int("hidden_size")), beside=True), ssm_layers=every)
    if lay.hybrid == "period":   # JambaConfig.layers_block_type
        period, offset = c.int("attn_layer_period", default=FROM_CLASS), c.int("attn_layer_offset", default=FROM_CLASS)
        marked = [i for i in every if period and i % period == offset]
    elif lay.hybrid == "layer_types":   # GraniteMoeHybridConfig: the legacy names, or transformers 5's (configuration_utils)
        types = c.get("layer_types", default=None) or ["mamba"] * layers
        if not isinstance(types, list) or len(types) != layers or any(t not in _MAMBA + _ATTENTION for t in types):
            raise UsageError(f"{c.path}: config layer_types is not a list of {layers} 'mamba' / 'attention'")
        marked = [i for i, t in enumerate(types) if t in _ATTENTION]
    else:
        marked = c.get("attn_layer_indices", default=None) or []
    if not isinstance(marked, list) or any(type(i) is not int for i in marked):
        raise UsageError(f"{c.path}: config attn_layer_indices is not a list of layer indices")
    return dict(ssm=from_config(lay.ssm_keys, c, c.int("hidden_size")),
                ssm_layers=tuple(i for i in every if i not in marked))
