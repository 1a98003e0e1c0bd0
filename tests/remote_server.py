"""A loopback HTTP server for tests/test_remote.py, bench/remote_summary.py and bench/remote_latency.py:
serves a folder with HEAD and single `Range: bytes=a-b` GETs (206 + Content-Range, 416 past the end), lists folders as HTML
links, counts the requests and body bytes it sends and the most it answered at once, can answer each request
after a fixed delay (a real network's latency: `stall=0.05`), and can play a badly behaved server: ignore Range,
answer some requests with an error status first (429/503), require a bearer token, redirect anywhere,
claim more than asked, trickle a byte at a time (the body, or the headers), drop every connection, cut replies
mid-body; with `hostile_from`, only to the range requests that ask for many bytes (a server that answers the
headers' windows and lies about the values, which ckptstat reads with another client: sources/threaded.py). With
`gather` it holds requests until a batch of them is in flight, so that what it counts is the client's structure,
which a loaded machine cannot blur.

It also stands in for the Hugging Face Hub (`hub={"org/name": folder}`), answering the three routes
huggingface_hub's HfFileSystem and hf_hub_url use (huggingface_hub/hf_api.py `repo_info`,
`list_repo_tree`; file_download.py `hf_hub_url`):
- GET /api/models/{repo}/revision/{rev}        -> {"id", "sha", "siblings"}
- GET /api/models/{repo}/tree/{rev}[/{path}]  -> [{"type": "file", "path", "size", "oid"} or {"type": "directory", ...}]
- GET /{repo}/resolve/{rev}/{file}             -> 302 to /cdn/{repo}/{rev}/{file}, served with ranges
"""
from __future__ import annotations

import html
import json
import os
import re
import threading
import time
import urllib.parse
import urllib.request
import zlib
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_RANGE = re.compile(r"bytes=(\d+)-(\d*)$")
_PACE = 1 << 18   # bytes a paced reply sends at a time (Behaviour.rate)
GATHER_WAIT = 30.0   # seconds Behaviour.gather holds the first request for the others, at most


@dataclass
class Behaviour:
    ranges: bool = True                                 # False: ignore Range, send the whole file (200)
    token: str | None = None                            # require `Authorization: Bearer <token>`
    failures: dict[str, list[int]] = field(default_factory=dict)  # path -> statuses to answer first
    retry_after: str | None = None
    stall: float = 0.0              # seconds to wait before answering each request: a network's latency (0.05: a
                                    # round trip to a distant Hub), or a stalled server (longer than the client waits)
    overlong: int = 0                                   # bytes a 206 reply sends beyond its Content-Range
    claim: int = 0                  # bytes a 206 reply's Content-Range and Content-Length claim beyond the range
                                    # asked (and the body then streams, zeros past the file)
    trickle: float = 0.0            # seconds between the bytes of a reply's body
    trickle_headers: float = 0.0    # seconds between the bytes of a reply's status line and headers (slow-loris)
    rate: float = 0.0               # bytes a second the server sends, every reply together (a link's bandwidth; 0: as
                                    # fast as it can)
    drop: bool = False              # close every connection without a reply
    short: int = 0                  # > 0: a 206 sends at most this many bytes, its Content-Range saying so (the file
                                    # goes on: a server cutting ranges)
    gzip: int = 0                   # > 0: every file reply (206 or 200) is a gzip stream of this many zeros, sent with
                                    # Content-Encoding: gzip (although identity was asked) and its compressed length
    redirects: dict[str, str] = field(default_factory=dict)   # path -> Location of a 302
    cut: int = 0                    # the first `cut` 206 replies send half their body, then close the connection
    hostile_from: int = 0           # > 0: failures, redirects, ranges, overlong, claim, trickles, short, gzip, cut apply only
                                    # to range requests asking at least this many bytes (values); the rest are answered
                                    # as a plain server answers them
    hub: dict[str, str] = field(default_factory=dict)   # "org/name" -> folder
    tree_extra: dict[str, list[str]] = field(default_factory=dict)   # "org/name" -> paths its root tree also lists as
                                    # files (a mirror's tree naming `../x`: no file of the folder behind them)
    cdn: str | None = None          # the base URL resolve redirects go to (another server: the Hub's CDN); default this one
    revisions: tuple[str, ...] = ("main",)
    commits: dict[str, str] = field(default_factory=dict)   # a file's name -> the X-Repo-Commit its resolve route says
                                    # (default 40 zeros; another: a push landed between two files' reads)
    etags: bool = False             # send each file's ETag (its inode, size and mtime, as nginx and Apache derive theirs)
    swap: dict[str, tuple[int, str]] = field(default_factory=dict)   # path -> (n, file): from the (n+1)th request of
                                    # path on, serve that other file of the folder (a file replaced while read)
    ctypes: dict[str, str] = field(default_factory=dict)   # path -> the Content-Type its replies say (a mislabelled file)
    gather: tuple[int, ...] = ()    # the sizes of successive batches of requests (of paths ending with gather_suffix)
                                    # to hold, after their stall, until the batch is whole; then answer it (after the
                                    # last batch, or once one request waited GATHER_WAIT s, hold none). Requests a client
                                    # sends together are then in flight together however late a loaded machine sends
                                    # them: `max_in_flight` and `round_trips` count the client's structure, not the
                                    # machine's load. A client that sends them one after another waits once, alone
    gather_suffix: str = ""


class _Quiet(ThreadingHTTPServer):
    request_queue_size = 128   # (socketserver's 5 drops the SYNs of a client opening 32 connections at once: a 1 s retry)

    def handle_error(self, request: object, client_address: object) -> None:
        pass   # a client that hangs up mid-reply (a refused full download, an exiting process) is no error here


class Server:
    def __init__(self, root: str, **behaviour: object):
        self.root = os.path.realpath(root)
        self.b = Behaviour(**behaviour)  # type: ignore[arg-type]
        self.requests: Counter[str] = Counter()   # method -> count
        self.served: Counter[str] = Counter()     # a file's path -> the requests for it (Behaviour.swap)
        self.bytes_sent = 0
        self.log: list[tuple[str, str, str]] = []  # (method, path, Range header)
        self.auth_seen: list[str | None] = []
        self.agents: list[str | None] = []   # each request's User-Agent, as `log` (which client sent it)
        self.in_flight = 0       # requests received and not yet answered (their status line not sent)
        self.max_in_flight = 0   # the most answered at once: do a client's requests overlap?
        self.spans: list[tuple[float, float]] = []   # (time.monotonic() at each request's start, at its answer's end)
        self.ranges: list[str] = []   # each span's Range header ("" for none), in spans' order
        self.link_free = 0.0     # with Behaviour.rate: when the link has sent every byte handed to it so far
        self.lock = threading.Lock()
        self.gathered = threading.Condition(self.lock)   # Behaviour.gather: `held` requests wait on it while not `opened`
        self.held, self.batches, self.opened = 0, 0, False
        handler = type("Handler", (_Handler,), {"server_state": self})
        self.httpd = _Quiet(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> Server:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)

    def reset(self) -> None:
        with self.lock:
            self.requests.clear()
            self.bytes_sent = 0
            self.log.clear()
            self.auth_seen.clear()
            self.agents.clear()
            self.max_in_flight = 0
            self.spans.clear()
            self.ranges.clear()
            self.held, self.batches, self.opened = 0, 0, False


class _Handler(BaseHTTPRequestHandler):
    server_state: Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:   # quiet
        pass

    # -- plumbing -------------------------------------------------------------------------------

    def _count(self, n: int) -> None:
        with self.server_state.lock:
            self.server_state.bytes_sent += n

    def _write(self, body: bytes) -> None:
        """Send body bytes; with Behaviour.rate, in 256 KiB pieces, each after the link has sent what every reply
        handed it before (one link of that bandwidth, shared by the replies in flight)."""
        s = self.server_state
        if not s.b.rate:
            self.wfile.write(body)
            self._count(len(body))
            return
        view = memoryview(body)
        for at in range(0, len(view), _PACE):
            piece = view[at:at + _PACE]
            with s.lock:
                s.link_free = done = max(time.monotonic(), s.link_free) + len(piece) / s.b.rate
            time.sleep(max(0.0, done - time.monotonic()))
            self.wfile.write(piece)
            self._count(len(piece))

    def end_headers(self) -> None:
        """The buffered status line and headers sent at once, or with Behaviour.trickle_headers a byte at a time."""
        pause = self.server_state.b.trickle_headers if getattr(self, "hostile", False) else 0.0
        if not pause:
            super().end_headers()
            return
        self._headers_buffer.append(b"\r\n")   # (BaseHTTPRequestHandler's buffer: what flush_headers writes)
        data, self._headers_buffer = b"".join(self._headers_buffer), []
        for i in range(len(data)):
            self.wfile.write(data[i:i + 1])
            time.sleep(pause)

    def _send(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None, head: bool = False) -> None:
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        if "Content-Length" not in (headers or {}):
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head and body:
            self._write(body)

    def _json(self, obj: object, head: bool) -> None:
        self._send(200, json.dumps(obj).encode(), {"Content-Type": "application/json"}, head)

    def do_HEAD(self) -> None:
        self._handle(head=True)

    def do_GET(self) -> None:
        self._handle(head=False)

    def _handle(self, head: bool) -> None:
        s = self.server_state
        with s.lock:
            s.in_flight += 1
            s.max_in_flight = max(s.max_in_flight, s.in_flight)
        self._waiting = True   # received, not yet answered: counted in flight
        t0 = time.monotonic()
        try:
            self._answer(head)
        finally:
            with s.lock:
                s.in_flight -= self._waiting   # (a dropped connection sends no status line)
                s.spans.append((t0, time.monotonic()))
                s.ranges.append(self.headers.get("Range", ""))

    def send_response(self, code: int, message: str | None = None) -> None:
        """A request leaves `in_flight` when its answer starts: the client cannot be done with it before, so the count
        never holds one the client has finished (a handler thread descheduled after its last write would, under load,
        overlap the client's next request)."""
        with self.server_state.lock:
            self.server_state.in_flight -= self._waiting
        self._waiting = False
        super().send_response(code, message)

    def _gather(self, sizes: tuple[int, ...]) -> None:
        """Behaviour.gather: wait until the batch this request joins is whole, or GATHER_WAIT s (then hold none)."""
        s = self.server_state
        with s.gathered:
            batch = s.batches
            if s.opened or batch >= len(sizes):
                return
            s.held += 1
            if s.held == sizes[batch]:
                s.held, s.batches = 0, batch + 1
            elif not s.gathered.wait_for(lambda: s.opened or s.batches > batch, timeout=GATHER_WAIT):
                s.opened = True
            s.gathered.notify_all()

    def _hostile(self) -> bool:
        """Whether this request gets the server's bad behaviours: every request, or with `hostile_from` a range request
        asking at least that many bytes of a file (a folder's listing page, asked for up to 4 MiB, aside)."""
        b = self.server_state.b
        if not b.hostile_from:
            return True
        m = _RANGE.match(self.headers.get("Range", ""))
        return bool(m and m[2] and int(m[2]) - int(m[1]) + 1 >= b.hostile_from) and not self.path.endswith("/")

    def _answer(self, head: bool) -> None:
        s, b = self.server_state, self.server_state.b
        path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)
        self.hostile = self._hostile()
        with s.lock:
            s.requests[self.command] += 1
            s.log.append((self.command, path, self.headers.get("Range", "")))
            s.auth_seen.append(self.headers.get("Authorization"))
            s.agents.append(self.headers.get("User-Agent"))
            pending = b.failures.get(path) if self.hostile else None
            status = pending.pop(0) if pending else None
        if b.stall:
            time.sleep(b.stall)
        if b.gather and path.endswith(b.gather_suffix):
            self._gather(b.gather)
        if b.drop:
            self.close_connection = True
            return
        if path in b.redirects and self.hostile:
            self._send(302, b"", {"Location": b.redirects[path]}, head)
            return
        if status is not None:
            self._send(status, b"try again", {"Retry-After": b.retry_after} if b.retry_after else {}, head)
            return
        if b.token is not None and not path.startswith("/cdn/") and self.headers.get("Authorization") != f"Bearer {b.token}":
            self._send(401, b"unauthorized", {}, head)
            return
        if b.hub and self._hub(path, head):
            return
        self._file(os.path.join(s.root, path.lstrip("/")), path, head)

    # -- files ----------------------------------------------------------------------------------

    def _file(self, local: str, path: str, head: bool) -> None:
        s = self.server_state
        real = os.path.realpath(local)
        if real != s.root and not real.startswith(s.root + os.sep) or not os.path.exists(real):
            self._send(404, b"not found", {}, head)
            return
        if os.path.isdir(real):
            if not path.endswith("/"):
                self._send(301, b"", {"Location": path + "/"}, head)
                return
            links = "".join(f'<a href="{html.escape(n)}">{html.escape(n)}</a>\n' for n in sorted(os.listdir(real)))
            self._send(200, f"<html><body>\n{links}</body></html>".encode(), {"Content-Type": "text/html"}, head)
            return
        with s.lock:
            s.served[path] += 1
            n = s.served[path]
        if path in s.b.swap and n > s.b.swap[path][0]:
            real = os.path.join(s.root, s.b.swap[path][1])
        st = os.stat(real)
        size = st.st_size
        ctype = s.b.ctypes.get(path) or {".json": "application/json"}.get(os.path.splitext(real)[1],
                                                                           "application/octet-stream")
        tag = {"ETag": f'"{st.st_ino:x}-{size:x}-{st.st_mtime_ns:x}"'} if s.b.etags else {}
        m = _RANGE.match(self.headers.get("Range", ""))
        bad = self.hostile
        if s.b.gzip and bad:
            self._gzip(206 if m and s.b.ranges else 200, m, size, head)
            return
        if m and (s.b.ranges or not bad):
            start = int(m[1])
            end = min(int(m[2]) if m[2] else size - 1, size - 1, start + s.b.short - 1 if s.b.short and bad else size)
            if start >= size:
                self._send(416, b"", {"Content-Range": f"bytes */{size}"}, head)
                return
            with open(real, "rb") as f:
                f.seek(start)
                body = f.read(end - start + 1) + b"\0" * (s.b.overlong if bad else 0)
            if (s.b.claim or s.b.trickle) and bad:
                self._stream(206, body, start, end, size, ctype, head)
                return
            with s.lock:
                cut = bad and s.b.cut > 0 and not head
                s.b.cut -= cut
            if cut:   # the headers and half the body, then the connection closed
                self.send_response(206)
                for k, v in {"Content-Range": f"bytes {start}-{end}/{size}", "Content-Length": str(len(body)),
                             "Content-Type": ctype}.items():
                    self.send_header(k, v)
                self.end_headers()
                self._write(body[:len(body) // 2])
                self.wfile.flush()
                self.close_connection = True
                return
            self._send(206, body, {"Content-Range": f"bytes {start}-{end}/{size}", "Accept-Ranges": "bytes",
                                   "Content-Type": ctype, **tag}, head)
            return
        headers = {"Content-Type": ctype, "Content-Length": str(size), **tag}
        if s.b.ranges:
            headers["Accept-Ranges"] = "bytes"
        self.send_response(200)
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        if head:
            return
        try:
            with open(real, "rb") as f:
                while piece := f.read(1 << 20):
                    self._write(piece)
        except (BrokenPipeError, ConnectionResetError):   # the client stopped reading: fine
            self.close_connection = True

    def _gzip(self, status: int, m: re.Match[str] | None, size: int, head: bool) -> None:
        """A gzip bomb: a body of `gzip` zeros deflated (about 1000:1), labelled Content-Encoding: gzip; a 206 says the
        range asked in Content-Range and the compressed length in Content-Length (the bytes on the wire)."""
        z = zlib.compressobj(9, zlib.DEFLATED, 31)
        body = b"".join(z.compress(bytes(min(1 << 24, self.server_state.b.gzip - k)))
                        for k in range(0, self.server_state.b.gzip, 1 << 24)) + z.flush()
        headers = {"Content-Encoding": "gzip", "Content-Type": "application/octet-stream"}
        if status == 206 and m is not None:
            end = min(int(m[2]) if m[2] else size - 1, size - 1)
            headers["Content-Range"] = f"bytes {m[1]}-{end}/{size}"
        try:
            self._send(status, body, headers, head)
        except (BrokenPipeError, ConnectionResetError):   # the client gave up: what it should do
            self.close_connection = True

    def _stream(self, status: int, body: bytes, start: int, end: int, size: int, ctype: str, head: bool) -> None:
        """A lying or slow 206: Content-Range and Content-Length claim `claim` more bytes than asked, and the
        body is sent a byte every `trickle` seconds (or in 1 MiB pieces, the claim's zeros after the file's)."""
        b = self.server_state.b
        n = len(body) + b.claim
        self.send_response(status)
        for k, v in {"Content-Range": f"bytes {start}-{end + b.claim}/{size + b.claim}", "Content-Length": str(n),
                     "Content-Type": ctype}.items():
            self.send_header(k, v)
        self.end_headers()
        if head:
            return
        try:
            sent = 0
            while sent < n:
                k = min(1 if b.trickle else 1 << 20, n - sent)
                piece = body[sent:sent + k].ljust(k, b"\0")
                self.wfile.write(piece)
                self.wfile.flush()
                sent += len(piece)
                self._count(len(piece))
                if b.trickle:
                    time.sleep(b.trickle)
        except (BrokenPipeError, ConnectionResetError):   # the client gave up: what it should do
            self.close_connection = True

    # -- the hub stand-in -------------------------------------------------------------------------

    def _repo(self, rest: str) -> tuple[str, str, str] | None:
        """(repo id, local folder, the rest) for a path starting with a repo id."""
        for repo, folder in self.server_state.b.hub.items():
            if rest == repo or rest.startswith(repo + "/"):
                return repo, folder, rest[len(repo):].lstrip("/")
        return None

    def _hub(self, path: str, head: bool) -> bool:
        b = self.server_state.b
        if path.startswith("/api/models/"):
            found = self._repo(path[len("/api/models/"):])
            if found is None:
                self._send(404, b'{"error": "Repository not found"}', {"X-Error-Code": "RepoNotFound"}, head)
                return True
            repo, folder, rest = found
            kind, _, rest = rest.partition("/")
            rev, _, sub = rest.partition("/")
            rev = rev or "main"   # /api/models/{repo}: the default branch
            if rev not in b.revisions:
                self._send(404, b'{"error": "Invalid rev id"}', {"X-Error-Code": "RevisionNotFound"}, head)
                return True
            every = sorted(os.path.relpath(os.path.join(d, n), folder).replace(os.sep, "/")
                           for d, _, ns in os.walk(folder) for n in ns)   # (the Hub's siblings: every file, nested)
            listed = os.path.join(folder, *sub.strip("/").split("/")) if sub.strip("/") else folder
            if kind in ("revision", ""):
                self._json({"id": repo, "modelId": repo, "sha": "0" * 40, "private": False,
                            "siblings": [{"rfilename": n} for n in every]}, head)
            elif kind == "tree" and os.path.isdir(listed) and ".." not in sub.split("/"):
                prefix = sub.strip("/") + "/" if sub.strip("/") else ""   # a subfolder's entries: paths from the root
                extra = [{"type": "file", "path": p, "size": 10, "oid": "1" * 40}
                         for p in (b.tree_extra.get(repo, []) if not prefix else [])]
                self._json([{"type": "file", "path": prefix + n, "size": os.path.getsize(os.path.join(listed, n)),
                             "oid": "0" * 40} if os.path.isfile(os.path.join(listed, n)) else
                            {"type": "directory", "path": prefix + n, "oid": "0" * 40}
                            for n in sorted(os.listdir(listed))] + extra, head)
            else:
                self._send(404, b'{"error": "Entry not found"}', {"X-Error-Code": "EntryNotFound"}, head)
            return True
        if path.startswith("/cdn/"):
            found = self._repo(path[len("/cdn/"):])
            if found:
                repo, folder, rest = found
                rev, _, name = rest.partition("/")
                self._file(os.path.join(folder, name), path, head)
                return True
        found = self._repo(path.lstrip("/"))
        if found and found[2].startswith("resolve/"):
            repo, folder, rest = found
            rev, _, name = rest[len("resolve/"):].partition("/")
            if rev not in b.revisions:
                self._send(404, b"", {"X-Error-Code": "RevisionNotFound"}, head)
            elif not os.path.isfile(os.path.join(folder, name)):
                self._send(404, b"", {"X-Error-Code": "EntryNotFound"}, head)
            else:   # as the Hub answers for an LFS file: an absolute Location and the X-Repo-Commit/X-Linked-* headers
                size = os.path.getsize(os.path.join(folder, name))
                base = b.cdn or f"http://{self.headers.get('Host')}"
                where = f"{base}/cdn/{repo}/{rev}/{urllib.parse.quote(name)}"
                self._send(302, b"", {"Location": where, "X-Repo-Commit": b.commits.get(name, "0" * 40),
                                      "X-Linked-Size": str(size), "X-Linked-Etag": f'"{size:064x}"',
                                      "ETag": f'"{size:064x}"'}, head)
            return True
        return False


def round_trips(*servers: Server) -> int:
    """The longest chain of requests the servers answered one after another (each sent after the previous one's
    answer ended): the round trips a client waited for in sequence, however loaded the machine (a request a busy
    client sends late still waited for nothing it did not wait for). Spans of one client's run only (reset())."""
    spans = sorted(span for s in servers for span in s.spans)
    depth: list[int] = []
    for a, _ in spans:
        depth.append(1 + max((d for (_, end), d in zip(spans, depth) if end <= a), default=0))
    return max(depth, default=0)


@contextmanager
def moto_s3(bucket: str, files: dict[str, str]) -> Iterator[object]:
    """moto's S3 server on loopback, `files` (key -> local path) uploaded to `bucket`, the AWS environment
    pointed at it for the `with` block and restored after; yields the boto3 client."""
    import boto3
    import moto.server

    srv = moto.server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    srv.start()
    host, port = srv.get_host_and_port()
    # moto's backends are one state per process, whichever server answers: a bucket an earlier server of this process
    # filled (test_dask_cluster's zoo in `zoo`, when xdist runs both modules in one worker) is still there. Reset it.
    urllib.request.urlopen(urllib.request.Request(f"http://{host}:{port}/moto-api/reset", method="POST"), timeout=30)
    env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
           "AWS_ENDPOINT_URL": f"http://{host}:{port}"}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        client = boto3.client("s3")
        client.create_bucket(Bucket=bucket)
        for key, path in files.items():
            client.upload_file(path, bucket, key)
        yield client
    finally:
        srv.stop()
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
