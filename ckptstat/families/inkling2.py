"""Inkling 2 text (transformers modeling_inkling2.py Inkling2TextModel / Inkling2ForCausalLM, model_type inkling2_text):
Inkling's layers (families/inkling.py: sliding "hybrid_sliding" and full "hybrid" attention at their own heads and
head_dim, the relative-position bias, depthwise causal convs on k, v and on the attention's and MLP's outputs, the
cache of K/V and four float32 conv states) reworked:

* block attention residuals (Inkling2BlockAttentionResidual): every n_layers_per_attn_res_block-th layer's input joins
  the block states; each layer's attention input (1 query, 3 on a full layer: its q, k and v inputs, each normed apart),
  its MLP input and the final norm's input are an attention of learned queries over the RMS-normed block states and
  the current stream (two matmuls over h per query and state);
* queries and the relative states through per-head scaled L2 clips (q_proj.norm.scale, relative_position_bias.norm
  .scale), keys L2-clipped, values RMS-normed without weight; a sink logit per head from sink_proj; the output gated
  by sigmoid(o_proj.gate_proj(x)) before o_proj.linear;
* the full layers' k / v convs are dynamic: static taps [kernel, channels] plus per-token taps weight_proj (h -> kv heads
  x kernel), applied element-wise;
* every MLP a routed MoE (sigmoid router, num_experts_per_tok of n_routed_experts, no shared expert) with a softcapped
  SwiGLU; the LM head over unpadded_vocab_size rows, soft-capped.

Saved as the released checkpoints name it (conversion_mapping.py "inkling2_text", reverted by save_pretrained):
model.llm.{embed, embed_norm, layers.N.attn.wq_du ..., attn_res.{attn_queries.(N - 1), mlp_queries.N, output_query},
unembed}, the LM head padded to vocab_size rows in the file (Inkling2UnpadVocab keeps unpadded_vocab_size on load)."""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ..errors import NoAnalyticModel, UsageError
from . import inkling
from .framework import layout, walk_names
from .framework.base import FROM_CLASS, ArchSpec, Cfg, Family, Sample, Tensors
from .framework.layout import DecoderLayout, Paths
from .framework.layout_base import Module, Walk, walk_tensors
from .framework.ops import Builder, ew_cost

# the names as save_pretrained writes them (the released checkpoints'); Walk records with them
LAYOUT = DecoderLayout(ties=False, paths=Paths(body="model.llm", embed="embed", norm="norm", lm_head="unembed"))


@dataclass(frozen=True)
class Inkling2Variant(inkling.InklingVariant):
    block: int = 6            # n_layers_per_attn_res_block
    unpadded: int = 0         # unpadded_vocab_size: the LM head's rows in the model
    # Inkling 2 Loop (inkling2_loop_text): layers loop_start <= i < loop_end run `passes` times (loop_num_passes), the
    # passes after the first fed messages through gates of rank `gate_rank` (loop_gate_rank); 0: no loop
    loop_start: int = 0
    loop_end: int = 0
    passes: int = 1
    gate_rank: int = 0

    def looped(self, i: int) -> bool:
        return self.gate_rank > 0 and self.loop_start <= i < self.loop_end

    def runs(self, i: int) -> int:
        return self.passes if self.looped(i) else 1


def from_config(c: Cfg) -> ArchSpec:
    L = c.int("num_hidden_layers")
    types = c.get("layer_types", default=None)
    if types is None:   # Inkling2TextConfig.__post_init__: every 6th layer full
        types = ["hybrid" if (i + 1) % 6 == 0 else "hybrid_sliding" for i in range(L)]
    if not isinstance(types, list) or len(types) != L or any(t not in ("hybrid", "hybrid_sliding") for t in types):
        raise UsageError(f"{c.path}: config layer_types is not a list of {L} 'hybrid' / 'hybrid_sliding'")
    if c.get("scoring_func", default=FROM_CLASS) != "sigmoid":
        raise NoAnalyticModel(f"{c.path}: config scoring_func is not 'sigmoid': the inkling2 op template describes that one")
    sliding = tuple(i for i, t in enumerate(types) if t == "hybrid_sliding")
    V = c.int("vocab_size")
    loop = c.model_type == "inkling2_loop_text"
    if loop and c.get("loop_config", default=None) is not None:
        raise NoAnalyticModel(f"{c.path}: config loop_config: the inkling2 op template reads the loop_* keys only")
    block = c.int("n_layers_per_attn_res_block", default=FROM_CLASS)
    start, end = (c.int("loop_layer_index_start", default=FROM_CLASS), c.int("loop_layer_index_end", default=FROM_CLASS)) \
        if loop else (0, 0)
    if loop and (start % block or end % block or end < start):
        raise UsageError(f"{c.path}: config loop_layer_index_start / _end are not multiples of n_layers_per_attn_res_block")
    return ArchSpec(layers=L, hidden=c.int("hidden_size"), heads=c.int("num_attention_heads"),
                    kv_heads=c.int("num_key_value_heads", default=FROM_CLASS), head_dim=c.int("head_dim", default=FROM_CLASS),
                    intermediate=0, vocab=V, context=c.int("max_position_embeddings", default=0), activation="silu",
                    gated_mlp=True, norm="rmsnorm", qkv_bias=False, o_bias=False, mlp_bias=False, tied_embeddings=False,
                    sliding_window=c.int("sliding_window_size", default=FROM_CLASS) if sliding else None,
                    sliding_layers=sliding, experts=c.int("n_routed_experts", default=FROM_CLASS),
                    top_k=c.int("num_experts_per_tok", default=FROM_CLASS),
                    moe_intermediate=c.int("moe_intermediate_size", default=FROM_CLASS), logit_softcap=True,
                    variant=Inkling2Variant(swa_heads=c.int("swa_num_attention_heads", default=FROM_CLASS),
                                            swa_kv_heads=c.int("swa_num_key_value_heads", default=FROM_CLASS),
                                            swa_head_dim=c.int("swa_head_dim", default=FROM_CLASS),
                                            d_rel=c.int("d_rel", default=FROM_CLASS),
                                            rel_extent=c.int("rel_extent", default=FROM_CLASS),
                                            kernel=c.int("conv_kernel_size", default=FROM_CLASS), shared=0, log_scaling=True,
                                            block=block, unpadded=c.int("unpadded_vocab_size", default=FROM_CLASS),
                                            loop_start=start, loop_end=end,
                                            passes=c.int("loop_num_passes", default=FROM_CLASS) if loop else 1,
                                            gate_rank=c.int("loop_gate_rank", default=FROM_CLASS) if loop else 0),
                    **c.common)


def from_tensors(T: Tensors, common: dict[str, Any]) -> ArchSpec:
    raise NoAnalyticModel("Inkling 2 without config.json: its layer kinds, windows and blocks are config-only")


def _residual_macs(s: ArchSpec, b: int, n: int) -> int:
    """The block attention residuals' matmuls: per query, scores and context over the m states (the block states so
    far and the current stream), h each; attention inputs (1 query, 3 on a full layer) from layer 1 on, every MLP input
    (its layer's input joining the states first on a block boundary) and the final input. Inkling 2 Loop: the looped
    layers again each later pass, from the states before the loop, each after a message input (4 queries over the
    previous pass's blocks past the first and its output)."""
    v = s.variant_as(Inkling2Variant)
    N, loop = v.block, [i for i in range(s.layers) if v.looped(i)]

    def layer(i: int, states: int) -> tuple[int, int]:
        """(query-state pairs of layer i's residual inputs, the block states after it)."""
        pairs = ((1 if i in s.sliding_layers else 3) * (states + 1) if i else 0) + states + 1 + (i % N == 0)
        return pairs, states + (i % N == 0)

    total = states = 0
    for i in range(s.layers):
        if loop and i == loop[0]:
            before = states
        pairs, states = layer(i, states)
        total += pairs
        if loop and i == loop[-1]:
            for _ in range(v.passes - 1):   # from the states before the loop; the previous pass's blocks past the first
                previous, states = max(states - before - 1, 0), before
                for j in loop:
                    pairs, states = layer(j, states)
                    total += pairs + 4 * (previous + 1)
    total += states + 1
    return 2 * b * n * s.hidden * total


def walk(B: Builder) -> list[Module]:
    """The forward at B.s's sizes: writes its ops to B and returns the modules it met (as saved)."""
    s = B.s
    v = s.variant_as(Inkling2Variant)
    w = Walk(B, LAYOUT)
    h, L, E, k, F, n, tok = s.hidden, s.layers, s.experts, s.top_k, s.moe_intermediate, B.b * B.seq, w.tok
    every = tuple(range(L))
    w.record("embed", None, (("weight", (s.vocab, h)),), None)
    B.embedding("embed", "embedding", s.vocab, h, B.seq)
    w.norm("embed_norm", None, h, None, residual=False)
    for i in every:   # the block attention residuals' learned queries
        if i:
            w.record(f"attn_res.attn_queries.{i - 1}", None, (("", (h,) if i in s.sliding_layers else (3, h)),), None)
        w.record(f"attn_res.mlp_queries.{i}", None, (("", (h,)),), None)
    w.record("attn_res.output_query", None, (("", (h,)),), None)
    queries = sum(1 if i in s.sliding_layers else 3 for i in every[1:]) + L + 1
    B.add("block attention residuals (learned queries over the normed block states)", "attention", "encoder", 1,
          tok + (h,), tok + (h,), params=queries * h, macs=_residual_macs(s, B.b, B.seq), weights_per_call=queries * h,
          ew=n * h * queries * 4)
    at = "attn."

    def runs(ls: tuple[int, ...]) -> int:
        return sum(v.runs(i) for i in ls)

    def lin(sub: str, fin: int, fout: int, ls: tuple[int, ...]) -> None:   # run once a pass, held once
        w.record(sub, None, (("weight", (fout, fin)),), ls)
        B.linear(w.label(sub, ls), "encoder", tok, fin, fout, False, runs(ls), copies=len(ls))

    for sliding in (True, False):
        ls = tuple(i for i in every if (i in s.sliding_layers) == sliding)
        if not ls:
            continue
        a, g, d, extent = inkling.geometry(s, sliding)
        for norm in ("attn_norm",) if sliding else ("q_input_norm", "k_input_norm", "v_input_norm"):
            w.norm(norm, None, h, ls, residual=False)
        lin(at + "wq_du", h, a * d, ls)
        w.record(at + "q_l2_clip.scale", None, (("", (a, d)),), ls)
        for proj, conv in (("wk_dv", "k_sconv"), ("wv_dv", "v_sconv")):
            lin(at + proj, h, g * d, ls)
            if sliding:
                inkling.conv(w, at + conv, g * d, ls)
            else:   # static taps + per-token taps from weight_proj, applied element-wise
                w.record(f"{at}{conv}.static_w", None, (("", (v.kernel, g * d)),), ls)
                w.record(f"{at}{conv}.weight_proj", None, (("", (g * v.kernel, h)),), ls)
                B.linear(w.label(f"{at}{conv}.weight_proj", ls), "encoder", tok, h, g * v.kernel, False, runs(ls),
                         copies=len(ls))
                B.add(w.label(f"{at}{conv} (static + dynamic taps x windows)", ls), "activation", "encoder", runs(ls),
                      tok + (g * d,), tok + (g * d,), params=v.kernel * g * d * len(ls),
                      ew=n * g * d * (3 * v.kernel + 2), weights_per_call=v.kernel * g * d)
        B.add(w.label(f"{at[:-1]} q / k L2 clips, v norm", ls), "norm", "encoder", runs(ls), tok + ((a + 2 * g) * d,),
              tok + ((a + 2 * g) * d,), params=a * d * len(ls), ew=n * (a + 2 * g) * d * ew_cost("rmsnorm"),
              weights_per_call=a * d)
        lin(at + "wr_du", h, a * v.d_rel, ls)
        w.record(at + "rel_l2_clip.scale", None, (("", (a, v.d_rel)),), ls)
        w.record(at + "rel_logits_proj.proj", None, (("", (v.d_rel, extent)),), ls)
        B.add(w.label(f"{at}relative position bias (clipped states x proj, gathered by distance)", ls), "attention",
              "encoder", runs(ls), tok + (a * v.d_rel,), (B.b, a, B.seq, B.seq), params=(a + extent) * v.d_rel * len(ls),
              macs=n * a * v.d_rel * extent, ew=B.b * a * B.seq * B.seq + n * a * v.d_rel * 4,
              weights_per_call=(a + extent) * v.d_rel)
        lin(at + "attn_sink_proj", h, a, ls)
        B.attention(w.label(at[:-1], ls), "encoder", a, B.seq, B.seq, d, runs(ls), True, extra_ew=4,
                    window=s.sliding_window if sliding else None)
        lin(at + "gate_attn", h, a * d, ls)
        B.add(w.label(f"{at[:-1]} output x sigmoid(gate)", ls), "activation", "encoder", runs(ls), tok + (a * d,),
              tok + (a * d,), ew=n * a * d * (ew_cost("sigmoid") + 1))
        lin(at + "wo_ud", a * d, h, ls)
    if looped := tuple(i for i in every if v.looped(i)):
        _messages(w, looped)
    if v.gate_rank:   # the message input's queries, (loop layers, 4, h), saved as two halves
        nl = v.loop_end - v.loop_start
        for half in ("middle_cycle_cross_pass_queries", "middle_cycle_cross_pass_kv_queries"):
            w.record(half, None, (("", (2 * nl, h)),), None)
        B.add("message input queries (held; their matmuls with the block residuals')", "activation", "encoder", 0,
              (4 * nl, h), (4 * nl, h), params=4 * nl * h)
    inkling.conv(w, "attn_sconv", h, every)
    w.norm("mlp_norm", None, h, every, residual=False)
    R = runs(every)
    w.record("mlp.gate.weight", None, (("", (E, h)),), every)
    B.linear(w.label("mlp.gate (sigmoid router)", every), "encoder", tok, h, E, False, R, copies=L)
    rows = (n * k,)
    w.record("mlp.experts.w13_weight", None, (("", (E, 2 * F, h)),), every)
    B.linear(w.label("mlp.experts gate_up", every), "encoder", rows, h, 2 * F, False, R, copies=L * E, active_copies=L * k)
    B.activation(w.label("mlp.experts softcapped SwiGLU", every), "encoder", rows, F, "silu", R, gated=True)
    w.record("mlp.experts.w2_weight", None, (("", (E, h, F)),), every)
    B.linear(w.label("mlp.experts down", every), "encoder", rows, F, h, False, R, copies=L * E, active_copies=L * k)
    inkling.conv(w, "mlp_sconv", h, every)
    w.norm("norm", None, h, None, residual=False)
    if s.head == "lm":   # the file's unembed holds vocab_size rows, the model's head unpadded_vocab_size
        w.record("unembed", None, (("weight", (s.vocab, h)),), None)
        B.linear("lm_head (unembed, unpadded_vocab_size rows)", "cls", tok, h, v.unpadded, False)
        B.add("final logit soft-capping", "activation", "cls", 1, tok + (v.unpadded,), tok + (v.unpadded,),
              ew=n * v.unpadded * (ew_cost("tanh") + 2))
    return w.modules


def _messages(w: Walk, layers: tuple[int, ...]) -> None:
    """Inkling2LoopMessageGate (saved controllers.{attn, k, v, mlp}) on the looped layers, run in every pass after the
    first: the stream and its message RMS-normed and joined (2h), down_weight to the gate rank, forget_weight and
    gain_weight back to h (tanh each), (1 - forget) x stream + gain x message."""
    s, B = w.s, w.B
    v = s.variant_as(Inkling2Variant)
    h, r, calls, n = s.hidden, v.gate_rank, len(layers) * (v.passes - 1), B.b * B.seq
    for gate in ("attn", "k", "v", "mlp"):
        c = f"controllers.{gate}."
        for sub, shape in (("down_weight", (r, 2 * h)), ("forget_weight", (h, r)), ("gain_weight", (h, r))):
            w.record(c + sub, None, (("", shape),), layers)
        B.linear(w.label(c + "down_weight", layers), "encoder", w.tok, 2 * h, r, False, calls, copies=len(layers))
        B.linear(w.label(c + "forget_weight, gain_weight", layers), "encoder", w.tok, r, 2 * h, False, calls,
                 copies=len(layers))
        B.add(w.label(f"{c[:-1]} norms, tanh, gated sum", layers), "activation", "encoder", calls, w.tok + (2 * h,),
              w.tok + (h,), ew=n * h * (2 * ew_cost("rmsnorm") + 2 * ew_cost("tanh") + 4))


def build(B: Builder) -> None:
    walk(B)


expected_tensors = walk_tensors(walk, LAYOUT.paths.body)


_SIZES = dict(vocab_size=97, unpadded_vocab_size=90, hidden_size=16, num_hidden_layers=5, num_attention_heads=2,
              num_key_value_heads=1, head_dim=8, swa_num_attention_heads=4, swa_num_key_value_heads=2, swa_head_dim=4,
              sliding_window_size=4, d_rel=4, rel_extent=32, moe_intermediate_size=16, n_routed_experts=4,
              num_experts_per_tok=2, n_layers_per_attn_res_block=2, max_position_embeddings=64,
              layer_types=["hybrid_sliding", "hybrid", "hybrid_sliding", "hybrid_sliding", "hybrid"])

FAMILY = Family(
    name="inkling2",
    model_types=("inkling2_text", "inkling2_loop_text"),
    # the final block residual's query, as saved (attn_res.output_query, the walk's) and as the model names it (a
    # torch.save)
    signature=walk_names.signature(walk_names.walked(walk, **walk_names.LM, variant=Inkling2Variant(**asdict(inkling.NAMED))),
                                   "attn_res.output_query", tf1=False) + r"|(^|[./])final_input[./]query$",
    from_config=from_config, from_tensors=from_tensors, build=build, expected_tensors=expected_tensors,
    **{**layout.decoder_lm(LAYOUT), "kv_cache": inkling.kv_cache},
    gguf_architectures=(),   # llama.cpp has no Inkling 2 architecture
    samples=(
        Sample("Inkling2TextConfig", _SIZES, ("Inkling2TextModel", "Inkling2ForCausalLM"), device="cpu", infer=False),
        Sample("Inkling2LoopTextConfig", dict(_SIZES, num_hidden_layers=7, loop_layer_index_start=2, loop_layer_index_end=6,
                                              loop_num_passes=3, loop_gate_rank=3,
                                              layer_types=["hybrid_sliding", "hybrid"] * 3 + ["hybrid"]),
               ("Inkling2LoopTextModel", "Inkling2LoopForCausalLM"), device="cpu", infer=False),
    ),
)
