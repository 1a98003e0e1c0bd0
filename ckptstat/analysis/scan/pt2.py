"""`ckptstat scan` of a torch.export archive (`.pt2`): what torch.export.load runs, found without running anything.

torch.export.load (torch/export/__init__.py `load`) reads the archive with load_pt2 (torch/export/pt2_archive/
_package.py), which, per program, reads the records formats/torch/pt2.py `read_archive` lists (`Archive.unpickled`):

- a weight or tensor constant written with `use_pickle`: torch.load(weights_only=False) of the torch.save in its
  record, followed here as torch.load's path through a file (scan/torch_load.py `follow`);
- the state dict and constants of the layout before weight configs (`data/weights/NAME.pt`, `data/constants/NAME.pt`)
  and the sample inputs (`data/sample_inputs/NAME.pt`): deserialize_torch_artifact loads them with weights_only=True
  and, when that raises (as it does on a global outside the allowlist), again with weights_only=False: the same;
- an `opaque_obj_*` constant: pickle.loads of the record, walked as one pickle;
- a `custom_obj_*` constant: torch._C._pickle_load_obj, TorchScript's C++ unpickler, which builds only registered
  TorchScript classes and imports no Python: walked and listed, its globals no finding (as a TorchScript archive's);
- an AOTInductor package's compiled libraries (`data/aotinductor/MODEL/*.so`): load_pt2 hands every model there to
  AOTIModelPackageLoader, which loads the library (native code): scan cannot vet it, so the verdict is unknown.

torch.export.load falls back to the layout of torch before 2.8 when load_pt2 finds no program: a zip whose
`serialized_state_dict.pt`, `serialized_constants.pt` and `serialized_example_inputs.pt` (read with Python's
zipfile) go through deserialize_torch_artifact: followed the same way. The verdicts are torch.load's (torch's
weights_only allowlist); the report names the loader.
"""
from __future__ import annotations

import io
import zipfile
from typing import IO, Any

from ...core.io import Window
from ...core.limits import limits
from ...errors import CorruptCheckpointError
from ...formats.torch import pt2
from ...formats.torch.containers import TorchZip, zip_open
from ...formats.torch.pickle_machine import Walk
from ...formats.torch.pickle_walk import walk
from ...formats.torch.streams import FileWindow, Source
from ...formats.torch.zipdir import central_directory
from .torch_load import MAX_ZIP_ENTRIES, Trace, _member_source, follow, report

FORMAT = "torch.export archive (.pt2)"
OLD_FORMAT = "torch.export archive (torch < 2.8 layout)"
LOADER = "torch.export.load"
OLD_RECORDS = ("serialized_state_dict.pt", "serialized_constants.pt", "serialized_example_inputs.pt")


def _nested(t: Trace, f: IO[bytes], size: int, info: zipfile.ZipInfo, where: str) -> None:
    """Follow torch.load through the torch.save held in a record, its walks added to `t` as reached."""
    src, why = _member_source(f, size, info)
    if src is None:
        t.unknown.append(f"{where}: cannot be read ({why})")
        return
    sub = Trace(where)
    if isinstance(src, FileWindow):
        follow(sub, Window(f, src.start, src.length), src.length)   # type: ignore[arg-type]  # (an io.RawIOBase)
    else:   # inflated whole, as torch's reader extracts a record before torch.load reads it
        cap = limits().pickle_bytes
        if info.file_size > cap:
            t.unknown.append(f"{where}: a deflated record of {info.file_size:,} bytes; scan inflates at most {cap:,}")
            return
        data = _read(src, info.file_size)
        follow(sub, io.BytesIO(data), len(data))
    for w, reached in sub.walks:
        w.record = f"{where}: {w.record}"
        if not isinstance(src, FileWindow):
            w.start = None
        elif w.start is not None:
            w.start += src.start
        t.reach(w, reached)
    t.unknown += [f"{where}: {u}" for u in sub.unknown]
    if sub.raises:
        t.notes.append(f"{where}: {sub.raises}")


def _read(src: Source, n: int) -> bytes:
    try:
        return src.read(min(n, src.left()))
    except Exception:  # noqa: BLE001 - Truncated: a damaged deflate stream gives what it gives
        return b""


def _plain(t: Trace, f: IO[bytes], size: int, info: zipfile.ZipInfo, where: str, script: bool) -> None:
    """One pickle read whole from a record: pickle.loads, or TorchScript's unpickler (`script`)."""
    src, why = _member_source(f, size, info)
    if src is None:
        t.unknown.append(f"{where}: cannot be read ({why})")
        return
    w: Walk = walk(src, where, src.start if isinstance(src, FileWindow) else None)
    if script:
        w.findings = []
        w.globals = dict.fromkeys(w.globals, True)
        t.walks.append((w, True))
    else:
        t.reach(w)
    if w.failure:
        t.notes.append(f"{where}: the unpickler raises at offset {w.fail_at}: {w.failure}")


def _records(path: str, f: IO[bytes], size: int) -> pt2.Read:
    """A record's bytes as torch's reader extracts them (the archive's small records: formats/torch/pt2.py)."""
    def read(info: zipfile.ZipInfo, cap: int) -> bytes:
        src, why = _member_source(f, size, info)
        if src is None:
            raise CorruptCheckpointError(path, f"record {info.filename} cannot be read ({why})")
        return _read(src, min(cap, info.file_size))
    return read


def _trace_pt2(path: str, f: IO[bytes], size: int, tz: TorchZip) -> Trace:
    t = Trace(path, format=FORMAT)
    a = pt2.read_archive(path, tz, _records(path, f, size))
    t.reads = f"{LOADER} reads {len(a.programs)} program(s): " + ", ".join(a.programs[:8])
    for record, how in a.unpickled:
        info = tz.locate(record)
        if info is None:
            t.notes.append(f"{tz.folder}/{record}: named by the archive, but there is no such record: torch.export.load "
                           "raises there")
            continue
        where = f"{info.filename} ({how})"
        if how in (pt2.TORCH_LOAD, pt2.ARTIFACT):
            _nested(t, f, size, info, where)
        else:
            _plain(t, f, size, info, where, script=how == pt2.SCRIPT_OBJ)
    for record in a.compiled[:1]:
        t.unknown.append(f"{tz.folder}/{record}: an AOTInductor library, which torch.export.load (load_pt2) hands to "
                         "AOTIModelPackageLoader to load and run: native code scan cannot vet "
                         f"({len(a.compiled)} such record(s))")
    if not a.programs and not a.compiled:
        t.notes.append("the archive holds no models/*.json program")
    return t


def _trace_old(path: str, f: IO[bytes], size: int) -> Trace | None:
    """The layout of torch before 2.8, which torch.export.load reads with Python's zipfile: None when not it."""
    try:
        zf = zip_open(path, f)
    except CorruptCheckpointError:
        return None
    infos = zf.infolist()
    names = {i.filename for i in infos}
    if "version" not in names or "serialized_exported_program.json" not in names:
        return None
    t = Trace(path, format=OLD_FORMAT)
    t.reads = f"{LOADER} reads the layout of torch before 2.8 (Python's zipfile)"
    for info in infos:   # zipfile.read of every entry in order; deserialize_torch_artifact of the last of each name
        if info.filename in OLD_RECORDS and info is zf.getinfo(info.filename):
            _nested(t, f, size, info, f"{info.filename} ({pt2.ARTIFACT})")
    return t


def judge_export(path: str, f: IO[bytes], size: int) -> dict[str, Any] | None:
    """The scan report of a torch.export archive (local or remote `f` of `size` bytes), or None when it is not one."""
    infos, refusal = central_directory(f, size, MAX_ZIP_ENTRIES)
    tz = TorchZip(infos) if refusal is None else None
    t: Trace | None = None
    if tz is not None and not tz.refusal and _is_pt2(path, f, size, tz):
        t = _trace_pt2(path, f, size, tz)
    else:
        t = _trace_old(path, f, size)
    if t is None:
        return None
    r = report(t)
    r["torch_load"] = f"not torch.load's: {t.reads}"
    r["weights_only_loadable"] = False
    r["verdict"] = r["verdict"].replace("torch.load without weights_only would", f"{LOADER} would").replace(
        "torch.load ", f"{LOADER} ")
    return r


def _is_pt2(path: str, f: IO[bytes], size: int, tz: TorchZip) -> bool:
    try:
        return pt2.is_pt2(tz, _records(path, f, size))
    except CorruptCheckpointError:   # an archive_format record torch cannot extract: torch.export.load raises
        return False
