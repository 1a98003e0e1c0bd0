"""`ckptstat scan` of an archive users extract before they load what is inside: a tar, plain or compressed (gzip,
bzip2, xz, zstd with the zstd extra: SageMaker's `model.tar.gz`, release tarballs, `.tgz` downloads), a zip no loader
reads as a whole (a zipped model folder, a TorchServe `.mar`; torch.load, np.load, Keras, torch.hub and the others are
asked first: analysis/scan/loaders.py), or one compressed file (`model.pt.gz`, a member named as gunzip names it).
No loader opens such a file, so the loaders' rules alone called it unreadable, and a folder scan passed it by; but a
payload inside reaches the user one `tar xf` later. 7-Zip and RAR, which no library here opens, are unknown.

So its members are extracted, as `tar` / `unzip` would, into a private temporary folder (removed after; the input
is never written), and judged as `ckptstat scan FOLDER` judges a folder's files: each by what its loaders would do
with its bytes (analysis/scan/__init__.py, the `judge` it hands in), an archive inside by these rules again, at most
MAX_NESTING deep. The archive's report is the members': their findings and pickles named `member: record`, the worst
verdict, and a `members` list. A tar member that extraction would write outside the folder (an absolute name, `..`)
or through a link is a finding of its own (Python's `tarfile.extractall` without a filter, the default before Python
3.14, writes it: CVE-2007-4559); no symbolic link is made in the temporary folder: a link inside the archive is judged
as what it points to under its own name (a hard link between the folder's own files), and a link out of the archive
is unknown (what reads it reads outside). Code a model server imports from the archive (SageMaker's
`code/inference.py`, a TorchServe `.mar`'s handler: analysis/scan/serving.py) makes the verdict unknown too.

Only members a loader may read a pickle, config or code from are written (`worth_judging`: by their name, or by
first bytes that could start a pickle which imports before it fails, an archive, a numpy, GGUF, HDF5 or compressed
file); `*.safetensors`, images and text are not (a folder of WebDataset tar shards is not copied out), unless a link
of such a name points to one: counted in a note. Bounded: MAX_MEMBERS listed, MAX_EXTRACTED written, at most
`spill_bytes` and `inflate_ratio` x the archive + `expansion_floor` written in all, a compressed stream inflated at
most that much, a zip member at most that ratio of its compressed bytes; past any bound the verdict is unknown, naming
it.
"""
from __future__ import annotations

import lzma
import os
import pickletools
import posixpath
import re
import secrets
import shutil
import stat
import struct
import tarfile
import tempfile
import threading
import zipfile
import zlib
from collections.abc import Callable
from functools import partial
from typing import IO, Any, NamedTuple

from ...core.archive_magic import ZIP_STARTS, archive_kind, codec, unopened
from ...core.io import Window, pread
from ...core.limits import limits
from ...core.tar import MAX_TAR_MEMBERS, TarHeaderBound, bounded_tarinfo
from ...core.urls import basename, is_url
from ...errors import CkptstatError
from ...formats.dcp.extensions import available as zstd_available
from ...formats.gguf import MAGIC as GGUF
from ...formats.nemo import CONFIG as NEMO_CONFIG
from ...formats.numpy_npy import MAGIC as NPY
from .compressed import kind as compressed_kind
from .loaders import HDF5_SIGNATURE, gzip_unnamed
from .names import pickle_named, read_as_text
from .nemo import Extractor, Inflating, extraction, judge_nemo
from .serving import MAR_MANIFEST, SERVING_FILES, serving_code
from .torch_load import Trace, report
from .verdict import RANK, raises

LOADER = "extracting it (tar / unzip) and loading what it holds"
# The records torch.save and torch.jit.save write under an archive's folder (serialization.py; TorchScript's source and
# debug records under `code/`, its `constants.pkl`, `extra/`), the storages' `data/N`
TORCH_RECORD = re.compile(r"data\.pkl|byteorder|version|\.format_version|\.storage_alignment|\.data/version|"
                          r"\.data/serialization_id|data/\d+|constants\.pkl|attributes\.pkl|extra/[^/]+|"
                          r"code/(?:[^/]+/)*[^/]+\.(?:py|debug_pkl)")
MAX_NESTING = 2                 # an archive inside an archive inside an archive: unknown
MAX_MEMBERS = MAX_TAR_MEMBERS   # members listed
MAX_EXTRACTED = 10_000          # members written and judged
SHOWN = 3                       # members' verdicts quoted in the archive's
_CHUNK = 1 << 20
# what zipfile raises on a damaged archive or member (a bad CRC, a corrupt deflate, bzip2 or lzma stream, a bad header)
ZIP_ERRORS = (zipfile.BadZipFile, OSError, ValueError, EOFError, NotImplementedError, RuntimeError, zlib.error,
              lzma.LZMAError, struct.error, UnicodeDecodeError)
TAR_EXTRACTION = Extractor(
    outside="Python's tarfile.extractall without a filter (its default before Python 3.14) writes it there, outside "
            "the folder it extracts to, where the archive's author chose (GNU tar strips or refuses such names)",
    through="tar and tarfile.extractall without a filter make links, and a member after one is written where it "
            "points, outside the folder it extracts to",
    links_out="tar and tarfile.extractall make them, and whatever then reads them reads files outside the folder, "
              "which scan cannot see")

# (rel, path) -> ("report", report) | ("unreadable", why) | None (no loader reads a pickle or config from it)
Judge = Callable[[str, str], tuple[str, Any] | None]
_nesting = threading.local()   # archives being judged, one inside another, in this thread (audit judges URLs in threads)


def also_archive(r: dict[str, Any]) -> bool:
    """Whether a file its loaders judged (`r`) may also be an archive users extract: torch.load does not read it (it
    raises, or the file is another loader's: a zipped folder holding a Keras config and weights, and a pickle beside)."""
    return not r["torch_load"] or raises(r) or r["torch_load"].startswith("not torch.load's")


def worse(r: dict[str, Any], archive: dict[str, Any] | None) -> dict[str, Any]:
    """The loaders' report `r` or the archive's, whichever is worse (the loaders' on a tie), the other noted."""
    if archive is None or RANK[archive["status"]] >= RANK[r["status"]]:
        return r
    archive["notes"].append(f"{r['format']} to its own loader too: {r['verdict']}")
    return archive


def judge_archive(path: str, f: IO[bytes], size: int, judge: Judge) -> dict[str, Any] | None:
    """The scan report of the archive `f` (`size` bytes), its members judged by `judge` once extracted; None when it
    is no tar (plain, gzip, bz2, xz) or zip that Python's tarfile / zipfile opens."""
    head = pread(f, 512, 0)
    if archive_kind(head) is None:
        return None
    t = Trace(path, reads="no loader opens an archive: users extract it (tar, unzip) and load its files, judged here "
                          "as the files of a folder")
    # The folder is named here and made inside the `try`: a SIGTERM (cli.py: SystemExit) that lands right after it is
    # made still removes it (made by tempfile.mkdtemp before the `try`, one was left once under load).
    tmp = os.path.join(tempfile.gettempdir(), f"ckptstat-scan-{secrets.token_hex(8)}")
    depth = _nesting.depth = getattr(_nesting, "depth", 0) + 1
    try:
        os.mkdir(tmp, 0o700)
        if depth == 1:   # what this archive and every one inside it may write in all (an archive of compressed
            bound = limits()   # members, each inflating to the floor, would otherwise write that floor once a member)
            _nesting.left = min(bound.spill_bytes, bound.inflate_ratio * size + bound.expansion_floor)
        if depth > MAX_NESTING:
            t.format = "an archive"
            t.unknown.append(f"an archive nested {depth} deep, which scan does not open")
            return report(t, loader=LOADER)
        other = unopened(head)
        if other is not None or codec(head) == "zstd" and not zstd_available():
            t.format = other or "zstd-compressed data"
            t.unknown.append(f"{other}, which scan does not open (extract it, and scan the folder)" if other else
                             "zstd-compressed: decompressing it needs the zstd extra (pip install 'ckptstat[zstd]')")
            return report(t, loader=LOADER)
        written = _zip(t, f, size, tmp) if head[:4] in ZIP_STARTS else _tar(t, path, f, size, head, tmp)
        if written is None:
            return None
        r = _report(t, written, tmp, judge)
        if written.nemo and gzip_unnamed(path, head):   # a gzip'd NeMo archive (< 1.7) of another name: NeMo's rules too
            nemo = judge_nemo(path, f, size)
            return r if nemo is None else worse(nemo, r)
        return r
    finally:
        _nesting.depth -= 1
        shutil.rmtree(tmp, ignore_errors=True)


class _Deferred(NamedTuple):
    """A member kept aside, unwritten: how to write it, its size, its first bytes."""
    write: Callable[[str], None]
    size: int
    head: bytes


class _Out:
    """The members written so far into the temporary folder, within the bounds."""

    def __init__(self, t: Trace, tmp: str, size: int):
        self.t, self.tmp = t, tmp
        # what may be written in all: spill_bytes, and no more than the archive may inflate to (a zip whose entries
        # all point at one deflated member, each inflating to 64 MiB, would otherwise write spill_bytes of copies)
        bound = limits()
        self.cap = min(bound.spill_bytes, bound.inflate_ratio * size + bound.expansion_floor, _nesting.left)
        self.files: list[tuple[str, str, str]] = []   # (the member's name as shown, the file written, its folder)
        self.written: dict[str, str] = {}              # member path -> the file written
        self.deferred: dict[str, _Deferred] = {}       # a member not worth judging (yet) -> how to write it
        self.links: list[tuple[str, str]] = []         # (link member, the member it points to)
        self.bytes = 0
        self.full = False
        self.nemo = False   # a member is NeMo's model_config.yaml
        self.climbing = False   # (a zip's: see member)
        self.next_free: dict[str, int] = {}   # a name -> the first of the numbered folders that may not hold it yet

    def target(self, name: str, size: int) -> str | None:
        """Where member `name` of `size` bytes goes, or None when it is not written (said in the trace)."""
        norm = _norm(name)
        if norm is None or self.full:
            return None
        if len(self.files) >= MAX_EXTRACTED or size > min(self.cap - self.bytes, _nesting.left) or _nesting.left <= 0:
            self.full = True
            why = (f"more than {MAX_EXTRACTED:,} members to extract" if len(self.files) >= MAX_EXTRACTED else
                   f"{name[:120]!r}: {size:,} bytes, past the {self.cap:,} scan writes out of this archive "
                   "(spill_bytes, and inflate_ratio x its size + expansion_floor: --limit NAME=N)")
            self.t.unknown.append(f"{why}: scan judged the members before it and no more")
            return None
        if "\0" in norm:
            return None
        k = self.next_free.get(norm, 0)   # a member whose name an earlier one holds goes to a folder of its own: each
        while _taken(os.path.join(self.tmp, str(k)), norm):   # is judged (tar and unzip keep the last, `tar
            k += 1                                            # --keep-old-files` the first); looked for from the last
        self.next_free[norm] = k + 1                          # one's (10,000 of one name were quadratic)
        root = os.path.join(self.tmp, str(k))
        dest = os.path.join(root, *norm.split("/"))
        try:
            os.makedirs(os.path.dirname(dest), exist_ok=True)
        except (OSError, ValueError) as e:
            self.t.notes.append(f"{name[:120]!r}: cannot be written here to be judged ({e})")
            return None
        self.files.append((norm if k == 0 else f"{norm} (#{k + 1} of that name)", dest, root + os.sep))
        self.written[norm] = dest
        self.bytes += size
        _nesting.left -= size
        return dest

    def member(self, name: str, size: int, head: bytes, write: Callable[[str], None]) -> None:
        """A regular member whose first bytes are `head`: written now when a loader may read a pickle, config or code
        from it (`worth_judging`); else kept aside, written only when a link of a name worth judging points to it
        (`resolve_links`). A zip member whose name climbs out of the folder is judged under the name Python's
        zipfile and unzip write it as: its `..` parts dropped (tar's: `extraction` says where each tool writes it)."""
        if self.climbing and _norm(name) is None and (inside := _unclimbed(name)):
            self.t.notes.append(f"{name[:120]!r}: a name that climbs out of the folder, which unzip and zipfile's "
                                f"extractall write as {inside[:120]!r}: judged so")
            name = inside
        norm = _norm(name)
        if norm is None:
            return
        if not worth_judging(norm, head):
            self.deferred[norm] = _Deferred(write, size, head)
            return
        dest = self.target(name, size)
        if dest is not None:
            self.write(name, dest, write)

    def write(self, name: str, dest: str, write: Callable[[str], None]) -> None:
        try:
            write(dest)
        except (OSError, ValueError) as e:   # (a name this system cannot hold: too long, a NUL)
            self.t.notes.append(f"{name[:120]!r}: cannot be written here to be judged ({e})")

    def link(self, name: str, resolved: str) -> None:
        self.links.append((name, resolved))

    def resolve_links(self) -> None:
        """Each link inside the archive as a copy of what it points to (extraction makes the link; a loader given its
        name reads those bytes), so a pickle stored as `a.safetensors` behind a link `a.pth` is judged as `a.pth`."""
        for name, resolved in self.links:
            src, kept = self.written.get(resolved), self.deferred.get(resolved)
            if not (src or kept and worth_judging(_norm(name) or "", kept.head)):
                continue
            dest = self.target(name, 0 if src or not kept else kept.size)
            if dest is None:
                continue
            if src:   # (a link, as extraction makes one: no bytes copied, however many links point there)
                self.write(name, dest, partial(self._link, name, src))
            elif kept:
                self.write(name, dest, kept.write)
                self.written[resolved] = dest

    def _link(self, name: str, src: str, dest: str) -> None:
        """`dest` as a hard link to `src`; a copy, counted in the bound, on a file system without hard links."""
        try:
            os.link(src, dest)
        except OSError:
            size = os.path.getsize(src)
            if size > self.cap - self.bytes:
                self.t.unknown.append(f"{name[:120]!r}: {size:,} bytes to copy (no hard links here), past the "
                                      f"{self.cap:,} scan writes out of this archive")
                self.files = [f for f in self.files if f[1] != dest]
                return
            self.bytes += size
            shutil.copyfile(src, dest)


HEAD = 4096   # a member's first bytes looked at (HDF5's signature may sit at 512, 1024 or 2048, after a user block)
# First bytes of a pickle that pickle.load (torch.load's legacy path) may run past without raising, so a global may
# follow: every opcode that takes nothing from the stack (PROTO, GLOBAL, MARK, the values it pushes...), as pickletools
# describes them, and INST, which imports before it looks for its mark.
_PICKLE_STARTS = frozenset(op.code.encode("latin-1")[0] for op in pickletools.opcodes if not op.stack_before) | {ord("i")}
_PNG = b"\x89PNG\r\n\x1a\n"   # NEWFALSE then PERSID, which pickle.load refuses with no persistent_load: no import


def worth_judging(norm: str, head: bytes) -> bool:
    """Whether member `norm` (its path, normalised) with first bytes `head` is extracted to be judged: its name is a
    pickle's, Keras', a config's or code's; or its bytes could start what a loader reads (an archive, a numpy, GGUF,
    HDF5 or compressed file, or a pickle that runs a global before it could raise). Images, text and safetensors are
    not: no loader reads a pickle from them, and a dataset's tar shards stay unwritten. A name is safetensors' as
    torch.load tells it, by its exact ending (it unpickles `model.SAFETENSORS`), as a folder scan does."""
    if pickle_named(norm) or read_as_text(norm) or norm in SERVING_FILES:
        return True
    if norm.endswith(".safetensors") or not head or head.startswith(_PNG):
        return False
    return archive_kind(head) is not None or compressed_kind(head) is not None or head.startswith((NPY, GGUF)) or \
        head[0] in _PICKLE_STARTS or any(head[at:at + 8] == HDF5_SIGNATURE for at in (0, 512, 1024, 2048))


def _norm(name: str) -> str | None:
    """A member's path as extraction writes it inside the folder (None: outside it, or the folder itself)."""
    norm = posixpath.normpath(name.replace("\\", "/")).lstrip("/")
    return None if norm in ("", ".", "..") or norm.startswith("../") else norm


def _unclimbed(name: str) -> str:
    """A zip member's name as Python's zipfile writes it (`_extract_member`) and unzip does: without its empty, `.` and
    `..` parts."""
    return "/".join(p for p in name.replace("\\", "/").split("/") if p not in ("", ".", ".."))


def _taken(root: str, norm: str) -> bool:
    """Whether writing `norm` under `root` meets an earlier member: that name, or a file where it needs a folder."""
    parts = norm.split("/")
    return os.path.lexists(os.path.join(root, *parts)) or \
        any(os.path.isfile(os.path.join(root, *parts[:i])) for i in range(1, len(parts)))


def _at(f: IO[bytes], offset: int) -> IO[bytes]:
    f.seek(offset)
    return f


def _copy(src: IO[bytes], dest: str, size: int) -> None:
    with open(dest, "xb") as out:
        left = size
        while left > 0:
            data = src.read(min(_CHUNK, left))
            if not data:
                break
            out.write(data)
            left -= len(data)


def _tar(t: Trace, path: str, f: IO[bytes], size: int, head: bytes, tmp: str) -> _Out | None:
    compressed = codec(head)
    view: IO[bytes] = Window(f, 0, size) if compressed is None else Inflating(f, size, compressed)  # type: ignore[assignment]
    try:
        tar = tarfile.open(fileobj=view, mode="r:", tarinfo=bounded_tarinfo())
    except (tarfile.TarError, TarHeaderBound, CkptstatError):
        return None if compressed is None else _stream(t, path, view, size, compressed, tmp)
    t.format = "tar archive" + (f" ({compressed}-compressed)" if compressed else "")
    out = _Out(t, tmp, size)
    members: list[tarfile.TarInfo] = []
    try:
        while (m := tar.next()) is not None:
            if len(members) >= MAX_MEMBERS:
                t.unknown.append(f"a tar of more than {MAX_MEMBERS:,} members: scan lists at most that many")
                break
            members.append(m)
            out.nemo = out.nemo or posixpath.normpath(m.name).lower() == NEMO_CONFIG
            if m.isreg() and m.sparse is None:
                def write(dest: str, at: int = m.offset_data, n: int = m.size) -> None:
                    _copy(_at(view, at), dest, n)
                out.member(m.name, m.size, _at(view, m.offset_data).read(min(HEAD, m.size)), write)
            elif m.isreg():
                t.unknown.append(f"{m.name[:120]!r}: a sparse tar member, which scan does not follow")
            elif m.issym() or m.islnk():
                target = posixpath.join(posixpath.dirname(m.name), m.linkname) if m.issym() else m.linkname
                if (resolved := _norm(target)) is not None and not m.linkname.startswith("/"):
                    out.link(m.name, resolved)
        out.resolve_links()
    except (TarHeaderBound, CkptstatError) as e:
        t.unknown.append(f"listing the tar: {e}")
    except tarfile.TarError as e:
        t.notes.append(f"tarfile raises after {len(members):,} member(s) ({e}): extraction stops there")
    if isinstance(view, Inflating) and view.error:
        t.notes.append(f"the {compressed} stream is damaged ({view.error}): extraction stops where it reads that far")
    extraction(t, members, "the archive", TAR_EXTRACTION)
    return out


SUFFIXES = {"gzip": (".gz", ".gzip"), "bz2": (".bz2",), "xz": (".xz",), "zstd": (".zst", ".zstd")}


def _stream(t: Trace, path: str, view: IO[bytes], size: int, compressed: str, tmp: str) -> _Out:
    """A compressed file that is no tar (`model.pt.gz`): one member, as gunzip, bunzip2, unxz or unzstd writes it,
    named as the file less its suffix."""
    t.format = f"{compressed}-compressed file"
    out = _Out(t, tmp, size)
    name = basename(path) if is_url(path) else os.path.basename(path)
    for suffix in SUFFIXES[compressed]:
        if name.lower().endswith(suffix) and len(name) > len(suffix):
            name = name[:-len(suffix)]
            break
    cap = out.cap

    def write(dest: str) -> None:
        _copy(_at(view, 0), dest, cap + 1)
        _nesting.left -= min(os.path.getsize(dest), cap)
        if os.path.getsize(dest) > cap:   # (judged no further)
            os.unlink(dest)
            out.files = [f for f in out.files if f[1] != dest]
            t.unknown.append(f"{name[:120]!r}: more than the {cap:,} bytes scan writes out of this archive "
                             "(spill_bytes, and inflate_ratio x its size + expansion_floor: --limit NAME=N)")
    try:
        out.member(name, 0, _at(view, 0).read(HEAD), write)
    except CkptstatError as e:   # (past inflate_ratio)
        t.unknown.append(f"{name[:120]!r}: {e}")
    if isinstance(view, Inflating) and view.error:
        t.notes.append(f"the {compressed} stream is damaged ({view.error}): decompressing stops there")
    return out


def _zip(t: Trace, f: IO[bytes], size: int, tmp: str) -> _Out | None:
    try:
        f.seek(0)
        zf = zipfile.ZipFile(f)
        infos = zf.infolist()
    except ZIP_ERRORS:
        return None
    if _torch_shaped([i.filename for i in infos]):
        return None
    t.format = "zip archive"
    out = _Out(t, tmp, size)
    out.climbing = True
    bound = limits()
    for i in infos[:MAX_MEMBERS]:
        if i.is_dir():
            continue
        name = i.filename[:120]
        if stat.S_ISLNK(i.external_attr >> 16):   # unzip makes a link (Python's zipfile writes its target as text)
            target = zf.read(i)[:4096].decode("utf-8", "replace") if i.file_size <= 4096 else ""
            resolved = _norm(posixpath.join(posixpath.dirname(i.filename), target))
            if resolved is None or target.startswith("/"):
                t.unknown.append(f"{name!r}: a link out of the archive (unzip makes it): what reads it reads files "
                                 "outside the folder, which scan cannot see")
            else:
                out.link(i.filename, resolved)
            continue
        if i.flag_bits & 0x1:
            t.unknown.append(f"{name!r}: encrypted, which scan cannot read")
            continue
        if i.file_size > bound.inflate_ratio * i.compress_size + bound.expansion_floor:
            t.unknown.append(f"{name!r}: inflates to {i.file_size:,} bytes from {i.compress_size:,}, past "
                             f"{bound.inflate_ratio}x (--limit inflate_ratio=N)")
            continue
        def write(dest: str, info: zipfile.ZipInfo = i) -> None:
            try:
                with zf.open(info) as src:
                    _copy(src, dest, info.file_size)
            except ZIP_ERRORS as e:
                t.notes.append(f"{info.filename[:120]!r}: zipfile raises reading it ({e}): extraction fails there")
        try:
            with zf.open(i) as src:
                head = src.read(min(HEAD, i.file_size))
        except ZIP_ERRORS:
            head = b"\x80"   # (written, to be judged: zipfile's error then says what extraction meets)
        out.member(i.filename, i.file_size, head, write)
    out.resolve_links()
    if len(infos) > MAX_MEMBERS:
        t.unknown.append(f"a zip of more than {MAX_MEMBERS:,} members: scan lists at most that many")
    return out


def foreign_members(path: str) -> bool:
    """A zip torch's reader reads (`_torch_layout`) that holds members besides torch's own records: users extracting it
    get those (`archive/data/evil.pt`), which torch.load never reads; judged as an archive's too."""
    try:
        with zipfile.ZipFile(path) as zf:
            names = zf.namelist()
    except ZIP_ERRORS:
        return False
    return _torch_layout(names) and not _torch_shaped(names)


def _torch_layout(names: list[str]) -> bool:
    """Every name under one folder that holds data.pkl: what torch's reader opens."""
    top = {n.split("/", 1)[0] for n in names}
    return len(top) == 1 and f"{next(iter(top))}/data.pkl" in names


def _torch_shaped(names: list[str]) -> bool:
    """A zip torch.save wrote (`_torch_layout`, and nothing there but torch's own records: a torch archive, or one item
    of a DCP `.distcp` file): torch's reader judges it, nobody extracts it. A member of another name beside them
    (`archive/model.pt`) is one a user extracting the zip gets: judged as an archive's too."""
    return _torch_layout(names) and all(
        "/" in n and ".." not in n.split("/") and TORCH_RECORD.fullmatch(n.split("/", 1)[1]) for n in names)


def _report(t: Trace, out: _Out, tmp: str, judge: Judge) -> dict[str, Any]:
    unknown, notes = serving_code(set(out.written) | set(out.deferred), out.written.get(MAR_MANIFEST))
    t.unknown += unknown
    t.notes += notes
    if out.deferred:
        t.notes.append(f"{len(out.deferred):,} member(s) not extracted: no loader reads a pickle from them by their name "
                       "(*.safetensors) or their first bytes (images, text)")
    members: list[dict[str, Any]] = []
    reports: list[tuple[str, dict[str, Any]]] = []
    for rel, dest, root in out.files:
        found = judge(rel, dest)
        if found is None:
            continue
        kind, value = found
        if kind == "report":
            r = _unspill(value, root)
            reports.append((rel, r))
            members.append({"path": rel, "status": r["status"], "format": r["format"], "verdict": r["verdict"]})
        else:
            t.notes.append(f"{rel}: {value}")
            members.append({"path": rel, "status": "unreadable", "format": None, "verdict": value})
    r = report(t, loader=LOADER)
    writes = [fd["global"] for fd in r["findings"] if fd["opcode"] == "tar member"]
    for rel, m in reports:
        _merge(r, rel, m)
    status = min([r["status"]] + [m["status"] for _, m in reports], key=RANK.__getitem__)
    bad = [f"{rel}: {m['verdict'].split(': ', 1)[-1]}" for rel, m in reports if m["status"] == status != "safe"]
    if status == "unsafe":
        parts = ([f"extraction {', '.join(writes[:SHOWN])}{' ...' if len(writes) > SHOWN else ''} ({TAR_EXTRACTION.outside})"]
                 if writes else []) + bad[:SHOWN] + ([f"{len(bad) - SHOWN:,} more member(s)"] if len(bad) > SHOWN else [])
        r["verdict"] = "UNSAFE: " + "; ".join(parts)
    elif status == "unknown":
        r["verdict"] = "UNKNOWN: " + (f"scan cannot tell what {LOADER} would run: {t.unknown[0]}" if t.unknown else bad[0])
    else:
        r["verdict"] = (f"safe: {len(reports):,} of its {len(out.files):,} extracted member(s) hold a pickle or config "
                        "a loader reads, each judged safe as a folder's file" if reports else
                        f"safe: none of its {len(out.files) + len(out.deferred):,} member(s) holds a pickle or config a "
                        "loader reads")
    r["status"], r["would_run_code"], r["members"] = status, status != "safe", members
    return r


def _merge(r: dict[str, Any], rel: str, m: dict[str, Any]) -> None:
    """Member `rel`'s report `m` into the archive's `r`: its pickles and findings named `rel: record`."""
    def named(x: dict[str, Any]) -> dict[str, Any]:
        return {**x, "record": f"{rel}: {x['record']}", **({"file_offset": None} if "file_offset" in x else {})}
    r["pickles"] += [{**named(p), "findings": [named(fd) for fd in p["findings"]]} for p in m["pickles"]]
    r["findings"] += [named(fd) for fd in m["findings"]]
    known = {g["name"]: g for g in r["globals"]}
    for g in m["globals"]:
        if g["name"] in known:
            known[g["name"]] = {**known[g["name"]], "count": known[g["name"]]["count"] + g["count"],
                                "allowed": known[g["name"]]["allowed"] and g["allowed"]}
        else:
            known[g["name"]] = dict(g)
    r["globals"] = [known[n] for n in sorted(known)]
    r["unsafe_globals"] = sorted(set(r["unsafe_globals"]) | set(m["unsafe_globals"]))
    r["plain_data_globals"] = sorted(set(r["plain_data_globals"]) | set(m["plain_data_globals"]))
    r["unreached_unsafe_globals"] = sorted((set(r["unreached_unsafe_globals"]) | set(m["unreached_unsafe_globals"]))
                                           - set(r["unsafe_globals"]))
    r["unknown"] += [f"{rel}: {u}" for u in m["unknown"]]
    r["notes"] += [f"{rel}: {n}" for n in m.get("notes", [])]


def _unspill(x: Any, prefix: str) -> Any:
    """`x` with the temporary folder's path taken out of its strings (a member is named by its path in the archive)."""
    if isinstance(x, str):
        return x.replace(prefix, "")
    if isinstance(x, list):
        return [_unspill(v, prefix) for v in x]
    if isinstance(x, dict):
        return {k: _unspill(v, prefix) for k, v in x.items()}
    return x
