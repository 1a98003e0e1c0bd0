"""Issue 22: `ckptstat stats` against a plain numpy pass, on F32, F16 and BF16, and --workers scaling.

Files (written by safetensors.torch.save_file from torch tensors, N(0, 0.02) values, under
bench/_work/): one per dtype of --size-mb MiB in 16 MiB tensors, and a "many tensors" BF16 file of
--size-mb MiB in 1 MiB tensors for the worker scaling. Contenders, each a whole process, page cache
warm (every file is read once first):

- numpy pass: per tensor, per 4 MiB chunk (np.fromfile), widen to float32 (F16 astype, BF16 shift),
  then min, max, sum (float64), sum of squares (float64), zeros, finiteness and a 256-bin
  np.histogram: the obvious per-chunk loop (it computes less than ckptstat: no quantiles, no layer
  or bucket groups);
- ckptstat stats FILE --json (1 worker), and -w 2 on the many-tensor file.

Also measured in the same run: memory bandwidth as a numpy copy of a 256 MiB array (bytes copied per
second), printed beside each contender's bytes read per second. Wall and CPU (user + sys) seconds
are both reported: on a shared machine, CPU time is the steadier figure.
Usage: python bench/stats_kernels.py [--size-mb 512] [--repeat 3] [--out bench/results/stats_kernels.md]
"""
from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _measure import emit, measure  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
WORK = os.path.join(HERE, "_work")

NUMPY_PASS = r'''
import json, struct, sys
import numpy as np
path, chunk = sys.argv[1], 4 << 20
with open(path, "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    header = json.loads(f.read(n))
header.pop("__metadata__", None)
size = {"F32": 4, "F16": 2, "BF16": 2}
out = []
for name, e in header.items():
    b, end = e["data_offsets"]
    w = size[e["dtype"]]
    for at in range(b, end, chunk):
        count = min(chunk, end - at) // w
        raw = np.fromfile(path, dtype="<f4" if w == 4 else "<u2", count=count, offset=8 + n + at)
        if e["dtype"] == "F16":
            x = raw.view(np.float16).astype(np.float32)
        elif e["dtype"] == "BF16":
            x = (raw.astype(np.uint32) << 16).view(np.float32)
        else:
            x = raw
        finite = np.isfinite(x)
        if not finite.all():
            x = x[finite]
        x64 = x.astype(np.float64)
        out.append((x.min(), x.max(), x64.sum(), (x64 * x64).sum(), x.size - np.count_nonzero(x),
                    np.histogram(x, bins=256)[0]))
print(len(out))
'''

BANDWIDTH = r'''
import time, numpy as np
a = np.ones(256 << 20, dtype=np.uint8)
b = np.empty_like(a)
best = min((lambda t: (np.copyto(b, a), time.perf_counter() - t)[1])(time.perf_counter()) for _ in range(5))
print(a.nbytes / best)
'''


def build(name: str, dtype: str, size_mb: int, tensor_mb: int) -> str:
    path = os.path.join(WORK, f"{name}.safetensors")
    if os.path.exists(path):
        return path
    import torch
    from safetensors.torch import save_file

    os.makedirs(WORK, exist_ok=True)
    dt = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}[dtype]
    g = torch.Generator().manual_seed(size_mb)
    numel = tensor_mb * (1 << 20) // dt.itemsize
    tensors = {f"model.layers.{i}.mlp.down_proj.weight": (torch.randn(numel, generator=g) * 0.02).to(dt).reshape(-1, 1024)
               for i in range(max(1, size_mb // tensor_mb))}
    save_file(tensors, path + ".tmp")
    os.replace(path + ".tmp", path)
    return path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-mb", type=int, default=512)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", choices=["dtypes", "workers"], help="run only those rows")
    ap.add_argument("--out")
    ap.add_argument("--build", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.build:
        print(build(args.build[0], args.build[1], int(args.build[2]), int(args.build[3])))
        return
    py = sys.executable
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = os.path.join(WORK, "pyc")
    files = {}
    wanted = {"dtypes": ("f32", "f16", "bf16"), "workers": ("bf16-many",)}.get(args.only, ("f32", "f16", "bf16", "bf16-many"))
    for name, dtype, tensor_mb in (("f32", "F32", 16), ("f16", "F16", 16), ("bf16", "BF16", 16),
                                   ("bf16-many", "BF16", 1)):
        if name not in wanted:
            continue
        # built in a child, so that this measuring parent stays small
        files[name] = subprocess.run([py, __file__, "--build", f"{name}-{args.size_mb}mb", dtype, str(args.size_mb),
                                      str(tensor_mb)], check=True, capture_output=True, text=True).stdout.strip()
        with open(files[name], "rb") as f:   # warm the page cache
            while f.read(64 << 20):
                pass
    bandwidth = float(subprocess.run([py, "-c", BANDWIDTH], check=True, capture_output=True, text=True).stdout)
    ck = [py, "-m", "ckptstat", "stats"]
    runs = [("F32", "f32", "numpy pass", [py, "-c", NUMPY_PASS]), ("F32", "f32", "ckptstat -w1", ck + ["-w", "1"]),
            ("F16", "f16", "numpy pass", [py, "-c", NUMPY_PASS]), ("F16", "f16", "ckptstat -w1", ck + ["-w", "1"]),
            ("BF16", "bf16", "numpy pass", [py, "-c", NUMPY_PASS]), ("BF16", "bf16", "ckptstat -w1", ck + ["-w", "1"]),
            ("BF16, 1 MiB tensors", "bf16-many", "ckptstat -w1", ck + ["-w", "1"]),
            ("BF16, 1 MiB tensors", "bf16-many", "ckptstat -w2", ck + ["-w", "2"])]
    if args.only:
        runs = [r for r in runs if (r[1] == "bf16-many") == (args.only == "workers")]
    rows = []
    for label, key, who, cmd in runs:
        path = files[key]
        full = cmd + [path] if who == "numpy pass" else cmd[:4] + [path, "--json", "--no-progress"] + cmd[4:]
        measure(full, repeat=1, env=env, cwd=WORK)   # warm-up (byte-compile)
        r = measure(full, repeat=args.repeat, env=env, cwd=WORK)
        assert r["ok"], full
        rows.append((label, who, os.path.getsize(path), r))
        print(label, who, r, file=sys.stderr, flush=True)
    base = {label: r for label, who, _, r in rows if who == "numpy pass"}
    w1 = {label: r for label, who, _, r in rows if who == "ckptstat -w1"}
    load = os.getloadavg()
    lines = ["# `ckptstat stats` against a plain numpy pass", "",
             f"{time.strftime('%Y-%m-%d')}; {platform.machine()}, {os.cpu_count()} cores, Python "
             f"{platform.python_version()}; median of {args.repeat} whole-process runs after a warm-up, page cache warm; "
             f"files of {args.size_mb} MiB written by safetensors.torch. Memory bandwidth (numpy copy of 256 MiB, same "
             f"run): **{bandwidth / 2**30:.2f} GiB/s** copied. Load average at the end: {load[0]:.1f} / {load[1]:.1f} / "
             f"{load[2]:.1f} (2 cores: above ~0.5, -w2 competes with other jobs).", "",
             "| file | contender | wall | CPU (user+sys) | read rate (wall) | wall vs numpy | CPU vs numpy | "
             "peak RSS |", "|---|---|---|---|---|---|---|---|"]
    for label, who, size, r in rows:
        ref = base.get(label) or w1[label]
        lines.append(f"| {label} | {who} | {r['wall_s']:.2f} s | {r['cpu_s']:.2f} s | "
                     f"{size / 2**20 / r['wall_s']:.0f} MiB/s | {r['wall_s'] / ref['wall_s']:.2f}x | "
                     f"{r['cpu_s'] / ref['cpu_s']:.2f}x | {r['rss_mib']:.0f} MiB |")
    lines += ["", "On the many-tensor rows the reference is `ckptstat -w1` (so `-w2`'s wall ratio is 1 / speed-up).",
              "Goals (issue 22): ckptstat <= 0.5x the numpy pass on F32, F16 and BF16; -w2 >= 1.7x faster than -w1."]
    emit("\n".join(lines) + "\n", args.out)


if __name__ == "__main__":
    main()
