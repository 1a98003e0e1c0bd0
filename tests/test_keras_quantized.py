"""Keras 3 models quantised with `model.quantize(mode)` (docs/quantized.md, "Keras 3 quantised layers"), written by keras
itself (torch backend) at test time. Every expected number comes from keras: the float model's count_params() before
quantize (the logical parameters), the quantised variables' names, shapes and dtypes after it."""
from __future__ import annotations

import os
import re

import numpy as np
import pytest

from ckptstat import summarize
from ckptstat.analysis import dequantized
from ckptstat.analysis.stats import collect
from ckptstat.formats.registry import open_checkpoint

# keras' variable name -> the role ckptstat gives it (keras/src/layers/core/dense.py variable_serialization_spec)
ROLES = {"kernel_scale": "scale", "embeddings_scale": "scale", "kernel_zero": "zero-point", "embeddings_zero": "zero-point",
         "g_idx": "group-index", "inputs_scale": "input-scale", "outputs_grad_scale": "scale",
         "inputs_amax_history": "amax-history", "kernel_amax_history": "amax-history",
         "outputs_grad_amax_history": "amax-history", "reverse_embeddings_scale": "scale",
         "reverse_embeddings_zero": "zero-point"}
# (kind, mode, per-channel int4); a ReversibleEmbedding untied stores two quantised tables
CASES = {"dense-int8": ("dense", "int8", False), "dense-int4": ("dense", "int4", False),
         "dense-int4-channel": ("dense", "int4", True), "dense-float8": ("dense", "float8", False),
         "embedding-int8": ("embedding", "int8", False), "embedding-int4": ("embedding", "int4", False),
         "embedding-int4-channel": ("embedding", "int4", True),
         "reversible-int8": ("reversible", "int8", False), "reversible-int4": ("reversible", "int4", False),
         "untied-int8": ("untied", "int8", False), "untied-int4": ("untied", "int4", False),
         "untied-int4-channel": ("untied", "int4", True)}
KERNELS = ("kernel", "embeddings", "reverse_embeddings")   # the float model's quantised variables


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> dict[str, dict]:
    d = tmp_path_factory.mktemp("keras-quantized")
    os.environ.setdefault("KERAS_BACKEND", "torch")   # read when keras is first imported; TF is not installed
    os.environ.setdefault("KERAS_HOME", str(d / "home"))
    keras = pytest.importorskip("keras")

    def dense():
        # 300 inputs: three int4 blocks of 128 (the last partial); 7 units: an odd number of packed columns
        return keras.Sequential([keras.Input((16,)), keras.layers.Dense(300), keras.layers.Dense(7, use_bias=False),
                                 keras.layers.EinsumDense("ab,bcd->acd", output_shape=(4, 6), bias_axes="cd")])

    def embedding(kind):
        # dim 300: three int4 blocks of a row (a per-channel int4 table's odd width could not be told from its bytes)
        layer = (keras.layers.Embedding(50, 300) if kind == "embedding" else
                 keras.layers.ReversibleEmbedding(50, 300, tie_weights=kind == "reversible"))
        return keras.Sequential([keras.Input((5,), dtype="int32"), layer])

    out: dict[str, dict] = {}
    for case in CASES:
        kind, mode, channel = CASES[case]
        model = dense() if kind == "dense" else embedding(kind)
        logical = model.count_params()
        kernels = [int(np.prod(v.shape)) for layer in model.layers for v in layer.variables if v.name in KERNELS]
        model.save_weights(d / f"{case}.float.weights.h5")
        config = keras.quantizers.Int4QuantizationConfig(block_size=-1) if channel else None
        model.quantize(mode, config=config)
        values = _dequantized(model, mode)
        variables = [(v.name, tuple(v.shape), np.dtype(str(v.dtype))) for layer in model.layers for v in layer.variables]
        model.save(d / f"{case}.keras")
        model.save_weights(d / f"{case}.weights.h5")
        out[case] = {"logical": logical, "kernels": sum(kernels), "layers": len(kernels), "mode": mode,
                     "variables": variables, "keras": str(d / f"{case}.keras"), "h5": str(d / f"{case}.weights.h5"),
                     "values": values, "float": str(d / f"{case}.float.weights.h5")}
    return out


def _dequantized(model, mode: str) -> dict[str, np.ndarray | None]:
    """Each quantised kernel's values as keras itself dequantises them, by the variable's name in the weights file
    (`layers/<class in snake case>[_<n>]/vars/0`, keras' saving_lib names); None where keras never forms them (an
    EinsumDense int8 kernel, whose scale ckptstat does not lay out; an untied reverse table is a second weight of the
    layer, not listed). A Dense's or EinsumDense's: the gradient keras' own custom gradient gives the inputs for an
    identity upstream (its `float_kernel`, transposed: each element one product with 1, exact); an Embedding's: its
    output for every index (its forward dequantises the rows it takes)."""
    import keras
    import torch

    out: dict[str, np.ndarray | None] = {}
    seen: dict[str, int] = {}
    for layer in model.layers:
        cls = re.sub(r"(?<!^)(?=[A-Z])", "_", type(layer).__name__).lower()
        n = seen[cls] = seen.get(cls, -1) + 1
        name = f"layers/{cls}{f'_{n}' if n else ''}/vars/0"
        if mode == "float8" or (cls == "einsum_dense" and mode == "int8"):
            out[name] = None
        elif "embedding" in cls:
            out[name] = keras.ops.convert_to_numpy(layer(np.arange(layer.input_dim)[None]))[0]
        else:
            units = int(np.prod(layer.output.shape[1:]))
            x = torch.zeros(units, layer.input.shape[-1], requires_grad=True)
            layer(x).reshape(units, units).backward(torch.eye(units))
            out[name] = x.grad.detach().numpy().T.copy()
    return out


def _roles(variables: list) -> dict[str, int]:
    out: dict[str, int] = {}
    for name, _, _ in variables:
        if name in ROLES:
            out[ROLES[name]] = out.get(ROLES[name], 0) + 1
    return out


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("kind", ["keras", "h5"])
def test_counts_the_float_models_parameters(saved, case, kind):
    s = saved[case]
    if case.endswith("int4-channel") and CASES[case][0] != "dense" and kind == "h5":
        pytest.skip("a per-channel int4 Embedding's shapes are an int8 one's: no config, no mode (the next test)")
    r = summarize(s[kind])
    assert r["parameters"]["unique"] == s["logical"]
    q = r["quantization"]
    assert q is not None
    roles = {row["role"]: row["tensors"] for row in q["roles"]}
    expected = _roles(s["variables"])
    if s["mode"] == "float8":   # the kernel stays float, a parameter: only its state apart
        assert q["method"] == "keras float8" and q["weights"] == 0
        assert roles == expected
        apart = {row["role"]: row["elements"] for row in r["non_parameters"]}
        assert apart["amax-history"] == sum(int(np.prod(sh)) for n, sh, _ in s["variables"] if n.endswith("amax_history"))
        return
    assert q["method"] == f"keras {s['mode']}"
    assert q["weights"] == s["layers"] and q["logical_params"] == s["kernels"]
    kernel_role = "packed-weight" if s["mode"] == "int4" else "quantized-weight"
    assert roles == {kernel_role: s["layers"], **expected}
    stored = sum(int(np.prod(sh)) * dt.itemsize for n, sh, dt in s["variables"] if n != "bias")
    assert q["stored_bytes"] == stored
    assert q["methods"][0]["bits"] == (4 if s["mode"] == "int4" else 8)
    assert q["bits_per_weight"] == pytest.approx(stored * 8 / s["kernels"], abs=1e-4)
    if kind == "keras":
        assert q["source"] == "config.json dtype policies (keras)"


def test_a_per_channel_int4_embedding_takes_its_mode_from_the_config(saved):
    s = saved["embedding-int4-channel"]
    assert summarize(s["keras"])["parameters"]["unique"] == s["logical"]
    r = summarize(s["h5"])   # the shapes fit int8 too: read so, and said
    packed = next(int(np.prod(sh)) for n, sh, _ in s["variables"] if n == "embeddings")
    assert r["parameters"]["unique"] == packed
    assert any("per-channel int4" in n for n in r["quantization"]["notes"])


def test_variables_no_mode_lays_out_so_count_as_stored(saved, tmp_path):
    """An int8 first variable whose scale fits no kernel axis (an edited file) is no quantised weight: it stays a
    buffer, as before, and the other layers are read."""
    import h5py

    s = saved["dense-int8"]
    path = tmp_path / "edited.weights.h5"
    path.write_bytes(open(s["h5"], "rb").read())
    with h5py.File(path, "r+") as f:
        del f["layers/dense/vars/2"]
        f["layers/dense/vars/2"] = np.ones(5, "float32")
    r = summarize(str(path))
    q = r["quantization"]
    assert q["weights"] == s["layers"] - 1
    assert "layers/dense/vars/0" in next(row["names"] for row in r["non_parameters"] if row["role"] == "buffer")


@pytest.mark.parametrize("case", [c for c in CASES if CASES[c][1] != "float8"])
@pytest.mark.parametrize("kind", ["keras", "h5"])
def test_stats_read_the_kernels_keras_dequantises_as_its_values(saved, case, kind):
    """`stats` reads each int8 / int4 kernel keras dequantises as keras' float32 values, bit for bit, where the
    .keras config says the layers compute in float32; the rest, and every kernel of a bare .weights.h5 (which does not
    say), are listed as left quantised."""
    s = saved[case]
    if case.endswith("int4-channel") and CASES[case][0] != "dense" and kind == "h5":
        pytest.skip("read as int8 without the config (test_a_per_channel_int4_embedding_takes_its_mode_from_the_config)")
    view = dequantized.view(open_checkpoint(s[kind]), True)
    read = {name: v for name, v in s["values"].items() if v is not None and kind == "keras"}
    for name, v in read.items():
        got = view.read(name)
        assert got.dtype == np.float32 and got.shape == v.shape and np.array_equal(got, v), name
    r = collect(open_checkpoint(s[kind])).report
    rows = {row["name"]: row for row in r["tensors"]}
    for name, v in read.items():
        row, x = rows[name], v.astype(np.float64)
        assert (row["dtype"], row["count"], row["zeros"]) == ("F32", v.size, int((v == 0).sum()))
        assert row["min"] == x.min() and row["max"] == x.max() and row["mean"] == pytest.approx(x.mean(), abs=1e-12)
    assert (r["dequantized"] or {}).get("methods") == ({f"keras {s['mode']}": len(read)} if read else None)
    left = s["layers"] - len(read)   # EinsumDense int8; an untied ReversibleEmbedding's reverse table; .weights.h5
    assert r["left_quantized"] == ({f"keras {s['mode']}": left} if left else {})


@pytest.mark.parametrize("case", ["dense-int8", "dense-int4", "embedding-int4"])
def test_diff_of_the_float_model_and_its_quantised_save_is_the_quantisation_error(saved, case):
    """`diff` reads each kernel keras dequantises as its values: against the float model's, max |a - b| and cosine as
    numpy computes them over keras' values, chunk by chunk as whole. (An EinsumDense int4 kernel is stored flattened
    to [reduced, rest], a shape change; its int8 one is left as stored: not compared here.)"""
    from ckptstat.analysis.diff import diff

    s = saved[case]
    floats = open_checkpoint(s["float"])
    for chunk in (16 << 20, 64):
        by = {t["name"]: t for t in diff(floats, open_checkpoint(s["keras"]), chunk_bytes=chunk)["tensors"]}
        for name, v in s["values"].items():
            if v is None or "einsum" in name:
                continue
            x, y = floats.read(name).astype(np.float64).ravel(), v.astype(np.float64).ravel()
            t = by[name.replace("/", ".")]
            assert t["status"] == "values" and t["max_abs"] == np.max(np.abs(x - y)), name
            assert t["cosine"] == pytest.approx(np.dot(x, y) / (np.linalg.norm(x) * np.linalg.norm(y)), rel=1e-9)
        assert {t["status"] for n, t in by.items() if n.replace(".", "/") not in s["values"] and "einsum" not in n} <= {"equal"}


def test_a_mixed_precision_models_kernels_are_left_as_stored(tmp_path):
    """Under mixed_bfloat16 Keras computes the dequantised values in bfloat16 (its scales autocast): not read as float32
    values, listed as left quantised; still counted as the float model's parameters."""
    os.environ.setdefault("KERAS_BACKEND", "torch")
    keras = pytest.importorskip("keras")
    model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(7, dtype="mixed_bfloat16")])
    logical = model.count_params()
    model.quantize("int8")
    model.save(tmp_path / "mixed.keras")
    path = str(tmp_path / "mixed.keras")
    assert summarize(path)["parameters"]["unique"] == logical
    r = collect(open_checkpoint(path)).report
    assert r["dequantized"] is None and r["left_quantized"] == {"keras int8": 1}
