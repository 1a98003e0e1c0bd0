"""`ckptstat diff MODEL_DIR model.gguf` on GGUF files quantised by llama.cpp's own C++ `llama-quantize`
(fixtures/make_llama_quantize.py: Llama, Qwen2, Gemma and Mixtral with 256-long rows, Q4_0 ... Q6_K). The
oracle is what the fixture script recorded with the converter's own functions and gguf-py's `dequantize`
(per HF tensor: the GGUF tensor, the type llama-quantize gave it, numpy's max abs difference), and, for a
planted change, gguf-py and numpy here."""
from __future__ import annotations

import json
import os
import shutil

import gguf
import numpy as np
import pytest
from gguf.quants import dequantize
from safetensors.numpy import load_file
from test_diff_conversion import conversions, same_model_rows

HERE = os.path.join(os.path.dirname(__file__), "..", "fixtures", "conversions", "quantized")
EXPECTED, FILES = conversions(HERE)


@pytest.mark.parametrize("model,file", FILES, ids=[f for _, f in FILES])
def test_a_quantised_conversion_is_the_same_model(model: str, file: str, cli) -> None:
    oracle = EXPECTED["models"][model][file]["tensors"]
    rows = same_model_rows(cli, HERE, model, file, oracle)
    for hf, want in oracle.items():
        row = rows[hf]
        assert row["b_name"] == want["gguf"] and row["b_dtype"] == want["type"], hf   # the file's own type
        assert row["max_abs"] == want["max_abs"], hf
        assert bool(row.get("transform")) == want["transformed"], hf
        # F32 (norms, kept by llama-quantize) faces the HF float16: a widening, exact; the rest its block type
        assert row["status"] == "converted" and row["rounded_to"] == ("F16" if want["type"] == "F32" else want["type"]), hf
        assert 0 <= row["bound_used"] <= 1 and (want["type"] != "F32" or row["max_abs"] == 0), hf
    # the files hold the types named (llama-quantize falls back per tensor; each named type is there)
    qtype = file.split(".")[1].upper().removesuffix("_M").removesuffix("_S")
    assert qtype in {w["type"] for w in oracle.values()}


def test_the_fixtures_hold_every_decoded_block_type() -> None:
    from ckptstat.core.quants import QUANTS

    held = {w["type"] for files in EXPECTED["models"].values() for f in files.values() for w in f["tensors"].values()}
    # Q8_0: fixtures/conversions/*.q8_0.gguf; the ternary TQ1_0 / TQ2_0 written by gguf-py's quantizer instead
    # (tests/test_quants.py test_ternary_tensors_are_compared_and_counted)
    assert set(QUANTS) - {"Q8_0", "TQ1_0", "TQ2_0"} <= held


# Where one element's code sits in a block (ggml-common.h): the first code byte, and the bit that moves
# that byte's first element alone by several steps (a nibble's top bit; a 2-bit field's high bit).
CODE_BYTE = {"Q4_0": (2, 0x08), "Q4_1": (4, 0x08), "Q5_0": (6, 0x08), "Q5_1": (8, 0x08), "Q2_K": (16, 0x02),
             "Q3_K": (32, 0x02), "Q4_K": (16, 0x08), "Q5_K": (48, 0x08), "Q6_K": (0, 0x08), "Q8_0": (2, 0x40)}


def _planted(model: str) -> list[tuple[str, str]]:
    """(file, HF tensor) for one untransformed tensor of each block type of each file."""
    out = []
    for file, rec in sorted(EXPECTED["models"][model].items()):
        seen = set()
        for hf, want in sorted(rec["tensors"].items()):
            if want["type"] in CODE_BYTE and not want["transformed"] and want["type"] not in seen and "[" not in want["gguf"]:
                seen.add(want["type"])
                out.append((file, hf))
    return out


PLANTS = [(m, f, hf) for m in sorted(EXPECTED["models"]) for f, hf in _planted(m)]


@pytest.mark.parametrize("model,file,hf", PLANTS, ids=[f"{f}:{hf}" for _, f, hf in PLANTS])
def test_a_changed_code_is_named(model: str, file: str, hf: str, tmp_path, cli) -> None:
    """One element's code changed in a copy of the file's bytes: that tensor, and only it, is a difference
    (`dtype`, no longer within its rounding), with numpy's max abs difference from gguf-py's values."""
    want = EXPECTED["models"][model][file]["tensors"][hf]
    path = str(tmp_path / file)
    shutil.copy(os.path.join(HERE, file), path)
    t = next(t for t in gguf.GGUFReader(path).tensors if t.name == want["gguf"])
    block = gguf.GGML_QUANT_SIZES[t.tensor_type][1]
    at, bit = CODE_BYTE[want["type"]]
    offset = t.data_offset + 3 * block + at    # the fourth block
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([byte ^ bit]))
    t = next(t for t in gguf.GGUFReader(path).tensors if t.name == want["gguf"])
    g = dequantize(t.data, t.tensor_type).reshape(-1).astype(np.float64)
    x = load_file(os.path.join(HERE, model, "model.safetensors"))[hf].reshape(-1).astype(np.float64)
    rc, out, _ = cli("diff", os.path.join(HERE, model), path, "--json")
    r = json.loads(out)
    changed = [t for t in r["tensors"] if t["status"] not in ("equal", "converted")]
    assert rc == 1 and [t["a_name"] for t in changed] == [hf]
    assert changed[0]["status"] == "dtype" and changed[0]["max_abs"] == np.max(np.abs(x - g))


@pytest.mark.parametrize("file,hf", [("llama.q4_k_m.gguf", "model.layers.1.mlp.down_proj.weight"),
                                     ("llama.q2_k.gguf", "model.layers.0.mlp.up_proj.weight"),
                                     ("llama.q4_0.gguf", "model.layers.0.self_attn.v_proj.weight")])
def test_a_changed_source_value_is_named(file: str, hf: str, tmp_path, cli) -> None:
    """One HF value moved by 0.05 (weights are N(0, 0.1)): the quantised tensor no longer rounds from it."""
    from safetensors.numpy import save_file

    work = tmp_path / "llama"
    shutil.copytree(os.path.join(HERE, "llama"), work)
    tensors = load_file(str(work / "model.safetensors"))
    tensors[hf].reshape(-1)[7] += np.float16(0.05)
    save_file(tensors, str(work / "model.safetensors"), metadata={"format": "pt"})
    want = EXPECTED["models"]["llama"][file]["tensors"][hf]
    t = next(t for t in gguf.GGUFReader(os.path.join(HERE, file)).tensors if t.name == want["gguf"])
    g = dequantize(t.data, t.tensor_type).reshape(-1).astype(np.float64)
    rc, out, _ = cli("diff", str(work), os.path.join(HERE, file), "--json")
    r = json.loads(out)
    changed = [t for t in r["tensors"] if t["status"] not in ("equal", "converted")]
    assert rc == 1 and [t["a_name"] for t in changed] == [hf]
    assert changed[0]["max_abs"] == np.max(np.abs(tensors[hf].reshape(-1).astype(np.float64) - g))
