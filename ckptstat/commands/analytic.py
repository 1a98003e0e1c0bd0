"""`flops` (and the path argument `memory` shares): analytic figures from the config (or the tensor shapes); no model is built."""
from __future__ import annotations

from typing import Optional

import typer

from ..render import DEFAULT_SEQ_RULE
from .common import (
    AudioSecondsOpt,
    ConfigOpt,
    FramesOpt,
    ImageSizeOpt,
    ImagesOpt,
    JsonOpt,
    image_input,
    positive,
    seq_flag,
    seqs,
    show,
)

AnalyticPath = typer.Argument(..., help="A weights file, index or folder (with its config.json), or a bare config.json.")


def flops(
    path: str = AnalyticPath,
    batch: int = typer.Option(1, "--batch", "-b", help="Batch size."),
    seq: list[str] = typer.Option([], "--seq", "-s", help="Sequence length; repeat or comma-separate for a sweep "
                                  f"(default: {DEFAULT_SEQ_RULE})."),
    dec_seq: Optional[int] = typer.Option(None, "--dec-seq", help="Encoder-decoder (T5, BART, Whisper) decoder "
                                          "length (default: --seq; Whisper: 128 or its decoder positions if fewer)."),
    frames: Optional[int] = FramesOpt,
    audio_seconds: Optional[float] = AudioSecondsOpt,
    image_size: Optional[int] = ImageSizeOpt,
    images: int = ImagesOpt,
    causal_halving: bool = typer.Option(False, "--causal-halving",
                                        help="Count only the (query, key) pairs causal masks keep, sliding windows included."),
    convention: str = typer.Option("flops", "--convention", help="Headline figure: flops (2 per MAC, as torch's "
                                   "FlopCounterMode), macs (what thop/ptflops call FLOPs), bertstat (legacy MAdd)."),
    as_json: bool = JsonOpt,
    config: Optional[str] = ConfigOpt,
) -> None:
    """Analytic FLOPs and MACs per module, from the config (or tensor shapes); no model is built."""
    from ..analysis import flops as fl
    from ..analysis.meta import load
    from ..errors import UsageError
    from ..families.framework.spec import audio_encoder, audio_inputs, default_seq, image_fields

    if convention not in fl.CONVENTIONS:
        raise UsageError(f"--convention must be one of {', '.join(fl.CONVENTIONS)}, got {convention!r}")
    positive("--batch", batch)
    positive("--dec-seq", dec_seq)
    positive("--frames", frames)
    model = load(path, config, seqs(seq))
    path_of_images = fl.wrapper_images(model, images, image_size, batch)   # (--image-size: the images' side, then)
    model = image_input(model, None if path_of_images else image_size, seqs(seq))
    lengths, dec_seq = audio_inputs(model.spec, seqs(seq), dec_seq, frames, audio_seconds)
    r = fl.report(model, batch, lengths or [default_seq(model.spec)], dec_seq, causal_halving, convention,
                  path_of_images, images)
    r |= image_fields(model.spec)
    show(r, as_json, "render_flops", seq_flag=seq_flag(seqs(seq), frames, audio_seconds), frames=audio_encoder(model.spec))

