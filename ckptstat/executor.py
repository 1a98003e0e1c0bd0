"""The optional torch executor: build the model from its config with transformers, load the weights
through ckptstat's own readers (never torch.load), run it, and set measured latency, FLOPs and peak
memory beside the analytic figures. Needs the `run` extra (torch, transformers); nothing else in
ckptstat imports this module."""
from __future__ import annotations

import inspect
import re
import resource
import statistics
import sys
import time
import warnings
from typing import Any

from .core import Checkpoint
from .errors import CkptstatError, UsageError, missing_extra
from .families.framework.base import architectures
from .formats.registry import open_checkpoint

RUN_SCHEMA = "ckptstat.run/1"
DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def _imports():
    try:
        import torch
        import transformers
    except ImportError as e:
        raise missing_extra("`ckptstat run`", e.name, "run") from None
    return torch, transformers


def build_model(ckpt: Checkpoint, device: str, dtype: str, attn: str):
    """The model class config.json names, built on `device` in `dtype`, with the file's weights loaded the
    way transformers loads them (its renaming and conversion rules: fused MoE experts, renamed modules),
    each tensor read through ckptstat's readers when transformers asks for it."""
    torch, transformers = _imports()
    if not ckpt.config:
        raise UsageError(f"{ckpt.path}: `ckptstat run` needs a config.json beside the weights (or --config)")
    cfg_dict = dict(ckpt.config)
    try:
        cfg = transformers.AutoConfig.for_model(**cfg_dict)
    except (ValueError, KeyError) as e:
        raise UsageError(f"{ckpt.config_path}: transformers cannot build this config ({e})") from None
    names = [a for a in architectures(cfg_dict) if hasattr(transformers, a)]
    cls = getattr(transformers, names[0]) if names else _auto_class(ckpt, cfg)
    state = {name: _FileTensor(ckpt, name, torch) for name in ckpt.tensors}
    from transformers.utils import logging as hf_logging

    bar = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()   # the loader's "Loading weights" bar: ckptstat's output is its own
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            model, info = cls.from_pretrained(None, config=cfg, state_dict=state, output_loading_info=True,
                                              ignore_mismatched_sizes=True, attn_implementation=attn,
                                              dtype=getattr(torch, DTYPES[dtype]),
                                              # straight onto the device (accelerate, in the run extra); CPU needs none
                                              device_map=None if device == "cpu" else {"": device},
                                              # transformers 5 swaps in Hub kernels on CUDA by default: code fetched
                                              # and run from the Hub, and not the modules the FLOPs describe
                                              use_kernels=False)
        except (RuntimeError, ValueError) as e:   # a shape the model does not take, a conversion that fails
            raise UsageError(f"{ckpt.path}: transformers cannot load these weights into {cls.__name__} "
                             f"({str(e).splitlines()[0] if str(e) else type(e).__name__})") from None
        finally:
            if bar:
                hf_logging.enable_progress_bar()
    model.eval().requires_grad_(False)   # (FlopCounterMode's module tracker: analysis/meta.py `_build`)
    if info["mismatched_keys"]:   # (key, the file's shape, the model's) triples (transformers loading_report.py)
        key, theirs, ours = sorted(info["mismatched_keys"])[0]
        raise UsageError(f"{ckpt.path}: {key} has shape {tuple(theirs)}, {cls.__name__} expects {tuple(ours)}")
    missing = sorted(info["missing_keys"])
    loaded = [k for k in model.state_dict() if k not in info["missing_keys"]]
    return model, loaded, missing


def _auto_class(ckpt: Checkpoint, cfg):
    """The model class for a config whose `architectures` names none transformers has (none at all, or a custom
    class): the Auto class of the head the file's tensors show (an `lm_head`: AutoModelForCausalLM, as the analytic
    figures count it), else AutoModel's. (AutoModel's alone built a bare LlamaModel beside the file's lm_head: -46%
    "measured vs analytic" on a tiny Llama.)"""
    from transformers.models.auto import modeling_auto as auto

    from .census.model import from_checkpoint

    try:
        head = from_checkpoint(ckpt).spec.head
    except CkptstatError:
        head = None
    mappings = {"lm": [auto.MODEL_FOR_CAUSAL_LM_MAPPING, auto.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING],
                "mlm": [auto.MODEL_FOR_MASKED_LM_MAPPING]}.get(head or "", [])
    for mapping in [*mappings, auto.MODEL_MAPPING]:
        try:
            return mapping[type(cfg)]
        except KeyError:
            pass
    raise UsageError(f"transformers has no model class for model_type {cfg.model_type!r}")


class _FileTensor:
    """One tensor of the file, read when transformers' loader materialises it (`tensor[...]`), so the
    weights pass through memory one tensor (or one converter's group) at a time."""

    def __init__(self, ckpt: Checkpoint, name: str, torch) -> None:
        self.ckpt, self.name, self.torch = ckpt, name, torch
        self.shape = tuple(ckpt.tensors[name].shape)

    def __getitem__(self, index):
        return self.torch.from_numpy(self.ckpt.read(self.name).copy())[index]


def _inputs(model, batch: int, seq: int, device: str):
    torch, _ = _imports()
    gen = torch.Generator().manual_seed(0)
    # CLIPModel keeps the vocabulary in text_config; ViT, ResNet and CLIPVisionModel have none
    vocab = getattr(getattr(model.config, "text_config", None) or model.config, "vocab_size", None)
    ids = torch.randint(0, vocab, (batch, seq), generator=gen).to(device) if vocab else None
    kwargs = {"input_ids": ids} if ids is not None else {}
    takes = inspect.signature(model.forward).parameters
    if "pixel_values" in takes:   # ViT, ResNet, CLIP: images at the config's side (CLIPModel: and input_ids)
        c = getattr(model.config, "vision_config", None) or model.config
        side, ch = getattr(c, "image_size", 224), getattr(c, "num_channels", 3)
        side = side[0] if isinstance(side, (list, tuple)) else side
        kwargs = {k: v for k, v in kwargs.items() if k in takes}
        kwargs["pixel_values"] = torch.randn((batch, ch, side, side), generator=gen).to(device, model.dtype)
    if getattr(model, "main_input_name", "") == "input_features":   # Whisper: log-mel frames, the one length it takes
        c = model.config
        feats = torch.randn((batch, c.num_mel_bins, 2 * c.max_source_positions), generator=gen)
        kwargs = {"input_features": feats.to(device, model.dtype)}
    if model.config.is_encoder_decoder:
        kwargs["decoder_input_ids"] = ids
    return kwargs


def _analytic(ckpt: Checkpoint, batch: int, seq: int, dtype: str, attn: str) -> dict:
    """ckptstat's own figures for the same run: matmul FLOPs, and memory as `ckptstat memory` plans it for one
    device: weights in the run's dtype + KV cache + inference activations (SDPA's fused kernels keep no scores:
    `--attention flash`), no reserve."""
    from .analysis.flops import run as flops_run
    from .analysis.memory import report as memory_report
    from .analysis.memory.planner import Plan
    from .census.model import from_checkpoint
    from .families.framework.spec import audio_inputs

    model = from_checkpoint(ckpt)
    # `seq` tokens; an audio model's encoder reads its default frames and `seq` is the decoder's (audio_inputs)
    enc, dec = audio_inputs(model.spec, [], seq)
    totals = flops_run(model, batch, enc[0] if enc else seq, dec)["totals"]
    plan = Plan(weights_dtype=dtype, attention="flash" if attn == "sdpa" else "eager", reserve=0)
    fit = memory_report(model, batch, enc[0] if enc else seq, dec, plan)["fit"]
    return {"matmul_flops": totals["flops"], "macs": totals["macs"], "memory_bytes": fit["per_device_bytes"]}


def _check_seq(ckpt: Checkpoint, seq: int | None) -> int:
    """The sequence length to run: by default 128, or the learned position table if smaller; a --seq
    beyond that table is a usage error, not a crash inside transformers."""
    from .families.framework.spec import audio_inputs, check_seq, default_seq, from_config

    try:
        spec = from_config(ckpt.config, ckpt.config_path or "config.json") if ckpt.config else None
    except UsageError:
        return seq or 128  # no analytic model for this config: transformers has the last word
    if spec is None:
        return seq or 128
    frames, dec = audio_inputs(spec, [], seq, dec_flag="--seq")   # an audio model: `seq` is its decoder's
    if frames and dec is not None:
        return dec
    if seq is None:
        return default_seq(spec)
    check_seq(spec, seq)
    return seq


DEVICE = re.compile(r"cpu|mps|cuda(:\d+)?")


def check_device(device: str) -> None:
    """--device: cpu, cuda, cuda:N or mps, present on this machine (a UsageError, one line, otherwise)."""
    if not DEVICE.fullmatch(device):
        raise UsageError(f"--device {device!r}: expected cpu, cuda, cuda:N or mps")
    torch, _ = _imports()
    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise UsageError(f"--device {device}: torch sees no CUDA device here")
        n = int(device.partition(":")[2] or 0)
        if n >= torch.cuda.device_count():
            raise UsageError(f"--device {device}: torch sees {torch.cuda.device_count()} CUDA device(s) (cuda:0 ...)")
    if device == "mps" and not torch.backends.mps.is_available():
        raise UsageError("--device mps: torch sees no MPS (Apple GPU) device here")


def execute(path, device: str = "cpu", batch: int = 1, seq: int | None = None, dtype: str = "fp32", attn: str = "eager",
            warmup: int = 2, iters: int = 10, config=None) -> dict:
    check_device(device)
    torch, transformers = _imports()
    from .analysis.torch_flops import flop_counter

    if dtype not in DTYPES:
        raise UsageError(f"--dtype must be one of {', '.join(DTYPES)}")
    if attn not in ("eager", "sdpa"):
        raise UsageError("--attn must be eager or sdpa")
    if batch < 1 or (seq is not None and seq < 1) or iters < 1 or warmup < 0:
        raise UsageError("--batch, --seq and --iters must be positive, --warmup non-negative")
    ckpt = open_checkpoint(path, config)
    seq = _check_seq(ckpt, seq)
    cuda = device.startswith("cuda")
    t0 = time.perf_counter()
    model, loaded, missing = build_model(ckpt, device, dtype, attn)
    load_s = time.perf_counter() - t0
    inputs = _inputs(model, batch, seq, device)
    notes = []
    if missing:
        notes.append(f"{len(missing)} model tensor(s) not in the file, left as initialised: {', '.join(missing[:5])}"
                     + (" ..." if len(missing) > 5 else ""))

    out: Any = None
    with torch.inference_mode():
        for _ in range(warmup):
            out = None   # each pass's output (its logits and cache) freed before the next, as a loop over batches does
            out = model(**inputs)
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        times = []
        for _ in range(iters):
            out = None
            if cuda:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                out = model(**inputs)
                end.record()
                torch.cuda.synchronize()
                times.append(start.elapsed_time(end) / 1e3)
            else:
                s = time.perf_counter()
                out = model(**inputs)
                if device == "mps":   # MPS runs asynchronously too
                    torch.mps.synchronize()
                times.append(time.perf_counter() - s)
        peak_bytes = torch.cuda.max_memory_allocated() if cuda else None   # the timed passes' peak, not the counter's
        counter = flop_counter()   # FlopCounterMode, grouped_mm counted (MoE experts)
        with counter:
            model(**inputs)
    logits = out[0] if isinstance(out, tuple) else getattr(out, "logits", None)
    if logits is None:   # base models: last_hidden_state; CLIPModel: logits_per_image (the first tensor)
        logits = next(v for v in out.values() if isinstance(v, torch.Tensor))
    finite = bool(torch.isfinite(logits.float()).all())
    median = statistics.median(times)
    measured = int(counter.get_total_flops())
    try:
        analytic = _analytic(ckpt, batch, seq, dtype, attn)
    except CkptstatError as e:  # a family without analytic rules still runs; the comparison is n/a
        analytic = {"matmul_flops": None, "macs": None, "memory_bytes": None}
        notes.append(f"no analytic figures: {e}")
    peak = ({"kind": "CUDA allocator peak (torch.cuda.max_memory_allocated) over the timed passes", "bytes": peak_bytes}
            if cuda else {"kind": "process peak RSS (getrusage ru_maxrss)",
                          "bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == "darwin" else 1024),
                          "bytes_before_timed_runs": rss_before * (1 if sys.platform == "darwin" else 1024)})
    peak["analytic_bytes"] = analytic["memory_bytes"]
    peak["analytic_rule"] = ("weights in the run's dtype + KV cache + inference activations (ckptstat memory --weights-dtype "
                             f"{dtype} --attention {'flash' if attn == 'sdpa' else 'eager'} --reserve 0)"
                             + ("" if cuda else "; RSS also holds the Python and torch runtime"))
    result = {
        "schema": RUN_SCHEMA,
        "path": ckpt.path,
        "model_class": type(model).__name__,
        "device": torch.cuda.get_device_name() if cuda else "cpu",
        "dtype": dtype, "attn": attn, "batch": batch, "seq": seq, "warmup": warmup, "iters": iters,
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
        "weights": {"loaded": len(loaded), "missing": missing, "load_seconds": load_s},
        "latency": {"median_s": median, "min_s": min(times), "max_s": max(times),
                    "stdev_s": statistics.stdev(times) if len(times) > 1 else 0.0,
                    "timer": "CUDA events, synchronised" if cuda else "time.perf_counter"},
        "throughput_tokens_per_s": batch * seq / median,
        "throughput_images_per_s": batch / median if "pixel_values" in inputs else None,
        "peak_memory": peak,
        "flops": {
            "measured": measured,
            "counter": "torch.utils.flop_counter.FlopCounterMode (matmuls, MoE experts' grouped_mm and fused SDPA "
                       "kernels included; 2 FLOPs per multiply-add)",
            "analytic": analytic["matmul_flops"],
            "difference": (measured - analytic["matmul_flops"]) / analytic["matmul_flops"] if analytic["matmul_flops"] else None,
            "achieved_flop_per_s": measured / median,
        },
        "outputs_finite": finite,
        "notes": notes,
    }
    return result
