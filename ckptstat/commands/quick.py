"""The quick path: `ckptstat [summary] PATH --json`, answered without loading the CLI framework.

Most scripted calls are a header-only summary as JSON. Building typer's command tree and coercing
its parameters costs more than reading a 7B checkpoint's headers (typer 0.29 coerces every
non-flag value through a pydantic TypeAdapter: ~0.1 s of imports; docs/performance.md), so the
console script and `cli.main` first offer the argument list to `quick`. It answers only lines it
recognises completely, with the same report, output and error boundary as the typer command
(tests/test_quick_path.py runs both ways and compares); anything else (help, other commands or
options, human output) returns None and goes to typer.
"""
from __future__ import annotations

import gc
import sys
from collections.abc import Iterator
from contextlib import contextmanager

ENABLED = True   # tests switch it off to run the same line through typer
# The last answer's checkpoint and report. The console script ends the process right after the answer
# (__main__.run: os._exit once the output is flushed), so a million-tensor header's objects are never
# freed one by one (~0.1 s at 200k tensors, docs/performance.md); in a library call they live until the next.
KEPT: list[object] = []
# The summary command's options the quick path knows; any other option goes to typer.
_FLAGS = {"--json", "--layers"}   # --layers only shapes the human rendering: the JSON is the same
_VALUED = {"--config"}


def _parse(args: list[str]) -> tuple[str, str | None] | None:
    """(path, config) when `args` is a summary-as-JSON line the quick path answers, else None."""
    words: list[str] = []
    seen: set[str] = set()
    config: str | None = None
    it = iter(args)
    for a in it:
        if a.startswith("-"):
            name, eq, value = a.partition("=")
            if name in _VALUED:
                if not eq:
                    value = next(it, None)   # type: ignore[assignment]
                    if value is None:
                        return None
                if name in seen:
                    return None   # typer's rule (the last wins) is left to typer
                config = value
            elif a not in _FLAGS or eq:
                return None
            seen.add(name)
        else:
            words.append(a)
    if "--json" not in seen:
        return None
    if len(words) == 2 and words[0] == "summary":
        return words[1], config
    # `ckptstat PATH`: only when PATH cannot be a command's name (commands are words; cli.main
    # sends a word that is not a command to its did-you-mean check).
    if len(words) == 1 and not words[0].replace("-", "").replace("_", "").isalpha():
        return words[0], config
    return None


def quick(args: list[str], debug: bool = False) -> int | None:
    """Answer a summary-as-JSON line and return the exit code, or None to leave the line to typer."""
    parsed = _parse(args) if ENABLED else None
    if parsed is None:
        return None
    path, config = parsed
    from ..formats.folders import is_adapter, is_pipeline

    try:
        if is_adapter(path) or is_pipeline(path):   # their own reports (commands/multi.py)
            return None
    except Exception:   # whatever trips here, typer's path meets it again, inside cli.main's boundary
        return None
    import json

    from ..errors import CkptstatError
    from ..formats.registry import open_checkpoint

    try:
        from ..analysis.summary import summarize

        with _gc_paused():
            ckpt = open_checkpoint(path, config)
            report = summarize(ckpt)
        sys.stdout.write(json.dumps(with_fetched(report), indent=2) + "\n")
        KEPT[:] = [ckpt, report]   # freed by the process's exit, not object by object (__main__.run)
    except CkptstatError as e:
        _fail(debug, f"ckptstat: error: {_line(e)}")
        return e.exit_code
    except BrokenPipeError:
        return 0
    except Exception as e:   # the same boundary as cli.main: never a traceback without --debug
        _fail(debug, f"ckptstat: internal error: {type(e).__name__}: {_line(e)} (rerun with --debug for a traceback)")
        return 1
    return 0


def with_fetched(report: dict) -> dict:
    """The report, plus what the command fetched over the network when it read a URL (docs/remote.md):
    `fetched: {requests, bytes, retries, full_downloads}`. Here, not in commands/common.py, so that the
    quick path shares it without loading typer."""
    src = sys.modules.get("ckptstat.sources")   # loaded only when a URL was opened
    fetched = src.fetched() if src is not None else None
    return {**report, "fetched": fetched} if fetched else report


@contextmanager
def _gc_paused() -> Iterator[None]:
    """CPython's cyclic collector off while a header is parsed and counted: a million-tensor header
    allocates millions of containers, and each full collection walks all of them again, more than
    doubling the time (docs/performance.md). What is built here holds no reference cycle to reclaim."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _line(e: BaseException) -> str:
    """An error's text for the one line (here and in cli.main): cut short before it is escaped (a hostile name
    can be long)."""
    from ..render.names import inert

    text = str(e)
    return inert(text if len(text) <= 2000 else text[:2000] + "...")


def _fail(debug: bool, message: str) -> None:
    if debug:
        import traceback

        traceback.print_exc()
    print(message, file=sys.stderr)
