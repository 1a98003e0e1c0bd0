"""The parts of a layout's walk (layout.walk) that are more than a line or two: the dense MLP every layout meets,
attention sinks and output gates, Doge's residual scales, Mllama's cross-attention layers, and the LM and task
heads over the final hidden states. Each records its modules on the Walk and writes its ops to the Builder."""
from __future__ import annotations

import math

from ...errors import NoAnalyticModel
from . import decoder_heads, decoders, summary
from .base import Tensors
from .layout_base import LEARNED_ACTIVATIONS, MLP, DecoderLayout, Module, Walk
from .ops import ew_cost
from .recorder import Recorder


def sinks(w: Walk, layers: tuple[int, ...]) -> None:
    """DecoderLayout.sinks: a learned logit per head, one more softmax column in each row of its scores (cat,
    max-subtract, softmax), dropped after (gpt-oss; HY-V4's latent attention)."""
    B, p, a = w.B, w.p, w.s.heads
    w.record(f"{p.attn}.{p.sinks}", "attn_sinks", (("", (a,)),), layers)
    B.add(w.label(f"{p.attn}.{p.sinks} (a logit per head, one softmax column)", layers), "attention", "encoder",
          len(layers), (a,), (B.b, a, B.seq, 1), params=a * len(layers), ew=B.b * a * B.seq * (ew_cost("softmax") + 3),
          weights_per_call=a)


def attn_gate(w: Walk, layers: tuple[int, ...], d: int) -> None:
    """DecoderLayout.attn_gate: act({attn_gate}(x)), per element of each head's `d` outputs or per head, times the
    attention's output before o_proj."""
    B, p, s, L = w.B, w.p, w.s, len(layers)
    a, kind = s.heads, w.lay.attn_gate
    w.linear(f"{p.attn}.{p.attn_gate}", "attn_gate", s.hidden, a if kind == "head" else a * d, False, layers)
    if kind == "biased":   # llama.cpp has no name for it
        w.record(f"{p.attn}.{p.attn_gate_bias}", None, (("", (a,)),), layers)
        B.add(w.label(f"{p.attn}.{p.attn_gate_bias} (+ gate, per head)", layers), "activation", "encoder", L,
              w.tok + (a * d,), w.tok + (a * d,), params=a * L, ew=B.b * B.seq * a * d, weights_per_call=a)
    B.add(w.label(f"{p.attn} output x act({p.attn_gate})", layers), "activation", "encoder", L, w.tok + (a * d,),
          w.tok + (a * d,), ew=B.b * B.seq * a * d * (ew_cost("sigmoid") + 1))


def mlp(w: Walk, layers: tuple[int, ...], kind: MLP, f: int, sub: str = "", gguf: str = "", base: str | None = None) -> None:
    """A dense MLP at {base}.{sub} (base: {mlp} unless given; sub: "" or the shared expert's "shared_expert."),
    llama.cpp's ffn_*{gguf}."""
    s, p, B = w.s, w.p, w.B
    at = p.mlp if base is None else base   # "": the MLP's linears sit at the layer (OPT's fc1, fc2)
    h, pre = s.hidden, f"{at}.{sub}" if at else sub
    if kind == "plain":
        w.linear(pre + p.up, "ffn_up" + gguf, h, f, s.mlp_bias, layers)
    elif w.lay.fused_gate_up:      # [gate; up] in one weight, kept fused by llama.cpp as ffn_up
        w.linear(pre + p.gate_up, "ffn_up" + gguf, h, 2 * f, s.mlp_bias, layers)
    else:
        w.linear(pre + p.gate, "ffn_gate" + gguf, h, f, s.mlp_bias, layers)
        w.linear(pre + p.up, "ffn_up" + gguf, h, f, s.mlp_bias, layers)
    gated = kind != "plain"
    learned = LEARNED_ACTIVATIONS.get(s.activation, ())
    if learned:
        w.record(pre + p.act, None, learned, layers)
    B.activation(w.label(f"{pre.rstrip('.')} act" + ("*up" if gated else ""), layers), "encoder", w.tok, f, s.activation,
                 len(layers), gated=gated, params=len(layers) * sum(n for _, (n,) in learned))
    if w.lay.sub_norms:
        w.norm(pre + p.ffn_sub, "ffn_sub_norm" + gguf, f, layers, residual=False)
    w.linear(pre + p.down, "ffn_down" + gguf, f, h, s.mlp_bias if w.lay.down_bias is None else w.lay.down_bias, layers)


def cross_layers(w: Walk, cross: tuple[int, ...]) -> None:
    """Mllama's cross-attention layers (ArchSpec.cross_layers; modeling_mllama.py MllamaCrossAttentionDecoderLayer):
    their parameters (q/k/v/o and per-head q/k norms under {cross_attn}, the tanh gates, the two norms and a gated MLP).
    MllamaTextModel skips them without cross-attention states: one op that holds them and runs nothing. With
    ArchSpec.cross_states (images): the input norm, q_proj over the tokens, k_proj / v_proj over the image states, the
    per-head q and k norms, Q K^T and P V of every token over every state, o_proj, the attention's tanh gate, the post
    norm, the gated MLP over the tokens, its tanh gate."""
    s, p, B = w.s, w.p, w.B
    h, a, g, d, f, C, S = s.hidden, s.heads, s.kv_heads, s.head_dim, s.intermediate, len(cross), s.cross_states
    x = f"{p.cross_attn}."
    parts = [(x + p.q, (a * d, h)), (x + p.k, (g * d, h)), (x + p.v, (g * d, h)), (x + p.o, (h, a * d)),
             (x + p.q_norm, (d,)), (x + p.k_norm, (d,)), (p.attn_in, (h,)), (p.mlp_in, (h,)),
             (f"{p.mlp}.{p.gate}", (f, h)), (f"{p.mlp}.{p.up}", (f, h)), (f"{p.mlp}.{p.down}", (h, f))]
    for sub, shape in parts:
        w.record(sub, None, (("weight", shape),), cross)
    for sub in (p.cross_attn_gate, p.cross_mlp_gate):
        w.record(sub, None, (("", (1,)),), cross)
    if not S:
        per = sum(math.prod(shape) for _, shape in parts) + 2
        B.add(f"{p.layers}[{C}] cross-attention layers (skipped: no image)", "activation", "encoder", C, w.tok + (h,),
              w.tok + (h,), params=per * C)
        return
    # the ops alone, on the Builder: the modules are recorded above (mlp() and Walk.linear would record them twice)
    label, states = (lambda sub: w.label(sub, cross)), (B.b, S)
    B.norm(label(p.attn_in), "encoder", w.tok, h, C, kind="rmsnorm")
    B.linear(label(x + p.q), "encoder", w.tok, h, a * d, False, C)
    B.norm(label(x + p.q_norm), "encoder", w.tok + (a,), d, C, residual=False, kind="rmsnorm")
    for sub in (p.k, p.v):
        B.linear(label(f"{x}{sub} (over {S} image states)"), "encoder", states, h, g * d, False, C)
    B.norm(label(x + p.k_norm), "encoder", states + (g,), d, C, residual=False, kind="rmsnorm")
    B.attention(label(p.cross_attn), "encoder", a, B.seq, S, d, C, causal=False)
    B.linear(label(x + p.o), "encoder", w.tok, a * d, h, False, C)
    for sub, then in ((p.cross_attn_gate, p.mlp_in), (p.cross_mlp_gate, None)):
        B.add(label(f"{sub}.tanh() x output (+residual)"), "activation", "encoder", C, w.tok + (h,), w.tok + (h,),
              params=C, ew=B.b * B.seq * h * 2, weights_per_call=1)
        if then:
            B.norm(label(then), "encoder", w.tok, h, C, kind="rmsnorm")
            B.linear(label(f"{p.mlp}.{p.gate}"), "encoder", w.tok, h, f, False, C)
            B.linear(label(f"{p.mlp}.{p.up}"), "encoder", w.tok, h, f, False, C)
            B.activation(label(f"{p.mlp} act*up"), "encoder", w.tok, f, s.activation, C, gated=True)
            B.linear(label(f"{p.mlp}.{p.down}"), "encoder", w.tok, f, h, False, C)


def residual_scale(w: Walk, sub: str, layers: tuple[int, ...]) -> None:
    """A learned [h] vector times the residual before the add (DecoderLayout.residual_scales); llama.cpp has no name.
    Its op's label names the stream, not the parameter: a label with "residual" is an add (tests/test_residual_adds.py)."""
    B, h = w.B, w.s.hidden
    w.record(sub, None, (("", (h,)),), layers)
    B.add(w.label(f"stream x its learned scale, before the {'attention' if sub == w.p.attn_residual else 'MLP'}'s add",
                  layers), "activation", "encoder", len(layers), w.tok + (h,), w.tok + (h,),
          params=h * len(layers), ew=B.b * B.seq * h, weights_per_call=h)



def output_heads(w: Walk, E: int) -> None:
    """The LM head (a causal model's on head "lm" and "lm+mc", an encoder's on "mlm": it predicts the masked tokens;
    with its transform, its biases, logit soft-capping) and a task head (DecoderLayout.task_heads), over the final
    hidden states, E wide (DecoderLayout.embed_proj)."""
    s, p, B, lay = w.s, w.p, w.B, w.lay
    h = s.hidden
    # an encoder's LM head predicts the masked tokens; a *DoubleHeadsModel's runs beside its multiple-choice head
    if s.head in (("lm", decoder_heads.MC) if lay.causal else ("mlm",)):
        bias = lay.lm_head_bias == "always" or (lay.lm_head_bias == "mlp" and s.mlp_bias)
        if lay.lm_transform != "none":   # llama.cpp has no names for them
            act = "gelu" if lay.lm_transform == "gelu" else s.activation
            w.modules.append(Module(p.lm_dense, None, (("weight", (h, h)),) + ((("bias", (h,)),) if lay.lm_dense_bias else ()),
                                    top=True))
            B.linear(p.lm_dense, "cls", w.tok, h, h, lay.lm_dense_bias)
            B.activation(f"{p.lm_dense} act ({act})", "cls", w.tok, h, act)
            norm_bias = lay.norm == "layernorm"
            w.modules.append(Module(p.lm_norm, None, (("weight", (h,)),) + ((("bias", (h,)),) if norm_bias else ()), top=True))
            B.norm(p.lm_norm, "cls", w.tok, h, residual=False, kind="rmsnorm" if lay.norm == "rmsnorm" else "layernorm",
                   bias=norm_bias)
        w.modules.append(Module(p.lm_head, lay.gguf("output"), (("weight", (s.vocab, E)),) + ((("bias", (s.vocab,)),) if bias
                                                                                          else ()), top=True))
        decoders.lm_head(B, p.lm_head, p.embed, bias, head=s.head, width=E)
        if p.lm_bias:   # tied with the embeddings, the decoder's bias too (saved, not counted twice); else its own, unused
            w.modules.append(Module(p.lm_bias, None, (("", (s.vocab,)),), top=True))
            if not s.tied_embeddings:
                B.add(f"{p.lm_bias} (untied from the decoder's bias: held, unused)", "activation", "cls", 1, (s.vocab,),
                      (s.vocab,), params=s.vocab)
        if s.logit_softcap:
            B.add("final logit soft-capping (tanh(x / cap) x cap)", "activation", "cls", 1, w.tok + (s.vocab,),
                  w.tok + (s.vocab,), ew=B.b * B.seq * s.vocab * (ew_cost("tanh") + 2))
    if s.head == decoder_heads.MC and s.head in lay.task_heads:   # one summary per sequence (framework/summary.py)
        if not isinstance(s.variant, summary.SequenceSummary):   # a guessed head: decoder_heads.double_heads
            raise NoAnalyticModel(f"the {s.family} multiple-choice head: config summary_type is not one of "
                                  f"{', '.join(summary.MC_KINDS)}, which its op template describes")
        r = Recorder(B)
        summary.walk(r, s.variant, None, summary.MC_SUMMARY)
        w.modules.extend(r.modules)
    elif s.head in lay.task_heads:   # over every token's hidden state (decoder_heads.py)
        name, params = decoder_heads.shapes(s, E, p.tokcls, p.seqcls)
        w.modules.append(Module(name, None, params, top=True))
        decoder_heads.build(B, E, p.tokcls, p.seqcls)


def task_labels(lay: DecoderLayout, T: Tensors) -> int:
    """The classes of a layout's task head read from its rows (decoder_heads.labels) without config.json; 2, the
    config default, where the layout has no task heads."""
    return decoder_heads.labels(T) if lay.task_heads else 2


def body_prefix(lay: DecoderLayout, head: str) -> str:
    """The prefix of the body's names in the files of `head`: the base model's own (Paths.base), a QA model's
    base_model_prefix where the layout names one (Paths.qa_body), else the *ForCausalLM's body."""
    p = lay.paths
    return p.base if head == "base" else (head == "qa" and p.qa_body) or p.body
