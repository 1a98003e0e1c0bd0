"""A TorchScript archive (`torch.jit.trace(model).save(path)`, what Triton and TorchServe serve): what a user runs to
count its parameters, whole process each, in one run.

Contenders (peak RSS and CPU from os.wait4, bench/_measure.py):
  ckptstat summary : `python -m ckptstat PATH --json` (classes laid out by their code/ declarations, nothing run)
  torch.jit.load   : compiles the archive's code and builds the module, then parameters() counted
File: transformers 5's BertModel from a config (6 layers, hidden 768: 67M float32 parameters), traced. Usage:
    python bench/torchscript.py [--repeat 3] [--out bench/results/torchscript.md]
"""
from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _measure import race_main  # noqa: E402

COUNT = """
import sys, torch
print(sum(p.numel() for p in torch.jit.load(sys.argv[1]).parameters()))
"""


def build(path: str) -> int:
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    model = BertModel(BertConfig(num_hidden_layers=6, torchscript=True)).eval()
    torch.jit.trace(model, (torch.ones(1, 8, dtype=torch.long),), strict=False).save(path)
    return sum(p.numel() for p in model.parameters())


def main() -> None:
    race_main("torchscript", [],
              {"torch.jit.load": [sys.executable, "-c", COUNT]},
              "traced.pt", "A TorchScript archive (torch.jit.save): ckptstat against torch.jit.load",
              "File: transformers 5's BertModel traced, {size_mib:.0f} MiB ({params:,} float32 parameters); both count the "
              "same parameters.",
              "torch.jit.load compiles the archive's code and builds the module; ckptstat reads the code/ records only for "
              "each class's parameters and buffers, and runs nothing.")


if __name__ == "__main__":
    main()
