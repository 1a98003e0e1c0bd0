"""ckptstat's memory planner beside accelerate's `estimate-memory` and hf-mem, on the same models built
from their published configs (no hub access: each tool's own library functions on a meta-device model
or on the safetensors header save_pretrained would write).

    pip install accelerate hf-mem    # not test dependencies
    python bench/memory_compare.py [--out bench/results/memory_compare.md]

accelerate: `accelerate.commands.estimate` builds the model on meta in float32 (create_empty_model),
takes `calculate_maximum_sizes` (parameters + buffers, largest no-split layer), divides by 2/4/8 for
float16/int8/int4, and reports `estimate_training_usage(...)`'s largest component as "Training using
Adam". hf-mem: `parse_safetensors_metadata` over the safetensors header (numel x dtype bytes of every
stored tensor) plus, with --experimental, `compute_safetensors_kv_cache_size` at max_model_len (the
config's max_position_embeddings) and batch 1. transformers: the bytes of the DynamicCache a meta-device
forward of max_len tokens returns (the KV oracle ckptstat's tests use). docs/memory_planner.md explains each
difference.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile

import torch
import transformers as T
from accelerate.commands.estimate import estimate_training_usage
from accelerate.utils import calculate_maximum_sizes
from hf_mem.safetensors.kv_cache import compute_safetensors_kv_cache_size
from hf_mem.safetensors.metadata import parse_safetensors_metadata

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from published_configs import MODELS as PUBLISHED  # noqa: E402

from ckptstat.analysis.memory import report  # noqa: E402
from ckptstat.analysis.memory.planner import Plan  # noqa: E402
from ckptstat.census.model import load  # noqa: E402

MODELS = {name: PUBLISHED[name] for name in ("Llama-3-8B", "Mistral-7B-v0.1", "Gemma-2-2B", "GPT-2")}
SF = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16", torch.int64: "I64", torch.bool: "BOOL"}


def _header(model: torch.nn.Module) -> dict:
    """The tensors save_pretrained writes: the state_dict less the tied duplicates and non-persistent buffers."""
    params = dict(model.named_parameters())
    all_params = dict(model.named_parameters(remove_duplicate=False))
    out = {}
    for name, t in model.state_dict().items():
        if name in all_params and name not in params:
            continue   # a tied alias (lm_head.weight)
        out[name] = {"dtype": SF[t.dtype], "shape": list(t.shape)}
    return out


@contextlib.contextmanager
def _meta_autocast():
    """transformers' rotary embedding opens torch.autocast(device_type="meta"), which has no backend: a no-op there."""
    real = torch.autocast
    def patched(device_type, *a, **k):
        return contextlib.nullcontext() if device_type == "meta" else real(device_type, *a, **k)

    torch.autocast = patched
    try:
        yield
    finally:
        torch.autocast = real


def _transformers_kv(model: torch.nn.Module, n: int) -> int:
    """Bytes of every key and value tensor in the cache one meta forward of n tokens (batch 1) returns."""
    model.eval()     # Gemma2 drops the cache in training mode
    with torch.no_grad(), _meta_autocast():
        cache = model(input_ids=torch.zeros((1, n), dtype=torch.long, device="meta"), use_cache=True,
                      logits_to_keep=1).past_key_values
    return sum(t.numel() * t.element_size() for layer in cache.layers for t in (layer.keys, layer.values))


def row(name: str) -> dict:
    cfg_cls, model_cls, dtype, sizes = MODELS[name]
    cfg = getattr(T, cfg_cls)(**sizes)
    with torch.device("meta"):
        fp32 = getattr(T, model_cls)._from_config(cfg, torch_dtype=torch.float32)
        native = getattr(T, model_cls)._from_config(cfg, torch_dtype=getattr(torch, dtype))
    total32, (largest32, _) = calculate_maximum_sizes(fp32)
    half = "float16" if dtype != "float32" else "float32"
    acc_train = max(estimate_training_usage(total32, half).values())
    d = cfg.to_dict()
    d.update(architectures=[model_cls], torch_dtype=dtype)
    hf_weights = parse_safetensors_metadata(raw_metadata={"model.safetensors": _header(native)}).bytes_count
    max_len = d.get("max_position_embeddings", d.get("n_positions"))
    kv_dtype = "BF16" if dtype == "bfloat16" else "F32"
    published = {k: v for k, v in d.items() if v is not None}   # a config.json carries no nulls for unset fields
    # hf-mem's run.py skips the KV estimate (a warning) when these keys are missing (GPT-2 names them n_embd...)
    hf_kv = compute_safetensors_kv_cache_size(config=published, cache_dtype=kv_dtype, max_model_len=max_len, batch_size=1) \
        if all(k in published for k in ("hidden_size", "num_hidden_layers", "num_attention_heads")) else None
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "config.json")
        with open(path, "w") as f:
            json.dump(d, f)
        m = load(path)
        kvd = "bf16" if dtype == "bfloat16" else "fp32"
        inf = report(m, 1, max_len, None, Plan(kv_dtype=kvd, reserve=0))["fit"]
        tr = report(m, 1, 2048 if max_len > 2048 else max_len, None, Plan(mode="training", reserve=0))["fit"]
    group = lambda f, g: sum(x["bytes"] for x in f["lines"] if x["group"] == g)   # noqa: E731
    state = sum(group(tr, g) for g in ("weights", "gradients", "master weights", "optimizer state"))
    return {
        "model": name, "dtype": dtype, "params": m.params, "max_len": max_len,
        "accelerate_total": total32 if dtype == "float32" else total32 // 2, "accelerate_largest": largest32,
        "accelerate_train": acc_train, "hf_mem_weights": hf_weights, "hf_mem_kv": hf_kv,
        "ckptstat_weights": group(inf, "weights"), "ckptstat_kv": group(inf, "kv cache"),
        "transformers_kv": _transformers_kv(native, max_len),
        "ckptstat_act": group(inf, "activations"), "ckptstat_train_state": state,
        "ckptstat_train_act": group(tr, "activations"),
    }


def gib(x: float) -> str:
    return f"{x / 2**30:.2f}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    rows = [row(n) for n in MODELS]
    lines = ["| model | params | weights: accelerate / hf-mem / ckptstat (GiB) "
             "| KV at max_len: hf-mem / ckptstat / transformers (GiB) "
             "| training state: accelerate / ckptstat (GiB) | ckptstat extras (GiB) |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['model']} ({r['dtype']}) | {r['params']:,} | {gib(r['accelerate_total'])} / "
                     f"{gib(r['hf_mem_weights'])} / {gib(r['ckptstat_weights'])} | "
                     f"{gib(r['hf_mem_kv']) if r['hf_mem_kv'] is not None else 'n/a'} / "
                     f"{gib(r['ckptstat_kv'])} / {gib(r['transformers_kv'])} (s={r['max_len']:,}) | "
                     f"{gib(r['accelerate_train'])} / "
                     f"{gib(r['ckptstat_train_state'])} | inference activations {gib(r['ckptstat_act'])}, "
                     f"training activations (s<=2048) {gib(r['ckptstat_train_act'])} |")
    text = "\n".join(lines) + "\n\nExact bytes:\n\n```json\n" + json.dumps(rows, indent=1) + "\n```\n"
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    print(text)


if __name__ == "__main__":
    main()
