"""`ckptstat stats` of quantised checkpoints (their weights read as the values their library dequantises them to),
whole process each, in one run, against what a user would otherwise run: the library dequantising every quantised
weight, then numpy's mean, std, min, max and the seven quantiles stats reports (np.quantile).

- an Apple MLX 4-bit llama written by mlx (`mx.quantize` of random normal bf16 weights, affine 4-bit, group 64;
  mx.save_safetensors with mlx_lm's metadata and a config.json naming the quantisation), against mlx loading it and
  calling mx.dequantize (with and without the quantiles);
- with --fp8, also a block-scaled FP8 llama layer (DeepSeek-V3's layout, 128 x 128 blocks, quantised by
  fixtures/make_quantized.py fp8_blocks, as its write_fp8 does), against transformers' own Fp8Dequantize over safe_open.
Usage:
    python bench/stats_dequantized.py --mlx-python VENV/bin/python [--hidden 2048 --inter 5632 --layers 4]
        [--fp8] [--repeat 3] [--out bench/results/stats_dequantized.md]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _measure import compiled_env, emit, measured, per_value_table  # noqa: E402

ROOT = os.path.dirname(HERE)

BUILD = """
import json, os, sys
import mlx.core as mx
out, hidden, inter, layers, vocab = sys.argv[1], *map(int, sys.argv[2:6])
mx.random.seed(0)
arrays = {}
def linear(name, rows, cols):
    w = (mx.random.normal((rows, cols)) * 0.02).astype(mx.bfloat16)
    q, s, b = mx.quantize(w, group_size=64, bits=4)
    mx.eval(q, s, b)
    arrays[name + ".weight"], arrays[name + ".scales"], arrays[name + ".biases"] = q, s, b
linear("model.embed_tokens", vocab, hidden)
for i in range(layers):
    p = f"model.layers.{i}."
    for n, (r, c) in {"self_attn.q_proj": (hidden, hidden), "self_attn.k_proj": (hidden, hidden),
                      "self_attn.v_proj": (hidden, hidden), "self_attn.o_proj": (hidden, hidden),
                      "mlp.gate_proj": (inter, hidden), "mlp.up_proj": (inter, hidden),
                      "mlp.down_proj": (hidden, inter)}.items():
        linear(p + n, r, c)
    arrays[p + "input_layernorm.weight"] = mx.ones((hidden,), dtype=mx.bfloat16)
    arrays[p + "post_attention_layernorm.weight"] = mx.ones((hidden,), dtype=mx.bfloat16)
arrays["model.norm.weight"] = mx.ones((hidden,), dtype=mx.bfloat16)
linear("lm_head", vocab, hidden)
mx.save_safetensors(os.path.join(out, "model.safetensors"), arrays, metadata={"format": "mlx"})
cfg = dict(model_type="llama", architectures=["LlamaForCausalLM"], hidden_size=hidden, intermediate_size=inter,
           num_hidden_layers=layers, num_attention_heads=hidden // 128, num_key_value_heads=hidden // 128,
           vocab_size=vocab, rms_norm_eps=1e-5, tie_word_embeddings=False, torch_dtype="bfloat16",
           quantization={"group_size": 64, "bits": 4, "mode": "affine"})
json.dump(cfg, open(os.path.join(out, "config.json"), "w"))
"""

# what a user would run: mlx loads the file, dequantises each quantised weight, numpy reduces it
MLX_LOOP = """
import sys
import numpy as np
import mlx.core as mx
quantiles = sys.argv[2] == "1"
a = mx.load(sys.argv[1] + "/model.safetensors")
out = []
for name in sorted(a):
    if name.endswith((".scales", ".biases")):
        continue
    base = name[:-len(".weight")]
    if base + ".scales" in a:
        w = mx.dequantize(a[name], a[base + ".scales"], a[base + ".biases"], group_size=64, bits=4)
    else:
        w = a[name]
    x = np.array(w.astype(mx.float32)).astype(np.float64).reshape(-1)
    row = [x.mean(), x.std(), x.min(), x.max()]
    if quantiles:
        row += list(np.quantile(x, [0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99]))
    out.append(row)
print(len(out))
"""


FP8_BUILD = """
import json, os, sys
import torch
from safetensors.torch import save_file
sys.path.insert(0, sys.argv[4])
from make_quantized import fp8_blocks
out, hidden, inter = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
torch.manual_seed(0)
t = {}
for n, (r, c) in {"self_attn.q_proj": (hidden, hidden), "self_attn.k_proj": (hidden, hidden),
                  "self_attn.v_proj": (hidden, hidden), "self_attn.o_proj": (hidden, hidden),
                  "mlp.gate_proj": (inter, hidden), "mlp.up_proj": (inter, hidden), "mlp.down_proj": (hidden, inter)}.items():
    t[f"model.layers.0.{n}.weight"], t[f"model.layers.0.{n}.weight_scale_inv"] = fp8_blocks(torch.randn(r, c) * 0.02,
                                                                                             (128, 128))
t["model.layers.0.input_layernorm.weight"] = torch.ones(hidden, dtype=torch.bfloat16)
save_file(t, os.path.join(out, "model.safetensors"))
json.dump(dict(model_type="llama", architectures=["LlamaForCausalLM"], hidden_size=hidden, intermediate_size=inter,
               num_hidden_layers=1, num_attention_heads=hidden // 128, num_key_value_heads=hidden // 128,
               vocab_size=32000, dtype="bfloat16", quantization_config={"quant_method": "fp8",
               "activation_scheme": "dynamic", "weight_block_size": [128, 128]}),
          open(os.path.join(out, "config.json"), "w"))
"""

FP8_LOOP = """
import sys
import numpy as np
import torch
from safetensors import safe_open
from transformers.integrations.finegrained_fp8 import Fp8Dequantize
d, out = Fp8Dequantize(None), []
with safe_open(sys.argv[1] + "/model.safetensors", "pt") as f:
    for k in f.keys():
        if k.endswith("_scale_inv"):
            continue
        x = f.get_tensor(k)
        if x.dtype == torch.float8_e4m3fn:
            x = d._dequantize_one(x, f.get_tensor(k + "_scale_inv"), torch.bfloat16)
        v = x.float().numpy().astype(np.float64).ravel()
        out.append([v.mean(), v.std(), v.min(), v.max(), *np.quantile(v, [0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99])])
print(len(out))
"""


def fp8_rows(args: argparse.Namespace, env: dict, ck: list[str]) -> list[str]:
    """The block-scaled FP8 file's rows of the table."""
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-c", FP8_BUILD, tmp, str(args.fp8_hidden), str(args.fp8_inter),
                        os.path.join(ROOT, "fixtures")], check=True)
        size = os.path.getsize(os.path.join(tmp, "model.safetensors"))
        report = json.loads(subprocess.run([*ck, "stats", tmp, "--json", "--no-progress"], capture_output=True,
                                           text=True, env=env, cwd=ROOT, check=True).stdout)
        values = report["total"]["count"]
        base = "transformers Fp8Dequantize + numpy (mean, std, min, max, 7 quantiles)"
        rows = measured({base: ([sys.executable, "-c", FP8_LOOP, tmp], env),
                         "ckptstat stats (FP8)": ([*ck, "stats", tmp, "--no-progress"], env)}, args.repeat, ROOT)
    return ["", f"Block-scaled FP8 (128 x 128 blocks, float32 weight_scale_inv, one llama layer of hidden "
            f"{args.fp8_hidden}, intermediate {args.fp8_inter}: {size / 2**20:.0f} MiB, {values:,} values):", "",
            *per_value_table(rows, base, values, "transformers + numpy")]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mlx-python", required=True, help="an interpreter with mlx (pip install 'mlx[cpu]')")
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--inter", type=int, default=5632)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--fp8", action="store_true", help="also a block-scaled FP8 file against transformers")
    ap.add_argument("--fp8-hidden", type=int, default=4096)
    ap.add_argument("--fp8-inter", type=int, default=11008)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out")
    args = ap.parse_args()
    env = compiled_env()
    mlx_env = compiled_env(OMP_NUM_THREADS="2")
    ck = [sys.executable, "-m", "ckptstat"]
    mlx_version = subprocess.run([args.mlx_python, "-c", "import mlx.core as mx; print(mx.__version__)"],
                                 capture_output=True, text=True, check=True).stdout.strip()
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([args.mlx_python, "-c", BUILD, tmp, str(args.hidden), str(args.inter), str(args.layers),
                        str(args.vocab)], check=True)
        size = os.path.getsize(os.path.join(tmp, "model.safetensors"))
        check = subprocess.run([*ck, "stats", tmp, "--json", "--no-progress"], capture_output=True, text=True,
                               env=env, cwd=ROOT, check=True)
        report = json.loads(check.stdout)
        values = report["total"]["count"]
        cmds = {
            "mlx load + mx.dequantize + numpy (mean, std, min, max, 7 quantiles)": (
                [args.mlx_python, "-c", MLX_LOOP, tmp, "1"], mlx_env),
            "mlx load + mx.dequantize + numpy (mean, std, min, max)": ([args.mlx_python, "-c", MLX_LOOP, tmp, "0"],
                                                                       mlx_env),
            "ckptstat stats": ([*ck, "stats", tmp, "--no-progress"], env),
            "ckptstat stats --workers 2": ([*ck, "stats", tmp, "--no-progress", "--workers", "2"], env),
            "ckptstat summary (header only)": ([*ck, "summary", tmp], env),
        }
        rows = measured(cmds, args.repeat, ROOT)
    lines = ["# stats of quantised checkpoints: ckptstat against the libraries' own dequantisers + numpy", "",
             f"Machine: {platform.machine()}, {os.cpu_count()} cores (shared), Python {platform.python_version()}, "
             f"mlx {mlx_version} (CPU); median of {args.repeat} whole-process runs after a warm-up. File: mlx's "
             f"mx.quantize of random bf16 weights (affine 4-bit, group 64) for a llama of hidden {args.hidden}, "
             f"intermediate {args.inter}, {args.layers} layers, vocab {args.vocab}: {size / 2**20:.0f} MiB, "
             f"{report['dequantized']['weights']} quantised weights, {values:,} values in all.", "",
             "An Apple MLX 4-bit checkpoint:", "",
             *per_value_table(rows, "mlx load + mx.dequantize + numpy (mean, std, min, max, 7 quantiles)", values,
                              "mlx + numpy")]
    if args.fp8:
        lines += fp8_rows(args, env, ck)
    emit("\n".join(lines) + "\n", args.out)


if __name__ == "__main__":
    main()
