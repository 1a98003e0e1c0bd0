"""`ckptstat memory`'s planner against what one CUDA device really holds (torch's caching allocator), on models
built from their published configs (bench/published_configs.py), and the GPU's usable capacity.

    python bench/gpu_memory.py measure --out DIR          # on the GPU machine: torch and transformers only
    python bench/gpu_memory.py report DIR/gpu_memory.json [--out bench/results/gpu_memory.md]   # here: ckptstat beside

`measure` builds each model on the GPU (random weights, the config's dtype), then for each case:
- inference: one forward of `b x s` random ids with use_cache (the prefill `generate` runs, all logits kept);
  its peak is `torch.cuda.max_memory_allocated()` over the forward less what was allocated before (the weights),
  and what the output still holds after it (the cache and the logits);
- training: two steps of torch.optim.AdamW (forward with labels, backward, step, zero_grad), the peak of the
  second (the optimizer's state exists by then), bf16 weights and states, or fp32 weights under
  torch.autocast(bfloat16) (`autocast`), with gradient checkpointing where asked;
- capacity: `torch.cuda.mem_get_info()`, and how much the allocator hands out before running out (1 GiB blocks,
  then 16 MiB ones).
`report` computes ckptstat's figures for the same configs (`ckptstat memory config.json --json`, reserve 0) and
writes the table of both.
"""
from __future__ import annotations

import argparse
import contextlib
import gc
import inspect
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from published_configs import MODELS  # noqa: E402

GIB = 1 << 30
# (model, mode, attention, batch, seq, options); image models read one 224x224 image a row (seq unused)
CASES = [
    ("Llama-3-8B", "inference", "eager", 1, 2048, {}),
    ("Llama-3-8B", "inference", "eager", 4, 2048, {}),
    ("Llama-3-8B", "inference", "eager", 1, 8192, {}),
    ("Llama-3-8B", "inference", "sdpa", 4, 2048, {}),
    ("Llama-3-8B", "inference", "sdpa", 4, 8192, {}),
    ("Mistral-7B-v0.1", "inference", "eager", 1, 8192, {}),
    ("Mistral-7B-v0.1", "inference", "sdpa", 4, 8192, {}),
    ("Gemma-2-2B", "inference", "eager", 4, 2048, {}),
    ("OLMoE-1B-7B", "inference", "eager", 4, 2048, {}),
    ("OLMoE-1B-7B", "inference", "sdpa", 8, 4096, {}),
    ("Mamba-1.4B", "inference", "eager", 4, 2048, {}),
    ("GPT-2", "inference", "eager", 8, 1024, {}),
    ("GPT-2", "inference", "sdpa", 8, 1024, {}),
    ("ViT-B/16", "inference", "eager", 64, 0, {}),
    ("ViT-B/16", "inference", "sdpa", 64, 0, {}),
    ("Llama-3.2-1B", "training", "eager", 4, 1024, {}),
    ("Llama-3.2-1B", "training", "sdpa", 4, 1024, {}),
    ("Llama-3.2-1B", "training", "sdpa", 4, 1024, {"checkpointing": True}),
    ("Llama-3.2-1B", "training", "sdpa", 4, 1024, {"autocast": True}),
    ("GPT-2", "training", "eager", 8, 1024, {}),
    # the second round (2026-12-04): more families' training, image models beside ViT, Mistral inside its window
    ("GPT-2", "training", "sdpa", 8, 1024, {}),
    ("Qwen2.5-0.5B", "training", "sdpa", 8, 1024, {}),
    ("Qwen2.5-0.5B", "training", "eager", 4, 1024, {}),
    ("Qwen2.5-0.5B", "inference", "sdpa", 8, 4096, {}),
    ("Gemma-2-2B", "training", "eager", 2, 1024, {}),
    ("Mistral-7B-v0.1", "inference", "sdpa", 4, 4096, {}),
    ("CLIP-B/32-vision", "inference", "eager", 256, 0, {}),
    ("CLIP-B/32-vision", "inference", "sdpa", 256, 0, {}),
    ("ResNet-50", "inference", "eager", 64, 0, {}),
    # the third round, not yet measured (the twentieth session planned it and was lent no machine; `measure --keep
    # bench/results/gpu_memory.json --only ResNet-50 CLIP-B/32-vision` runs only these): the image rule's new terms at
    # other batches (does ResNet-50's last 0.93x grow with the batch, an activation, or not, a workspace?)
    ("ResNet-50", "inference", "eager", 16, 0, {}),
    ("ResNet-50", "inference", "eager", 256, 0, {}),
    ("CLIP-B/32-vision", "inference", "eager", 64, 0, {}),
    ("CLIP-B/32-vision", "inference", "sdpa", 64, 0, {}),
]


def _tensors(obj, seen: set, depth: int = 0):
    """Every tensor reachable from a model output's cache object (DynamicCache layers, Mamba's states)."""
    import torch

    if isinstance(obj, torch.Tensor):
        if id(obj) not in seen:
            seen.add(id(obj))
            yield obj
        return
    if depth > 4 or obj is None or isinstance(obj, (int, float, str, bool)):
        return
    items = obj.values() if isinstance(obj, dict) else obj if isinstance(obj, (list, tuple)) else \
        vars(obj).values() if hasattr(obj, "__dict__") else ()
    for x in items:
        yield from _tensors(x, seen, depth + 1)


TINY = dict(vocab_size=1000, hidden_size=64, n_embd=64, intermediate_size=128, num_hidden_layers=2, n_layer=2,
            image_size=32, num_experts=4, num_experts_per_tok=2, num_attention_heads=4, n_head=4, num_key_value_heads=2,
            head_dim=16)   # `measure --tiny`: the script's paths on a CPU


def _build(name: str, device: str, dtype_override=None, tiny: bool = False):
    import torch
    import transformers as T

    cfg_cls, model_cls, dtype, sizes = MODELS[name]
    if tiny:
        sizes = {**sizes, **{k: v for k, v in TINY.items() if k in sizes}}
    cfg = getattr(T, cfg_cls)(**sizes)
    dt = dtype_override or getattr(torch, dtype)
    torch.manual_seed(0)
    with torch.device(device):
        model = getattr(T, model_cls)._from_config(cfg, dtype=dt, attn_implementation="eager")
    return model


def _inputs(model, b: int, s: int, device: str) -> dict:
    import torch

    g = torch.Generator(device="cpu").manual_seed(0)
    if "pixel_values" in inspect.signature(model.forward).parameters:
        c = model.config
        side = getattr(c, "image_size", 224)   # ResNetConfig has none: 224, as its image processor crops
        return {"pixel_values": torch.randn((b, c.num_channels, side, side), generator=g).to(device, model.dtype)}
    return {"input_ids": torch.randint(0, model.config.vocab_size, (b, s), generator=g).to(device)}


def _mem(device: str) -> tuple[int, int]:
    import torch

    if device == "cpu":
        return 0, 0
    torch.cuda.synchronize()
    return torch.cuda.memory_allocated(), torch.cuda.max_memory_allocated()


def _reserved(device: str) -> int:
    import torch

    return 0 if device == "cpu" else torch.cuda.max_memory_reserved()


def _reset(device: str) -> int:
    import torch

    gc.collect()
    if device != "cpu":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    return _mem(device)[0]


def infer(model, b: int, s: int, attn: str, device: str) -> dict:
    import torch

    model.set_attn_implementation(attn)
    inputs = _inputs(model, b, s, device)
    base = _reset(device)
    reserved = _reserved(device)
    t = time.perf_counter()
    with torch.inference_mode():
        kw = {"use_cache": True} if "input_ids" in inputs and hasattr(model.config, "use_cache") else {}
        out = model(**inputs, **kw)
    now, peak = _mem(device)
    cache = getattr(out, "past_key_values", None) or getattr(out, "cache_params", None)
    cache_bytes = sum(x.numel() * x.element_size() for x in _tensors(cache, set()))
    logits = getattr(out, "logits", None)
    logits = out.last_hidden_state if logits is None else logits   # a tower without a head (CLIPVisionModel)
    r = {"peak_over_weights": peak - base, "reserved_peak_over_before": _reserved(device) - reserved,
         "held_after": now - base, "cache_bytes": cache_bytes,
         "logits_bytes": logits.numel() * logits.element_size(), "seconds": time.perf_counter() - t,
         "finite": bool(torch.isfinite(logits.float()).all())}
    del out, logits, cache, inputs
    return r


def train(model, b: int, s: int, attn: str, device: str, checkpointing: bool = False, autocast: bool = False) -> dict:
    import torch

    model.set_attn_implementation(attn)
    model.train()
    model.requires_grad_(True)
    if checkpointing:   # transformers 5.25 renamed it activation_checkpointing_enable
        (getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable)()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6)
    inputs = _inputs(model, b, s, device)
    weights = _reset(device)
    ctx = torch.autocast(device_type=device.split(":")[0], dtype=torch.bfloat16) if autocast else contextlib.nullcontext()
    phases = {}
    for _ in range(2):
        _reset(device)
        with ctx:
            loss = model(**inputs, labels=inputs["input_ids"], use_cache=False).loss
        fwd = _mem(device)[1]
        loss.backward()
        bwd = _mem(device)[1]
        opt.step()
        stepped = _mem(device)
        opt.zero_grad(set_to_none=True)
        phases = {"forward_peak": fwd - weights, "backward_peak": bwd - weights, "step_peak": stepped[1] - weights,
                  "after_step": stepped[0] - weights}
        del loss
    state = sum(v.numel() * v.element_size() for st in opt.state.values() for v in st.values() if torch.is_tensor(v))
    if checkpointing:
        (getattr(model, "activation_checkpointing_disable", None) or model.gradient_checkpointing_disable)()
    model.eval()
    model.requires_grad_(False)
    del opt, inputs
    return {**phases, "optimizer_state_bytes": state,
            "peak_over_weights": max(phases["forward_peak"], phases["backward_peak"], phases["step_peak"])}


def capacity(device: str) -> dict:
    import torch

    if device == "cpu":
        return {}
    free, total = torch.cuda.mem_get_info()
    blocks, got = [], 0
    for size in (GIB, 16 << 20):
        while True:
            try:
                blocks.append(torch.empty(size, dtype=torch.uint8, device=device))
                got += size
            except torch.OutOfMemoryError:
                break
    del blocks
    torch.cuda.empty_cache()
    return {"total_bytes": total, "free_bytes": free, "allocatable_bytes": got,
            "device_name": torch.cuda.get_device_name(), "nvidia_smi": _smi()}


def _smi() -> str:
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


CASE_FIELDS = ("model", "mode", "attention", "batch", "seq", "options")   # a CASES entry, the start of its row


def _key(row: dict) -> str:
    return json.dumps([row.get(k) for k in CASE_FIELDS], sort_keys=True)


def measure(out_dir: str, device: str, only: list[str] | None, tiny: bool = False, keep: str | None = None) -> None:
    """`keep`: an earlier gpu_memory.json of the same card and versions; its rows are kept and not measured again."""
    import torch
    import transformers as T

    torch.backends.cuda.matmul.allow_tf32 = True
    result = {"torch": torch.__version__, "transformers": T.__version__, "device": device,
              "capacity": capacity(device), "cases": []}
    if keep:
        with open(keep) as f:
            result["cases"] = [r for r in json.load(f)["cases"] if "error" not in r]
    done = {_key(r) for r in result["cases"]}
    by_model: dict[str, list] = {}
    for c in CASES:
        if (not only or c[0] in only) and _key(dict(zip(CASE_FIELDS, c))) not in done:
            by_model.setdefault(c[0], []).append(c)
    for name, cases in by_model.items():
        t = time.perf_counter()
        base = _reset(device)
        try:
            model = _build(name, device, tiny=tiny)
        except Exception as e:   # noqa: BLE001 (recorded; the other models still run)
            result["cases"].append({"model": name, "error": f"build: {type(e).__name__}: {e}"})
            print(result["cases"][-1], flush=True)
            continue
        weights = _mem(device)[0] - base
        print(f"{name}: built in {time.perf_counter() - t:.1f} s, {weights / GIB:.2f} GiB", flush=True)
        for (_, mode, attn, b, s, opts) in cases:
            if tiny:
                b, s = min(b, 2), min(s, 32)
            row = {"model": name, "mode": mode, "attention": attn, "batch": b, "seq": s, "options": opts,
                   "weights_bytes": weights}
            try:
                if mode == "inference":
                    row.update(infer(model, b, s, attn, device))
                elif opts.get("autocast"):
                    del model
                    _reset(device)
                    model = _build(name, device, torch.float32, tiny)
                    row["weights_bytes"] = _mem(device)[0] - base
                    row.update(train(model, b, s, attn, device, autocast=True))
                else:
                    row.update(train(model, b, s, attn, device, checkpointing=bool(opts.get("checkpointing"))))
            except torch.OutOfMemoryError as e:
                row["error"] = f"OutOfMemoryError: {str(e).splitlines()[0]}"
            except Exception as e:   # noqa: BLE001 (a case that breaks is recorded, the others still run)
                row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            print(json.dumps(row), flush=True)
            result["cases"].append(row)
        del model
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "gpu_memory.json"), "w") as f:
        json.dump(result, f, indent=1)


def _planned(name: str, row: dict) -> dict:
    """ckptstat memory's per-device lines for the case, reserve 0, from the config transformers writes."""
    import transformers as T

    cfg_cls, model_cls, dtype, sizes = MODELS[name]
    d = getattr(T, cfg_cls)(**sizes).to_dict()
    opts = row["options"]
    d.update(architectures=[model_cls], torch_dtype="float32" if opts.get("autocast") else dtype)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "config.json")
        with open(path, "w") as f:
            json.dump(d, f)
        cmd = [sys.executable, "-m", "ckptstat", "memory", path, "--json", "-b", str(row["batch"]), "--reserve", "0",
               "--gpu", "H200", "--mode", row["mode"], "--attention", "flash" if row["attention"] == "sdpa" else "eager"]
        if row["seq"]:
            cmd += ["-s", str(row["seq"])]
        if row["mode"] == "training":
            cmd += ["--no-master-weights"]   # bf16 weights: moments at 2 B; fp32 (autocast): 4 + 4 + 8 B/param
            cmd += ["--checkpointing"] if opts.get("checkpointing") else []
            cmd += ["--autocast", "bf16"] if opts.get("autocast") else []   # its weight casts, float32 norms
        r = subprocess.run(cmd, capture_output=True, text=True, cwd=os.path.dirname(HERE))
        if r.returncode:
            return {"error": r.stderr.strip()}
        return json.loads(r.stdout)["fit"]


def report(path: str, out: str | None) -> None:
    with open(path) as f:
        res = json.load(f)
    cap = res["capacity"]
    lines = [f"Measured with torch {res['torch']}, transformers {res['transformers']} on {cap.get('device_name')} "
             f"({cap.get('nvidia_smi')}); ckptstat's figures with `ckptstat memory config.json --reserve 0` "
             "(sdpa planned as `--attention flash`; training as `--no-master-weights`, bf16 or fp32 weights (autocast) "
             "as torch.optim.AdamW keeps them: gradients and moments in the weights' dtype).", "",
             f"Capacity: driver total {cap.get('total_bytes', 0) / GIB:.2f} GiB, free at start "
             f"{cap.get('free_bytes', 0) / GIB:.2f} GiB, the allocator handed out {cap.get('allocatable_bytes', 0) / GIB:.2f} "
             "GiB; `--gpu H200` plans 141 GiB.", "",
             "| model | case | weights: measured / planned (GiB) | over the weights: measured peak / planned (GiB) | "
             "planned / measured | cache + logits held after (GiB) |", "|---|---|---|---|---|---|"]
    rows = []
    for row in res["cases"]:
        plan = _planned(row["model"], row)
        case = (f"{row['mode']} {row['attention']} b={row['batch']}" + (f" s={row['seq']}" if row["seq"] else "")
                + "".join(f" {k}" for k, v in row["options"].items() if v))
        if "error" in row or "error" in plan:
            lines.append(f"| {row['model']} | {case} | {row.get('error') or plan.get('error')} | | | |")
            continue
        w = sum(x["bytes"] for x in plan["lines"] if x["group"] == "weights")
        over = plan["per_device_bytes"] - w
        meas = row["peak_over_weights"]
        held = row.get("held_after")
        lines.append(f"| {row['model']} | {case} | {row['weights_bytes'] / GIB:.2f} / {w / GIB:.2f} | "
                     f"{meas / GIB:.2f} / {over / GIB:.2f} | {over / meas if meas else float('nan'):.2f} | "
                     f"{'' if held is None else f'{held / GIB:.2f}'} |")
        rows.append({**row, "planned_weights": w, "planned_over_weights": over,
                     "planned_lines": [{k: x[k] for k in ("group", "item", "bytes")} for x in plan["lines"]]})
    text = "\n".join(lines) + "\n\nExact bytes:\n\n```json\n" + json.dumps(rows, indent=1) + "\n```\n"
    if out:
        with open(out, "w") as f:
            f.write(text)
    print(text)


def main() -> None:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure")
    m.add_argument("--out", required=True)
    m.add_argument("--device", default="cuda")
    m.add_argument("--only", nargs="*")
    m.add_argument("--tiny", action="store_true")
    m.add_argument("--keep", help="an earlier gpu_memory.json: its rows are kept, only new cases run")
    r = sub.add_parser("report")
    r.add_argument("results")
    r.add_argument("--out")
    a = ap.parse_args()
    if a.cmd == "measure":
        measure(a.out, a.device, a.only, a.tiny, a.keep)
    else:
        report(a.results, a.out)


if __name__ == "__main__":
    main()
