"""Issue 35: range GETs (`stats` of a URL: the headers, and values in ranges of at least 1 MiB into the chunk buffer)
go through the threaded http.client path (sources/threaded.py), or all through aiohttp (sources/http.py) with
SETTINGS.threaded off, under one policy. Every case on real loopback servers (tests/remote_server.py); the servers
misbehave on the value requests only (`hostile_from`), so the headers are read and the values are what meets the lie.
Each case runs with both clients (`client`: "threaded", the default, and "aiohttp", SETTINGS.threaded off) and checks
that both give the same report or the same one-line error. The server's log tells which client sent a request: each
names ckptstat and its library in its User-Agent (aiohttp, http.client). No wall-clock bounds here."""
from __future__ import annotations

import asyncio
import copy
import json
import os
import sys
import threading
import time

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from remote_server import Server
from test_remote import fresh_sources  # noqa: F401  (autouse: empty caches, quick retries, no full downloads)

from ckptstat import sources
from ckptstat.cli import main
from ckptstat.sources import redirects
from ckptstat.sources.http import Slots

BIG = 1 << 20    # what the server counts as a value request (sources/remote.py DIRECT: reads fetched into the buffer)
CLIENTS = ["threaded", "aiohttp"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A safetensors file whose 16-bit tensors' values are read in ranges of 1-2 MiB into the chunk buffer (the 16-bit
    kernel's reads, kernel16.py: `Blob.read_into`; F32's too: kernel32 reads a URL a chunk at a time), one tiny tensor in
    the header's window, and a copy of it under another path (a redirect's target)."""
    import torch
    from safetensors.torch import save_file

    root = tmp_path_factory.mktemp("values")
    g = torch.Generator().manual_seed(0)
    tensors = {"model.embed_tokens.weight": (torch.randn(1 << 20, generator=g) * 0.02).bfloat16().reshape(-1, 64),
               "model.layers.0.mlp.up_proj.weight": torch.randn(1 << 20, generator=g).half().reshape(-1, 64),
               "model.norm.weight": torch.randn(64, generator=g).half()}
    for sub in ("m", "copy"):
        (root / sub).mkdir()
        save_file(tensors, str(root / sub / "model.safetensors"))
    return str(root)


def stats(capsys, *args: str) -> tuple[int, str, str]:
    sources.reset()
    rc = main(["stats", "--json", *args])
    out, err = capsys.readouterr()
    return rc, out, err


def plain(out: str, url: str = "", local: str = "") -> dict:
    report = json.loads(out.replace(url, local) if url else out)
    report.pop("seconds", None)
    report.pop("fetched", None)
    return report


def use(monkeypatch, client: str) -> None:
    monkeypatch.setattr(sources.SETTINGS, "threaded", client == "threaded")


def value_requests(s: Server) -> list[tuple[str, str, str | None]]:
    """(path, Range, User-Agent) of the requests for 1 MiB or more, folders' listing pages aside (one is read whole, up
    to 4 MiB: sources/pages.py PAGE_BYTES)."""
    out = []
    for (_, path, r), agent in zip(s.log, s.agents):
        if r.startswith("bytes=") and not path.endswith("/"):
            a, b = r[len("bytes="):].split("-")
            if b and int(b) - int(a) + 1 >= BIG:
                out.append((path, r, agent))
    return out


def threaded_sent(s: Server, client: str) -> None:
    """The value requests and the headers' reads came from the client asked for (its User-Agent: ckptstat's, then
    http.client's or aiohttp's)."""
    vals = value_requests(s)
    assert vals, s.log
    library = "python-http.client/" if client == "threaded" else "aiohttp/"
    assert all(agent and agent.startswith("ckptstat/") and library in agent for _, _, agent in vals), vals
    heads = [agent for (_, _, r), agent in zip(s.log, s.agents) if r == "bytes=0-65535"]   # (none where redirected)
    assert all(agent and library in agent for agent in heads), heads


@pytest.mark.parametrize("client", CLIENTS)
def test_values_over_either_client_equal_local(folder, capsys, monkeypatch, client):
    use(monkeypatch, client)
    local = plain(stats(capsys, os.path.join(folder, "m"))[1])
    with Server(folder) as s:
        rc, out, err = stats(capsys, s.url + "/m/")
        assert rc == 0, err
        assert plain(out, s.url, folder) == local
        threaded_sent(s, client)
        fetched = json.loads(out)["fetched"]
        assert fetched["requests"] == sum(s.requests.values())   # (the server's bytes count the listing page too)


@pytest.mark.parametrize("command", [["stats", "--json"], ["summary", "--json"], ["summary"], ["tensors"]])
def test_range_reads_import_no_aiohttp(folder, command):
    """A command that reads a URL (a file, an index's shards, a folder's listing page: one more GET) never imports
    aiohttp nor fsspec's HTTP filesystem (their import was 0.2-0.4 s of its start). Whole processes, as users start
    them (the quick path's os._exit included: the modules are written out before the command runs)."""
    import subprocess

    probe = ("import atexit, os, sys; from ckptstat.__main__ import run; "
             "write = lambda: open(os.environ['MODULES'], 'w').write(' '.join(sorted(sys.modules))); "
             "os._exit = (lambda real: lambda code: (write(), real(code)))(os._exit); atexit.register(write); run()")
    with Server(folder) as s:
        for url in (s.url + "/m/model.safetensors", s.url + "/m/"):
            mods = os.path.join(folder, "modules.txt")
            r = subprocess.run([sys.executable, "-c", probe, *command, url], capture_output=True, text=True,
                               env=dict(os.environ, MODULES=mods), timeout=300)
            assert r.returncode == 0, r.stderr
            loaded = set(open(mods).read().split())
            assert "aiohttp" not in loaded and "fsspec.implementations.http" not in loaded, url


@pytest.mark.parametrize("client", CLIENTS)
def test_a_host_name_is_connected_through_the_policys_resolution(folder, capsys, monkeypatch, client):
    """A URL by host name (`localhost`, which the user named: loopback allowed) is read through the one resolution
    (redirects.addresses: aiohttp's resolver and the threaded client's connect), every address tried in turn."""
    use(monkeypatch, client)
    asked = []
    real = redirects.addresses

    def dns(host: str, port: int, *how: int) -> list[tuple[int, str]]:
        asked.append((host, port))
        return real(host, port, *how)

    monkeypatch.setattr(redirects, "addresses", dns)
    local = plain(stats(capsys, os.path.join(folder, "m"))[1])
    with Server(folder) as s:
        url = s.url.replace("127.0.0.1", "localhost")
        rc, out, err = stats(capsys, url + "/m/")
        assert rc == 0, err
        assert plain(out, url, folder) == local
        threaded_sent(s, client)
        assert ("localhost", int(s.url.rsplit(":", 1)[1])) in asked


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("behaviour", [{"cut": 2}, {"failures": {"/m/model.safetensors": [429, 503]}, "retry_after": "0"},
                                       {"redirects": {"/m/model.safetensors": "/copy/model.safetensors"}}],
                         ids=["dropped-mid-body", "429-503", "redirect-same-origin"])
def test_values_survive_what_is_retried_or_followed(folder, capsys, monkeypatch, client, behaviour):
    """A reply cut mid-body (the connection closed after half of it), 429 then 503, a redirect within the origin: the
    value reads retry or follow, and the report is the local folder's bit for bit."""
    use(monkeypatch, client)
    local = plain(stats(capsys, os.path.join(folder, "m"))[1])
    with Server(folder, hostile_from=BIG, **copy.deepcopy(behaviour)) as s:
        rc, out, err = stats(capsys, s.url + "/m/")
        assert rc == 0, err
        assert plain(out, s.url, folder) == local
        threaded_sent(s, client)
        retries = json.loads(out)["fetched"]["retries"]
        if "redirects" in behaviour:
            assert retries == 0 and {p for p, _, _ in value_requests(s)} == {"/m/model.safetensors",
                                                                            "/copy/model.safetensors"}
        else:
            assert retries == 2


def one_line(rc: int, err: str) -> str:
    assert rc == 1 and err.count("\n") == 1 and "Traceback" not in err and "internal error" not in err, err
    return err


@pytest.mark.parametrize("behaviour, says", [
    ({"claim": 4 << 30}, "answered a range request for bytes"),                 # Content-Range claims 4 GiB more
    ({"overlong": 1 << 20}, "answered a range request for bytes"),              # a MiB more than its Content-Range
    ({"short": 1 << 19}, "only"),                                               # a range cut short, the file goes on
    ({"gzip": 1 << 20}, "Content-Encoding 'gzip'"),                              # identity asked
    ({"failures": {"/m/model.safetensors": [503] * 10}}, "HTTP 503 Service Unavailable, after 3 attempts"),
    ({"cut": 10}, "connection failed"),                          # every value reply cut: retried, gives up
    ({"redirects": {"/m/model.safetensors": "file:///etc/passwd"}}, "refused a redirect to file:///etc/passwd"),
    ({"ranges": False}, "the server ignores range requests"),                  # 200, the whole file
], ids=["claim", "overlong", "short", "gzip", "503", "cut-always", "redirect-file", "ignores-range"])
def test_values_refused_as_both_clients_refuse_them(folder, capsys, monkeypatch, behaviour, says):
    """A server lying about the values (or failing them) gets the same one-line error from the threaded client as from
    aiohttp, and the threaded client read nothing of a body refused from its headers."""
    errors = {}
    for client in CLIENTS:
        use(monkeypatch, client)
        with Server(folder, hostile_from=BIG, **copy.deepcopy(behaviour)) as s:
            rc, out, err = stats(capsys, s.url + "/m/")
            errors[client] = one_line(rc, err).replace(s.url, "URL")
            threaded_sent(s, client)
            if "claim" in behaviour or "overlong" in behaviour or "gzip" in behaviour:
                assert sources.METER.bytes < BIG   # the headers' window only: nothing of a refused value body
    assert says in errors["threaded"]
    if "cut" in behaviour:   # (the exception's name differs: http.client's IncompleteRead, aiohttp's ClientPayloadError)
        errors = {k: v.split(" (")[0] for k, v in errors.items()}
    assert errors["threaded"] == errors["aiohttp"]


@pytest.mark.parametrize("client", CLIENTS)
def test_a_value_reply_of_the_whole_file_is_spooled_when_allowed(folder, capsys, monkeypatch, client):
    """The server answers the value requests with the whole file (200): with --allow-full-download it is spooled (one
    full download a value read) and the report is the local one."""
    use(monkeypatch, client)
    local = plain(stats(capsys, os.path.join(folder, "m"))[1])
    with Server(folder, hostile_from=BIG, ranges=False) as s:
        rc, out, err = stats(capsys, "--allow-full-download", s.url + "/m/")
        assert rc == 0, err
        assert plain(out, s.url, folder) == local
        assert json.loads(out)["fetched"]["full_downloads"] == len(value_requests(s)) >= 1   # (then read from the spool)
        threaded_sent(s, client)


@pytest.mark.parametrize("client", CLIENTS)
def test_a_trickling_value_reply_is_a_timeout(folder, capsys, monkeypatch, client):
    """A server sending the values a byte every 50 ms, never silent for read_timeout: the reply's rate fails it
    (min_rate raised so that the test waits read_timeout, not a MiB at 64 KiB/s)."""
    use(monkeypatch, client)
    monkeypatch.setattr(sources.SETTINGS, "read_timeout", 0.3)
    monkeypatch.setattr(sources.SETTINGS, "min_rate", 1 << 30)
    with Server(folder, hostile_from=BIG, trickle=0.05) as s:
        rc, out, err = stats(capsys, s.url + "/m/")
        assert "timed out, after 3 attempts" in one_line(rc, err)
        threaded_sent(s, client)


@pytest.mark.parametrize("client", CLIENTS)
def test_a_reply_trickling_its_headers_is_a_timeout(folder, capsys, monkeypatch, client):
    """The twelfth red-team pass (docs/security.md): a server sending a reply's status line and headers a byte every
    50 ms, never silent for read_timeout, before the body's rate rule applies: each reply was waited for as long as
    its headers took (here ~7 s each, and `stats` went on; a long header at a byte a second: hours, the command's
    4-hour deadline the only bound). Now the headers must all arrive within read_timeout of the request."""
    use(monkeypatch, client)
    monkeypatch.setattr(sources.SETTINGS, "read_timeout", 0.3)
    monkeypatch.setattr(sources.SETTINGS, "backoff", 0.01)
    with Server(folder, hostile_from=BIG, trickle_headers=0.05) as s:
        t0 = time.monotonic()
        rc, out, err = stats(capsys, "--limit", "remote_seconds=20", s.url + "/m/")
        assert "timed out, after 3 attempts" in one_line(rc, err) and time.monotonic() - t0 < 15, err
        threaded_sent(s, client)


def test_a_trickling_value_reply_meets_the_deadline(folder, capsys):
    with Server(folder, hostile_from=BIG, trickle=0.2) as s:
        rc, out, err = stats(capsys, "--limit", "remote_seconds=2", s.url + "/m/")
        assert "gave up" in one_line(rc, err) and "--limit remote_seconds" in err
        threaded_sent(s, "threaded")


@pytest.mark.parametrize("client", CLIENTS)
def test_a_value_redirect_off_the_origin_is_refused(folder, capsys, monkeypatch, client):
    """The values redirected to another port: refused unless --allow-external (then followed, the report the local
    one); the other server hears of it only then."""
    use(monkeypatch, client)
    local = plain(stats(capsys, os.path.join(folder, "m"))[1])
    with Server(folder) as inner, \
            Server(folder, hostile_from=BIG, redirects={"/m/model.safetensors": inner.url + "/m/model.safetensors"}) as outer:
        rc, out, err = stats(capsys, outer.url + "/m/")
        assert "another host or port" in one_line(rc, err) and "--allow-external" in err
        assert inner.requests["GET"] == 0
        rc, out, err = stats(capsys, "--allow-external", outer.url + "/m/")
        assert rc == 0, err
        assert plain(out, outer.url, folder) == local
        threaded_sent(inner, client)


@pytest.mark.parametrize("client", CLIENTS)
def test_a_public_value_host_never_redirects_inside(folder, capsys, monkeypatch, client):
    """127.0.0.1 played as a public host (redirects.address_class replaced, as tests/test_remote_policy.py does), the
    values redirected to `localhost`: refused even with --allow-external, by the threaded client's check too."""
    use(monkeypatch, client)
    real = redirects.address_class

    async def played(host: str) -> str:
        return "public" if host == "127.0.0.1" else await real(host)

    monkeypatch.setattr(redirects, "address_class", played)
    with Server(folder) as inner, Server(folder, hostile_from=BIG, redirects={
            "/m/model.safetensors": f"http://localhost:{inner.url.rsplit(':', 1)[1]}/m/model.safetensors"}) as outer:
        rc, out, err = stats(capsys, "--allow-external", outer.url + "/m/")
        assert "public host may not redirect to a loopback" in one_line(rc, err)
        assert inner.requests["GET"] == 0
        threaded_sent(outer, client)


def rebinding_dns(monkeypatch) -> list[str]:
    """127.0.0.1 played as a public host, and a DNS server for `rebind.test` that answers a public address to the
    redirect's check (which asks without a port) and loopback to the connection (which names its port): DNS
    rebinding, each check and its connection answered differently, however the requests interleave. The names asked."""
    real_class, real_addresses = redirects.address_class, redirects.addresses
    asked: list[str] = []

    async def played(host: str) -> str:
        return "public" if host == "127.0.0.1" else await real_class(host)

    def dns(host: str, port: int, *how: int) -> list[tuple[int, str]]:
        if host != "rebind.test":
            return real_addresses(host, port, *how)
        asked.append(host)
        return [(2, "93.184.215.14" if port == 0 else "127.0.0.1")]   # (2: AF_INET)

    monkeypatch.setattr(redirects, "address_class", played)
    monkeypatch.setattr(redirects, "addresses", dns)
    monkeypatch.setattr(redirects, "PUBLIC_ONLY", set())
    return asked


@pytest.mark.parametrize("client", CLIENTS)
def test_a_redirect_to_a_name_that_rebinds_to_loopback_is_refused(folder, capsys, monkeypatch, client):
    """The value requests redirected from a public host to `rebind.test`, whose DNS answers a public address for the
    redirect's check and loopback for the connection: refused when connecting (each client connects to the addresses
    the policy resolved and checked, never to a second answer), one line, the loopback server never reached."""
    use(monkeypatch, client)
    asked = rebinding_dns(monkeypatch)
    with Server(folder) as inner, Server(folder, hostile_from=BIG, redirects={
            "/m/model.safetensors": f"http://rebind.test:{inner.url.rsplit(':', 1)[1]}/m/model.safetensors"}) as outer:
        rc, out, err = stats(capsys, "--allow-external", outer.url + "/m/")
        assert "rebind.test now resolves to 127.0.0.1, not a public address" in one_line(rc, err)
        assert "DNS rebinding" in err and "refused a redirect to http://rebind.test" in err
        assert inner.requests["GET"] == 0 and len(asked) >= 2
        threaded_sent(outer, client)


def test_hf_values_reach_the_cdn_without_the_token(folder, capsys, monkeypatch):
    """hf://: every range read (the header's window and the values) is the Hub's resolve route (the token sent),
    redirected to the CDN (another origin: the token dropped), both hops by the threaded client; the report is the
    local one."""
    from ckptstat.sources import hub
    from ckptstat.sources.threaded import ThreadedClient

    token = "hf_test_token_0123456789"
    repos = {"org/m": os.path.join(folder, "m")}
    local = plain(stats(capsys, os.path.join(folder, "m"))[1])
    with Server(folder, hub=repos) as cdn, Server(folder, token=token, hub=repos, cdn=cdn.url) as api:
        monkeypatch.setenv("HF_ENDPOINT", api.url)
        monkeypatch.setenv("HF_TOKEN", token)
        monkeypatch.setattr(hub, "HUB_HOSTS", hub.HUB_HOSTS + (f"127.0.0.1:{cdn.url.rsplit(':', 1)[1]}",))
        calls = []
        real = ThreadedClient.get
        monkeypatch.setattr(ThreadedClient, "get",
                            lambda self, ask: calls.append((ask.url, ask.headers["Range"])) or real(self, ask))
        rc, out, err = stats(capsys, "hf://org/m")
        assert rc == 0, err
        assert plain(out, "hf://org/m", os.path.join(folder, "m")) == local
        values = {r for _, r, _ in value_requests(cdn)}   # (hf:// sends huggingface_hub's User-Agent: counted instead)
        assert len(values) == 2 and values <= {r for _, r in calls}   # (the header's window too, the same way)
        assert {u for u, _ in calls} == {api.url + "/org/m/resolve/main/model.safetensors"}
        resolves = [a for (_, p, r), a, agent in zip(api.log, api.auth_seen, api.agents) if r in values]
        assert len(resolves) == len(values)   # each value read's first hop: the Hub's resolve route
        assert all(a == f"Bearer {token}" for a in resolves)   # ... with the token (the stand-in answers 401 without)

        assert set(cdn.auth_seen) == {None}   # the CDN's: never


def test_requests_in_flight_stay_bounded_across_both_clients(tmp_path, capsys, monkeypatch):
    """SETTINGS.concurrency is an origin's bound: stats of many shards, some shards' headers read while other shards'
    values are, each request answered after 50 ms (test_slots_bound_threads_and_coroutines_together: the bound holds
    across both clients, a folder listing's aiohttp requests beside the threaded ones)."""
    import numpy as np
    from safetensors.numpy import save_file

    monkeypatch.setattr(sources.SETTINGS, "concurrency", 3)
    weight_map = {}
    for i in range(8):
        shard = f"model-{i + 1:05d}-of-00008.safetensors"
        save_file({f"layers.{i}.weight": np.full((1 << 19, 2), i, np.float16)}, str(tmp_path / shard))   # 2 MiB
        weight_map[f"layers.{i}.weight"] = shard
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    with Server(str(tmp_path), stall=0.05) as s:
        rc, out, err = stats(capsys, s.url + "/model.safetensors.index.json")
        assert rc == 0, err
        assert [t["mean"] for t in json.loads(out)["tensors"]] == [float(i) for i in range(8)]
        threaded_sent(s, "threaded")
        assert s.max_in_flight <= 3


def test_slots_bound_threads_and_coroutines_together():
    """sources/http.py Slots: holders from threads and from an event loop's coroutines together never exceed n; a
    waiter that times out (a thread) or is cancelled (a coroutine) leaves no slot taken."""
    slots, lock, held, peak = Slots(3), threading.Lock(), [0], [0]

    def enter() -> None:
        with lock:
            held[0] += 1
            peak[0] = max(peak[0], held[0])

    def leave() -> None:
        with lock:
            held[0] -= 1

    def thread_work() -> None:
        for _ in range(50):
            with slots.hold(60):
                enter()
                threading.Event().wait(0.001)
                leave()

    async def coro_work() -> None:
        for _ in range(50):
            async with slots:
                enter()
                await asyncio.sleep(0.001)
                leave()

    async def both() -> None:
        await asyncio.gather(*(coro_work() for _ in range(4)), *(asyncio.to_thread(thread_work) for _ in range(4)))

    asyncio.run(both())
    assert 1 <= peak[0] <= 3 and held[0] == 0

    with slots.hold(1), slots.hold(1), slots.hold(1):   # all taken: a fourth times out, one cancelled gives up
        with pytest.raises(TimeoutError), slots.hold(0.01):
            pass

        async def cancelled() -> None:
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(slots.__aenter__(), 0.01)

        asyncio.run(cancelled())
    for _ in range(3):   # every slot free again
        with slots.hold(0):
            pass
    with slots.hold(0), slots.hold(0), slots.hold(0):
        pass
