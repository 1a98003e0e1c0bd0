"""`ckptstat scan` of a torch.package archive (torch.package.PackageExporter): what PackageImporter would run.

torch.load refuses one (no `data.pkl`). `PackageImporter(path)` opens it with torch's reader (the records under the
folder of the first entry, as containers.TorchZip finds them), and `load_pickle(package, resource)` unpickles the
record the caller names, importing each global through the archive (torch/package/package_importer.py): a module
whose source the archive holds (`<module path>.py`, `<package>/__init__.py`) is run from there, a module listed in
`.data/extern_modules` (and builtins) is imported from the environment. A record is a pickle by its bytes, not its
name (`save_pickle` takes any), so every record but the sources and `.data/` is walked as reached, its globals
judged by torch's weights_only allowlist as torch.load's are; the archive's Python sources make the verdict unknown
when no pickle is unsafe: importing one runs it, and scan cannot vet code. Told apart by `.data/extern_modules`,
which every PackageExporter archive holds.
"""
from __future__ import annotations

import zipfile
from typing import IO, Any

from ...formats.torch.containers import TorchZip, raw_name
from ...formats.torch.pickle_walk import walk
from ...formats.torch.streams import FileWindow
from ...formats.torch.zipdir import central_directory
from .torch_load import MAX_ZIP_ENTRIES, Trace, _member_source, report

FORMAT = "torch.package archive"
LOADER = "PackageImporter.load_pickle"
MARKER = ".data/extern_modules"


def judge_package(path: str, f: IO[bytes], size: int) -> dict[str, Any] | None:
    """The scan report of a torch.package archive (a local or remote `f` of `size` bytes), or None when not one."""
    infos, refusal = central_directory(f, size, MAX_ZIP_ENTRIES)
    if refusal is not None:
        return None
    tz = TorchZip(infos)
    if tz.refusal or tz.locate(MARKER) is None or tz.locate("data.pkl") is not None:
        return None
    t = Trace(path, format=FORMAT)
    t.reads = f"torch.package's {LOADER} unpickles the record its caller names, importing each global through the archive"
    sources = []
    for info, record in zip(infos, tz.records):
        if record.endswith(b".py"):
            sources.append(record.decode("utf-8", "replace"))
            continue
        if record.startswith(b".data/") or record == b"byteorder" or raw_name(info).endswith(b"/"):
            continue
        _walk(t, f, size, info)
    if sources:
        t.unknown.append(f"PackageImporter runs the archive's Python source of every module a pickle imports from it "
                         f"({len(sources)} module(s): {', '.join(sources[:4])}{' ...' if len(sources) > 4 else ''}): "
                         "scan cannot vet code")
    r = report(t, loader=LOADER)
    for fd in [*r["findings"], *(fd for p in r["pickles"] for fd in p["findings"])]:
        fd["why"] = "PackageImporter.load_pickle imports it, from the archive's source or the environment (and may call it)"
    return r


def _walk(t: Trace, f: IO[bytes], size: int, info: zipfile.ZipInfo) -> None:
    """Walk a record as a pickle; kept when it is one (it walks to STOP, or imports something on the way)."""
    src, why = _member_source(f, size, info, walked=True)
    if src is None:
        t.unknown.append(f"{info.filename}: cannot be read ({why})")
        return
    w = walk(src, info.filename, src.start if isinstance(src, FileWindow) else None, object_pickle=True,
             persistent=True)
    if w.failure is None or w.globals:
        t.reach(w)
