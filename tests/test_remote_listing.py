"""Folder listings, credentials and status lies over http(s), and the Hub's tree and errors: the cases a red-team run
on loopback servers found (docs/security.md, twenty-third pass; docs/remote.md). Each on a real loopback server through
the CLI; a scripted server here, where a page, a status or a header must be exactly what a hostile or odd server
sends (tests/remote_server.py serves the Hub stand-in). Time bounds are "gave up, did not hang" margins only."""
from __future__ import annotations

import base64
import gzip
import json
import os
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from remote_server import Server

from ckptstat import sources
from ckptstat.cli import main
from ckptstat.core import urls
from ckptstat.core.switches import Switches, set_switches

FIX = os.path.realpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures"))
WEIGHTS = os.path.join(FIX, "bert-tiny", "model.safetensors")
CLIENTS = ["threaded", "aiohttp"]
Route = Callable[[BaseHTTPRequestHandler], None]


@pytest.fixture(autouse=True)
def fresh_sources(monkeypatch):
    sources.reset()
    set_switches(Switches())
    yield
    sources.reset()


def cli(capsys, *args: str) -> tuple[int, str, str]:
    sources.reset()
    rc = main(list(args))
    out, err = capsys.readouterr()
    return rc, out, err


def one_line(rc: int, err: str) -> str:
    assert rc in (1, 2) and err.count("\n") == 1 and "Traceback" not in err, err
    return err


# -- a scripted server: each path answered by its route, every request logged ---------------------

class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Scripted

    def log_message(self, format: str, *args: object) -> None:   # quiet
        pass

    def do_GET(self) -> None:
        path = urllib.parse.urlsplit(self.path).path
        with self.server.lock:
            self.server.log.append((path, self.headers.get("Range"), self.headers.get("Authorization")))
            self.server.asked[path] = self.server.asked.get(path, 0) + 1
        route = self.server.routes.get(path)
        if route is None:
            self.send(404, b"not found")
        else:
            route(self)

    def send(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for k, v in {"Content-Length": str(len(body)), **(headers or {})}.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)


class _Scripted(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        pass   # (a client that hung up on a refused reply)


class Scripted:
    def __init__(self, routes: dict[str, Route]):
        self.httpd = _Scripted(("127.0.0.1", 0), _Handler)
        self.httpd.routes, self.httpd.log, self.httpd.asked = routes, [], {}  # type: ignore[attr-defined]
        self.httpd.lock = threading.Lock()  # type: ignore[attr-defined]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    @property
    def paths(self) -> list[str]:
        return [p for p, _, _ in self.httpd.log]  # type: ignore[attr-defined]

    @property
    def asked(self) -> dict[str, int]:
        return self.httpd.asked  # type: ignore[attr-defined,no-any-return]

    def __enter__(self) -> Scripted:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def file_route(local: str, auth: str | None = None, after: int = 0, then: int = 0) -> Route:
    """A file served by single ranges (206, Content-Range); `auth`: the Authorization it requires; from request
    number `after` + 1 on, answered `then` instead (416 with the true size)."""
    data = open(local, "rb").read()
    served = [0]

    def route(h: _Handler) -> None:
        if auth is not None and h.headers.get("Authorization") != auth:
            h.send(401, b"", {"WWW-Authenticate": 'Basic realm="x"'})
            return
        served[0] += 1
        if after and served[0] > after:
            h.send(then, b"", {"Content-Range": f"bytes */{len(data)}"})
            return
        a, _, b = h.headers.get("Range", "bytes=0-").removeprefix("bytes=").partition("-")
        start, end = int(a), min(int(b) + 1 if b else len(data), len(data))
        h.send(206, data[start:end], {"Content-Range": f"bytes {start}-{end - 1}/{len(data)}",
                                      "Content-Type": "application/octet-stream"})
    return route


def page_route(body: bytes, chunked: bool = False, headers: dict[str, str] | None = None,
               trickle: float = 0.0) -> Route:
    """A listing page (text/html), ignoring Range as servers that make one do: with its Content-Length, or chunked
    (nginx's and Apache's autoindex), or a byte every `trickle` seconds."""
    def route(h: _Handler) -> None:
        h.send_response(200)
        h.send_header("Content-Type", "text/html")
        for k, v in (headers or {}).items():
            h.send_header(k, v)
        if not chunked:
            h.send_header("Content-Length", str(len(body)))
            h.end_headers()
            step = 1 if trickle else max(len(body), 1)
            for i in range(0, len(body), step):
                h.wfile.write(body[i:i + step])
                h.wfile.flush()
                time.sleep(trickle)
            return
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        for i in range(0, len(body), 1 << 16):
            piece = body[i:i + (1 << 16)]
            h.wfile.write(b"%x\r\n" % len(piece) + piece + b"\r\n")
        h.wfile.write(b"0\r\n\r\n")
    return route


def links(*names: str) -> bytes:
    return ("<html><body>" + "".join(f'<a href="{n}">{n}</a>\n' for n in names) + "</body></html>").encode()


# -- a folder's links and an index's shards stay in the folder ------------------------------------------

@pytest.mark.parametrize("bad", [".\t.", ".\n.", "\t..", "%2e\t%2e", ".\r.", "model.safetensors\t"])
@pytest.mark.parametrize("command", ["scan", "summary", "audit"])
def test_a_link_holding_a_control_character_is_no_file_of_the_folder(tmp_path, capsys, bad, command):
    """URL parsers drop a tab, CR or LF wherever it stands (yarl, which both clients encode with): a listing's link
    `.<TAB>.` was requested as `..`, and a scan of /m/ walked up to the server's root and reported
    `SAFE .\\t./secret/private_weights.bin`, a file outside the folder the user named."""
    routes = {"/m/": page_route(links(bad, "model.safetensors")), "/m/model.safetensors": file_route(WEIGHTS),
              "/": page_route(links("m/", "secret/")), "/secret/": page_route(links("private_weights.bin")),
              "/secret/private_weights.bin": file_route(WEIGHTS)}
    with Scripted(routes) as s:
        args = [command, s.url + "/m/"] + (["-o", str(tmp_path / "audit.jsonl")] if command == "audit" else [])
        rc, out, err = cli(capsys, *args)
        assert rc == 0, err
        assert all(p.startswith("/m/") for p in s.paths), s.paths
    if command == "audit":
        assert [r["path"].rsplit("/", 1)[1] for r in map(json.loads, open(tmp_path / "audit.jsonl"))] == \
            ["model.safetensors"]


@pytest.mark.parametrize("shard", [".\t.", ".\n.", "%2e\t%2e", "model.safetensors\t", "model.safetensors\x7f"])
def test_an_index_shard_holding_a_control_character_is_refused_unasked(tmp_path, capsys, shard):
    """An index naming the shard `model.safetensors<TAB>` read locally says the shard is missing, and over https
    read `model.safetensors` (exit 0: another file than a loader reads); `.<TAB>.` asked for the folder's parent."""
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(json.dumps({"metadata": {}, "weight_map": {"embeddings.word_embeddings.weight": shard}}))
    routes = {"/idx/model.safetensors.index.json": file_route(str(index)),
              "/idx/model.safetensors": file_route(WEIGHTS), "/": file_route(WEIGHTS)}
    with Scripted(routes) as s:
        one_line(*cli(capsys, "summary", s.url + "/idx/model.safetensors.index.json")[::2])
        assert set(s.paths) <= {"/idx/model.safetensors.index.json", "/idx/config.json"}, s.paths


def test_under_refuses_control_characters():
    folder = "https://h/m"
    for name in ("a\tb", "a%09b", "a%0Ab", "a%0d", "a\x7f", "a%7F", "a\x00", ".%09."):
        assert not urls.under(f"{folder}/{name}", folder), name
    assert urls.under(f"{folder}/a%20b.safetensors", folder) and urls.under(f"{folder}/sub/x.bin", folder)


# -- the listing page: bounded, by the rules every other reply follows -------------------------------------

def test_a_chunked_listing_is_read_as_a_page_with_a_length(capsys):
    """nginx's and Apache's autoindex send the page chunked (no Content-Length): read whole, up to 4 MiB, as one
    with a length, and the folder reads as its file does; the page asked for once a command."""
    rc, local, err = cli(capsys, "summary", "--json", os.path.dirname(WEIGHTS))
    assert rc == 0, err
    for chunked in (False, True):
        routes = {"/m/": page_route(links("model.safetensors", "../", "?C=N;O=D"), chunked=chunked),
                  "/m/model.safetensors": file_route(WEIGHTS)}
        with Scripted(routes) as s:
            rc, out, err = cli(capsys, "stats", "--json", s.url + "/m/")
            assert rc == 0, err
            assert s.asked["/m/"] == 1   # (fetched twice before: the folder's kind and its files each listed it)
            rc, out, err = cli(capsys, "summary", "--json", s.url + "/m/")
            assert rc == 0, err
            assert json.loads(out)["parameters"] == json.loads(local)["parameters"]


@pytest.mark.parametrize("case", ["long", "long-chunked", "gzip"])
def test_a_listing_page_past_4_mib_or_compressed_is_refused(capsys, case):
    """A listing page was read whole, of any length, and inflated: a 300 MB page of links took 3.1 GB and 75 s, a
    1 MB gzip body inflating to 1 GB 2.1 GB. Now at most 4 MiB (sources/pages.py PAGE_BYTES) and identity only."""
    if case == "gzip":
        route = page_route(gzip.compress(b"<a href='x'>" + bytes(64 << 20)), headers={"Content-Encoding": "gzip"})
    else:
        route = page_route(links(*(f"f{i:07d}.safetensors" for i in range(200_000))), chunked=case.endswith("chunked"))
    with Scripted({"/m/": route}) as s:
        err = one_line(*cli(capsys, "summary", s.url + "/m/")[::2])
        assert ("Content-Encoding" in err) if case == "gzip" else ("listing page is longer than 4,194,304 bytes" in err)
        assert sources.METER.bytes <= (4 << 20) + (1 << 20)


@pytest.mark.parametrize("client", CLIENTS)
def test_a_trickling_listing_is_a_timeout(capsys, monkeypatch, client):
    """A page a byte every 0.3 s held `summary URL/` past 200 s whatever --limit remote_seconds said: the listing had
    no deadline and no minimum rate. Now as any reply: read_timeout plus the bytes at the minimum rate."""
    monkeypatch.setattr(sources.SETTINGS, "threaded", client == "threaded")
    monkeypatch.setattr(sources.SETTINGS, "read_timeout", 0.5)
    monkeypatch.setattr(sources.SETTINGS, "backoff", 0.01)
    with Scripted({"/m/": page_route(links("model.safetensors") * 10, trickle=0.3)}) as s:
        err = one_line(*cli(capsys, "summary", "--limit", "remote_seconds=120", s.url + "/m/")[::2])
        assert "timed out, after 3 attempts" in err


def trickled(status: int, headers: dict[str, str]) -> Route:
    """A reply of `status` whose 60,000-byte body comes a byte every 0.1 s (10 minutes in all)."""
    def route(h: _Handler) -> None:
        h.send_response(status)
        for k, v in {"Content-Length": "60000", **headers}.items():
            h.send_header(k, v)
        h.end_headers()
        for _ in range(60000):
            h.wfile.write(b"x")
            h.wfile.flush()
            time.sleep(0.1)
    return route


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize(("status", "headers", "said"), [
    (302, {"Location": "/m/model.safetensors"}, None),
    (503, {"Retry-After": "0"}, "HTTP 503 Service Unavailable, after 6 attempts"),
    (404, {}, "not found (HTTP 404)")])
def test_a_trickled_body_the_reply_does_not_need_is_no_wait(capsys, monkeypatch, client, status, headers, said):
    """The threaded client reads a small redirect's, retry's or error's body to its end to keep the connection: with
    the body a byte every 0.1 s, it waited until --limit remote_seconds (4 hours by default: a 302 then "gave up: this
    command has spent 60 s", a 503 the same at its first attempt, a 404 after 60 s). Now that read keeps the minimum
    rate of any reply (read_timeout plus its bytes at SETTINGS.min_rate), and the connection is closed past it."""
    monkeypatch.setattr(sources.SETTINGS, "threaded", client == "threaded")
    monkeypatch.setattr(sources.SETTINGS, "read_timeout", 0.5)
    monkeypatch.setattr(sources.SETTINGS, "backoff", 0.01)
    with Scripted({"/r/model.safetensors": trickled(status, headers), "/m/model.safetensors": file_route(WEIGHTS)}) as s:
        t0 = time.monotonic()
        rc, out, err = cli(capsys, "summary", "--limit", "remote_seconds=60", s.url + "/r/model.safetensors")
        if said is None:
            assert rc == 0, err
        else:
            assert said in one_line(rc, err)
        assert time.monotonic() - t0 < 45   # (a "did not hang" margin: each reply ~1.5 s at most)


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("flags", [(), ("--allow-full-download",)])
def test_an_interim_reply_before_the_range_is_passed_over(capsys, monkeypatch, client, flags):
    """A 103 Early Hints (or 102) before the 206, as RFC 9110 15.2 lets a server send and curl and aiohttp pass over:
    the threaded client took the 103 for the reply, "the server ignores range requests", and with
    --allow-full-download spooled its empty body: "file is empty"."""
    from safetensors.numpy import load_file

    monkeypatch.setattr(sources.SETTINGS, "threaded", client == "threaded")
    served = file_route(WEIGHTS)

    def route(h: _Handler) -> None:
        h.wfile.write(b"HTTP/1.1 103 Early Hints\r\nLink: </x.css>; rel=preload\r\n\r\n"
                      b"HTTP/1.1 102 Processing\r\n\r\n")
        served(h)
    with Scripted({"/m/model.safetensors": route}) as s:
        rc, out, err = cli(capsys, *flags, "summary", "--json", s.url + "/m/model.safetensors")
        assert rc == 0, err
        assert json.loads(out)["parameters"]["unique"] == sum(a.size for a in load_file(WEIGHTS).values())   # (no ties)


def test_a_listing_redirect_is_named(capsys):
    """A listing answered 302 was read as a page with no links ("holds no weights file ckptstat recognises"). Now a
    folder URL without its slash is followed to its page (`/m` -> `/m/`, as servers answer), a page that another folder
    answers is named (its links are that folder's), and a redirect off the origin is refused by the policy."""
    with Scripted({"/m/": page_route(links("model.safetensors")), "/m/model.safetensors": file_route(WEIGHTS),
                   "/m": lambda h: h.send(301, b"", {"Location": "/m/"}),
                   "/o/": lambda h: h.send(302, b"", {"Location": "/m/"}),
                   "/p/": lambda h: h.send(302, b"", {"Location": "http://localhost:1/m/"})}) as s:
        rc, out, err = cli(capsys, "summary", s.url + "/m")
        assert rc == 0, err
        err = one_line(*cli(capsys, "summary", s.url + "/o/")[::2])
        assert f"listing page redirects to {s.url}/m/: name that folder" in err
        err = one_line(*cli(capsys, "summary", s.url + "/p/")[::2])
        assert "redirect" in err and "localhost" in err


# -- statuses and headers that lie -------------------------------------------------------------------------

@pytest.mark.parametrize("client", CLIENTS)
def test_a_416_inside_the_file_is_an_error_not_its_end(capsys, monkeypatch, client):
    """A server answering a value read with 416 and the true size: the range was read as empty, and `stats` said
    the file ends before a tensor that it holds ("expected 1024 bytes at offset ..., the file ends first")."""
    monkeypatch.setattr(sources.SETTINGS, "threaded", client == "threaded")
    with Scripted({"/m/model.safetensors": file_route(WEIGHTS, after=1, then=416)}) as s:
        err = one_line(*cli(capsys, "stats", s.url + "/m/model.safetensors")[::2])
        assert "with 416 (range not satisfiable)" in err and "file ends" not in err


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e400"])
def test_a_retry_after_that_is_no_number_of_seconds_retries(capsys, monkeypatch, client, value):
    """`Retry-After: nan` ended the command at its first 503 ("cannot read (ValueError: Invalid value NaN)"):
    time.sleep refused it. Now our own backoff, as for an HTTP date."""
    monkeypatch.setattr(sources.SETTINGS, "threaded", client == "threaded")
    monkeypatch.setattr(sources.SETTINGS, "backoff", 0.01)
    served = file_route(WEIGHTS)
    first = [True]

    def route(h: _Handler) -> None:
        if first[0]:
            first[0] = False
            h.send(503, b"", {"Retry-After": value})
        else:
            served(h)
    with Scripted({"/m/model.safetensors": route}) as s:
        rc, out, err = cli(capsys, "summary", s.url + "/m/model.safetensors")
        assert rc == 0, err
        assert s.asked["/m/model.safetensors"] == 2


@pytest.mark.parametrize("client", CLIENTS)
def test_credentials_in_the_url_are_basic_auth_and_never_printed(capsys, monkeypatch, client):
    """`http://user:password@host/...`: aiohttp (listings) sent them, the threaded client (every range read) did
    not, so a file curl reads was "access denied (HTTP 401)". Both send them now, percent-decoded as curl does; the
    password is in no output."""
    monkeypatch.setattr(sources.SETTINGS, "threaded", client == "threaded")
    auth = "Basic " + base64.b64encode(b"u@x:pass word").decode()
    with Scripted({"/m/": page_route(links("model.safetensors")),
                   "/m/model.safetensors": file_route(WEIGHTS, auth=auth)}) as s:
        url = s.url.replace("http://", "http://u%40x:pass%20word@")
        rc, out, err = cli(capsys, "summary", "--json", url + "/m/")
        assert rc == 0, err
        assert json.loads(out)["parameters"]["unique"] > 0
        assert {a for p, _, a in s.httpd.log if p == "/m/model.safetensors"} == {auth}  # type: ignore[attr-defined]
        err = one_line(*cli(capsys, "summary", url.replace("word@", "wrong@") + "/m/model.safetensors")[::2])
        assert "access denied (HTTP 401" in err and "wrong" not in err and "pass" not in err


# -- the Hub: its tree and its errors ---------------------------------------------------------------------

@pytest.mark.parametrize("command", ["scan", "summary"])
def test_a_hub_tree_path_outside_the_repository_is_passed_over(tmp_path, monkeypatch, capsys, command):
    """A mirror's tree listing `../../etc/passwd` had scan ask the endpoint for it, with the user's token
    (`GET /org/extra/etc/passwd Auth=Bearer ...`). The Hub's own tree holds no such path; a path that is no plain
    file of the folder is passed over, as an https listing's link outside it is."""
    monkeypatch.setenv("HF_TOKEN", "hf_secret_token_000")
    with Server(FIX, hub={"org/m": os.path.dirname(WEIGHTS)},
                tree_extra={"org/m": ["../../etc/passwd", "a/../../b.safetensors", "c\t.safetensors"]}) as s:
        monkeypatch.setenv("HF_ENDPOINT", s.url)
        rc, out, err = cli(capsys, command, "hf://org/m")
        assert rc == 0, err
        asked = [p for _, p, _ in s.log]
        assert not any("passwd" in p or "b.safetensors" in p or "c\t" in p or "%09" in p for p in asked), asked


def test_a_hub_error_names_no_signature(monkeypatch, capsys):
    """huggingface_hub follows an API redirect and its error text names the URL it was sent to, a presigned
    signature included: printed as it was. Now redacted as every URL ckptstat prints."""
    with Server(FIX, hub={"org/m": os.path.dirname(WEIGHTS)},
                redirects={p: "http://127.0.0.1:1/x?sig=SECRET1" for p in ("/api/models/org/m",
                                                                            "/api/models/org/m/revision/main",
                                                                            "/api/models/org/m/tree/main")}) as s:
        monkeypatch.setenv("HF_ENDPOINT", s.url)
        err = one_line(*cli(capsys, "summary", "hf://org/m")[::2])
        assert "SECRET1" not in err


def test_a_missing_file_url_says_what_the_server_said(capsys):
    """`summary URL` of a file the server answers 404 said "no such file or folder" (a local path's words); now the
    server's, as docs/remote.md states them."""
    with Scripted({"/m/": page_route(links("model.safetensors"))}) as s:
        err = one_line(*cli(capsys, "summary", s.url + "/m/gone.safetensors")[::2])
        assert err.endswith("gone.safetensors: not found (HTTP 404)\n")
