"""`ckptstat stats` of GPTQ, AWQ and NVIDIA modelopt NVFP4 checkpoints (their weights read as the values their library
dequantises them to), whole process each, in one run, against what a user would otherwise run: transformers loading the
model (gptqmodel's kernels) and each quantised module's own dequantisation (GPTQ: dequantize_weight; AWQ: gptqmodel's
dequantize_gemm over the module's pieces as loaded; NVFP4, which transformers does not load: modelopt's
NVFP4QTensor.dequantize over safe_open's tensors), then numpy's mean, std, min, max and the seven quantiles stats
reports (np.quantile).

The files: one llama layer (hidden 4096, intermediate 11008 by default) in each layout, random codes, zero points and
float16 scales (group 128) written by numpy and safetensors as gptqmodel lays them out (docs/quantized.md), with a
config.json naming the quantisation as its writer does: GPTQ v1 4-bit in input order, GPTQ v1 4-bit act-order
(a random g_idx), AWQ GEMM 4-bit; and NVFP4 as modelopt exports it (E2M1 codes, E4M3 scales a 16, weight_scale_2).
Usage:
    python bench/stats_gptq.py --gptq-python VENV/bin/python [--hidden 4096 --inter 11008] [--repeat 3]
        [--out bench/results/stats_gptq.md]
(VENV: the `gptq-fixtures` and `modelopt-fixtures` extras, as fixtures/make_gptqmodel.py and make_modelopt.py need.)
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _measure import compiled_env, emit, measured, per_value_table  # noqa: E402

ROOT = os.path.dirname(HERE)
GROUP = 128
LAYOUTS = {"gptq": "GPTQ v1 4-bit, input order", "gptq-actorder": "GPTQ v1 4-bit, act-order",
           "awq": "AWQ GEMM 4-bit", "nvfp4": "modelopt NVFP4"}


def build(out: str, layout: str, hidden: int, inter: int) -> None:
    """One llama layer's seven linears in `layout`, the rest float16, and its config.json."""
    from safetensors.numpy import save_file

    rng = np.random.default_rng(0)
    t: dict[str, np.ndarray] = {}

    def words(rows: int, cols: int) -> np.ndarray:
        return rng.integers(-2 ** 31, 2 ** 31, (rows, cols), dtype=np.int64).astype(np.int32)

    for name, (o, i) in {"self_attn.q_proj": (hidden, hidden), "self_attn.k_proj": (hidden, hidden),
                         "self_attn.v_proj": (hidden, hidden), "self_attn.o_proj": (hidden, hidden),
                         "mlp.gate_proj": (inter, hidden), "mlp.up_proj": (inter, hidden),
                         "mlp.down_proj": (hidden, inter)}.items():
        p = f"model.layers.0.{name}."
        if layout == "nvfp4":
            t[p + "weight"] = rng.integers(0, 256, (o, i // 2), dtype=np.uint8)
            t[p + "weight_scale"] = rng.integers(0x30, 0x50, (o, i // 16), dtype=np.uint8)   # (E4M3 bytes)
            t[p + "weight_scale_2"] = np.array(1e-4, dtype=np.float32)
            t[p + "input_scale"] = np.array(1e-2, dtype=np.float32)
            continue
        t[p + "scales"] = (rng.random((i // GROUP, o)) * 0.01 + 1e-3).astype(np.float16)
        t[p + "qzeros"] = words(i // GROUP, o // 8)
        if layout == "awq":
            t[p + "qweight"] = words(i, o // 8)
        else:
            t[p + "qweight"] = words(i // 8, o)
            g = np.arange(i, dtype=np.int32) // GROUP
            t[p + "g_idx"] = rng.permutation(g) if layout == "gptq-actorder" else g
    for n in ("input_layernorm", "post_attention_layernorm"):
        t[f"model.layers.0.{n}.weight"] = np.ones(hidden, dtype=np.float16)
    if layout == "nvfp4":   # (the E4M3 scales drawn as bytes, written as torch's float8)
        import torch
        from safetensors.torch import save_file as save_torch

        save_torch({k: torch.from_numpy(v).view(torch.float8_e4m3fn) if k.endswith(".weight_scale")
                    else torch.from_numpy(v) for k, v in t.items()}, os.path.join(out, "model.safetensors"))
    else:
        save_file(t, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    q = {"nvfp4": {"quant_method": "modelopt", "quant_algo": "NVFP4"},
         "awq": {"quant_method": "awq", "bits": 4, "group_size": GROUP, "zero_point": True, "version": "gemm"}}.get(
        layout, {"quant_method": "gptq", "bits": 4, "group_size": GROUP, "sym": False,
                 "desc_act": layout == "gptq-actorder", "checkpoint_format": "gptq"})
    json.dump(dict(model_type="llama", architectures=["LlamaForCausalLM"], hidden_size=hidden, intermediate_size=inter,
                   num_hidden_layers=1, num_attention_heads=hidden // 128, num_key_value_heads=hidden // 128,
                   vocab_size=32000, dtype="float16", tie_word_embeddings=False, quantization_config=q),
              open(os.path.join(out, "config.json"), "w"))


NVFP4_LIBRARY = """
import sys
import numpy as np
import torch
from modelopt.torch.quantization.qtensor.nvfp4_tensor import NVFP4QTensor
from safetensors import safe_open
out = []
with safe_open(sys.argv[1] + "/model.safetensors", "pt") as f:
    for k in f.keys():
        if not k.endswith(".weight_scale_2"):
            continue
        m = k[:-len(".weight_scale_2")]
        packed = f.get_tensor(m + ".weight")
        q = NVFP4QTensor(torch.Size((packed.shape[0], packed.shape[1] * 2)), torch.float16, packed)
        x = q.dequantize(scale=f.get_tensor(m + ".weight_scale"), double_scale=f.get_tensor(k), block_sizes={-1: 16})
        v = x.float().numpy().astype(np.float64).ravel()
        out.append([v.mean(), v.std(), v.min(), v.max(), *np.quantile(v, [0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99])])
print(len(out))
"""

LIBRARY = """
import sys
import numpy as np
import torch
from transformers import AutoModelForCausalLM
model = AutoModelForCausalLM.from_pretrained(sys.argv[1], device_map="cpu")
awq = sys.argv[2] == "awq"
if awq:
    from gptqmodel.quantization.awq.utils.packing_utils import dequantize_gemm
    from safetensors import safe_open
    f = safe_open(sys.argv[1] + "/model.safetensors", "pt")   # (the CPU kernel repacked the module's words on load)
out = []
with torch.no_grad():
    for name, m in model.named_modules():
        if not hasattr(m, "qzeros"):
            continue
        if awq:
            x = dequantize_gemm(*(f.get_tensor(f"{name}.{k}") for k in ("qweight", "qzeros", "scales")), 4, m.group_size)
        else:
            x = m.dequantize_weight()
        v = x.float().numpy().astype(np.float64).ravel()
        out.append([v.mean(), v.std(), v.min(), v.max(), *np.quantile(v, [0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99])])
print(len(out))
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gptq-python", required=True, help="an interpreter with the gptq-fixtures extra")
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--inter", type=int, default=11008)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out")
    args = ap.parse_args()
    env = compiled_env()
    lib_env = compiled_env(OMP_NUM_THREADS="2", GPTQMODEL_CPU_WORKERS="2")
    ck = [sys.executable, "-m", "ckptstat"]
    versions = subprocess.run([args.gptq_python, "-c", "from importlib.metadata import version as v; "
                               "print(v('gptqmodel'), v('transformers'), v('torch'))"], capture_output=True,
                              text=True, check=True, env=lib_env).stdout.split()
    lines = ["# stats of GPTQ, AWQ and NVFP4 checkpoints: ckptstat against their libraries' dequantisers + numpy", "",
             f"Machine: {platform.machine()}, {os.cpu_count()} cores (shared), Python {platform.python_version()}, "
             f"gptqmodel {versions[0]}, transformers {versions[1]}, torch {versions[2]} (CPU); median of "
             f"{args.repeat} whole-process runs after a warm-up. Files: one llama layer of hidden {args.hidden}, "
             f"intermediate {args.inter}, random 4-bit codes and zero points, float16 scales a group of {GROUP} "
             "(NVFP4: E4M3 scales a group of 16; bench/stats_gptq.py build).", ""]
    for layout, title in LAYOUTS.items():
        with tempfile.TemporaryDirectory() as tmp:
            build(tmp, layout, args.hidden, args.inter)
            size = os.path.getsize(os.path.join(tmp, "model.safetensors"))
            report = json.loads(subprocess.run([*ck, "stats", tmp, "--json", "--no-progress"], capture_output=True,
                                               text=True, env=env, cwd=ROOT, check=True).stdout)
            values = report["total"]["count"]
            base_name = ("modelopt NVFP4QTensor.dequantize + numpy (mean, std, min, max, 7 quantiles)" if layout == "nvfp4"
                         else "transformers + gptqmodel dequantise + numpy (mean, std, min, max, 7 quantiles)")
            library = ([args.gptq_python, "-c", NVFP4_LIBRARY, tmp] if layout == "nvfp4"
                       else [args.gptq_python, "-c", LIBRARY, tmp, layout.split("-")[0]])
            cmds = {base_name: (library, lib_env),
                    "ckptstat stats": ([*ck, "stats", tmp, "--no-progress"], env),
                    "ckptstat stats --workers 2": ([*ck, "stats", tmp, "--no-progress", "--workers", "2"], env)}
            rows = measured(cmds, args.repeat, ROOT)
        lines += [f"{title}: {size / 2**20:.0f} MiB, {report['dequantized']['weights']} quantised weights, "
                  f"{values:,} values.", "", *per_value_table(rows, base_name, values, "library + numpy"), ""]
    emit("\n".join(lines), args.out)


if __name__ == "__main__":
    main()
