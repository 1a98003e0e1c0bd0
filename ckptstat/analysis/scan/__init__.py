"""`ckptstat scan PATH`: one file's scan report (scan/torch_load.py), or, for a folder, every
pickle-bearing file under it, one entry each, and the totals (docs/torch.md, "ckptstat scan").

A file under a local folder is judged by what the loaders would do with its bytes, never by its name alone
or by Python's zipfile: one whose name ends in a pickle-bearing extension is always listed; any other is
listed when torch.load (or np.load, or Keras) would read a pickle or config from it (`scan_local` answers
rather than refuses); a folder URL's files the same way, each traced remotely (a file torch.load cannot read
costs the few bytes its trace reads). Symlinks are followed
only to files inside the folder, or, in a Hugging Face cache snapshot, into its repository's `blobs/`
(core/files.py `followed`); each file is scanned once; links to folders are not followed; FIFOs, devices
and sockets are skipped without being opened, and so is a folder the walk cannot list (core/files.py `walk`).
Anything skipped makes the exit code 1.
"""
from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable
from typing import Any

from ...core.files import absent, followed, open_regular, walk
from ...core.limits import limits
from ...core.urls import is_url
from ...errors import CheckpointError, CkptstatError, CorruptCheckpointError
from ...formats.registry import is_index
from .archive import also_archive, foreign_members, judge_archive, worse
from .loaders import judged_by_own_loader, own_loader, scan_other, training_args_note
from .names import EXTENSIONS, pickle_named
from .torch_load import Trace, finish, trace
from .torch_load import scan as scan_file
from .verdict import combine

TREE_SCHEMA = "ckptstat.scan_tree/1"
STATUSES = ("unsafe", "unknown", "unreadable", "safe")


def exit_code(report: dict[str, Any]) -> int:
    """0 clean, 1 unsafe (or unknown: scan cannot tell), 2 unreadable; for a folder, the worst file's, and 1 when
    anything was skipped (a link not followed, a FIFO: scan did not look at it, so it cannot say clean)."""
    if report["schema"] == TREE_SCHEMA:
        totals = report["totals"]
        return 1 if totals["unsafe"] or totals["unknown"] or totals["skipped"] else 2 if totals["unreadable"] else 0
    return 0 if report["status"] == "safe" else 1


def pickle_bearing(path: str) -> bool:
    """Whether a regular file is worth scanning: its extension; else whether a loader would read a pickle (or
    Keras config) from its bytes (scan_local / scan_url answer rather than refuse). A URL the store cannot
    serve counts: its scan then says why, never that it is clean."""
    if pickle_named(path):
        return True
    if not is_url(path):
        try:
            scan_local(path)
            return True
        except CkptstatError:
            return False
    try:
        return scan_url_if_pickle(path) is not None
    except CkptstatError:
        return True


def scan_url_if_pickle(url: str) -> dict[str, Any] | None:
    """A remote file's scan report, judged as a local file is: None when torch.load cannot read a pickle from it (its
    trace raises at the first bytes, a Flax msgpack file, an archive of nothing a loader reads) and its name does not
    say pickle; every other error raised (the store could not serve it: never taken for `no pickle`)."""
    try:
        r = scan_url(url)
    except CorruptCheckpointError:
        if pickle_named(url):
            raise
        return None
    return None if nothing_inside(r) else r


def _entry(rel: str, r: dict[str, Any] | None, error: str | None = None) -> dict[str, Any]:
    if r is None:
        return {"path": rel, "status": "unreadable", "error": error, "format": None, "torch_load": None,
                "unsafe_globals": [], "plain_data_globals": [], "unreached_unsafe_globals": [], "findings": [],
                "unknown": [], "verdict": error}
    keys = ("format", "torch_load", "unsafe_globals", "plain_data_globals", "unreached_unsafe_globals", "findings",
            "unknown", "verdict", "weights_only_loadable")
    return {"path": rel, "status": r["status"], "error": None, **{k: r[k] for k in keys}}


def _candidates(root: str, skipped: list[dict[str, str]]) -> list[list[tuple[str, str]]]:
    """The (relative path, path) names to judge each regular file under `root` by, once per real file, in walk
    order; what is not followed goes to `skipped`. A file reached by several names is judged first under the first
    whose extension says pickle (a Hugging Face cache's `snapshots/<rev>/pytorch_model.bin` rather than its
    `blobs/<sha>`), else its first name not ending in `.safetensors`, else its first: torch.load is given a name,
    and hands `*.safetensors` to safetensors by it, so a pickle behind `model.safetensors` is still torch.load's
    through a link `model_best.pth.tar` to it. Then under each other file name it has that is no content hash:
    loaders are chosen by name (a cache's `snapshots/<rev>/saved_model.pb` or `config.json` behind `blobs/<sha>`
    was judged as the blob alone, and its ops or remote code went unread)."""
    real_root = os.path.realpath(root)
    names: dict[str, list[tuple[str, str]]] = {}
    def unlisted(folder: str, why: str) -> None:
        skipped.append({"path": os.path.relpath(folder, root), "why": f"a folder: cannot list it ({why})"})
    for folder, dirs, files in walk(root, unlisted):
        dirs.sort()
        for d in dirs:
            p = os.path.join(folder, d)
            if os.path.islink(p):
                skipped.append({"path": os.path.relpath(p, root), "why": "a link to a folder: not followed"})
        for name in sorted(files):
            p = os.path.join(folder, name)
            rel = os.path.relpath(p, root)
            if os.path.islink(p) and not followed(p, real_root):
                skipped.append({"path": rel, "why": "a link to outside the folder: not followed"})
                continue
            real = os.path.realpath(p)
            try:
                st = os.stat(real)
            except OSError as e:
                skipped.append({"path": rel, "why": f"cannot stat it ({e.strerror})"})
                continue
            if not stat.S_ISREG(st.st_mode):
                skipped.append({"path": rel, "why": "not a regular file"})
                continue
            names.setdefault(real, []).append((rel, p))
    out = []
    for found in names.values():
        first = next((n for n in found if n[0].lower().endswith(EXTENSIONS)),
                     next((n for n in found if not n[0].endswith(".safetensors")), found[0]))
        more, seen = [], {os.path.basename(first[0])}
        for n in found:
            base = os.path.basename(n[0])
            if base not in seen and not _CONTENT_HASH.fullmatch(base):
                seen.add(base)
                more.append(n)
        out.append([first, *more])
    return sorted(out, key=lambda n: _walk_order(n[0][0].replace(os.sep, "/")))


_CONTENT_HASH = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")   # a cache's blob name (git's sha1, an LFS sha256)
_WORST_FIRST = {"unsafe": 0, "unknown": 1, "unreadable": 2, "safe": 3}


def _judged_by_names(names: list[tuple[str, str]]) -> tuple[str, tuple[str, Any] | None]:
    """(the name shown, its judgement) of a file reached by several names: the worst of its judgements under each
    (a report's status, then unreadable, then skipped), on a tie the first name that is no content hash."""
    judged = [(rel, found) for rel, p in names if (found := _judged(rel, p)) is not None]
    if not judged:
        return names[0][0], None

    def rank(item: tuple[str, tuple[str, Any]]) -> tuple[int, bool]:
        kind, value = item[1]
        worst = _WORST_FIRST[value["status"]] if kind == "report" else 2 if kind == "unreadable" else 4
        return worst, bool(_CONTENT_HASH.fullmatch(os.path.basename(item[0])))
    return min(judged, key=rank)


def nothing_inside(r: dict[str, Any]) -> bool:
    """An archive's report that found nothing a loader reads inside it (images, text): no file to list in a folder's
    scan, as a file no loader reads is none (analysis/scan/archive.py)."""
    return r.get("members") == [] and r["status"] == "safe"


def _pickle_shaped(path: str) -> bool:
    """A file that opens as a pickle of protocol 2 or later (PROTO and its number), whatever its name: listed in a folder's
    scan even when no loader can read it (a loader other than the ones scan follows may read on)."""
    try:
        with open_regular(path) as f:
            head = f.read(2)
    except (OSError, CkptstatError):
        return False
    return len(head) == 2 and head[0] == 0x80 and 2 <= head[1] <= 5


def _judged(rel: str, path: str) -> tuple[str, Any] | None:
    """A folder's file judged: ("report", its report); ("unreadable", why) for a file whose name says pickle that no
    loader can read; ("skipped", why) when it cannot be read at all; None when no loader reads a pickle (or config)
    from it, nor from any member of an archive it is (analysis/scan/archive.py judges those members with this)."""
    try:
        r = scan_local(path)
    except CkptstatError as e:
        why = e.reason if isinstance(e, CheckpointError) else str(e)
        if pickle_named(rel) or _pickle_shaped(path):   # a pickle's name or opening: listed even when no loader can read it
            return "unreadable", why
        if not isinstance(e, CorruptCheckpointError):   # not "no loader reads a pickle from it": not looked at
            return "skipped", f"cannot read it ({why})"
        return None
    return None if nothing_inside(r) else ("report", r)


def scan_tree(root: str, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Every pickle-bearing file under the folder `root` (see the module doc), scanned."""
    files: list[dict[str, Any]] = []
    skipped: list[dict[str, str]] = []
    for names in _candidates(root, skipped):
        if progress:
            progress(names[0][0])
        rel, found = _judged_by_names(names)
        if found is not None and found[0] == "skipped":
            skipped.append({"path": rel, "why": found[1]})
        elif found is not None:
            files.append(_entry(rel, found[1]) if found[0] == "report" else _entry(rel, None, found[1]))
    return _tree_report(root, files, skipped)


def scan_url(url: str) -> dict[str, Any]:
    """A remote file's `ckptstat.scan/1` report, fetched with range requests, judged by the same loaders and rules as
    a local file (analysis/scan/remote.py)."""
    from ... import sources  # noqa: F401 - installs the remote source the core reads URLs through
    from .remote import scan_url as scan_remote

    return scan_remote(url, None if pickle_named(url) else _judged)


def _walk_order(rel: str) -> list[tuple[int, str]]:
    """os.walk's order (a folder's files by name, then its folders by name, each walked in turn) as a key."""
    parts = rel.split("/")
    return [(1, p) for p in parts[:-1]] + [(0, parts[-1])]


def scan_tree_url(root: str, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Every pickle-bearing file under a folder URL (an https folder the server lists, hf://org/model[@rev], an
    s3:// prefix: sources/listing.py `walk`), scanned remotely, as scan_tree scans a local folder."""
    from ... import sources  # noqa: F401
    from ...sources.listing import walk as list_remote

    prefix = root.split("?", 1)[0].rstrip("/") + "/"
    files: list[dict[str, Any]] = []
    skipped: list[dict[str, str]] = []
    entries = [(e.url[len(prefix):] if e.url.startswith(prefix) else e.url, e) for e in list_remote(root)]
    for rel, e in sorted(entries, key=lambda x: _walk_order(x[0])):
        if e.error:
            skipped.append({"path": rel, "why": e.error})
            continue
        if progress:
            progress(rel)
        try:   # judged by its bytes, as a local file is: a name alone lists it, any file torch.load reads a pickle from too
            r = scan_url_if_pickle(e.url)
            if r is not None:
                files.append(_entry(rel, r))
        except CkptstatError as err:
            files.append(_entry(rel, None, err.reason if isinstance(err, CheckpointError) else str(err)))
    return _tree_report(root, files, skipped)


def scan_path(path: str | os.PathLike[str], progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """A file's `ckptstat.scan/1` report, or a folder's `ckptstat.scan_tree/1` report; a URL is scanned with
    range requests (docs/torch.md, "Remote files")."""
    path = os.fspath(path)
    if is_url(path):
        from ... import sources  # noqa: F401
        from ...core.files import isdir

        if isdir(path):
            return scan_tree_url(path, progress)
        return scan_index(path, progress) if is_index(path) else scan_url(path)
    if os.path.isdir(path):
        return scan_tree(path, progress)
    if (why := absent(path)) is not None:   # (missing, a link to nothing, a loop, a folder the user may not enter)
        raise why
    return scan_index(path, progress) if is_index(path) and os.path.isfile(path) else scan_local(path)


def scan_index(path: str, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """A sharded checkpoint's index (`pytorch_model.bin.index.json`...): the shards it names, each judged as a file of
    its folder is (a local shard through a link only to inside the folder or its cache's blobs, as a folder's scan
    follows it); a shard missing or not followed is skipped (scan cannot say it is clean). The report is a folder's,
    its root the index."""
    from ...formats.configs import read_json
    from ...formats.registry import index_shards

    index = read_json(path, limits().index_bytes, "index")
    folder = path.rsplit("/", 1)[0] if is_url(path) else os.path.dirname(path)
    real_root = os.path.realpath(folder or ".") if not is_url(path) else ""
    files: list[dict[str, Any]] = []
    skipped: list[dict[str, str]] = []
    for shard in index_shards(path, index):
        if progress:
            progress(shard)
        where = f"{folder}/{shard}" if is_url(path) else os.path.join(folder, shard)
        if is_url(path):   # as a folder URL's file (scan_tree_url)
            try:
                r = scan_url_if_pickle(where)
            except CkptstatError as err:
                files.append(_entry(shard, None, err.reason if isinstance(err, CheckpointError) else str(err)))
                continue
            if r is not None:
                files.append(_entry(shard, r))
        elif not os.path.lexists(where):
            skipped.append({"path": shard, "why": "named in the index: no such file"})
        elif os.path.islink(where) and not followed(where, real_root):
            skipped.append({"path": shard, "why": "a link to outside the folder: not followed"})
        elif not os.path.isfile(where):
            skipped.append({"path": shard, "why": "not a regular file"})
        else:
            found = _judged(shard, where)
            if found is not None and found[0] == "skipped":
                skipped.append({"path": shard, "why": found[1]})
            elif found is not None:
                files.append(_entry(shard, found[1]) if found[0] == "report" else _entry(shard, None, found[1]))
    return _tree_report(path, files, skipped)


def _tree_report(root: str, files: list[dict[str, Any]], skipped: list[dict[str, str]]) -> dict[str, Any]:
    totals = {s: sum(1 for f in files if f["status"] == s) for s in STATUSES}
    return {"schema": TREE_SCHEMA, "path": root, "files": files, "skipped": skipped,
            "totals": {"files": len(files), **totals, "skipped": len(skipped)}}


def scan_local(path: str) -> dict[str, Any]:
    """What the loaders that read these bytes would run: torch.load's path always (analysis/scan/torch_load.py, through
    the zip directory miniz reads), and numpy's or Keras' (analysis/scan/loaders.py) where they read the file too;
    the worse verdict wins (analysis/scan/verdict.py, as for a URL). A file whose name is no loader's, which torch.load
    does not read, is also judged as an archive users extract when it is one (analysis/scan/archive.py): alone when
    no loader reads it, else the worse of the two."""
    try:
        r = _scan_local(path)
    except CorruptCheckpointError:   # no loader reads a pickle from it whole: an archive users extract?
        archive = _archive(path)
        if archive is None:
            raise
        return archive
    return worse(training_args_note(path, r), _archive(path, only_foreign=not also_archive(r)))


def _archive(path: str, only_foreign: bool = False) -> dict[str, Any] | None:
    """The archive report of a local file whose name is no loader's (whose loader's error or report stands);
    `only_foreign`: only where it is a zip torch reads that holds other members than torch's records."""
    if pickle_named(path) or not os.path.isfile(path) or only_foreign and not foreign_members(path):
        return None
    with open_regular(path) as f:
        return judge_archive(path, f, os.fstat(f.fileno()).st_size, _judged)


def _scan_local(path: str) -> dict[str, Any]:
    if not os.path.isfile(path):
        return scan_file(path)   # its own one-line errors (missing, a folder, not a regular file)
    # a torch.distributed.checkpoint .metadata (DCP's pickle.load), a DeepSpeed optimizer state, a Trainer's or
    # accelerate's RNG state: their loaders (loaders.py), as for a URL (remote.py)
    t: Trace | None = None
    if own_loader(path) is not None:
        t = trace(path)
        by_own = judged_by_own_loader(t)   # None (t untouched) for a file its loader would not read: torch.load's
        if by_own is not None:
            return by_own
    torch_report: dict[str, Any] | None = None
    torch_error: CheckpointError | None = None
    try:
        if t is None:
            t = trace(path)
    except CheckpointError as e:
        torch_error = e
    other, other_error = None, None
    try:
        other = scan_other(path, t)   # (before torch.load's report: loaders.py `judge_other`)
    except CheckpointError as e:   # (never the verdict while torch.load's path reaches something: verdict.py)
        other_error = e
    if t is not None:
        try:
            torch_report = finish(t)
        except CheckpointError as e:
            torch_error = e

    def head(n: int) -> bytes:
        with open_regular(path) as f:
            return f.read(n)
    return combine(path, torch_report, torch_error, other, head, other_error)
