"""`ckptstat memory`: weights, KV cache, activations and training state, each line with its rule."""
from __future__ import annotations

from ..census.model import Model, Weights
from ..families import get
from ..families.spec import check_seq

SCHEMA = "ckptstat.memory/1"
WHAT_IF: dict[str, float] = {"float32": 4, "bfloat16": 2, "float16": 2, "int8": 1, "int4": 0.5}


def report(m: Model, batch: int, seq: int, dec_seq: int | None = None) -> dict:
    s = m.spec
    family = get(s.family)
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
    for dt, per in WHAT_IF.items():
        line("weights what-if", dt, P * per, f"{P:,} parameters x {per:g} B (no quantisation scales)")
    if m.predicted.get("active") is not None:
        line("weights what-if", f"active experts only ({s.top_k} of {s.experts}), as stored",
             m.predicted["active"] * m.bytes_per_param, "active parameters x stored bytes per parameter "
             "(all experts must still be resident for routing)")

    # KV cache: what the family's attention caches per generated token (none for an encoder).
    for item, nbytes, rule in family.kv_cache(s, b, n, nd, ab) if family.kv_cache else ():
        line("kv cache", item, nbytes, rule)

    # Inference activations: one layer live at a time (eager attention materialises the scores).
    f_eff = s.intermediate * (3 if s.gated_mlp else 1) * (s.top_k or 1)
    qkv = (s.heads + 2 * s.kv_heads) * s.head_dim
    layer_peak = ab * (b * n * (2 * s.hidden + max(qkv, f_eff)) + b * s.heads * n * n)
    line("activations (inference)", f"peak per layer, b={b}, s={n}", layer_peak,
         f"{ab} B x (b*s*(2h + max(q+k+v width, f{' x3 gated' if s.gated_mlp else ''}"
         f"{' x top-k' if s.top_k else ''})) + b*a*s^2 eager scores); one layer live at a time")
    if s.head in ("lm", "mlm", "pretraining"):
        out_tok = nd if family.encoder_decoder else n
        line("activations (inference)", "logits", ab * b * out_tok * s.vocab, f"b x s x V x {ab} B")

    # Training activations: Korthikanti et al. 2022 (Reducing Activation Recomputation), eq. 2,
    # 16-bit activations, no recomputation, no sequence/tensor parallelism, no flash attention.
    layers = s.layers * s.inner_group + s.decoder_layers   # layers run (ALBERT runs each shared layer inner_group times)
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
        "batch": b, "seq": n, "dec_seq": nd if family.encoder_decoder else None,
        "activation_bytes": ab,
        "lines": lines,
        "notes": list(m.notes),
    }


# The lines that need the architecture (layers, heads, widths), named when there is none.
NEEDS_ARCHITECTURE = ("kv cache (layers, key/value heads, head dim)",
                      "activations, inference (hidden size, heads, MLP width, vocabulary)",
                      "activations, training (layers, hidden size, heads)")
# Optimizer state per parameter, fp32 slots: (name, bytes per parameter, rule).
OPTIMIZERS = (("Adam / AdamW", 8, "fp32 momentum + variance: 8 B/param"),
              ("SGD with momentum", 4, "fp32 momentum buffer: 4 B/param"),
              ("SGD (no momentum)", 0, "no state"),
              ("mixed-precision Adam (ZeRO)", 12, "ZeRO (Rajbhandari et al. 2020): fp32 master weights, momentum, "
                                                  "variance: 12 B/param (fp16 weights and grads apart)"))


def weights_report(w: Weights, batch: int, seq: int) -> dict:
    """`memory` for a checkpoint with no architecture ckptstat can model: what the tensors alone give
    (weights by stored dtype, what-if dtypes, gradients, optimizer state by optimizer), and which lines
    need an architecture (NEEDS_ARCHITECTURE), with the reason."""
    P = w.params
    lines: list[dict] = []

    def line(group: str, item: str, nbytes: float, rule: str) -> None:
        lines.append({"group": group, "item": item, "bytes": int(round(nbytes)), "rule": rule})

    for dt, nb in sorted(w.param_bytes.items(), key=lambda kv: -kv[1]):
        line("weights", f"as stored ({dt})", nb, "sum of numel x stored bytes over unique parameter tensors")
    for dt, per in WHAT_IF.items():
        line("weights what-if", dt, P * per, f"{P:,} parameters x {per:g} B (no quantisation scales)")
    stored = sum(w.param_bytes.values())
    line("gradients", "in the stored dtypes", stored, "one gradient per parameter, in its weight's dtype")
    line("gradients", "float32", 4 * P, f"{P:,} parameters x 4 B")
    for name, per, rule in OPTIMIZERS:
        line("optimizer state", name, per * P, rule)
    return {
        "schema": SCHEMA,
        "path": w.path,
        "config": w.config_path,
        "architecture": {"family": "unknown", "model_type": None, "head": None, "architecture": None},
        "parameters": {"count": P, "source": "checkpoint", "predicted": None, "agree": None, "active": None},
        "batch": batch, "seq": seq, "dec_seq": None,
        "activation_bytes": None,
        "lines": lines,
        "needs_architecture": {"lines": list(NEEDS_ARCHITECTURE), "reason": w.reason},
        "notes": [],
    }
