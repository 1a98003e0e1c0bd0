"""`ckptstat audit`: which checkpoints live under a root, and the key a finished record is resumed by.

A unit is what `open_checkpoint` is given: one weights file, a sharded checkpoint's `*.index.json` or Keras
`*.weights.json` (its shards claimed, never audited apart), a TF bundle's `X.index` (its `X.data-*` files and the
`checkpoint` pointer claimed), a SavedModel folder (everything under it claimed), an ONNX model (the external data
files its tensors name, as its reader resolves them inside its folder: `_onnx_data`), a torch.distributed.checkpoint
folder (its `.metadata`, or the folder when only rank-local `__<rank>.metadata` files or HuggingFaceStorageWriter
shards are there: every rank's file claimed, none a checkpoint alone), an orbax item or step folder (formats/orbax/: everything
under it claimed; a CheckpointManager's steps are a unit each), a KerasHub preset (formats/keras_hub.py
`preset_folder`: everything under it claimed). Any other file is a unit when the format
registry's detection accepts it (magic bytes, else a known extension: formats/registry.py `detect`)
or when a loader would read a pickle from its bytes (analysis/scan/ `pickle_bearing`, locally and remotely: a
bare pickle is what the scan must see); the rest (config.json, tokenizers, READMEs) is counted as skipped.

Symlinks are followed only to files inside the root, or from a Hugging Face cache snapshot into its repository's
`blobs/` (core/files.py `followed`), and links to folders never (as `ckptstat scan`).

A URL root (https:// folder, hf://org/model[@rev], s3://bucket/prefix) is listed through the sources
layer (sources/listing.py `walk`) and grouped by the same rules, folder by folder; its units are keyed
by path, size and the store's version of each file (`etag`) instead of the mtime (docs/audit.md).
"""
from __future__ import annotations

import hashlib
import os
import re
import stat
from dataclasses import dataclass

from ...core.files import HF_CACHE_REPOS, absent, dirname, followed, join, regular, walk
from ...core.urls import is_url, parent, scheme
from ...core.urls import named as named_url
from ...errors import (
    CheckpointError,
    CkptstatError,
    FileNotFound,
    MissingDependencyError,
    UnknownFormatError,
    UsageError,
    short_text,
)
from ...formats.configs import read_json
from ...formats.keras_hub import preset_folder
from ...formats.orbax import orbax_folder
from ...formats.registry import DCP_SHARD, detect, index_shards, is_index, named_as_checkpoint
from ...formats.training import trainer_folder
from ..scan import pickle_bearing

# A TF bundle's data shards: `<prefix>.data-00000-of-00001` (tensorflow/core/util/tensor_bundle).
_TF_DATA = re.compile(r"^(?P<prefix>.+)\.data-\d{5}-of-\d{5}$")
_INDEX_CAP = 128 << 20
# A torch.distributed.checkpoint folder's files (docs/dcp.md): the global or rank-local metadata, each rank's items.
_DCP_FILE = re.compile(r"^(\.metadata|__\d+\.metadata|.+\.distcp)$")


@dataclass(frozen=True)
class Unit:
    path: str                 # what open_checkpoint is given (and the record's key)
    files: tuple[str, ...]    # every file it spans: its size and mtime key the record for resuming
    bytes: int
    mtime_ns: int
    etag: str | None = None    # a URL unit: its files' versions (sources/listing.py); None: unknown
    error: str | None = None   # a URL the listing could not reach: the record's error

    @property
    def key(self) -> tuple[str, int, int | str]:
        return resume_key(self.path, self.bytes, self.mtime_ns, self.etag) or (self.path, -1, "")


def resume_key(path: str, size: int, mtime_ns: int | None, etag: str | None) -> tuple[str, int, int | str] | None:
    """What a finished record is resumed by: path, size and mtime; for a URL, path, size and etag (None
    when the store gave no version: such a unit is audited again on every run)."""
    if is_url(path):
        return (path, size, etag) if etag else None
    return (path, size, mtime_ns) if mtime_ns is not None else None


def _unit(path: str, files: list[str]) -> Unit:
    kept, size, mtime = stat_files(files)
    return Unit(path, tuple(kept), size, mtime)


def stat_files(files: list[str] | tuple[str, ...]) -> tuple[list[str], int, int]:
    """(the files that are there, their bytes, their latest mtime_ns): a unit's resume key."""
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
    return kept, size, mtime


def unchanged(unit: Unit) -> bool:
    """Whether a local unit's files are still what the walk found (their names, bytes and mtime): a file replaced by
    a link out of the root after the walk (a cluster's task may wait long in the queue) is not read as the unit."""
    return is_url(unit.path) or stat_files(unit.files) == (list(unit.files), unit.bytes, unit.mtime_ns)


def _is_unit(path: str) -> bool:
    """Whether a file no rule claimed is a checkpoint: the registry accepts it, or it is a pickle; or it is named as a
    format's files are and is empty or cannot be read (a failed download, a file of another user's: a unit whose record
    says why, not a file passed over in silence, as an empty `model.safetensors` was)."""
    try:
        detect(path)
        return True
    except UnknownFormatError as e:
        return pickle_bearing(path) or (e.reason == "file is empty" and named_as_checkpoint(path))
    except CkptstatError:   # a URL that cannot be read (403, timeouts): a unit, whose record says why
        return is_url(path) or pickle_bearing(path)
    except OSError:
        return named_as_checkpoint(path) or pickle_bearing(path)
    except Exception:  # noqa: BLE001 - an odd file is judged by its pickle bytes alone
        return pickle_bearing(path)


def _shards(index: str) -> list[str]:
    """The shard files an index names, in its folder (none when it names one that is not a plain file name there: the
    index's own record says so, and its shards are audited apart)."""
    try:
        shards = index_shards(index, read_json(index, _INDEX_CAP, "index"))
    except Exception:  # noqa: BLE001 - a broken index is still a unit: its record says what is wrong
        return []
    return sorted(os.path.join(os.path.dirname(index), s) for s in shards)


def _tf_prefix(path: str) -> str | None:
    m = _TF_DATA.match(os.path.basename(path))
    return m["prefix"] if m else None


class Skipped(list[str]):
    """The files (and links to folders) a walk looked at and left out, in walk order; `refused`: those among them it
    would not read, as `ckptstat scan` refuses them (a link out of the root or to a folder, a FIFO or device, a file it
    cannot stat): audit cannot vouch for what such a path leads to. The rest are files no unit takes (config.json,
    READMEs) or a second name of a file taken."""

    def __init__(self) -> None:
        super().__init__()
        self.refused: list[str] = []

    def refuse(self, p: str) -> None:
        self.append(p)
        self.refused.append(p)


def _walk(root: str, skipped: Skipped) -> list[Unit]:
    real_root = os.path.realpath(root)
    units: list[Unit] = []
    seen: set[str] = set()
    claimed: set[str] = set()   # files a unit of a folder above took (an ONNX model's data in a subfolder)
    def unlisted(folder: str, why: str) -> None:   # a record with the error: audit cannot say what is in it
        units.append(Unit(folder, (), 0, 0, error=f"cannot list the folder ({why}): {folder}"))
    for folder, dirs, names in walk(root, unlisted):
        # a Hugging Face cache repository's blobs/ last: a file is audited under its snapshot's name, beside the
        # snapshot's config.json, and a blob no snapshot links to under its own
        last = os.path.basename(folder).startswith(HF_CACHE_REPOS)
        dirs.sort(key=lambda d: (last and d == "blobs", d))
        for d in list(dirs):
            if os.path.islink(os.path.join(folder, d)):
                dirs.remove(d)
                skipped.refuse(os.path.join(folder, d))
        # a TF SavedModel (variables/ inside), a Trainer checkpoint-N/ (the model, optimizer.pt, scheduler.pt,
        # rng_state.pth, training_args.bin) or an orbax item or step folder: the folder is the checkpoint, every file
        # under it scanned
        if "saved_model.pb" in names or trainer_folder({*names, *dirs}) or orbax_folder(names) or preset_folder(names):
            # (its files taken as any folder's are: a link out of the root, a FIFO skipped, never read)
            inside = sorted(os.path.join(f, n) for f, _, ns in walk(folder, unlisted) for n in ns)
            units.append(_unit(folder, [p for p in inside if _taken(p, real_root, skipped)]))
            dirs[:] = []
            continue
        files: list[str] = []
        # a cache's blobs/<etag>.incomplete: what an interrupted download left (huggingface_hub file_download.py renames
        # it once whole; scan_cache_dir lists it among the incomplete files, of no revision): no checkpoint, skipped
        partial = os.path.basename(folder) == "blobs" and os.path.basename(os.path.dirname(folder)).startswith(HF_CACHE_REPOS)
        for n in sorted(names):
            p = os.path.join(folder, n)
            if partial and n.endswith(".incomplete"):
                skipped.append(p)
                continue
            real = os.path.realpath(p)
            if real in claimed:
                continue
            if not _taken(p, real_root, skipped):
                continue
            if real in seen:
                skipped.append(p)
                continue
            seen.add(real)
            files.append(p)
        groups = _group(files, skipped)
        claimed.update(os.path.realpath(m) for path, members in groups for m in members if m != path)
        units += [_unit(path, members) for path, members in groups]
    return units


def _taken(p: str, real_root: str, skipped: Skipped) -> bool:
    """Whether a walk under `real_root` takes the file `p`: a regular file, through a link only where `followed`
    (core/files.py); else it is refused."""
    try:
        regular = stat.S_ISREG(os.stat(p).st_mode)
    except OSError:
        regular = False
    if regular and not (os.path.islink(p) and not followed(p, real_root)):
        return True
    skipped.refuse(p)
    return False


def _dcp_group(files: list[str]) -> list[tuple[str, list[str]]]:
    """A torch.distributed.checkpoint folder's files as one unit (docs/dcp.md): opened from its `.metadata`, or
    from the folder when only rank-local `__<rank>.metadata` files or HuggingFaceStorageWriter shards are there."""
    ranks = [q for q in files if _DCP_FILE.match(n := os.path.basename(q)) or DCP_SHARD.match(n)]
    names = [os.path.basename(q) for q in ranks]
    if ".metadata" in names:
        return [(ranks[names.index(".metadata")], ranks)]
    if "__0.metadata" in names or any(DCP_SHARD.match(n) for n in names):
        return [(dirname(ranks[0]), ranks)]
    return []


def _onnx_data(model: str, files: list[str]) -> list[str]:
    """The external data files an ONNX model names (its tensors' `external_data` location), as its reader resolves
    them inside the model's folder (docs/security.md: a reference out of it is refused, claims nothing, and the
    record says why); a file of `files` under its walked name, one in a subfolder under the reader's. A URL's model
    cannot be read here: there onnx's default names `X.onnx.data` / `X.onnx_data` are claimed."""
    if is_url(model):
        n = os.path.basename(model)
        return [q for q in files if os.path.basename(q) in (n + ".data", n + "_data", n[:-5] + ".onnx_data")]
    from ...formats.registry import open_checkpoint

    try:
        named = open_checkpoint(model, allow_external=False).files
    except Exception:  # noqa: BLE001 - a model that cannot be read claims nothing: its record says why
        return []
    walked = {os.path.realpath(q): q for q in files}
    refs = {os.path.realpath(f): f for f in named if os.path.realpath(f) != os.path.realpath(model)}
    return [walked.get(real, f) for real, f in sorted(refs.items())]


def _group(files: list[str], skipped: list[str]) -> list[tuple[str, list[str]]]:
    """One folder's files (local paths or URLs) as units, each (its path, the files it spans): the
    rules of the module doc; the files no unit takes go to `skipped`."""
    claimed: set[str] = set()
    groups: list[tuple[str, list[str]]] = _dcp_group(files)
    for p in files:
        n = os.path.basename(p)
        if is_index(n):
            shards = [s for s in _shards(p) if s in files]
            groups.append((p, [p, *shards]))
        elif n.endswith(".index") and (data := [q for q in files if _tf_prefix(q) == n[:-6]]):
            pointer = [q for q in files if os.path.basename(q) == "checkpoint"]
            groups.append((p, [p, *data, *pointer]))
        elif n.endswith(".onnx"):
            groups.append((p, [p, *_onnx_data(p, files)]))
    for path, members in groups:
        claimed.update(m for m in members if m != path)
    out: list[tuple[str, list[str]]] = []
    for path, members in groups:
        if path not in claimed:
            out.append((path, members))
            claimed.add(path)
    for p in files:
        if p in claimed:
            continue
        if _is_unit(p):
            out.append((p, [p]))
        else:
            skipped.append(p)
    return out


# --- remote roots ----------------------------------------------------------------------------------

def _etag(members: list[str], versions: dict[str, str | None]) -> str | None:
    """A unit's version: its one file's, or a digest of every member's (None if one has none)."""
    tags = [versions.get(f) for f in members]
    if any(t is None for t in tags):
        return None
    if len(tags) == 1:
        return tags[0]
    text = "\n".join(f"{os.path.basename(f)}={t}" for f, t in sorted(zip(members, tags)))
    return "files:" + hashlib.blake2b(text.encode("utf-8", "backslashreplace"), digest_size=16).hexdigest()


def _remote_walk(root: str, skipped: list[str]) -> list[Unit]:
    """The units under a folder URL, from one recursive listing, folder by folder in the order os.walk
    visits a local tree (a folder's own files, then its subfolders by name)."""
    from ...sources import listing

    found = listing.walk(root)
    entries = [e for e in found if e.error is None]
    failed = {e.url: e.error for e in found if e.error is not None}   # each its own unit: its record says why
    sizes = {e.url: e.size for e in entries}
    versions = {e.url: e.etag for e in entries}
    folders: dict[str, list[str]] = {}
    for e in found:
        folders.setdefault(parent(e.url), []).append(e.url)
    base = parent(join(root, "x"))

    def order(folder: str) -> tuple[str, ...]:
        return tuple(folder[len(base):].split("/"))

    units: list[Unit] = []
    saved_models: list[str] = []
    for folder in sorted(folders, key=order):
        if any(folder == s or folder.startswith(s + "/") for s in saved_models):
            continue
        names = sorted(u for u in folders[folder] if u not in failed)
        units += [Unit(u, (u,), 0, 0, error=failed[u]) for u in sorted(folders[folder]) if u in failed]
        if not names:
            continue
        files = [os.path.basename(f) for f in names]
        if "saved_model.pb" in files or orbax_folder(files) or preset_folder(files):
            saved_models.append(folder)   # a TF SavedModel, an orbax item or step folder, a KerasHub preset: one unit
            members = sorted(u for u in sizes if u.startswith(folder + "/"))
            groups = [(folder, members)]
        else:
            groups = _group(names, skipped)
        units += [Unit(path, tuple(m), sum(sizes[f] for f in m), 0, _etag(m, versions)) for path, m in groups]
    return units


def _hub_owner(url: str) -> bool:
    rest = url.split("://", 1)[1].strip("/")
    return scheme(url) == "hf" and bool(rest) and "/" not in rest and "@" not in rest


def _remote_entry(url: str, skipped: list[str]) -> list[Unit]:
    """A URL named as a root or in a list: a folder's units, or the one file; a URL that cannot be
    reached is one unit carrying the error (a record, never the end of the run)."""
    from ...core import files
    from ...formats.registry import open_checkpoint  # noqa: F401 - installs the remote source (core.urls)
    from ...sources import listing

    try:
        if _hub_owner(url):   # hf://name: a repository (a canonical id such as gpt2), else name's repositories
            try:
                if files.isdir(url):
                    return _remote_walk(url, skipped)
            except (FileNotFound, CkptstatError):   # huggingface_hub 1.x refuses one-segment repository ids
                pass
            from ...sources import hub

            repos = hub.repos(url)
            if not repos:
                return [Unit(url, (), 0, 0, error=f"{url}: no such repository, user or organisation on the Hub")]
            return [u for r in repos for u in _remote_entry(r, skipped)]
        if files.isdir(url):
            return _remote_walk(url, skipped)
        if files.isfile(url):
            e = listing.stat(url)
            return [Unit(url, (url,), e.size, 0, e.etag)]
        listing.stat(url)   # raises the store's own words (not found (HTTP 404), access denied...)
        return [Unit(url, (), 0, 0, error=f"{url}: no such file or folder")]
    except CheckpointError as e:
        return [Unit(url, (), 0, 0, error=f"{e.path}: {short_text(Exception(e.reason))}")]
    except MissingDependencyError:   # not this URL's fault: every URL needs it; the one line, before any work
        raise
    except CkptstatError as e:
        return [Unit(url, (), 0, 0, error=short_text(e))]


def _entry(target: str, skipped: Skipped) -> list[Unit]:
    if is_url(target):
        return _remote_entry(target, skipped)
    if os.path.isdir(target):
        return _walk(target, skipped)
    if os.path.isfile(target):
        return [_unit(target, [target])]
    if os.path.isfile(target + ".index"):   # a TF checkpoint prefix
        return [_unit(target + ".index", [target + ".index"])]
    if os.path.lexists(target):   # a FIFO, a device, a socket, a symlink loop: the record says what, not "no such file"
        try:
            regular(target)
        except CheckpointError as e:
            return [Unit(target, (), 0, 0, error=str(e))]
    return [Unit(target, (), 0, 0)]   # the record says it is missing: a list's stale line never ends the run


def discover(target: str) -> tuple[list[Unit], Skipped]:
    """The units under `target` (a folder, a file, a URL, or `@list.txt`: one path or URL per line, `#` comments),
    each once, in walk order; and the files looked at and skipped (`Skipped.refused`: those it would not read)."""
    skipped = Skipped()
    if target.startswith("@"):
        listing = target[1:]
        try:
            with open(listing, encoding="utf-8") as f:
                lines = [ln.strip() for ln in f.read(_INDEX_CAP).splitlines()]
        except OSError as e:
            raise UsageError(f"{listing}: cannot read the list of checkpoints ({e.strerror})") from None
        entries = [ln for ln in lines if ln and not ln.startswith("#")]
    else:
        if not is_url(target) and not os.path.isfile(target + ".index") and (missing := absent(target)) is not None:
            raise missing   # the root itself (a typo): one line, no results file written; a list's stale line is a record
        entries = [target]
    # `zoo/` and `zoo` key the same records (a URL keeps its slash: an http folder URL may need it)
    entries = [named_url(e) if is_url(e) else os.path.normpath(e) for e in entries]   # (urls.named: no password kept)
    units: list[Unit] = []
    seen: set[str] = set()
    for entry in entries:
        for u in _entry(entry, skipped):
            if u.path not in seen:
                seen.add(u.path)
                units.append(u)
    return units, skipped

