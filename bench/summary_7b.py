"""Issue 2's benchmark: the header-only summary of a sharded checkpoint with Llama-2-7B's shapes.

Builds model-0000{1,2}-of-00002.safetensors (fp16, Llama-2-7b-hf's tensor names and shapes taken
from LlamaForCausalLM on the meta device) as sparse files: real headers, data regions left as holes.
Then times whole processes, each run in a fresh interpreter:
  ckptstat       `python -m ckptstat DIR --json`
  safe_open      a plain `safetensors.safe_open` loop summing shapes
  transformers   `LlamaForCausalLM.from_pretrained(DIR)` and sum(p.numel())   (--with-transformers)
Usage: python bench/summary_7b.py [--with-transformers] [--out bench/results/summary_7b.md]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _measure import emit, measure, table  # noqa: E402

LLAMA2_7B = dict(vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                 num_attention_heads=32, num_key_value_heads=32, max_position_embeddings=4096,
                 torch_dtype="float16", tie_word_embeddings=False)


def build(folder: str, dtype: str = "F16") -> int:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(**LLAMA2_7B)
    cfg.architectures = ["LlamaForCausalLM"]
    with torch.device("meta"):
        model = LlamaForCausalLM(cfg)
    shapes = {k: list(v.shape) for k, v in model.state_dict().items()}
    names = sorted(shapes)
    half = len(names) // 2
    weight_map = {}
    for i, part in enumerate((names[:half], names[half:]), start=1):
        fname = f"model-{i:05d}-of-00002.safetensors"
        header, offset = {"__metadata__": {"format": "pt"}}, 0
        for n in part:
            size = math.prod(shapes[n]) * 2
            header[n] = {"dtype": dtype, "shape": shapes[n], "data_offsets": [offset, offset + size]}
            offset += size
            weight_map[n] = fname
        raw = json.dumps(header).encode()
        raw += b" " * (-len(raw) % 8)
        with open(os.path.join(folder, fname), "wb") as f:
            f.write(struct.pack("<Q", len(raw)) + raw)
            f.truncate(8 + len(raw) + offset)  # a sparse file: the data region is a hole
    total = sum(math.prod(s) * 2 for s in shapes.values())
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f)
    cfg.to_json_file(os.path.join(folder, "config.json"))
    return sum(math.prod(s) for s in shapes.values())


SAFE_OPEN = """
import glob, math, sys
from safetensors import safe_open
n = 0
for f in sorted(glob.glob(sys.argv[1] + '/*.safetensors')):
    with safe_open(f, framework='np') as h:
        for k in h.keys():
            n += math.prod(h.get_slice(k).get_shape())
print(n)
"""
TRANSFORMERS = """
import sys, torch
from transformers import LlamaForCausalLM
m = LlamaForCausalLM.from_pretrained(sys.argv[1], torch_dtype=torch.float16)
print(sum(p.numel() for p in m.parameters()))
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--with-transformers", action="store_true")
    ap.add_argument("--out")
    ap.add_argument("--build", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.build:
        print(build(args.build))
        return
    py = sys.executable
    with tempfile.TemporaryDirectory() as folder:
        # Built in a child, so that this measuring parent stays small: a child's peak RSS starts
        # from its parent's at fork time.
        n = int(subprocess.run([py, __file__, "--build", folder], check=True, capture_output=True, text=True).stdout)
        assert n == 6_738_415_616, n  # docs/oracles.md
        sizes = sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder))
        rows = [("ckptstat summary", measure([py, "-m", "ckptstat", folder, "--json"], repeat=5)),
                ("safetensors.safe_open loop", measure([py, "-c", SAFE_OPEN, folder], repeat=5)),
                ("python -c pass (interpreter floor)", measure([py, "-c", "pass"], repeat=5))]
        if args.with_transformers:
            rows.append(("transformers from_pretrained + count",
                         measure([py, "-c", TRANSFORMERS, folder], repeat=1, timeout=900)))
    text = (f"Llama-2-7B shapes, 2 fp16 shards, {sizes / 2**30:.1f} GiB apparent size (sparse), "
            f"{n:,} parameters.\nMachine: {platform.machine()}, {os.cpu_count()} cores, Python "
            f"{platform.python_version()}.\n\n" + table(rows, "ckptstat summary") + "\n")
    emit(text, args.out)


if __name__ == "__main__":
    main()
