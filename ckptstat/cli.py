"""The command line: parse arguments, call the library, render. One error boundary, in `main`.

Exit codes: 0 ok, 1 a checkpoint problem (or an internal error), 2 a usage error.
"""
from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from . import __version__
from .errors import CkptstatError

app = typer.Typer(
    add_completion=False,
    pretty_exceptions_enable=False,
    no_args_is_help=True,
    help="Inspect checkpoints (safetensors, PyTorch, TensorFlow, Keras) from their headers, without "
    "building the model. `ckptstat PATH` is `ckptstat summary PATH`. Add --debug for tracebacks.",
)

PathArg = typer.Argument(..., help="A weights file, a sharded *.index.json, or a model folder.")
JsonOpt = typer.Option(False, "--json", help="Print the report as JSON (schema in the README).")
ConfigOpt = typer.Option(None, "--config", help="config.json to use (default: the one beside the weights).")


def _console() -> Console:
    return Console(highlight=False)


def _emit_json(report: dict) -> None:
    sys.stdout.write(json.dumps(report, indent=2) + "\n")


@app.command()
def summary(
    path: Path = PathArg,
    layers: bool = typer.Option(False, "--layers", help="Also show parameters per layer."),
    as_json: bool = JsonOpt,
    config: Optional[Path] = ConfigOpt,
) -> None:
    """Parameters per bucket, layer and dtype, buffers apart, file size vs tensor bytes (headers only)."""
    from . import open_checkpoint, report

    r = report.summarize(open_checkpoint(path, config))
    if as_json:
        _emit_json(r)
    else:
        from .render import render_summary

        render_summary(r, _console(), show_layers=layers)


@app.command()
def tensors(
    path: Path = PathArg,
    filter: Optional[str] = typer.Option(None, "--filter", "-f", help="Glob or substring on tensor names."),
    as_json: bool = JsonOpt,
    config: Optional[Path] = ConfigOpt,
) -> None:
    """Every tensor: name, bucket, role, dtype, shape, numel, bytes."""
    from . import open_checkpoint, report

    r = report.tensors(open_checkpoint(path, config), filter)
    if as_json:
        _emit_json(r)
    else:
        from .render import render_tensors

        render_tensors(r, _console())


ChunkOpt = typer.Option(4 << 20, "--chunk-bytes", help="Stored bytes read per chunk (bounds memory).")
WorkersOpt = typer.Option(1, "--workers", "-w", help="Worker processes (0: one per CPU).")
ProgressOpt = typer.Option(None, "--progress/--no-progress", help="Progress bar on stderr (default: when a TTY).")
AllRolesOpt = typer.Option(False, "--all-roles", help="Also read buffers, optimizer state and counters (ints too).")
BucketOpt = typer.Option(None, "--bucket", "-b", help="Only this bucket (repeatable).")
FilterOpt = typer.Option(None, "--filter", "-f", help="Glob or substring on tensor names.")


def _collect(path, config, filter, bucket, all_roles, chunk_bytes, workers, progress):  # noqa: ANN001, ANN202
    from . import open_checkpoint
    from .stats import collect

    show = sys.stderr.isatty() if progress is None else progress
    return collect(open_checkpoint(path, config), filter, tuple(bucket or ()), all_roles, chunk_bytes, workers, show)


@app.command()
def stats(
    path: Path = PathArg,
    filter: Optional[str] = FilterOpt,
    bucket: Optional[list[str]] = BucketOpt,
    all_roles: bool = AllRolesOpt,
    layers: bool = typer.Option(False, "--layers", help="Also show statistics per layer."),
    show_tensors: bool = typer.Option(False, "--tensors", help="Also show statistics per tensor."),
    as_json: bool = JsonOpt,
    as_csv: bool = typer.Option(False, "--csv", help="Print one CSV table (tensor, layer, bucket, total rows)."),
    chunk_bytes: int = ChunkOpt,
    workers: int = WorkersOpt,
    progress: Optional[bool] = ProgressOpt,
    config: Optional[Path] = ConfigOpt,
) -> None:
    """Weight statistics per tensor, layer and bucket, streamed in bounded chunks: moments, quantiles, anomalies."""
    from .errors import UsageError

    if as_json and as_csv:
        raise UsageError("--json and --csv are exclusive")
    r = _collect(path, config, filter, bucket, all_roles, chunk_bytes, workers, progress).report
    if as_json:
        _emit_json(r)
    elif as_csv:
        from .stats import to_csv

        sys.stdout.write(to_csv(r))
    else:
        from .stats_render import render_stats

        render_stats(r, _console(), show_layers=layers, show_tensors=show_tensors)


@app.command()
def plot(
    path: Path = PathArg,
    output: Path = typer.Option(..., "--output", "-o", help="Image file: .png, .svg or .pdf."),
    log_count: bool = typer.Option(False, "--log-count", help="Log-scale count axis on the histograms."),
    clip: float = typer.Option(0.1, "--clip", help="Histogram x range from the CLIP to 100-CLIP percentile (0: min..max)."),
    size: str = typer.Option("12x0", "--size", help="Figure size in inches WxH (H 0: from the panel count)."),
    dpi: int = typer.Option(100, "--dpi", help="Dots per inch (PNG)."),
    filter: Optional[str] = FilterOpt,
    bucket: Optional[list[str]] = BucketOpt,
    all_roles: bool = AllRolesOpt,
    as_json: bool = typer.Option(False, "--json", help="Print what was drawn (and the stats) as JSON."),
    chunk_bytes: int = ChunkOpt,
    workers: int = WorkersOpt,
    progress: Optional[bool] = ProgressOpt,
    config: Optional[Path] = ConfigOpt,
) -> None:
    """Histograms per bucket and box plots per layer and bucket, drawn from streamed statistics."""
    from .plots import parse_size, plot_stats

    figsize = parse_size(size)
    run = _collect(path, config, filter, bucket, all_roles, chunk_bytes, workers, progress)
    info = plot_stats(run, output, log_count=log_count, clip=clip, figsize=figsize, dpi=dpi)
    if as_json:
        _emit_json({**info, "stats": run.report})
    else:
        print(f"wrote {info['output']} ({info['width_px']}x{info['height_px']} px, {len(info['panels'])} panels)")


def _version(value: bool) -> None:
    if value:
        print(f"ckptstat {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Show the version."),
) -> None:
    pass


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    args = [a for a in args if a != "--debug"]
    command = typer.main.get_command(app)
    commands = set(getattr(command, "commands", {}))
    first = next((a for a in args if not a.startswith("-")), None)
    if first is not None and first not in commands:
        args.insert(args.index(first), "summary")
    try:
        command.main(args=args, prog_name="ckptstat", standalone_mode=False)
    except CkptstatError as e:
        if debug:
            traceback.print_exc()
        print(f"ckptstat: error: {e}", file=sys.stderr)
        return e.exit_code
    except typer.Exit as e:
        return e.exit_code
    except typer.Abort:
        print("ckptstat: aborted", file=sys.stderr)
        return 1
    except typer.TyperException as e:  # typer >= 0.29 vendors click: its usage errors derive from this
        e.show()
        return 2
    except BrokenPipeError:
        return 0
    except Exception as e:  # the error boundary: never a traceback without --debug
        if debug:
            traceback.print_exc()
        print(f"ckptstat: internal error: {type(e).__name__}: {e} (rerun with --debug for a traceback)", file=sys.stderr)
        return 1
    return 0


def run() -> None:
    sys.exit(main())
