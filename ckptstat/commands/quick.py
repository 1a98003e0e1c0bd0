"""The quick path: `ckptstat [summary] PATH --json`, answered without loading the CLI framework.

Most scripted calls are a header-only summary as JSON. Building typer's command tree and coercing
its parameters costs more than reading a 7B checkpoint's headers (typer, click and rich; typer 0.29,
which pyproject keeps out, also a pydantic TypeAdapter per value: docs/performance.md), so the
console script and `cli.main` first offer the argument list to `quick`. It answers only lines it
recognises completely, with the same report, output and error boundary as the typer command
(tests/test_quick_path.py runs both ways and compares); anything else (help, other commands or
options, human output) returns None and goes to typer.
"""
from __future__ import annotations

import sys
from contextlib import AbstractContextManager, nullcontext

from ..core.tensor import STATS_CHUNK_BYTES

ENABLED = True   # tests switch it off to run the same line through typer
# The last answer's checkpoint and report. The console script ends the process right after the answer
# (__main__.run: os._exit once the output is flushed), so a million-tensor header's objects are never
# freed one by one (~0.1 s at 200k tensors, docs/performance.md); in a library call they live until the next.
KEPT: list[object] = []
# The spellings of the options the quick path parses, stated once: the typer commands declare their options with
# these (commands/common.py JsonOpt, ConfigOpt; values.py ChunkOpt, WorkersOpt, ProgressOpt; cli.py's summary --layers)
JSON, CONFIG, LAYERS = ("--json",), ("--config",), ("--layers",)
CHUNK, WORKERS, PROGRESS = ("--chunk-bytes",), ("--workers", "-w"), ("--progress", "--no-progress")
# The options the quick path knows, per command; any other option goes to typer. Values it takes are
# plain: a path for --config, digits for the counts (anything else typer coerces and reports).
_SUMMARY: tuple[set[str], dict[str, type]] = ({*JSON, *LAYERS}, dict.fromkeys(CONFIG, str))   # --layers: human output only
_STATS: tuple[set[str], dict[str, type]] = ({*JSON, *PROGRESS}, {**dict.fromkeys(CONFIG, str),
                                                                 **dict.fromkeys(WORKERS + CHUNK, int)})
_SAME = {WORKERS[1]: WORKERS[0], PROGRESS[1]: PROGRESS[0]}   # spellings of one option (given twice: typer's rule)


def _options(args: list[str], flags: set[str], valued: dict[str, type]) -> tuple[list[str], dict[str, object]] | None:
    """(the words, {option: value, flag: True}) of a line made only of `flags`, `valued` options (each once)
    and words, else None."""
    words: list[str] = []
    opts: dict[str, object] = {}
    it = iter(args)
    for a in it:
        if not a.startswith("-"):
            words.append(a)
            continue
        name, eq, value = a.partition("=")
        if eq and not name.startswith("--"):   # click reads `-w=2`'s value as "=2": typer's to refuse
            return None
        kind = valued.get(name)
        if kind is None and (a not in flags or eq):
            return None
        if _SAME.get(name, name) in {_SAME.get(k, k) for k in opts}:
            return None
        if kind is None:
            opts[a] = True
            continue
        if not eq:
            value = next(it, None)   # type: ignore[assignment]
            if value is None:
                return None
        if kind is int and not (value.isascii() and value.isdigit()):
            return None
        opts[_SAME.get(name, name)] = int(value) if kind is int else value
    return words, opts


def _parse(args: list[str]) -> tuple[str, str, dict[str, object]] | None:
    """(command, path, options) when `args` is a summary-as-JSON or stats-as-JSON line the quick path
    answers, else None."""
    stats = _options(args, *_STATS) if "stats" in args else None
    if stats is not None:
        words, opts = stats
        if len(words) == 2 and words[0] == "stats" and "--json" in opts:
            return "stats", words[1], opts
    parsed = _options(args, *_SUMMARY)
    if parsed is None or "--json" not in parsed[1]:
        return None
    words, opts = parsed
    if len(words) == 2 and words[0] == "summary":
        return "summary", words[1], opts
    # `ckptstat PATH`: only when PATH cannot be a command's name (commands are words; cli.main
    # sends a word that is not a command to its did-you-mean check).
    if len(words) == 1 and not words[0].replace("-", "").replace("_", "").isalpha():
        return "summary", words[0], opts
    return None


def quick(args: list[str], debug: bool = False) -> int | None:
    """Answer a summary-as-JSON or stats-as-JSON line and return the exit code, or None to leave the line
    to typer."""
    parsed = _parse(args) if ENABLED else None
    if parsed is None:
        return None
    command, path, opts = parsed
    config = opts.get("--config")
    assert config is None or isinstance(config, str)
    from ..core.files import as_snapshot
    from ..formats.folders import is_adapter, is_pipeline

    try:
        folder = as_snapshot(path)   # (a Hugging Face cache repository: its snapshot's)
        if is_adapter(folder) or is_pipeline(folder):   # their own reports (commands/multi.py)
            return None
    except Exception:   # whatever trips here, typer's path meets it again, inside cli.main's boundary
        return None
    from ..core.jsontext import write
    from ..errors import CkptstatError
    from ..formats.registry import open_checkpoint

    try:
        if command == "stats":
            return _stats(path, config, opts)
        from ..analysis.summary import summarize

        ckpt = open_checkpoint(path, config)
        report = summarize(ckpt)
        write(with_fetched(report), sys.stdout.write)
        KEPT[:] = [ckpt, report]   # freed by the process's exit, not object by object (__main__.run)
    except CkptstatError as e:
        _fail(debug, f"ckptstat: error: {_line(e)}")
        return e.exit_code
    except KeyboardInterrupt:   # as click turns it into Abort, and cli.main reports that
        print(file=sys.stderr)
        print("ckptstat: aborted", file=sys.stderr)
        return 1
    except BrokenPipeError:
        return 0
    except Exception as e:   # the same boundary as cli.main: never a traceback without --debug
        _fail(debug, f"ckptstat: internal error: {type(e).__name__}: {_line(e)} (rerun with --debug for a traceback)")
        return 1
    return 0


# `stats`' defaults: commands/values.py's ChunkOpt and WorkersOpt declare these
STATS_CHUNK, STATS_WORKERS = STATS_CHUNK_BYTES, 1


def _stats(path: str, config: str | None, opts: dict[str, object]) -> int:
    """`ckptstat stats PATH --json`, as commands/values.py's stats command answers it: the report on stdout;
    no tensor selected: said on stderr, exit 1. Typer's parsing (its imports) is serial
    time in every --workers run (docs/performance.md)."""
    from ..analysis.stats import collect, open_for_stats
    from ..core.jsontext import write

    chunk, workers = opts.get("--chunk-bytes", STATS_CHUNK), opts.get("--workers", STATS_WORKERS)
    assert isinstance(chunk, int) and isinstance(workers, int)
    ckpt = open_for_stats(path, config, chunk_bytes=chunk, workers=workers)
    progress = "--no-progress" not in opts and ("--progress" in opts or sys.stderr.isatty())
    bars: AbstractContextManager = nullcontext()
    if progress:   # the render package loads rich (~20 ms of every --workers run's serial time)
        from ..render.progress import progress_bar

        bars = progress_bar(True)
    with bars as bar:
        report = collect(ckpt, None, (), False, chunk, workers, bar).report
    write(with_fetched(report), sys.stdout.write)
    if not report["tensors"]:
        from ..render.names import inert

        print(f"ckptstat: {inert(no_match(None, None, report['skipped']))}", file=sys.stderr)
        return 1
    return 0


def no_match(pattern: str | None, buckets: list[str] | None = None, skipped: list[dict] | None = None) -> str:
    """Why nothing was selected (every command's `--filter` / `--bucket` message). Here, not in
    commands/common.py, so that the quick path shares it without loading typer."""
    what = f"no tensor matches {pattern!r}" if pattern else "no tensor selected"
    if buckets:
        what += f" in bucket {', '.join(buckets)}"
    if any(s["reason"].startswith("role ") for s in skipped or ()):
        what += " among the parameters (--all-roles reads buffers and training state too)"
    return what


def with_fetched(report: dict) -> dict:
    """The report, plus what the command fetched over the network when it read a URL (docs/remote.md):
    `fetched: {requests, bytes, retries, full_downloads}`. Here, not in commands/common.py, so that the
    quick path shares it without loading typer."""
    src = sys.modules.get("ckptstat.sources")   # loaded only when a URL was opened
    fetched = src.fetched() if src is not None else None
    return {**report, "fetched": fetched} if fetched else report


def named_args(args: list[str]) -> list[str]:
    """The command line with each URL (an argument, or an option's `--name=URL`) as ckptstat names it (core/urls.py
    `named`: its user:password@ kept for its requests, never printed)."""
    from ..core import urls

    urls.forget_logins()
    return [f"{a.partition('=')[0]}={urls.named(a.partition('=')[2])}" if a.startswith("--") and "=" in a
            else urls.named(a) for a in args]


def _line(e: BaseException) -> str:
    """An error's text for the one line (here and in cli.main): cut short before it is escaped (a hostile name
    can be long)."""
    from ..core.urls import is_url, redact
    from ..errors import CheckpointError, CkptstatError, one_line
    from ..render.names import inert

    # ckptstat's own messages quote names from files: a newline there is shown (\x0a); another library's
    # message is laid out in lines, joined here. A URL the error names is shown redacted (no query string: a
    # presigned URL's signature), whichever reader raised it.
    if isinstance(e, CheckpointError) and is_url(e.path):
        text = f"{redact(str(e.path))}: {e.reason}"
    else:
        text = str(e) if isinstance(e, CkptstatError) else one_line(str(e))
    return inert(text if len(text) <= 2000 else text[:2000] + "...")


def _fail(debug: bool, message: str) -> None:
    if debug:
        import traceback

        traceback.print_exc()
    print(message, file=sys.stderr)
