"""Issue 22: header parsing at scale. `ckptstat PATH --json` against a plain safetensors.safe_open loop
on valid safetensors files of 10k, 100k, 200k and 1M tensors, whole process each, in one run.

The files are written by safetensors' own writer (`safetensors.numpy.save_file`) from numpy arrays:
a MoE decoder's naming, short so that a million names fit safetensors' 100 MB header cap
(`h.{L}.block_sparse_moe.{E}.w{1,2,3}`, one element each, plus each layer's attention, norms and
router), F16, so that the file is mostly header. The same naming at every size. Every contender
counts the same parameters (checked). Usage:
    python bench/headers_scale.py [--tensors 10000 100000 200000 1000000] [--repeat 3] [--out FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _measure import compiled_env, emit, measure  # noqa: E402

SAFE_OPEN = """
import math, sys
from safetensors import safe_open
n = 0
with safe_open(sys.argv[1], framework='np') as h:
    for k in h.keys():
        n += math.prod(h.get_slice(k).get_shape())
print(n)
"""
PER_LAYER = ["ln_1.weight", "attn.c_attn.weight", "attn.c_proj.weight", "ln_2.weight", "block_sparse_moe.gate.weight"]
EXPERTS = 64
HIDDEN = 8


def names(count: int) -> dict[str, tuple[int, ...]]:
    """`count` tensor names and shapes of a MoE decoder (64 experts a layer of 3 weights each), short
    names (`h.{L}.block_sparse_moe.{E}.w1`, one element) so that a million fit safetensors' 100 MB
    header cap."""
    out: dict[str, tuple[int, ...]] = {"wte.weight": (32, HIDDEN), "ln_f.weight": (HIDDEN,), "lm_head.weight": (32, HIDDEN)}
    layer = 0
    while len(out) < count:
        p = f"h.{layer}."
        for n in PER_LAYER:
            out[p + n] = (HIDDEN,) if n.startswith("ln_") else (EXPERTS, HIDDEN) if "gate" in n else (HIDDEN, HIDDEN)
        for e in range(EXPERTS):
            for w in ("w1", "w2", "w3"):
                out[f"{p}block_sparse_moe.{e}.{w}"] = (1,)
        layer += 1
    return dict(list(out.items())[:count])


def build(path: str, count: int) -> int:
    import numpy as np
    from safetensors.numpy import save_file

    tensors = {n: np.zeros(s, dtype=np.float16) for n, s in names(count).items()}
    save_file(tensors, path, metadata={"format": "pt"})
    return sum(t.size for t in tensors.values())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tensors", type=int, nargs="+", default=[10_000, 100_000, 200_000, 1_000_000])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out")
    ap.add_argument("--build", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.build:
        print(build(args.build[0], int(args.build[1])))
        return
    py = sys.executable
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        env = compiled_env()
        env["PYTHONPYCACHEPREFIX"] = os.path.join(tmp, "pyc")
        for count in args.tensors:
            path = os.path.join(tmp, f"moe-{count}.safetensors")
            n = int(subprocess.run([py, __file__, "--build", path, str(count)], check=True, capture_output=True,
                                   text=True).stdout)
            ours = json.loads(subprocess.run([py, "-m", "ckptstat", path, "--json"], check=True, capture_output=True,
                                             text=True, env=env, cwd=tmp).stdout)
            theirs = int(subprocess.run([py, "-c", SAFE_OPEN, path], check=True, capture_output=True, text=True).stdout)
            assert ours["parameters"]["unique"] == theirs == n, (ours["parameters"], theirs, n)
            a = measure([py, "-m", "ckptstat", path, "--json"], args.repeat, env=env, cwd=tmp)
            b = measure([py, "-c", SAFE_OPEN, path], args.repeat, env=env, cwd=tmp)
            rows.append((count, os.path.getsize(path), a, b))
            print(f"{count}: ckptstat {a['wall_s']:.3f} s, safe_open {b['wall_s']:.3f} s", file=sys.stderr)
            os.remove(path)
    lines = ["# Headers at scale: ckptstat summary vs a safe_open loop", "",
             f"Files: safetensors written by safetensors.numpy.save_file, MoE names (64 experts a layer), tiny F16 "
             f"shapes. Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
             f"median of {args.repeat} whole-process runs, byte-compiled modules.", "",
             "| tensors | file | ckptstat --json (wall / CPU) | µs / tensor (CPU) | safe_open loop (wall / CPU) "
             "| µs / tensor (CPU) | ratio wall | ratio CPU | ckptstat RSS |",
             "|---|---|---|---|---|---|---|---|---|"]
    for count, size, a, b in rows:
        lines.append(f"| {count:,} | {size / 2**20:.1f} MiB | {a['wall_s']:.2f} / {a['cpu_s']:.2f} s "
                     f"| {a['cpu_s'] / count * 1e6:.1f} | {b['wall_s']:.2f} / {b['cpu_s']:.2f} s "
                     f"| {b['cpu_s'] / count * 1e6:.1f} | {a['wall_s'] / b['wall_s']:.2f}x | **{a['cpu_s'] / b['cpu_s']:.2f}x** "
                     f"| {a['rss_mib']:.0f} MiB |")
    lines += ["", "Goal (issue 22): at most 3x safe_open at 200k tensors, time linear in the tensor count."]
    emit("\n".join(lines) + "\n", args.out)


if __name__ == "__main__":
    main()
