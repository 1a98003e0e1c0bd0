"""The routed-MoE and latent-attention parts of the layout walk (layout.py): a router over experts with a shared
expert (Mixtral, Qwen-MoE, DeepSeek, gpt-oss) and DeepSeek's multi-head latent attention."""
from __future__ import annotations

from . import decoders
from .layout_base import Walk, joined
from .layout_parts import attn_gate, mlp, sinks
from .ops import ew_cost


def latent(w: Walk, layers: tuple[int, ...]) -> None:
    """DeepSeek's multi-head latent attention (modeling_deepseek_v3.py): queries through q_a_proj, its RMSNorm and
    q_b_proj (one q_proj without a query LoRA); keys and values from kv_a_proj_with_mqa (the latent and one shared
    rope key), the latent's RMSNorm and kv_b_proj (per head k_nope and v); rotary on the a query heads' and the
    shared key's rope dims; eager attention's scores over qk_nope + qk_rope dims, its context over v_head_dim."""
    s, p, B = w.s, w.p, w.B
    assert s.latent is not None, "a latent layout's spec gives its sizes (ArchSpec.latent)"
    h, a, d, rope, L = s.hidden, s.heads, s.head_dim, s.rope_dim, len(layers)
    ql, kvl, v = s.latent.q_lora_rank, s.latent.kv_lora_rank, s.latent.v_head_dim
    at = f"{p.attn}."
    if ql:
        w.linear(at + p.q_a, "attn_q_a", h, ql, s.qkv_bias, layers)
        w.norm(at + p.q_a_norm, "attn_q_a_norm", ql, layers, residual=False)
        if w.lay.q_gate:   # over [q_resid, q_compressed]: each head's query and its output gate
            w.linear(at + p.q_b, "attn_q_b", 2 * ql, a * (d + v), False, layers)
        else:
            w.linear(at + p.q_b, "attn_q_b", ql, a * d, False, layers)
    else:
        w.linear(at + p.q, "attn_q", h, a * d, False, layers)
    w.linear(at + p.kv_a, "attn_kv_a_mqa", h, kvl + rope, s.qkv_bias, layers)
    w.norm(at + p.kv_a_norm, "attn_kv_a_norm", kvl, layers, residual=False)
    if w.lay.k_rope_norm:   # Dots3Note: no llama.cpp name
        w.norm(at + p.k_rope_norm, None, rope, layers, residual=False)
    w.linear(at + p.kv_b, "attn_kv_b", kvl, a * (d - rope + v), False, layers)
    if w.lay.indexer and (own := tuple(i for i in layers if i not in s.latent.index_shared)):
        indexer(w, own)
    if w.lay.nope != "all":   # Kimi Linear's latent attention applies none (its rope key is still cached)
        decoders.rope_apply(B, w.label(f"{p.attn} rotary (q_pe, k_pe)", layers), a + 1, rope, L)
    B.causal_self_attention(f"{p.layers}[{{layers}}].{p.attn}", "encoder", a, d, layers=layers, v_dim=v)
    if w.lay.sinks:   # HY-V4
        sinks(w, layers)
    if w.lay.attn_gate != "none":   # HY-V4's gate_proj, v_head_dim per head; Ling 3's g_proj, one per head
        attn_gate(w, layers, v)
    if w.lay.q_gate:
        B.add(w.label(f"{p.attn} output x sigmoid(gate)", layers), "activation", "encoder", L, w.tok + (a * v,),
              w.tok + (a * v,), ew=B.b * B.seq * a * v * (ew_cost("sigmoid") + 1))
    w.linear(at + p.o, "attn_output", a * v, h, s.o_bias, layers)


def indexer(w: Walk, layers: tuple[int, ...]) -> None:
    """DeepSeek Sparse Attention's indexer (modeling_deepseek_v32.py DeepseekV32Indexer): H index heads of D over
    the query latent (wq_b), one key per token (wk, its LayerNorm), rotary on both; scores q . k over every cached key
    (a [s, H, D] x [D, t] matmul), ReLU, then weighted by weights_proj and summed over the heads ([s, 1, H] x [H, t]);
    the top index_topk keys of each query are what the attention keeps."""
    s, p, B = w.s, w.p, w.B
    assert s.latent is not None, "an indexed layout's spec gives its sizes (ArchSpec.latent)"
    H, D, ql, L = s.latent.index_heads, s.latent.index_head_dim, s.latent.q_lora_rank, len(layers)
    ix = f"{p.attn}.{p.indexer}."
    w.linear(ix + p.idx_q, "indexer.attn_q_b", ql, H * D, False, layers)
    w.linear(ix + p.idx_k, "indexer.attn_k", s.hidden, D, False, layers)
    w.norm(ix + p.idx_k_norm, "indexer.k_norm", D, layers, residual=False, kind="layernorm")
    decoders.rope_apply(B, w.label(f"{p.attn}.{p.indexer} rotary", layers), H + 1, s.rope_dim, L)
    w.linear(ix + p.idx_weights, "indexer.proj", s.hidden, H, False, layers)
    t = B.seq
    B.add(w.label(f"{p.attn}.{p.indexer} scores (q . k, ReLU, x weights, sum over heads, top-k)", layers), "attention",
          "encoder", L, (B.b, B.seq, H, D), (B.b, B.seq, t), macs=B.b * B.seq * H * t * (D + 1),
          ew=B.b * B.seq * H * t * 3)


def routed(w: Walk, layers: tuple[int, ...]) -> None:
    """A router over E gated experts of which each token visits k (Mixtral): k rows per token through each
    expert projection (transformers 5's grouped_mm and the eager loop alike), then the weighted combine.
    llama.cpp stacks each projection's experts into one 3-D blk.N.ffn_{gate,up,down}_exps [E, out, in]."""
    s, p, B = w.s, w.p, w.B
    h, f, E, k, L = s.hidden, s.moe_intermediate or s.intermediate, s.experts, s.top_k, len(layers)
    moe, rows = p.mlp, (B.b * B.seq * k,)
    topk = w.lay.router == "topk_softmax"
    w.linear(f"{moe}.{p.router}", "ffn_gate_inp", h, E, topk, layers, label=w.label(f"{moe}.{p.router} (router)", layers))
    if w.lay.router == "topk_sigmoid":
        B.add(w.label(f"{moe}.{p.router} top-k, scatter, sigmoid", layers), "activation", "encoder", L, (B.b, B.seq, E),
              (B.b, B.seq, E), ew=B.b * B.seq * E * (1 + ew_cost("sigmoid")))
    if w.lay.router_statics:   # TensorNameMap knows it only as the converter renames it (e_score_correction.bias)
        w.record(f"{moe}.{p.statics}", None, (("", (1, E)),), layers)
        B.add(w.label(f"{moe}.{p.statics} (+ scores)", layers), "activation", "encoder", L, (B.b, B.seq, E), (B.b, B.seq, E),
              params=E * L, ew=B.b * B.seq * E, weights_per_call=E)
    if w.lay.score_bias:
        w.record(f"{moe}.{p.score_bias}", "exp_probs_b", (("", (E,)),), layers)
        B.add(w.label(f"{moe}.{p.score_bias} (+ scores)", layers), "activation", "encoder", L, (B.b, B.seq, E),
              (B.b, B.seq, E), params=E * L, ew=B.b * B.seq * E, weights_per_call=E)
    if topk:
        B.add(w.label(f"{moe}.{p.router} top-k, softmax", layers), "activation", "encoder", L, (B.b, B.seq, E),
              (B.b, B.seq, k), ew=B.b * B.seq * (E + k * ew_cost("softmax")))
    x = f"{moe}.{p.experts}"
    if s.moe_latent:   # the experts run at the latent width, between two projections of every token (NemotronH)
        w.linear(f"{moe}.{p.latent_down}", "ffn_latent_down", h, s.moe_latent, s.mlp_bias, layers)
        h = s.moe_latent
    if w.lay.every_expert:
        every_expert(w, layers)
    elif w.lay.stacked_experts or w.lay.linear_experts != "none":
        # llama.cpp's converter splits fc1 / input_linear (ffn_gate_exps, ffn_up_exps): no name of its own; gguf's
        # TensorNameMap names a fused gate_up_proj held [E, 2f, h] ffn_gate_up_exps (Mistral 4's)
        out_in, x = w.lay.linear_experts != "none", joined(moe, p.experts)
        suffix = "" if w.lay.linear_experts == "parameters" else "weight"
        fused = "ffn_gate_up_exps" if p.stacked_in == "gate_up_proj" and out_in else None
        w.record(f"{x}.{p.stacked_in}", fused, ((suffix, (E, 2 * f, h) if out_in else (E, h, 2 * f)),), layers)
        w.record(f"{x}.{p.stacked_out}", "ffn_down_exps", ((suffix, (E, h, f) if out_in else (E, f, h)),), layers)
        B.linear(w.label(f"{x}[{E}].{p.stacked_in} (top-{k})", layers), "encoder", rows, h, 2 * f, False, L, L * E,
                 active_copies=L * k)
        B.activation(w.label(f"{x} act*up", layers), "encoder", rows, f, s.activation, L, gated=True)
        B.linear(w.label(f"{x}[{E}].{p.stacked_out} (top-{k})", layers), "encoder", rows, f, h, False, L, L * E,
                 active_copies=L * k)
    elif w.lay.flat_experts:       # one [E x f, h] parameter per projection (DBRX)
        for sub, exps, fin, fout in ((p.gate, "ffn_gate_exps", h, f), (p.up, "ffn_up_exps", h, f),
                                     (p.down, "ffn_down_exps", f, h)):
            w.record(f"{x}.{sub}", exps, (("", (E * f, h)),), layers)
            B.linear(w.label(f"{x}[{E}].{sub} (top-{k})", layers), "encoder", rows, fin, fout, False, L, L * E,
                     active_copies=L * k)
            if sub == p.up:
                B.activation(w.label(f"{x} act*{p.up}", layers), "encoder", rows, f, s.activation, L, gated=True)
    elif w.lay.fused_experts:      # llama.cpp's converter splits gate_up_proj: no name of its own
        for sub, gguf, shape in ((p.gate_up, None, (E, h, 2 * f)), (p.down, "ffn_down_exps", (E, f, h))):
            w.record(f"{x}.{sub}", gguf, (("", shape),), layers)
        if s.mlp_bias:
            w.record(f"{x}.{p.gate_up}_bias", None, (("", (E, 2 * f)),), layers)
            w.record(f"{x}.{p.down}_bias", None, (("", (E, h)),), layers)
        for sub, fin, fout in ((p.gate_up, h, 2 * f), (p.down, f, h)):
            B.linear(w.label(f"{x}[{E}].{sub} (top-{k})", layers), "encoder", rows, fin, fout, s.mlp_bias, L, L * E,
                     active_copies=L * k)
            if sub == p.gate_up:
                B.activation(w.label(f"{x} clamp, gate x sigmoid(1.702 gate) x (up + 1)", layers), "encoder", rows, f,
                             "clamped_swiglu", L, gated=True)
    else:   # NemotronH's plain experts (routed_mlp): up alone; Kimi's saved as w1, w3, w2 (Paths.expert_names)
        # unbiased whatever mlp_bias says (it biases the dense and shared MLPs only): transformers 5's stacked experts
        # classes hold no bias but gpt-oss's (fused_experts, above)
        gate, up, down = p.expert_names or (p.gate, p.up, p.down)
        gated = w.lay.routed_mlp != "plain"
        for sub, gguf, fin, fout in ((gate, "ffn_gate_exps", h, f), (up, "ffn_up_exps", h, f))[0 if gated else 1:]:
            w.linear(f"{x}.{{xid}}.{sub}", gguf, fin, fout, False, layers, rows,
                     w.label(f"{x}[{E}].{sub} (top-{k})", layers), experts=E)
        B.activation(w.label(f"{x} act" + (f"*{up}" if gated else ""), layers), "encoder", rows, f, s.activation, L,
                     gated=gated)
        w.linear(f"{x}.{{xid}}.{down}", "ffn_down_exps", f, h, False, layers, rows,
                 w.label(f"{x}[{E}].{down} (top-{k})", layers), experts=E)
    if not w.lay.every_expert:
        B.add(w.label(f"{moe}.combine (x routing weight)", layers), "activation", "encoder", L, rows + (h,),
              (B.b, B.seq, h), ew=B.b * B.seq * k * h * 2)
    if s.moe_latent:
        h = s.hidden
        w.linear(f"{moe}.{p.latent_up}", "ffn_latent_up", s.moe_latent, h, s.mlp_bias, layers)
    if w.lay.moe_bias:   # llama.cpp has no name for it
        expert_bias(w, moe, layers)
    if w.lay.shared == "none" or not s.shared_intermediate:
        return
    if w.lay.shared_beside:
        mlp(w, layers, w.lay.routed_mlp, s.shared_intermediate, "", "_shexp", base=p.shared)
    else:
        mlp(w, layers, w.lay.routed_mlp, s.shared_intermediate, p.shared + ".", "_shexp")
    tok = (B.b, B.seq, h)
    if w.lay.shared == "gated":
        w.linear(f"{moe}.{p.shared_gate}", "ffn_gate_inp_shexp", h, 1, False, layers)
        B.add(w.label(f"{moe} sigmoid(gate) x shared + routed", layers), "activation", "encoder", L, tok, tok,
              ew=B.b * B.seq * (ew_cost("silu") + 2 * h))
    elif w.lay.shared == "averaged":   # (routed + shared) / 2
        B.add(w.label(f"{moe} (shared + routed) / 2", layers), "activation", "encoder", L, tok, tok, ew=B.b * B.seq * h * 2)
    else:
        B.add(w.label(f"{moe} shared + routed", layers), "activation", "encoder", L, tok, tok, ew=B.b * B.seq * h)




def every_expert(w: Walk, layers: tuple[int, ...]) -> None:
    """Llama 4's experts (modeling_llama4.py Llama4TextMoe, Llama4TextExperts; DecoderLayout.every_expert): the input
    repeated E times, each copy times its expert's router score, every copy through its expert as two bmm's over the
    fused [E, h, 2f] gate_up_proj and [E, f, h] down_proj (E x b x s rows: FlopCounterMode counts them all), the E
    outputs summed. One token's active parameters are still its top-k experts'. llama.cpp's converter splits
    gate_up_proj into ffn_gate_exps and ffn_up_exps: no name of its own."""
    s, p, B = w.s, w.p, w.B
    h, f, E, k, L = s.hidden, s.moe_intermediate or s.intermediate, s.experts, s.top_k, len(layers)
    x, tok, rows = f"{p.mlp}.{p.experts}", (B.b, B.seq, h), (E * B.b * B.seq,)
    B.add(w.label(f"{x} input x router score (E copies)", layers), "activation", "encoder", L, tok, rows + (h,),
          ew=E * B.b * B.seq * h)
    for sub, gguf, shape in ((p.gate_up, None, (E, h, 2 * f)), (p.down, "ffn_down_exps", (E, f, h))):
        w.record(f"{x}.{sub}", gguf, (("", shape),), layers)
    B.linear(w.label(f"{x}[{E}].{p.gate_up} (every expert)", layers), "encoder", rows, h, 2 * f, False, L, L * E,
             active_copies=L * k)
    B.activation(w.label(f"{x} act*up", layers), "encoder", rows, f, s.activation, L, gated=True)
    B.linear(w.label(f"{x}[{E}].{p.down} (every expert)", layers), "encoder", rows, f, h, False, L, L * E,
             active_copies=L * k)
    B.add(w.label(f"{x} sum over the {E} experts", layers), "activation", "encoder", L, rows + (h,), tok,
          ew=E * B.b * B.seq * h)


def expert_bias(w: Walk, base: str, layers: tuple[int, ...]) -> None:
    """A [h] parameter {base}.{moe_bias} added to a routed block's combined output (JetMoE's MoE and MoA bias)."""
    B, h = w.B, w.s.hidden
    w.record(f"{base}.{w.p.moe_bias}", None, (("", (h,)),), layers)
    B.add(w.label(f"{base}.{w.p.moe_bias} (+ output)", layers), "activation", "encoder", len(layers), (B.b, B.seq, h),
          (B.b, B.seq, h), params=h * len(layers), ew=B.b * B.seq * h, weights_per_call=h)
