"""Issues 2 and 22: the header-only summary of a sharded checkpoint with Llama-2-7B's shapes.

Builds model-0000{1,2,3}-of-00003.safetensors (fp16, Llama-2-7b-hf's tensor names and shapes taken
from LlamaForCausalLM on the meta device) as sparse files: real headers, data regions left as holes.
Then times whole processes, each run in a fresh interpreter, in the same run:
  ckptstat       `python -m ckptstat DIR --json`
  ckptstat (--before TREE)  the same from another source tree (e.g. `git archive HEAD` before a change)
  safe_open      a plain `safetensors.safe_open` loop summing shapes
  transformers   `LlamaForCausalLM.from_pretrained(DIR)` and sum(p.numel())   (--with-transformers)
Every contender gets one untimed warm-up run, and byte-compiled modules (PYTHONPYCACHEPREFIX in a
temp dir, whatever PYTHONDONTWRITEBYTECODE says), as an installed package has. It also reports the
total `python -X importtime` of each ckptstat's imports on that path.
Usage: python bench/summary_7b.py [--shards 3] [--before TREE] [--with-transformers] [--out bench/results/summary_7b.md]
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
from _measure import compiled_env, emit, measure, table  # noqa: E402

LLAMA2_7B = dict(vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                 num_attention_heads=32, num_key_value_heads=32, max_position_embeddings=4096,
                 torch_dtype="float16", tie_word_embeddings=False)


def build(folder: str, dtype: str = "F16", shards: int = 3, shapes_of: dict = LLAMA2_7B) -> int:
    """The checkpoint of LlamaConfig(**shapes_of) in `shards` sparse files; returns its parameter count."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(**shapes_of)
    cfg.architectures = ["LlamaForCausalLM"]
    with torch.device("meta"):
        model = LlamaForCausalLM(cfg)
    shapes = {k: list(v.shape) for k, v in model.state_dict().items()}
    names = sorted(shapes)
    cut = [len(names) * i // shards for i in range(shards + 1)]
    weight_map = {}
    for i in range(1, shards + 1):
        part = names[cut[i - 1]:cut[i]]
        fname = f"model-{i:05d}-of-{shards:05d}.safetensors"
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


def import_ms(py: str, args: list[str], env: dict, cwd: str) -> float:
    """Total of `python -X importtime`'s top-level cumulative times (ms) for one run."""
    err = subprocess.run([py, "-X", "importtime", *args], env=env, capture_output=True, text=True, cwd=cwd).stderr
    total = 0
    for line in err.splitlines():
        if line.startswith("import time:") and "|" in line:
            _, cum, name = line.split("|")
            if cum.strip().isdigit() and not name.startswith("  "):   # top level: one space after the bar
                total += int(cum)
    return total / 1000


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--with-transformers", action="store_true")
    ap.add_argument("--shards", type=int, default=3)
    ap.add_argument("--before", help="another ckptstat source tree to time beside this one")
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--out")
    ap.add_argument("--build", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.build:
        print(build(args.build, shards=args.shards))
        return
    py = sys.executable
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with tempfile.TemporaryDirectory() as folder, tempfile.TemporaryDirectory() as pyc:
        env = compiled_env()
        env["PYTHONPYCACHEPREFIX"] = pyc
        trees = [("ckptstat summary", root)] + ([("ckptstat summary (--before)", os.path.abspath(args.before))]
                                                 if args.before else [])
        # Built in a child, so that this measuring parent stays small: a child's peak RSS starts
        # from its parent's at fork time.
        n = int(subprocess.run([py, __file__, "--build", folder, "--shards", str(args.shards)], check=True,
                               capture_output=True, text=True).stdout)
        assert n == 6_738_415_616, n  # docs/oracles.md
        sizes = sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder))
        contenders = [(name, [py, "-m", "ckptstat", folder, "--json"], dict(env, PYTHONPATH=tree)) for name, tree in trees]
        contenders += [("safetensors.safe_open loop", [py, "-c", SAFE_OPEN, folder], env),
                       ("python -c pass (interpreter floor)", [py, "-c", "pass"], env)]
        rows, imports = [], []
        for name, cmd, e in contenders:
            # cwd: the temp dir, so that `python -m ckptstat` imports the tree on PYTHONPATH, not ./ckptstat
            measure(cmd, repeat=1, env=e, cwd=pyc)   # warm-up: byte-compile, page cache
            rows.append((name, measure(cmd, repeat=args.repeat, env=e, cwd=pyc)))
            if name.startswith("ckptstat"):
                imports.append((name, import_ms(py, cmd[1:], e, pyc)))
        if args.with_transformers:
            rows.append(("transformers from_pretrained + count",
                         measure([py, "-c", TRANSFORMERS, folder], repeat=1, timeout=900)))
    walls = dict((name, r["wall_s"]) for name, r in rows)
    ratio = walls["ckptstat summary"] / walls["safetensors.safe_open loop"]
    text = (f"Llama-2-7B shapes, {args.shards} fp16 shards, {sizes / 2**30:.1f} GiB apparent size (sparse), "
            f"{n:,} parameters.\nMachine: {platform.machine()}, {os.cpu_count()} cores, Python "
            f"{platform.python_version()}; median of {args.repeat} whole-process runs after a warm-up, "
            f"byte-compiled modules.\n\n" + table(rows, "ckptstat summary") + "\n\n"
            f"ckptstat / safe_open loop: **{ratio:.2f}x** (goal, issue 22: <= 1.5x).\n\n"
            + "".join(f"- `python -X importtime` total for {name}: {ms:.0f} ms\n" for name, ms in imports))
    emit(text, args.out)


if __name__ == "__main__":
    main()
