"""Zamba2 (transformers modeling_zamba2.py: Zamba2Model, Zamba2ForCausalLM, Zamba2ForSequenceClassification): Zamba's
plan (families/zamba.py) with Mamba2 layers and several shared blocks. Every layer a Mamba layer (`input_layernorm`,
then Zamba2MambaMixer: transformers' Mamba2 mixer off CUDA, layout_ssm.mamba2, its conv1d always biased whatever
use_conv_bias, in_proj and out_proj biased with add_bias_linear; added to the stream); the layers the config's
layers_block_type marks "hybrid" first run a shared transformer block on the stream concatenated with the token
embeddings (2 x hidden_size wide: an RMSNorm over it, q/k/v of it, heads of attention_head_dim (2 x hidden /
num_attention_heads unless the config says otherwise), rotary where use_mem_rope, o_proj back to hidden_size,
`pre_ff_layernorm`, a gated MLP of intermediate_size with a fused gate_up_proj, biased with add_bias_linear; no
residual), then their own `linear` (h -> h), whose output is added to the stream before the Mamba layer's norm.

The k-th hybrid layer runs block k mod num_mem_blocks, whose weights are saved under each layer that runs it and held
once per block (Zamba2Model._tied_weights_keys) only with tie_word_embeddings (transformers 5 applies a model's
_tied_weights_keys only then: untied, every hybrid layer holds a copy). The k-th hybrid layer adds a LoRA-like adapter
of its own (`*_adapter_list.{k}`, held by its block: h -> adapter_rank -> 2 x intermediate) to gate_up_proj's output, and
with use_shared_attention_adapter to q, k and v's (2h -> adapter_rank -> 2h). The cache: K/V per hybrid layer, and per
layer Mamba2's conv state [conv_dim, k] and float32 recurrent state [heads, head_dim, N].

Described once, by its forward (`walk`, layout_base.Walk): the op template and the expected tensors derive from it."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from typing import Any

from ..errors import NoAnalyticModel, UsageError
from .framework import decoders, infer, layout, layout_ssm, walk_names
from .framework.archspec import SSM, Variant
from .framework.base import FROM_CLASS, STATE_BYTES, ArchSpec, Cfg, Family, KVLines, Sample, Tensors
from .framework.layout import DecoderLayout, Paths
from .framework.layout_base import Module, SSMKeys, Walk, walk_tensors
from .framework.layout_parts import output_heads, task_labels
from .framework.ops import Builder

_SHARED, _HYBRID_MAMBA = "shared_transformer", "mamba_decoder."
LAYOUT = DecoderLayout(tied_default=True, task_heads=("seqcls",),
                       paths=Paths(mlp="feed_forward", mlp_in="pre_ff_layernorm", norm="final_layernorm"))
_P = LAYOUT.paths
# the mixer's path in a Mamba layer and in a hybrid layer's mamba_decoder (layout_ssm.mamba2 reads Paths.ssm)
_MIXER = {"": LAYOUT, _HYBRID_MAMBA: replace(LAYOUT, paths=replace(_P, ssm=_HYBRID_MAMBA + _P.ssm))}
_KEYS = SSMKeys(heads="n_mamba_heads", head_dim="mamba_headdim", state="mamba_d_state", groups="mamba_ngroups",
                conv_kernel="mamba_d_conv", chunk="chunk_size", expand="mamba_expand", bias="add_bias_linear")


@dataclass(frozen=True)
class Zamba2Variant(Variant):
    hybrid: tuple[int, ...]        # the layers layers_block_type marks "hybrid"
    blocks: int                    # num_mem_blocks
    adapter_rank: int
    attn_adapters: bool            # use_shared_attention_adapter
    rope: bool                     # use_mem_rope


def _kinds(c: Cfg) -> list[str]:
    """Zamba2Config's layers_block_type, or the list its __post_init__ sets (the model has one layer per entry, whatever
    num_hidden_layers)."""
    kinds = c.get("layers_block_type", default=None)
    if kinds is None:
        m, y = "linear_attention", "hybrid"
        return [m] + ([m] * 5 + [y]) * 7 + [m] * 4 + [y] + [m] * 3 + [y] + [m] * 2
    if not isinstance(kinds, list) or not kinds or not all(isinstance(k, str) for k in kinds):
        raise UsageError(f"{c.path}: config layers_block_type is not a list of layer kinds")
    return kinds


def from_config(c: Cfg) -> ArchSpec:
    h, a = c.int("hidden_size"), c.int("num_attention_heads")
    kinds = _kinds(c)
    # the conv1d always biased (Zamba2MambaMixer ignores use_conv_bias)
    ssm = replace(layout_ssm.from_config(_KEYS, c, h), conv_bias=True)
    bias = bool(c.get("add_bias_linear", default=FROM_CLASS))
    v = Zamba2Variant(hybrid=tuple(i for i, k in enumerate(kinds) if k == "hybrid"),
                      blocks=c.int("num_mem_blocks", default=FROM_CLASS), adapter_rank=c.int("adapter_rank", default=FROM_CLASS),
                      attn_adapters=bool(c.get("use_shared_attention_adapter", default=FROM_CLASS)),
                      rope=bool(c.get("use_mem_rope", default=FROM_CLASS)))
    # null in the class: num_attention_heads, 4 x hidden_size
    g = c.int("num_key_value_heads") if c.get("num_key_value_heads", default=None) is not None else a
    f = c.int("intermediate_size") if c.get("intermediate_size", default=None) is not None else 4 * h
    # __post_init__ derives these two (2h / a, 2h); a saved value overrides them, and Zamba2Attention reads both
    d = c.int("attention_head_dim") if c.get("attention_head_dim", default=None) is not None else 2 * h // a
    if c.get("attention_hidden_size", default=None) not in (None, 2 * h):
        raise NoAnalyticModel(f"{c.path}: config attention_hidden_size is not 2 x hidden_size, the width of the "
                              "[stream; embeddings] the shared block reads: the template describes only that")
    return ArchSpec(layers=len(kinds), hidden=h, heads=a, kv_heads=g, head_dim=d, intermediate=f,
                    vocab=c.int("vocab_size"), activation=str(c.get("hidden_act", default=FROM_CLASS)), gated_mlp=True,
                    norm="rmsnorm", mlp_bias=bias, tied_embeddings=bool(c.get("tie_word_embeddings", default=FROM_CLASS)),
                    ssm=ssm, ssm_layers=tuple(range(len(kinds))), variant=v, **c.common)


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    """The sizes from the modules the walk records (_NAMES). Not in the shapes: heads and head_dim apart (q_proj's rows
    are their product; head_dim taken as the greatest common divisor of q_proj's and k_proj's rows), the
    mixer's groups and state apart (conv_dim = intermediate + 2 x groups x state: one group taken), chunk_size,
    use_mem_rope (no weights) and hidden_act: noted."""
    N = _NAMES
    V, h = walk_names.shape(T, N, _P.embed)
    L = infer.count_layers(T, rf"(?:^|\.){_P.layers}\.(\d+)\.(?:{re.escape(_HYBRID_MAMBA)})?{_P.ssm}\.A_log$")
    rx = walk_names.pattern(N, "linear", layer=r"(\d+)")
    hybrid = tuple(sorted({int(m.group(1)) for n in T if (m := re.search(rx, n))}))
    H = infer.shape(T, walk_names.pattern(N, f"{_P.ssm}.A_log"), "mamba.A_log")[0]
    cd, _, k = infer.shape(T, walk_names.pattern(N, f"{_P.ssm}.conv1d"), "mamba.conv1d")
    i = infer.shape(T, walk_names.pattern(N, f"{_P.ssm}.norm"), "mamba.norm")[0]
    q = walk_names.shape(T, N, f"{_SHARED}.{_P.attn}.{_P.q}")[0]
    kv = walk_names.shape(T, N, f"{_SHARED}.{_P.attn}.{_P.k}")[0]
    d = math.gcd(q, kv)
    r, f2 = (walk_names.shape(T, N, f"{_SHARED}.{_P.mlp}.gate_up_proj_adapter_list.0.{x}")[0] for x in (0, 1))
    # the first hybrid layer's adapters are those of hybrid layers 0, M, 2M... (M = num_mem_blocks), or its own alone
    slots = sorted({int(m.group(1)) for n in T if hybrid and (m := re.search(
        rf"(?:^|\.){_P.layers}\.{hybrid[0]}\.{_SHARED}\.{_P.mlp}\.gate_up_proj_adapter_list\.(\d+)\.", n))})
    M = slots[1] if len(slots) > 1 else len(hybrid)
    # untied (the module docstring): an lm_head, or more copies of the shared block than blocks, stored apart
    rq = walk_names.pattern(N, f"{_SHARED}.{_P.attn}.{_P.q}")
    lm, emb = infer.find(T, walk_names.pattern(N, _P.lm_head)), infer.find(T, walk_names.pattern(N, _P.embed))
    apart = (lm is not None and (emb is None or lm.alias_key != emb.alias_key)
             or len({t.alias_key for name, t in T.items() if re.search(rq, name)}) > min(M, len(hybrid)))
    bias = infer.has(T, walk_names.pattern(N, f"{_P.ssm}.in_proj", "bias"))
    ssm = SSM(heads=H, head_dim=i // H, state=(cd - i) // 2, groups=1, conv_kernel=k, chunk=256, intermediate=i,
              conv_bias=True, bias=bias)
    v = Zamba2Variant(hybrid=hybrid, blocks=M, adapter_rank=r,
                      attn_adapters=infer.has(T, walk_names.pattern(N, f"{_SHARED}.{_P.attn}.linear_q_adapter_list.0.0")),
                      rope=False)
    return ArchSpec(layers=L, hidden=h, heads=q // d, kv_heads=kv // d, head_dim=d, intermediate=f2 // 2, vocab=V,
                    activation="gelu", gated_mlp=True, norm="rmsnorm", mlp_bias=bias, ssm=ssm, ssm_layers=tuple(range(L)),
                    tied_embeddings=not apart, num_labels=task_labels(LAYOUT, T), variant=v,
                    assumptions=(f"no config: head_dim assumed {d} (the shapes show heads x head_dim alone)",
                                 f"no config: mamba_ngroups assumed 1 (mamba_d_state {(cd - i) // 2}), chunk_size 256 "
                                 "and use_mem_rope false (Zamba2Config's defaults)",
                                 "no config: hidden_act assumed gelu (Zamba2Config's default)"), **common)


def _shared_block(w: Walk, v: Zamba2Variant) -> None:
    """The shared blocks on the hybrid layers, their weights held once per block when tied (the module docstring)."""
    s, B, tok, hybrid = w.s, w.B, w.tok, v.hybrid
    h, a, g, d, f, n = s.hidden, s.heads, s.kv_heads, s.head_dim, s.intermediate, len(hybrid)
    M = min(v.blocks, n)
    held = M if s.tied_embeddings else n
    # the k-th hybrid layer's adapters: held by block k mod M, so saved under every layer that runs it; untied, each
    # layer holds its block's (as many as the hybrid layers that block runs on)
    runs = [tuple(hybrid[x] for x in range(n) if x % M == k % M) for k in range(n)]
    adapters = n if s.tied_embeddings else sum(len(r) for r in runs)
    at, mp = f"{_SHARED}.{_P.attn}.", f"{_SHARED}.{_P.mlp}."

    def linear(sub: str, fin: int, fout: int, bias: bool = False) -> None:
        w.record(sub, None, (("weight", (fout, fin)),) + ((("bias", (fout,)),) if bias else ()), hybrid)
        B.linear(w.label(sub, hybrid), "encoder", tok, fin, fout, bias, n, copies=held)

    def adapter(sub: str, fin: int, fout: int) -> None:
        for k in range(n):
            for x, shape in ((0, (v.adapter_rank, fin)), (1, (fout, v.adapter_rank))):
                w.record(f"{sub}_adapter_list.{k}.{x}", None, (("weight", shape),), runs[k])
        label = w.label(f"{sub}_adapter_list.*", hybrid)
        B.linear(label + ".0", "encoder", tok, fin, v.adapter_rank, False, n, copies=adapters)
        B.linear(label + ".1", "encoder", tok, v.adapter_rank, fout, False, n, copies=adapters)
        B.add(f"{label} + {sub}", "activation", "encoder", n, tok + (fout,), tok + (fout,), ew=B.b * B.seq * fout)

    def norm(sub: str, dim: int) -> None:
        w.record(sub, None, (("weight", (dim,)),), hybrid)
        B.norm(w.label(sub, hybrid), "encoder", tok, dim, n, copies=held, residual=False)

    norm(f"{_SHARED}.{_P.attn_in}", 2 * h)   # over [stream; embeddings]
    for sub, width in ((_P.q, a), (_P.k, g), (_P.v, g)):
        linear(at + sub, 2 * h, width * d)
    for sub in ("q", "k", "v") if v.attn_adapters else ():
        adapter(f"{at}linear_{sub}", 2 * h, 2 * h)
    if v.rope:   # the table: position x inv_freq, element-wise
        decoders.rope_apply(B, w.label(at + "rotary", hybrid), a + g, d, n)
    B.attention(w.label(at.rstrip("."), hybrid), "encoder", a, B.seq, B.seq, d, n, True)
    linear(at + _P.o, a * d, h)
    norm(f"{_SHARED}.{_P.mlp_in}", h)
    linear(mp + "gate_up_proj", h, 2 * f, s.mlp_bias)
    adapter(mp + "gate_up_proj", h, 2 * f)
    B.activation(w.label(f"{mp}act*up", hybrid), "encoder", tok, f, s.activation, n, gated=True)
    linear(mp + _P.down, f, h, s.mlp_bias)
    w.linear("linear", None, h, h, False, hybrid)
    B.add(w.label("stream + linear(shared block)", hybrid), "activation", "encoder", n, tok + (h,), tok + (h,),
          ew=B.b * B.seq * h)


def walk(B: Builder) -> list[Module]:
    """The forward at B.s's sizes (Zamba2Model.forward): writes its ops to B and returns the modules it met."""
    s, n = B.s, B.seq
    v, w = s.variant_as(Zamba2Variant), Walk(B, LAYOUT)
    h, hybrid = s.hidden, v.hybrid
    assert s.ssm is not None
    w.record(_P.embed, None, (("weight", (s.vocab, h)),), None)
    B.embedding(_P.embed, "embedding", s.vocab, h, n)
    if hybrid:
        _shared_block(w, v)
    for pre, layers in (("", tuple(i for i in range(s.layers) if i not in hybrid)), (_HYBRID_MAMBA, hybrid)):
        if layers:
            w.norm(pre + _P.attn_in, None, h, layers)
            mixer = Walk(B, _MIXER[pre])
            layout_ssm.mamba2(mixer, layers, s.ssm)
            w.modules += mixer.modules
    w.norm(_P.norm, None, h, None, residual=False)
    output_heads(w, h)
    return w.modules


def build(B: Builder) -> None:
    walk(B)


def kv_cache(s: ArchSpec, b: int, n: int, nd: int, ab: int) -> KVLines:
    """K/V of the hybrid layers over s tokens; every layer's conv state and float32 recurrent state (layout_ssm.py)."""
    m, hy = s.ssm, len(s.variant_as(Zamba2Variant).hybrid)
    assert m is not None
    per, rb = 2 * s.kv_heads * s.head_dim * ab, max(ab, STATE_BYTES)
    state = m.conv_dim * m.conv_kernel * ab + m.heads * m.head_dim * m.state * rb
    return [(f"b={b}, s={n}", b * (per * hy * n + state * s.layers),
             f"{hy} hybrid layers x 2 x g x d x s x {ab} B (= {per * hy:,} B/token) + {s.layers} Mamba layers x "
             f"(conv_dim x conv_kernel x {ab} B + heads x head_dim x state x {rb} B, float32) "
             f"(= {state * s.layers:,} B/sequence, any s), x b")]


expected_tensors = walk_tensors(walk, _P.body)
# the paths the name regexes read: a Mamba layer and a hybrid one, with every adapter
_NAMES = walk_names.walked(walk, **walk_names.LM, ssm=SSM(heads=2, head_dim=4, state=2, groups=1, conv_kernel=2, chunk=4,
                                                          intermediate=8, conv_bias=True, bias=True),
                           variant=Zamba2Variant(hybrid=(1,), blocks=1, adapter_rank=2, attn_adapters=True, rope=False))

_SIZES = dict(hidden_size=32, num_attention_heads=4, intermediate_size=37, vocab_size=99, mamba_d_state=8, mamba_d_conv=3,
              n_mamba_heads=4, chunk_size=4, adapter_rank=5, pad_token_id=0,
              layers_block_type=["mamba", "hybrid", "mamba", "hybrid", "hybrid"], num_hidden_layers=5)

FAMILY = Family(
    name="zamba2",
    model_types=("zamba2",),
    signature=walk_names.signature(_NAMES, f"{_SHARED}.{_P.mlp}.gate_up_proj", tf1=False),
    from_config=from_config, from_tensors=from_tensors, build=build, expected_tensors=expected_tensors,
    **{**layout.decoder_lm(LAYOUT), "kv_cache": kv_cache},
    gguf_architectures=(),   # llama.cpp has no Zamba2 architecture
    samples=(
        # one block shared by three hybrid layers (tied), a saved attention_head_dim (not 2h / heads), chunks of 4 over
        # 8 and 16 tokens; on the CPU: the cache's conv padding runs on values
        Sample("Zamba2Config", dict(_SIZES, num_key_value_heads=2, attention_head_dim=12), ("Zamba2ForCausalLM", "Zamba2Model"),
               device="cpu"),
        # two blocks alternating, untied (each hybrid layer its copy), attention adapters and rotary, biased
        # projections, two groups of B/C
        Sample("Zamba2Config", dict(_SIZES, num_mem_blocks=2, use_shared_attention_adapter=True, use_mem_rope=True,
                                    add_bias_linear=True, mamba_ngroups=2, tie_word_embeddings=False),
               ("Zamba2ForCausalLM", "Zamba2Model"), device="cpu"),
        # two blocks tied; the sequence classifier tests `pad_token_id in input_ids`: values
        Sample("Zamba2Config", dict(_SIZES, num_mem_blocks=2, use_shared_attention_adapter=True, num_labels=3),
               ("Zamba2ForSequenceClassification", "Zamba2ForCausalLM"), device="cpu"),
    ),
)
