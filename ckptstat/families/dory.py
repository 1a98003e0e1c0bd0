"""Dory (transformers modeling_dory.py, DoryModel / DoryForCausalLM): a looped normalized transformer (nGPT). Its layers
are Gemma2-placed but every norm a weightless L2 projection onto the unit sphere: per layer q / k / v / o and an output
gate gate_proj (saved g_proj, h -> a x d) (AfMoE's attention), unit-norm queries and keys, the queries scaled per channel
by sqk [a x d] after rotary, the gate scaled by s_gate [a x d], sigmoid(gate) x the attention's output, an L2 norm, o_proj;
a gated MLP whose gate and up are scaled per channel (suv_gate, suv_up [f]), an L2 norm before down_proj; the residual an
interpolation at the learned rates lambda_1, lambda_2 [h]. The LM head scales its logits by logit_scale [vocab].

The forward runs the first n_input_layers once, the next n_recurrent_layers n_recurrent_loops times (each loop restarting
from the normed input section's output) and the last n_output_layers once: FLOPs per run, parameters once. Sliding
layers by layer_types (the released config.json lists each layer as an attention and an "mlp" block: the class halves
num_hidden_layers and the section sizes); eager attention counts every score, the window only masks.

The cache (DynamicCache(config)): each layer's K/V (a sliding layer's last sliding_window - 1 tokens, a view of all s); with
recurrent_kv_cache_mode "per_loop" every loop past the first writes its own copy of the recurrent layers' cache, with
"last_loop" only the last loop writes. Saved as DoryForCausalLM: backbone.embeddings, backbone.layers (conversion_mapping:
the model's model.embed_tokens, model.layers)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import NoAnalyticModel, UsageError
from .framework import decoders, layout, walk_names
from .framework.archspec import Variant
from .framework.base import FROM_CLASS, SLIDING_HELD, ArchSpec, Cfg, Family, KVLines, Sample, Tensors
from .framework.layout import DecoderLayout, Paths
from .framework.layout_base import Walk, walk_tensors
from .framework.ops import Builder, ew_cost

# the module names as save_pretrained writes them; Walk records with them (DoryModel's own file: embed_tokens)
LAYOUT = DecoderLayout(paths=Paths(body="backbone", embed="embeddings", attn_gate="g_proj"))


@dataclass(frozen=True)
class DoryVariant(Variant):
    inputs: int        # n_input_layers, run once first
    recurrent: int     # n_recurrent_layers, run `loops` times
    loops: int         # n_recurrent_loops
    per_loop: bool     # recurrent_kv_cache_mode "per_loop": each loop caches its own K/V of the recurrent layers

    def runs(self, i: int) -> int:
        """How many times layer i runs in one forward."""
        return self.loops if self.inputs <= i < self.inputs + self.recurrent else 1


def from_config(c: Cfg) -> ArchSpec:
    L, h, a = c.int("num_hidden_layers"), c.int("hidden_size"), c.int("num_attention_heads")
    first, last = c.int("n_input_layers", default=FROM_CLASS), c.int("n_output_layers", default=FROM_CLASS)
    rec = c.get("n_recurrent_layers", default=None)
    types = c.get("layer_types", default=None)
    if isinstance(types, list) and "mlp" in types:   # DoryConfig.__post_init__: each (attention, mlp) pair is one layer
        types, L, first, last = types[::2], L // 2, first // 2, last // 2
        rec = rec // 2 if isinstance(rec, int) else rec
    if types is None:   # the class's rule: every 4th layer full
        types = ["full_attention" if (i + 1) % 4 == 0 else "sliding_attention" for i in range(L)]
    if not isinstance(types, list) or len(types) != L or any(t not in ("sliding_attention", "full_attention") for t in types):
        raise UsageError(f"{c.path}: config layer_types is not a list of {L} 'sliding_attention' / 'full_attention'")
    rec = L - first - last if rec is None else int(rec)
    loops = c.int("n_recurrent_loops", default=FROM_CLASS)
    if first + rec + last != L or loops < 1 or min(first, rec, last) < 0:
        raise UsageError(f"{c.path}: config n_input_layers + n_recurrent_layers + n_output_layers is not "
                         f"num_hidden_layers, or n_recurrent_loops is not positive")
    mode = c.get("recurrent_kv_cache_mode", default=FROM_CLASS)
    if mode not in ("per_loop", "last_loop"):
        raise NoAnalyticModel(f"{c.path}: config recurrent_kv_cache_mode = {mode!r}: the dory op template describes "
                              "'per_loop' and 'last_loop'")
    if c.get("attention_bias", default=FROM_CLASS) or c.get("mlp_bias", default=FROM_CLASS):
        raise NoAnalyticModel(f"{c.path}: config attention_bias / mlp_bias true: the dory op template describes "
                              "unbiased projections only")
    sliding = tuple(i for i, t in enumerate(types) if t == "sliding_attention")
    return ArchSpec(layers=L, hidden=h, heads=a, kv_heads=c.int("num_key_value_heads", default=FROM_CLASS),
                    head_dim=c.int("head_dim", default=FROM_CLASS), intermediate=c.int("intermediate_size"),
                    vocab=c.int("vocab_size"), context=c.int("max_position_embeddings", default=0),
                    activation=str(c.get("hidden_act", default=FROM_CLASS)), gated_mlp=True, norm="rmsnorm",
                    qkv_bias=False, o_bias=False, mlp_bias=False,
                    tied_embeddings=bool(c.get("tie_word_embeddings", default=FROM_CLASS)),
                    sliding_window=c.int("sliding_window", default=FROM_CLASS) if sliding else None,
                    sliding_layers=sliding,
                    variant=DoryVariant(inputs=first, recurrent=rec, loops=loops, per_loop=mode == "per_loop"),
                    **c.common)


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    raise NoAnalyticModel("Dory without config.json: its sections, loops and windows are config-only")


def walk(B: Builder) -> list[layout.Module]:
    """The forward at B.s's sizes: writes its ops to B and returns the modules it met."""
    s = B.s
    v = s.variant_as(DoryVariant)
    w = Walk(B, LAYOUT)
    p, h, a, g, d, f, L, n, tok = w.p, s.hidden, s.heads, s.kv_heads, s.head_dim, s.intermediate, s.layers, B.b * B.seq, w.tok
    every = tuple(range(L))
    R = sum(v.runs(i) for i in every)   # layer runs in one forward
    at, m = f"{p.attn}.", f"{p.mlp}."
    label = f"{p.layers}[{L}] x {R} runs"

    def lin(sub: str, fin: int, fout: int) -> None:
        w.record(sub, None, (("weight", (fout, fin)),), every)
        B.linear(f"{label}.{sub}", "encoder", tok, fin, fout, False, R, copies=L)

    def vec(sub: str, width: int, what: str, cost: int = 2) -> None:   # a per-channel parameter in an element-wise op
        w.record(sub, None, (("", (width,)),), every)
        B.add(f"{label}.{sub} ({what})", "activation", "encoder", R, tok + (width,), tok + (width,), params=width * L,
              ew=n * width * cost, weights_per_call=width)

    def l2(what: str, width: int, calls: int = R) -> None:   # DoryL2Norm: no weight
        B.add(f"{label if calls == R else 'model'} {what} (L2 norm)", "norm", "encoder", calls, tok + (width,),
              tok + (width,), ew=n * width * (ew_cost("rmsnorm") - 1))

    embed = p.embed if s.head != "base" else "embed_tokens"   # DoryModel's own file keeps the module's name
    w.record(embed, None, (("weight", (s.vocab, h)),), None)
    B.embedding(embed, "embedding", s.vocab, h, B.seq)
    for kind in ("sliding", "full"):
        decoders.rotary(B, d, f"rotary_emb ({kind})")
    l2("input_layernorm", h)
    for sub, width in ((p.q, a * d), (p.k, g * d), (p.v, g * d), (p.attn_gate, a * d)):
        lin(at + sub, h, width)
    l2("q_norm, k_norm", (a + g) * d)
    decoders.rope_apply(B, f"{label}.{p.attn} rotary", a + g, d, R)
    vec(at + "sqk", a * d, "queries x (sqk x scale)^2", 3)
    for window in (s.sliding_window, None):
        calls = sum(v.runs(i) for i in every if (i in s.sliding_layers) == (window is not None))
        if calls and (window is not None or len(s.sliding_layers) < L):
            B.attention(f"{p.layers}[{'sliding' if window else 'full'}, {calls} runs].{p.attn}", "encoder", a, B.seq,
                        B.seq, d, calls, True, window=window)
    vec(at + "s_gate", a * d, "output x sigmoid(gate x (s_gate x scale)^2)", 3 + ew_cost("sigmoid"))
    l2("attn_sub_norm", a * d)
    lin(at + p.o, a * d, h)
    l2("post_attention_layernorm, pre_feedforward_layernorm", 2 * h)
    vec("lambda_1", h, "the residual interpolated at |lambda_1 x scale|", 5)
    lin(m + p.gate, h, f)
    lin(m + p.up, h, f)
    for sub in ("suv_gate", "suv_up"):
        vec(m + sub, f, f"x ({sub} x scale)")
    B.activation(f"{label}.{p.mlp} act*up", "encoder", tok, f, s.activation, R, gated=True)
    l2("mlp.ffn_sub_norm", f)
    lin(m + p.down, f, h)
    l2("post_feedforward_layernorm", h)
    vec("lambda_2", h, "the residual interpolated at |lambda_2 x scale|", 5)
    l2("norm (the input section's output, each loop's input, the last layer's output)", h, v.loops + 2)
    if s.head == "lm":
        w.modules.append(layout.Module(p.lm_head, None, (("weight", (s.vocab, h)), ("logit_scale", (s.vocab,))), top=True))
        decoders.lm_head(B, p.lm_head, embed)
        B.add(f"{p.lm_head}.logit_scale (x logits)", "activation", "cls", 1, tok + (s.vocab,), tok + (s.vocab,),
              params=s.vocab, ew=n * s.vocab * 2, weights_per_call=s.vocab)
    return w.modules


def build(B: Builder) -> None:
    walk(B)


expected_tensors = walk_tensors(walk, LAYOUT.paths.body)
# the paths the signature reads
_NAMES = walk_names.walked(walk, **walk_names.LM, variant=DoryVariant(inputs=1, recurrent=1, loops=1, per_loop=True))


def kv_cache(s: ArchSpec, b: int, n: int, nd: int, ab: int) -> KVLines:
    """K and V per cached layer, 2 x g x d x bytes per token: the input and output layers once, the recurrent ones once
    per loop ("per_loop") or once ("last_loop"); a sliding layer holds all s tokens after the forward (SLIDING_HELD)."""
    v = s.variant_as(DoryVariant)
    per = 2 * s.kv_heads * s.head_dim * ab
    copies = [v.runs(i) if v.per_loop else 1 for i in range(s.layers)]
    total = per * n * sum(copies)
    how = "a copy of the recurrent layers per loop" if v.per_loop else "the recurrent layers once: the last loop writes"
    return [(f"b={b}, s={n}", b * total,
             f"2 x g x d x {ab} B = {per:,} B per token and cached layer, x b: {sum(copies)} cached layers ({how}); "
             f"s = {n} tokens each ({SLIDING_HELD})")]


_SIZES = dict(vocab_size=97, hidden_size=16, intermediate_size=24, num_hidden_layers=5, n_input_layers=1, n_output_layers=1,
              num_attention_heads=2, num_key_value_heads=1, head_dim=8, sliding_window=4, n_recurrent_loops=3)

FAMILY = Family(
    name="dory",
    model_types=("dory",),
    before=("beit",),   # tried before it: its layers' lambda_1 matches BEiT's layer-scale names as a torch.save holds them
    signature=walk_names.signature(_NAMES, f"{LAYOUT.paths.attn}.s_gate", tf1=False),
    from_config=from_config, from_tensors=from_tensors, build=build, expected_tensors=expected_tensors,
    **{**layout.decoder_lm(LAYOUT), "kv_cache": kv_cache},
    gguf_architectures=(),   # llama.cpp's names for Dory are not mapped here
    samples=(
        Sample("DoryConfig", _SIZES, ("DoryModel", "DoryForCausalLM"), infer=False),
        Sample("DoryConfig", dict(_SIZES, tie_word_embeddings=True, recurrent_kv_cache_mode="last_loop",
                                  layer_types=["sliding_attention", "full_attention"] * 2 + ["full_attention"]),
               ("DoryForCausalLM",), infer=False),
    ),
)
