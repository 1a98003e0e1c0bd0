"""Every file under a remote folder, with its size and version, for `ckptstat audit URL` (docs/audit.md,
"Remote roots"; docs/remote.md).

The version (`etag`) keys an audit record for resuming, as a local file's mtime does. It is what the
store's own listing or reply says, never a hash ckptstat computes (that would mean reading the file):
- http(s)://: the folder's HTML listing (fsspec `HTTPFileSystem.ls`: its links), then each file's first
  window fetched as the format probe needs it anyway (sources/remote.py `Blob`): the reply's
  `Content-Range` gives the size and its `ETag` (else `Last-Modified`) the version. A link without a
  trailing `/` that answers with an HTML page is a folder (as `Backend.kind` decides), and also a file when the
  page is not plain text (`Blob.plain_page`: a tar or a zip behind the label), the folder URL itself included;
- hf://: huggingface_hub `HfFileSystem.find` (the repository tree, `list_repo_tree(recursive=True)`):
  the LFS sha256 of a large file, else the git blob oid;
- s3:// and the other fsspec stores: `fs.find(path, detail=True)` (S3: ListObjectsV2), the `ETag`.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from ..core.urls import redact, scheme, under
from ..errors import CheckpointError, FileNotFound
from .meter import METER, SETTINGS
from .remote import _HTTP, BACKEND
from .stores import errors as _errors

MAX_DEPTH = 32          # folders below the root an http(s) walk follows
_S3_PAGE = 1000         # keys per ListObjectsV2 page: one request each


@dataclass(frozen=True)
class Entry:
    url: str
    size: int
    etag: str | None   # the store's version of the file; None when it gives none
    error: str | None = None   # listed, but its first window could not be read: that one line


def version(info: dict[str, Any]) -> str | None:
    """A file's version from an fsspec listing's info: the Hub's LFS sha256, else its git blob oid
    (huggingface_hub hf_file_system.py `_ls_tree`); an object store's ETag (s3fs `_info`, `_find`); else
    the modification time it lists."""
    lfs = info.get("lfs")
    if isinstance(lfs, dict) and lfs.get("sha256"):
        return f"sha256:{lfs['sha256']}"
    for key in ("blob_id", "ETag", "etag", "md5"):
        if info.get(key):
            return str(info[key])
    for key in ("LastModified", "last_modified", "mtime"):
        if info.get(key):
            return f"last-modified: {info[key]}"
    return None


def _rel(name: str, root: str) -> str:
    return name[len(root):].lstrip("/") if name.startswith(root) else name


def stat(url: str) -> Entry:
    """One remote file's size and version (FileNotFound when it is not there)."""
    s = scheme(url)
    if s in _HTTP:
        b = BACKEND.blob(url)
        return Entry(url, b.ensure_size(), b.etag)
    if s == "hf":
        from .hub import _call, _filesystem

        info = _call(url, _filesystem().info, url)
    else:
        t = BACKEND.target(url)
        METER.request(url)
        with _errors(url):
            info = t.fs.info(t.path)
    return Entry(url, int(info.get("size") or 0), version(info))


def walk(url: str) -> list[Entry]:
    """Every file under the folder URL, recursively, sorted by URL."""
    root = url.split("?", 1)[0].rstrip("/")
    s = scheme(url)
    if s in _HTTP:
        out: list[Entry] = []
        if not url.split("?", 1)[0].endswith("/") and _is_listing(root) and (page := _http_file(root)) is not None:
            out.append(page)   # a folder URL answered by a page that is not plain: a file too
        _http_walk(root + "/", 0, out)
        return sorted(out, key=lambda e: e.url)
    if s == "hf":
        from .hub import _call, _filesystem

        fs = _filesystem()
        base = _call(url, fs.info, url)["name"].rstrip("/")
        found = _call(url, fs.find, url, detail=True)
    else:
        t = BACKEND.target(url)
        base = t.path.rstrip("/")
        METER.request(url)
        with _errors(url):
            found = t.fs.find(base, detail=True)
        for _ in range(len(found) // _S3_PAGE):   # the further pages of the listing
            METER.request(url)
    # (a path the listing names outside the folder, `../x` or with a control character, is passed over, as an http(s)
    # listing's link outside it is: the Hub's tree never holds one, a mirror's or a store's may)
    entries = [Entry(u, int(info.get("size") or 0), version(info)) for name, info in found.items()
               if info.get("type", "file") == "file" and under(u := f"{root}/{_rel(name, base)}", root)]
    return sorted(entries, key=lambda e: e.url)


def _http_file(url: str) -> Entry | None:
    """A linked file's Entry; None for a folder (a plain page of links: a page that is not plain is a file too) or a
    dangling link. A file that cannot be read (a server ignoring Range, a 403) is an Entry with its error: a record,
    not the end of the walk."""
    try:
        b = BACKEND.blob(url)
        size = b.ensure_size()
    except FileNotFound:
        return None
    except CheckpointError as e:
        return Entry(url, 0, None, f"{e.path}: {e.reason}")
    if b.listing_page() and b.plain_page():
        return None
    return Entry(url, size, b.etag)


def _http_walk(folder: str, depth: int, out: list[Entry]) -> None:
    if depth > MAX_DEPTH:
        raise CheckpointError(redact(folder), f"folders nested more than {MAX_DEPTH} deep")
    files: list[str] = []
    dirs: list[str] = []
    for u in sorted(set(BACKEND.http().ls(folder))):
        name = u[len(folder):] if u.startswith(folder) else ""
        bare = name.rstrip("/")
        if not bare or "/" in bare or not under(folder + bare, folder):
            continue   # the parent, sort links (`?C=N`), anything outside the folder (`..%2Fx`, `%2E%2E`: core/urls.py)
        (dirs if name.endswith("/") else files).append(folder + bare)
    with ThreadPoolExecutor(max_workers=max(1, min(SETTINGS.concurrency, len(files)))) as pool:
        found = list(pool.map(_http_file, files))
    for u, e in zip(files, found):
        if e is not None:
            out.append(e)
        if _is_listing(u):
            dirs.append(u)
    for d in sorted(dirs):
        _http_walk(d + "/", depth + 1, out)


def _is_listing(url: str) -> bool:
    b = BACKEND.blobs.get(url)
    return b is not None and b.size is not None and b.listing_page()
