"""A TorchScript archive (`torch.jit.trace(model).save(path)`, what Triton and TorchServe serve): what a user runs to
count its parameters, whole process each, in one run.

Contenders (peak RSS and CPU from os.wait4, bench/_measure.py):
  ckptstat summary : `python -m ckptstat PATH --json` (classes laid out by their code/ declarations, nothing run)
  torch.jit.load   : compiles the archive's code and builds the module, then parameters() counted
File: transformers 5's BertModel from a config (6 layers, hidden 768: 67M float32 parameters), traced. Usage:
    python bench/torchscript.py [--repeat 3] [--out bench/results/torchscript.md]
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
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out")
    args = ap.parse_args()
    env = compiled_env()
    py = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "traced.pt")
        out = subprocess.run([py, "-c", f"import sys; sys.path.insert(0, {HERE!r}); import torchscript as t; "
                              f"print(t.build({path!r}))"], check=True, capture_output=True, text=True, cwd=ROOT)
        params = int(out.stdout.strip().splitlines()[-1])
        cmds = {"ckptstat summary": ([py, "-m", "ckptstat", path, "--json"], env),
                "torch.jit.load": ([py, "-c", COUNT, path], env)}
        rows = measured(cmds, args.repeat, cwd=ROOT)
        summary = json.loads(subprocess.run(cmds["ckptstat summary"][0], check=True,
                                            capture_output=True, text=True, cwd=ROOT, env=env).stdout)
        theirs = int(subprocess.run(cmds["torch.jit.load"][0], check=True, capture_output=True,
                                    text=True, cwd=ROOT, env=env).stdout.strip().splitlines()[-1])
        size = os.path.getsize(path)
    ours = summary["parameters"]["unique"]
    assert ours == theirs == params, (ours, theirs, params)
    base = rows["ckptstat summary"]
    lines = ["# A TorchScript archive (torch.jit.save): ckptstat against torch.jit.load", "",
             f"File: transformers 5's BertModel traced, {size / 2**20:.0f} MiB ({params:,} float32 "
             "parameters); both count the same parameters. "
             f"Machine: {platform.machine()}, {os.cpu_count()} cores (shared), Python {platform.python_version()}; "
             f"median of {args.repeat} whole-process runs after a warm-up.", "",
             "| contender | wall | CPU user+sys | peak RSS | wall x ckptstat |", "|---|---|---|---|---|"]
    for name, r in rows.items():
        lines.append(f"| {name} | {r['wall_s']:.3f} s | {r['cpu_s']:.3f} s | {r['rss_mib']:.0f} MiB | "
                     f"{r['wall_s'] / base['wall_s']:.2f}x |")
    lines += ["", "torch.jit.load compiles the archive's code and builds the module; ckptstat reads the code/ records "
              "only for each class's parameters and buffers, and runs nothing."]
    emit("\n".join(lines) + "\n", args.out)


if __name__ == "__main__":
    main()
