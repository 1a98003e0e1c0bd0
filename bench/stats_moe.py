"""`ckptstat stats` of a MoE layout in bfloat16: layers of many expert tensors (Qwen3-MoE's, DeepSeek's), where the
work beside the count is per tensor and the layers' merges are many. Whole processes, alternated, against another
ckptstat tree (`--before`, a `git archive` of an earlier commit with the same compiled count copied in) and a
safe_open loop that reads each tensor with torch and takes its mean, std, min and max (what a user would write;
fewer statistics than `stats`: no quantiles, no groups).

    python bench/stats_moe.py [--layers 8 --experts 128 --side 512] [--before TREE] [--repeat 5] [--out FILE]

The file: layers x experts x (gate, up, down) tensors of side x side bfloat16 values (512: 512 KiB each), written by
safetensors.torch; page cache warm (a warm-up run of each contender first).
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _measure import compiled_env, emit, measure  # noqa: E402

ROOT = os.path.dirname(HERE)
TORCH_LOOP = """
import sys
from safetensors import safe_open
out = []
with safe_open(sys.argv[1], framework='pt') as h:
    for k in h.keys():
        x = h.get_tensor(k).double()
        out.append((x.mean().item(), x.std().item(), x.min().item(), x.max().item()))
print(len(out))
"""


def build(path: str, layers: int, experts: int, side: int) -> int:
    import torch
    from safetensors.torch import save_file

    g = torch.Generator().manual_seed(0)
    tensors = {f"model.layers.{i}.mlp.experts.{e}.{w}.weight": (torch.randn(side, side, generator=g) * 0.02)
               .to(torch.bfloat16) for i in range(layers) for e in range(experts) for w in ("gate_proj", "up_proj", "down_proj")}
    save_file(tensors, path)
    return len(tensors)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--experts", type=int, default=128)
    ap.add_argument("--side", type=int, default=512)
    ap.add_argument("--before", help="another ckptstat tree: its `stats --json` beside, alternated")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out")
    args = ap.parse_args()
    env = compiled_env()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "moe.safetensors")
        count = build(path, args.layers, args.experts, args.side)
        stats = [sys.executable, "-m", "ckptstat", "stats", path, "--json", "--no-progress", "-w", "1"]
        runs = {"safe_open + torch loop (mean, std, min, max)": ([sys.executable, "-c", TORCH_LOOP, path], ROOT),
                "ckptstat stats --json -w1": (stats, ROOT)}
        if args.before:   # (-m imports ckptstat from the cwd first)
            runs["ckptstat stats --json -w1 (--before tree)"] = (stats, args.before)
        got: dict[str, list[dict]] = {name: [] for name in runs}
        for cmd, cwd in runs.values():
            measure(cmd, 1, env=env, cwd=cwd)   # warm-up: byte-compile, page cache
        for _ in range(args.repeat):
            for name, (cmd, cwd) in runs.items():
                got[name].append(measure(cmd, 1, env=env, cwd=cwd))
                assert got[name][-1]["ok"], name
        size = os.path.getsize(path)
    load = os.getloadavg()
    base = statistics.median(r["wall_s"] for r in got["ckptstat stats --json -w1"])
    lines = [f"# `stats` of a MoE layout: {args.layers} layers x {args.experts} experts x 3 tensors of "
             f"{args.side}x{args.side} bfloat16 ({count:,} tensors, {size / 2**30:.2f} GiB)", "",
             f"Machine: {platform.machine()}, {os.cpu_count()} cores (shared), Python {platform.python_version()}; "
             f"median of {args.repeat} whole-process runs each, contenders alternated, after a warm-up; page cache "
             f"warm. Load average at the end: {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}.", "",
             "| contender | wall (median) | CPU user+sys | wall vs ckptstat | ms a tensor (wall) | peak RSS | walls |",
             "|---|---|---|---|---|---|---|"]
    for name, rs in got.items():
        wall = statistics.median(r["wall_s"] for r in rs)
        cpu = statistics.median(r["cpu_s"] for r in rs)
        lines.append(f"| {name} | {wall:.2f} s | {cpu:.2f} s | {wall / base:.2f}x | {1e3 * wall / count:.2f} | "
                     f"{max(r['rss_mib'] for r in rs):.0f} MiB | {', '.join(format(r['wall_s'], '.2f') for r in rs)} |")
    emit("\n".join(lines) + "\n", args.out)


if __name__ == "__main__":
    main()
