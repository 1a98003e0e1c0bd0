"""A model pickled whole (`torch.save(model)`, as a tutorial or ultralytics' trainer writes it), which
torch.load(weights_only=True), torch's default, refuses: what a user runs to count its parameters, whole process each,
in one run.

Contenders (peak RSS and CPU from os.wait4, bench/_measure.py):
  ckptstat --pickled-objects : `python -m ckptstat --pickled-objects PATH --json` (classes kept as inert records,
                               tensors named as state_dict names them, unique parameters)
  torch.load, weights_only=False : the only way torch reads it (imports every class the pickle names, here
                               transformers'), mmap, then model.parameters() counted
Files: a transformers LlamaForCausalLM from a config (8 layers, hidden 512, vocab 32,000: 58M float32 parameters,
the embedding tied to nothing), saved as {"model": model, "step": ...}. Usage:
    python bench/torch_pickled_model.py [--repeat 3] [--out bench/results/torch_pickled_model.md]
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
ck = torch.load(sys.argv[1], mmap=True, weights_only=False)
print(sum(p.numel() for p in ck["model"].parameters()))
"""


def build(path: str) -> int:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(num_hidden_layers=8, hidden_size=512, intermediate_size=1376, num_attention_heads=8,
                      num_key_value_heads=8, vocab_size=32000, tie_word_embeddings=False)
    model = LlamaForCausalLM(cfg)
    torch.save({"model": model, "step": 1000}, path)
    return sum(p.numel() for p in model.parameters())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out")
    args = ap.parse_args()
    env = compiled_env()
    py = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model.pt")
        out = subprocess.run([py, "-c", f"import sys; sys.path.insert(0, {HERE!r}); import torch_pickled_model as t; "
                              f"print(t.build({path!r}))"], check=True, capture_output=True, text=True, cwd=ROOT)
        params = int(out.stdout.strip().splitlines()[-1])
        cmds = {"ckptstat --pickled-objects summary": ([py, "-m", "ckptstat", "--pickled-objects", path, "--json"], env),
                "torch.load, weights_only=False": ([py, "-c", COUNT, path], env)}
        rows = measured(cmds, args.repeat, cwd=ROOT)
        summary = json.loads(subprocess.run(cmds["ckptstat --pickled-objects summary"][0], check=True,
                                            capture_output=True, text=True, cwd=ROOT, env=env).stdout)
        theirs = int(subprocess.run(cmds["torch.load, weights_only=False"][0], check=True, capture_output=True,
                                    text=True, cwd=ROOT, env=env).stdout.strip().splitlines()[-1])
        size = os.path.getsize(path)
    ours = summary["parameters"]["unique"]
    assert ours == theirs == params, (ours, theirs, params)
    base = rows["ckptstat --pickled-objects summary"]
    lines = ["# A model pickled whole (torch.save(model)): ckptstat --pickled-objects against torch.load", "",
             f"File: a transformers 5 LlamaForCausalLM saved whole, {size / 2**20:.0f} MiB ({params:,} float32 "
             "parameters); both count the same parameters. "
             f"Machine: {platform.machine()}, {os.cpu_count()} cores (shared), Python {platform.python_version()}; "
             f"median of {args.repeat} whole-process runs after a warm-up.", "",
             "| contender | wall | CPU user+sys | peak RSS | wall x ckptstat |", "|---|---|---|---|---|"]
    for name, r in rows.items():
        lines.append(f"| {name} | {r['wall_s']:.3f} s | {r['cpu_s']:.3f} s | {r['rss_mib']:.0f} MiB | "
                     f"{r['wall_s'] / base['wall_s']:.2f}x |")
    lines += ["", "torch.load(weights_only=True) refuses the file; weights_only=False imports transformers and every "
              "class the pickle names and runs their __setstate__. ckptstat imports nothing from it and calls nothing."]
    emit("\n".join(lines) + "\n", args.out)


if __name__ == "__main__":
    main()
