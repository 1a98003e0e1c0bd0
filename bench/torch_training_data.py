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
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _measure import race_main  # noqa: E402

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
    race_main("torch_training_data", [],
              {"torch.load, safe_globals": [sys.executable, "-c", COUNT, "safe"],
               "torch.load, weights_only=False": [sys.executable, "-c", COUNT, "unsafe"]},
              "checkpoint-12.pth.tar", "A training checkpoint torch.load(weights_only=True) refuses: ckptstat against torch",
              "File: timm train.py's layout, {size_mib:.0f} MiB (state_dict of {params:,} float32 parameters, SGD momentum, "
              "`args` Namespace, a numpy metric); both count the same parameters.",
              "torch needs the classes its error names (argparse.Namespace, numpy's scalar and dtype classes) in "
              "safe_globals, or weights_only=False; ckptstat reads the same file with nothing imported from it, and its note "
              "names those classes.")


if __name__ == "__main__":
    main()
