"""The command line: parse arguments, call the library, render. One error boundary, in `main`.

Exit codes: 0 ok, 1 a checkpoint problem (or an internal error), 2 a usage error. An empty answer
is 1, like grep: `tensors`/`stats -f` matching nothing, `plot` with no finite value to draw (no file
written). `diff` answers like diff(1): 0 same, 1 different, 2 any trouble.
"""
from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer
from rich.console import Console

from . import __version__
from .errors import CkptstatError
from .render import DEFAULT_SEQ_RULE

if TYPE_CHECKING:
    from .analysis.stats import StatsRun
    from .census.model import Model

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
FilterOpt = typer.Option(None, "--filter", "-f", help="Glob or substring on tensor names (matching nothing: exit 1).")


def _console() -> Console:
    return Console(highlight=False)


def _emit_json(report: dict) -> None:
    sys.stdout.write(json.dumps(report, indent=2) + "\n")


def _show(report: dict, as_json: bool, renderer: str, **options: object) -> None:
    """JSON, or the rich rendering `render.<renderer>` (rich tables load only for human output)."""
    if as_json:
        _emit_json(report)
    else:
        from . import render

        getattr(render, renderer)(report, _console(), **options)


def _empty(message: str) -> typer.Exit:
    """An empty answer: said on stderr (stdout keeps the report, if --json or --csv), exit status 1."""
    from .render import inert

    print(f"ckptstat: {inert(message)}", file=sys.stderr)
    return typer.Exit(1)


def _no_match(pattern: str | None, buckets: list[str] | None = None, skipped: list[dict] | None = None) -> str:
    what = f"no tensor matches {pattern!r}" if pattern else "no tensor selected"
    if buckets:
        what += f" in bucket {', '.join(buckets)}"
    if any(s["reason"].startswith("role ") for s in skipped or ()):
        what += " among the parameters (--all-roles reads buffers and training state too)"
    return what


@app.command()
def summary(
    path: Path = PathArg,
    layers: bool = typer.Option(False, "--layers", help="Also show parameters per layer."),
    as_json: bool = JsonOpt,
    config: Optional[Path] = ConfigOpt,
    verify: bool = typer.Option(False, "--verify", help="Also check stored checksums (TF bundles: crc32c of "
                                "every tensor and index block); reads all tensor bytes."),
) -> None:
    """Parameters per bucket, layer and dtype, buffers apart, file size vs tensor bytes (headers only)."""
    from . import open_checkpoint
    from .analysis.summary import summarize as summarize_report

    r = summarize_report(open_checkpoint(path, config, verify=verify))
    if as_json:
        _emit_json(r)
    else:
        from .render import render_summary

        render_summary(r, _console(), show_layers=layers)


@app.command()
def tensors(
    path: Path = PathArg,
    filter: Optional[str] = FilterOpt,
    as_json: bool = JsonOpt,
    config: Optional[Path] = ConfigOpt,
) -> None:
    """Every tensor: name, bucket, role, dtype, shape, numel, bytes."""
    from . import open_checkpoint
    from .analysis.summary import tensors as tensors_report

    r = tensors_report(open_checkpoint(path, config), filter)
    if filter is not None and not r["tensors"]:
        if as_json:
            _emit_json(r)
        raise _empty(_no_match(filter))
    _show(r, as_json, "render_tensors")


@app.command()
def ties(
    path: Path = PathArg,
    deep: bool = typer.Option(False, "--deep", help="Also hash stored tensors to find identical copies "
                              "(reads values, bounded memory)."),
    as_json: bool = JsonOpt,
    config: Optional[Path] = ConfigOpt,
) -> None:
    """Tied weights with their evidence, and the parameter count under every counting convention."""
    from . import open_checkpoint
    from .analysis.ties import audit

    r = audit(open_checkpoint(path, config), deep=deep)
    _show(r, as_json, "render_ties")


@app.command()
def diff(
    a: Path = typer.Argument(..., help="First checkpoint."),
    b: Path = typer.Argument(..., help="Second checkpoint."),
    as_json: bool = JsonOpt,
    names_only: bool = typer.Option(False, "--names-only", help="Headers only: names, shapes, dtypes, counts; no value read."),
    atol: float = typer.Option(0.0, "--atol", help="Values equal when |a-b| <= atol + rtol*|b| everywhere."),
    rtol: float = typer.Option(0.0, "--rtol", help="See --atol."),
    rules: Optional[Path] = typer.Option(None, "--map", help="Name rules file: one `regex -> replacement` per line."),
    fmt: str = typer.Option("text", "--format", help="text (tables), md (a markdown report) or html (a self-contained page)."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write the report (md, html or --json) to this file."),
) -> None:
    """Tensor by tensor, what changed: added, removed, shape, dtype, values (max abs diff, relative L2,
    cosine) or equal; per bucket and layer; and where parameter counts part, module by module.

    Exit status as diff(1): 0 no differences, 1 different, 2 trouble."""
    from . import open_checkpoint
    from .analysis.diff import diff as diff_checkpoints
    from .analysis.diff import load_rules
    from .errors import UsageError

    if fmt not in ("text", "md", "html"):
        raise UsageError(f"--format must be text, md or html, not {fmt!r}")
    ca, cb = open_checkpoint(a), open_checkpoint(b)
    if output is not None:
        from .render.diff import is_input

        if is_input(str(output), [str(a), str(b), *ca.files, *cb.files]):
            raise UsageError(f"{output}: the output is one of the inputs; refusing to overwrite it")
    r = diff_checkpoints(ca, cb, names_only=names_only, atol=atol, rtol=rtol,
                         rules=load_rules(str(rules)) if rules is not None else None)
    if output is not None or fmt != "text" and not as_json:
        from .render.diff import diff_html, diff_markdown, write_atomic

        if output is not None and fmt == "text" and not as_json:   # -o alone: the format from the suffix
            fmt = "html" if output.suffix.lower() in (".html", ".htm") else "md"
        text = json.dumps(r, indent=2) if as_json else diff_html(r) if fmt == "html" else diff_markdown(r)
        text += "\n"
        if output is None:
            sys.stdout.write(text)
        else:
            write_atomic(str(output), text)
    elif as_json:
        _emit_json(r)
    else:
        from .render.diff import render_diff

        render_diff(r, _console())
    if not r["same"]:
        raise typer.Exit(1)


AnalyticPath = typer.Argument(..., help="A weights file, index or folder (with its config.json), or a bare config.json.")


def _seqs(values: list[str]) -> list[int]:
    from .errors import UsageError

    out = []
    for v in values:
        for part in v.split(","):
            part = part.strip()
            if not part.isdigit() or int(part) < 1:
                raise UsageError(f"--seq takes positive integers (repeat it or use a comma list), got {part!r}")
            out.append(int(part))
    return out


def _positive(name: str, value: int | None) -> None:
    from .errors import UsageError

    if value is not None and value < 1:
        raise UsageError(f"{name} must be a positive integer, got {value}")


FramesOpt = typer.Option(None, "--frames", help="Audio models (Whisper): encoder input in mel frames "
                         "(default: 2 x max_source_positions, 3000 = 30 s).")
AudioSecondsOpt = typer.Option(None, "--audio-seconds", help="Audio models (Whisper): encoder input in seconds "
                               "(100 mel frames per second).")
ImageSizeOpt = typer.Option(None, "--image-size", help="Image models (ViT, CLIP, ResNet): input side in pixels "
                            "(default: the config's image_size; 224 for ResNet).")


def _image_input(model: Model, image_size: int | None) -> Model:
    """--image-size: the side an image model is analysed at (ArchSpec.extra image_size); a usage error for
    a model that reads no image."""
    from dataclasses import replace

    from .errors import UsageError

    _positive("--image-size", image_size)
    sizes = dict(model.spec.extra)
    if "image_size" not in sizes:
        if image_size is not None:
            raise UsageError(f"--image-size applies to image models; {model.spec.family} "
                             f"({model.spec.model_type}) reads no image")
        return model
    side = sizes["image_size"] if image_size is None else image_size
    note = f"input image {side}x{side}" + (" (--image-size)" if image_size else " (the default; --image-size to change)")
    return replace(model, spec=model.spec.with_extra(image_size=side), notes=(*model.notes, note))


@app.command()
def flops(
    path: Path = AnalyticPath,
    batch: int = typer.Option(1, "--batch", "-b", help="Batch size."),
    seq: list[str] = typer.Option([], "--seq", "-s", help="Sequence length; repeat or comma-separate for a sweep "
                                  f"(default: {DEFAULT_SEQ_RULE})."),
    dec_seq: Optional[int] = typer.Option(None, "--dec-seq", help="Encoder-decoder (T5, BART, Whisper) decoder "
                                          "length (default: --seq; Whisper: 128 or its decoder positions if fewer)."),
    frames: Optional[int] = FramesOpt,
    audio_seconds: Optional[float] = AudioSecondsOpt,
    image_size: Optional[int] = ImageSizeOpt,
    causal_halving: bool = typer.Option(False, "--causal-halving", help="Count only the unmasked half of causal attention."),
    convention: str = typer.Option("flops", "--convention", help="Headline figure: flops (2 per MAC, as torch's "
                                   "FlopCounterMode), macs (what thop/ptflops call FLOPs), bertstat (legacy MAdd)."),
    as_json: bool = JsonOpt,
    config: Optional[Path] = ConfigOpt,
) -> None:
    """Analytic FLOPs and MACs per module, from the config (or tensor shapes); no model is built."""
    from .analysis import flops as fl
    from .census.model import load
    from .errors import UsageError
    from .families.spec import audio_inputs, default_seq

    if convention not in fl.CONVENTIONS:
        raise UsageError(f"--convention must be one of {', '.join(fl.CONVENTIONS)}, got {convention!r}")
    _positive("--batch", batch)
    _positive("--dec-seq", dec_seq)
    _positive("--frames", frames)
    model = _image_input(load(path, config), image_size)
    seqs, dec_seq = audio_inputs(model.spec, _seqs(seq), dec_seq, frames, audio_seconds)
    r = fl.report(model, batch, seqs or [default_seq(model.spec)], dec_seq, causal_halving, convention)
    _show(r, as_json, "render_flops", seq_default=not seqs)


@app.command()
def memory(
    path: Path = AnalyticPath,
    batch: int = typer.Option(1, "--batch", "-b", help="Batch size."),
    seq: Optional[int] = typer.Option(None, "--seq", "-s", help=f"Sequence length (default: {DEFAULT_SEQ_RULE})."),
    dec_seq: Optional[int] = typer.Option(None, "--dec-seq", help="Encoder-decoder (T5, BART, Whisper) decoder "
                                          "length (default: --seq; Whisper: 128 or its decoder positions if fewer)."),
    frames: Optional[int] = FramesOpt,
    audio_seconds: Optional[float] = AudioSecondsOpt,
    image_size: Optional[int] = ImageSizeOpt,
    as_json: bool = JsonOpt,
    config: Optional[Path] = ConfigOpt,
) -> None:
    """Weights (stored and what-if dtypes), KV cache, activations and Adam training state, each with its rule."""
    from .analysis import memory as mem
    from .census.model import load, weights_only
    from .errors import UsageError
    from .families.spec import audio_inputs, default_seq

    _positive("--batch", batch)
    _positive("--seq", seq)
    _positive("--dec-seq", dec_seq)
    _positive("--frames", frames)
    try:
        model = load(path, config)
    except UsageError as e:   # no architecture (unknown, or a config it cannot use): what the tensors alone give
        _show(mem.weights_report(weights_only(path, config, str(e)), batch, seq or 128), as_json, "render_memory",
              seq_default=not seq)
        return
    model = _image_input(model, image_size)
    seqs, dec_seq = audio_inputs(model.spec, [seq] if seq else [], dec_seq, frames, audio_seconds)
    r = mem.report(model, batch, seqs[0] if seqs else default_seq(model.spec), dec_seq)
    _show(r, as_json, "render_memory", seq_default=not seqs)


ChunkOpt = typer.Option(4 << 20, "--chunk-bytes", help="Stored bytes read per chunk (bounds memory).")
WorkersOpt = typer.Option(1, "--workers", "-w", help="Worker processes (0: one per CPU).")
ProgressOpt = typer.Option(None, "--progress/--no-progress", help="Progress bar on stderr (default: when a TTY).")
AllRolesOpt = typer.Option(False, "--all-roles", help="Also read buffers, optimizer state and counters (ints too).")
BucketOpt = typer.Option(None, "--bucket", "-B", help="Only this bucket (repeatable).")


def _collect(path: Path, config: Path | None, filter: str | None, bucket: list[str] | None, all_roles: bool,
             chunk_bytes: int, workers: int, progress: bool | None, output: Path | None = None) -> StatsRun:
    """The stats run, with the library's progress callback drawn as a bar on stderr (default: on a TTY).
    An `output` that is, or resolves to, an input is refused before any value is read."""
    from . import open_checkpoint
    from .analysis.stats import collect
    from .core.files import check_output
    from .render.progress import progress_bar

    ckpt = open_checkpoint(path, config)
    if output is not None:
        check_output(output, [path, config, ckpt.path, ckpt.config_path, *ckpt.files])
    with progress_bar(sys.stderr.isatty() if progress is None else progress) as bar:
        return collect(ckpt, filter, tuple(bucket or ()), all_roles, chunk_bytes, workers, bar)


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
        from .analysis.stats import to_csv

        sys.stdout.write(to_csv(r))
    else:
        from .render.stats import render_stats

        render_stats(r, _console(), show_layers=layers, show_tensors=show_tensors)
    if not r["tensors"]:
        raise _empty(_no_match(filter, bucket, r["skipped"]))


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
    """Histograms per bucket and box plots per layer and bucket, drawn from streamed statistics.

    Nothing to draw (no tensor selected, or no finite value in them): no file written, exit 1."""
    from .render.plots import check_plot_args, nothing_to_plot, parse_size, plot_stats

    figsize = parse_size(size)
    check_plot_args(output, clip, dpi)   # before reading any value
    run = _collect(path, config, filter, bucket, all_roles, chunk_bytes, workers, progress, output)
    if not run.report["tensors"]:
        raise _empty(f"{_no_match(filter, bucket, run.report['skipped'])}: nothing to plot, {output} not written")
    empty = nothing_to_plot(run)
    if empty:
        raise _empty(f"{empty}: nothing to plot, {output} not written")
    info = plot_stats(run, output, log_count=log_count, clip=clip, figsize=figsize, dpi=dpi)
    if as_json:
        _emit_json({**info, "stats": run.report})
    else:
        print(f"wrote {info['output']} ({info['width_px']}x{info['height_px']} px, {len(info['panels'])} panels)")


@app.command()
def scan(path: Path = typer.Argument(..., help="A torch.save file (zip, legacy, tar), a pickle, or a folder to walk."),
         as_json: bool = JsonOpt) -> None:
    """What torch.load without weights_only would run, following the path it takes through the file
    (nothing is unpickled). A folder: every pickle-bearing file under it. Exit 0 clean, 1 unsafe or
    unknown, 2 unreadable or usage."""
    from .analysis.scan import TREE_SCHEMA, exit_code, scan_path

    try:
        r = scan_path(path)
    except CkptstatError as e:
        e.exit_code = 2          # here 1 means "unsafe": a file scan cannot read is a read error
        raise
    if as_json:
        _emit_json(r)
    else:
        from .render.scan import render_scan, render_scan_tree

        (render_scan_tree if r["schema"] == TREE_SCHEMA else render_scan)(r, _console())
    code = exit_code(r)
    if code:
        raise typer.Exit(code)


@app.command("run")
def run_model(
    path: Path = PathArg,
    device: str = typer.Option("cpu", "--device", help="cpu, cuda, cuda:N or mps."),
    batch: int = typer.Option(1, "--batch", "-b"),
    seq: Optional[int] = typer.Option(None, "--seq", "-s", help=f"Sequence length (default: {DEFAULT_SEQ_RULE})."),
    dtype: str = typer.Option("fp32", "--dtype", help="fp32, bf16 or fp16."),
    attn: str = typer.Option("eager", "--attn", help="Attention implementation: eager or sdpa."),
    warmup: int = typer.Option(2, "--warmup"),
    iters: int = typer.Option(10, "--iters"),
    as_json: bool = JsonOpt,
    config: Optional[Path] = ConfigOpt,
) -> None:
    """Run the model (the `run` extra): measured latency, FLOPs and peak memory beside the analytic figures."""
    from .executor import execute

    r = execute(path, device, batch, seq, dtype, attn, warmup, iters, config)
    _show(r, as_json, "render_run")


def _version(value: bool) -> None:
    if value:
        print(f"ckptstat {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Show the version."),
    # Read by main() wherever they stand on the line (like --debug); declared here for --help.
    allow_external: bool = typer.Option(False, "--allow-external", help="Follow references outside the checkpoint "
                                        "(HDF5 external links and storage, a TF pointer or symlink elsewhere)."),
    limit: Optional[list[str]] = typer.Option(None, "--limit", metavar="NAME=N", help="Raise one of the limits that "
                                              "bound hostile files (docs/security.md lists them)."),
) -> None:
    pass


def _global_options(args: list[str]) -> tuple[list[str], bool, dict[str, int]]:
    """--allow-external and --limit NAME=N, taken out of the line wherever they stand."""
    from .errors import UsageError

    rest, allow, limits = [], False, {}
    it = iter(args)
    for a in it:
        if a == "--allow-external":
            allow = True
        elif a == "--limit" or a.startswith("--limit="):
            spec = a[len("--limit="):] if a.startswith("--limit=") else next(it, "")
            name, _, value = spec.partition("=")
            if not value.isdigit():
                raise UsageError(f"--limit takes NAME=N (a non-negative integer), got {spec!r}")
            limits[name] = int(value)
        else:
            rest.append(a)
    return rest, allow, limits


def _line(e: BaseException) -> str:
    """An error's text for the one line: cut short before it is escaped (a hostile name can be long)."""
    from .render import inert

    text = str(e)
    return inert(text if len(text) <= 2000 else text[:2000] + "...")


def main(argv: list[str] | None = None) -> int:
    from .core import files, limits

    old_limits, old_allow = limits.limits(), files.allow_external_default()
    try:
        return _main(argv)
    finally:   # in-process callers (tests, notebooks) get the defaults back
        limits.reset(old_limits)
        files.set_allow_external(old_allow)


def _main(argv: list[str] | None) -> int:
    from .core import files, limits

    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    args = [a for a in args if a != "--debug"]
    try:
        args, allow, raised = _global_options(args)
        limits.set_limits(**raised)
    except (CkptstatError, ValueError) as e:
        print(f"ckptstat: error: {_line(e)}", file=sys.stderr)
        return 2
    files.set_allow_external(allow)
    command = typer.main.get_command(app)
    commands = set(getattr(command, "commands", {}))
    first = next((a for a in args if not a.startswith("-")), None)
    if first is not None and first not in commands:
        near = _nearest_command(first, commands)
        if near:
            print(f"ckptstat: no command or path {first!r}; did you mean {near!r}? (ckptstat --help lists the "
                  "commands)", file=sys.stderr)
            return 2
        args.insert(0, "summary")  # `ckptstat [OPTIONS] PATH` is `ckptstat summary [OPTIONS] PATH`
    trouble = 2 if first == "diff" else None   # diff answers 0 same / 1 different, as diff(1): trouble is 2
    try:
        # Without standalone mode, click returns a typer.Exit's code instead of raising it.
        rc = command.main(args=args, prog_name="ckptstat", standalone_mode=False)
    except CkptstatError as e:   # messages quote names from files: _line prints them inert
        if debug:
            traceback.print_exc()
        print(f"ckptstat: error: {_line(e)}", file=sys.stderr)
        return trouble or e.exit_code
    except typer.Exit as e:
        return e.exit_code
    except typer.Abort:
        print("ckptstat: aborted", file=sys.stderr)
        return trouble or 1
    except typer.TyperException as e:  # typer >= 0.29 vendors click: its usage errors derive from this
        show = getattr(e, "show", None)   # click's usage errors print their own usage line
        if callable(show):
            show()
        else:
            print(f"ckptstat: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
    except Exception as e:  # the error boundary: never a traceback without --debug
        if debug:
            traceback.print_exc()
        print(f"ckptstat: internal error: {type(e).__name__}: {_line(e)} (rerun with --debug for a traceback)",
              file=sys.stderr)
        return trouble or 1
    return rc if isinstance(rc, int) else 0


def _nearest_command(word: str, commands: set[str]) -> str | None:
    """The command a mistyped word (`sumary`, `tensor`) was meant to be, when the word is not a path
    that exists (`ckptstat PATH` is the summary) and reads like a command, not like a file name."""
    import difflib
    import os

    if os.path.exists(word) or not word.replace("-", "").replace("_", "").isalpha():
        return None
    near = difflib.get_close_matches(word.lower(), sorted(commands), n=1, cutoff=0.6)
    return near[0] if near else None


def run() -> None:
    sys.exit(main())
