"""Servers that lie, trickle, hang up or redirect (issue 31; docs/remote.md, "Redirects" and "Errors and
bounds"): every case on real loopback servers (tests/remote_server.py) through the CLI. Time bounds here are
generous "gave up, did not hang" margins, never measurements."""
from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from remote_server import Server

from ckptstat import sources
from ckptstat.analysis.summary import summarize
from ckptstat.cli import main
from ckptstat.core.switches import Switches, set_switches
from ckptstat.formats.registry import open_checkpoint
from ckptstat.sources import hub, redirects

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIX = os.path.realpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures"))
FILE = "/bert-tiny/model.safetensors"
TOKEN = "hf_test_token_0123456789"


@pytest.fixture(autouse=True)
def fresh_sources(monkeypatch):
    sources.reset()
    set_switches(Switches())
    yield
    sources.reset()


def cli(capsys, *args: str) -> tuple[int, str, str, float]:
    sources.reset()
    t0 = time.monotonic()
    rc = main(list(args))
    out, err = capsys.readouterr()
    return rc, out, err, time.monotonic() - t0


def one_line_error(rc: int, err: str) -> None:
    assert rc in (1, 2) and err.count("\n") == 1 and "internal error" not in err, err   # scan: 2


# ---------------------------------------------------------------------------------------------
# lies, trickles, hang-ups

@pytest.mark.parametrize("command", ["summary", "scan"])
def test_a_range_reply_claiming_gigabytes_is_refused_unread(capsys, command):
    with Server(FIX, claim=4 << 30) as s:   # Content-Range and Content-Length: 4 GiB more than asked, and sent
        rc, out, err, _ = cli(capsys, command, s.url + FILE)
        one_line_error(rc, err)
        assert "answered a range request for bytes 0-" in err
        assert sources.METER.bytes == 0   # refused from the headers: nothing of the body read, nothing allocated


@pytest.mark.parametrize(("ranges", "flags"), [(True, ()), (False, ("--allow-full-download",))])
def test_a_gzip_bomb_is_refused_uninflated(capsys, ranges, flags):
    """A reply with Content-Encoding: gzip although identity was asked, its 256 KB body inflating to 256 MiB of zeros:
    aiohttp inflated it (a 200 under --allow-full-download was spooled whole to a temporary file: 1 GiB for a 1 MB
    body, then "the download ended after 1,073,741,824 of 1,043,656 bytes"). Now refused from the headers, nothing of
    the body read; the server's log shows what was asked."""
    with Server(FIX, gzip=256 << 20, ranges=ranges) as s:
        rc, out, err, _ = cli(capsys, *flags, "summary", s.url + FILE)
        one_line_error(rc, err)
        assert "Content-Encoding 'gzip'" in err and sources.METER.bytes == 0
        assert all(r.startswith("bytes=") for _, _, r in s.log) and len(s.log) <= 3   # (a range asked; no retries)
        p = subprocess.run([sys.executable, "-m", "ckptstat", *flags, "scan", s.url + FILE], capture_output=True,
                           text=True, timeout=120, env={**os.environ, "PYTHONPATH": ROOT})   # as users start it
        one_line_error(p.returncode, p.stderr)
        assert "Content-Encoding 'gzip'" in p.stderr


@pytest.mark.parametrize("command", ["summary", "stats"])
def test_a_server_cutting_ranges_short_is_an_error_not_the_files_end(capsys, command):
    """A 206 of one byte a request, its Content-Range saying so and the file's true size: taken for the file's end,
    "file is 83872 bytes, too short for a safetensors header". Now an error naming the cut range; the server's log
    shows the ranges asked were longer than the replies."""
    with Server(FIX, short=1) as s:
        rc, out, err, _ = cli(capsys, command, s.url + FILE)
        one_line_error(rc, err)
        assert "with bytes 0-0 only" in err and "too short" not in err
        assert any(r != "bytes=0-0" for _, _, r in s.log)


def test_a_trickling_server_meets_the_deadline(capsys):
    with Server(FIX, trickle=0.3) as s:
        rc, out, err, took = cli(capsys, "--limit", "remote_seconds=2", s.url + FILE)
        one_line_error(rc, err)
        assert "gave up" in err and "--limit remote_seconds" in err
        assert took < 30


def test_a_trickling_server_is_a_timeout_without_a_deadline(capsys, monkeypatch):
    # no byte is ever late by read_timeout, which is all aiohttp's sock_read sees: the reply's rate is what fails
    monkeypatch.setattr(sources.SETTINGS, "read_timeout", 0.5)
    monkeypatch.setattr(sources.SETTINGS, "backoff", 0.01)
    with Server(FIX, trickle=0.1) as s:
        rc, out, err, took = cli(capsys, s.url + FILE)
        one_line_error(rc, err)
        assert "timed out, after 3 attempts" in err
        assert took < 30


def test_a_server_that_hangs_up_fails_fast(capsys):
    with Server(FIX, drop=True) as s:   # default retry settings: two retries, 0.5 s then 1 s
        rc, out, err, took = cli(capsys, s.url + FILE)
        one_line_error(rc, err)
        assert "connection failed" in err and "after 3 attempts" in err
        assert s.requests["GET"] <= 6   # 3 attempts (aiohttp itself retries a pooled connection's hang-up once)
        assert took < 15


# ---------------------------------------------------------------------------------------------
# redirects

def test_redirect_to_file_is_refused_at_once(capsys):
    with Server(FIX, redirects={FILE: "file:///etc/passwd"}) as s:
        rc, out, err, took = cli(capsys, s.url + FILE)
        one_line_error(rc, err)
        assert "refused a redirect to file:///etc/passwd" in err
        assert s.requests["GET"] == 1   # never retried


def test_redirect_within_the_origin_is_followed(capsys):
    with Server(FIX, redirects={"/moved.safetensors": FILE}) as s:
        rc, out, err, _ = cli(capsys, "--json", s.url + "/moved.safetensors")
        assert rc == 0, err
        assert json.loads(out)["dtypes"] == summarize(open_checkpoint(FIX + FILE))["dtypes"]


def test_redirect_to_another_port_is_refused_unless_allowed(capsys):
    with Server(FIX) as inner, Server(FIX, redirects={FILE: inner.url + FILE}) as outer:
        rc, out, err, _ = cli(capsys, outer.url + FILE)
        one_line_error(rc, err)
        assert "another host or port" in err and "--allow-external" in err
        assert inner.requests["GET"] == 0   # the internal server never heard of it
        rc, out, err, _ = cli(capsys, "--allow-external", outer.url + FILE)
        assert rc == 0, err
        assert inner.requests["GET"] > 0


def test_a_public_host_never_redirects_inside(capsys, monkeypatch):
    # Loopback plays both parts: 127.0.0.1 is classified public (the injected classification), and the
    # redirect names `localhost`, which is loopback. Refused even with --allow-external.
    real = redirects.address_class

    async def played(host: str) -> str:
        return "public" if host == "127.0.0.1" else await real(host)

    monkeypatch.setattr(redirects, "address_class", played)
    with Server(FIX) as inner, Server(FIX, redirects={FILE: f"http://localhost:{inner.url.rsplit(':', 1)[1]}{FILE}"}) as outer:
        rc, out, err, _ = cli(capsys, "--allow-external", outer.url + FILE)
        one_line_error(rc, err)
        assert "public host may not redirect to a loopback, private or link-local address" in err
        assert inner.requests["GET"] == 0


def test_policy_cases():
    async def public(host: str) -> str:   # no DNS in tests: every name public, literals as they are
        return redirects._literal_class(host) or "public"

    def check(first: str, there: str, hosts: tuple[str, ...] = (), allow: bool = False) -> str:
        old, redirects.address_class = redirects.address_class, public
        try:
            asyncio.run(redirects.check(first, first, there, hosts, allow))
            return "followed"
        except redirects.RedirectRefused as e:
            return str(e)
        finally:
            redirects.address_class = old

    resolve = "https://huggingface.co/org/m/resolve/main/model.safetensors"
    assert check(resolve, "https://cdn-lfs-us-1.hf.co/repos/x?sig=1", hub.HUB_HOSTS) == "followed"
    assert check(resolve, "https://cas-bridge.xethub.hf.co/xet-bridge-us/x", hub.HUB_HOSTS) == "followed"
    assert check(resolve, "https://huggingface.co/org/renamed/resolve/main/x") == "followed"   # same origin
    assert "another host" in check(resolve, "https://evil.example/x", hub.HUB_HOSTS)
    assert "another host" in check(resolve, "https://hf.co.evil.example/x", hub.HUB_HOSTS)
    assert "plain http" in check(resolve, "http://cdn-lfs.hf.co/x", hub.HUB_HOSTS)
    for inside in ("http://169.254.169.254/latest/meta-data/", "http://10.0.0.5/x", "http://192.168.1.1/x",
                   "http://[::1]/x", "http://[::ffff:127.0.0.1]/x", "http://localhost/x", "http://0.0.0.0/x"):
        assert "public host may not redirect" in check("http://example.org/m.bin", inside, allow=True), inside
    assert "http(s) URLs only" in check("http://example.org/m.bin", "file:///etc/passwd", allow=True)
    assert "http(s) URLs only" in check("http://example.org/m.bin", "ftp://example.org/m.bin", allow=True)


@pytest.fixture
def hub_and_cdn(monkeypatch):
    repos = {"org/bert": os.path.join(FIX, "bert-tiny")}
    with Server(FIX, hub=repos) as cdn, Server(FIX, token=TOKEN, hub=repos, cdn=cdn.url) as api:
        monkeypatch.setenv("HF_ENDPOINT", api.url)
        monkeypatch.setenv("HF_TOKEN", TOKEN)
        yield api, cdn


def test_hf_follows_the_hubs_cdn_and_nothing_else(hub_and_cdn, capsys, monkeypatch):
    api, cdn = hub_and_cdn
    rc, out, err, _ = cli(capsys, "hf://org/bert/model.safetensors")   # the CDN is on another port: not the Hub's
    one_line_error(rc, err)
    assert "another host or port" in err and cdn.requests["GET"] == 0
    monkeypatch.setattr(hub, "HUB_HOSTS", hub.HUB_HOSTS + (f"127.0.0.1:{cdn.url.rsplit(':', 1)[1]}",))
    rc, out, err, _ = cli(capsys, "--json", "hf://org/bert/model.safetensors")
    assert rc == 0, err
    assert json.loads(out)["dtypes"] == summarize(open_checkpoint(FIX + FILE))["dtypes"]
    assert cdn.requests["GET"] > 0
    assert set(cdn.auth_seen) == {None}   # the token stays with the Hub
