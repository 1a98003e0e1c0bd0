"""Which files ckptstat reads, and how it writes its outputs (docs/security.md).

Reading. By default ckptstat reads only the files the user named and, for a folder, an index or a
TF prefix, files inside that folder. A reference a file makes to anything else (an HDF5 external
link or external raw storage, a TF `checkpoint` pointer to another folder, a symlink that resolves
outside the folder) is refused with one line naming it, unless the user passed --allow-external
(`open_checkpoint(..., allow_external=True)`). `open_checkpoint` sets the `Scope` for the duration
of the open; readers ask `check_inside` and `external_allowed`.

A FIFO, a device or a folder where a file is expected is refused from its stat, before it is
opened; `open_regular` opens with O_NONBLOCK and checks again on the open descriptor, so that a
file swapped for a FIFO in between cannot block the process either.

Writing. An output that is, or resolves to, an input (the same inode: a symlink or a hard link) is refused;
outputs are written to a temporary file in the target folder and renamed over the target, so a
pre-existing symlink at the target is replaced, never written through, a hard link's other names keep
their bytes, and a failed write leaves nothing behind. audit's appended records go the same way
(`fresh_output`: the old records copied into the new file, read without following a link).
"""
from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import IO

from ..errors import CheckpointError, ExternalReferenceError, FileNotFound, UsageError
from . import urls
from .switches import switches

_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def kind(mode: int) -> str:
    for test, name in _KINDS:
        if test(mode):
            return name
    return "a regular file" if stat.S_ISREG(mode) else "not a regular file"


def regular(path: str, what: str = "") -> os.stat_result:
    """stat(path), following links; a CheckpointError for anything but a regular file (never opened).
    A URL: its size, from the remote source (st_size is the only field set)."""
    if urls.is_url(path):
        return os.stat_result((stat.S_IFREG, 0, 0, 1, 0, 0, urls.backend().size(path, what), 0, 0, 0))
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise FileNotFound(path, f"{what + ': ' if what else ''}no such file") from None
    except OSError as e:
        raise CheckpointError(path, f"{what + ': ' if what else ''}{e.strerror or 'cannot stat'}") from None
    if not stat.S_ISREG(st.st_mode):
        raise CheckpointError(path, f"{what + ' ' if what else ''}is {kind(st.st_mode)}, not a regular file")
    return st


def open_regular(path: str, what: str = "", buffering: int = -1) -> IO[bytes]:
    """Open a regular file for reading: checked from its stat first, opened with O_NONBLOCK (a FIFO
    swapped in meanwhile does not block the open) and checked again on the descriptor. A URL opens
    through the remote source: a seekable file of range requests (docs/remote.md)."""
    if urls.is_url(path):
        return urls.backend().open(path, what)
    regular(path, what)
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise CheckpointError(path, f"{what + ' ' if what else ''}is {kind(st.st_mode)}, not a regular file")
        return os.fdopen(fd, "rb", buffering)   # O_NONBLOCK has no effect on a regular file's reads
    except BaseException:
        os.close(fd)
        raise


def absent(path: str) -> CheckpointError | None:
    """Why the local `path` is not there to open, in one line: missing, a link to a missing file, a loop of links, a
    folder on the way the user may not enter ("no such file" said of each, before); None where it is there."""
    try:
        os.stat(path)
    except FileNotFoundError:
        return FileNotFound(path, "is a symlink to a missing file" if os.path.islink(path) else "no such file or folder")
    except OSError as e:
        return CheckpointError(path, e.strerror or "cannot stat")
    return None


def file_size(path: str) -> int:
    """The size of a local file or a URL (os.path.getsize for a path)."""
    return urls.backend().size(path) if urls.is_url(path) else os.path.getsize(path)


def size_of(f: IO[bytes]) -> int:
    """The size of a file open_regular returned (a remote file knows its size; a local one is fstat'ed)."""
    size = getattr(f, "size", None)
    return size if isinstance(size, int) else os.fstat(f.fileno()).st_size


def exists(path: str) -> bool:
    return urls.backend().kind(path) is not None if urls.is_url(path) else os.path.exists(path)


def isfile(path: str) -> bool:
    return urls.backend().kind(path) == "file" if urls.is_url(path) else os.path.isfile(path)


def isdir(path: str) -> bool:
    return urls.backend().kind(path) == "directory" if urls.is_url(path) else os.path.isdir(path)


def listdir(path: str) -> list[str]:
    return urls.backend().listdir(path) if urls.is_url(path) else os.listdir(path)


def join(folder: str, name: str) -> str:
    return urls.join(folder, name) if urls.is_url(folder) else os.path.join(folder, name)


def dirname(path: str) -> str:
    return urls.parent(path) if urls.is_url(path) else os.path.dirname(path)


# ---------------------------------------------------------------------------------------------
# containment

@dataclass(frozen=True)
class Scope:
    """What may be read while one checkpoint is opened: the files the user named and the folders
    around them (real paths), unless allow_external."""

    named: tuple[str, ...]
    roots: tuple[str, ...]
    allow_external: bool = False

    def inside(self, path: str) -> bool:
        if urls.is_url(path):   # a URL's scope is its own prefix: the folder (or repository) it names
            return path in self.named or any(urls.under(path, r) for r in self.roots if urls.is_url(r))
        real = os.path.realpath(path)
        return real in self.named or any(within(real, r) for r in self.roots)


def within(real: str, root: str) -> bool:
    """Whether the resolved path `real` is the resolved folder `root` or lies under it (both real paths: every
    component resolved, so a link anywhere on the way counts where it leads, never where it sits)."""
    return real == root or real.startswith(root.rstrip(os.sep) + os.sep)


_scope: ContextVar[Scope | None] = ContextVar("ckptstat_scope", default=None)


HF_CACHE_REPOS = ("models--", "datasets--", "spaces--")   # huggingface_hub's cache: <type>s--<org>--<name>


def hf_cache_blobs(folder: str) -> str | None:
    """The `blobs/` folder of the Hugging Face cache repository whose snapshot holds `folder`
    (`models--org--name/snapshots/<rev>/[sub/...]`, huggingface_hub file_download.py): the snapshot's files are
    relative links into it, so it belongs to the snapshot. Decided on the resolved path, and only a `blobs` that
    is itself a folder, not a link: a `blobs -> /` would otherwise make every file on the machine "inside"."""
    real = os.path.realpath(folder)
    while True:
        up = os.path.dirname(real)
        if up == real:
            return None
        if os.path.basename(up) == "snapshots":
            repo = os.path.dirname(up)
            blobs = os.path.join(repo, "blobs")
            ok = os.path.basename(repo).startswith(HF_CACHE_REPOS) and os.path.isdir(blobs) and not os.path.islink(blobs)
            return blobs if ok else None
        real = up


HF_REF_BYTES = 256   # a refs/<branch> file holds one commit hash (40 hex digits)


def hf_cache_snapshot(repo: str) -> str | None:
    """The snapshot folder a Hugging Face cache repository (`models--org--name/`, holding `snapshots/`) stands for:
    the revision `refs/main` names, as huggingface_hub resolves the default revision (file_download.py), or its one
    snapshot where there is no `refs/main`. None for any other folder, and for one with neither; a UsageError, naming
    the revisions, where several snapshots leave the choice open; a CheckpointError where `refs/main` is a link or
    names a snapshot that is not there."""
    snapshots = os.path.join(repo, "snapshots")
    if not os.path.basename(os.path.normpath(repo)).startswith(HF_CACHE_REPOS) or not os.path.isdir(snapshots):
        return None
    # huggingface_hub writes the snapshots as folders and the refs as files: a link, which could lead anywhere, is
    # neither followed nor read
    revisions = sorted(r for r in os.listdir(snapshots)
                       if os.path.isdir(p := os.path.join(snapshots, r)) and not os.path.islink(p))
    ref = os.path.join(repo, "refs", "main")
    if os.path.lexists(ref):
        if os.path.islink(ref):
            raise CheckpointError(ref, "a symbolic link where huggingface_hub writes a file; not followed: pass a "
                                       "snapshot folder")
        with open_regular(ref, "Hugging Face cache ref") as f:
            rev = f.read(HF_REF_BYTES + 1).decode("utf-8", "replace").strip()
        if rev not in revisions:   # (also a name with a separator, or past the bound: never a path of its own)
            raise CheckpointError(repo, f"refs/main names revision {rev[:64]!r}, which snapshots/ does not hold "
                                        f"({', '.join(revisions[:4]) or 'no snapshot'}); pass a snapshot folder")
        return os.path.join(snapshots, rev)
    if len(revisions) <= 1:
        return os.path.join(snapshots, revisions[0]) if revisions else None
    raise UsageError(f"{repo}: a Hugging Face cache repository with {len(revisions)} snapshots and no refs/main "
                     f"({', '.join(revisions[:4])}{', ...' if len(revisions) > 4 else ''}): pass one, "
                     f"e.g. {os.path.join(snapshots, revisions[0])}")


def hf_cache_hint(folder: str) -> str:
    """For a folder of a Hugging Face cache repository that holds no weights, the snapshots to pass instead: its
    `snapshots/` itself, or a snapshot downloaded in part (refs/main moved on to a revision of which only a
    config.json was fetched, the weights being in an older snapshot). "" for any other folder."""
    real = os.path.realpath(folder)
    snapshots = real if os.path.basename(real) == "snapshots" else os.path.dirname(real)
    if os.path.basename(snapshots) != "snapshots" or not os.path.basename(os.path.dirname(snapshots)).startswith(HF_CACHE_REPOS):
        return ""
    others = sorted(r for r in os.listdir(snapshots) if os.path.isdir(p := os.path.join(snapshots, r)) and p != real)
    if not others:
        return ""
    return (f"; the cache repository's {'' if snapshots == real else 'other '}snapshots: {', '.join(others[:4])}"
            f"{', ...' if len(others) > 4 else ''} (pass one that holds the weights)")


def as_snapshot(path: str) -> str:
    """`path`, or the snapshot folder it stands for when it is a Hugging Face cache repository (hf_cache_snapshot)."""
    return (hf_cache_snapshot(path) if not urls.is_url(path) and os.path.isdir(path) else None) or path


def followed(link: str, real_root: str) -> bool:
    """Whether a folder walk (scan, audit) under the resolved `real_root` follows the symlink `link` to a file:
    it resolves inside the root, or inside the Hugging Face cache blobs of the snapshot it sits in."""
    real = os.path.realpath(link)
    if within(real, real_root):
        return True
    blobs = hf_cache_blobs(os.path.dirname(os.path.abspath(link)))
    return blobs is not None and within(real, blobs)


def walk(top: str, unlisted: Callable[[str, str], None]) -> Iterator[tuple[str, list[str], list[str]]]:
    """os.walk(top) top-down, links to folders listed among the folders and never entered, the folders a caller
    removes from the list not entered either; but iterative, and telling `unlisted(folder, why)` (the OS's words) of
    each folder it cannot list. os.walk passes over such a folder in silence (unreadable; a path past PATH_MAX), so a
    scan would say clean without looking, and CPython 3.11's os.walk recurses: a tree 1,000 folders deep raised
    RecursionError."""
    stack = [top]
    while stack:
        folder = stack.pop()
        try:
            with os.scandir(folder) as it:
                entries = list(it)
        except OSError as e:
            unlisted(folder, e.strerror or type(e).__name__)
            continue
        dirs: list[str] = []
        files: list[str] = []
        for entry in entries:
            try:
                is_dir = entry.is_dir()
            except OSError:
                is_dir = False
            (dirs if is_dir else files).append(entry.name)
        yield folder, dirs, files
        stack.extend(p for p in (os.path.join(folder, d) for d in reversed(dirs)) if not os.path.islink(p))


def scope_for(path: str, allow_external: bool, extra: Iterable[str] = ()) -> Scope:
    """The scope of what the user named: a file (its folder holds its companions: TF data shards,
    config.json), a folder, an index or a TF prefix; `extra` are other files named (--config). A URL's
    scope is its folder (or itself, a folder URL or an hf:// repository)."""
    if urls.is_url(path):
        root = path if urls.backend().kind(path) == "directory" else urls.parent(path)
        return Scope((path, *(e if urls.is_url(e) else os.path.realpath(e) for e in extra)), (root,), allow_external)
    path = os.path.abspath(path)
    folder = path if os.path.isdir(path) else os.path.dirname(path)
    roots = [os.path.realpath(folder)]
    blobs = hf_cache_blobs(folder)
    if blobs:
        roots.append(blobs)
    named = [os.path.realpath(p) for p in (path, *extra)]
    return Scope(tuple(named), tuple(roots), allow_external)


@contextmanager
def scoped(scope: Scope) -> Iterator[Scope]:
    token = _scope.set(scope)
    try:
        yield scope
    finally:
        _scope.reset(token)


def current_scope() -> Scope | None:
    return _scope.get()


def external_allowed() -> bool:
    """Whether references outside the checkpoint may be followed (default: no)."""
    s = _scope.get()
    return s.allow_external if s is not None else switches().allow_external


def refuse_external(path: str, reference: str) -> ExternalReferenceError:
    """The one-line refusal: `reference` says what points where (escaped names, no raw bytes)."""
    return ExternalReferenceError(path, f"{reference}, outside the checkpoint; not followed "
                                        "(pass --allow-external to read it)")


def check_inside(path: str, what: str, referrer: str | None = None) -> None:
    """Refuse `path` (a file about to be read) when it resolves outside the current scope."""
    s = _scope.get()
    if s is None or s.allow_external or s.inside(path):
        return
    if urls.is_url(path) or any(urls.is_url(r) for r in s.roots):
        raise refuse_external(referrer or path, f"{what} {urls.redact(path)!r} is outside {urls.redact(s.roots[0])!r}")
    real = os.path.realpath(path)
    how = "is a symlink to" if os.path.islink(path) or real != os.path.abspath(path) else "is"
    raise refuse_external(referrer or path, f"{what} {os.path.basename(path)!r} {how} {real!r}")


# ---------------------------------------------------------------------------------------------
# outputs

def check_output(output: str | os.PathLike[str], inputs: Iterable[str | os.PathLike[str] | None]) -> str:
    """The absolute output path, refused (UsageError, one line) when its folder is missing, when it is
    a folder, or when it is, or resolves to, one of `inputs`."""
    out = os.path.abspath(os.fspath(output))
    parent = os.path.dirname(out)
    if not os.path.isdir(parent):
        raise UsageError(f"{os.fspath(output)}: output folder {parent} does not exist")
    if os.path.isdir(out):
        raise UsageError(f"{os.fspath(output)}: is a folder; name the file to write")
    if os.path.lexists(out):
        real = os.path.realpath(out)
        for i in inputs:
            if i is None:
                continue
            src = os.fspath(i)
            same = os.path.realpath(src) == real or out == os.path.abspath(src)
            if not same and os.path.exists(out) and os.path.exists(src):
                try:
                    same = os.path.samefile(out, src)   # a hard link, or a link to an input
                except OSError:
                    same = False
            if same:
                raise UsageError(f"{os.fspath(output)}: is an input ({src}); refusing to overwrite it")
    return out


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextmanager
def atomic_output(output: str | os.PathLike[str]) -> Iterator[str]:
    """A temporary path in the output's folder to write to; renamed over `output` when the block ends
    without an exception (replacing a symlink there, never writing through it), removed otherwise."""
    out = os.path.abspath(os.fspath(output))
    parent = os.path.dirname(out)
    try:
        fd, tmp = tempfile.mkstemp(dir=parent, prefix=f".{os.path.basename(out)}.", suffix=".tmp")
    except FileNotFoundError:
        raise UsageError(f"{os.fspath(output)}: output folder {parent} does not exist") from None
    except OSError as e:
        raise UsageError(f"{os.fspath(output)}: cannot write in {parent}: {e.strerror}") from None
    os.close(fd)
    try:
        yield tmp
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, out)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def read_own(path: str) -> IO[bytes] | None:
    """An existing output opened to read back (audit's resumable records), or None when there is none to read:
    missing, a symlink (never followed: a planted link holds no records of ours) or not a regular file."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError:   # missing; ELOOP: a symlink
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    return os.fdopen(fd, "rb")


def fresh_output(output: str, keep: bool) -> IO[bytes]:
    """A new file put in place of `output` at once and returned open for appending: written in the output's
    folder and renamed over it, so a symlink there is replaced, never written through, and a hard link's other
    names (an input) keep their bytes. `keep`: what `output` held (read_own: not through a link) is copied in
    first, so appending resumes it; the rename is atomic, so the records are never half there."""
    out = os.path.abspath(output)
    parent = os.path.dirname(out)
    try:
        fd, tmp = tempfile.mkstemp(dir=parent, prefix=f".{os.path.basename(out)}.", suffix=".tmp")
    except OSError as e:
        raise UsageError(f"{output}: cannot write in {parent}: {e.strerror}") from None
    f = os.fdopen(fd, "w+b")
    try:
        old = read_own(out) if keep else None
        if old is not None:
            with old:
                shutil.copyfileobj(old, f)
        f.flush()
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, out)
    except BaseException:
        f.close()
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return f
