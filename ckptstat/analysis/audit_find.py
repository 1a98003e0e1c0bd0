"""`ckptstat audit`: which checkpoints live under a root, and the key a finished record is resumed by.

A unit is what `open_checkpoint` is given: one weights file, a sharded checkpoint's `*.index.json`
(its shards claimed, never audited apart), a TF bundle's `X.index` (its `X.data-*` files and the
`checkpoint` pointer claimed), a SavedModel folder (everything under it claimed), an ONNX model (its
`X.onnx.data` / `X.onnx_data` external file claimed). Any other file is a unit when the format
registry's detection accepts it (magic bytes, else a known extension: formats/registry.py `detect`)
or when its first bytes are a pickle's (analysis/scan.py `pickle_bearing`: a bare pickle is what the
scan must see); the rest (config.json, tokenizers, READMEs) is counted as skipped.

Symlinks are followed only to files inside the root, and links to folders never (as `ckptstat scan`).
"""
from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass

from ..errors import CkptstatError, UsageError
from ..formats.registry import detect, read_json
from .scan import pickle_bearing

# A TF bundle's data shards: `<prefix>.data-00000-of-00001` (tensorflow/core/util/tensor_bundle).
_TF_DATA = re.compile(r"^(?P<prefix>.+)\.data-\d{5}-of-\d{5}$")
_INDEX_CAP = 128 << 20


@dataclass(frozen=True)
class Unit:
    path: str                 # what open_checkpoint is given (and the record's key)
    files: tuple[str, ...]    # every file it spans: its size and mtime key the record for resuming
    bytes: int
    mtime_ns: int

    @property
    def key(self) -> tuple[str, int, int]:
        return (self.path, self.bytes, self.mtime_ns)


def _unit(path: str, files: list[str]) -> Unit:
    size = mtime = 0
    kept = []
    for f in files:
        try:
            st = os.stat(f)
        except OSError:
            continue
        kept.append(f)
        size += st.st_size
        mtime = max(mtime, st.st_mtime_ns)
    return Unit(path, tuple(kept), size, mtime)


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _is_unit(path: str) -> bool:
    """Whether a file no rule claimed is a checkpoint: the registry accepts it, or it is a pickle."""
    try:
        detect(path)
        return True
    except CkptstatError:
        return pickle_bearing(path)
    except Exception:  # noqa: BLE001 - an odd file is judged by its pickle bytes alone
        return pickle_bearing(path)


def _shards(index: str) -> list[str]:
    """The shard files an index names (those that are plain file names in its folder)."""
    try:
        data = read_json(index, _INDEX_CAP, "index")
    except Exception:  # noqa: BLE001 - a broken index is still a unit: its record says what is wrong
        return []
    wm = data.get("weight_map") if isinstance(data, dict) else None
    if not isinstance(wm, dict):
        return []
    folder = os.path.dirname(index)
    return sorted({os.path.join(folder, v) for v in wm.values() if isinstance(v, str) and os.path.basename(v) == v})


def _tf_prefix(path: str) -> str | None:
    m = _TF_DATA.match(os.path.basename(path))
    return m["prefix"] if m else None


def _walk(root: str, skipped: list[str]) -> list[Unit]:
    real_root = os.path.realpath(root)
    units: list[Unit] = []
    seen: set[str] = set()
    for folder, dirs, names in os.walk(root, followlinks=False):
        dirs.sort()
        for d in list(dirs):
            if os.path.islink(os.path.join(folder, d)):
                dirs.remove(d)
                skipped.append(os.path.join(folder, d))
        if "saved_model.pb" in names:   # a TF SavedModel: the folder is the checkpoint (variables/ inside)
            units.append(_unit(folder, sorted(os.path.join(f, n) for f, _, ns in os.walk(folder) for n in ns)))
            dirs[:] = []
            continue
        files: list[str] = []
        for n in sorted(names):
            p = os.path.join(folder, n)
            real = os.path.realpath(p)
            try:
                st = os.stat(real)
            except OSError:
                skipped.append(p)
                continue
            if (os.path.islink(p) and not _inside(real, real_root)) or not stat.S_ISREG(st.st_mode) or real in seen:
                skipped.append(p)
                continue
            seen.add(real)
            files.append(p)
        claimed: set[str] = set()
        groups: list[tuple[str, list[str]]] = []
        for p in files:
            n = os.path.basename(p)
            if n.endswith(".index.json"):
                shards = [s for s in _shards(p) if s in files]
                groups.append((p, [p, *shards]))
            elif n.endswith(".index") and (data := [q for q in files if _tf_prefix(q) == n[:-6]]):
                pointer = [q for q in files if os.path.basename(q) == "checkpoint"]
                groups.append((p, [p, *data, *pointer]))
            elif n.endswith(".onnx"):
                external = [q for q in files if os.path.basename(q) in (n + ".data", n + "_data", n[:-5] + ".onnx_data")]
                groups.append((p, [p, *external]))
        for _, members in groups:
            claimed.update(members[1:])
        for path, members in groups:
            if path not in claimed:
                units.append(_unit(path, members))
                claimed.add(path)
        for p in files:
            if p in claimed:
                continue
            if _is_unit(p):
                units.append(_unit(p, [p]))
            else:
                skipped.append(p)
    return units


def _entry(target: str, skipped: list[str]) -> list[Unit]:
    if os.path.isdir(target):
        return _walk(target, skipped)
    if os.path.isfile(target):
        return [_unit(target, [target])]
    if os.path.isfile(target + ".index"):   # a TF checkpoint prefix
        return [_unit(target + ".index", [target + ".index"])]
    return [Unit(target, (), 0, 0)]   # the record says it is missing: a list's stale line never ends the run


def discover(target: str) -> tuple[list[Unit], list[str]]:
    """The units under `target` (a folder, a file, or `@list.txt`: one path per line, `#` comments),
    each once, in walk order; and the files looked at and skipped."""
    skipped: list[str] = []
    if target.startswith("@"):
        listing = target[1:]
        try:
            with open(listing, encoding="utf-8") as f:
                lines = [ln.strip() for ln in f.read(_INDEX_CAP).splitlines()]
        except OSError as e:
            raise UsageError(f"{listing}: cannot read the list of checkpoints ({e.strerror})") from None
        entries = [ln for ln in lines if ln and not ln.startswith("#")]
    else:
        entries = [target]
    entries = [os.path.normpath(e) for e in entries]   # `zoo/` and `zoo` key the same records
    units: list[Unit] = []
    seen: set[str] = set()
    for entry in entries:
        for u in _entry(entry, skipped):
            if u.path not in seen:
                seen.add(u.path)
                units.append(u)
    return units, skipped

