"""Why a model's weights take more of a CUDA device than their bytes (bench/results/gpu_memory.md: ViT-B/16 7 MB above
the plan): replay its parameters and buffers, in the order the model registers them, through the block rules of torch's
caching allocator (c10/cuda/CUDACachingAllocator.cpp), and print the result beside the measured figure.

    python bench/allocator_replay.py [bench/results/gpu_memory.json]

The rules replayed: each request rounded up to 512 B (round_size); requests up to 1 MiB from the small pool, cut from
2 MiB segments, larger ones from the large pool, cut from 20 MiB segments below 10 MiB, else a segment of their size
rounded to 2 MiB (get_allocation_size); the smallest free block that fits is used (get_free_block), and it is split
only when the rest is at least 512 B (small pool) or above 1 MiB (large pool: should_split), so a large tensor placed
in a block up to 1 MiB larger holds all of it, and memory_allocated counts the whole block. Nothing is allocated: the
model is built on the meta device (its registration order is its allocation order: a dispatch mode over the
construction sees the same sequence).

On the H200 run of 2026-12-04 (gpu_memory.json) the replay gives ViT-B/16's measured 180,475,392 B to the byte
(7,340,032 B above its tensors rounded to 512 B). CLIP-B/32 and ResNet-50 measured below their replays: ResNet-50
exactly its tensors (BatchNorm buffers included) rounded to 512 B, CLIP-B/32 1,035,264 B above that. The replay starts
from an empty allocator; on the card each model was built after others, in segments empty_cache keeps while a block
of them is live, which this does not reproduce.
"""
from __future__ import annotations

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from published_configs import MODELS  # noqa: E402

MIB = 1 << 20


def replay(sizes: list[int]) -> int:
    """memory_allocated after allocating `sizes` bytes in order from an empty caching allocator."""
    free: dict[bool, list[int]] = {True: [], False: []}   # small pool?: free block sizes
    allocated = 0
    for n in sizes:
        n = max(512, -(-n // 512) * 512)
        small = n <= MIB
        fits = [b for b in free[small] if b >= n]
        if fits:
            block = min(fits)
            free[small].remove(block)
        else:
            block = 2 * MIB if small else 20 * MIB if n < 10 * MIB else -(-n // (2 * MIB)) * 2 * MIB
        rest = block - n
        if rest >= 512 if small else rest > MIB:
            free[small].append(rest)
            block = n
        allocated += block
    return allocated


def main() -> None:
    import torch
    import transformers as T

    path = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "results", "gpu_memory.json")
    with open(path) as f:
        measured = {r["model"]: r["weights_bytes"] for r in json.load(f)["cases"] if "weights_bytes" in r}
    print(f"torch {torch.__version__}, transformers {T.__version__}")
    print("| model | tensors' bytes | each rounded to 512 B | replayed | measured |")
    print("|---|---|---|---|---|")
    for name in ("ViT-B/16", "CLIP-B/32-vision", "ResNet-50"):
        cfg_cls, model_cls, dtype, sizes = MODELS[name]
        with torch.device("meta"):
            model = getattr(T, model_cls)._from_config(getattr(T, cfg_cls)(**sizes), dtype=getattr(torch, dtype))
        tensors = [t.numel() * t.element_size() for t in (*model.parameters(), *model.buffers())]
        rounded = sum(max(512, -(-n // 512) * 512) for n in tensors)
        print(f"| {name} | {sum(tensors):,} | {rounded:,} | {replay(tensors):,} | {measured.get(name, 0):,} |")


if __name__ == "__main__":
    main()
