"""ckptstat vs torch.load on a BERT-base-size pytorch_model.bin, whole process each.

Contenders, each a fresh subprocess, measured with os.wait4 (wall time and peak RSS of that child):
  ckptstat : `python -m ckptstat PATH --json` (summary: unique parameters, buckets, ties)
  torch    : `torch.load(PATH, mmap=True, weights_only=True)` and a unique-parameter count
             (distinct storage/view, as ckptstat counts)
The file is a BertForMaskedLM (BertConfig defaults, 109,514,298 unique parameters) written by
torch.save into a temp dir. Run: `python bench/torch_load.py [--repeat N] [--out bench/results/torch_load.md]`.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _measure import emit  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

TORCH_SNIPPET = """
import sys, torch
sd = torch.load(sys.argv[1], mmap=True, weights_only=True)
seen = set(); n = 0
for t in sd.values():
    key = (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), t.stride())
    if key not in seen:
        seen.add(key); n += t.numel()
print(n)
"""


def build(path: str) -> None:
    import torch
    import transformers

    with torch.device("meta"):
        model = transformers.BertForMaskedLM(transformers.BertConfig())
    model = model.to_empty(device="cpu")
    model.tie_weights()
    with torch.no_grad():  # deterministic values (not that either contender reads them)
        for p in model.parameters():
            p.zero_()
    torch.save(model.state_dict(), path)


def run_child(argv: list[str]) -> tuple[float, float, str]:
    """(wall seconds, peak RSS MiB, stdout) of one child process; rusage from os.wait4 on its pid."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=ROOT)
    assert proc.stdout is not None
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{argv[:3]} failed with exit code {proc.returncode}")
    return wall, usage.ru_maxrss / 1024, out.decode()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out", default=None, help="write a markdown results file")
    ap.add_argument("--build", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.build:
        build(args.build)
        return
    py = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "pytorch_model.bin")
        # built in its own process: a forked child inherits the parent's peak RSS on Linux, so this
        # process must stay small for the children's ru_maxrss to be theirs
        subprocess.run([py, os.path.abspath(__file__), "--build", path], check=True)
        size = os.path.getsize(path)
        contenders = {
            "ckptstat": [py, "-m", "ckptstat", path, "--json"],
            "torch.load(mmap, weights_only)": [py, "-c", TORCH_SNIPPET, path],
        }
        results: dict[str, list[tuple[float, float]]] = {k: [] for k in contenders}
        outputs: dict[str, str] = {}
        for _ in range(args.repeat):  # interleaved, so drift hits both alike
            for name, argv in contenders.items():
                wall, rss, out = run_child(argv)
                results[name].append((wall, rss))
                outputs[name] = out
    ours = json.loads(outputs["ckptstat"])["parameters"]["unique"]
    theirs = int(outputs["torch.load(mmap, weights_only)"].strip())
    assert ours == theirs == 109_514_298, (ours, theirs)
    med = {k: (statistics.median(w for w, _ in v), max(r for _, r in v)) for k, v in results.items()}
    c, t = med["ckptstat"], med["torch.load(mmap, weights_only)"]
    lines = [
        "# ckptstat vs torch.load on a BERT-base pytorch_model.bin",
        "",
        f"File: BertForMaskedLM (BertConfig defaults) state_dict, torch.save zip format, {size / 2**20:.0f} MiB; "
        f"both report {ours:,} unique parameters.",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
        f"median of {args.repeat} interleaved runs, whole process (interpreter start-up included), peak RSS from wait4.",
        "",
        "| contender | wall (median) | peak RSS (max) |",
        "|---|---|---|",
    ]
    for name, (wall, rss) in med.items():
        lines.append(f"| {name} | {wall:.3f} s | {rss:.0f} MiB |")
    lines += ["", f"Ratio: ckptstat is {t[0] / c[0]:.1f}x faster and uses {t[1] / c[1]:.1f}x less peak memory "
              f"(goal: >= 3x faster, < 100 MB)."]
    text = "\n".join(lines) + "\n"
    emit(text, args.out)


if __name__ == "__main__":
    main()
