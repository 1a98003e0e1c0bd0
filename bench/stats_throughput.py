"""Throughput and peak RSS of `ckptstat stats` against a plain numpy loop computing the same statistics.

    python bench/stats_throughput.py [--sizes-mb 256 1024 2048] [--repeat 1] [--only cat "ckptstat -w2"]

Builds bf16 safetensors files of the given sizes (layers of 64 MiB tensors, written by the safetensors
library from torch tensors) under bench/_work/, then runs each contender in its own subprocess and
reads the peak RSS of that process (resource.getrusage(RUSAGE_CHILDREN) in a fresh wrapper process):

- numpy: for each tensor, np.fromfile its bytes, widen bf16 to float32, then min, max, mean, std,
  mean |x|, L2, zeros, NaN, Inf and np.quantile at 1, 5, 25, 50, 75, 95, 99 % (the per-tensor part of
  what ckptstat computes; ckptstat also merges layer, bucket and total accumulators);
- ckptstat stats --json, 1 worker, and --workers 2 (RSS: the largest single process);
- cat: `cat FILE > /dev/null`, the cost of reading the bytes (issue 35's yardstick: stats within 2x of it).
The file is read once before timing so that every contender reads from the page cache.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
WORK = os.path.join(HERE, "_work")
TENSOR_MB = 64

NUMPY_LOOP = r'''
import json, struct, sys
import numpy as np
path = sys.argv[1]
with open(path, "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    header = json.loads(f.read(n))
header.pop("__metadata__", None)
out = {}
for name, e in header.items():
    b, end = e["data_offsets"]
    raw = np.fromfile(path, dtype="<u2", count=(end - b) // 2, offset=8 + n + b)
    x = (raw.astype(np.uint32) << 16).view(np.float32)
    fin = x[np.isfinite(x)]
    out[name] = dict(min=float(fin.min()), max=float(fin.max()), mean=float(fin.mean(dtype=np.float64)),
                     std=float(fin.std(dtype=np.float64)), mean_abs=float(np.abs(fin).mean(dtype=np.float64)),
                     l2=float(np.linalg.norm(fin.astype(np.float64))), zeros=int(x.size - np.count_nonzero(x)),
                     nan=int(np.isnan(x).sum()), inf=int(np.isinf(x).sum()),
                     q=np.quantile(fin, [0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99]).tolist())
json.dump(out, open("/dev/null", "w"))
'''

WRAP = ("import resource, subprocess, sys, time; t = time.perf_counter(); "
        "rc = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode; "
        "print(time.perf_counter() - t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, rc)")


def build(size_mb: int) -> str:
    path = os.path.join(WORK, f"bf16-{size_mb}mb.safetensors")
    if os.path.exists(path):
        return path
    import torch
    from safetensors.torch import save_file

    os.makedirs(WORK, exist_ok=True)
    g = torch.Generator().manual_seed(size_mb)
    numel = TENSOR_MB * (1 << 20) // 2
    tensors = {}
    for i in range(max(1, size_mb // TENSOR_MB)):
        tensors[f"model.layers.{i}.mlp.down_proj.weight"] = (torch.randn(numel, generator=g) * 0.02).bfloat16().reshape(-1, 4096)
    save_file(tensors, path + ".tmp")
    del tensors
    os.replace(path + ".tmp", path)
    return path


def measure(cmd: list[str]) -> tuple[float, float]:
    out = subprocess.run([sys.executable, "-c", WRAP, *cmd], capture_output=True, text=True, check=True, cwd=ROOT)
    wall, rss_kb, rc = out.stdout.split()
    if rc != "0":
        raise SystemExit(f"{cmd} failed with {rc}")
    return float(wall), int(rss_kb) / 1024


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes-mb", type=int, nargs="+", default=[256, 1024, 2048])
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--only", nargs="+", help="the contenders to run (default: all)")
    args = ap.parse_args()
    contenders = {
        "cat": lambda p: ["cat", p],
        "numpy loop": lambda p: [sys.executable, "-c", NUMPY_LOOP, p],
        "ckptstat -w1": lambda p: [sys.executable, "-m", "ckptstat", "stats", p, "--json", "--no-progress"],
        "ckptstat -w2": lambda p: [sys.executable, "-m", "ckptstat", "stats", p, "--json", "--no-progress", "-w", "2"],
    }
    print(f"machine: {platform.machine()}, {os.cpu_count()} cpus, python {platform.python_version()}")
    contenders = {k: v for k, v in contenders.items() if not args.only or k in args.only}
    yardstick = "numpy loop" if "numpy loop" in contenders else next(iter(contenders))
    print(f"| file (bf16) | contender | wall s | MB/s | peak RSS MiB | wall / {yardstick} |")
    print("|---|---|---|---|---|---|")
    for size in args.sizes_mb:
        path = build(size)
        nbytes = os.path.getsize(path)
        with open(path, "rb") as f:   # warm the page cache
            while f.read(64 << 20):
                pass
        results = {}
        for name, cmd in contenders.items():
            best = min((measure(cmd(path)) for _ in range(args.repeat)), key=lambda r: r[0])
            results[name] = best
        base = results[yardstick][0]
        for name, (wall, rss) in results.items():
            print(f"| {nbytes / 2**20:.0f} MiB | {name} | {wall:.2f} | {nbytes / 2**20 / wall:.0f} | {rss:.0f} "
                  f"| {wall / base:.2f} |", flush=True)
    print(json.dumps({"time": time.strftime("%Y-%m-%d %H:%M")}))


if __name__ == "__main__":
    main()
