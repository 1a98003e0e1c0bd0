"""The command line: parse arguments, call the library, render. One error boundary, in `main`.

Exit codes: 0 ok, 1 a checkpoint problem (or an internal error), 2 a usage error. An empty answer
is 1, like grep: `tensors`/`stats -f` matching nothing, `plot` with no finite value to draw (no file
written). `diff` answers like diff(1): 0 same, 1 different, 2 any trouble.
"""
from __future__ import annotations

import sys
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from . import __version__
from .commands import analytic, memory, multi, values
from .commands import audit as audit_cmd
from .commands import report as report_cmd
from .commands import trend as trend_cmd
from .commands.common import ConfigOpt, FilterOpt, JsonOpt, PathArg, console, emit_json, empty, no_match, show, write_out
from .commands.examples import epilog
from .commands.quick import LAYERS, _line, named_args, quick
from .core.jsontext import dumps
from .errors import CkptstatError
from .render import DEFAULT_SEQ_RULE

if TYPE_CHECKING:
    from .core.switches import Switches

app = typer.Typer(
    rich_markup_mode="markdown",   # a docstring paragraph wraps as one paragraph in --help
    add_completion=True,   # --install-completion / --show-completion (bash, zsh, fish, PowerShell; README)
    pretty_exceptions_enable=False,
    no_args_is_help=True,
    help="Inspect checkpoints (safetensors, PyTorch, TensorFlow, Keras, GGUF, ONNX, numpy, Flax) from their headers, without "
    "building the model. `ckptstat PATH` is `ckptstat summary PATH`. Add --debug for tracebacks.",
)


@app.command(epilog=epilog("summary"))
def summary(
    path: str = PathArg,
    layers: bool = typer.Option(False, *LAYERS, help="Also show parameters per layer."),
    seq: Optional[int] = typer.Option(None, "--seq", "-s", help="Sequence length of the analytic FLOPs-per-token "
                                      f"line (default: {DEFAULT_SEQ_RULE})."),
    as_json: bool = JsonOpt,
    config: Optional[str] = ConfigOpt,
    verify: bool = typer.Option(False, "--verify", help="Also check stored checksums (TF bundles: crc32c of "
                                "every tensor and index block); reads all tensor bytes."),
    base: Optional[str] = multi.BaseOpt,
) -> None:
    """Parameters per bucket, layer and dtype, buffers apart, file size vs tensor bytes (headers only).
    A PEFT adapter: its type, rank, targets and parameters (--base: beside the base and merged model);
    a diffusers pipeline folder: a total per component."""
    from . import open_checkpoint
    from .analysis.summary import summarize as summarize_report
    from .commands.common import positive

    positive("--seq", seq)
    if multi.summary_other(path, base, as_json, config):
        return
    r = summarize_report(open_checkpoint(path, config, verify=verify), seq)
    if as_json:
        emit_json(r)
    else:
        from .render import render_summary

        render_summary(r, console(), show_layers=layers, seq_flag="--seq" if seq else None)


@app.command(epilog=epilog("tensors"))
def tensors(
    path: str = PathArg,
    filter: Optional[str] = FilterOpt,
    as_json: bool = JsonOpt,
    config: Optional[str] = ConfigOpt,
) -> None:
    """Every tensor: name, bucket, role, dtype, shape, numel, bytes."""
    from . import open_checkpoint
    from .analysis.summary import tensors as tensors_report

    r = tensors_report(open_checkpoint(path, config), filter)
    if filter is not None and not r["tensors"]:
        if as_json:
            emit_json(r)
        raise empty(no_match(filter))
    show(r, as_json, "render_tensors")


@app.command(epilog=epilog("ties"))
def ties(
    path: str = PathArg,
    deep: bool = typer.Option(False, "--deep", help="Also hash stored tensors to find identical copies "
                              "(reads values, bounded memory)."),
    as_json: bool = JsonOpt,
    config: Optional[str] = ConfigOpt,
) -> None:
    """Tied weights with their evidence, and the parameter count under every counting convention."""
    from . import open_checkpoint
    from .analysis.ties import audit

    r = audit(open_checkpoint(path, config), deep=deep)
    show(r, as_json, "render_ties")


@app.command(epilog=epilog("diff"))
def diff(
    a: str = typer.Argument(..., help="First checkpoint."),
    b: str = typer.Argument(..., help="Second checkpoint."),
    as_json: bool = JsonOpt,
    names_only: bool = typer.Option(False, "--names-only", help="Headers only: names, shapes, dtypes, counts; no value read."),
    atol: float = typer.Option(0.0, "--atol", help="Values equal when |a-b| <= atol + rtol*|b| everywhere."),
    rtol: float = typer.Option(0.0, "--rtol", help="See --atol."),
    rules: Optional[Path] = typer.Option(None, "--map", help="Name rules file: one `regex -> replacement` per line."),
    strict: bool = typer.Option(False, "--strict", help="A dtype change counts as a difference (exit 1) even where the "
                                "values are the other side's rounded to that dtype (a faithful conversion)."),
    fmt: str = typer.Option("text", "--format", help="text (tables), md (a markdown report) or html (a self-contained page)."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write the report (md, html or --json) to this file."),
) -> None:
    """Tensor by tensor, what changed: added, removed, shape, dtype, values (max abs diff, relative L2,
    cosine), converted (another dtype, the values rounded to it) or equal; per bucket and layer; and where
    parameter counts part, module by module. A GGUF file faces its HF model after llama.cpp's transforms.

    Exit status as diff(1): 0 no differences, 1 different, 2 trouble."""
    from . import open_checkpoint
    from .analysis.diff import diff as diff_checkpoints
    from .analysis.diff import load_rules
    from .errors import UsageError

    if fmt not in ("text", "md", "html"):
        raise UsageError(f"--format must be text, md or html, not {fmt!r}")
    ca, cb = open_checkpoint(a), open_checkpoint(b)
    if output is not None:
        from .core.files import check_output

        check_output(output, [a, b, *ca.inputs, *cb.inputs])   # never an input, through links too
    r = diff_checkpoints(ca, cb, names_only=names_only, atol=atol, rtol=rtol, strict=strict,
                         rules=load_rules(str(rules)) if rules is not None else None)
    if output is not None or fmt != "text" and not as_json:
        from .render.diff import diff_html, diff_markdown

        if output is not None and fmt == "text" and not as_json:   # -o alone: the format from the suffix
            fmt = "html" if output.suffix.lower() in (".html", ".htm") else "md"
        text = dumps(r) if as_json else diff_html(r) if fmt == "html" else diff_markdown(r)
        text += "\n"
        if output is None:
            write_out(text)
        else:
            from .core.files import atomic_output

            with atomic_output(output) as tmp, open(tmp, "w", encoding="utf-8") as f:   # never half a report
                f.write(text)
    elif as_json:
        emit_json(r)
    else:
        from .render.diff import render_diff

        render_diff(r, console())
    if not r["same"]:
        raise typer.Exit(1)


app.command(epilog=epilog("flops"))(analytic.flops)
app.command(epilog=epilog("memory"))(memory.memory)
app.command(epilog=epilog("stats"))(values.stats)
app.command(epilog=epilog("plot"))(values.plot)
app.command(epilog=epilog("audit"))(audit_cmd.audit)
app.command(epilog=epilog("report"))(report_cmd.report)
app.command(epilog=epilog("trend"))(trend_cmd.trend)


@app.command(epilog=epilog("scan"))
def scan(path: str = typer.Argument(..., help="A torch.save file (zip, legacy, tar), a pickle, a folder to walk, or a URL."),
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
        emit_json(r)
    else:
        from .render.scan import render_scan, render_scan_tree

        (render_scan_tree if r["schema"] == TREE_SCHEMA else render_scan)(r, console())
    code = exit_code(r)
    if code:
        raise typer.Exit(code)


@app.command("run", epilog=epilog("run"))
def run_model(
    path: str = PathArg,
    device: str = typer.Option("cpu", "--device", help="cpu, cuda, cuda:N or mps."),
    batch: int = typer.Option(1, "--batch", "-b"),
    seq: Optional[int] = typer.Option(None, "--seq", "-s", help=f"Sequence length (default: {DEFAULT_SEQ_RULE})."),
    dtype: str = typer.Option("fp32", "--dtype", help="fp32, bf16 or fp16."),
    attn: str = typer.Option("eager", "--attn", help="Attention implementation: eager or sdpa."),
    warmup: int = typer.Option(2, "--warmup"),
    iters: int = typer.Option(10, "--iters"),
    as_json: bool = JsonOpt,
    config: Optional[str] = ConfigOpt,
) -> None:
    """Run the model (the `run` extra): measured latency, FLOPs and peak memory beside the analytic figures."""
    from .executor import execute

    r = execute(path, device, batch, seq, dtype, attn, warmup, iters, config)
    show(r, as_json, "render_run")


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
    allow_full_download: bool = typer.Option(False, "--allow-full-download", help="Read a URL whose server ignores "
                                             "range requests by downloading all of it (docs/remote.md)."),
    pickled_objects: bool = typer.Option(False, "--pickled-objects", help="Read a torch.save of whole objects "
                                         "(torch.save(model), YOLO .pt files): each class kept as an inert record, "
                                         "tensors named as state_dict names them; nothing imported or called "
                                         "(docs/torch.md)."),
) -> None:
    pass


_SWITCHES = {"--allow-external": "allow_external", "--allow-full-download": "allow_full_download",
             "--pickled-objects": "pickled_objects"}   # the global options that set a reading switch (core/switches.py)


def _global_options(args: list[str]) -> tuple[list[str], Switches, dict[str, int]]:
    """The reading switches (_SWITCHES) and --limit NAME=N, taken out of the line wherever they stand."""
    from .core.switches import Switches
    from .errors import UsageError

    rest: list[str] = []
    on: dict[str, bool] = {}
    limits: dict[str, int] = {}
    it = iter(args)
    for a in it:
        if a in _SWITCHES:
            on[_SWITCHES[a]] = True
        elif a == "--limit" or a.startswith("--limit="):
            spec = a[len("--limit="):] if a.startswith("--limit=") else next(it, "")
            name, _, value = spec.partition("=")
            if not value.isdigit():
                raise UsageError(f"--limit takes NAME=N (a non-negative integer), got {spec!r}")
            limits[name] = int(value)
        else:
            rest.append(a)
    return rest, Switches(**on), limits


def main(argv: list[str] | None = None) -> int:
    from .core import limits, switches

    if argv is None:   # the command itself (not an in-process caller): SIGTERM ends it as Ctrl-C does
        _terminate_cleanly()
    old_limits, old_switches = limits.limits(), switches.switches()
    try:
        return _main(argv)
    finally:   # in-process callers (tests, notebooks) get theirs back
        limits.reset(old_limits)
        switches.set_switches(old_switches)


def _terminate_cleanly() -> None:
    """SIGTERM (`timeout`, a job manager) raises SystemExit, so `finally` blocks run as on Ctrl-C: the temporary
    folders scan extracts an archive's members into are removed, not left holding them."""
    import signal

    def ended(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)
    signal.signal(signal.SIGTERM, ended)


def _main(argv: list[str] | None) -> int:
    from .core import limits, switches

    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    args = [a for a in args if a != "--debug"]
    try:
        args, on, raised = _global_options(args)
        limits.set_limits(**raised)
    except (CkptstatError, ValueError) as e:
        print(f"ckptstat: error: {_line(e)}", file=sys.stderr)
        return 2
    switches.set_switches(on)
    args = named_args(args)
    rc = quick(args, debug)   # `ckptstat [summary] PATH --json`, answered without typer (commands/quick.py)
    if rc is not None:
        return rc
    command = typer.main.get_command(app)
    commands = set(getattr(command, "commands", {}))
    cut = args.index("--") if "--" in args else len(args)   # after `--`, every word is a path (`-- -model.bin`)
    first = next((a for a in args[:cut] if not a.startswith("-")), None)
    if first is None and cut < len(args):
        args.insert(0, "summary")   # `ckptstat [OPTIONS] -- PATH`
    elif first is not None and first not in commands:
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
        # One line, as every other error: click's own rendering takes four (usage, hint, blank, error).
        message = e.format_message() if hasattr(e, "format_message") else str(e)
        ctx = getattr(e, "ctx", None)
        where = f" (see {ctx.command_path} --help)" if ctx is not None else ""
        if message:   # empty: no arguments at all, and click has printed the help
            print(f"ckptstat: error: {_line(Exception(message))}{where}", file=sys.stderr)
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
