"""`ckptstat flops`: the per-module FLOPs/MACs table for given batch and sequence lengths.

Primary figure: matmul FLOPs = 2 x MACs, what torch.utils.flop_counter.FlopCounterMode counts.
Element-wise FLOPs (bias adds, norms, softmax, activations, residuals) are a separate estimate.
Training = 3 x forward (backward costs twice the forward's matmuls).
"""
from __future__ import annotations

from typing import Any

from ..census.model import Model
from ..families import get
from ..families.graph import EW_COST, build
from ..families.spec import check_seq

SCHEMA = "ckptstat.flops/1"
CONVENTIONS = {
    "flops": "FLOPs = 2 x MACs, matmuls only (torch FlopCounterMode, DeepSpeed profiler, calflops, Megatron, "
             "Kaplan/Chinchilla)",
    "macs": "MACs (one multiply-add each), printed by thop, ptflops and fvcore under the name 'FLOPs'",
    "bertstat": "legacy Bertstat MAdd = unique parameters x tokens: counts embedding tables as MACs, charges the "
                "pooler per token, has no s^2 attention term (not a measurement; shown for comparison only)",
}


def spec_dict(m: Model) -> dict:
    s = m.spec
    return {k: v for k, v in s.__dict__.items() if k != "assumptions"}


def _windowed_pairs(s: int, w: int) -> int:
    """(query, key) pairs a causal sliding-window kernel computes: query i sees keys (i-w, i]."""
    return sum(min(i + 1, w) for i in range(s)) if s <= 1 << 20 else w * s


def run(m: Model, batch: int, seq: int, dec_seq: int | None = None, causal_halving: bool = False) -> dict:
    ops = build(m.spec, batch, seq, dec_seq, m.bytes_per_param, m.activation_bytes, causal_halving)
    rows: list[dict[str, Any]] = []
    for op in ops:
        rows.append({"module": op.module, "kind": op.kind, "bucket": op.bucket, "calls": op.calls,
                     "in_shape": list(op.in_shape), "out_shape": list(op.out_shape), "params": op.params,
                     "macs": op.macs * op.calls, "flops": 2 * op.macs * op.calls,
                     "elementwise_flops": op.ew * op.calls, "bytes_read": op.read * op.calls,
                     "bytes_written": op.written * op.calls})
    tot = lambda k: sum(r[k] for r in rows)  # noqa: E731
    tokens = batch * seq
    fwd = tot("flops")
    attn = sum(r["flops"] for r in rows if r["kind"] == "attention")
    out: dict[str, Any] = {
        "seq": seq, "dec_seq": (seq if dec_seq is None else dec_seq) if get(m.spec.family).encoder_decoder else None,
        "tokens": tokens, "modules": rows,
        "totals": {
            "macs": tot("macs"), "flops": fwd, "flops_per_token": fwd / tokens,
            "attention_flops": attn, "training_flops": 3 * fwd,
            "elementwise_flops": tot("elementwise_flops"), "training_elementwise_flops": 3 * tot("elementwise_flops"),
            "bytes_read": tot("bytes_read"), "bytes_written": tot("bytes_written"),
            "bertstat_madd": m.params * tokens,
        },
        "notes": [],
    }
    w = m.spec.sliding_window
    if w and seq > w:
        d, a = m.spec.head_dim, m.spec.heads
        win = 2 * 2 * batch * a * d * _windowed_pairs(seq, w) * m.spec.layers
        out["notes"].append(f"sliding window {w} < seq {seq}: eager attention (and FlopCounterMode) computes the full "
                            f"s x s scores and masks them ({attn:,} attention FLOPs); a windowed kernel would need "
                            f"{win:,}")
        out["totals"]["windowed_attention_flops"] = win
    return out


def report(m: Model, batch: int, seqs: list[int], dec_seq: int | None = None, causal_halving: bool = False,
           convention: str = "flops") -> dict:
    s = m.spec
    for q in seqs:
        check_seq(s, q, dec_seq)
    return {
        "schema": SCHEMA,
        "path": m.path,
        "config": m.config_path,
        "architecture": spec_dict(m),
        "parameters": {"predicted": m.predicted["total"], "checkpoint": m.checkpoint_params, "agree": m.agree,
                       "predicted_buckets": m.predicted["buckets"], "active": m.predicted.get("active")},
        "batch": batch,
        "causal_halving": causal_halving,
        "convention": {"name": convention, "rule": CONVENTIONS[convention]},
        "counting": {
            "flops": "matmul FLOPs = 2 x MACs; equal to torch.utils.flop_counter.FlopCounterMode on the eager "
                     "model (mm/addmm/bmm; bias adds, softmax, norms, activations, embeddings count 0)",
            "attention": "two bmm's per layer (QK^T and PV), b*a*s_q*s_k*d MACs each"
                         + ("; causal ones halved to s(s+1)/2 pairs" if causal_halving else "; causal masks not halved"),
            "training": "3 x forward",
            "elementwise": "estimate, FLOPs per element: " + ", ".join(f"{k} {v}" for k, v in EW_COST.items()),
            "bytes": f"weights at {m.bytes_per_param:g} B/param (stored dtype) + activations at {m.activation_bytes} "
                     "B/element, each module read/written once (no cache reuse)",
            "head": f"{s.architecture or s.head}: " + _head_rule(m),
        },
        "runs": [run(m, batch, q, dec_seq, causal_halving) for q in seqs],
        "notes": list(m.notes),
    }


def _head_rule(m: Model) -> str:
    s = m.spec
    return {
        "base": "base model" + (" with pooler" if s.pooler else ", no pooler") + ", no LM head",
        "mlm": "MLM head (transform + decoder tied to the word embeddings), no pooler",
        "lm": "LM head counted (2*tokens*h*V even when tied)",
        "pretraining": "MLM head + sentence head" + (" + pooler" if s.pooler else ""),
        "seqcls": "sequence-classification head on the first token",
        "tokcls": "token-classification head", "qa": "span (QA) head", "encoder-only": "encoder stack only",
    }.get(s.head, s.head)
