"""`ckptstat diff MODEL_DIR model.gguf` on GGUF files written by llama.cpp's own convert_hf_to_gguf.py
(fixtures/make_conversions.py: ten tiny HF models, each at f32, f16 and q8_0). The oracle is what the
fixture script recorded with the converter's own functions and gguf-py's `dequantize` (per tensor: numpy's
max abs difference between the HF tensor after the converter's transform and the dequantised GGUF tensor,
and whether the transform changed it), and, for planted changes, numpy and gguf-py here."""
from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from ckptstat import open_checkpoint
from ckptstat.analysis.diff import diff


def conversions(here: str) -> tuple[dict, list[tuple[str, str]]]:
    """A fixture folder's oracle (expected.json) and its (HF model, GGUF file) pairs."""
    expected = json.load(open(os.path.join(here, "expected.json")))
    return expected, [(model, name) for model, files in sorted(expected["models"].items()) for name in sorted(files)]


def same_model_rows(cli, here: str, model: str, file: str, oracle: dict) -> dict[str, dict]:
    """`diff MODEL_DIR FILE --json` of a faithful conversion: exit 0, the same model, every HF tensor paired with
    the GGUF tensor the converter wrote; its rows by HF name."""
    rc, out, err = cli("diff", os.path.join(here, model), os.path.join(here, file), "--json")
    r = json.loads(out)
    assert rc == 0 and r["same"] is True and err == "", [t for t in r["tensors"] if t["status"] not in ("equal", "converted")]
    rows = {t["a_name"]: t for t in r["tensors"]}
    assert set(rows) == set(oracle)
    return rows


HERE = os.path.join(os.path.dirname(__file__), "..", "fixtures", "conversions")
EXPECTED, FILES = conversions(HERE)


@pytest.mark.parametrize("model,gguf", FILES, ids=[g for _, g in FILES])
def test_a_faithful_conversion_is_the_same_model(model: str, gguf: str, cli) -> None:
    oracle = EXPECTED["models"][model][gguf]["tensors"]
    rows = same_model_rows(cli, HERE, model, gguf, oracle)
    for hf, want in oracle.items():
        row = rows[hf]
        assert row["b_name"] == want["gguf"], hf
        assert row["max_abs"] == want["max_abs"], hf            # the same float64 values, the same max
        assert bool(row.get("transform")) == want["transformed"], hf
        if want["type"] == "F32":
            assert row["status"] == "equal", hf
        else:   # rounded to the GGUF type, within its bound
            assert row["status"] == "converted" and row["rounded_to"] == want["type"], hf
            assert 0 <= row["bound_used"] <= 1


def test_transforms_named_per_family(cli) -> None:
    r = diff(open_checkpoint(os.path.join(HERE, "llama")), open_checkpoint(os.path.join(HERE, "llama.f32.gguf")))
    by = {t["name"]: t for t in r["tensors"]}
    # the layer stays in the row's name; GQA: k permuted by its own 2 heads, q by 4
    assert "rotary row permutation (q, 4 heads)" in by["layers.1.self_attn.q_proj.weight"]["transform"]
    assert "rotary row permutation (k, 2 heads)" in by["layers.1.self_attn.k_proj.weight"]["transform"]
    assert by["layers.1.self_attn.k_proj.weight"]["identical"] is True
    r = diff(open_checkpoint(os.path.join(HERE, "gemma2")), open_checkpoint(os.path.join(HERE, "gemma2.f32.gguf")))
    norms = [t for t in r["tensors"] if t["name"].endswith("norm.weight")]
    assert len(norms) == 9 and all(t["transform"] == "llama.cpp's norm + 1" and t["identical"] for t in norms)
    rc, out, _ = cli("diff", os.path.join(HERE, "gemma2"), os.path.join(HERE, "gemma2.q8_0.gguf"))
    assert rc == 0 and "9 tensor(s) the same after llama.cpp's norm + 1" in out and "rounded to Q8_0" in out


def test_strict_counts_a_rounding_as_a_difference(cli) -> None:
    rc, out, _ = cli("diff", os.path.join(HERE, "qwen2"), os.path.join(HERE, "qwen2.f16.gguf"), "--strict", "--json")
    r = json.loads(out)
    assert rc == 1 and r["strict"] is True and r["counts"]["dtype"] == 16 and r["counts"]["converted"] == 0
    assert all(t["rounded_to"] == "F16" for t in r["tensors"] if t["status"] == "dtype")


def _gguf_values(path: str, name: str) -> np.ndarray:
    import gguf

    t = next(t for t in gguf.GGUFReader(path).tensors if t.name == name)
    return gguf.quants.dequantize(t.data, t.tensor_type).reshape([int(d) for d in reversed(t.shape)])


@pytest.mark.parametrize("model,outtype,hf,gguf_name", [
    ("llama", "f32", "model.layers.1.self_attn.k_proj.weight", None),        # permuted rows, GQA
    ("mixtral", "f16", "model.layers.0.block_sparse_moe.experts.1.w2.weight", "blk.0.ffn_down_exps.weight"),
    ("gemma3", "q8_0", "model.layers.1.mlp.down_proj.weight", "blk.1.ffn_down.weight"),
    ("qwen2", "q8_0", "model.layers.0.self_attn.v_proj.bias", "blk.0.attn_v.bias"),
    ("gemma", "f32", "model.layers.0.input_layernorm.weight", "blk.0.attn_norm.weight"),   # a norm stored + 1
])
def test_a_planted_change_is_named(model: str, outtype: str, hf: str, gguf_name: str | None, tmp_path, cli) -> None:
    """One value of one HF tensor changed: that tensor, and only it, differs, with numpy's max abs difference."""
    work = tmp_path / model
    shutil.copytree(os.path.join(HERE, model), work)
    tensors = load_file(str(work / "model.safetensors"))
    before = tensors[hf].copy()
    tensors[hf].reshape(-1)[7] += np.float32(0.25)
    save_file(tensors, str(work / "model.safetensors"), metadata={"format": "pt"})
    path = os.path.join(HERE, f"{model}.{outtype}.gguf")
    rc, out, _ = cli("diff", str(work), path, "--json")
    r = json.loads(out)
    changed = [t for t in r["tensors"] if t["status"] not in ("equal", "converted")]
    assert rc == 1 and [t["a_name"] for t in changed] == [hf]
    row = changed[0]
    assert row["name"] == hf.removeprefix("model.")   # layer and all
    if gguf_name is None:   # f32: the GGUF tensor is the converter's transform of `before`, bit for bit (oracle)
        assert EXPECTED["models"][model][f"{model}.{outtype}.gguf"]["tensors"][hf]["max_abs"] == 0
        want = np.max(np.abs(tensors[hf].astype(np.float64) - before))
        assert row["status"] == "values"
    else:   # untransformed tensors: against gguf-py's dequantised values (an expert: its slice)
        g = _gguf_values(path, gguf_name)
        if "experts" in hf:
            g = g[int(hf.split("experts.")[1].split(".")[0])]
        mine = tensors[hf] + np.float32(1) if "norm" in hf else tensors[hf]   # the converter's `data_torch + 1`
        want = np.max(np.abs(mine.astype(np.float64) - g.astype(np.float64)))
        assert row["status"] == ("dtype" if r["counts"]["dtype"] else "values")
    assert row["max_abs"] == want


def test_rounding_bounds_on_safetensors_pairs(tmp_path, cli) -> None:
    """The same rule outside GGUF: an f16 copy (numpy's rounding) is converted; one element a step off is not."""
    rng = np.random.default_rng(0)
    a = {"w": rng.standard_normal((8, 32)).astype(np.float32)}
    save_file(a, str(tmp_path / "a.safetensors"))
    save_file({"w": a["w"].astype(np.float16)}, str(tmp_path / "b.safetensors"))
    off = a["w"].astype(np.float16)
    off[3, 5] = np.nextafter(off[3, 5], np.float16(np.inf))
    if abs(float(off[3, 5]) - float(a["w"][3, 5])) <= abs(float(np.float16(a["w"][3, 5])) - float(a["w"][3, 5])):
        off[3, 5] = np.nextafter(off[3, 5], np.float16(np.inf))
    save_file({"w": off}, str(tmp_path / "c.safetensors"))
    rc, out, _ = cli("diff", str(tmp_path / "a.safetensors"), str(tmp_path / "b.safetensors"), "--json")
    row = json.loads(out)["tensors"][0]
    assert rc == 0 and row["status"] == "converted" and row["rounded_to"] == "F16"
    assert row["max_abs"] == np.max(np.abs(a["w"].astype(np.float64) - a["w"].astype(np.float16)))
    rc, out, _ = cli("diff", str(tmp_path / "a.safetensors"), str(tmp_path / "c.safetensors"), "--json")
    row = json.loads(out)["tensors"][0]
    assert rc == 1 and row["status"] == "dtype" and "rounded_to" not in row
