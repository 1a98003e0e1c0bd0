"""HRM-Text (transformers modeling_hrm_text.py, HrmTextModel / HrmTextForCausalLM): a hierarchical recurrent decoder. Two
stacks, L_module and H_module, of num_layers_per_stack LLaMA-like layers each (weightless RMSNorms; multi-head attention
q / k / v / o and a sigmoid output gate gate_proj; rotary on head_dim; a gated MLP; a weightless final_norm per stack),
run in cycles: H_cycles times, L_cycles passes of L_module then one of H_module. The embedding is scaled by
embedding_scale; z_L_init [h], a parameter, starts the low cycle. The config class rewrites num_hidden_layers to the
invocations, num_layers_per_stack x H_cycles x (L_cycles + 1), and the DynamicCache holds keys and values for every
invocation.

FLOPs: each invocation's projections and eager attention (the whole square) as FlopCounterMode counts them; parameters:
the two stacks once. attention_bias / mlp_bias configs are refused (NoAnalyticModel: the meta path answers): the
converter that writes the fused names moves the weights only.
Described once, as a walk (`walk`: framework/recorder.py's recorder, each saved weight recorded where the projections it
holds are written): the op template and the expected tensors both derive from it."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import NoAnalyticModel
from .framework import decoders, infer, layout
from .framework.archspec import Variant
from .framework.base import (
    FROM_CLASS,
    ArchSpec,
    Cfg,
    Family,
    KVLines,
    Sample,
    Tensors,
    class_default,
)
from .framework.layout import DecoderLayout
from .framework.ops import Builder
from .framework.recorder import Recorder, Stack, tensors
from .framework.walk_names import layers, pattern, signature, walked

STACKS = ("L_module", "H_module")
LAYOUT = DecoderLayout()   # LLaMA's module names at the top: model.embed_tokens, lm_head


@dataclass(frozen=True)
class HrmVariant(Variant):
    per_stack: int     # num_layers_per_stack: the layers of each of the two stacks (ArchSpec.layers: the invocations)
    low_cycles: int    # L_cycles: L_module passes per high cycle (H_cycles = layers / per_stack / (L_cycles + 1))


def from_config(c: Cfg) -> ArchSpec:
    high, low = c.int("H_cycles", default=FROM_CLASS), c.int("L_cycles", default=FROM_CLASS)
    stacked = c.get("num_layers_per_stack", default=None)
    n = c.int("num_hidden_layers")
    per = n if stacked is None else c.int("num_layers_per_stack")   # a legacy config: num_hidden_layers per stack
    h, a = c.int("hidden_size"), c.int("num_attention_heads")
    for key in ("attention_bias", "mlp_bias"):   # save_pretrained's converter fuses the weights only
        if c.get(key, default=FROM_CLASS):
            raise NoAnalyticModel(f"{c.path}: config {key} = true: the hrm_text op template describes only unbiased "
                                  "projections (transformers' converter fuses the weights, not the biases)")
    return ArchSpec(layers=per * high * (low + 1), hidden=h, heads=a, kv_heads=a,
                    head_dim=c.int("head_dim", default=FROM_CLASS),
                    intermediate=c.int("intermediate_size"), vocab=c.int("vocab_size"),
                    activation=str(c.get("hidden_act", default=FROM_CLASS)), gated_mlp=True, norm="rmsnorm",
                    qkv_bias=False, o_bias=False, mlp_bias=False,
                    tied_embeddings=bool(c.get("tie_word_embeddings", default=FROM_CLASS)),
                    variant=HrmVariant(per_stack=per, low_cycles=low), **c.common)


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    V, h = infer.shape(T, pattern(WALKED, "embed_tokens"), "embed_tokens")
    gq = infer.find(T, pattern(WALKED, GQKV))   # as saved; in memory (a torch.save): self_attn.q_proj, not walked
    q = gq.shape[0] // 4 if gq is not None else infer.shape(T, r"L_module\.layers\.0\.self_attn\.q_proj\.weight$",
                                                              "L_module attn.gqkv_proj")[0]
    f = infer.shape(T, pattern(WALKED, DOWN), "L_module mlp.down_proj")[1]
    per = infer.count_layers(T, layers(WALKED, DOWN))
    high, low = (int(class_default("hrm_text", k)) for k in ("H_cycles", "L_cycles"))
    d = int(class_default("hrm_text", "head_dim"))
    d = d if q % d == 0 else q
    return ArchSpec(layers=per * high * (low + 1), hidden=h, heads=q // d, kv_heads=q // d, head_dim=d, intermediate=f,
                    vocab=V, activation="silu", gated_mlp=True, norm="rmsnorm", qkv_bias=False, o_bias=False,
                    mlp_bias=False, tied_embeddings=not infer.has(T, pattern(WALKED, "lm_head")),
                    variant=HrmVariant(per_stack=per, low_cycles=low),
                    assumptions=(f"no config: H_cycles {high}, L_cycles {low} and head_dim {d}, as the config class "
                                 "defaults them (the cycles set the FLOPs and the cache, not the parameters)",), **common)


def walk(B: Builder) -> Recorder:
    """The forward at B.s's sizes: writes its ops to B and records the modules it meets, as save_pretrained writes them
    (transformers' converter fuses gate_proj, q, k, v into attn.gqkv_proj and the MLP's gate and up into
    mlp.gate_up_proj: conversion_mapping.py)."""
    s, r, b, n = B.s, Recorder(B), B.b, B.seq
    v = s.variant_as(HrmVariant)
    h, a, d, f, runs, per = s.hidden, s.heads, s.head_dim, s.intermediate, s.layers, v.per_stack
    tok = r.tok
    lay = f"model.{{L,H}}_module.layers[{2 * per}] x {runs // per // 2} cycles"
    stacks = tuple(Stack(lay, f"{stack}.layers.{{bid}}", per, runs) for stack in STACKS)

    def linear(saved: str, parts: tuple[str, ...], fin: int, fout: int) -> None:
        """One weight per layer of each stack, saved as `saved`: the `parts` (each fin -> fout) the forward runs."""
        for stack in stacks:
            r.record(saved, (("weight", (len(parts) * fout, fin)),), stack)
        for part in parts:
            B.linear(f"{lay}.{part}", "encoder", tok, fin, fout, False, runs, copies=2 * per)

    r.embedding("embed_tokens", s.vocab, h, n, bucket="embedding", label="model.embed_tokens")
    B.add("model.embed_tokens x embedding_scale", "activation", "embedding", 1, tok + (h,), tok + (h,), ew=b * n * h)
    z = r.count((("z_L_init", (("", (h,)),)),))
    B.add("model.z_L_init", "activation", "encoder", 1, (h,), tok + (h,), params=z, weights_per_call=z)
    decoders.rotary(B, d)
    B.add(f"{lay} stack input (low + high)", "activation", "encoder", runs // per, tok + (h,), tok + (h,), ew=b * n * h)
    B.norm(f"{lay}.input_layernorm", "encoder", tok, h, runs, copies=0)
    linear("attn.gqkv_proj", tuple(f"self_attn.{x}" for x in ("q_proj", "k_proj", "v_proj", "gate_proj")), h, a * d)
    decoders.rope_apply(B, f"{lay}.self_attn rotary", 2 * a, d, runs)
    B.attention(f"{lay}.self_attn", "encoder", a, n, n, d, runs, True)
    B.activation(f"{lay}.self_attn sigmoid(gate) x attention", "encoder", tok, a * d, "sigmoid", runs, gated=True)
    linear("attn.o_proj", ("self_attn.o_proj",), a * d, h)
    B.norm(f"{lay}.post_attention_layernorm", "encoder", tok, h, runs, copies=0)
    linear("mlp.gate_up_proj", ("mlp.gate_proj", "mlp.up_proj"), h, f)
    B.activation(f"{lay}.mlp act*up", "encoder", tok, f, s.activation, runs, gated=True)
    linear("mlp.down_proj", ("mlp.down_proj",), f, h)
    B.norm("model.{L,H}_module.final_norm", "encoder", tok, h, runs // per, copies=0, residual=False)
    if s.head == "lm":
        r.record("lm_head", (("weight", (s.vocab, h)),), top=True)
    decoders.lm_head(B, "lm_head", "model.embed_tokens")
    return r


def build(B: Builder) -> None:
    walk(B)


# the walk of a tiny, untied HrmTextForCausalLM: the paths of the name signature and from_tensors' look-ups
WALKED = walked(walk, "hrm_text", head="lm", layers=2, variant=HrmVariant(per_stack=1, low_cycles=1))
GQKV, DOWN = "L_module.layers.{bid}.attn.gqkv_proj", "L_module.layers.{bid}.mlp.down_proj"


def kv_cache(s: ArchSpec, b: int, n: int, nd: int, ab: int) -> KVLines:
    """DynamicCache(config): keys and values of every invocation (num_hidden_layers, the config class's rewrite)."""
    per = 2 * s.heads * s.head_dim * ab * s.layers
    return [(f"b={b}, s={n}", per * b * n, f"2 x a x d x {ab} B x {s.layers} invocations (num_layers_per_stack x "
                                            f"H_cycles x (L_cycles + 1)) = {per:,} B/token")]


_SIZES = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, head_dim=8, intermediate_size=40, vocab_size=99,
              max_position_embeddings=64, H_cycles=2, L_cycles=2)

FAMILY = Family(
    name="hrm_text",
    model_types=("hrm_text",),
    # as saved (fused by transformers' converter), or a torch.save of the model in memory (not walked)
    signature=signature(WALKED, GQKV) + r"|(^|[./])L_module[./]layers[./]\d+[./]self_attn[./]gate_proj",
    from_config=from_config, from_tensors=from_tensors, build=build, expected_tensors=tensors(walk, LAYOUT.paths.body),
    # LLaMA's module names at the top (model.embed_tokens, lm_head): its heads, head rules and HrmTextForCausalLM's
    # _tied_weights_keys
    **{**layout.decoder_lm(LAYOUT), "kv_cache": kv_cache},
    gguf_architectures=(),   # llama.cpp has no HRM architecture: no GGUF names
    samples=(
        Sample("HrmTextConfig", _SIZES, ("HrmTextForCausalLM", "HrmTextModel")),
        Sample("HrmTextConfig", dict(_SIZES, tie_word_embeddings=True, H_cycles=1, L_cycles=3), ("HrmTextForCausalLM",)),
    ),
)
