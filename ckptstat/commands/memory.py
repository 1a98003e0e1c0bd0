"""`memory`: weights, KV cache, activations and training state, and the planner: will it fit on this
hardware, and how far can --seq and --batch go (docs/memory_planner.md)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Optional

import typer

from ..render import DEFAULT_SEQ_RULE
from .analytic import AnalyticPath
from .common import AudioSecondsOpt, ConfigOpt, FramesOpt, ImageSizeOpt, ImagesOpt, JsonOpt, image_input, positive, seq_flag, show

if TYPE_CHECKING:
    from ..analysis.memory.planner import Plan


def memory(
    path: str = AnalyticPath,
    batch: int = typer.Option(1, "--batch", "-b", help="Batch size (per data-parallel replica)."),
    seq: Optional[int] = typer.Option(None, "--seq", "-s", help=f"Sequence length (default: {DEFAULT_SEQ_RULE})."),
    dec_seq: Optional[int] = typer.Option(None, "--dec-seq", help="Encoder-decoder (T5, BART, Whisper) decoder "
                                          "length (default: --seq; Whisper: 128 or its decoder positions if fewer)."),
    frames: Optional[int] = FramesOpt,
    audio_seconds: Optional[float] = AudioSecondsOpt,
    image_size: Optional[int] = ImageSizeOpt,
    images: int = ImagesOpt,
    mode: str = typer.Option("inference", "--mode", help="inference (weights, KV cache, one layer's activations) "
                             "or training (weights, gradients, master weights, optimizer state, saved activations)."),
    weights_dtype: Optional[str] = typer.Option(None, "--weights-dtype", help="Weights as fp32, bf16, fp16, or "
                                                "quantised int8, int4, nf4, fp4, fp8, mxfp4 (default: as stored; a bare "
                                                "config: its quantization_config)."),
    autocast: Optional[str] = typer.Option(None, "--autocast", help="Training under torch.autocast, bf16 or fp16: "
                                           "float32 weights (--weights-dtype fp32), 16-bit matmuls, their cached "
                                           "weight casts (transformers' Trainer with bf16=True on a float32 model)."),
    kv_dtype: Optional[str] = typer.Option(None, "--kv-dtype", help="KV cache as fp32, bf16, fp16, fp8, int8, int4 "
                                           "(default: the activation dtype)."),
    optimizer: str = typer.Option("adam", "--optimizer", help="Training: adam, adamw-8bit, sgd, sgd-momentum, adafactor."),
    master_weights: Optional[bool] = typer.Option(None, "--master-weights/--no-master-weights", help="Training: "
                                                  "fp32 master weights (default: on for 16-bit weights)."),
    zero: int = typer.Option(0, "--zero", help="Training: ZeRO stage 0-3 over the data-parallel GPUs."),
    checkpointing: bool = typer.Option(False, "--checkpointing/--no-checkpointing", help="Training: activation "
                                       "checkpointing (full recomputation)."),
    gpu: Optional[str] = typer.Option(None, "--gpu", help="Accelerator by name (A100-80, H100, RTX-4090, MI300X, "
                                      "M4-Max-128, ...; docs/memory_planner.md lists them); a name that only "
                                      "starts some (A100) is refused with them named."),
    gpu_mem: Optional[str] = typer.Option(None, "--gpu-mem", help="Memory per device instead of --gpu, with "
                                        "its unit: 80GiB (2^30 B), 80GB (10^9 B); a bare number is refused."),
    gpus: Optional[int] = typer.Option(None, "--gpus", help="Devices in all (default: tp x pp); the rest is data parallel."),
    tp: int = typer.Option(1, "--tp", help="Tensor-parallel degree."),
    pp: int = typer.Option(1, "--pp", help="Pipeline-parallel degree."),
    cpu_offload: bool = typer.Option(False, "--cpu-offload", help="Inference: weights in host memory, one block on "
                                     "the device at a time; training: ZeRO-Offload of gradients and optimizer state."),
    attention: str = typer.Option("eager", "--attention", help="eager (transformers' eager kernel keeps the "
                                  "b x heads x s x s scores) or flash (FlashAttention / fused SDPA: no s^2 term)."),
    reserve: Optional[str] = typer.Option(None, "--reserve", help="Runtime reserve per device (CUDA context, "
                                          "allocator fragmentation), e.g. 2GiB or 10% of the device, 0 for none; "
                                          "a size needs its unit (default 1GiB)."),
    as_json: bool = JsonOpt,
    config: Optional[str] = ConfigOpt,
) -> None:
    """Memory line by line with its rule, and whether it fits: --gpu/--gpu-mem, --tp/--pp/--zero, max --seq/--batch.

    Exit 0; with --gpu or --gpu-mem, 1 when it does not fit (or no verdict could be made), so that a script can
    gate on it."""
    from dataclasses import replace

    from ..analysis import memory as mem
    from ..analysis.flops import wrapper_images
    from ..analysis.memory.planner import Plan
    from ..analysis.meta import load
    from ..census.model import weights_only
    from ..errors import UsageError
    from ..families.framework.spec import audio_encoder, audio_inputs, default_seq, image_fields
    from ..families.images import reading

    positive("--batch", batch)
    positive("--seq", seq)
    positive("--dec-seq", dec_seq)
    positive("--frames", frames)
    plan = _plan(mode, weights_dtype, kv_dtype, optimizer, master_weights, zero, checkpointing, gpu, gpu_mem, gpus, tp,
                 pp, cpu_offload, attention, reserve, autocast)
    try:
        model = load(path, config, [seq] if seq else [], flops=False)
    except UsageError as e:   # no architecture (unknown, or a config it cannot use): what the tensors alone give
        if images:
            raise UsageError(f"--images needs the model's architecture: {e}") from None
        r = mem.weights_report(weights_only(path, config, str(e)), batch, seq or 128)
        if plan != Plan(reserve=plan.reserve, reserve_source=plan.reserve_source):
            r["notes"].append("no per-device plan or verdict: the planner needs an architecture (see 'why')")
        show(r, as_json, "render_memory", seq_flag="--seq" if seq else None)
        _exit_on_verdict(plan, None)
        return
    p = wrapper_images(model, images, image_size, batch)   # (--image-size: the images' side, then)
    model = image_input(model, None if p else image_size, [seq] if seq else [])
    lengths, dec_seq = audio_inputs(model.spec, [seq] if seq else [], dec_seq, frames, audio_seconds)
    n = lengths[0] if lengths else default_seq(model.spec)
    if p is not None:
        model = replace(model, notes=(*model.notes, f"--images {images}: s = {n} text + {images} x {p.tokens} image "
                        f"tokens ({p.side}x{p.side} px each) for the language model's KV cache and activations; the "
                        "vision tower's own activations (it runs before the language model, per image) are not in these "
                        "lines; a largest --seq found counts the image tokens too"
                        + (f"; the cross-attention layers read {images} x {p.cross} image states (KV cache and the "
                           "inference peak; the training lines do not model their saved tensors)" if p.cross else "")))
        n += images * p.tokens
        model = replace(model, spec=reading(model.spec, p, images))
    r = mem.report(model, batch, n, dec_seq, plan) | image_fields(model.spec)
    show(r, as_json, "render_memory", seq_flag=seq_flag([seq] if seq else [], frames, audio_seconds),
         frames=audio_encoder(model.spec))
    _exit_on_verdict(plan, r["fit"]["fits"])


def _exit_on_verdict(plan: Plan, fits: bool | None) -> None:
    """A capacity was given: exit 1 unless the verdict is `fits` (docs/memory_planner.md, "Exit codes")."""
    if plan.capacity is not None and fits is not True:
        raise typer.Exit(1)


def _plan(mode: str, weights_dtype: str | None, kv_dtype: str | None, optimizer: str, master_weights: bool | None,
          zero: int, checkpointing: bool, gpu: str | None, gpu_mem: str | None, gpus: int | None, tp: int, pp: int,
          cpu_offload: bool, attention: str, reserve: str | None, autocast: str | None = None) -> Plan:
    from ..analysis.memory.hardware import gpu as find_gpu
    from ..analysis.memory.hardware import parse_size
    from ..analysis.memory.planner import DEFAULT_RESERVE, Plan
    from ..errors import UsageError

    if gpu and gpu_mem:
        raise UsageError("give --gpu or --gpu-mem, not both")
    if gpu is not None and not gpu.strip() or gpu_mem is not None and not gpu_mem.strip():
        raise UsageError("--gpu and --gpu-mem take a name or a size, got an empty one")
    capacity, device = None, None
    if gpu:
        g = find_gpu(gpu)
        capacity, device = g.bytes, {"name": g.name, "gb": g.gb, "source": g.source, "note": g.note,
                                     "read_as": "CUDA's total, measured" if g.cuda_total else "GiB"}
    elif gpu_mem:
        capacity, device = parse_size("--gpu-mem", gpu_mem), {"gpu_mem": gpu_mem}
    res, res_source = DEFAULT_RESERVE, "default 1 GiB (--reserve to change)"
    if reserve is not None:
        if reserve.strip().endswith("%"):
            try:
                pct = float(reserve.strip()[:-1])
            except ValueError:
                raise UsageError(f"--reserve takes a size (2GiB) or a percentage (10%), got {reserve!r}") from None
            if capacity is None or not 0 <= pct < 100:
                raise UsageError("--reserve N% needs --gpu or --gpu-mem and 0 <= N < 100")
            res, res_source = int(capacity * pct / 100), f"--reserve {reserve} of {capacity:,} B"
        else:
            res, res_source = (0, "--reserve 0") if reserve.strip() == "0" else (parse_size("--reserve", reserve),
                                                                                   f"--reserve {reserve}")
    if autocast and weights_dtype is None:   # autocast casts float32 weights: they are held in float32
        weights_dtype = "fp32"
    plan = Plan(mode=mode, weights_dtype=weights_dtype and weights_dtype.lower(), kv_dtype=kv_dtype and kv_dtype.lower(),
                optimizer=optimizer.lower(), master_weights=master_weights, zero=zero, checkpointing=checkpointing,
                gpus=gpus, tp=tp, pp=pp, cpu_offload=cpu_offload,
                attention=attention.lower(), autocast=autocast and autocast.lower(), capacity=capacity, device=device,
                reserve=res,
                reserve_source=res_source)
    plan.check(None)
    return plan
