"""`ckptstat stats` of an Apple MLX 4-bit checkpoint (its quantised weights read as the values mx.dequantize returns),
whole process each, in one run, against what a user would otherwise run: mlx itself loading the file and calling
mx.dequantize on every quantised weight, then numpy's mean, std, min, max and the seven quantiles stats reports
(np.quantile), and the same without the quantiles.

The file is written by mlx (`mx.quantize` of random normal bf16 weights, affine 4-bit, group 64; mx.save_safetensors
with mlx_lm's metadata and a config.json naming the quantisation) for a llama of the sizes given. Usage:
    python bench/stats_dequantized.py --mlx-python VENV/bin/python [--hidden 2048 --inter 5632 --layers 4]
        [--repeat 3] [--out bench/results/stats_dequantized.md]
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
from _measure import compiled_env, emit, measure  # noqa: E402

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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mlx-python", required=True, help="an interpreter with mlx (pip install 'mlx[cpu]')")
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--inter", type=int, default=5632)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=32000)
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
        rows = {}
        for name, (cmd, e) in cmds.items():
            measure(cmd, 1, env=e, cwd=ROOT)   # warm-up: byte-compile, page cache
            rows[name] = measure(cmd, args.repeat, env=e, cwd=ROOT)
            assert rows[name]["ok"], name
    base = rows["mlx load + mx.dequantize + numpy (mean, std, min, max, 7 quantiles)"]
    lines = ["# stats of an MLX 4-bit checkpoint: ckptstat against mlx's own dequantize + numpy", "",
             f"Machine: {platform.machine()}, {os.cpu_count()} cores (shared), Python {platform.python_version()}, "
             f"mlx {mlx_version} (CPU); median of {args.repeat} whole-process runs after a warm-up. File: mlx's "
             f"mx.quantize of random bf16 weights (affine 4-bit, group 64) for a llama of hidden {args.hidden}, "
             f"intermediate {args.inter}, {args.layers} layers, vocab {args.vocab}: {size / 2**20:.0f} MiB, "
             f"{report['dequantized']['weights']} quantised weights, {values:,} values in all.", "",
             "| command | wall | CPU user+sys | ns / value (CPU) | x mlx + numpy (wall) | peak RSS |",
             "|---|---|---|---|---|---|"]
    for name, r in rows.items():
        lines.append(f"| {name} | {r['wall_s']:.2f} s | {r['cpu_s']:.2f} s | {1e9 * r['cpu_s'] / values:.1f} | "
                     f"{r['wall_s'] / base['wall_s']:.2f}x | {r['rss_mib']:.0f} MiB |")
    emit("\n".join(lines) + "\n", args.out)


if __name__ == "__main__":
    main()
