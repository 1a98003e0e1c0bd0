"""`ckptstat flops`: the per-module FLOPs/MACs table for given batch and sequence lengths.

Primary figure: matmul FLOPs = 2 x MACs, what torch.utils.flop_counter.FlopCounterMode counts.
Element-wise FLOPs (bias adds, norms, softmax, activations, residuals) are a separate estimate.
Training = 3 x forward (backward costs twice the forward's matmuls).
"""
from __future__ import annotations

from dataclasses import asdict, is_dataclass
from typing import Any

from ..census.model import Model
from ..errors import UsageError
from ..families import get
from ..families.framework.base import CHOICE
from ..families.framework.graph import EW_COST, build, predict_params
from ..families.framework.ops import causal_pairs
from ..families.framework.spec import check_seq, from_config
from ..families.images import MODELLED, ImagePath, reading
from ..families.images import image_path as images_path

SCHEMA = "ckptstat.flops/1"
CONVENTIONS = {
    "flops": "FLOPs = 2 x MACs, matmuls only (torch FlopCounterMode, DeepSpeed profiler, calflops, Megatron, "
             "Kaplan/Chinchilla)",
    "macs": "MACs (one multiply-add each), printed by thop, ptflops and fvcore under the name 'FLOPs'",
    "bertstat": "legacy Bertstat MAdd = unique parameters x tokens: counts embedding tables as MACs, charges the "
                "pooler per token, has no s^2 attention term (not a measurement; shown for comparison only)",
}

# What --causal-halving counts (ops.causal_pairs, ops.window_groups): the same rule for every family
HALVED = ("--causal-halving: causal self-attention counts only the (query, key) pairs its mask keeps, query i "
          "seeing min(i + 1, w) keys: w = sliding_window on the sliding layers (sliding_layers, or every layer "
          "when only sliding_window is set), w = s on full-attention layers (s(s+1)/2 pairs); the scores' "
          "element-wise ops count over the same pairs; cross- and bidirectional attention stay s_q x s_k")
NOT_HALVED = ("every score of the s_q x s_k square, causal masks and sliding windows included, as eager attention "
              "computes and masks them (FlopCounterMode counts the same); --causal-halving counts only the unmasked pairs")


def spec_dict(m: Model) -> dict:
    s = m.spec
    return {k: asdict(v) if is_dataclass(v) and not isinstance(v, type) else v for k, v in s.__dict__.items()
            if k != "assumptions"}


def _layer_list(layers: list[int]) -> str:
    """0, 1, 2, 5 -> "0-2, 5"."""
    spans: list[list[int]] = []
    for i in layers:
        if spans and i == spans[-1][1] + 1:
            spans[-1][1] = i
        else:
            spans.append([i, i])
    return ", ".join(f"{a}-{b}" if b > a else str(a) for a, b in spans)


def _windowed(m: Model, batch: int, seq: int, attn: int, halve: bool) -> tuple[int, str, list[int]] | None:
    """(attention FLOPs a sliding-window kernel would need, the note, the sliding layers), or None when no layer's
    window is shorter than seq. Only the sliding layers (ArchSpec.sliding_layers; every layer when that is empty,
    as for Mistral) attend the causal window (ops.causal_pairs: query i sees keys (i-w, i]); the other layers count
    as attention_flops counts them (s x s, or s(s+1)/2 with causal halving). An estimate: eager and SDPA attention
    in transformers window a layer by masking (create_sliding_window_causal_mask), so FlopCounterMode sees the full
    scores. A family whose kernel attends more than the window (Family.windowed_kernel: DeepSeek-V4's compressed
    entries) is estimated by its template's causal halving, the pairs its masks keep. With causal halving
    attention_flops already counts each layer's window (ops.window_groups): no figure."""
    s, w = m.spec, m.spec.sliding_window
    if not w or seq <= w:
        return None
    sliding = list(s.sliding_layers) or list(range(s.layers))
    full_pairs = causal_pairs(seq) if halve else seq * seq
    per_pair = 2 * 2 * batch * s.heads * s.head_dim        # two bmm's (QK^T, PV), 2 FLOPs per MAC
    win = per_pair * (len(sliding) * causal_pairs(seq, w, s.chunked_attention) + (s.layers - len(sliding)) * full_pairs)
    estimate = "sliding layers the causal window's pairs, the others as counted"
    if kernel := get(s.family).windowed_kernel:   # the kernel attends past the window: what causal halving counts
        ops = build(s, batch, seq, None, m.bytes_per_param, m.activation_bytes, True)
        win, estimate = sum(2 * op.macs * op.calls for op in ops if op.kind == "attention"), kernel
    if win >= attn:     # nothing to add: the count is already windowed (--causal-halving)
        return None
    which = (f"all {s.layers} layers" if len(sliding) == s.layers else
             f"{len(sliding)} of {s.layers} layers ({_layer_list(sliding)}; the others attend all s tokens)")
    kind = "attention chunk" if s.chunked_attention else "sliding window"
    note = (f"{kind} {w} < seq {seq} on {which}, as the config's layer_types (or sliding_window, "
            f"max_window_layers; GPT-Neo's attention_layers) give them: eager attention (and FlopCounterMode) computes "
            f"every score and masks "
            f"those outside the window ({attn:,} attention FLOPs as counted here); a windowed kernel would need about {win:,} "
            f"(estimate: {estimate})")
    return win, note, sliding


def run(m: Model, batch: int, seq: int, dec_seq: int | None = None, causal_halving: bool = False,
        images: ImagePath | None = None, count: int = 0) -> dict:
    """images, count: a vision-language wrapper's image path (families/images/) and the images a sequence holds: the
    tower and the projector run on each, and the language model reads seq text tokens plus each image's tokens (Mllama:
    its cross-attention layers read the images' states)."""
    if m.oracle:   # no template: what the oracle measured (analysis/meta.py)
        return m.oracle.flops_run(batch, seq, m.spec.image_size)
    text = seq
    if images is not None:
        seq += count * images.tokens
    ops = build(reading(m.spec, images, count), batch, seq, dec_seq, m.bytes_per_param, m.activation_bytes,
                causal_halving)
    rows: list[dict[str, Any]] = image_rows(m, images, batch * count) if images is not None else []
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
        "seq": seq, "dec_seq": (seq if dec_seq is None else dec_seq) if get(m.spec.family).seq2seq(m.spec) else None,
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
    if images is not None:
        vision = [r["flops"] for r in rows if r["bucket"] == "vision"]
        out["images"] = {"per_sequence": count, "side": images.side, "tokens_each": images.tokens, "text_tokens": text,
                         "flops": sum(vision), "rule": images.rule} | ({"states_each": images.cross} if images.cross else {})
    out["notes"] += m.spec.seq_notes(seq)   # a waveform encoder's --seq (ArchSpec.seq_unit)
    win = _windowed(m, batch, seq, attn, causal_halving)
    if win is not None:
        out["notes"].append(win[1])
        out["totals"]["windowed_attention_flops"] = win[0]
        out["sliding_layers"] = win[2]
    return out


def image_rows(m: Model, path: ImagePath, images: int) -> list[dict[str, Any]]:
    """The rows of `images` images through a wrapper's image path (bucket "vision"): a TOWERS tower as its family's
    template counts it (under transformers' `vision_tower.`), then the path's matmuls."""
    rows: list[dict[str, Any]] = []
    if path.tower is not None:
        spec = from_config(path.tower, "vision_config")
        tower = Model(spec, m.path, None, predict_params(spec), None)
        rows = [{**r, "module": f"vision_tower.{r['module']}", "bucket": "vision"}
                for r in run(tower, images * path.crops, 1)["modules"]]
    b, ab = m.bytes_per_param, m.activation_bytes
    for p in path.matmuls:
        params = (p.d_in * p.d_out + p.bias * p.d_out) * p.weight
        out, macs = images * p.rows * p.d_out, images * p.rows * p.d_in * p.d_out
        rows.append({"module": p.module, "kind": "linear" if p.weight else "attention", "bucket": "vision",
                     "calls": p.calls, "in_shape": [images, p.rows, p.d_in], "out_shape": [images, p.rows, p.d_out],
                     "params": params, "macs": macs * p.calls, "flops": 2 * macs * p.calls,
                     "elementwise_flops": out * p.calls if p.bias else 0,
                     "bytes_read": (int(params * b) + images * p.rows * p.d_in * ab) * p.calls,
                     "bytes_written": out * ab * p.calls})
    return rows


def wrapper_images(m: Model, images: int, side: int | None = None, batch: int = 1) -> ImagePath | None:
    """--images N (and --image-size, for a tower that reads any size; the batch's images go through the tower in one
    forward): the wrapper's image path, None for N = 0; a usage error for a model whose image path is not modelled."""
    if not 0 <= images <= 1 << 20:
        raise UsageError(f"--images must be from 0 to {1 << 20:,}, got {str(images)[:40]}")
    if not images:
        return None
    if side is not None and side <= 0:
        raise UsageError(f"--image-size must be positive, got {side}")
    path = images_path(m.image_config, side, images, batch) if m.image_config is not None else None
    if path is None:
        raise UsageError(f"--images: no image path modelled for {m.spec.architecture or m.spec.model_type}; it is for "
                         f"{MODELLED}")
    return path


def report(m: Model, batch: int, seqs: list[int], dec_seq: int | None = None, causal_halving: bool = False,
           convention: str = "flops", images: ImagePath | None = None, count: int = 0) -> dict:
    s = m.spec
    added = count * images.tokens if images is not None else 0
    for q in seqs:
        check_seq(s, q + added, dec_seq)
    if m.oracle and causal_halving:
        raise UsageError(f"--causal-halving needs an op template; {m.oracle.statement}, which counts every score")
    return {
        "schema": SCHEMA,
        "path": m.path,
        "config": m.config_path,
        "architecture": spec_dict(m),
        "parameters": {"predicted": m.predicted["total"], "checkpoint": m.checkpoint_params, "agree": m.agree,
                       "outside": m.outside_params, "predicted_buckets": m.predicted["buckets"],
                       "active": m.predicted.get("active")},
        "batch": batch,
        "causal_halving": causal_halving,
        "convention": {"name": convention, "rule": CONVENTIONS[convention]},
        "counting": {
            "flops": "matmul FLOPs = 2 x MACs; equal to torch.utils.flop_counter.FlopCounterMode on the eager "
                     "model (mm/addmm/bmm; bias adds, softmax, norms, activations, embeddings count 0)",
            "attention": "two bmm's per layer (QK^T and PV), b*a*s_q*s_k*d MACs each; "
                         + (HALVED if causal_halving else NOT_HALVED),
            "training": "3 x forward",
            "elementwise": "estimate, FLOPs per element: " + ", ".join(f"{k} {v}" for k, v in EW_COST.items()),
            "bytes": f"weights at {m.bytes_per_param:g} B/param (stored dtype) + activations at {m.activation_bytes} "
                     "B/element, each module read/written once (no cache reuse)",
            "head": f"{s.architecture or s.head}: " + _head_rule(m),
        },
        "runs": [run(m, batch, q, dec_seq, causal_halving, images, count) for q in seqs],
        "notes": list(m.notes),
        "computed_by": m.oracle.statement if m.oracle else None,
    }


def _head_rule(m: Model) -> str:
    s = m.spec
    return {
        "base": "base model" + (" with pooler" if s.pooler else ", no pooler") + ", no LM head",
        "mlm": "MLM head (transform + decoder tied to the word embeddings), no pooler",
        "lm": "LM head counted (2*tokens*h*V even when tied)",
        # (a speech encoder's: wav2vec2's quantizer and projections, families/wav2vec2.py)
        "pretraining": "MLM head + sentence head" + (" + pooler" if s.pooler else "") if s.seq_unit == "tokens"
        else "pretraining head (the quantizer and the two projections)",
        "seqcls": "sequence-classification head on one vector a sequence" + (
            " (the mean over the frames)" if s.seq_unit == "samples" else ""),
        "tokcls": "token-classification head", "qa": "span (QA) head", "encoder-only": "encoder stack only",
        CHOICE: "multiple-choice head, one logit a sequence: batch counts batch x num_choices sequences",
        "ctc": "CTC head on every frame", "framecls": "classifier on every frame",
        "xvector": "x-vector head (TDNN layers, mean and std over the frames)",
    }.get(s.head, s.head)
