"""Remote files as seekable, cached byte-range readers (docs/remote.md).

One `Blob` per URL holds the file's size and a small cache of the ranges fetched. A read the cache
cannot answer fetches at least a window from where it starts; the window doubles while reads keep
missing forward (a GGUF's metadata, a long safetensors header: growing ranges) and resets to 64 KiB
on a jump. The cache is bounded (CACHE_BYTES a file and TOTAL_CACHE_BYTES over all files, a file's least
recently used range evicted first; past the total, new ranges are not kept); a read
bigger than half of it (values, 16 MiB chunks) goes straight to the caller. So a header-only
command fetches a file's first window (and its last, for a zip's central directory), not the file.

Where the bytes come from is one of three `Target`s, all fsspec filesystems:
- http(s)://: range GETs on fsspec's HTTPFileSystem session (sources/http.py);
- hf://org/model[@revision]/file: listed and resolved by huggingface_hub's HfFileSystem, read by
  range GETs on its resolve URL (redirected to the CDN) with the hub's token header;
- anything else fsspec knows (s3://, gs://, az://, ...): the store's file (`fs.open`, uncached) for the size and
  each range (one ranged GetObject on S3, If-Match the ETag found when it was opened).
"""
from __future__ import annotations

import contextvars
import mmap
import threading
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from typing import IO, Any, NamedTuple

from ..core.io import SeekableReader
from ..core.urls import basename, redact, scheme
from ..errors import CheckpointError, FileNotFound, MissingDependencyError, missing_extra
from . import stores
from .http import HttpTransport, Reply
from .meter import METER, SETTINGS
from .pages import PAGE_BYTES
from .stores import errors as _errors
from .target import Target

FIRST_WINDOW = 1 << 16     # covers the 8-byte length and most safetensors headers of a shard
MAX_WINDOW = 1 << 22
CACHE_BYTES = 1 << 24
GAP = 1 << 16                 # prefetched ranges closer than this are fetched as one (a gap costs less than a request)
DIRECT = 1 << 20              # a readinto of at least this many bytes (values) is fetched straight into the caller's buffer
TOTAL_CACHE_BYTES = 1 << 26   # a 400-shard checkpoint's stats stay bounded too
_PAGE_HEAD = 1024             # bytes of a text/html reply looked at for the `<` a page starts with
_CONTROL = bytes(c for c in range(32) if c not in b"\t\n\r\f")   # bytes no HTML page holds (white space aside)
_HTTP = ("http", "https")
# Files a folder URL may list as weights; anything else answering text/html with a page (Blob.listing_page) is a
# listing page.
_WEIGHT_SUFFIXES = (".safetensors", ".json", ".bin", ".pt", ".pth", ".h5", ".gguf", ".onnx", ".keras", ".npz", ".npy",
                    ".index", ".pb", ".ckpt", ".jinja")   # (a chat template, judged by its name, may start with `<|`)


def _need(module: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise missing_extra("reading URLs", module.split(".")[0], "remote") from None


def _installed(*modules: str) -> None:
    """The `remote` extra's modules are there, not imported (aiohttp alone takes ~0.2-0.4 s: sources/http.py imports
    it only for what goes through it)."""
    import importlib.util

    for module in modules:
        try:
            found = importlib.util.find_spec(module) is not None
        except ImportError:   # (a finder that refuses the name outright)
            found = False
        if not found:
            raise missing_extra("reading URLs", module, "remote")


class Ahead(NamedTuple):
    """Bytes [start, end) of a file read ahead (Blob.read_ahead): `done` says how many came into `buf`."""
    start: int
    end: int
    done: Future[int]
    buf: mmap.mmap


class Blob:
    """One remote file: its size, a bounded cache of fetched ranges, and the value reads started ahead."""

    def __init__(self, backend: Backend, target: Target):
        self.backend, self.target = backend, target
        self.size: int | None = target.size   # (else the first reply's Content-Range says it)
        self.ctype = ""
        self.etag: str | None = None   # over http(s): the reply's ETag or Last-Modified (sources/http.py version)
        self.cache: OrderedDict[int, bytes] = OrderedDict()   # start -> bytes, least recently used first
        self.cached = 0
        self.window = FIRST_WINDOW
        self.next_miss = -1   # where the last miss ended: none yet (a first read fetches FIRST_WINDOW)
        self.spool: IO[bytes] | None = None
        self.store: Any = None   # other stores: the fsspec file its ranges are read through (`_request`)
        self.ahead: list[Ahead] = []
        self.lock = threading.Lock()

    def forked(self) -> Blob:
        """This file in a forked child: its lock new; a whole download's spool (a file position the parent
        shares) fetched anew; the parent's reads ahead (its threads' buffers) none of the child's."""
        self.lock, self.spool, self.ahead = threading.Lock(), None, []
        return self

    def _fetch(self, start: int, end: int) -> bytes:
        if self.target.http_url is not None:   # (the transport holds a slot of the host's for each request)
            return self._request(start, end)
        with self.backend.slot():   # at most SETTINGS.concurrency requests in flight, however the callers nest
            return self._request(start, end)

    def _http(self, start: int, end: int, into: memoryview | None = None) -> Reply:
        """One range GET of bytes [start, end) (with `into`: written there, HttpTransport.get), what its reply says
        of the file kept."""
        t = self.target
        assert t.http_url is not None
        reply: Reply = self.backend.http().get(t.http_url, start, end, t.headers, t.hint, t.hosts, into)
        if reply.total is not None and self.size is not None and reply.total != self.size:
            raise CheckpointError(redact(t.url), f"the file changed while it was read ({self.size:,} bytes, "
                                                 f"then {reply.total:,})")
        if reply.total is not None:
            self.size = reply.total
        # A new version between two ranges (RFC 9110 8.8: a strong ETag changes with the bytes): the ranges already
        # read are of another file, and a scan of both judged a file no loader ever gets (docs/security.md,
        # thirteenth pass). A server that keeps one ETag while it changes the bytes is not caught (known gaps).
        if reply.etag is not None and self.etag is not None and reply.etag != self.etag:
            raise CheckpointError(redact(t.url), f"the file changed while it was read (version {self.etag!r:.80}, "
                                                 f"then {reply.etag!r:.80})")
        # hf:// at a branch: each request asks the Hub for the branch's head, which a push moves; its redirect says the
        # commit (X-Repo-Commit). A repository's files must come from one (shards of one size were read from two).
        if reply.commit and t.repo:
            first = self.backend.commits.setdefault(t.repo, reply.commit)
            if first != reply.commit:
                raise CheckpointError(redact(t.url), f"the repository changed while it was read (commit "
                                                     f"{first[:12]!r}, then {reply.commit[:12]!r}): its files would "
                                                     "be of two versions; name a commit (@sha) to read one")
        self.ctype = reply.content_type or self.ctype
        self.etag = reply.etag or self.etag
        if reply.spooled is not None:   # the server sent it all (--allow-full-download): read it locally
            self.spool = reply.spooled
        return reply

    def _request(self, start: int, end: int) -> bytes:
        t = self.target
        if t.http_url is not None:
            reply = self._http(start, end)
            return _spool_read(reply.spooled, start, end) if reply.spooled is not None else reply.body
        METER.request(t.url)
        if self.store is None:   # (ensure_size's first fetch, under the lock)
            self.store = stores.opened(t)
            self.size = int(self.store.size)
            METER.request(t.url)
        end = min(end, int(self.store.size))
        data = stores.read_range(t, self.store, start, end)
        METER.received(t.url, len(data))
        return data

    def ensure_size(self) -> int:
        with self.lock:
            if self.size is None:
                data = self._fetch(0, FIRST_WINDOW)
                self.next_miss = len(data)
                self._remember(0, data)
            if self.size is None:
                raise CheckpointError(redact(self.target.url), "the server did not say the file's size")
            return self.size

    def _remember(self, start: int, data: bytes) -> None:
        if not data or len(data) > CACHE_BYTES // 2:
            return
        while self.cache and (self.cached + len(data) > CACHE_BYTES
                              or self.backend.cached + len(data) > TOTAL_CACHE_BYTES):
            _, old = self.cache.popitem(last=False)
            self.cached -= len(old)
            self.backend.account(-len(old))
        if self.backend.account(len(data)):
            self.cache[start] = data
            self.cached += len(data)

    def _cached(self, start: int, n: int) -> bytes:
        """The longest run of cached bytes from `start` (at most n): all of them, a head, or none."""
        best = b""
        for at, data in self.cache.items():
            if at <= start < at + len(data) and at + len(data) - start > len(best):
                best, key = data[start - at:start - at + n], at
        if best:
            self.cache.move_to_end(key)
        return best

    def listing_page(self) -> bool:
        """Whether this http(s) file is a folder's listing page: HTML by its Content-Type, under a name no weights file
        has, and by its bytes, which start with `<` after white space (a pickle, a zip, an `.npy` never does: a server
        labelling a pickle text/html, a link in its bytes, had a scan of its URL walk it as an empty folder, exit 0;
        docs/security.md, thirteenth pass)."""
        if self.ctype != "text/html" or basename(self.target.url).endswith(_WEIGHT_SUFFIXES):
            return False
        return self.pread(_PAGE_HEAD, 0).lstrip(b" \t\r\n\f\xef\xbb\xbf")[:1] == b"<"

    def plain_page(self) -> bool:
        """Whether a listing page (`listing_page`) is only that: text, no control byte but white space in all of it,
        and no tar header in its first 512 bytes. A page that is not plain is also a file for the loaders to judge
        (sources/listing.py): torch.load reads a tar whose first member's name starts with `<`, torch.hub and Keras
        a zip after an HTML page, h5py an HDF5 file after a user block that starts so, while a scan of its URL took
        it for an empty folder (docs/security.md, fourteenth pass). Its links are walked all the same (a page a
        file's name fills with control bytes hides no folder)."""
        import tarfile

        size = self.ensure_size()
        if size > PAGE_BYTES:
            return False
        page = self.pread(size, 0)
        if len(page.translate(None, _CONTROL)) != len(page):
            return False
        try:
            tarfile.TarInfo.frombuf(page[:tarfile.BLOCKSIZE], "utf-8", "surrogateescape")
        except tarfile.HeaderError:
            return True
        return False   # tarfile reads a member header from it: torch.load's legacy tar, a NeMo archive

    def _direct_head(self, offset: int, n: int) -> bytes | None:
        """Under the lock: the cached head of a read of n bytes at offset whose rest is fetched straight into the
        caller's buffer (over http(s), at least DIRECT bytes past the head), else None (a read through pread)."""
        if n < DIRECT or self.target.http_url is None or self.spool is not None:
            return None
        head = self._cached(offset, n)
        return head if n - len(head) >= DIRECT else None

    def _direct(self, start: int, end: int, mv: memoryview) -> int:
        """Bytes [start, end) fetched straight into mv (one range request): how many came."""
        reply = self._http(start, end, mv)
        if reply.filled >= 0:
            return reply.filled
        # the server sent the whole (small) file from byte 0, or it was spooled (--allow-full-download)
        data = _spool_read(reply.spooled, start, end) if reply.spooled is not None else reply.body[:end - start]
        mv[:len(data)] = data
        return len(data)

    def read_into(self, mv: memoryview, offset: int) -> int:
        """pread into the caller's buffer: a value read over http(s) whose bytes past the cached ones (the first
        tensor of a file starts in the header's window) are at least DIRECT is fetched straight into it, and not
        cached (one copy of the bytes, not three; the cache keeps headers), or taken from a read ahead that holds
        them (read_ahead: the same request, made earlier); anything else through pread."""
        size = self.ensure_size()
        n = max(0, min(len(mv), size - offset))
        with self.lock:
            head = self._direct_head(offset, n)
            ahead = None if head is None else next((a for a in self.ahead if a.start <= offset + len(head)
                                                    and offset + n <= a.end), None)
            if ahead is not None:
                self.ahead.remove(ahead)
        if head is None:
            data = self.pread(n, offset)
            mv[:len(data)] = data
            return len(data)
        k = len(head)
        mv[:k] = head
        if ahead is None:
            return k + self._direct(offset + k, offset + n, mv[k:n])
        try:   # (its error, if the request failed, is raised here, where the read would have raised it)
            came = ahead.done.result()
            got = max(0, min(ahead.start + came, offset + n) - (offset + k))
            at = offset + k - ahead.start
            with memoryview(ahead.buf) as held:
                mv[k:k + got] = held[at:at + got]
            return k + got
        finally:
            self.backend.let_go(ahead)

    def read_ahead(self, offset: int, n: int) -> int:
        """Start the request a read_into of n bytes at offset would make straight into its buffer (none for a read
        that would go through pread), on the backend's threads, into a buffer of its own, which that read_into then
        takes the bytes from: the bytes now held (0: nothing started)."""
        size = self.ensure_size()
        n = max(0, min(n, size - offset))
        with self.lock:
            head = self._direct_head(offset, n)
            if head is None or any(a.start <= offset + len(head) and offset + n <= a.end for a in self.ahead):
                return 0
            start, end = offset + len(head), offset + n
            buf = mmap.mmap(-1, end - start)   # (given back to the system when let go: not a malloc arena's)
            self.backend.hold(end - start)
            done = self.backend.ahead_pool().submit(contextvars.copy_context().run, self._direct, start, end,
                                                    memoryview(buf))
            self.ahead.append(Ahead(start, end, done, buf))
        return end - start

    def pread(self, n: int, offset: int) -> bytes:
        size = self.ensure_size()
        n = max(0, min(n, size - offset))
        if n == 0:
            return b""
        with self.lock:
            if self.spool is not None:
                return _spool_read(self.spool, offset, offset + n)
            head = self._cached(offset, n)   # a read that starts in a cached range fetches only the rest
            at, need = offset + len(head), n - len(head)
            if need == 0:
                return head
            end = at + need
            if need <= CACHE_BYTES // 2:   # (values go straight through)
                self.window = min(self.window * 2, MAX_WINDOW) if at == self.next_miss else FIRST_WINDOW
                end = self.next_miss = min(size, at + max(need, self.window))
        # Fetched without the lock: reads of one file from several threads (`stats` of a URL reads a few
        # tensors ahead, core/urls.py `concurrently`) overlap their round trips.
        data = self._fetch(at, end)
        with self.lock:
            self._remember(at, data)   # (values are not kept)
        return head + data[:need]

    def prefetch(self, ranges: list[tuple[int, int]]) -> None:
        """Fetch the (offset, size) ranges the cache lacks into it: ranges less than GAP apart coalesced into
        one request (at most MAX_WINDOW each), the requests made concurrently."""
        size = self.ensure_size()
        with self.lock:
            if self.spool is not None:
                return
            wanted = sorted((o, min(o + n, size)) for o, n in ranges if 0 <= o < size and n > 0
                            and len(self._cached(o, n)) < min(n, size - o))
        spans: list[list[int]] = []
        for lo, hi in wanted:
            if spans and lo - spans[-1][1] <= GAP and hi - spans[-1][0] <= MAX_WINDOW:
                spans[-1][1] = max(spans[-1][1], hi)
            else:
                spans.append([lo, hi])
        if not spans:
            return
        with ThreadPoolExecutor(max_workers=min(SETTINGS.concurrency, len(spans))) as pool:
            fetched = list(pool.map(lambda s: (s[0], self._fetch(s[0], s[1])), spans))
        with self.lock:
            for lo, data in fetched:
                self._remember(lo, data)


def _spool_read(f: IO[bytes], start: int, end: int) -> bytes:
    f.seek(start)
    return f.read(max(0, end - start))


class RemoteFile(SeekableReader):
    """A read-only, seekable file over a Blob: what open_regular returns for a URL."""

    def __init__(self, blob: Blob, name: str):
        super().__init__()
        self.blob, self.name, self.pos = blob, name, 0
        self.size = blob.ensure_size()

    def fileno(self) -> int:
        raise CheckpointError(redact(self.name), "this format is read from local files only; download the file first")

    def pread(self, n: int, offset: int) -> bytes:
        return self.blob.pread(n, offset)

    def prefetch(self, ranges: list[tuple[int, int]]) -> None:
        self.blob.prefetch(ranges)

    def read_ahead(self, offset: int, n: int) -> int:
        return self.blob.read_ahead(offset, n)

    def readinto(self, b: Any) -> int:
        n = self.blob.read_into(memoryview(b).cast("B"), self.pos)
        self.pos += n
        return n

    def read(self, n: int | None = -1) -> bytes:
        if n is None or n < 0:
            n = self.size - self.pos
        data = self.blob.pread(n, self.pos)
        self.pos += len(data)
        return data

    def readall(self) -> bytes:
        return self.read(-1)


class Backend:
    """The remote source core.urls hands URLs to: one Blob per URL, for the life of the process."""

    def __init__(self) -> None:
        self._http: HttpTransport | None = None
        self.blobs: dict[str, Blob] = {}
        self.kinds: dict[str, str | None] = {}
        self.listed: dict[str, list[str]] = {}   # an http(s) folder URL -> the names its listing page links
        self.absent: dict[str, str] = {}   # a URL found missing -> what the server said (`not found (HTTP 404)`)
        self.stores: dict[str, Any] = {}   # scheme -> its fsspec filesystem (an S3 client costs ~0.1 s to make)
        self.commits: dict[str, str] = {}   # an hf:// repository and revision -> the commit its first reply said
        self.cached = 0   # bytes in every Blob's cache
        self.held = 0     # bytes of values read ahead (Blob.read_ahead) not yet taken or let go
        self.lock = threading.Lock()
        self._slots: threading.BoundedSemaphore | None = None
        self._ahead: ThreadPoolExecutor | None = None

    def account(self, delta: int) -> bool:
        """Add delta bytes to the caches' total; False (and nothing added) when that would pass TOTAL_CACHE_BYTES."""
        with self.lock:
            if delta > 0 and self.cached + delta > TOTAL_CACHE_BYTES:
                return False
            self.cached += delta
            return True

    def ahead_pool(self) -> ThreadPoolExecutor:
        """The threads that make the requests of reads ahead (each waits for a slot of its host's, as any request)."""
        with self.lock:
            if self._ahead is None:
                self._ahead = ThreadPoolExecutor(max_workers=SETTINGS.concurrency)
            return self._ahead

    def hold(self, delta: int) -> None:
        with self.lock:
            self.held += delta

    def let_go(self, a: Ahead) -> None:
        """A read ahead taken or forgotten, once its request has ended: its bytes no longer held (its buffer is
        unmapped when the last reference goes: a failed request's error may still hold a view of it)."""
        a.done.exception()   # (waits; its error, if any, is the reader's to raise)
        self.hold(-(a.end - a.start))

    def forget_ahead(self) -> None:
        """Let go of every read ahead no read took (a command's end): their requests run to their end first, as
        core/urls.py `concurrently`'s do, so that a command makes the same requests on every run."""
        for b in list(self.blobs.values()):
            with b.lock:
                left, b.ahead = b.ahead, []
            for a in left:
                self.let_go(a)

    @property
    def concurrency(self) -> int:
        """Files worked on at once (core/urls.py `concurrently`: shards opened together): twice the requests a host
        answers at once, so that over hf:// the next files' resolve requests (the Hub's, answered with a redirect)
        go out while the CDN answers the last ones' (sources/http.py `_slot`)."""
        return 2 * SETTINGS.concurrency

    def slot(self) -> threading.BoundedSemaphore:
        """Held while one request to a store (s3://, gs://, ...: fsspec's own calls) is in flight: shards opened
        together, each prefetching a zip's local headers with its own threads, still make at most
        SETTINGS.concurrency requests at once (the rest wait here). http(s) and hf:// requests wait for a slot of
        their host's instead (sources/http.py `_slot`)."""
        with self.lock:
            if self._slots is None:
                self._slots = threading.BoundedSemaphore(SETTINGS.concurrency)
            return self._slots

    def http(self) -> HttpTransport:
        with self.lock:
            if self._http is None:
                _installed("aiohttp", "fsspec", "yarl")
                from .threaded import ThreadedClient

                self._http = HttpTransport(threaded=ThreadedClient)
            return self._http

    def after_fork(self) -> None:
        """In a forked child (stats --workers): fsspec's event loop and sessions do not survive a fork, and a
        lock may have been held by a thread that is gone; start them again. An http(s) or hf:// file keeps the
        bytes it holds (each worker fetched every shard's first window again: 613 requests for 449), its requests
        going through the child's new transport; a store's file holds the store's filesystem: fetched anew."""
        self.lock = threading.Lock()
        self.blobs = {k: b.forked() for k, b in self.blobs.items() if b.target.http_url is not None}
        self.cached = sum(b.cached for b in self.blobs.values())
        self._http, self.stores, self._slots, self._ahead, self.held = None, {}, None, None, 0

    def forget_files(self) -> None:
        """Forget every file's size, kind and cached ranges, keeping the session: the next reads start cold
        (an audit task's fetched counts are then its own, wherever it runs; docs/audit.md)."""
        self.forget_ahead()
        with self.lock:
            self.blobs.clear()
            self.kinds.clear()
            self.absent.clear()
            self.listed.clear()
            self.commits.clear()
            self.cached = 0
            for fs in self.stores.values():   # the stores' listing caches (s3fs dircache) too
                fs.invalidate_cache()

    def forget(self) -> None:
        self.forget_files()
        with self.lock:
            self._http = None   # a new session, with the timeouts in SETTINGS now
            self._slots = None   # (and SETTINGS.concurrency now)
            self.stores.clear()   # (and new stores, with the credentials and endpoint in the environment now)

    # -- resolution -------------------------------------------------------------------------------

    def target(self, url: str) -> Target:
        s = scheme(url)
        if s in _HTTP:
            return Target(url, http_url=url)
        if s == "hf":
            from .hub import target as hub_target

            return hub_target(url)
        fsspec_core = _need("fsspec.core")
        try:
            with _errors(url):
                fs = self.stores.get(s) if "::" not in url else None
                if fs is not None:
                    path = fs._strip_protocol(url)
                else:
                    fs, path = fsspec_core.url_to_fs(url, skip_instance_cache=True)
                    if "::" not in url:
                        self.stores[s] = fs
        except CheckpointError as e:   # fsspec's ImportError names the package a scheme needs (s3fs, gcsfs, adlfs)
            if "ImportError" in str(e) or "Install" in str(e):
                if s in ("s3", "s3a"):   # the remote extra holds s3fs; gcsfs, adlfs... are the user's to add
                    raise missing_extra(f"reading {s}:// URLs", "s3fs", "remote") from None
                raise MissingDependencyError(f"{s}:// URLs: {e.reason}") from None
            raise
        return Target(url, fs=fs, path=path)

    def blob(self, url: str) -> Blob:
        with self.lock:
            b = self.blobs.get(url)
        if b is None:
            b = Blob(self, self.target(url))
            with self.lock:
                b = self.blobs.setdefault(url, b)
        return b

    # -- core.urls.Backend --------------------------------------------------------------------------

    def open(self, url: str, what: str = "") -> IO[bytes]:
        return RemoteFile(self.blob(url), url)   # type: ignore[return-value]   # (an io.RawIOBase)

    def size(self, url: str, what: str = "") -> int:
        return self.blob(url).ensure_size()

    def kind(self, url: str) -> str | None:
        if url in self.kinds:
            return self.kinds[url]
        s = scheme(url)
        if s == "hf":
            from .hub import kind as hub_kind

            k = hub_kind(url)
        elif s in _HTTP:
            k = self._http_kind(url)
        else:
            t = self.target(url)
            METER.request(url)
            try:
                with _errors(url):
                    info = t.fs.info(t.path)
                k = "directory" if info.get("type") == "directory" else "file"
            except FileNotFound:
                k = None
        self.kinds[url] = k
        return k

    def _http_kind(self, url: str) -> str | None:
        if url.split("?", 1)[0].endswith("/"):
            return "directory"
        try:
            b = self.blob(url)
            b.ensure_size()
        except FileNotFound as e:
            self.absent[url] = e.reason
            return None
        if b.listing_page():
            return "directory"   # a folder URL the server answers with its listing page
        return "file"

    def why_absent(self, url: str) -> str:
        return self.absent.get(url, "no such file or folder")

    def listdir(self, url: str) -> list[str]:
        s = scheme(url)
        if s == "hf":
            from .hub import listdir as hub_listdir

            return hub_listdir(url)
        if s in _HTTP:   # (a command asks for a folder's names more than once: its page fetched once)
            folder = url.split("?", 1)[0].rstrip("/") + "/"
            if folder not in self.listed:
                names = [u[len(folder):].rstrip("/") for u in self.http().ls(folder) if u.startswith(folder)]
                self.listed[folder] = sorted({n for n in names if n and "/" not in n})
            return list(self.listed[folder])
        t = self.target(url)
        METER.request(url)
        with _errors(url):
            entries = t.fs.ls(t.path, detail=True)
        return sorted(basename(e["name"]) for e in entries if e.get("type") == "file")


BACKEND = Backend()
