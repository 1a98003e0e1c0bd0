"""`ckptstat scan PATH`: one file's scan report (formats.torch.scan), or, for a folder, every
pickle-bearing file under it, one entry each, and the totals (docs/torch.md, "ckptstat scan").

A file under the folder is scanned when its name ends in a pickle-bearing extension, or when its first
4 KiB say so: a pickle's PROTO opcode, a zip holding a `*.pkl` entry, a tar whose first member is one of
torch's (`sys_info`, `pickle`, `storages`, `tensors`), or bytes that walk as a pickle (protocols 0 and 1
have no PROTO opcode). Symlinks are followed only to files inside
the folder (each file scanned once), never out of it; links to folders are not followed; FIFOs,
devices and sockets are skipped without being opened.
"""
from __future__ import annotations

import os
import stat
import zipfile
from collections.abc import Callable
from typing import Any

from ..core.files import open_regular
from ..core.urls import is_url
from ..errors import CheckpointError, CkptstatError, FileNotFound
from ..formats.loader_scan import scan_other
from ..formats.msgpack_walk import looks_like_flax
from ..formats.torch import scan as scan_file
from ..formats.torch.pickle_walk import walk
from ..formats.torch.streams import BytesSource

TREE_SCHEMA = "ckptstat.scan_tree/1"
EXTENSIONS = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle", ".npy", ".npz", ".keras")
KERAS_H5 = (".h5", ".hdf5")   # Keras 2 model files (formats/loader_scan.py): local only, the remote scan follows torch.load
_TAR_MEMBERS = (b"sys_info", b"pickle", b"storages", b"tensors")
_HEAD = 4096
STATUSES = ("unsafe", "unknown", "unreadable", "safe")


def exit_code(report: dict[str, Any]) -> int:
    """0 clean, 1 unsafe (or unknown: scan cannot tell), 2 unreadable; for a folder, the worst file's."""
    if report["schema"] == TREE_SCHEMA:
        totals = report["totals"]
        return 1 if totals["unsafe"] or totals["unknown"] else 2 if totals["unreadable"] else 0
    return 0 if report["status"] == "safe" else 1


def pickle_bearing(path: str) -> bool:
    """Whether a regular file is worth scanning: its extension, else its first bytes (see module doc)."""
    if path.lower().endswith(EXTENSIONS):
        return True
    if path.lower().endswith(KERAS_H5):
        return not is_url(path)
    try:
        with open_regular(path) if is_url(path) else open(path, "rb") as f:   # a URL: its first window (audit)
            head = f.read(_HEAD)
            if head[:1] == b"\x80" and head[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05") or head[:6] == b"\x93NUMPY":
                return True
            if head[257:262] == b"ustar":
                return head[:100].split(b"\0")[0] in _TAR_MEMBERS
            if head[:4] == b"PK\x03\x04":
                f.seek(0)
                names = zipfile.ZipFile(f).namelist()   # torch's pickles, np.savez's arrays, a .keras config
                keras = {"config.json", "model.weights.h5"} <= set(names)
                return keras or any(n.lower().endswith((".pkl", ".npy")) for n in names)
        # a Flax msgpack file: its map markers (0x81-0x8F) read as pickle EXT opcodes, but flax's loader
        # (msgpack with an ndarray ext hook, docs/flax.md) never unpickles
        if looks_like_flax(head, whole=len(head) < _HEAD):
            return False
        # protocol 0 and 1 have no PROTO opcode: a head that walks as a pickle (to its STOP, or naming a
        # global, or through all its bytes) is one
        w = walk(BytesSource(head), "head", 0)
        return w.end is not None or bool(w.globals) or (len(head) == _HEAD and w.failure == "pickle data was truncated"
                                                         and w.opcodes > 16)
    except Exception:  # noqa: BLE001 - an unreadable or odd file is simply not picked by its content
        return False


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _entry(rel: str, r: dict[str, Any] | None, error: str | None = None) -> dict[str, Any]:
    if r is None:
        return {"path": rel, "status": "unreadable", "error": error, "format": None, "torch_load": None,
                "unsafe_globals": [], "unreached_unsafe_globals": [], "findings": [], "unknown": [], "verdict": error}
    keys = ("format", "torch_load", "unsafe_globals", "unreached_unsafe_globals", "findings", "unknown", "verdict",
            "weights_only_loadable")
    return {"path": rel, "status": r["status"], "error": None, **{k: r[k] for k in keys}}


def scan_tree(root: str, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Every pickle-bearing file under the folder `root` (see the module doc), scanned."""
    real_root = os.path.realpath(root)
    files: list[dict[str, Any]] = []
    skipped: list[dict[str, str]] = []
    seen: set[str] = set()
    for folder, dirs, names in os.walk(root, followlinks=False):
        dirs.sort()
        for d in dirs:
            p = os.path.join(folder, d)
            if os.path.islink(p):
                skipped.append({"path": os.path.relpath(p, root), "why": "a link to a folder: not followed"})
        for name in sorted(names):
            p = os.path.join(folder, name)
            rel = os.path.relpath(p, root)
            real = os.path.realpath(p)
            if os.path.islink(p) and not _inside(real, real_root):
                skipped.append({"path": rel, "why": "a link to outside the folder: not followed"})
                continue
            try:
                st = os.stat(real)
            except OSError as e:
                skipped.append({"path": rel, "why": f"cannot stat it ({e.strerror})"})
                continue
            if not stat.S_ISREG(st.st_mode):
                skipped.append({"path": rel, "why": "not a regular file"})
                continue
            if real in seen or not pickle_bearing(real):
                continue
            seen.add(real)
            if progress:
                progress(rel)
            try:
                files.append(_entry(rel, scan_local(real)))
            except CkptstatError as e:
                reason = e.reason if isinstance(e, CheckpointError) else str(e)
                files.append(_entry(rel, None, reason))
    totals = {s: sum(1 for f in files if f["status"] == s) for s in STATUSES}
    return {"schema": TREE_SCHEMA, "path": root, "files": files, "skipped": skipped,
            "totals": {"files": len(files), **totals, "skipped": len(skipped)}}


def scan_url(url: str) -> dict[str, Any]:
    """A remote file's `ckptstat.scan/1` report, fetched with range requests (formats/torch/scan_remote.py)."""
    from .. import sources  # noqa: F401 - installs the remote source the core reads URLs through
    from ..formats.torch.scan_remote import scan_url as scan_remote

    return scan_remote(url)


def _walk_order(rel: str) -> list[tuple[int, str]]:
    """os.walk's order (a folder's files by name, then its folders by name, each walked in turn) as a key."""
    parts = rel.split("/")
    return [(1, p) for p in parts[:-1]] + [(0, parts[-1])]


def scan_tree_url(root: str, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Every pickle-bearing file under a folder URL (an https folder the server lists, hf://org/model[@rev], an
    s3:// prefix: sources/listing.py `walk`), scanned remotely, as scan_tree scans a local folder."""
    from .. import sources  # noqa: F401
    from ..sources.listing import walk as list_remote

    prefix = root.split("?", 1)[0].rstrip("/") + "/"
    files: list[dict[str, Any]] = []
    skipped: list[dict[str, str]] = []
    entries = [(e.url[len(prefix):] if e.url.startswith(prefix) else e.url, e) for e in list_remote(root)]
    for rel, e in sorted(entries, key=lambda x: _walk_order(x[0])):
        if e.error:
            skipped.append({"path": rel, "why": e.error})
            continue
        if not pickle_bearing(e.url):
            continue
        if progress:
            progress(rel)
        try:
            files.append(_entry(rel, scan_url(e.url)))
        except CkptstatError as err:
            files.append(_entry(rel, None, err.reason if isinstance(err, CheckpointError) else str(err)))
    totals = {s: sum(1 for f in files if f["status"] == s) for s in STATUSES}
    return {"schema": TREE_SCHEMA, "path": root, "files": files, "skipped": skipped,
            "totals": {"files": len(files), **totals, "skipped": len(skipped)}}


def scan_path(path: str | os.PathLike[str], progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """A file's `ckptstat.scan/1` report, or a folder's `ckptstat.scan_tree/1` report; a URL is scanned with
    range requests (docs/torch.md, "Remote files")."""
    path = os.fspath(path)
    if is_url(path):
        from .. import sources  # noqa: F401
        from ..core.files import isdir

        return scan_tree_url(path, progress) if isdir(path) else scan_url(path)
    if os.path.isdir(path):
        return scan_tree(path, progress)
    if not os.path.lexists(path):
        raise FileNotFound(path, "no such file or folder")
    return scan_local(path)


def scan_local(path: str) -> dict[str, Any]:
    """numpy object arrays and Keras lambdas by their own loaders' rules (formats/loader_scan.py), else
    torch.load's path."""
    if os.path.isfile(path):
        other = scan_other(path)
        if other is not None:
            return other
        with open(path, "rb") as f:
            head = f.read(_HEAD)
        if looks_like_flax(head, whole=len(head) < _HEAD):   # as pickle_bearing decides for a folder's files
            raise CheckpointError(path, "no pickle to scan: a Flax msgpack checkpoint, which flax.serialization reads "
                                        "with msgpack, never pickle (docs/flax.md)")
    return scan_file(path)
