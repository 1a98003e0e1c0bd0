"""Issue 22: where the F32 kernel of `ckptstat stats` spends its time (analysis/stats/kernel32.py).

In one process, over bench/stats_kernels.py's F32 file (built there first): the chunk accumulator
(Acc.update over 4 MiB chunks, what F32 took before) against the kernel, and the kernel's steps one by
one over the same 512 KiB reads, each in isolation. CPU seconds (this process), the best of --repeat
rounds, the contenders interleaved within each round so that a busy machine slows them alike; reported
in milliseconds per million values. The steps' sum is below the kernel's own figure by the Python
between them.
Usage: python bench/stats_f32_parts.py [--size-mb 512] [--repeat 3] [--out bench/results/stats_f32_parts.md]
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from collections.abc import Callable

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _measure import emit  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-mb", type=int, default=512)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out")
    args = ap.parse_args()
    import subprocess

    path = subprocess.run([sys.executable, os.path.join(HERE, "stats_kernels.py"), "--build", f"f32-{args.size_mb}mb",
                           "F32", str(args.size_mb), "16"], check=True, capture_output=True, text=True).stdout.strip()
    from ckptstat import open_checkpoint
    from ckptstat.analysis.stats import kernel32 as k32
    from ckptstat.analysis.stats.accumulate import new_acc
    from ckptstat.analysis.stats.kernel16 import plain_chunks

    ckpt = open_checkpoint(path)
    infos = list(ckpt)
    values = sum(i.numel for i in infos)
    sub = k32.F32_SUB
    index = np.empty(k32.READ_BYTES // 4, dtype=np.intp)
    wide = np.empty(sub)
    hist = np.zeros(1 << 16, dtype=np.int64)

    def accumulator() -> None:
        for info in infos:
            acc = new_acc("F32")
            for x in ckpt.iter_chunks(info.name, 4 << 20):
                acc.update(x)

    def kernel() -> None:
        for info in infos:
            k32.tensor_stats32(ckpt, info, 4 << 20)

    def steps(step: str) -> Callable[[], None]:
        def run() -> None:
            for info in infos:
                for raw in plain_chunks(info, k32.READ_BYTES, 4):
                    x = raw.view("<f4")
                    if step == "keys to intp + np.add.at":
                        np.copyto(index[:x.size], x.view(np.uint16)[1::2])
                        np.add.at(hist, index[:x.size], 1)
                    elif step == "min + max (float32)":
                        float(x.min()), float(x.max())
                    elif step != "read (readinto)":
                        for at in range(0, x.size, sub):
                            part = x[at:at + sub]
                            w = wide[:part.size]
                            np.copyto(w, part)
                            if step == "moments: widen, sum, squares, abs, sum of abs":
                                float(np.add.reduce(w))
                                float(np.einsum("i,i->", w, w))
                                float(np.einsum("i->", np.abs(w, out=w)))
        return run

    names = ["chunk accumulator (Acc.update, 4 MiB)", "F32 kernel (stats_kernel32)", "read (readinto)",
             "keys to intp + np.add.at", "min + max (float32)", "moments: widen only",
             "moments: widen, sum, squares, abs, sum of abs"]
    runs = {names[0]: accumulator, names[1]: kernel, **{n: steps(n) for n in names[2:]}}
    best = {n: float("inf") for n in names}
    for _ in range(args.repeat):
        for n, f in runs.items():
            t = time.process_time()
            f()
            best[n] = min(best[n], time.process_time() - t)
    read = best["read (readinto)"]
    load = os.getloadavg()
    lines = ["# Where `ckptstat stats` spends its time on F32", "",
             f"{time.strftime('%Y-%m-%d')}; {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
             f"numpy {np.__version__}; {args.size_mb} MiB F32 file ({values:,} values, page cache warm), one process, CPU "
             f"time, best of {args.repeat} interleaved rounds. Load average at the end: {load[0]:.1f}.", "",
             "| what | ms per million values | of which beyond the read |", "|---|---|---|"]
    for n in names:
        ms = best[n] * 1e9 / values
        beyond = "" if n == names[2] or n in names[:2] else f"{(best[n] - read) * 1e9 / values:.2f}"
        lines.append(f"| {n} | {ms:.2f} | {beyond} |")
    lines += ["", "Steps after the first two run each over the same 512 KiB reads (READ_BYTES), alone; the moments over "
              f"sub-reads of {sub:,} values widened into one float64 buffer, as the kernel does."]
    emit("\n".join(lines) + "\n", args.out)


if __name__ == "__main__":
    main()
