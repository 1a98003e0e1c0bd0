"""Mamba (transformers modeling_mamba.py, MambaModel / MambaForCausalLM): a stack of selective state-space
mixers, no attention. Each layer: RMSNorm, in_proj (h -> 2i: x and the gate), a depthwise causal conv1d
over x (kernel k, padding k - 1, conv bias), x_proj (i -> r + 2N: dt, B, C), dt_proj (r -> i, biased),
the parameters A_log [i, N] and D [i], the recurrence, out_proj (i -> h). norm_f at the end; lm_head tied
to the embeddings by default.

FLOPs follow the eager slow path (MambaMixer.slow_forward), which is what runs off CUDA: the convolution
is counted as FlopCounterMode counts convolution (2 x b x out_length x out_channels x in_channels/groups x
k, over the padded output length s + k - 1 that is then cut to s), and the recurrence is one
[b, i, N] @ [b, N, 1] matmul per token (2 x b x i x N FLOPs); the discretisation (exp, products) is
element-wise. The cache is the SSM state, not K/V: per layer a conv state [b, i, k] and an ssm state
[b, i, N] (MambaCache)."""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .framework import infer
from .framework.archspec import Variant
from .framework.base import ArchSpec, Cfg, Family, HeadRule, KVLines, Sample, Shapes, Tensors, TieRule, add_linear, add_norm
from .framework.ops import Builder


@dataclass(frozen=True)
class MambaVariant(Variant):
    state_size: int    # N, the SSM state per channel
    conv_kernel: int   # k, the depthwise conv1d's width
    dt_rank: int       # r, dt_proj's input (time_step_rank)
    use_bias: bool     # in_proj's and out_proj's biases
    conv_bias: bool    # conv1d's bias (use_conv_bias)


def from_config(c: Cfg) -> ArchSpec:
    h = c.int("hidden_size")
    i = c.int("intermediate_size", default=c.int("expand", default=2) * h)
    r = c.get("time_step_rank", default="auto")
    rank = math.ceil(h / 16) if r == "auto" else c.int("time_step_rank")
    v = MambaVariant(state_size=c.int("state_size", default=16), conv_kernel=c.int("conv_kernel", default=4),
                     dt_rank=rank, use_bias=bool(c.get("use_bias", default=False)),
                     conv_bias=bool(c.get("use_conv_bias", default=True)))
    return ArchSpec(layers=c.int("num_hidden_layers"), hidden=h, heads=0, kv_heads=0, head_dim=0, intermediate=i,
                    vocab=c.int("vocab_size"), activation=str(c.get("hidden_act", default="silu")), norm="rmsnorm",
                    qkv_bias=False, o_bias=False, mlp_bias=False,
                    tied_embeddings=bool(c.get("tie_word_embeddings", default=True)), variant=v, **c.common)


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    V, h = infer.shape(T, r"(^|\.)embeddings\.weight$", "backbone.embeddings")
    i = infer.shape(T, r"layers\.0\.mixer\.in_proj\.weight$", "mixer.in_proj")[0] // 2
    k = infer.shape(T, r"layers\.0\.mixer\.conv1d\.weight$", "mixer.conv1d")[-1]
    N = infer.shape(T, r"layers\.0\.mixer\.A_log$", "mixer.A_log")[-1]
    r = infer.shape(T, r"layers\.0\.mixer\.dt_proj\.weight$", "mixer.dt_proj")[-1]
    v = MambaVariant(state_size=N, conv_kernel=k, dt_rank=r, use_bias=infer.has(T, r"layers\.0\.mixer\.in_proj\.bias$"),
                     conv_bias=infer.has(T, r"layers\.0\.mixer\.conv1d\.bias$"))
    return ArchSpec(layers=infer.count_layers(T, r"layers\.(\d+)\.mixer\."), hidden=h, heads=0, kv_heads=0,
                    head_dim=0, intermediate=i, vocab=V, activation="silu", norm="rmsnorm", qkv_bias=False,
                    o_bias=False, mlp_bias=False, tied_embeddings=infer.find(T, r"lm_head\.weight$") is None,
                    variant=v, assumptions=("no config: activation assumed silu",), **common)


def build(B: Builder) -> None:
    s, b, n = B.s, B.b, B.seq
    h, i, L = s.hidden, s.intermediate, s.layers
    v = s.variant_as(MambaVariant)
    N, k, r, bias, conv_bias = v.state_size, v.conv_kernel, v.dt_rank, v.use_bias, v.conv_bias
    tok = (b, n)
    B.embedding("backbone.embeddings", "embedding", s.vocab, h, n)
    lay = f"backbone.layers[{L}]"
    B.norm(f"{lay}.norm", "encoder", tok, h, L)
    B.linear(f"{lay}.mixer.in_proj", "encoder", tok, h, 2 * i, bias, L)
    # depthwise conv: FlopCounterMode counts the padded output length s + k - 1 (the forward keeps s of it)
    B.add(f"{lay}.mixer.conv1d", "conv", "encoder", L, (b, i, n), (b, i, n), params=(i * k + (i if conv_bias else 0)) * L,
          macs=b * (n + k - 1) * i * k, ew=b * n * i if conv_bias else 0, weights_per_call=i * k)
    B.activation(f"{lay}.mixer act", "encoder", tok, i, s.activation, L)
    B.linear(f"{lay}.mixer.x_proj", "encoder", tok, i, r + 2 * N, False, L)
    B.linear(f"{lay}.mixer.dt_proj", "encoder", tok, r, i, True, L)
    # discretisation: softplus(dt), exp(A x dt), dt x B x u (element-wise, [b, i, s, N]); A_log and D live here
    B.add(f"{lay}.mixer.A_log, D (discretise)", "ssm", "encoder", L, (b, i, n, N), (b, i, n, N),
          params=(i * N + i) * L, ew=b * i * n * (4 * N + 4), weights_per_call=i * N + i)
    # the recurrence: state = dA x state + dB x u, then y_t = state @ C_t, one bmm per token
    B.add(f"{lay}.mixer.scan (state @ C)", "ssm", "encoder", L, (b, i, n, N), (b, i, n),
          macs=b * n * i * N, ew=b * n * i * (2 * N + 4))
    B.linear(f"{lay}.mixer.out_proj", "encoder", tok, i, h, bias, L)
    B.norm("backbone.norm_f", "encoder", tok, h, residual=False)
    if s.head == "lm":
        B.linear("lm_head" + (" (tied to embeddings)" if s.tied_embeddings else ""), "cls", tok, h, s.vocab, False,
                 tied=s.tied_embeddings)


def expected_tensors(s: ArchSpec) -> Shapes:
    h, i = s.hidden, s.intermediate
    v = s.variant_as(MambaVariant)
    N, k, r, bias = v.state_size, v.conv_kernel, v.dt_rank, v.use_bias
    m = "" if s.head == "base" else "backbone."   # MambaForCausalLM wraps MambaModel as `backbone`
    out: Shapes = {m + "embeddings.weight": (s.vocab, h)}
    for j in range(s.layers):
        p = f"{m}layers.{j}."
        add_norm(out, p + "norm", h, bias=False)
        add_linear(out, p + "mixer.in_proj", 2 * i, h, bias)
        out[p + "mixer.conv1d.weight"] = (i, 1, k)
        if v.conv_bias:
            out[p + "mixer.conv1d.bias"] = (i,)
        add_linear(out, p + "mixer.x_proj", r + 2 * N, i, False)
        add_linear(out, p + "mixer.dt_proj", i, r)
        out[p + "mixer.A_log"] = (i, N)
        out[p + "mixer.D"] = (i,)
        add_linear(out, p + "mixer.out_proj", h, i, bias)
    add_norm(out, m + "norm_f", h, bias=False)
    if s.head == "lm":
        out["lm_head.weight"] = (s.vocab, h)
    return out


def ssm_cache(s: ArchSpec, b: int, n: int, nd: int, ab: int) -> KVLines:
    """MambaCache: per layer a conv state [b, i, k] and an ssm state [b, i, N], whatever the sequence length."""
    v = s.variant_as(MambaVariant)
    i, k, N = s.intermediate, v.conv_kernel, v.state_size
    per_seq = s.layers * (k * i + N * i) * ab
    return [(f"SSM state (no KV cache), b={b}, any s", per_seq * b,
             f"L x (conv_kernel x i + state_size x i) x b x {ab} B = {per_seq:,} B/sequence")]


# convert_hf_to_gguf.py MambaModel's keys (its feed_forward_length and head_count are written as 0, unused).
_GGUF_KEYS = {"block_count": "num_hidden_layers", "embedding_length": "hidden_size", "ssm.inner_size": "intermediate_size",
              "ssm.state_size": "state_size", "ssm.conv_kernel": "conv_kernel", "ssm.time_step_rank": "time_step_rank"}


def gguf_config(arch: str, metadata: Mapping[str, str], tensors: Tensors) -> dict[str, Any] | None:
    """Mamba's config names from `mamba.ssm.*`; the biases from whether the file stores them."""
    cfg = infer.gguf_config(arch, metadata, tensors, "MambaForCausalLM", keys=_GGUF_KEYS) if arch == "mamba" else None
    if cfg is not None:
        cfg.update(use_bias="blk.0.ssm_in.bias" in tensors, use_conv_bias="blk.0.ssm_conv1d.bias" in tensors)
    return cfg


# HF module -> llama.cpp GGUF tensor name (gguf-py tensor_mapping.py, MODEL_ARCH.MAMBA). A_log and D have no
# .weight suffix, nor do ssm_a and ssm_d. The converter stores ssm_a = -exp(A_log) and squeezes conv1d's
# [i, 1, k] to [i, k]: names align (diff compares the squeezed shapes), A's values differ.
GGUF_TENSOR_NAMES = (
    ("backbone.embeddings", "token_embd"), ("backbone.norm_f", "output_norm"), ("lm_head", "output"),
    ("backbone.layers.{bid}.norm", "blk.{bid}.attn_norm"),
    ("backbone.layers.{bid}.mixer.in_proj", "blk.{bid}.ssm_in"),
    ("backbone.layers.{bid}.mixer.conv1d", "blk.{bid}.ssm_conv1d"),
    ("backbone.layers.{bid}.mixer.x_proj", "blk.{bid}.ssm_x"),
    ("backbone.layers.{bid}.mixer.dt_proj", "blk.{bid}.ssm_dt"),
    ("backbone.layers.{bid}.mixer.A_log", "blk.{bid}.ssm_a"),
    ("backbone.layers.{bid}.mixer.D", "blk.{bid}.ssm_d"),
    ("backbone.layers.{bid}.mixer.out_proj", "blk.{bid}.ssm_out"),
)

_SIZES = dict(hidden_size=32, num_hidden_layers=2, state_size=8, conv_kernel=3, expand=2, vocab_size=99,
              time_step_rank=5)

FAMILY = Family(
    name="mamba",
    # FalconMamba (modeling_falcon_mamba.py): Mamba's config, names and parameters; its extra RMS norms of
    # B, C and dt hold no weights and no matmul
    model_types=("mamba", "falcon_mamba"),
    signature=r"(^|[./])layers[./]\d+[./]mixer[./]x_proj[./]",
    from_config=from_config, from_tensors=from_tensors, build=build, expected_tensors=expected_tensors,
    heads=("base", "lm"),
    # MambaForCausalLM nests the model under `backbone.` (MambaModel does not): that shows a tied, dropped lm_head
    head_rules=(HeadRule(r"(^|\.)lm_head\.weight$", "lm"), HeadRule(r"^backbone\.embeddings\.weight$", "lm")),
    default_head="lm",
    # MambaForCausalLM._tied_weights_keys
    tie_rules=(TieRule("lm_head.weight", "backbone.embeddings.weight", "config", heads=("lm",)),),
    kv_cache=ssm_cache,
    gguf_config=gguf_config, gguf_tensor_names=GGUF_TENSOR_NAMES,
    samples=(
        # a tied lm_head is not stored: the `backbone.` prefix tells a tied MambaForCausalLM from MambaModel
        Sample("MambaConfig", _SIZES, ("MambaForCausalLM", "MambaModel")),
        Sample("MambaConfig", dict(_SIZES, tie_word_embeddings=False, use_bias=True, use_conv_bias=False,
                                   time_step_rank="auto"), ("MambaForCausalLM",)),
        Sample("FalconMambaConfig", _SIZES, ("FalconMambaForCausalLM", "FalconMambaModel")),
    ),
)
