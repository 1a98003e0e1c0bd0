"""`ckptstat diff A B`: tensor by tensor, what changed between two checkpoints (names, shapes, dtypes,
values), summarised per bucket and layer, plus where their parameter counts part, module by module.

Values are streamed: both tensors of a pair are read chunk by chunk in step (Checkpoint.iter_chunks),
each tensor once, compared in float64; memory is bounded by the chunk size, not by the tensors."""
from __future__ import annotations

import hashlib
import math
import os
import re
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from ..census import aliases, logical, placements
from ..census.quant.mlx import is_mlx_file
from ..census.ties import find_ties
from ..core import Checkpoint
from ..core.dtypes import can_decode
from ..core.tensor import DEFAULT_CHUNK_BYTES
from ..errors import UsageError
from ..families.framework.infer import canonical_name, tf_spelled
from ..naming import strip_prefixes
from ..naming.layout_ties import out_in_shape
from . import dequantized, diff_experts
from .conversion import (
    MAX_EXPERTS,
    MMPROJ_BUCKETS,
    WRAPPED_LM,
    RoundingCheck,
    Transform,
    column_blocks,
    converts,
    generated,
    gguf_converter,
    gguf_rules,
    transform_for,
    whole_blocks,
)
from .conversion_mla import RULE as MLA_RULE
from .conversion_mla import joined as mla_joined
from .conversion_mlx import mlx_side
from .conversion_mlx import undone as mlx_undone
from .conversion_mlx import view as mlx_view

DIFF_SCHEMA = "ckptstat.diff/4"
COMPARED_NAMES = ("unique parameters per module, base-model prefixes ignored; names and counts compared, "
                  "not dtypes nor values")
COMPARED_VALUES = "every tensor: names (wrapper prefixes stripped), shapes, dtypes and values (float64, streamed)"
STATUSES = ("added", "removed", "shape", "dtype", "values", "converted", "equal", "tied", "dropped", "generated")
# statuses that are no difference ("unread": --names-only; "converted": another dtype, the values rounded to it;
# "dropped": an HF tensor llama.cpp's converter leaves out of that architecture's GGUF file on purpose; "generated": a
# GGUF tensor it computes from config.json, holding the values the HF side's config gives)
UNCHANGED = ("equal", "converted", "tied", "unread", "dropped", "generated")
_EXTRA_WRAPPER = re.compile(r"^(model_state_dict|state_dict|module|_orig_mod|model)\.")
# a multimodal wrapper's text model as transformers 4 and mlx_lm nest it, keyed as transformers 5 does
# (model.language_model.*, lm_head at the top): the Qwen3-VL releases against mlx_lm's conversion, a transformers 4
# save of LLaVA against a transformers 5 one
_NESTED_LM = ((re.compile(r"^language_model\.model\."), "language_model."),
              (re.compile(r"^language_model\.lm_head\."), "lm_head."))
Rename = Callable[[str], str]
DEQUANTIZED_MAP = ("quantised weights read as the values their library dequantises them to (MLX, compressed-tensors, "
                   "block-scaled FP8, bitsandbytes 4-bit, quanto qint8/qfloat8, torchao float8, GPTQ, AWQ, gpt-oss "
                   "MXFP4, modelopt NVFP4/FP8, ComfyUI FP8, Gemma int8/int4/int2, Keras int8/int4: docs/quantized.md)")
TF_MAP = "TF -> PyTorch names (transformers' spelling, as modeling_tf_pytorch_utils converts them)"


# ------------------------------------------------------------------------------------------ name rules
def parse_rules(text: str, source: str = "rules") -> list[tuple[re.Pattern[str], str]]:
    """`regex -> replacement` per line (`#` comments and blank lines ignored), re.sub syntax (\\1)."""
    rules = []
    for i, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        pattern, arrow, repl = line.partition("->")
        if not arrow or not pattern.strip():
            raise UsageError(f"{source}:{i}: expected `regex -> replacement`, got {line!r}")
        try:
            rules.append((re.compile(pattern.strip()), repl.strip()))
        except re.error as e:
            raise UsageError(f"{source}:{i}: bad regex {pattern.strip()!r}: {e}") from None
    return rules


def load_rules(path: str) -> list[tuple[re.Pattern[str], str]]:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read(1 << 20)
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"{path}: cannot read the --map rules: {e.strerror if isinstance(e, OSError) else e}") from None
    return parse_rules(text, path)


def natural_key(name: str) -> tuple:
    """Numbers sort as numbers: layers.2 before layers.10."""
    # (a run of more than 4300 digits is past int()'s limit: it sorts after every number, by its text; isdecimal,
    # not isdigit, which holds for "²" that int() refuses)
    return tuple(((0, int(p), "") if len(p) <= 4000 else (0, math.inf, p)) if p.isdecimal() else (1, 0, p)
                 for p in re.split(r"(\d+)", name) if p)


def _key(name: str, rules: list[tuple[re.Pattern[str], str]], rename: Rename | None = None) -> tuple[str, str]:
    """(the name after the --map rules and the built-in rename, and without its wrapper and base-model prefixes).
    The rules first: they are written against the names as stored (as `summary` and a row's `a_name` show them)."""
    for pattern, repl in rules:
        name = pattern.sub(repl, name)
    if rename is not None:
        name = rename(name)
    key = strip_prefixes(name, base_models=True)
    while (m := _EXTRA_WRAPPER.match(key)) is not None:
        key = strip_prefixes(key[m.end():], base_models=True)
    for pattern, repl in _NESTED_LM:
        key = pattern.sub(repl, key)
    return name, key


def align(ckpt: Checkpoint, rules: list[tuple[re.Pattern[str], str]],
           rename: Rename | None = None) -> tuple[dict[str, str], list[str]]:
    """key -> the checkpoint's name, keys being names after --map rules and wrapper/base-model prefixes
    stripped; and the prefixes stripped. A key two names would share keeps the names whole. Once per
    checkpoint and rules (a GGUF diff asks for the other side's keys before the tensors are paired)."""
    return ckpt.derived(("align", tuple(rules), rename), lambda c: _aligned_names(c, rules, rename))


def _aligned_names(ckpt: Checkpoint, rules: list[tuple[re.Pattern[str], str]],
                   rename: Rename | None) -> tuple[dict[str, str], list[str]]:
    keys: dict[str, list[str]] = {}
    stripped: set[str] = set()
    for t in ckpt:
        name, key = _key(t.name, rules, rename)
        if key != name and name.endswith(key):
            stripped.add(name[: len(name) - len(key)])
        keys.setdefault(key, []).append(t.name)
    out: dict[str, str] = {}
    for key, names in keys.items():
        if len(names) == 1:
            out[key] = names[0]
        else:
            out.update({n: n for n in names})
    return out, sorted(stripped)


def _unstacked(ckpt: Checkpoint, rules: list[tuple[re.Pattern[str], str]], wanted: Callable[[str], bool]) -> Checkpoint:
    """A GGUF checkpoint whose stacked experts (llama.cpp's blk.N.ffn_{gate,up,down}_exps, [experts, ...]) read
    as one tensor per expert, `blk.N.ffn_gate_exps.weight[E]`: slice E of the stack at its own byte offset,
    which gguf_rules maps to the HF file's `...experts.E....` so each is compared on its own. Only a stack a
    rule maps and whose first slice the other side holds (`wanted`, given the slice's aligned key), whose
    slices are whole blocks of its type at a known offset."""
    from dataclasses import replace

    tensors: dict[str, Any] = {}
    for name, t in ckpt.tensors.items():
        n = t.shape[0] if len(t.shape) >= 2 and 0 < t.shape[0] <= MAX_EXPERTS else 0
        first = f"{name}[0]"
        if (not n or t.offset is None or t.stride is not None or t.nbytes % n or (t.numel // n) % (t.dt.block or 1)
                or not any(rx.match(first) for rx, _ in rules) or not wanted(_key(first, rules)[1])):
            tensors[name] = t
            continue
        size = t.nbytes // n
        for e in range(n):
            tensors[f"{name}[{e}]"] = replace(t, name=f"{name}[{e}]", shape=t.shape[1:], offset=t.offset + e * size,
                                              nbytes=size)
    return ckpt if len(tensors) == len(ckpt.tensors) else replace(ckpt, tensors=tensors)


def tf_rename(name: str) -> str:
    """A TF variable's name in transformers' PyTorch spelling (families.framework.infer.canonical_name:
    google-research `bert/encoder/layer_0/attention/self/query/kernel`, HF TF
    `tf_bert_for_masked_lm/bert/encoder/layer_._0/.../kernel:0` -> `bert.encoder.layer.0...weight`);
    names it does not know keep their normalised spelling."""
    return canonical_name(name)


def _transposed(ckpt: Checkpoint, name: str, chunk_bytes: int) -> Iterator[np.ndarray]:
    """The C-order values of a kernel in torch's layout: a 2-D [in, out] (TF, Keras, Flax Dense) as [out, in],
    a 4-D [h, w, in, out] (Flax Conv, "hwio") as [out, in, h, w]. A block of the last axis at a time: one pass
    over the tensor's chunks per block, memory bounded by the block (chunk_bytes of float64) and one chunk."""
    shape = ckpt.tensors[name].shape
    rows, cols = math.prod(shape[:-1]), shape[-1]
    per_block = max(1, chunk_bytes // max(1, rows * 8))
    for block in column_blocks(lambda: ckpt.iter_chunks(name, chunk_bytes), rows, cols, per_block):
        out = block.T if len(shape) == 2 else np.transpose(block.reshape(*shape[:-1], block.shape[1]), (3, 2, 0, 1))
        yield np.ascontiguousarray(out).reshape(-1)


def _squeezed(shape: tuple[int, ...]) -> tuple[int, ...]:
    """The shape without its size-1 dimensions: `[1, n]` and `[n]` hold the same values in the same order
    (HF TF GPT-2 stores Conv1D biases `[1, n]`, torch `[n]`), compared as they are."""
    return tuple(d for d in shape if d != 1)


def _transposes(ta: Any, tb: Any) -> str | None:
    """"a" or "b": which side is a kernel stored in its writer's layout (a 2-D [in, out], a 4-D Flax Conv
    [h, w, in, out]: TensorInfo.extra["layout"]) facing the other's torch layout, the same weight; else None."""
    la, lb = ta.extra.get("layout"), tb.extra.get("layout")
    if len(ta.shape) != len(tb.shape) or la == lb or not {la, lb} & {"in_out", "hwio"}:
        return None
    side, other = (ta, tb) if la in ("in_out", "hwio") else (tb, ta)
    if out_in_shape(side.shape, side.extra["layout"]) != tuple(other.shape):
        return None
    return "a" if side is ta else "b"


# ------------------------------------------------------------------------------------------ values
def aligned(*streams: Iterator[np.ndarray]) -> Iterator[tuple[np.ndarray, ...]]:
    """Flat streams of the same length re-cut into pieces of equal length (chunk sizes differ when the dtypes
    do): at most one chunk of each stream held at a time. Two sides here; a run's steps in analysis/trend/."""
    held: list[np.ndarray | None] = [np.empty(0) for _ in streams]
    while True:
        for i, s in enumerate(streams):
            c = held[i]
            if c is not None and not len(c):
                held[i] = next(s, None)
        if any(c is None for c in held):
            return
        n = min(len(c) for c in held if c is not None)
        yield tuple(c[:n] for c in held if c is not None)
        held = [c[n:] if c is not None else None for c in held]


def _compare(a: Checkpoint, na: str, b: Checkpoint, nb: str, atol: float, rtol: float, chunk_bytes: int,
             transposed: str | None = None, transform: tuple[str, Transform] | None = None) -> dict:
    """Hashes, closeness and metrics of two same-shape tensors (one read transposed: `transposed`; one put
    through a converter's transform: `transform`, (side, Transform)), streamed in step; where the dtypes
    differ and ckptstat knows the narrower one's rounding, whether every element is within it."""
    ha, hb = hashlib.sha256(), hashlib.sha256()
    max_abs = dd = aa = bb = ab = 0.0
    nonfinite = 0
    close = True
    xs = _transposed(a, na, chunk_bytes) if transposed == "a" else a.iter_chunks(na, chunk_bytes)
    ys = _transposed(b, nb, chunk_bytes) if transposed == "b" else b.iter_chunks(nb, chunk_bytes)
    slack = 0.0   # the replay's own relative error (Transform.rtol), allowed on top of the tolerance and the bound
    if transform is not None:   # the HF side, opened afresh for each pass the transform makes
        slack = transform[1].rtol
        rtol += slack
        if transform[0] == "a":
            xs = transform[1].apply(lambda: a.iter_chunks(na, chunk_bytes))
        else:
            ys = transform[1].apply(lambda: b.iter_chunks(nb, chunk_bytes))
    check = RoundingCheck(a.tensors[na], b.tensors[nb], slack)   # whether B is A rounded, or A B rounded
    for x, y in whole_blocks(((x, y) for x, y in aligned(xs, ys)), check.block):
        ha.update(np.ascontiguousarray(x).data)   # the buffer itself, no copy
        hb.update(np.ascontiguousarray(y).data)
        with np.errstate(invalid="ignore", over="ignore"):   # (a signalling NaN widened, too)
            if np.iscomplexobj(x) or np.iscomplexobj(y):
                xf, yf = x.astype(np.complex128), y.astype(np.complex128)
                d = np.abs(xf - yf)
                aa += float(np.sum(np.abs(xf) ** 2))
                bb += float(np.sum(np.abs(yf) ** 2))
                ab += float(np.real(np.sum(xf * np.conj(yf))))
            else:
                xf, yf = x.astype(np.float64), y.astype(np.float64)
                d = np.abs(xf - yf)
                aa += float(np.dot(xf, xf))
                bb += float(np.dot(yf, yf))
                ab += float(np.dot(xf, yf))
        if d.size and np.isfinite(d).all():   # the common case: no NaN or inf on either side, one pass each
            chunk_max = float(np.max(d))
            max_abs = max(max_abs, chunk_max)
            dd += float(np.dot(d, d))   # d = abs(a - b) is real, complex inputs too
            if close:
                close = chunk_max <= atol if rtol == 0 else bool(np.all(d <= atol + rtol * np.abs(yf)))
            check.feed(xf, yf, d)
        elif d.size:
            with np.errstate(invalid="ignore", over="ignore"):
                nan_a, nan_b = np.isnan(xf), np.isnan(yf)
                same = (xf == yf) | (nan_a & nan_b)    # inf facing the same inf, NaN facing NaN: no difference
                # NaN or inf facing another value: a change, out of the metrics (two finite values whose difference
                # is beyond float64's max, 1e308 and -1e308, are no such pair: max_abs inf)
                bad = ~same & ~(np.isfinite(xf) & np.isfinite(yf))
                nonfinite += int(np.count_nonzero(bad))
                dm = np.where(same | bad, 0.0, d)
                max_abs = max(max_abs, float(np.max(dm)))
                dd += float(np.dot(dm, dm))
                # (the tolerance of a NaN or inf is NaN: those pairs are judged by `same` and `bad` alone)
                close = close and not bad.any() and bool(np.all(same | bad | (dm <= atol + rtol * np.abs(yf))))
                # a NaN or inf kept as it is (torch's .to(dtype) keeps them) is faithful; one facing another value
                # (a finite value past the narrower dtype's range cast to inf too) is not
                check.feed(xf, yf, dm, failed=bool(bad.any()))
    finite = all(np.isfinite(v) for v in (aa, bb, ab, dd))
    rel = float(np.sqrt(dd) / np.sqrt(aa)) if aa > 0 and finite else None
    cos = float(ab / (np.sqrt(aa) * np.sqrt(bb))) if aa > 0 and bb > 0 and finite else None   # (aa * bb overflows)
    return {"identical": ha.digest() == hb.digest(), "close": close, "max_abs": max_abs, "rel_l2": rel, "cosine": cos,
            "nonfinite_mismatch": nonfinite, "rounded": check.row()}


def _converter_transform(a: Checkpoint, b: Checkpoint, key: str, shape: tuple[int, ...],
                         rules: list[tuple[re.Pattern[str], str]]) -> tuple[str, Transform] | None:
    """(the HF side, the transform) llama.cpp's converter applied to the tensor `key` on its way into the GGUF side."""
    gguf, side = (a, "b") if a.format == "gguf" else (b, "a")
    for rx, kind in rules:
        if rx.search(key):
            t = transform_for(kind, gguf, shape)
            return (side, t) if t is not None else None
    return None


def _values(a: Checkpoint, b: Checkpoint, names_only: bool, rules: tuple[list, list], atol: float, rtol: float,
            chunk_bytes: int, progress: Any = None, renames: tuple[Rename | None, Rename | None] = (None, None),
            strict: bool = False) -> tuple[list[dict], dict]:
    ka, pa = align(a, rules[0], renames[0])
    kb, pb = align(b, rules[1], renames[1])
    same_file = _same_file(a, b)
    place_a, place_b = placements(a), placements(b)
    alias_a, alias_b = aliases(a), aliases(b)
    gguf = a if a.format == "gguf" else b if b.format == "gguf" else None
    transforms, dropped = gguf_converter(gguf) if gguf is not None and a.format != b.format else ([], [])
    rows = []
    for key in sorted(set(ka) | set(kb), key=natural_key):
        na, nb = ka.get(key), kb.get(key)
        ta = a.tensors[na] if na is not None else None
        tb = b.tensors[nb] if nb is not None else None
        p = place_a[na] if na is not None else place_b[nb]  # type: ignore[index]
        row: dict[str, Any] = {"name": key, "a_name": na, "b_name": nb, "bucket": p.bucket, "layer": p.layer,
                               "a_dtype": ta.dtype if ta else None, "b_dtype": tb.dtype if tb else None,
                               "a_shape": list(ta.shape) if ta else None, "b_shape": list(tb.shape) if tb else None,
                               "max_abs": None, "rel_l2": None, "cosine": None}
        transposed = _transposes(ta, tb) if ta is not None and tb is not None else None
        if transposed:
            row["transposed"] = transposed   # that side's [in, out] kernel compared as [out, in]
        conv, reshaped, cut = None, False, 0
        if transforms and not transposed and ta is not None and tb is not None:
            hf, gg = (tb, ta) if a.format == "gguf" else (ta, tb)
            conv = _converter_transform(a, b, key, hf.shape, transforms)
            # a transform that changes the shape (GPT-2's transposes) faces the GGUF side's
            out = conv[1].shape if conv is not None else None
            reshaped = out is not None and tuple(out) == tuple(gg.shape) != tuple(hf.shape)
            if cut := hf.numel - math.prod(out) if reshaped and out is not None else 0:
                row["cut"] = cut   # rows dropped (Gemma 3's vocabulary): left out of the HF side's count (_dropped_params)
        # a block type ckptstat cannot decode yet (Q8_1, Q8_K): its values are not compared
        undecoded = [t.dtype for t in (ta, tb) if t is not None and t.dt.is_blocked and not can_decode(t.dtype)]
        if ta is None or tb is None:
            # a name one side stores as another tensor's storage (PyTorch's tied decoder; the other side ties
            # it structurally or dropped it) costs nothing there: a tie, not a difference
            target = alias_b.get(nb) if ta is None else alias_a.get(na)   # type: ignore[arg-type]
            row["status"] = "tied" if target is not None else "added" if ta is None else "removed"
            if target is not None:
                row["tied_to"] = target
            elif (a if ta is None else b) is gguf and any(rx.search(na or nb or "") for rx in dropped):
                row["status"] = "dropped"   # the HF tensor the converter leaves out by design (Family.gguf_dropped)
            elif (a if ta is None else b) is gguf and p.bucket in MMPROJ_BUCKETS and gguf.declared_architecture != "clip":
                row["status"], row["mmproj"] = "dropped", True   # a tower or projector: the mmproj file's
            elif (b if ta is None else a) is gguf and (why := generated(gguf, a if b is gguf else b, na or nb or "",
                                                                                not names_only)):
                row["status"], row["generated"] = "generated", why   # computed from config.json: Llama 3's rope_freqs
        elif ta.shape != tb.shape and not transposed and not reshaped and _squeezed(ta.shape) != _squeezed(tb.shape):
            row["status"] = "shape"
        elif (names_only or (same_file and na == nb) or "str" in (ta.dt.kind, tb.dt.kind)   # strings: no values
              or ta.dt.lanes != tb.dt.lanes   # F4_X2's two values an element pair with no other dtype's one
              or undecoded):
            row["status"] = "dtype" if ta.dtype != tb.dtype else ("equal" if same_file else "unread")
            if undecoded and not names_only:
                row["unread"] = f"values of {undecoded[0]} tensors are not decoded yet"
        else:
            if progress is not None:
                progress(key)
            m = _compare(a, na, b, nb, atol, rtol, chunk_bytes, transposed, conv)  # type: ignore[arg-type]
            untransformed = conv is not None and not cut and not _same(m, ta.dtype == tb.dtype, strict) and _same(
                _compare(a, na, b, nb, atol, rtol, chunk_bytes, transposed), ta.dtype == tb.dtype, strict)  # type: ignore[arg-type]
            if untransformed and conv is not None:
                # the HF layout stored as it is: llama.cpp's loader for this architecture reads only the transformed
                # one (its rope, norm, fused QKV split, matmul), so the file is broken whoever wrote it
                row["untransformed"] = f"stored without {conv[1].label}: llama.cpp would read it wrong"
            # compared after the converter's transform of the HF side, or a layout mlx_lm's changed read back
            transform = conv[1].label if conv is not None else ta.extra.get("transform") or tb.extra.get("transform")
            if transform:
                row["transform"] = transform
            rounded = m.pop("rounded")
            if untransformed:
                row["status"] = "values"
            elif converts(ta, tb):
                row["status"] = "converted" if rounded is not None and not strict else "dtype"
                if rounded is not None:
                    row.update(rounded)
            elif m["identical"] or m["close"]:
                row["status"] = "equal"
            else:
                row["status"] = "values"
            row["identical"] = m.pop("identical")
            row["within_tolerance"] = m.pop("close")
            row.update(m)
        rows.append(row)
    return rows, {"a": pa, "b": pb}


def _dropped_params(a: Checkpoint, b: Checkpoint, tensors: list[dict]) -> dict[str, dict[str, int]]:
    """Per side, module -> the parameters of its tensors llama.cpp's converter dropped by design (status "dropped"), and
    of the rows it cut (a row's `cut`)."""
    gone: dict[str, dict[str, int]] = {"a": {}, "b": {}}
    for t in tensors:
        if t["status"] == "dropped":
            side, ckpt, name = ("a", a, t["a_name"]) if t["a_name"] is not None else ("b", b, t["b_name"])
            if placements(ckpt)[name].role == "parameter":
                module = t["name"].rpartition(".")[0] or "(root)"
                held = logical(ckpt).tensors.get(name) or ckpt.tensors[name]   # a quantised weight: its logical count
                gone[side][module] = gone[side].get(module, 0) + held.numel
        elif t.get("cut"):   # the rows the converter cut from an HF tensor (Gemma 3's vocabulary)
            side, module = "b" if a.format == "gguf" else "a", t["name"].rpartition(".")[0] or "(root)"
            gone[side][module] = gone[side].get(module, 0) + t["cut"]
    return gone


def _same(m: dict, same_dtype: bool, strict: bool) -> bool:
    """Whether a comparison shows no difference: equal values, or (not strict) a faithful rounding."""
    return (m["identical"] or m["close"]) if same_dtype else (m["rounded"] is not None and not strict)


def _same_file(a: Checkpoint, b: Checkpoint) -> bool:
    try:
        return sorted(a.files) == sorted(b.files) and all(os.path.samefile(x, y) for x, y in zip(sorted(a.files),
                                                                                                   sorted(b.files)))
    except OSError:
        return False


def _summary(rows: list[dict]) -> dict:
    """Per bucket and per layer: tensors, how many changed (any status but equal/tied/unread), mean relative L2
    of those compared."""
    def agg(key: Any, group: list[dict]) -> dict:
        rels = [r["rel_l2"] for r in group if r["rel_l2"] is not None]
        counts = {s: sum(r["status"] == s for r in group) for s in STATUSES}
        return {"key": key, "tensors": len(group), "changed": sum(r["status"] not in UNCHANGED for r in group),
                **counts, "mean_rel_l2": float(np.mean(rels)) if rels else None}

    buckets: dict[str, list[dict]] = {}
    layers: dict[tuple[str, int], list[dict]] = {}   # a layer is its stack's: an encoder-decoder's encoder.1, decoder.1
    cells: dict[tuple[str, int, str], list[dict]] = {}
    for r in rows:
        buckets.setdefault(r["bucket"], []).append(r)
        if r["layer"] is not None:
            layers.setdefault((r["bucket"], r["layer"]), []).append(r)
            cells.setdefault((r["bucket"], r["layer"], module_in_layer(r["name"], r["layer"])), []).append(r)
    grid = [dict(agg(k, v), bucket=k[0], layer=k[1], module=k[2])
            for k, v in sorted(cells.items(), key=lambda kv: (natural_key(kv[0][0]), kv[0][1], natural_key(kv[0][2])))]
    return {"buckets": [dict(agg(k, v), bucket=k) for k, v in sorted(buckets.items(), key=lambda kv: natural_key(kv[0]))],
            "layers": [dict(agg(k[1], v), bucket=k[0], layer=k[1])
                       for k, v in sorted(layers.items(), key=lambda kv: (natural_key(kv[0][0]), kv[0][1]))],
            "grid": [{k: v for k, v in c.items() if k != "key"} for c in grid]}


def module_in_layer(name: str, layer: int) -> str:
    """The module a layered tensor belongs to inside its layer, the heatmap's column:
    `encoder.layer.3.attention.self.query.weight` -> `attention.self.query`, `blk.3.attn_q.weight` ->
    `attn_q`; routed experts share one column (`mlp.experts.*.w1`)."""
    # DOTALL: the rest runs to the end even past a newline, so the first start that fits is the match (without
    # it, a name `_1._1._1...` ending in a newline retried `.+$` from every start: quadratic, minutes for 1 MB)
    m = re.search(rf"(?:^|[._]){layer}\.(.+)$", name, re.S)
    rest = m.group(1) if m else name
    module = rest.rpartition(".")[0] or rest
    return re.sub(r"(^|\.)experts\.\d+(?=\.|$)", r"\1experts.*", module)


# ------------------------------------------------------------------------------------------ counts
def _by_module(ckpt: Checkpoint, rules: list[tuple[re.Pattern[str], str]], rename: Rename | None = None) -> dict[str, dict]:
    ckpt = logical(ckpt)   # a quantised weight counts its logical parameters (census/quant/)
    place = placements(ckpt)
    alias_of = {t.alias: t for t in find_ties(ckpt)}
    out: dict[str, dict] = {}
    for t in ckpt:
        if place[t.name].role != "parameter":
            continue
        module = _key(t.name, rules, rename)[1].rpartition(".")[0] or "(root)"
        row = out.setdefault(module, {"params": 0, "tied": []})
        tie = alias_of.get(t.name)
        if tie is None:
            row["params"] += t.numel
        else:
            row["tied"].append(f"{t.name} = {tie.target}")
    for tie in alias_of.values():  # names absent because tied: the module exists, at no cost
        if tie.alias not in ckpt.tensors:
            module = _key(tie.alias, rules, rename)[1].rpartition(".")[0] or "(root)"
            out.setdefault(module, {"params": 0, "tied": []})["tied"].append(f"{tie.alias} = {tie.target}")
    return out


def _objects(a: Checkpoint, b: Checkpoint) -> tuple[list[dict], str | None]:
    """The non-tensor values (`objects`: a training checkpoint's `epoch`, `args.lr`, a training_args.bin's arguments)
    of A and B, by name, those that differ: [{name, status (changed, added, removed), a, b}], and a note. Compared only
    when both sides keep values: a format that keeps none (safetensors, GGUF) facing a training checkpoint is a
    conversion's other side, noted, not a difference."""
    oa, ob = a.objects, b.objects
    if not oa or not ob:
        return [], (f"only {'A' if oa else 'B'} keeps non-tensor values ({len(oa or ob):,}): not compared"
                    if oa or ob else None)
    out = []
    for name in sorted(set(oa) | set(ob), key=natural_key):
        va, vb = a.object_value(name), b.object_value(name)
        status = "added" if name not in oa else "removed" if name not in ob else "changed" if va != vb else None
        if status:
            out.append({"name": name, "status": status, "a": va, "b": vb})
    return out, None


def diff(a: Checkpoint, b: Checkpoint, *, names_only: bool = False, atol: float = 0.0, rtol: float = 0.0,
         rules: list[tuple[re.Pattern[str], str]] | None = None, chunk_bytes: int = DEFAULT_CHUNK_BYTES,
         progress: Any = None, strict: bool = False) -> dict:
    """Every tensor of A and B (aligned by name after --map rules and wrapper prefixes) as added, removed,
    shape, dtype, values (changed beyond atol + rtol*|b|) or equal, with max abs diff, relative L2
    ||a-b||/||a|| and cosine for those compared; a summary per bucket and layer; and the modules whose
    unique parameter counts part (`rows`); the non-tensor values that differ (`objects`, `_objects`). `same`: nothing
    differs (exit status 0).
    With names_only no value is read: dtypes and shapes still count, values are `unread`. A tensor in another
    dtype whose values are the other side's rounded to it is `converted`, no difference unless `strict`."""
    if not (atol >= 0 and rtol >= 0):   # NaN too
        raise UsageError("--atol and --rtol must be >= 0")
    ra, rb, builtin = list(rules or []), list(rules or []), None
    renames: tuple[Rename | None, Rename | None] = (None, None)
    if (a.format == "gguf") != (b.format == "gguf"):   # one side llama.cpp: its names mapped to HF's first
        builtin = gguf_rules(a if a.format == "gguf" else b)
        if builtin:
            (ra if a.format == "gguf" else rb)[:0] = [MLA_RULE, *builtin[1]]
            # a multimodal wrapper's language model is what llama.cpp's converter writes to the model's file
            # (Gemma 3's, Mistral 3's... the towers go to the mmproj file): its names as the text model's
            (rb if a.format == "gguf" else ra)[:0] = [WRAPPED_LM]
            # DeepSeek's kv_b_proj, split per head by the converter: read joined back
            a, b = (mla_joined(a), b) if a.format == "gguf" else (a, mla_joined(b))
            # llama.cpp's stacked experts, slice by slice where the HF side holds each expert
            if a.format == "gguf":
                a = _unstacked(a, ra, align(b, rb)[0].__contains__)
            else:
                b = _unstacked(b, rb, align(a, ra)[0].__contains__)
    elif (side := mlx_side(a, b)) is not None:   # one side mlx_lm's conversion: read as the model it converts
        other, r_other = (b, rb) if side == "a" else (a, ra)
        keys = align(other, r_other)[0]
        shapes = {k: other.tensors[n].shape for k, n in keys.items()}
        own = ra if side == "a" else rb
        converted, stack_rules = mlx_view(a if side == "a" else b, shapes, lambda n: _key(n, own)[1],
                                          other_mlx=is_mlx_file(other.metadata))
        own[:0] = stack_rules
        a, b = (converted, b) if side == "a" else (a, converted)
        builtin = (mlx_undone(converted, stack_rules), stack_rules)
    elif dequantized.dequantisable(a) or dequantized.dequantisable(b):   # quantised: its weights read as their values
        a, b = dequantized.view(a, True), dequantized.view(b, True)
        builtin = (DEQUANTIZED_MAP, [])
    elif (side := diff_experts.fused_side(a, b)) is not None:   # transformers 5's fused experts, save_pretrained's own
        a, b = (diff_experts.split(a), b) if side == "a" else (a, diff_experts.split(b))
        (rb if side == "a" else ra)[:0] = diff_experts.MIXTRAL
        builtin = (diff_experts.LABEL, [])
    elif tf_spelled(a.tensors) != tf_spelled(b.tensors):   # one side written by TF: its names in transformers' PyTorch spelling
        builtin = (TF_MAP, [])
        renames = (tf_rename, None) if tf_spelled(a.tensors) else (None, tf_rename)
    tensors, prefixes = _values(a, b, names_only, (ra, rb), atol, rtol, max(int(chunk_bytes), 8), progress, renames,
                                strict)
    ma, mb = _by_module(a, ra, renames[0]), _by_module(b, rb, renames[1])
    gone = _dropped_params(a, b, tensors)
    rows = []
    for module in sorted(set(ma) | set(mb), key=natural_key):
        pa, pb = ma.get(module, {}).get("params"), mb.get(module, {}).get("params")
        tied = ma.get(module, {}).get("tied", []) + mb.get(module, {}).get("tied", [])
        # listed: a module whose count differs, or one tied on one side and absent on the other (no parameter
        # either way, so no difference: T5's embed_tokens tied to `shared`, against llama.cpp's one token_embd)
        if pa != pb or tied and (module not in ma or module not in mb):
            rows.append({"module": module, "a": pa, "b": pb, "delta": (pb or 0) - (pa or 0), "tied": tied})
            da, db = gone["a"].get(module, 0), gone["b"].get(module, 0)
            if (da or db) and (pa or 0) - da == (pb or 0) - db:   # what the converter dropped by design, no more
                rows[-1]["dropped"] = da + db
    ta = sum(r["params"] for r in ma.values())
    tb = sum(r["params"] for r in mb.values())
    counts = {s: sum(t["status"] == s for t in tensors) for s in (*STATUSES, "unread")}
    changed = [t for t in tensors if t["status"] not in UNCHANGED]
    objects, objects_note = _objects(a, b)
    compared = COMPARED_NAMES if names_only else COMPARED_VALUES
    if a.objects and b.objects:
        compared += "; non-tensor values"
    if unread := sum(bool(t.get("unread")) for t in tensors):
        compared += f"; the values of {unread} tensor(s) of block types not decoded yet are not compared"
    return {"schema": DIFF_SCHEMA, "a": a.path, "b": b.path, "a_format": a.format, "b_format": b.format,
            "a_params": ta, "b_params": tb, "delta": tb - ta,
            "compared": compared, "names_only": names_only,
            "atol": atol, "rtol": rtol, "strict": strict, "prefixes_stripped": prefixes, "map_rules": len(rules or []),
            "builtin_map": builtin[0] if builtin else None,
            "same": (not any((r["a"] or 0) != (r["b"] or 0) and not r.get("dropped") for r in rows) and not changed
                     and ta - sum(gone["a"].values()) == tb - sum(gone["b"].values()) and not objects),
            "counts": counts, "tensors": tensors, "summary": _summary(tensors), "rows": rows,
            "objects": objects, "objects_note": objects_note}
