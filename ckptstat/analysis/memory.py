"""`ckptstat memory`: weights, KV cache, activations and training state, each line with its rule."""
from __future__ import annotations

from ..census.model import Model
from ..families.spec import check_seq

SCHEMA = "ckptstat.memory/1"
WHAT_IF = {"float32": 4, "bfloat16": 2, "float16": 2, "int8": 1, "int4": 0.5}


def report(m: Model, batch: int, seq: int, dec_seq: int | None = None) -> dict:
    s = m.spec
    check_seq(s, seq, dec_seq)
    b, n = batch, seq
    nd = n if dec_seq is None else dec_seq
    P = m.params
    ab = m.activation_bytes
    lines: list[dict] = []

    def line(group: str, item: str, nbytes: float, rule: str) -> None:
        lines.append({"group": group, "item": item, "bytes": int(round(nbytes)), "rule": rule})

    if m.param_bytes:
        for dt, nb in sorted(m.param_bytes.items(), key=lambda kv: -kv[1]):
            line("weights", f"as stored ({dt})", nb, "sum of numel x stored bytes over unique parameter tensors")
    else:
        line("weights", f"as configured ({s.dtype or 'float32, assumed'})", m.weight_bytes,
             f"predicted parameters x {m.bytes_per_param:g} B")
    for dt, nb in WHAT_IF.items():
        line("weights what-if", dt, P * nb, f"{P:,} parameters x {nb:g} B (no quantisation scales)")
    if m.predicted.get("active") is not None:
        line("weights what-if", f"active experts only ({s.top_k} of {s.experts}), as stored",
             m.predicted["active"] * m.bytes_per_param, "active parameters x stored bytes per parameter "
             "(all experts must still be resident for routing)")

    # KV cache: 2 (K and V) x layers x g x d x tokens x bytes.
    kv_w = s.kv_heads * s.head_dim
    if s.causal:
        per_tok = 2 * s.layers * kv_w * ab
        line("kv cache", f"b={b}, s={n}", per_tok * b * n, f"2 x L x g x d x s x b x {ab} B = {per_tok:,} B/token")
        if s.sliding_window and n > s.sliding_window:
            line("kv cache", f"rolling window {s.sliding_window}", per_tok * b * s.sliding_window,
                 "cache of a sliding-window kernel keeps only the last `sliding_window` tokens")
    elif s.family == "t5" and s.head != "encoder-only":
        per_tok = 2 * s.decoder_layers * kv_w * ab
        line("kv cache", f"decoder self-attention, b={b}, s_dec={nd}", per_tok * b * nd,
             f"2 x L_dec x a x d x s_dec x b x {ab} B")
        line("kv cache", f"cross-attention, b={b}, s_enc={n}", per_tok * b * n, f"2 x L_dec x a x d x s_enc x b x {ab} B")

    # Inference activations: one layer live at a time (eager attention materialises the scores).
    f_eff = s.intermediate * (3 if s.gated_mlp else 1) * (s.top_k or 1)
    qkv = (s.heads + 2 * s.kv_heads) * s.head_dim
    layer_peak = ab * (b * n * (2 * s.hidden + max(qkv, f_eff)) + b * s.heads * n * n)
    line("activations (inference)", f"peak per layer, b={b}, s={n}", layer_peak,
         f"{ab} B x (b*s*(2h + max(q+k+v width, f{' x3 gated' if s.gated_mlp else ''}"
         f"{' x top-k' if s.top_k else ''})) + b*a*s^2 eager scores); one layer live at a time")
    if s.head in ("lm", "mlm", "pretraining"):
        out_tok = nd if s.family == "t5" else n
        line("activations (inference)", "logits", ab * b * out_tok * s.vocab, f"b x s x V x {ab} B")

    # Training activations: Korthikanti et al. 2022 (Reducing Activation Recomputation), eq. 2,
    # 16-bit activations, no recomputation, no sequence/tensor parallelism, no flash attention.
    layers = s.layers * (s.inner_group if s.family == "albert" else 1) + s.decoder_layers
    per_layer = n * b * s.hidden * (34 + 5 * s.heads * n / s.hidden)
    line("activations (training)", f"{layers} layers, b={b}, s={n}", per_layer * layers,
         "Korthikanti et al. 2022: s*b*h*(34 + 5*a*s/h) B per layer (16-bit, GPT-style layer with f=4h, "
         "no recomputation, no flash attention)")

    # Mixed-precision Adam: ZeRO paper (Rajbhandari et al. 2020), section 3.1: 2 + 2 + (4 + 4 + 4) bytes.
    line("training state", "mixed-precision Adam", 16 * P,
         "ZeRO (Rajbhandari et al. 2020): 16 B/param = fp16 weights 2 + fp16 grads 2 + fp32 master weights, "
         "momentum, variance 12")
    line("training state", "total with activations", 16 * P + per_layer * layers,
         "Adam state + Korthikanti activations (no optimizer sharding, no offload)")
    return {
        "schema": SCHEMA,
        "path": m.path,
        "config": m.config_path,
        "architecture": {"family": s.family, "model_type": s.model_type, "head": s.head,
                         "architecture": s.architecture},
        "parameters": {"count": P, "source": "checkpoint" if m.checkpoint_params is not None else "config prediction",
                       "predicted": m.predicted["total"], "agree": m.agree, "active": m.predicted.get("active")},
        "batch": b, "seq": n, "dec_seq": nd if s.family == "t5" else None,
        "activation_bytes": ab,
        "lines": lines,
        "notes": list(m.notes),
    }
