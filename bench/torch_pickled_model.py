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

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _measure import race_main  # noqa: E402

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
    race_main("torch_pickled_model", ["--pickled-objects"],
              {"torch.load, weights_only=False": [sys.executable, "-c", COUNT]},
              "model.pt", "A model pickled whole (torch.save(model)): ckptstat --pickled-objects against torch.load",
              "File: a transformers 5 LlamaForCausalLM saved whole, {size_mib:.0f} MiB ({params:,} float32 parameters); "
              "both count the same parameters.",
              "torch.load(weights_only=True) refuses the file; weights_only=False imports transformers and every class the "
              "pickle names and runs their __setstate__. ckptstat imports nothing from it and calls nothing.")


if __name__ == "__main__":
    main()
