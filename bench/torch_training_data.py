"""A training checkpoint as timm's train.py writes it (the model's state_dict, SGD's momentum buffers, `args` as an
argparse.Namespace, a numpy metric, epoch), which torch.load(weights_only=True), torch's default, refuses: what a user
runs to count its parameters, whole process each, in one run.

Contenders (peak RSS and CPU from os.wait4, bench/_measure.py):
  ckptstat summary       : `python -m ckptstat PATH --json` (unique parameters, the data classes read as values)
  torch, safe_globals    : torch.load(PATH, mmap=True, weights_only=True) inside torch.serialization.safe_globals of
                           the classes torch's error names, then the state_dict's parameters counted
  torch, weights_only=False : what users fall back to (imports and may call what the pickle names), mmap, counted
The model is 54 Linear layers of 512 x 1000 (27.7M parameters, about ResNet-50's 25.6M; float32). Usage:
    python bench/torch_training_data.py [--repeat 3] [--out bench/results/torch_training_data.md]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _measure import compiled_env, emit, measured  # noqa: E402

ROOT = os.path.dirname(HERE)
COUNT = """
import sys, argparse, numpy as np, torch
def count(ck):
    return sum(t.numel() for t in ck["state_dict"].values())
if sys.argv[2] == "safe":
    allowed = [argparse.Namespace, np._core.multiarray.scalar, np.dtype, type(np.dtype("f8"))]
    with torch.serialization.safe_globals(allowed):
        print(count(torch.load(sys.argv[1], mmap=True, weights_only=True)))
else:
    print(count(torch.load(sys.argv[1], mmap=True, weights_only=False)))
"""


def build(path: str) -> int:
    import numpy as np
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(*(torch.nn.Linear(512, 1000) for _ in range(54)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    opt.step()
    args = argparse.Namespace(model="resnet50", lr=0.5, epochs=300, batch_size=256, amp=True, data_dir="/data")
    torch.save({"epoch": 12, "arch": "resnet50", "state_dict": model.state_dict(), "optimizer": opt.state_dict(),
                "version": 2, "args": args, "metric": np.float64(76.25)}, path)
    return sum(p.numel() for p in model.parameters())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out")
    args = ap.parse_args()
    env = compiled_env()
    py = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "checkpoint-12.pth.tar")
        out = subprocess.run([py, "-c", f"import sys; sys.path.insert(0, {HERE!r}); import torch_training_data as t; "
                              f"print(t.build({path!r}))"], check=True, capture_output=True, text=True, cwd=ROOT)
        params = int(out.stdout.strip())
        cmds = {"ckptstat summary": ([py, "-m", "ckptstat", path, "--json"], env),
                "torch.load, safe_globals": ([py, "-c", COUNT, path, "safe"], env),
                "torch.load, weights_only=False": ([py, "-c", COUNT, path, "unsafe"], env)}
        rows = measured(cmds, args.repeat, cwd=ROOT)
        summary = json.loads(subprocess.run(cmds["ckptstat summary"][0], check=True, capture_output=True, text=True,
                                            cwd=ROOT, env=env).stdout)
        theirs = int(subprocess.run(cmds["torch.load, safe_globals"][0], check=True, capture_output=True, text=True,
                                    cwd=ROOT, env=env).stdout.strip())
        size = os.path.getsize(path)
    ours = summary["parameters"]["unique"]
    assert ours == theirs == params, (ours, theirs, params)
    base = rows["ckptstat summary"]
    lines = ["# A training checkpoint torch.load(weights_only=True) refuses: ckptstat against torch", "",
             f"File: timm train.py's layout, {size / 2**20:.0f} MiB (state_dict of {params:,} float32 parameters, "
             "SGD momentum, `args` Namespace, a numpy metric); both count the same parameters. "
             f"Machine: {platform.machine()}, {os.cpu_count()} cores (shared), Python {platform.python_version()}; "
             f"median of {args.repeat} whole-process runs after a warm-up.", "",
             "| contender | wall | CPU user+sys | peak RSS | wall x ckptstat |", "|---|---|---|---|---|"]
    for name, r in rows.items():
        lines.append(f"| {name} | {r['wall_s']:.3f} s | {r['cpu_s']:.3f} s | {r['rss_mib']:.0f} MiB | "
                     f"{r['wall_s'] / base['wall_s']:.2f}x |")
    lines += ["", "torch needs the classes its error names (argparse.Namespace, numpy's scalar and dtype classes) in "
              "safe_globals, or weights_only=False; ckptstat reads the same file with nothing imported from it, and "
              "its note names those classes."]
    emit("\n".join(lines) + "\n", args.out)


if __name__ == "__main__":
    main()
