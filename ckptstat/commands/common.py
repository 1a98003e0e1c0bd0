"""What the commands share: argument and option declarations, JSON and rich output, the empty
answer (exit 1, like grep), and the usage checks of the analytic commands."""
from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from itertools import chain
from typing import TYPE_CHECKING, Any, NoReturn

import typer
from rich.console import Console

from ..core import jsontext
from ..families.images import MODELLED
from ..render.names import overflows
from .quick import CONFIG, JSON, no_match, with_fetched  # noqa: F401  (no_match: the commands' empty-selection message)

if TYPE_CHECKING:
    from ..census.model import Model

PathArg = typer.Argument(..., help="A weights file, a sharded *.index.json, or a model folder; local, or a URL "
                         "(https://, hf://org/model[@rev], s3://: docs/remote.md).")
JsonOpt = typer.Option(False, *JSON, help="Print the report as JSON (schema in the README).")
ConfigOpt = typer.Option(None, *CONFIG, help="config.json to use (default: the one beside the weights).")
FilterOpt = typer.Option(None, "--filter", "-f", help="Substring, or glob on the whole tensor name or a trailing part "
                         "from a '.' on (layers.0.* matches model.layers.0.mlp.up_proj.weight); matching nothing: "
                         "exit 1.")


def reader_gone() -> NoReturn:
    """The reader of stdout left (`ckptstat PATH | head`): no more output, and cli.main ends the run with exit 0, as
    the quick path does (rich's console and click would exit 1). stdout then points at /dev/null, so Python's
    flush at exit fails no second time; the error carries no errno, so click lets it through to cli.main."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    raise BrokenPipeError


def write_out(*pieces: str) -> None:
    """A report's text on stdout (JSON, CSV, markdown), given whole or in pieces."""
    write_all(pieces)


def write_all(pieces: Iterable[str]) -> None:
    """write_out of pieces as they come (a long JSON report's: core/jsontext.py `pieces`, never joined into one
    string, a long table's made as they are written)."""
    try:
        for piece in pieces:
            sys.stdout.write(piece)
        sys.stdout.flush()
    except BrokenPipeError:
        reader_gone()


class _Console(Console):
    """stdout. Not a terminal and no $COLUMNS: a file or a pipe, which has no width, so names are never cut
    there (render/names.py `whole`): tables of names widen to their rows and lines are not cropped; prose
    still wraps at rich's 80 columns."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.names_whole = not self.is_terminal and "COLUMNS" not in os.environ

    def print(self, *objects: Any, **options: Any) -> None:
        if self.names_whole or overflows(self, objects):
            options.setdefault("crop", False)
        super().print(*objects, **options)

    def on_broken_pipe(self) -> None:
        reader_gone()


def console() -> Console:
    return _Console(highlight=False)


def emit_json(report: dict) -> None:
    write_all(chain(jsontext.pieces(with_fetched(report)), ("\n",)))


def show(report: dict, as_json: bool, renderer: str, **options: object) -> None:
    """JSON, or the rich rendering `render.<renderer>` (rich tables load only for human output)."""
    if as_json:
        emit_json(report)
    else:
        from .. import render

        getattr(render, renderer)(report, console(), **options)


def empty(message: str) -> typer.Exit:
    """An empty answer: said on stderr (stdout keeps the report, if --json or --csv), exit status 1."""
    from ..render import inert

    print(f"ckptstat: {inert(message)}", file=sys.stderr)
    return typer.Exit(1)


def seqs(values: list[str]) -> list[int]:
    from ..errors import UsageError

    out = []
    for v in values:
        for part in v.split(","):
            part = part.strip()
            if not (part.isascii() and part.isdigit()) or len(part) > 15 or not 1 <= int(part) <= MAX_COUNT:
                raise UsageError(f"--seq takes positive integers up to {MAX_COUNT:,} (repeat it or use a comma list), "
                                 f"got {part[:40]!r}")
            out.append(int(part))
            if len(out) > MAX_SEQS:
                raise UsageError(f"--seq takes at most {MAX_SEQS:,} lengths")
    return out


def seq_flag(seqs: list[int], frames: int | None, audio_seconds: float | None) -> str | None:
    """The option that set an analytic command's input length, for its `seq` line; None: the default."""
    return "--frames" if frames is not None else "--audio-seconds" if audio_seconds is not None else "--seq" if seqs else None


MAX_COUNT = 1 << 40   # tokens, batch, images, GPUs: past any run (a value past a float's exact range is refused)
MAX_SEQS = 1_000      # --seq lengths in one report


def positive(name: str, value: int | None) -> None:
    from ..errors import UsageError

    if value is not None and not 1 <= value <= MAX_COUNT:
        raise UsageError(f"{name} must be a positive integer up to {MAX_COUNT:,}, got {str(value)[:40]}")


FramesOpt = typer.Option(None, "--frames", help="Audio models (Whisper): encoder input in mel frames "
                         "(default: 2 x max_source_positions, 3000 = 30 s).")
AudioSecondsOpt = typer.Option(None, "--audio-seconds", help="Audio models (Whisper): encoder input in seconds "
                               "(100 mel frames per second).")
ImageSizeOpt = typer.Option(None, "--image-size", help="Image models (ViT, CLIP, ResNet): input side in pixels "
                            "(default: the config's image_size; 224 for ResNet); with --images, the images' side.")
ImagesOpt = typer.Option(0, "--images", help="Images each sequence holds, for a vision-language model whose image path "
                         f"is modelled ({MODELLED}; --image-size sets the side of those that read any size): "
                         "the tower and projector run on each, and the language model reads --seq text tokens plus "
                         "each image's tokens.")


def image_input(model: Model, image_size: int | None, seqs: list[int] | tuple[int, ...] = ()) -> Model:
    """--image-size: the side an image model is analysed at (ArchSpec.image_size); a usage error for
    a model that reads no image. --seq given to a model that reads images alone is noted as unused (its figures are
    per image: a length changed nothing but a per-token division)."""
    from dataclasses import replace

    from ..errors import UsageError
    from ..families.framework.spec import image_fields

    positive("--image-size", image_size)
    if seqs and image_fields(model.spec):
        model = replace(model, notes=(*model.notes, f"--seq {', '.join(map(str, seqs))} unused: {model.spec.family} reads "
                                                    "images, its figures are per image (--image-size sets its side)"))
    if not model.spec.image_size:
        if image_size is not None:
            raise UsageError(f"--image-size applies to image models; {model.spec.family} "
                             f"({model.spec.model_type}) reads no image")
        return model
    side = model.spec.image_size if image_size is None else image_size
    note = f"input image {side}x{side}" + (" (--image-size)" if image_size else " (the default; --image-size to change)")
    return replace(model, spec=replace(model.spec, image_size=side), notes=(*model.notes, note))
