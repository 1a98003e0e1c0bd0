"""`ckptstat diff` of a transformers save and mlx_lm's conversion of it (docs/diff.md, "MLX conversions").

Fixtures (fixtures/make_mlx.py): mlx_lm 0.32's own `convert` wrote fixtures/mlx/<case> from the transformers 5 save
fixtures/mlx-sources/<case>; fixtures/mlx-sources/<case>.mx_dequantize.safetensors holds what mx.dequantize gives
each quantised weight of the model mlx_lm.load builds, in its compute dtype; fixtures/expected_mlx.json what MLX made
of each module (mode, bits, group size, the dequantised shape). torch reads the oracles' bf16 (importorskip)."""
from __future__ import annotations

import json
import os
import re
import shutil

import numpy as np
import pytest
from conftest import fixture
from test_quantized_mlx import TOWERS, towers

from ckptstat.analysis.conversion_mlx import view
from ckptstat.analysis.diff import diff
from ckptstat.formats.registry import open_checkpoint

SOURCES, MLX = fixture("mlx-sources"), fixture("mlx")
with open(fixture("expected_mlx.json")) as _f:
    EXPECTED = json.load(_f)["cases"]
CASES = sorted(c for c in os.listdir(SOURCES) if os.path.isdir(os.path.join(SOURCES, c)))
DEQUANTIZED = sorted(f.split(".")[0] for f in os.listdir(SOURCES) if f.endswith(".mx_dequantize.safetensors"))
# What mlx_lm's sanitize leaves unpaired (read in its models/<type>.py), by aligned name: ERNIE 4.5's
# e_score_correction_bias dropped
UNPAIRED = {"ernie4_5_moe-4bit": {"removed": ["layers.0.mlp.moe_statics.e_score_correction_bias"], "added": []}}

# tensors mlx_lm splits along rows, read joined back: the joined row's transform, by the case's
MLA = "mlx_lm's per-head split of kv_b_proj"
FUSED = "mlx_lm's split of the experts' fused gate and up projections"
JOINED = {"deepseek_v3-4bit-g32": MLA, "deepseek_v3-bf16": MLA, "deepseek_v3-mla-4bit-g32": MLA,
          "granitemoe-4bit": FUSED, "llama4-4bit-g32": FUSED, "qwen3_vl_moe-4bit-g32": FUSED}
# where transformers keeps the fused experts [experts, in, out], the down projection's axes swapped back too
SWAPPED = "mlx_lm's [experts, out, in] read as transformers' [experts, in, out]"


def _towers(case: str) -> list[str]:
    """The source's tensors mlx_lm drops with a wrapper's towers, by the names diff aligns (the outer `model.` off)."""
    return [n.removeprefix("model.") for n in towers(case)]


def _label(w: dict) -> str:
    return f"mlx affine {w['bits']}-bit, group {w['group_size']}" if w["mode"] == "affine" else f"mlx {w['mode']}"


def _diff(case: str, source: str | None = None, **kw) -> dict:
    return diff(open_checkpoint(source or os.path.join(SOURCES, case)), open_checkpoint(os.path.join(MLX, case)), **kw)


@pytest.mark.parametrize("case", CASES)
def test_a_faithful_conversion_is_the_same_model(case):
    """Every quantised module MLX reports is `converted` within its rounding bound, labelled with MLX's own mode, bits
    and group, a stack once per expert, a half of a split tensor in the joined row; every other tensor is equal (or a
    norm + 1, rounded); what mlx_lm's sanitize leaves unpaired is all that is added or removed."""
    r = _diff(case)
    rows = r["tensors"]
    unpaired = UNPAIRED.get(case, {"added": [], "removed": _towers(case)})
    for status in ("added", "removed"):
        assert sorted(t["name"] for t in rows if t["status"] == status) == sorted(unpaired[status]), status
    assert not [t for t in rows if t["status"] in ("values", "shape", "dtype")]
    assert r["same"] is (case not in UNPAIRED and case not in TOWERS)
    for name, w in EXPECTED[case]["weights"].items():
        mine = [t for t in rows if t["b_name"] == name or (t["b_name"] or "").startswith(name + "[")]
        if any(name.startswith(u.rpartition(".")[0]) for u in ("model." + x for x in unpaired["added"])):
            continue   # a split module: not compared
        joined = [t for t in rows if name in (t["b_name"] or "").split(" + ")[1:] or
                  (t["b_name"] or "").startswith(name + " + ")]
        if joined:   # one half of a tensor mlx_lm split (MLA's kv_b_proj, fused gate and up experts), joined back
            (row,) = joined
            assert row["status"] == "converted" and _label(w) in row["rounded_to"], name
            assert row["transform"].startswith(JOINED[case]), name
            continue
        experts = w["shape"][0] if len(w["shape"]) == 3 else 1
        # a stack once per expert where the source names each, whole where it keeps them whole (GraniteMoE's output_linear;
        # Llama 4's and Qwen3-VL-MoE's down_proj, each expert's axes swapped back)
        whole = w["shape"] if not mine or mine[0].get("transform") != SWAPPED else [experts, *w["shape"][:0:-1]]
        assert len(mine) == experts or len(mine) == 1 and mine[0]["a_shape"] == whole, name
        assert all(t["status"] == "converted" and t["rounded_to"] == _label(w) for t in mine), name
        assert all(0 < t["bound_used"] <= 1 for t in mine), name
    for t in rows:
        if t["status"] == "converted" and " + " not in t["b_name"] and not t["rounded_to"].startswith("mlx "):
            assert t["rounded_to"].startswith("mlx_lm's norm + 1") and case == "qwen3_next-4bit-g32"


def _oracle(case: str) -> dict:
    torch = pytest.importorskip("torch")
    from safetensors.torch import load_file

    return {k: v for k, v in load_file(os.path.join(SOURCES, f"{case}.mx_dequantize.safetensors")).items()
            if torch.is_floating_point(v)}


def _ulp(t) -> np.ndarray:
    """The spacing of t's dtype at each of its values (bf16, f16): the next representable magnitude less the value."""
    import torch

    bits = {torch.bfloat16: torch.int16, torch.float16: torch.int16}[t.dtype]
    up = (t.view(bits) + 1).view(t.dtype)
    return (up.float() - t.float()).abs().double().numpy()


@pytest.mark.parametrize("case", DEQUANTIZED)
def test_dequantised_values_are_mx_dequantize(case):
    """ckptstat's dequantised weights (the grid's exact values) against mx.dequantize's, which rounds them to the compute
    dtype: affine within its roundings of scales x q and of the sum, the floating-point modes equal."""
    oracle = _oracle(case)
    ckpt = open_checkpoint(os.path.join(MLX, case))
    mine, _ = view(ckpt, {}, lambda n: n)
    assert oracle
    for name, theirs in oracle.items():
        ours = mine.read(name).astype(np.float64)
        want = theirs.double().numpy()
        assert ours.shape == want.shape, name
        w = EXPECTED[case]["weights"][name]
        slack = 0.0
        if w["mode"] == "affine":   # mx rounds scales x q, then adds the bias and rounds again: an ulp of the largest
            # magnitude in the group (|scales x q| is at most the group's range) and one of the result
            peak = theirs.reshape(-1, w["group_size"]).abs().amax(dim=1, keepdim=True)
            slack = (2 * _ulp(peak) + _ulp(theirs.reshape(-1, w["group_size"]))).reshape(want.shape)
        assert np.all(np.abs(ours - want) <= slack), (name, float(np.max(np.abs(ours - want))))


def _save_changed(case: str, tmp_path, change) -> str:
    """The case's source copied, its tensors put through `change` (torch tensors) and saved again."""
    pytest.importorskip("torch")
    from safetensors.torch import load_file, save_file

    work = tmp_path / case
    shutil.copytree(os.path.join(SOURCES, case), work)
    path = str(work / "model.safetensors")
    save_file(change(load_file(path)), path, metadata={"format": "pt"})
    return str(work)


@pytest.mark.parametrize("case,name,where", [
    ("llama-4bit", "model.layers.0.self_attn.q_proj.weight", None),                 # affine, float16
    ("qwen3_moe-8bit", "model.layers.0.mlp.experts.2.down_proj.weight", None),      # one expert of a stack
    ("mixtral-mxfp4", "model.layers.0.block_sparse_moe.experts.1.w3.weight", None),  # Mixtral's w3: up
    ("llama-nvfp4", "model.layers.0.mlp.gate_proj.weight", None),
    ("qwen3-mxfp8", "lm_head.weight", None),
    ("mamba2-4bit-g32", "backbone.layers.1.mixer.conv1d.weight", None),             # relaid, not quantised
    # MLA's kv_b_proj [heads x (nope + v), rank]: head 1's nope row 5 (embed_q's, transposed), its v row 8 (unembed_out's)
    ("deepseek_v3-mla-4bit-g32", "model.layers.0.self_attn.kv_b_proj.weight",
     lambda m: (m["qk_nope_head_dim"] + m["v_head_dim"] + 5, 3)),
    ("deepseek_v3-mla-4bit-g32", "model.layers.0.self_attn.kv_b_proj.weight",
     lambda m: (2 * m["qk_nope_head_dim"] + m["v_head_dim"] + 8, 3)),
    # GraniteMoE's input_linear [experts, 2 x inter, hidden]: expert 1's up half (switch_mlp.up_proj); output_linear
    ("granitemoe-4bit", "model.layers.0.block_sparse_moe.input_linear.weight", lambda m: (1, m["intermediate_size"] + 3, 5)),
    ("granitemoe-4bit", "model.layers.0.block_sparse_moe.output_linear.weight", None),
    # [experts, in, out]: Llama 4's gate_up_proj [experts, hidden, 2 x inter], expert 2's up half; its down_proj
    # [experts, inter, hidden] (square here: the element off the diagonal), Qwen3-VL-MoE's gate half and down_proj
    ("llama4-4bit-g32", "language_model.model.layers.0.feed_forward.experts.gate_up_proj",
     lambda m: (2, 5, m["text_config"]["intermediate_size"] + 3)),
    ("llama4-4bit-g32", "language_model.model.layers.1.feed_forward.experts.down_proj", lambda m: (1, 7, 3)),
    ("qwen3_vl_moe-4bit-g32", "model.language_model.layers.0.mlp.experts.gate_up_proj", lambda m: (1, 4, 2)),
    ("qwen3_vl_moe-4bit-g32", "model.language_model.layers.0.mlp.experts.down_proj", lambda m: (3, 9, 2)),
], ids=lambda v: "" if callable(v) or v is None else v.rpartition(".")[0].rpartition(".")[2] if "." in v else v)
def test_a_planted_change_is_named(case, name, where, tmp_path):
    """One element of one source tensor moved by a quarter (`where(the model's config)`, else its sixth): that tensor,
    and only it, differs."""
    def change(t):
        at = where(EXPECTED[case]["model"]) if where else None
        if at is None:
            t[name].view(-1)[5] += 0.25
        else:
            t[name][at] += 0.25
        return t

    r = _diff(case, _save_changed(case, tmp_path, change))
    towers = set(_towers(case))   # (removed, as without the change)
    changed = [t for t in r["tensors"] if t["status"] not in ("equal", "converted") and t["name"] not in towers]
    assert [t["a_name"] for t in changed] == [name]
    # a quantised weight: stored in another form, not the rounding of the source (`dtype`, as a GGUF's); else `values`
    quantised = re.sub(r"\[\d+\]$", "", changed[0]["b_name"]).split(" + ")[0] in EXPECTED[case]["weights"]
    assert changed[0]["status"] == ("dtype" if quantised else "values")
    assert changed[0]["max_abs"] >= 0.2 and r["same"] is False


@pytest.mark.parametrize("case", ["llama-2bit-g128", "qwen3-tied-5bit-g32", "llama-mixed_3_6", "olmoe-4bit",
                                  "mixtral-mxfp4", "llama-nvfp4", "qwen3-mxfp8"])
def test_another_models_weights_are_not_within_the_bound(case, tmp_path):
    """The bound is no blanket: the source's rows reversed (the same values, other places) is not what mlx_lm converted,
    however coarse the quantisation (2 bits); each quantised weight is `dtype` (not the rounding of the source)."""
    def shuffle(t):
        return {k: (v.flip(0).contiguous() if v.dim() == 2 and v.shape[0] > 1 and "norm" not in k else v)
                for k, v in t.items()}

    r = _diff(case, _save_changed(case, tmp_path, shuffle))
    quantised = [t for t in r["tensors"] if t["b_name"] and re.sub(r"\[\d+\]$", "", t["b_name"])
                 in EXPECTED[case]["weights"] and len(t["a_shape"]) == 2]
    assert quantised and all(t["status"] == "dtype" for t in quantised), \
        [(t["name"], t["status"]) for t in quantised if t["status"] != "dtype"]


def test_strict_counts_a_rounding_as_a_difference(cli):
    rc, out, _ = cli("diff", os.path.join(SOURCES, "llama-4bit"), os.path.join(MLX, "llama-4bit"), "--strict", "--json")
    r = json.loads(out)
    assert rc == 1 and r["counts"]["converted"] == 0
    assert r["counts"]["dtype"] == len(EXPECTED["llama-4bit"]["weights"])


def test_the_report_names_what_it_undid(cli):
    rc, out, err = cli("diff", os.path.join(SOURCES, "qwen3_next-4bit-g32"), os.path.join(MLX, "qwen3_next-4bit-g32"))
    assert rc == 0 and err == ""
    text = " ".join(out.split())
    assert ("mlx_lm's conversion undone: quantised weights dequantised, norm + 1 taken off, conv1d axes as torch's, "
            "experts unstacked") in text and "no differences" in text
    assert "rounded to mlx affine 4-bit, group 32" in text and "rounded to mlx_lm's norm + 1 in BF16" in text
    assert "the same after mlx's conv1d axes [out, kernel, in] read as torch's [out, in, kernel]" in text
    # either order: the MLX side first
    rc, out, _ = cli("diff", os.path.join(MLX, "mixtral-mxfp4"), os.path.join(SOURCES, "mixtral-mxfp4"), "--json")
    r = json.loads(out)
    weights = EXPECTED["mixtral-mxfp4"]["weights"].values()
    assert rc == 0 and r["same"] and r["counts"]["converted"] == sum(w["shape"][0] if len(w["shape"]) == 3 else 1
                                                                     for w in weights)


def test_mlx_unquantised_against_quantised():
    """mlx-community's -bf16 and -4bit repositories of one model: both mlx's, both stacked and split as mlx_lm keeps them
    (MLA's embed_q and unembed_out included), the quantised side dequantised; the bf16 side's names, shapes and values
    are the reference, nothing undone but the quantisation. (make_mlx.py builds both from one seeded model.)"""
    bf16, q4 = os.path.join(MLX, "deepseek_v3-bf16"), os.path.join(MLX, "deepseek_v3-4bit-g32")
    r = diff(open_checkpoint(bf16), open_checkpoint(q4))
    assert r["same"] and r["builtin_map"] == "mlx_lm's conversion undone: quantised weights dequantised"
    converted = {t["b_name"] for t in r["tensors"] if t["status"] == "converted"}
    assert converted == set(EXPECTED["deepseek_v3-4bit-g32"]["weights"])   # every quantised module, stacks whole
    assert all(t["status"] == "equal" for t in r["tensors"] if t["b_name"] not in converted)
