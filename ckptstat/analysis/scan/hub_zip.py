"""`ckptstat scan` of a zip holding one file, torch.hub's "legacy zipped" checkpoint: `load_state_dict_from_url`
(torch/hub.py `_is_legacy_zip_format`, `_legacy_zip_load`; torch 2.13) takes any downloaded file that zipfile reads as
a zip of exactly one file for a pre-1.6 zipped state_dict, extracts it beside the cached download and torch.loads the
extracted file, with weights_only=False unless the caller passes True. torch.load of the zip itself raises (no
`data.pkl`), so scan said "unreadable" (a `.pth` in `~/.cache/torch/hub/checkpoints/`) or, under a name without a
pickle extension, a folder scan did not list it, while torch.hub ran the member's pickle.

zipfile finds a zip by its end record, wherever the file starts (`is_zipfile`), and reads a directory of one entry
past bytes of anything before it, which torch.load (miniz), np.load and a torch archive's reader never do: a benign
legacy torch.save or `.npy` with a zip of one pickle appended, a zip behind an HTML page, a torch archive whose end
record's size field points zipfile at a second directory of one entry (docs/security.md, fourteenth pass). So every
file is judged as torch.hub loads it too (`judge_file`), beside whatever else reads it, and the worse verdict wins.

The member is read as zipfile extracts it (its CRC checked: a damaged member makes the extraction raise, and nothing is
loaded) into a temporary file, within `inflate_ratio` and `spill_bytes`, and traced as torch.load reads that file. A
member torch.load cannot read holds nothing torch.hub would run: None (the zip's other readers decide).
"""
from __future__ import annotations

import shutil
import tempfile
import zipfile
from typing import IO, Any

from ...core.io import prefetch
from ...core.limits import limits
from ...errors import CheckpointError, CorruptCheckpointError
from ...formats.torch.containers import zip_open
from .torch_load import Trace, follow, report

LOADER = "torch.hub.load_state_dict_from_url"
FORMAT = "torch.hub's legacy zipped checkpoint"
READS = (f"{LOADER} extracts the zip's one file and torch.loads it (weights_only=False unless the caller passes True)")


# The largest central-directory entry (APPNOTE 4.3.12: 46 bytes, then a name, an extra field and a comment of at most
# 65,535 bytes each): a directory larger than this holds more than one entry (or zipfile raises), so torch.hub takes
# the file for torch.load's, and a torch archive of 500k entries is not parsed again to find that out.
ONE_ENTRY = 46 + 3 * 0xFFFF
_TAIL = 22 + 0xFFFF   # the end record and its longest comment: where zipfile looks for it


def tail(size: int) -> tuple[int, int]:
    """The (offset, size) of a file's bytes zipfile looks for its end record in."""
    return max(0, size - _TAIL), min(size, _TAIL)


def judge_file(path: str, f: IO[bytes], size: int) -> dict[str, Any] | None:
    """The scan report of the file `f` as torch.hub loads it when zipfile reads it as a zip of one file (its end
    record found, whatever comes before: `zipfile.is_zipfile`), else None (torch.hub torch.loads the file itself)."""
    if size < zipfile.sizeEndCentDir:  # type: ignore[attr-defined]  # (a remote reader refuses the seek before byte 0)
        return None
    prefetch(f, [tail(size)])   # (a URL: one request, none when judge_other's other reads fetched it)
    f.seek(0)
    try:
        end = zipfile._EndRecData(f)  # type: ignore[attr-defined]  # what zipfile.is_zipfile and ZipFile look for
    except OSError:   # (a zip64 locator naming an offset before byte 0): is_zipfile says no, as torch.hub then does
        return None
    if not end or end[zipfile._ECD_SIZE] > ONE_ENTRY:  # type: ignore[attr-defined]
        return None
    try:
        zf = zip_open(path, f)
    except CorruptCheckpointError:   # zipfile raises: so does torch.hub's is_zipfile check's ZipFile, before any load
        return None
    return judge_hub_zip(path, zf)


def judge_hub_zip(path: str, zf: zipfile.ZipFile) -> dict[str, Any] | None:
    """The scan report of the one file of `zf` as torch.hub loads it, or None when `zf` holds not exactly one file or
    torch.load cannot read that file."""
    infos = zf.infolist()
    if len(infos) != 1 or infos[0].is_dir():
        return None
    info = infos[0]
    t = Trace(path)
    hub = f"zip of one file, {info.filename[:80]!r}"
    lim = limits()
    if info.file_size > min(lim.spill_bytes, lim.inflate_ratio * info.compress_size + lim.expansion_floor):
        try:   # too big to extract: unknown when it starts as torch.save's files do (a pickle, a zip, a tar)
            with zf.open(info) as member:
                head = member.read(512)
        except (zipfile.BadZipFile, EOFError, OSError, NotImplementedError, RuntimeError):
            return None
        if not (head[:1] == b"\x80" or head[:4] == b"PK\x03\x04" or head[257:262] == b"ustar"):
            return None
        t.unknown.append(f"its one file is {info.file_size:,} bytes from {info.compress_size:,}: more than scan extracts "
                         "(--limit inflate_ratio=N, spill_bytes=N)")   # unknown, never an error: a folder lists it
        t.format, t.reads = f"{hub}: {FORMAT}", READS
        return report(t, loader=LOADER)
    with tempfile.TemporaryFile() as out:
        try:
            with zf.open(info) as member:
                shutil.copyfileobj(member, out, 1 << 20)
        except (zipfile.BadZipFile, EOFError, OSError, NotImplementedError, RuntimeError):
            return None   # zipfile cannot extract it: torch.hub raises before any load
        size = out.tell()
        try:
            follow(t, out, size)
        except CheckpointError:
            return None
    t.format = f"{hub} ({t.format}): {FORMAT}" if t.format else f"{hub}: {FORMAT}"
    t.reads = f"{READS}: {t.reads}" if t.reads else READS
    r = report(t, loader=LOADER)
    if r["status"] == "safe" and t.unreadable:   # (torch_load.py `finish`: torch.load cannot read the file)
        return None
    return r
