"""Issue 22: `ckptstat stats` against a plain numpy pass, on F32, F16, BF16 and FP8 (E4M3), and --workers scaling.

Files (written by safetensors.torch.save_file from torch tensors, N(0, 0.02) values, N(0, 1) for FP8, under
bench/_work/): one per dtype of --size-mb MiB in 16 MiB tensors, and a "many tensors" BF16 file of
--size-mb MiB in 1 MiB tensors for the worker scaling. Contenders, each a whole process, page cache
warm (every file is read once first):

- numpy pass: per tensor, per 4 MiB chunk (np.fromfile), widen to float32 (F16 astype, BF16 shift, FP8 a
  256-value table),
  then min, max, sum (float64), sum of squares (float64), zeros, finiteness and a 256-bin
  np.histogram: the obvious per-chunk loop (it computes less than ckptstat: no quantiles, no layer
  or bucket groups);
- ckptstat stats FILE --json (1 worker), and -w 2 on the many-tensor file;
- with --only workers (issue 35's yardstick: a warm 2 GB bf16 file within 2x of reading it), the floors of
  reading each file: `cat FILE > /dev/null` and a plain Python loop reading it into one 16 MiB buffer
  (readinto), beside ckptstat -w1 and -w2 on the 1 MiB-tensor file and on the 16 MiB-tensor BF16 file; and the
  floor of any `-w2` of this design on this machine: the start of a `stats` (of a 1 MiB file) plus half the compiled
  count's time for the file's values at its best (from the L2 cache: no file, no page fault), as if two cores each
  counted half at full speed.

Contenders are alternated: each round runs every contender once, and the median of the rounds is kept.

Also measured in the same run: memory bandwidth as a numpy copy of a 256 MiB array (bytes copied per
second), printed beside each contender's bytes read per second. Wall and CPU (user + sys) seconds
are both reported: on a shared machine, CPU time is the steadier figure.
Usage: python bench/stats_kernels.py [--size-mb 512] [--repeat 3] [--only dtypes|workers] [--more-workers 4,8]
[--out FILE]
(issue 35's rows: --size-mb 2048 --only workers --out bench/results/stats_kernels_2048.md)
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _measure import compiled_env, emit, measure  # noqa: E402

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
size = {"F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1}
b = np.arange(256)   # E4M3FN's 256 values (sign, 4 exponent bits biased by 7, 3 mantissa bits; 0x7F/0xFF NaN)
e, m = (b >> 3) & 0xF, b & 7
e4m3 = (np.where(e == 0, m / 8 * 2.0 ** -6, (1 + m / 8) * 2.0 ** (e - 7)) * np.where(b & 0x80, -1, 1)).astype(np.float32)
e4m3[(b & 0x7F) == 0x7F] = np.nan
out = []
for name, e in header.items():
    b, end = e["data_offsets"]
    w = size[e["dtype"]]
    for at in range(b, end, chunk):
        count = min(chunk, end - at) // w
        raw = np.fromfile(path, dtype={4: "<f4", 2: "<u2", 1: "u1"}[w], count=count, offset=8 + n + at)
        if e["dtype"] == "F16":
            x = raw.view(np.float16).astype(np.float32)
        elif e["dtype"] == "BF16":
            x = (raw.astype(np.uint32) << 16).view(np.float32)
        elif e["dtype"] == "F8_E4M3":
            x = e4m3[raw]
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

READ_LOOP = r'''
import sys
buf = bytearray(16 << 20)
with open(sys.argv[1], "rb", buffering=0) as f:
    while f.readinto(buf):
        pass
'''

COUNT_FLOOR = r'''
import sys, time
import numpy as np
from ckptstat.analysis.stats import _count16
bits = ((np.random.default_rng(0).standard_normal(1 << 19).astype(np.float32) * 0.02).view(np.uint32) >> 16).astype(np.uint16)
hist = np.zeros(65536, dtype=np.int64)
_count16.add(bits, hist)   # 1 MiB of N(0, 0.02) patterns, counted again and again from the L2 cache: no file, no fault
t = time.perf_counter()
for _ in range(int(sys.argv[1]) // 2 // bits.size):
    _count16.add(bits, hist)
print(time.perf_counter() - t)
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
    dt = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "F8_E4M3": torch.float8_e4m3fn}[dtype]
    scale = 1.0 if dtype == "F8_E4M3" else 0.02   # (FP8 weights carry a block scale: their values span its range)
    g = torch.Generator().manual_seed(size_mb)
    numel = tensor_mb * (1 << 20) // dt.itemsize
    tensors = {f"model.layers.{i}.mlp.down_proj.weight": (torch.randn(numel, generator=g) * scale).to(dt).reshape(-1, 1024)
               for i in range(max(1, size_mb // tensor_mb))}
    save_file(tensors, path + ".tmp")
    os.replace(path + ".tmp", path)
    return path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-mb", type=int, default=512)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", choices=["dtypes", "workers"], help="run only those rows")
    ap.add_argument("--more-workers", default="", help="with --only workers: -w N rows beyond -w1 and -w2 "
                                                        "(comma-separated: a machine of more cores)")
    ap.add_argument("--out")
    ap.add_argument("--build", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.build:
        print(build(args.build[0], args.build[1], int(args.build[2]), int(args.build[3])))
        return
    py = sys.executable
    env = compiled_env()
    env["PYTHONPYCACHEPREFIX"] = os.path.join(WORK, "pyc")
    files = {}
    wanted = {"dtypes": ("f32", "f16", "bf16", "f8"), "workers": ("bf16", "bf16-many", "start")}.get(
        args.only, ("f32", "f16", "bf16", "f8", "bf16-many"))
    for name, dtype, tensor_mb, size_mb in (("f32", "F32", 16, args.size_mb), ("f16", "F16", 16, args.size_mb),
                                            ("bf16", "BF16", 16, args.size_mb), ("f8", "F8_E4M3", 16, args.size_mb),
                                            ("bf16-many", "BF16", 1, args.size_mb),
                                            ("start", "BF16", 1, 1)):
        if name not in wanted:
            continue
        # built in a child, so that this measuring parent stays small
        files[name] = subprocess.run([py, __file__, "--build", f"{name}-{size_mb}mb", dtype, str(size_mb),
                                      str(tensor_mb)], check=True, capture_output=True, text=True).stdout.strip()
        with open(files[name], "rb") as f:   # warm the page cache
            while f.read(64 << 20):
                pass
    bandwidth = float(subprocess.run([py, "-c", BANDWIDTH], check=True, capture_output=True, text=True).stdout)
    ck = [py, "-m", "ckptstat", "stats"]
    runs = [("F32", "f32", "numpy pass", [py, "-c", NUMPY_PASS]), ("F32", "f32", "ckptstat -w1", ck + ["-w", "1"]),
            ("F16", "f16", "numpy pass", [py, "-c", NUMPY_PASS]), ("F16", "f16", "ckptstat -w1", ck + ["-w", "1"]),
            ("BF16", "bf16", "numpy pass", [py, "-c", NUMPY_PASS]), ("BF16", "bf16", "ckptstat -w1", ck + ["-w", "1"]),
            ("F8_E4M3", "f8", "numpy pass", [py, "-c", NUMPY_PASS]), ("F8_E4M3", "f8", "ckptstat -w1", ck + ["-w", "1"]),
            ("BF16, 1 MiB tensors", "bf16-many", "ckptstat -w1", ck + ["-w", "1"]),
            ("BF16, 1 MiB tensors", "bf16-many", "ckptstat -w2", ck + ["-w", "2"])]
    if args.only == "workers":
        runs = [(label, key, who, cmd) for label, key in (("BF16, 1 MiB tensors", "bf16-many"),
                                                          ("BF16, 16 MiB tensors", "bf16"))
                for who, cmd in (("cat", ["cat"]), ("python readinto", [py, "-c", READ_LOOP]),
                                 *((f"ckptstat -w{n}", ck + ["-w", str(n)])
                                   for n in [1, 2, *map(int, filter(None, args.more_workers.split(",")))]))]
        runs.append(("a 1 MiB file (the start)", "start", "ckptstat -w1", ck + ["-w", "1"]))
    elif args.only:
        runs = [r for r in runs if r[1] != "bf16-many"]
    fulls = []
    for _label, key, who, cmd in runs:
        path = files[key]
        full = cmd[:4] + [path, "--json", "--no-progress"] + cmd[4:] if who.startswith("ckptstat") else cmd + [path]
        measure(full, repeat=1, env=env, cwd=WORK)   # warm-up (byte-compile)
        fulls.append(full)
    rounds: list[list[dict]] = [[] for _ in runs]
    for _ in range(args.repeat):   # alternated: every contender once a round, so load swings hit them alike
        for i, full in enumerate(fulls):
            rounds[i].append(measure(full, repeat=1, env=env, cwd=WORK))
    rows = []
    for (label, key, who, _cmd), full, rs in zip(runs, fulls, rounds):
        assert all(r["ok"] for r in rs), full
        r = {"wall_s": statistics.median(x["wall_s"] for x in rs), "cpu_s": statistics.median(x["cpu_s"] for x in rs),
             "rss_mib": max(x["rss_mib"] for x in rs), "ok": True, "runs": len(rs),
             "walls": [round(x["wall_s"], 3) for x in rs]}
        rows.append((label, who, os.path.getsize(files[key]), r))
        print(label, who, r, file=sys.stderr, flush=True)
    base = {label: r for label, who, _, r in rows if who == "numpy pass"}
    w1 = {label: r for label, who, _, r in rows if who == "ckptstat -w1"}
    floor = {label: r for label, who, _, r in rows if who == "cat"}
    load = os.getloadavg()
    lines = ["# `ckptstat stats` against a plain numpy pass", "",
             f"{time.strftime('%Y-%m-%d')}; {platform.machine()}, {os.cpu_count()} cores, Python "
             f"{platform.python_version()}; median of {args.repeat} whole-process runs after a warm-up, page cache warm; "
             f"files of {args.size_mb} MiB written by safetensors.torch. Memory bandwidth (numpy copy of 256 MiB, same "
             f"run): **{bandwidth / 2**30:.2f} GiB/s** copied. Load average at the end: {load[0]:.1f} / {load[1]:.1f} / "
             f"{load[2]:.1f} ({os.cpu_count()} cores: a load near or above that, -w2 competes with other jobs).", "",
             "| file | contender | wall | CPU (user+sys) | read rate (wall) | wall vs numpy | CPU vs numpy | "
             "peak RSS |", "|---|---|---|---|---|---|---|---|"]
    if floor:
        lines[-2:] = ["| file | contender | wall | CPU (user+sys) | read rate (wall) | wall vs -w1 | wall vs cat | "
                      "CPU vs -w1 | peak RSS | walls of the rounds |", "|---|---|---|---|---|---|---|---|---|---|"]
    for label, who, size, r in rows:
        ref = base.get(label) or w1[label]
        cells = [label, who, f"{r['wall_s']:.2f} s", f"{r['cpu_s']:.2f} s", f"{size / 2**20 / r['wall_s']:.0f} MiB/s",
                 f"{r['wall_s'] / ref['wall_s']:.2f}x"]
        if floor:
            cells.append(f"{r['wall_s'] / (floor.get(label) or floor['BF16, 16 MiB tensors'])['wall_s']:.2f}x")
        cells += [f"{r['cpu_s'] / ref['cpu_s']:.2f}x", f"{r['rss_mib']:.0f} MiB"]
        if floor:
            cells.append(", ".join(f"{w:.2f}" for w in r["walls"]))
        lines.append("| " + " | ".join(cells) + " |")
    if args.only == "workers":
        counts = sorted(float(subprocess.run([py, "-c", COUNT_FLOOR, str(os.path.getsize(files["bf16"]))], env=env,
                                             cwd=WORK, check=True, capture_output=True, text=True).stdout)
                        for _ in range(args.repeat))
        start, count = w1["a 1 MiB file (the start)"]["wall_s"], counts[len(counts) // 2]
        best = start + count / 2
        lines += ["", f"The floor of this design's `-w2` on this machine: the start ({start:.2f} s, `stats` of a 1 MiB "
                  f"file) + half the compiled count of the 16 MiB-tensor file's {os.path.getsize(files['bf16']) // 2:,} "
                  f"values at its best ({count:.2f} s in one process from the L2 cache, median of {len(counts)}; "
                  f"{count / (os.path.getsize(files['bf16']) / 2) * 1e9:.2f} ns a value) = **{best:.2f} s, "
                  f"{best / floor['BF16, 16 MiB tensors']['wall_s']:.2f}x `cat`**, as if two cores each counted half "
                  "at full speed with no page fault."]
    lines += ["", "On the many-tensor rows (and every row of --only workers) the reference is `ckptstat -w1` (so "
              "`-w2`'s wall ratio is 1 / speed-up).",
              "Goals (issue 22): ckptstat <= 0.5x the numpy pass on F32, F16 and BF16; -w2 >= 1.7x faster than -w1. "
              "Issue 35: a warm 2 GB bf16 file within 2x of `cat` with -w2."]
    emit("\n".join(lines) + "\n", args.out)


if __name__ == "__main__":
    main()
