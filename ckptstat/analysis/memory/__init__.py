"""`ckptstat memory`: weights, KV cache, activations and training state, each line with its rule."""
from __future__ import annotations

from collections.abc import Callable

from ...census.model import Model, Weights
from ...families import get
from ...families.framework.spec import check_seq
from ...families.framework.spec import max_seq as position_limit
from .planner import (
    KV_BYTES,
    Plan,
    activation_bytes,
    activations,
    device_lines,
    kv_lines,
    quantised,
    split,
    stages,
)

SCHEMA = "ckptstat.memory/1"
WHAT_IF: dict[str, float] = {"float32": 4, "bfloat16": 2, "float16": 2, "int8": 1, "int4": 0.5}


def report(m: Model, batch: int, seq: int, dec_seq: int | None = None, plan: Plan | None = None) -> dict:
    """The reference lines (weights, what-ifs, KV cache, activations, Adam state: one device, no
    parallelism) and `fit`, the planner's per-device lines and verdict under `plan` (planner.py)."""
    s = m.spec
    family = get(s.family)
    check_seq(s, seq, dec_seq)
    plan = plan or Plan()
    plan.check(s)
    b, n = batch, seq
    nd = n if dec_seq is None else dec_seq
    P = m.params
    ab = activation_bytes(m, plan)
    lines: list[dict] = []

    def line(group: str, item: str, nbytes: float, rule: str) -> None:
        lines.append({"group": group, "item": item, "bytes": int(round(nbytes)), "rule": rule})

    if m.param_bytes:
        for dt, nb in sorted(m.param_bytes.items(), key=lambda kv: -kv[1]):
            line("weights", f"as stored ({dt})", nb, "sum of numel x stored bytes over unique parameter tensors")
    elif (q := (qs := quantised(m, Plan()))[0]) is not None:
        sp = split(m, Plan())
        line("weights", f"as the checkpoint stores them ({q.name})", sum(sp.bytes.values()), sp.dtype_rule)
    else:   # (a quantization_config whose method is not planned says so: quant.py's note)
        line("weights", f"as configured ({s.dtype or 'float32, assumed'})", m.weight_bytes,
             f"predicted parameters x {m.bytes_per_param:g} B" + (f"; {qs[1]}" if qs[1] else ""))
    for dt, per in WHAT_IF.items():
        kept = m.float32_kept.get(dt, 0)
        line("weights what-if", dt, m.bytes_in(dt, per) if per >= 2 else P * per,
             f"{P:,} parameters x {per:g} B (no quantisation scales)" + (f"; {kept:,} of them kept in float32 by the "
             "class (transformers' _keep_in_fp32_modules) x 4 B" if kept else ""))
    if m.predicted.get("active") is not None:
        line("weights what-if", f"active experts only ({s.top_k} of {s.experts}), as stored",
             m.predicted["active"] * m.bytes_per_param, "active parameters x stored bytes per parameter "
             "(all experts must still be resident for routing)")

    # KV cache: what the family's attention caches per generated token (none for an encoder).
    for item, nbytes, rule in kv_lines(m, b, n, nd, KV_BYTES[plan.kv_dtype] if plan.kv_dtype else ab):
        line("kv cache", item, nbytes, rule)

    # Activations: the planner's lines for one device, no parallelism (one place per rule): inference one layer (or,
    # image and audio models, one module) live plus the logits; training what the layers save for backward (text
    # decoders: what transformers' ops save, saved.py; else Korthikanti et al. 2022 or the op template), and the loss.
    for x in activations(m, Plan(), b, n, nd, ab, "all"):
        line("activations (inference)", x["item"], x["bytes"], x["rule"])
    train_act = 0
    for x in activations(m, Plan(mode="training", autocast=plan.autocast), b, n, nd, ab, "all"):
        line("activations (training)", x["item"], x["bytes"], x["rule"])
        train_act += x["bytes"]

    # Mixed-precision Adam: ZeRO paper (Rajbhandari et al. 2020), section 3.1: 2 + 2 + (4 + 4 + 4) bytes.
    line("training state", "mixed-precision Adam", 16 * P,
         "ZeRO (Rajbhandari et al. 2020): 16 B/param = fp16 weights 2 + fp16 grads 2 + fp32 master weights, "
         "momentum, variance 12")
    line("training state", "total with activations", 16 * P + train_act,
         "Adam state + the training activations above (no optimizer sharding, no offload)")
    return {
        "schema": SCHEMA,
        "path": m.path,
        "config": m.config_path,
        "architecture": {"family": s.family, "model_type": s.model_type, "head": s.head,
                         "architecture": s.architecture},
        "parameters": {"count": P, "source": "checkpoint" if m.checkpoint_params is not None else "config prediction",
                       "predicted": m.predicted["total"], "agree": m.agree, "outside": m.outside_params,
                       "active": m.predicted.get("active")},
        "batch": b, "seq": n, "dec_seq": nd if family.seq2seq(s) else None,
        "activation_bytes": ab,
        "lines": lines,
        "plan": plan.settings(),
        "fit": fit(m, plan, b, n, dec_seq if family.seq2seq(s) else None),
        "notes": list(m.notes),
        "computed_by": m.oracle.statement if m.oracle else None,
    }


SEARCH_CAP = 1 << 40   # the searches stop doubling here (a length nothing depends on, in practice)


def largest(fits: Callable[[int], bool], limit: int | None) -> tuple[int, str]:
    """The largest x >= 1 with fits(x) for a monotone predicate (true up to a point, then false), by
    doubling then bisection over exact byte totals; 0 when even 1 does not fit. (value, what bounded it)."""
    if not fits(1):
        return 0, "even 1 does not fit"
    if limit is not None and fits(limit):
        return limit, "the model's limit"
    hi = limit
    lo = 1
    if hi is None:
        while fits(lo * 2):
            lo *= 2
            if lo >= SEARCH_CAP:
                return lo, f"search cap {SEARCH_CAP}"
        hi = lo * 2
    while hi - lo > 1:   # fits(lo), not fits(hi)
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo, "memory"


def seq_limit(m: Model) -> tuple[bool, int | None]:
    """(does --seq change anything, the longest input the model accepts)."""
    family = get(m.spec.family)
    if family.main_input == "pixel_values":
        return False, None
    if family.main_input == "input_features":
        return True, 2 * m.spec.source_positions
    return True, position_limit(m.spec)


def fit(m: Model, plan: Plan, b: int, n: int, dec_seq: int | None) -> dict:
    """Per-device lines on the fullest device, the verdict against plan.capacity, and the largest --seq
    (at this batch) and --batch (at this length) that fit."""
    sp = split(m, plan)
    ab = activation_bytes(m, plan)

    def evaluate(bb: int, nn: int) -> tuple[int, str, list[dict], list[dict]]:
        nd = nn if dec_seq is None else dec_seq
        worst: tuple[int, str, list[dict], list[dict]] | None = None
        for stage in stages(plan):
            dev, host = device_lines(m, plan, sp, bb, nn, nd, ab, stage)
            total = sum(x["bytes"] for x in dev)
            if worst is None or total > worst[0]:
                worst = (total, stage, dev, host)
        assert worst is not None
        return worst

    total, stage, dev, host = evaluate(b, n)
    cap = plan.capacity
    out: dict = {
        "fits": None if cap is None else total <= cap,
        "per_device_bytes": total,
        "capacity_bytes": cap,
        "headroom_bytes": None if cap is None else cap - total,
        "max_seq": None, "max_seq_bound": None, "max_batch": None, "max_batch_bound": None,
        "device": plan.device,
        "stage": stage,
        "lines": dev,
        "host_lines": host,
        "host_bytes": sum(x["bytes"] for x in host),
        "replicated": {k: int(round(v)) for k, v in sp.replicated.items()} if plan.tp > 1 else {},
        "sharded": SHARDED if plan.tp > 1 else [],
        "trained_context": m.spec.context or None,
    }
    if cap is not None:
        applies, limit = seq_limit(m)
        if applies:
            out["max_seq"], out["max_seq_bound"] = largest(lambda x: evaluate(b, x)[0] <= cap, limit)
        else:
            out["max_seq_bound"] = "--seq does not apply (image input)"
        out["max_batch"], out["max_batch_bound"] = largest(lambda x: evaluate(x, n)[0] <= cap, None)
    return out


# What --tp splits (Megatron-LM's column/row-parallel linears, vocab-parallel embedding and head)
SHARDED = ["linear weights of every block (column- and row-parallel; not the replicated ones named)", "column-parallel biases",
           "word embedding and LM head (vocab-parallel)", "KV cache heads (g / tp, replicated when tp > g)",
           "attention and MLP activations (text decoders: what transformers' ops save but the norms' tensors, their "
           "outputs and dropout masks; elsewhere Korthikanti's 24/tp + 5as/(h tp) of the 34 + 5as/h)"]


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
