"""Issue 35: the per-tensor tables of a many-tensor file, `ckptstat tensors` and `stats --tensors`, whole process,
this tree against another (`--tree`: a checkout before render/rows.py, whose rows went through rich's table
layout) in one run, beside `tensors --json` (the same report, no table) and a safe_open loop printing each tensor's
name, dtype and shape (what a user would otherwise run). Output to /dev/null (a file: no width, names whole).
Files: bench/headers_scale.py's MoE names, safetensors' writer. Usage:
    python bench/listing_rows.py --tree /path/to/old/checkout [--tensors 20000 200000] [--out FILE]
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _measure import compiled_env, emit, measure  # noqa: E402
from stats_tiny import build  # noqa: E402

ROOT = os.path.dirname(HERE)
SAFE_OPEN_LOOP = """
import sys
from safetensors import safe_open
with safe_open(sys.argv[1], framework='np') as h:
    for k in h.keys():
        s = h.get_slice(k)
        print(k, s.get_dtype(), s.get_shape())
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tree", required=True, help="the other checkout to compare")
    ap.add_argument("--tensors", type=int, nargs="+", default=[20_000, 200_000])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--old-max", type=int, default=20_000, help="largest count to run the other tree on")
    ap.add_argument("--out")
    args = ap.parse_args()
    env = compiled_env(drop=("COLUMNS",))
    lines = ["# Per-tensor tables of a many-tensor file", "",
             f"Machine: {platform.machine()}, {os.cpu_count()} cores (shared), Python {platform.python_version()}; "
             f"median of {args.repeat} whole-process runs after a warm-up; stdout to /dev/null. `before`: "
             f"{os.path.relpath(args.tree, ROOT) if args.tree.startswith(ROOT) else 'the tree before render/rows.py'}.",
             "", "| tensors | command | wall | CPU user+sys | µs / tensor (CPU) | peak RSS |", "|---|---|---|---|---|---|"]
    with tempfile.TemporaryDirectory() as tmp:
        for count in args.tensors:
            path = os.path.join(tmp, f"{count}.safetensors")
            build(path, count)
            runs = [("safe_open loop printing name, dtype, shape", [sys.executable, "-c", SAFE_OPEN_LOOP, path], ROOT)]
            for tree, label in ((args.tree, "before"), (ROOT, "this tree")):
                if tree != ROOT and count > args.old_max:
                    continue
                for cmd in (["tensors"], ["tensors", "--json"], ["stats", "--tensors"]):
                    runs.append((f"{label}: ckptstat {' '.join(cmd)}", [sys.executable, "-m", "ckptstat", *cmd, path],
                                 tree))
            for label, cmd, tree in runs:
                e = dict(env, PYTHONPATH=tree)
                measure(cmd, repeat=1, env=e, cwd=tree)   # warm-up
                r = measure(cmd, repeat=args.repeat, env=e, cwd=tree)
                assert r["ok"], (label, count)
                lines.append(f"| {count:,} | {label} | {r['wall_s']:.2f} s | {r['cpu_s']:.2f} s | "
                             f"{1e6 * r['cpu_s'] / count:.1f} | {r['rss_mib']:.0f} MiB |")
                print(lines[-1], flush=True)
    emit("\n".join(lines), args.out)


if __name__ == "__main__":
    main()
