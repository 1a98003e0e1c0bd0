"""Peak RSS of `ckptstat stats` over a whole Llama-2-7B-shaped bf16 checkpoint (12.6 GiB, 3 shards).

The shards are sparse files (bench/summary_7b.py's builder with dtype BF16): every value reads as
zero, so this measures memory, not realistic statistics or disk speed. Usage:
    python bench/stats_7b_rss.py [--workers 1] [--out bench/results/stats_7b_rss.md]
"""
from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _measure import emit, run_once  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--out")
    args = ap.parse_args()
    py = sys.executable
    here = os.path.dirname(os.path.abspath(__file__))
    with tempfile.TemporaryDirectory() as folder:
        build = f"import sys; sys.path.insert(0, {here!r}); from summary_7b import build; print(build({folder!r}, 'BF16'))"
        n = int(subprocess.run([py, "-c", build], check=True, capture_output=True, text=True).stdout)
        size = sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder))
        shards = sum(f.endswith(".safetensors") for f in os.listdir(folder))
        wall, rss, rc = run_once([py, "-m", "ckptstat", "stats", folder, "--json", "--workers", str(args.workers)])
    text = (f"`ckptstat stats --workers {args.workers}` over Llama-2-7B shapes in bf16: {n:,} parameters, "
            f"{size / 2**30:.1f} GiB in {shards} sparse shards.\nMachine: {platform.machine()}, {os.cpu_count()} cores, "
            f"Python {platform.python_version()}.\n\n| wall | throughput | peak RSS | exit |\n|---|---|---|---|\n"
            f"| {wall:.0f} s | {size / 2**20 / wall:.0f} MiB/s | {rss:.0f} MiB | {rc} |\n")
    emit(text, args.out)


if __name__ == "__main__":
    main()
