"""`ckptstat audit --out`: the results file, read back for resuming and appended to as records finish.

JSON Lines (one record per line, flushed as each finishes, so a killed run keeps what it did). With an
`--out` ending `.parquet` (pyarrow, the `parquet` extra) records stream into `OUT.partial.jsonl`
beside it and the Parquet file is written once at the end, from every record (nested fields as JSON
text, one column each); a re-run reads both back.

A record is done, and skipped by a re-run, when its path, bytes and mtime_ns (a URL's: its etag) equal
the unit's now (audit_find.Unit.key): a file changed since is audited again and its new record supersedes
the old. A URL record without an etag (a server that sends no ETag or Last-Modified) is never skipped.
A line that does not parse is ignored; a half-written last one (a run killed mid-write) is cut off before appending.

The results are never written through a symlink or onto an input's inode: the file is replaced by a new one
(the old records copied in) when the run begins, and records are appended to that (docs/security.md, "Writing").
"""
from __future__ import annotations

import io
import json
import os
from collections.abc import Iterable
from typing import IO, Any

from ...core.files import atomic_output, check_output, fresh_output, read_own
from ...core.text import has_surrogate
from ...errors import UsageError, missing_extra
from .find import resume_key

NESTED = ("files", "dtypes", "buckets", "ties", "scan", "config", "fetched", "training")


def is_parquet(out: str) -> bool:
    return out.lower().endswith(".parquet")


def partial_path(out: str) -> str:
    return out + ".partial.jsonl" if is_parquet(out) else out


def _key(rec: dict[str, Any]) -> tuple[str, int, int | str] | None:
    try:
        mtime, etag = rec.get("mtime_ns"), rec.get("etag")
        return resume_key(str(rec["path"]), int(rec["bytes"]), None if mtime is None else int(mtime),
                          None if etag is None else str(etag))
    except (KeyError, TypeError, ValueError):
        return None


def _read_jsonl(path: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    raw = read_own(path)   # never through a link (core/files.py)
    if raw is None:
        return out
    with io.TextIOWrapper(raw, encoding="utf-8", errors="replace") as f:
        for line in f:
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict):
                out.append(rec)
    return out


# A path that is no UTF-8 text (a file name of other bytes: Python holds them as surrogate escapes, which Parquet's
# UTF-8 strings cannot) goes in this binary column as its bytes, `path` showing them backslash-escaped: the resume key
# read back is the file's own name (one such name made every Parquet write of a fleet fail).
PATH_BYTES = "path_bytes"


def _read_parquet(path: str) -> list[dict[str, Any]]:
    pq = _pyarrow()
    rows = pq.read_table(path).to_pylist()
    for r in rows:
        for k in NESTED:
            if isinstance(r.get(k), str):
                r[k] = json.loads(r[k])
        raw = r.pop(PATH_BYTES, None)
        if isinstance(raw, bytes):
            r["path"] = os.fsdecode(raw)
    return rows


def load(out: str) -> dict[tuple[str, int, int | str], dict[str, Any]]:
    """Records already in the results (and, for Parquet, its partial file), by key; the last wins."""
    done: dict[tuple[str, int, int | str], dict[str, Any]] = {}
    sources = []
    if is_parquet(out) and os.path.isfile(out) and not os.path.islink(out):
        sources += _read_parquet(out)
    sources += _read_jsonl(partial_path(out))
    for rec in sources:
        k = _key(rec)
        if k is not None:
            done[k] = rec
    return done


def _pyarrow() -> Any:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise missing_extra("--out *.parquet", "pyarrow", "parquet") from None
    return pq


def check_out(out: str) -> None:
    """Before any work: the results can be written (pyarrow for Parquet, a folder that exists)."""
    if is_parquet(out):
        _pyarrow()
    folder = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(folder):
        raise UsageError(f"{out}: its folder {folder} does not exist")
    if os.path.isdir(out):
        raise UsageError(f"{out}: is a folder; --out names a results file")


def check_inputs(out: str, inputs: Iterable[str | None]) -> None:
    """The results file (and Parquet's partial file) is none of the checkpoints: by inode, so through a symlink
    or a hard link too (core/files.py check_output)."""
    inputs = list(inputs)
    for path in dict.fromkeys((out, partial_path(out))):
        check_output(path, inputs)


class Writer:
    """Appends records, one JSON line each, flushed at once, to a file that replaced the results' old one when the
    run began (core/files.py fresh_output: never written through a link or onto another name's inode), holding
    the old records first unless `fresh`."""

    def __init__(self, out: str, fresh: bool = False):
        self.out = out
        self.path = partial_path(out)
        raw = fresh_output(self.path, keep=not fresh)
        _drop_torn_line(raw)
        self._f: IO[str] = io.TextIOWrapper(raw, encoding="utf-8")

    def write(self, rec: dict[str, Any]) -> None:
        self._f.write(json.dumps(rec, sort_keys=True) + "\n")
        self._f.flush()

    def close(self, records: Iterable[dict[str, Any]] | None = None) -> None:
        """Close; for Parquet, write `records` (all of them, old and new) and drop the partial file."""
        self._f.close()
        if records is None and os.path.getsize(self.path) == 0:   # stopped before any record: leave nothing
            os.remove(self.path)
        if is_parquet(self.out) and records is not None:
            write_parquet(self.out, list(records))
            os.remove(self.path)


def _drop_torn_line(f: IO[bytes]) -> None:
    """Cut a half-written last line (a run killed mid-write) off the copied records, `f` left at the end: appended
    after it, the next record joined it into one line that parses as neither (that record lost, re-audited on
    every run, and the file no JSON Lines for the tools that read it)."""
    end = f.seek(0, os.SEEK_END)
    pos = end
    while pos > 0:
        start = max(0, pos - 65536)
        f.seek(start)
        chunk = f.read(pos - start)
        if pos == end and chunk.endswith(b"\n"):
            break
        nl = chunk.rfind(b"\n")
        if nl >= 0 or start == 0:
            f.truncate(start + nl + 1)
            break
        pos = start
    f.seek(0, os.SEEK_END)


def _bytes(s: str) -> bytes:
    """A string's bytes, a file name's surrogate escapes as the bytes they stand for (os.fsencode's)."""
    try:
        return s.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:   # (a lone surrogate no file name holds)
        return s.encode("utf-8", "surrogatepass")


def _text(v: Any) -> Any:
    """A value as Parquet holds it: a string with surrogate escapes (a file name's bytes in an error) with those bytes
    backslash-escaped (`\\xff`)."""
    return _bytes(v).decode("utf-8", "backslashreplace") if isinstance(v, str) and has_surrogate(v) else v


def write_parquet(out: str, records: list[dict[str, Any]]) -> None:
    import pyarrow as pa

    pq = _pyarrow()
    rows = [{k: (json.dumps(v, sort_keys=True) if k in NESTED else _text(v)) for k, v in r.items()} for r in records]
    named = [r.get("path") for r in records]
    if any(isinstance(p, str) and has_surrogate(p) for p in named):
        for row, p in zip(rows, named):
            row[PATH_BYTES] = _bytes(p) if isinstance(p, str) and has_surrogate(p) else None
    with atomic_output(out) as tmp:
        pq.write_table(pa.Table.from_pylist(rows), tmp)
