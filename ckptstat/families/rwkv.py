"""RWKV-4 (transformers modeling_rwkv.py, RwkvModel / RwkvForCausalLM): no attention matrix. Each block: LayerNorm ln1,
the time mixing (RwkvSelfAttention: the input and its one-token shift mixed by time_mix_key / value / receptance
[1, 1, h], key / value / receptance h -> A (attention_hidden_size, default h), the WKV recurrence with time_decay and
time_first [A], sigmoid(receptance) x wkv, output A -> h), LayerNorm ln2, the channel mixing (RwkvFeedForward:
time_mix_key / receptance, key h -> f (intermediate_size, default 4h), relu squared, value f -> h, x sigmoid(receptance
h -> h)); block 0 first runs pre_ln. ln_out at the end; head, tied to the embeddings only with tie_word_embeddings.

FLOPs: the seven projections' matmuls are all FlopCounterMode counts off CUDA (the WKV recurrence,
rwkv_linear_attention_cpu, is an element-wise loop over the tokens). The cache is the `state` the forward returns with
use_cache: five [b, h, L] tensors, the two token shifts in the model's dtype and the WKV numerator, denominator and
maximum in float32, whatever the sequence length.

Described once, by its forward (`walk`): each parameterised module recorded as its op is written (layout_base.Walk,
the names as LAYOUT's paths give them), from which the expected tensors derive; llama.cpp has no RWKV-4, so no GGUF
names."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .framework import decoders, infer, layout, walk_names
from .framework.archspec import Variant
from .framework.base import STATE_BYTES, ArchSpec, Cfg, Family, KVLines, Sample, Tensors
from .framework.layout import DecoderLayout, Paths
from .framework.layout_base import Module, Walk, walk_tensors
from .framework.ops import Builder, ew_cost

# the module names as RwkvForCausalLM saves them; the walk records with them (no llama.cpp names: no RWKV-4 there)
LAYOUT = DecoderLayout(norm="layernorm", paths=Paths(body="rwkv", embed="embeddings", layers="blocks", attn="attention",
                                                     mlp="feed_forward", attn_in="ln1", mlp_in="ln2", norm="ln_out",
                                                     lm_head="head"))
_P = LAYOUT.paths


@dataclass(frozen=True)
class RwkvVariant(Variant):
    attention: int   # A, attention_hidden_size: the key / value / receptance width of the time mixing


def from_config(c: Cfg) -> ArchSpec:
    h = c.int("hidden_size")
    return ArchSpec(layers=c.int("num_hidden_layers"), hidden=h, heads=0, kv_heads=0, head_dim=0,
                    intermediate=c.int("intermediate_size", default=4 * h), vocab=c.int("vocab_size"),
                    activation="relu", norm="layernorm", qkv_bias=False, o_bias=False, mlp_bias=False,
                    tied_embeddings=bool(c.get("tie_word_embeddings", default=False)),
                    variant=RwkvVariant(attention=c.int("attention_hidden_size", default=h)), **c.common)


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    """The widths from the modules the walk records (_NAMES), as it names them."""
    attn, ffn = f"{_P.attn}.key", f"{_P.mlp}.key"
    V, h = walk_names.shape(T, _NAMES, _P.embed)
    A, f = walk_names.shape(T, _NAMES, attn)[0], walk_names.shape(T, _NAMES, ffn)[0]
    return ArchSpec(layers=infer.count_layers(T, walk_names.pattern(_NAMES, attn, layer=r"(\d+)")), hidden=h, heads=0,
                    kv_heads=0, head_dim=0, intermediate=f, vocab=V, activation="relu", norm="layernorm", qkv_bias=False,
                    o_bias=False, mlp_bias=False, tied_embeddings=infer.find(T, walk_names.pattern(_NAMES, _P.lm_head)) is None,
                    variant=RwkvVariant(attention=A), **common)


def walk(B: Builder) -> list[Module]:
    """The forward at B.s's sizes (RwkvModel.forward, RwkvBlock): writes its ops to B and returns the modules it met."""
    s = B.s
    w = Walk(B, LAYOUT)
    h, f, L, A, tok, n = s.hidden, s.intermediate, s.layers, s.variant_as(RwkvVariant).attention, w.tok, B.b * B.seq
    every, at, ff = tuple(range(s.layers)), f"{_P.attn}.", f"{_P.mlp}."

    def shift_mix(part: str, names: tuple[str, ...]) -> None:
        """The input and its one-token shift mixed by a [1, 1, h] vector per name (time_mix_key, ...)."""
        for name in names:
            w.record(f"{part}.time_mix_{name}", None, (("", (1, 1, h)),), every)
        k = len(names)
        B.add(w.label(f"{part} token shift x time_mix_{' / '.join(names)}", every), "activation", "encoder", L, tok + (h,),
              tok + (k * h,), params=k * h * L, ew=k * n * h * 3, weights_per_call=k * h)

    w.record(_P.embed, None, (("weight", (s.vocab, h)),), None)
    B.embedding(_P.embed, "embedding", s.vocab, h, B.seq)
    w.norm("pre_ln", None, h, (0,), residual=False)   # block 0's LayerNorm of the embeddings
    w.norm(_P.attn_in, None, h, every)
    shift_mix(_P.attn, ("key", "value", "receptance"))
    for name in ("key", "value", "receptance"):
        w.linear(at + name, None, h, A, False, every)
    for name in ("time_decay", "time_first"):
        w.record(at + name, None, (("", (A,)),), every)
    B.add(w.label(f"{_P.attn} WKV recurrence (time_decay, time_first)", every), "attention", "encoder", L, tok + (3 * A,),
          tok + (A,), params=2 * A * L, ew=n * A * (4 * ew_cost("exp") + 10), weights_per_call=2 * A)
    B.activation(w.label(f"{_P.attn} sigmoid(receptance) x wkv", every), "encoder", tok, A, "sigmoid", L, gated=True)
    w.linear(at + "output", None, A, h, False, every)
    w.norm(_P.mlp_in, None, h, every)
    shift_mix(_P.mlp, ("key", "receptance"))
    w.linear(ff + "key", None, h, f, False, every)
    B.activation(w.label(f"{_P.mlp} relu^2", every), "encoder", tok, f, "relu", L)
    w.linear(ff + "value", None, f, h, False, every)
    w.linear(ff + "receptance", None, h, h, False, every)
    B.activation(w.label(f"{_P.mlp} sigmoid(receptance) x value", every), "encoder", tok, h, "sigmoid", L, gated=True)
    w.norm(_P.norm, None, h, None, residual=False)
    if s.head == "lm":
        w.modules.append(Module(_P.lm_head, None, (("weight", (s.vocab, h)),), top=True))
        decoders.lm_head(B, _P.lm_head, _P.embed)
    return w.modules


def build(B: Builder) -> None:
    walk(B)


expected_tensors = walk_tensors(walk, _P.body)
_NAMES = walk_names.walked(walk, **walk_names.LM, variant=RwkvVariant(attention=8))   # the paths the name regexes read


def state_cache(s: ArchSpec, b: int, n: int, nd: int, ab: int) -> KVLines:
    """RwkvModel's state: five [b, h, L] tensors, the two token shifts at the model's width, the WKV numerator,
    denominator and maximum in float32 (4 B whatever the dtype)."""
    shifts, wkv = 2 * s.hidden * s.layers * ab, 3 * s.hidden * s.layers * STATE_BYTES
    return [(f"RWKV state (no KV cache), b={b}, any s", (shifts + wkv) * b,
             f"2 x h x L x {ab} B (token shifts) + 3 x h x L x {STATE_BYTES} B (WKV, float32) = {shifts + wkv:,} B/sequence")]


_SIZES = dict(hidden_size=32, num_hidden_layers=2, intermediate_size=40, vocab_size=99, context_length=64)

FAMILY = Family(
    name="rwkv",
    model_types=("rwkv",),
    signature=walk_names.signature(_NAMES, f"{_P.attn}.time_first", tf1=False),
    from_config=from_config, from_tensors=from_tensors, build=build, expected_tensors=expected_tensors,
    # the head rules (`head`, or a name under `rwkv.`: RwkvModel's are bare, so that shows a tied, dropped head) and
    # RwkvForCausalLM._tied_weights_keys, from the paths; RwkvConfig's tie_word_embeddings default false
    **{**layout.decoder_lm(LAYOUT), "kv_cache": state_cache},
    gguf_architectures=(),   # llama.cpp has RWKV-6 and -7 (other modules), no RWKV-4: no GGUF names
    samples=(
        Sample("RwkvConfig", _SIZES, ("RwkvForCausalLM", "RwkvModel")),
        Sample("RwkvConfig", dict(_SIZES, intermediate_size=None, tie_word_embeddings=True), ("RwkvForCausalLM",)),
    ),
)
