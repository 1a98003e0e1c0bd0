"""`ckptstat scan URL`: the scan of a remote torch file (https://, hf://, s3://), made with range requests
before the file is downloaded (docs/torch.md, "Remote files"; docs/remote.md).

The trace is scan.py's own (`follow`), run over the remote file (sources/remote.py `RemoteFile`: a
seekable file whose reads are range requests through a small cache), so the report is the local one.
What is fetched depends on the container:

- a zip (torch.save >= 1.6, TorchScript): the end of the file (end-of-central-directory records and the
  central directory Python's zipfile lists), then the 30-byte local header and the bytes of each `*.pkl`
  record scan walks (data.pkl, constants.pkl, ...), never a storage record;
- a file that starts with a pickle's PROTO opcode (a bare pickle, a legacy stream): fetched whole when it is
  at most `remote_scan_bytes` (core/limits.py), in two requests;
- anything else, or bigger: read by ranges as the trace goes (the remote file's window doubles while reads
  run on), so a file torch.load cannot read (a config, a README: a folder URL's files are all traced) costs
  the few bytes its trace reads, and a legacy stream's storages, after its pickles, are never read.

Either way the trace reads at most `remote_scan_bytes` in all (a hostile central directory or pickle
cannot make scan download the file). If torch.load's path needs more, the verdict is 'unknown' and says
why: never 'safe' for bytes that were not read.
"""
from __future__ import annotations

import io
import tempfile
from typing import IO, Any

from ...core.archive_magic import archive_kind
from ...core.files import open_regular, size_of
from ...core.io import SeekableReader, pread, prefetch
from ...core.limits import limits
from ...core.urls import download_name, redact
from ...errors import CheckpointError, CorruptCheckpointError, reading
from .archive import LOADER as ARCHIVE_LOADER
from .archive import Judge, also_archive, judge_archive, worse
from .loaders import judge_other, judged_by_own_loader, training_args_note
from .torch_load import Trace, by_safetensors, finish, follow, report
from .verdict import combine


class _Bounded(SeekableReader):
    """A remote file read through a budget: at most `budget` bytes in all. A read that would pass it returns
    what fits and sets `beyond` (the trace then shows nothing: a short read is not what torch.load gets)."""

    def __init__(self, f: IO[bytes], size: int, budget: int):
        super().__init__()
        self.f, self.size, self.budget = f, size, budget
        self.pos, self.read_bytes, self.beyond = 0, 0, False

    def read(self, n: int | None = -1) -> bytes:
        data = self.pread(self.size if n is None or n < 0 else n, self.pos)
        self.pos += len(data)
        return data

    def pread(self, n: int, offset: int) -> bytes:
        """Up to n bytes at `offset`, within the budget, the position untouched (core.io.pread: a Window of this
        file, such as a torch.save inside a torch.export archive's record)."""
        want = max(0, min(self.size - offset, n))
        take = max(0, min(want, self.budget - self.read_bytes))
        if take < want:
            self.beyond = True
        data = pread(self.f, take, offset) if take else b""
        self.read_bytes += len(data)
        return data

    def prefetch(self, ranges: list[tuple[int, int]]) -> None:
        prefetch(self.f, ranges)

    def readinto(self, b: Any) -> int:
        mv = memoryview(b).cast("B")
        data = self.read(len(mv))
        mv[:len(data)] = data
        return len(data)


def _unknown(t: Trace, why: str) -> Trace:
    """The trace of a file scan could not follow far enough: 'unknown', naming what the bytes read showed."""
    seen = sorted({fd.name for w, _ in t.walks for fd in w.findings})
    zipped = t.format.startswith(("zip", "TorchScript"))   # a trace cut short may have named the rest wrongly
    out = Trace(t.path, format=t.format if zipped else "not a zip: a pickle, legacy torch.save stream or tar")
    out.unknown.append(why + (f"; the bytes read name globals outside the allowlist: {', '.join(seen)}" if seen else ""))
    out.refuse_weights_only("scan did not read all of what torch.load reads")
    return out


def trace_url(url: str) -> Trace:
    """Follow torch.load through the remote file `url` (see the module doc)."""
    t = Trace(url)
    bound = limits().remote_scan_bytes
    shown = redact(url)
    with reading(shown):
        f = open_regular(url)
    with f, reading(shown, "reading"):
        size = size_of(f)
        if by_safetensors(t, download_name(url), size, lambda n, at: pread(f, min(n, size - at, bound), at)):
            return t
        if pread(f, 1, 0) == b"\x80" and size <= bound:   # a pickle (PROTO 2+) torch.load reads through: whole
            follow(t, io.BytesIO(pread(f, size, 0)), size)
            return t
        b = _Bounded(f, size, bound)
        follow(t, b, size)   # type: ignore[arg-type]   # (an io.RawIOBase)
        if b.beyond:
            return _unknown(t, f"torch.load's path through this {size:,}-byte file reads more than the {bound:,} bytes "
                               "scan reads of a remote file (download it, or raise --limit remote_scan_bytes)")
    return t


def _other_url(url: str, traced: Trace) -> dict[str, Any] | None:
    """numpy's, Keras' or NeMo's reading of the remote file (loaders.py `judge_other`, the local rules), through its own budget
    of `remote_scan_bytes`; 'unknown' when those rules need more of the file than that."""
    bound = limits().remote_scan_bytes
    shown = redact(url)
    with reading(shown):
        f = open_regular(url)
    with f, reading(shown, "reading"):
        size = size_of(f)
        b = _Bounded(f, size, bound)
        try:
            other = judge_other(url, b, size, traced)   # type: ignore[arg-type]   # (an io.RawIOBase)
        except CheckpointError:
            if not b.beyond:
                raise
        if not b.beyond:
            return other
    u = Trace(url, format=traced.format)
    u.unknown.append(f"np.load's, Keras' or NeMo's path through this {size:,}-byte file reads more than the {bound:,} "
                     "bytes scan reads of a remote file (download it, or raise --limit remote_scan_bytes)")
    r = report(u)
    r["verdict"] = "UNKNOWN: scan cannot tell what np.load, keras load_model or NeMo's restore_from would run: " + \
        u.unknown[0]
    r["weights_only_loadable"] = False
    return r


def _archive_url(url: str, judge: Judge) -> dict[str, Any] | None:
    """An archive's report (analysis/scan/archive.py) read through a budget of `remote_scan_bytes`: the whole archive,
    which extraction reads; 'unknown' when it is bigger. None: not an archive."""
    bound = limits().remote_scan_bytes
    with open_regular(url) as f:
        size = size_of(f)
        if archive_kind(pread(f, 512, 0)) is None:
            return None
        if size > bound:
            t = Trace(url, format="an archive", reads="no loader opens an archive: users extract it and load its files")
            t.unknown.append(f"an archive of {size:,} bytes, more than the {bound:,} scan reads of a remote file "
                             "(download it, or raise --limit remote_scan_bytes)")
            return report(t, loader=ARCHIVE_LOADER)
        with tempfile.TemporaryFile() as whole:   # fetched once, then read as a local archive (tar seeks back)
            whole.write(pread(f, size, 0))
            whole.flush()
            return judge_archive(url, whole, size, judge)


def scan_url(url: str, judge: Judge | None = None) -> dict[str, Any]:
    """The `ckptstat.scan/1` report of a remote file, equal to the local scan of the same bytes (apart from
    `path`): a file its own loader reads judged by that loader's rules (loaders.py `judged_by_own_loader`, from the
    same trace: no byte more), any other by torch.load's trace and numpy's or Keras' rules, the worse winning
    (verdict.py `combine`, as for a local file); CorruptCheckpointError, naming the URL, where the local scan raises
    it."""
    t = trace_url(url)
    try:
        by_own = judged_by_own_loader(t, local=False)
        if by_own is not None:
            return training_args_note(url, by_own)
        torch_report: dict[str, Any] | None = None
        torch_error: CheckpointError | None = None
        other, other_error = None, None
        try:
            other = _other_url(url, t)   # (before torch.load's report: loaders.py `judge_other`)
        except CheckpointError as e:   # (as for a local file: verdict.py `combine`)
            other_error = e
        try:
            torch_report = finish(t)
        except CheckpointError as e:
            torch_error = e

        def head(n: int) -> bytes:
            with open_regular(url) as f:
                return pread(f, n, 0)
        try:
            r = training_args_note(url, combine(url, torch_report, torch_error, other, head, other_error))
        except CorruptCheckpointError:   # no loader reads a pickle from it whole: an archive users extract?
            archive = _archive_url(url, judge) if judge is not None else None
            if archive is None:
                raise
            return archive
        return worse(r, _archive_url(url, judge) if judge is not None and also_archive(r) else None)
    except CheckpointError as e:
        raise type(e)(redact(url), e.reason) from None
