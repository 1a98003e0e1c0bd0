"""How much two busy processes get from this machine's cores: the ceiling on `--workers 2` (issue 35's
stats-against-`cat` goal). Each of two kinds of work is timed in one process alone, then in two processes started
together; the speed-up of the pair is 2 x (time alone) / (time of each in the pair).

- a pure Python loop (integer additions: the interpreter, no memory traffic);
- the compiled 16-bit count (analysis/stats/_count16.c) over 128 MiB of bfloat16 patterns held in memory (the
  count's loads and increments; no file, no page faults).

    python bench/cpu_parallel.py [--rounds 3] [--out bench/results/cpu_parallel.md]

Two full cores give ~2.0x for both; two hyperthreads of one core, or a share of a host's core, less.
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _measure import emit  # noqa: E402

ROOT = os.path.dirname(HERE)
WORK = {
    "pure Python loop (30M additions)": """
import time
t = time.perf_counter()
s = 0
for i in range(30_000_000):
    s += i
print(time.perf_counter() - t)
""",
    "compiled 16-bit count, 4 x 64M values in memory": """
import time
import numpy as np
from ckptstat.analysis.stats import _count16
rng = np.random.default_rng(0)
bits = ((rng.standard_normal(64 << 20).astype(np.float32) * 0.02).view(np.uint32) >> 16).astype(np.uint16)
hist = np.zeros(65536, dtype=np.int64)
_count16.add(bits, hist)
t = time.perf_counter()
for _ in range(4):
    _count16.add(bits, hist)
print(time.perf_counter() - t)
""",
}


def _timed(code: str, at_once: int) -> list[float]:
    """The seconds each of `at_once` processes started together took for the timed part."""
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=ROOT)
             for _ in range(at_once)]
    return [float(p.communicate()[0].strip().splitlines()[-1]) for p in procs]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out")
    args = ap.parse_args()
    lines = ["# Two busy processes on this machine: the ceiling on `--workers 2`", "",
             f"Machine: {platform.machine()}, {os.cpu_count()} cores (as the OS counts them), Python "
             f"{platform.python_version()}; median of {args.rounds} rounds, each: one process alone, then two started "
             "together (`python bench/cpu_parallel.py`).", "",
             "| work | alone | each of two at once | speed-up of the pair |", "|---|---|---|---|"]
    for name, code in WORK.items():
        alone, pair = [], []
        for _ in range(args.rounds):
            alone += _timed(code, 1)
            pair += _timed(code, 2)
        a, p = statistics.median(alone), statistics.median(pair)
        lines.append(f"| {name} | {a:.3f} s | {p:.3f} s | {2 * a / p:.2f}x |")
    load = os.getloadavg()
    lines += ["", f"Load average at the end: {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}."]
    emit("\n".join(lines) + "\n", args.out)


if __name__ == "__main__":
    main()
