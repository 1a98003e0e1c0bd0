"""`ckptstat scan`: what `torch.load(path)` without weights_only (torch 2.13) would run, found by
following the path torch/serialization.py takes through the file, pickle by pickle, without running
anything (docs/torch.md, "ckptstat scan").

- `*.safetensors` paths: torch.load hands them to safetensors; no pickle.
- a zip (the first bytes are a local header): its central directory where miniz reads it (zipdir.py, never
  Python's zipfile, which may see another directory in the same file); torch's reader (containers.TorchZip)
  takes the archive's folder from the first entry and reads `<folder>/data.pkl`, found ignoring case, the same entry
  miniz's sorted lookup finds among several; archives holding `constants.pkl` go to torch.jit.load.
- anything else: first `tarfile.open` (the format of torch < 0.4: members `storages` and `tensors`,
  each a run of pickles and raw data, then `pickle`); a tar error falls back, from byte 0, to the
  legacy stream: the magic-number pickle (unpickled before it is checked: whatever it holds runs),
  the protocol, sys_info, the object and the storage-key pickles.

Each pickle torch reaches is walked on a model of the C unpickler (pickle_machine.py). The verdict:
"unsafe" when a pickle torch reaches imports a global outside weights_only's allowlist and outside the plain data
training scripts save (formats/torch/data_classes.py PLAIN_DATA: argparse.Namespace, numpy scalars and arrays,
omegaconf configs, paths, datetimes, which make values and run no code of the file's choosing; TRAINER_CLASSES, what
a Trainer's training_args.bin names, as long as pickle only rebuilds them), or one scan cannot name, or sets
attributes on a global itself (BUILD); "unknown" when scan cannot follow a path torch may take (never "safe" then),
else "safe" (saying when torch.load(weights_only=True) still refuses the file). Pickles torch does not reach are
walked and listed too, apart.
"""
from __future__ import annotations

import json
import os
import struct
import tarfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, Any

from ...core.limits import limits
from ...core.tar import TarHeaderBound, bounded_tarinfo
from ...errors import CheckpointError, CkptstatError, CorruptCheckpointError, FileNotFound, reading
from ...formats.safetensors import MAX_HEADER
from ...formats.torch.allowlist import STORAGE_ITEMSIZE, allowed_name
from ...formats.torch.containers import LEGACY_MAGIC, LEGACY_PROTOCOL, TorchZip, raw_name
from ...formats.torch.pickle_machine import UNKNOWN, Global, Opaque, Walk
from ...formats.torch.pickle_walk import walk
from ...formats.torch.streams import FileWindow, InflateSource, Source
from ...formats.torch.zipdir import central_directory

SCAN_SCHEMA = "ckptstat.scan/1"
MAX_ZIP_ENTRIES = 1_000_000      # torch files hold one entry per storage; more: scan says unknown
MAX_TAR_MEMBERS = 100_000
ZIP_FORMAT = "zip (torch.save)"
TAR_FORMAT = "tar (torch < 0.4)"
HEAD = 256                       # first bytes kept (a DCP .metadata is told by them: formats/dcp `is_metadata_head`)
_LEGACY_PICKLES = ("magic number", "protocol version", "sys_info", "object", "storage keys")


@dataclass
class Trace:
    """What torch.load does with one file."""
    path: str
    format: str = ""
    walks: list[tuple[Walk, bool]] = field(default_factory=list)   # each pickle, and whether torch.load reaches it
    reads: str = ""                       # what torch.load unpickles, in words
    raises: str | None = None             # torch.load raises here (nothing after it runs)...
    rejected: bool = False                # ...on a value it checks after a whole pickle (else: unreadable bytes)
    unknown: list[str] = field(default_factory=list)    # paths torch may take that scan cannot follow
    weights_only: str | None = None       # why torch.load(weights_only=True) refuses the file (None: it loads)
    notes: list[str] = field(default_factory=list)
    torchscript: bool = False             # its pickles are read by TorchScript's unpickler, which imports nothing
    head: bytes = b""                     # the file's first bytes (up to HEAD), which the trace reads anyway

    def reach(self, w: Walk, reached: bool = True) -> Walk:
        self.walks.append((w, reached))
        if reached and w.unknown:
            self.unknown.append(f"{w.record}: {w.unknown}")
        return w

    def adopt(self, sub: Trace, where: str, shift: int | None) -> None:
        """The trace of a file held inside this one (a record, a DCP item): its pickles, named `where: record`, their
        offsets moved by `shift` (None: the bytes were decompressed, there are no file offsets), its unknowns."""
        for w, reached in sub.walks:
            w.record = f"{where}: {w.record}"
            w.start = None if w.start is None or shift is None else w.start + shift
            self.walks.append((w, reached))
        self.unknown += [f"{where}: {u}" for u in sub.unknown]
        if sub.raises:
            self.notes.append(f"{where}: {sub.raises}")

    def refuse_weights_only(self, why: str) -> None:
        self.weights_only = self.weights_only or why

    def fails(self, w: Walk, what: str = "") -> None:
        """torch.load raises in the pickle `w` walked (its bytes are not a pickle the unpickler reads)."""
        where = f"byte {w.start + w.fail_at:,}" if w.start is not None else f"offset {w.fail_at:,} of {w.record}"
        self.raises = f"torch.load raises at {where} ({what or w.record}): {w.failure}"

    @property
    def unreadable(self) -> str | None:
        """Why torch.load cannot read the file at all (nothing to judge), or None."""
        return self.raises if self.raises and not self.rejected else None


# ---------------------------------------------------------------------------------------------
# zip

def _member_source(f: IO[bytes], size: int, info: zipfile.ZipInfo, walked: bool = False) -> tuple[Source | None, str | None]:
    """The bytes miniz's extract gives for an entry, or why it cannot give them. `walked`: a pickle walked as it is
    inflated, at most to `limits().inflated_pickle` (the walk is unknown past it)."""
    if info.header_offset < 0 or info.header_offset + 30 > size:
        return None, f"its local header offset {info.header_offset} is outside the file"
    f.seek(info.header_offset)
    head = f.read(30)
    if head[:4] != b"PK\x03\x04":
        return None, f"no local header at offset {info.header_offset}"
    name_len, extra_len = struct.unpack_from("<HH", head, 26)
    start = info.header_offset + 30 + name_len + extra_len
    if start + info.compress_size > size:
        return None, f"its {info.compress_size:,} bytes at offset {start:,} run past the end of the file"
    if info.compress_type == zipfile.ZIP_STORED:
        return FileWindow(f, start, info.compress_size), None
    if info.compress_type == zipfile.ZIP_DEFLATED:
        cap = limits().inflated_pickle(info.compress_size) if walked else None
        return InflateSource(f, start, info.compress_size, info.file_size, cap=cap), None
    return None, f"compression method {info.compress_type} (torch's reader inflates stored and deflated records only)"


def _walk_member(t: Trace, f: IO[bytes], size: int, info: zipfile.ZipInfo, reached: bool) -> Walk:
    record = info.filename
    src, why = _member_source(f, size, info, walked=True)
    if src is None:
        w = Walk(record, None, failure=f"cannot be read: {why}")
        t.walks.append((w, False))
        if reached:
            t.raises = f"torch.load raises reading {record}: {why}"
        return w
    w = walk(src, record, src.start if isinstance(src, FileWindow) else None,
             object_pickle=True, persistent=True, torch_remap=True, buffering="drop")
    if isinstance(src, InflateSource):
        if src.error:
            w.incomplete = w.incomplete or f"damaged deflate stream ({src.error}): how torch's inflater reads it is unknown"
        elif src.produced < src.length and w.failure == "pickle data was truncated":
            # miniz extracts the whole record before unpickling: a short stream is an error, nothing runs
            w.failure = f"the record inflates to fewer than the {src.length:,} bytes its entry claims"
            if reached:
                t.raises = f"torch.load raises extracting {record}: {w.failure}"
            reached = False
    t.reach(w, reached)
    if reached and w.failure:
        t.fails(w)
    return w


def _zip(t: Trace, f: IO[bytes], size: int) -> None:
    t.format = ZIP_FORMAT
    infos, refusal = central_directory(f, size, MAX_ZIP_ENTRIES)
    if refusal is not None:
        if refusal.startswith("more than"):
            t.unknown.append(f"a zip of {refusal}: scan follows at most {MAX_ZIP_ENTRIES:,}")
        else:
            t.raises = f"torch.load raises: {refusal}"
            t.refuse_weights_only(t.raises)
        return
    tz = TorchZip(infos)
    target: zipfile.ZipInfo | None = None
    if tz.refusal:
        t.raises = f"torch.load raises: {tz.refusal}"
    elif tz.torchscript:
        t.format = "TorchScript archive (torch.jit.save)"
        t.torchscript = True
        t.unknown.append("a TorchScript archive: torch.load hands it to torch.jit.load, which compiles and runs the "
                         "archive's code/ (scan cannot vet TorchScript)")
        t.refuse_weights_only("a TorchScript archive (weights_only=True refuses it)")
    else:
        target = tz.locate("data.pkl")
        if target is None:
            t.raises = f"torch.load raises: no {tz.folder}/data.pkl record"
        else:
            t.reads = f"torch.load unpickles {target.filename}"
            pkls = sum(1 for n in tz.names if n.lower().endswith(b"/data.pkl"))
            if pkls > 1:
                t.notes.append(f"{pkls} entries are named like {tz.folder}/data.pkl: torch reads {target.filename!r} "
                               f"(entry {tz.infos.index(target)} of the central directory)")
    for info in infos:
        if info is target or raw_name(info).lower().endswith(b".pkl"):
            w = _walk_member(t, f, size, info, info is target)
            if info is target and w.weights_only:
                t.refuse_weights_only(f"{target.filename}: {w.weights_only}")
    if t.raises:
        t.refuse_weights_only(t.raises)


# ---------------------------------------------------------------------------------------------
# the tar format of torch < 0.4 (torch/serialization.py `_legacy_load.legacy_load`)

class _TarFallback(Exception):
    """A tarfile error: torch.load goes on with the legacy stream from byte 0."""


def _tar_member(t: Trace, tar: tarfile.TarFile, name: str, size: int, *, extract: bool) -> tarfile.TarInfo | None:
    """`tar.extract(name)` / `tar.extractfile(name)` as torch calls them: the member, or None when torch
    raises (KeyError: none of that name) or scan cannot tell what it reads (not a regular file)."""
    try:
        m = tar.getmember(name)
    except KeyError:
        t.raises = f"torch.load raises: the tar has no {name!r} member"
        return None
    if not m.isreg() or m.sparse is not None:
        t.unknown.append(f"tar member {name!r} is a {'sparse file' if m.isreg() else 'link or special file'}: "
                         "torch reads whatever it points to")
        return None
    if m.offset_data + m.size > size and extract:
        raise _TarFallback(f"member {name!r} is truncated (tarfile's ReadError)")
    return m


def _tar_pickle(t: Trace, src: Source, record: str, start: int, *, object_pickle: bool = False) -> Walk | None:
    w = t.reach(walk(src, record, start + src.pos, object_pickle=object_pickle, persistent=object_pickle and "tar",
                     buffering="peek" if object_pickle else "drop"))
    if w.failure:
        t.fails(w)
        return None
    return None if w.unknown else w


def _count(t: Trace, w: Walk | None, what: str) -> int | None:
    if w is None:
        return None
    v = w.value
    if isinstance(v, int) and not isinstance(v, bool) and v >= 0:
        return v
    if v is UNKNOWN or isinstance(v, Opaque) and v.kind in ("unknown", "str"):
        t.unknown.append(f"{what}: a value scan cannot compute decides how many pickles torch reads next")
    else:
        t.raises, t.rejected = f"torch.load raises: {what} is not a count", True
    return None


def _tar_storages(t: Trace, f: IO[bytes], m: tarfile.TarInfo) -> bool:
    src = FileWindow(f, m.offset_data, m.size)
    n = _count(t, _tar_pickle(t, src, "storages: count pickle", m.offset_data), "the storage count")
    if n is None:
        return False
    for i in range(n):
        w = _tar_pickle(t, src, f"storages: storage {i} pickle", m.offset_data)
        if w is None:
            return False
        v = w.value
        stype = v[2] if isinstance(v, tuple) and len(v) == 3 else None
        itemsize = STORAGE_ITEMSIZE.get(stype.name.removeprefix("torch."), 0) if isinstance(stype, Global) else 0
        if not itemsize or not isinstance(stype, Global) or not allowed_name(stype.name):
            t.unknown.append(f"storage {i}: a storage type scan cannot size, so where the next pickle starts is unknown")
            return False
        try:      # torch.UntypedStorage._new_with_file: int64 LE element count, then the bytes
            (count,) = struct.unpack("<q", src.read(8))
            if count < 0:
                raise ValueError
            src.skip(count * itemsize)
        except CkptstatError:   # a remote read failed: not the file's fault
            raise
        except Exception:  # noqa: BLE001 - Truncated, ValueError: torch's read fails the same way
            t.raises = f"torch.load raises reading storage {i}'s data"
            return False
    return _tar_pickle(t, src, "storages: views pickle", m.offset_data) is not None


def _tar_tensors(t: Trace, f: IO[bytes], m: tarfile.TarInfo) -> bool:
    src = FileWindow(f, m.offset_data, m.size)
    n = _count(t, _tar_pickle(t, src, "tensors: count pickle", m.offset_data), "the tensor count")
    if n is None:
        return False
    for i in range(n):
        if _tar_pickle(t, src, f"tensors: tensor {i} pickle", m.offset_data) is None:
            return False
        try:      # ndim (int32), 4 bytes skipped, sizes and strides (int64 each), storage offset
            (ndim,) = struct.unpack("<i", src.read(4))
            if ndim < 0:
                raise ValueError
            src.skip(4 + 16 * ndim)
            src.read(8)
        except CkptstatError:   # a remote read failed: not the file's fault
            raise
        except Exception:  # noqa: BLE001
            t.raises = f"torch.load raises reading tensor {i}'s sizes"
            return False
    return True


def _tar_dormant(t: Trace, tar: tarfile.TarFile, f: IO[bytes], size: int) -> bool:
    """torch.load stopped before the `pickle` member: walk it anyway, as a pickle it does not reach."""
    try:
        m = tar.getmember("pickle")
    except KeyError:
        return True
    if m.isreg() and m.offset_data < size:
        src = FileWindow(f, m.offset_data, min(m.size, size - m.offset_data))
        t.walks.append((walk(src, "pickle (tar member)", m.offset_data, object_pickle=True, persistent="tar"),
                        False))
    return True


def _tar(t: Trace, f: IO[bytes], size: int) -> bool:
    """torch's tar attempt; False when it ends in a tarfile error (torch then reads the legacy stream)."""
    f.seek(0)
    try:
        tar = tarfile.open(fileobj=f, mode="r:", format=tarfile.PAX_FORMAT, tarinfo=bounded_tarinfo())   # as torch does
    except tarfile.TarError:
        return False
    except TarHeaderBound as e:
        t.format = TAR_FORMAT
        t.unknown.append(f"{e}: how tarfile reads the file, and so where torch.load reads, is unknown")
        return True
    except CkptstatError:   # a remote read failed: not the file's fault
        raise
    except Exception as e:  # noqa: BLE001 - not a TarError: torch.load raises it
        t.raises = f"torch.load raises reading it as a tar ({type(e).__name__})"
        return True
    t.format = TAR_FORMAT
    t.refuse_weights_only("the legacy .tar format (weights_only=True refuses it)")
    try:
        count = 0
        while tar.next() is not None:     # what tar.getmember loads first (TarFile._load)
            count += 1
            if count > MAX_TAR_MEMBERS:
                t.unknown.append(f"a tar of more than {MAX_TAR_MEMBERS:,} members")
                return True
        stor = _tar_member(t, tar, "storages", size, extract=True)
        if stor is None or not _tar_storages(t, f, stor):
            return _tar_dormant(t, tar, f, size)
        tens = _tar_member(t, tar, "tensors", size, extract=True)
        if tens is None or not _tar_tensors(t, f, tens):
            return _tar_dormant(t, tar, f, size)
        pkl = _tar_member(t, tar, "pickle", size, extract=False)
        if pkl is None:
            return True
        length = min(pkl.size, size - pkl.offset_data)
        t.reads = "torch.load unpickles the tar's storages, tensors and pickle members"
        _tar_pickle(t, FileWindow(f, pkl.offset_data, length), "pickle (tar member)", pkl.offset_data, object_pickle=True)
        if length < pkl.size:   # reading past the end raises tarfile.ReadError inside the unpickler
            raise _TarFallback("member 'pickle' is truncated")
        return True
    except _TarFallback as e:
        t.notes.append(f"tar: {e}: torch.load falls back to the legacy stream from byte 0")
        t.raises = None
        return False
    except tarfile.TarError as e:
        t.notes.append(f"tar: {e}: torch.load falls back to the legacy stream from byte 0")
        return False
    except TarHeaderBound as e:
        t.unknown.append(f"{e}: how tarfile reads the file, and so where torch.load reads, is unknown")
        return True


# ---------------------------------------------------------------------------------------------
# the legacy stream (and any other file: torch.load unpickles its first pickle as the magic number)

def _equals(value: object, expected: int) -> bool | None:
    """`value == expected` as torch's check computes it, or None when scan does not know the value."""
    if isinstance(value, (bool, int, float, str, bytes, tuple, list, Global)) or value is None:
        return bool(value == expected)
    if isinstance(value, Opaque) and value.kind in ("dict", "set", "frozenset", "bytearray", "bytes", "str", "list", "tuple"):
        return False
    return None


def _legacy(t: Trace, f: IO[bytes], size: int) -> None:
    t.format = t.format or "legacy torch.save stream"
    pos = 0
    for i, what in enumerate(_LEGACY_PICKLES):
        w = walk(FileWindow(f, pos, size - pos), f"{what} pickle", pos, object_pickle=i == 3,
                 persistent=i == 3 and "legacy",
                 buffering="peek")
        if t.raises:      # torch.load stopped at a check: what follows is listed, never reached
            t.walks.append((w, False))
            if w.failure or w.unknown or w.end is None:
                return
            pos += w.end
            continue
        t.reach(w)
        if w.weights_only:
            t.refuse_weights_only(f"{w.record}: {w.weights_only}")
        if w.failure:
            if i == 0 and t.format.startswith("legacy"):
                t.format = "not a torch.save file or pickle"
            t.fails(w, "the first pickle" if i == 0 else "")
            return
        if w.unknown or w.end is None:
            return
        if i < 2:
            expected = LEGACY_MAGIC if i == 0 else LEGACY_PROTOCOL
            same = _equals(w.value, expected)
            if same is False:
                t.raises, t.rejected = f"torch.load raises: the {w.record} does not hold {expected}", True
                if i == 0 and t.format.startswith("legacy"):
                    t.format = "pickle (not a torch.save file)"
                t.refuse_weights_only(t.raises)
            if same is None:
                t.notes.append(f"the {w.record} builds a value scan cannot compute: scan assumes torch.load goes on")
                t.refuse_weights_only(f"the {w.record} is not the plain value torch expects")
        pos += w.end
    if not t.raises:
        t.reads = "torch.load unpickles the magic number, protocol, sys_info, object and storage-key pickles"


# ---------------------------------------------------------------------------------------------

def trace(path: str) -> Trace:
    """Follow torch.load(path) through the file (see the module doc). Raises CheckpointError when the
    file cannot be read at all."""
    t = Trace(path)
    with reading(path):
        f = open(path, "rb")
    with f, reading(path, "reading"):
        size = os.fstat(f.fileno()).st_size
        if not by_safetensors(t, path, size, lambda n, at: (f.seek(at), f.read(n))[1]):
            follow(t, f, size)
    return t


SAFETENSORS_PATH = ("torch.load (2.13) hands a path named *.safetensors to safetensors.torch.load_file, which refuses "
                    "these bytes; torch.load before 2.13, or given the open file (Lightning's fsspec loading), unpickles "
                    "it: judged as that")


def by_safetensors(t: Trace, name: str, size: int, read: Callable[[int, int], bytes]) -> bool:
    """Whether torch.load hands the file to safetensors and no loader unpickles it: a file named (`name`) `*.safetensors`
    of `size` bytes (`read(n, offset)`) that safetensors opens: an 8-byte header length within the file and
    MAX_HEADER, then that many bytes of UTF-8 JSON holding an object. Any other bytes behind the name (a pickle or
    zip; one whose 9th byte alone is `{`) are followed as torch.load reads them elsewhere (older torch, a file object)
    and np.load(allow_pickle=True) anywhere, the name noted."""
    if not name.endswith(".safetensors"):
        return False
    head = read(8, 0)
    n = struct.unpack("<Q", head)[0] if len(head) == 8 else -1
    if 2 <= n <= min(MAX_HEADER, size - 8):
        try:
            header = json.loads(read(n, 8).decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):
            header = None
        if isinstance(header, dict):
            t.format = "safetensors (by name)"
            t.raises = "no pickle to scan: torch.load hands *.safetensors paths to safetensors.torch.load_file"
            return True
    t.notes.append(SAFETENSORS_PATH)
    return False


def follow(t: Trace, f: IO[bytes], size: int) -> None:
    """torch.load's path through the open file `f` of `size` bytes (a local file, or a remote one read by
    range requests: analysis/scan/remote.py)."""
    f.seek(0)
    t.head = f.read(HEAD)
    if t.head[:4] == b"PK\x03\x04":
        _zip(t, f, size)
    elif not _tar(t, f, size):
        if t.format.startswith("tar"):
            t.format += ", read as a legacy stream after a tar error"
        _legacy(t, f, size)


def _globals(walks: list[Walk]) -> list[dict[str, object]]:
    allowed: dict[str, bool] = {}
    counts: dict[str, int] = {}
    for w in walks:
        for name, ok in w.globals.items():
            allowed[name] = allowed.get(name, True) and ok
            counts[name] = counts.get(name, 0) + w.counts[name]
    return [{"name": n, "count": counts[n], "allowed": allowed[n]} for n in sorted(allowed)]


def _finding(w: Walk, fd: Any) -> dict[str, object]:
    return {"record": w.record, "offset": fd.offset, "file_offset": None if w.start is None else w.start + fd.offset,
            "opcode": fd.opcode, "global": fd.name, "why": fd.why}


def report(t: Trace, safe: str | None = None, loader: str | None = None) -> dict[str, Any]:
    """The `ckptstat.scan/1` report of a trace; `safe`, the verdict of a safe file judged by its own loader's terms
    (analysis/scan/loaders.py); `loader`, the loader that reads the traced pickles when it is not torch.load
    (torch.export.load, PackageImporter...): the verdict names it, and `torch_load` says the file is not torch.load's."""
    reached = [w for w, r in t.walks if r]
    unreached = [w for w, r in t.walks if not r]
    unsafe = sorted({fd.name for w in reached for fd in w.findings})
    plain = sorted({n for w in reached for n in w.plain_data} - set(unsafe))   # (a trainer class called: a finding)
    status = "unsafe" if unsafe else "unknown" if t.unknown else "safe"
    dormant = [] if t.torchscript else sorted({fd.name for w in unreached for fd in w.findings} - set(unsafe))
    who = loader or "torch.load"
    plain_text = f"plain data that makes values and runs no code of the file's choosing ({', '.join(plain)})"
    allowed = "torch's weights_only allowlist" + (f" or {plain_text}" if plain else "")
    if status == "unsafe":
        named = sorted({fd.name + (" (its attributes set by BUILD)" if fd.opcode == "BUILD" else "")
                        for w in reached for fd in w.findings})
        verdict = f"UNSAFE: {loader or 'torch.load without weights_only'} would import and may call: " + ", ".join(named)
        lenient = sorted({w.lenient_loaders for w in reached if w.lenient_from is not None and any(
            fd.offset >= w.lenient_from for fd in w.findings)})
        if lenient:   # (past where the unpickler raises: pickle_machine.py `lenient`)
            verdict += f" (some only where {'; '.join(lenient)} read on past where {who} raises)"
    elif status == "unknown":
        verdict = f"UNKNOWN: scan cannot tell what {who} would run: " + t.unknown[0]
    elif safe:
        verdict = safe + (f", and {plain_text}" if plain else "")
    elif t.raises:
        verdict = f"safe: {t.raises}, having imported nothing outside {allowed}"
    else:
        verdict = f"safe: every global {who} would import is in {allowed}"
        if t.weights_only:   # (nothing runs without weights_only; with it, torch refuses the file)
            verdict += f"; torch.load(weights_only=True) refuses the file: {t.weights_only}" + (
                " (torch's error names each class to allow in torch.serialization.safe_globals)" if plain else "")
    if dormant:
        verdict += f" ({len(dormant)} global(s) outside the allowlist in pickles {who} does not reach: {', '.join(dormant)})"
    return {
        "schema": SCAN_SCHEMA,
        "path": t.path,
        "format": t.format,
        "status": status,
        "torch_load": f"not torch.load's: {t.reads}" if loader else t.raises or t.reads,
        "pickles": [{"record": w.record, "offset": w.start, "opcodes": w.opcodes, "reached": r,
                     "globals": _globals([w]), "findings": [_finding(w, fd) for fd in w.findings],
                     "stops": w.failure and f"offset {w.fail_at}: {w.failure}"} for w, r in t.walks],
        "globals": _globals([w for w, _ in t.walks]),
        "unsafe_globals": unsafe,
        "plain_data_globals": plain,
        "unreached_unsafe_globals": dormant,
        "findings": [_finding(w, fd) for w in reached for fd in w.findings],
        "unknown": t.unknown,
        "notes": t.notes,
        "weights_only_loadable": loader is None and t.weights_only is None and status != "unknown",
        "weights_only_refusal": t.weights_only,
        "would_run_code": status != "safe",
        "verdict": verdict,
    }


def plain_report(path: str, fmt: str, torch_load: str, findings: list[dict[str, Any]], unsafe: list[str],
                 unknown: list[str], notes: list[str], verdict: str) -> dict[str, Any]:
    """The `ckptstat.scan/1` report of a file that holds no pickle but runs what it names (a Keras config, a SavedModel's
    graph): its findings and verdict, no pickles or globals table."""
    status = "unsafe" if unsafe else "unknown" if unknown else "safe"
    return {
        "schema": SCAN_SCHEMA, "path": path, "format": fmt, "status": status, "torch_load": torch_load,
        "pickles": [], "globals": [], "unsafe_globals": unsafe, "plain_data_globals": [], "unreached_unsafe_globals": [],
        "findings": findings,
        "unknown": unknown, "notes": notes, "weights_only_loadable": False, "weights_only_refusal": None,
        "would_run_code": status != "safe", "verdict": verdict,
    }


def scan(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Report (schema ckptstat.scan/1) of what `torch.load(path)` without weights_only would run:
    every global the pickles it reaches import, and a verdict (see the module doc). A file torch.load
    cannot read (a broken pickle or container, nothing reached outside the allowlist) raises
    CorruptCheckpointError naming where torch.load fails."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFound(path, "no such file")
    if os.path.isdir(path):
        raise CheckpointError(path, "is a folder (ckptstat.analysis.scan.scan_path walks folders)")
    if not os.path.isfile(path):
        raise CheckpointError(path, "not a regular file")
    return finish(trace(path))


def finish(t: Trace, safe: str | None = None) -> dict[str, Any]:
    """The trace's report, or CorruptCheckpointError when torch.load cannot read the file (see scan)."""
    r = report(t, safe)
    if r["status"] == "safe" and t.unreadable:
        dormant = r["unreached_unsafe_globals"]
        raise CorruptCheckpointError(t.path, t.unreadable + (
            f" (pickles torch.load does not reach import: {', '.join(dormant)})" if dormant else ""))
    return r
