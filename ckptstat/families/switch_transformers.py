"""SwitchTransformers (transformers modeling_switch_transformers.py): T5 (t5.py's walk: shared embedding, RMSNorm,
relative position buckets in each stack's block 0, cross-attention) whose feed-forward is `mlp`: a dense wi / act / wo
(SwitchTransformersDenseActDense), or in the sparse blocks a top-1 router (`mlp.router.classifier`, run in
router_dtype) and num_experts such MLPs (`mlp.experts.expert_{e}`). SwitchTransformersStack makes block i sparse
where i % step == 1 or step == 1 (step > 0), step = num_layers // num_sparse_encoder_layers (the decoder's alike;
num_layers when num_sparse_* is 0, which still makes block 1 sparse: the config's "0 sparse layers" is not what the
stack builds, and the template follows the stack).

Routing is top-1 with a capacity: per row, the expert_capacity first tokens (in sequence order) an expert is chosen by
are run through it, later ones dropped (their feed-forward output is 0). The eager forward runs each expert on the
tokens it keeps (SwitchTransformersExperts' loop), so FlopCounterMode counts each kept token once per sparse block:
the template counts every token once (a dense-equivalent expert), which is exact while no row is longer than
expert_capacity (no token can then be dropped, whatever the router chooses) and data-dependent beyond: `--seq` (and
the decoder's) longer than expert_capacity is refused by name (Family.longest_seq; the meta path answers it, where
installed). Heads: SwitchTransformersModel, ForConditionalGeneration (lm_head tied to `shared` by default; the
tied logits are scaled by d_model^-0.5, an element-wise op), EncoderModel."""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from ..errors import NoAnalyticModel, UsageError
from . import t5
from .framework import infer
from .framework.base import FROM_CLASS, ArchSpec, Cfg, Family, Sample, Shapes, Tensors
from .framework.ops import Builder
from .framework.recorder import Recorder
from .framework.walk_names import layers, pattern, signature, walked


@dataclass(frozen=True)
class SwitchVariant(t5.T5Variant):
    """The sparse blocks of each stack, the experts and their capacity (tokens per row an expert runs)."""
    encoder_sparse: tuple[int, ...] = ()
    decoder_sparse: tuple[int, ...] = ()
    experts: int = 0
    capacity: int = 0
    router_bias: bool = False


def _v(s: ArchSpec) -> SwitchVariant:
    return s.variant_as(SwitchVariant)


def sparse_blocks(layers: int, num_sparse: int) -> tuple[int, ...]:
    """The blocks SwitchTransformersStack makes sparse: SwitchTransformersConfig's step and the stack's rule."""
    step = layers // num_sparse if num_sparse > 0 else layers
    return tuple(i for i in range(layers) if step > 0 and (i % step == 1 or step == 1))


def from_config(c: Cfg) -> ArchSpec:
    L = c.int("num_layers", default=FROM_CLASS)
    Ld = c.get("num_decoder_layers", default=None)
    Ld = L if Ld is None else c.int("num_decoder_layers")
    v = SwitchVariant(stack_embeds_follow_tie=True,
                      encoder_sparse=sparse_blocks(L, c.int("num_sparse_encoder_layers", default=FROM_CLASS)),
                      decoder_sparse=sparse_blocks(Ld, c.int("num_sparse_decoder_layers", default=FROM_CLASS)),
                      experts=c.int("num_experts", default=FROM_CLASS),
                      capacity=c.int("expert_capacity", default=FROM_CLASS),
                      router_bias=bool(c.get("router_bias", default=FROM_CLASS)))
    return replace(t5.from_config(c), layers=L, decoder_layers=Ld, gated_mlp=False,
                   activation=str(c.get("dense_act_fn", default=FROM_CLASS)), variant=v)


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    V, h = infer.shape(T, pattern(WALKED, "shared") + "|" + pattern(WALKED, "encoder.embed_tokens"), "shared embedding")
    inner = infer.shape(T, pattern(WALKED, t5.SELF_Q.format(stack="encoder")), "SelfAttention.q")[0]
    buckets, a = infer.shape(T, pattern(WALKED, "SelfAttention.relative_attention_bias"), "relative_attention_bias")
    f = next((t.shape[0] for key in ("mlp.wi", "expert_0.wi") if (t := infer.find(T, pattern(WALKED, key)))), None)
    if f is None:
        raise UsageError("no SwitchTransformers feed-forward (mlp.wi, mlp.experts.expert_0.wi) among the tensors")

    def sparse(stack: str) -> tuple[int, ...]:
        rx = re.compile(pattern(WALKED, ROUTER.format(stack=stack, n=1 if stack == "encoder" else 2), layer=r"(\d+)"))
        return tuple(sorted({int(m.group(1)) for n in T if (m := rx.search(n))}))
    experts = infer.count_layers(T, pattern(WALKED, "expert_0.wi").replace("expert_0", r"expert_(\d+)"))
    enc = infer.count_layers(T, layers(WALKED, t5.SELF_Q.format(stack="encoder")))
    embeds = pattern(WALKED, "encoder.embed_tokens")
    v = SwitchVariant(stack_embeds_follow_tie=True, encoder_sparse=sparse("encoder"), decoder_sparse=sparse("decoder"),
                      experts=experts, capacity=64,
                      router_bias=infer.has(T, pattern(WALKED_BIAS, "router.classifier", "bias")))
    return ArchSpec(layers=enc, hidden=h, heads=a, kv_heads=a, head_dim=inner // a, intermediate=f, vocab=V,
                    activation="relu", gated_mlp=False, norm="rmsnorm", qkv_bias=False, o_bias=False, mlp_bias=False,
                    tied_embeddings=not t5.untied_by_names(T, pattern(WALKED, "shared"), embeds, pattern(WALKED, "lm_head")),
                    decoder_layers=infer.count_layers(T, layers(WALKED, t5.SELF_Q.format(stack="decoder"))),
                    relative_buckets=buckets, variant=v,
                    assumptions=("no config: activation assumed relu, expert_capacity 64 (the config class's defaults)",),
                    **common)


def switch_mlp(w: Recorder, at: str, stack: str, tok: tuple[int, int], L: int, g: str) -> None:
    """The `mlp` of each of L blocks: SwitchTransformersDenseActDense in the dense ones; in the sparse ones the router
    (a linear to num_experts logits) and every token through one expert's wi / act / wo (exact while no token is
    dropped: the module docstring)."""
    B, s, v = w.B, w.B.s, _v(w.B.s)
    sparse = v.encoder_sparse if stack == "encoder" else v.decoder_sparse
    dense = tuple(i for i in range(L) if i not in sparse)
    h, f = s.hidden, s.intermediate
    if sparse and tok[1] > v.capacity:
        raise NoAnalyticModel(f"SwitchTransformers' top-1 routing drops the tokens past expert_capacity = {v.capacity} "
                              f"an expert is chosen by in a row: at {tok[1]} {stack} tokens the experts' FLOPs depend on "
                              "the router's choices (the op template counts every token once: exact up to the capacity)")
    for blocks, kind in ((dense, "dense"), (sparse, "sparse")):
        n = len(blocks)
        if not n:
            continue
        label = f"{stack}.block[{n} {kind}].{at.split('{bid}.')[1]}mlp"
        mlps: tuple[str, ...] = ("mlp.",)
        if kind == "sparse":
            router = (("weight", (v.experts, h)),) + ((("bias", (v.experts,)),) if v.router_bias else ())
            w.record(at + "mlp.router.classifier", router, layers=blocks)
            B.linear(label + ".router.classifier", stack, tok, h, v.experts, v.router_bias, n)
            mlps = tuple(f"mlp.experts.expert_{e}." for e in range(v.experts))
        for m in mlps:
            w.record(at + m + "wi", (("weight", (f, h)),), layers=blocks)
            w.record(at + m + "wo", (("weight", (h, f)),), layers=blocks)
        copies, active = n * len(mlps), (n if kind == "sparse" else None)
        experts = " (one expert per token)" if kind == "sparse" else ""
        B.linear(label + ".wi" + experts, stack, tok, h, f, False, n, copies, active_copies=active)
        B.activation(label + ".act", stack, tok, f, s.activation, n)
        B.linear(label + ".wo" + experts, stack, tok, f, h, False, n, copies, active_copies=active)


def walk(B: Builder) -> Recorder:
    return t5.walk(B, switch_mlp)


def build(B: Builder) -> None:
    walk(B)


def expected_tensors(s: ArchSpec) -> Shapes:
    return walk(Builder(s, 1, 1, 1, 1, 1)).shapes()


def longest_seq(s: ArchSpec) -> int | None:
    """expert_capacity where a block is sparse: beyond, a row may drop tokens and the FLOPs depend on the routing."""
    v = _v(s)
    return v.capacity if v.encoder_sparse or v.decoder_sparse else None


# a tiny SwitchTransformersForConditionalGeneration: block 0 dense, block 1 sparse in both stacks, two experts
_TINY = SwitchVariant(stack_embeds_follow_tie=True, encoder_sparse=(1,), decoder_sparse=(1,), experts=2, capacity=64)
WALKED = walked(walk, "switch_transformers", head="lm", layers=2, decoder_layers=2, relative_buckets=1, variant=_TINY)
ROUTER = "{stack}.block.{{bid}}.layer.{n}.mlp.router.classifier"
WALKED_BIAS = walked(walk, "switch_transformers", head="lm", layers=2, decoder_layers=2, relative_buckets=1,
                     variant=replace(_TINY, router_bias=True))

# num_layers 4 / 2 sparse: step 2, blocks 1 and 3 sparse; the decoder's 3 / 1: step 3, block 1
_SIZES = dict(d_model=32, d_kv=8, d_ff=37, num_layers=4, num_decoder_layers=3, num_heads=4, vocab_size=99,
              num_experts=4, num_sparse_encoder_layers=2, num_sparse_decoder_layers=1, expert_capacity=16)
_CLASSES = ("SwitchTransformersForConditionalGeneration", "SwitchTransformersEncoderModel")

FAMILY = Family(
    name="switch_transformers",
    model_types=("switch_transformers",),
    signature=signature(WALKED, "router.classifier", "mlp.wi"),
    from_config=from_config, from_tensors=from_tensors, build=build, expected_tensors=expected_tensors,
    heads=("base", "lm", "encoder-only"),
    head_rules=t5.LM_HEAD_RULES,
    no_head="encoder-only",
    default_head="lm",
    tie_rules=t5.TIES_BY_CONFIG,
    encoder_decoder=True,
    kv_cache=t5.kv_cache,
    longest_seq=longest_seq,
    before=("t5",),   # T5's signature (the encoder's SelfAttention.q) matches these files too
    samples=(
        # on the CPU: the experts' loop picks each expert's tokens with torch.where, which the meta device lacks
        Sample("SwitchTransformersConfig", _SIZES, _CLASSES, device="cpu"),
        # SwitchTransformersModel stores what a tied ForConditionalGeneration does: names show an LM
        Sample("SwitchTransformersConfig", _SIZES, ("SwitchTransformersModel",), device="cpu", infer=False),
        # an untied LM head, a router bias, gelu, 0 sparse decoder layers (block 1 sparse all the same), one encoder
        # block sparse in two (step 1: every block)
        Sample("SwitchTransformersConfig", dict(_SIZES, tie_word_embeddings=False, router_bias=True, dense_act_fn="gelu",
                                                num_layers=2, num_sparse_encoder_layers=2, num_sparse_decoder_layers=0),
               _CLASSES, device="cpu"),
    ),
)
