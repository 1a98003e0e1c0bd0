"""Which HTTP redirects a remote read follows (docs/remote.md, "Redirects").

A server the user named may answer 3xx; following it blindly lets that server make ckptstat fetch, and
then describe or scan, bytes from somewhere the user never named: another host on the user's network
(server-side request forgery), a cloud metadata address, a `file://` path. So redirects are followed here,
one hop at a time (sources/http.py asks aiohttp not to), and each hop must pass `check`:

1. the new URL is http(s): a `file://` (or any other scheme) is refused at once, never retried;
2. an https URL never redirects to plain http;
3. it stays on the origin the user named (scheme, host and port), or its host is one the source allows
   (hf://: the Hub's CDN, `HUB_HOSTS` in sources/hub.py), or `--allow-external` was given;
4. whatever 3 allowed, a URL whose host is public never leads to one that is not: loopback, private
   (RFC 1918, fc00::/7), link-local (169.254/16: cloud metadata), CGNAT, reserved, unspecified. A host
   name counts as not public when any address it resolves to is not.

`address_class` is the one place that classifies a host; tests replace it to play a public origin on
loopback. A name 4 let through is resolved again when a connection to it is made: a DNS server that answers
with public addresses for the check and an internal one for the connection (DNS rebinding) would slip past a check
made once. So a host that passed 4 joins PUBLIC_ONLY, and every connection either client makes resolves its host
through `addresses` (aiohttp through http.py `_Resolver`, sources/threaded.py through `connect`), refusing a host of
PUBLIC_ONLY that resolves to any address that is not public (`Rebound`), and connecting to exactly the addresses it
classified, never to a second answer.
"""
from __future__ import annotations

import asyncio
import fnmatch
import ipaddress
import socket
from collections.abc import Iterable
from urllib.parse import urlsplit

from ..core.urls import redact
from ..errors import CheckpointError

MAX_REDIRECTS = 10   # aiohttp's and requests' default


class RedirectRefused(CheckpointError):
    """A redirect the policy does not follow: never retried."""


def origin(url: str) -> tuple[str, str, int]:
    """(scheme, host, port) as RFC 6454 compares them, the port made explicit."""
    u = urlsplit(url)
    s = u.scheme.lower()
    return s, (u.hostname or "").lower(), u.port or {"http": 80, "https": 443}.get(s, 0)


def _literal_class(host: str) -> str | None:
    """'public' or 'internal' for an IP literal or `localhost`, None for a name to resolve."""
    if host == "localhost" or host.endswith(".localhost"):
        return "internal"
    try:
        ip = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return "public" if ip.is_global and not ip.is_multicast else "internal"


def addresses(host: str, port: int, family: int = 0, flags: int = 0) -> list[tuple[int, str]]:
    """(family, address) of each address a connection to host:port may use, in getaddrinfo's order: the one
    resolution, shared by the policy's check and both clients' connections (tests replace it to play a DNS server).
    `family` and `flags` as getaddrinfo takes them (aiohttp asks with AI_ADDRCONFIG, http.client without)."""
    return [(info[0], str(info[4][0]))
            for info in socket.getaddrinfo(host, port, family=family, type=socket.SOCK_STREAM, flags=flags)]


async def _resolve_class(host: str) -> str:
    literal = _literal_class(host)
    if literal is not None:
        return literal
    try:
        found = await asyncio.to_thread(addresses, host, 0)
    except OSError:
        return "public"   # unresolvable: the connection will fail; nothing internal is reached
    classes = {_literal_class(address) for _, address in found}
    return "internal" if "internal" in classes else "public"


async def address_class(host: str) -> str:
    """'public', or 'internal' (loopback, private, link-local, reserved...): the one classification."""
    return await _resolve_class(host)


def _host_allowed(host: str, port: int, patterns: Iterable[str]) -> bool:
    """A host matching one of `patterns` (fnmatch, `*.hf.co`; `host:port` to name a port too)."""
    return any(fnmatch.fnmatchcase(f"{host}:{port}" if ":" in p else host, p.lower()) for p in patterns)


def refused(first: str, there: str, why: str) -> RedirectRefused:
    """The error of a redirect (to `there`, while reading `first`) the policy does not follow."""
    return RedirectRefused(redact(first), f"refused a redirect to {redact(there)}: {why}")


async def check(first: str, here: str, there: str, hosts: Iterable[str], allow_external: bool) -> None:
    """Raise RedirectRefused unless the redirect from `here` to `there` (while reading `first`, the URL the
    user or the source named) passes the policy above."""
    def refuse(why: str) -> RedirectRefused:
        return refused(first, there, why)

    try:
        to, start = origin(there), origin(first)
    except ValueError as e:   # a port that is no number, an unclosed [IPv6 literal: urlsplit's own words
        raise refuse(f"not a URL ({e})") from None
    if to[0] not in ("http", "https"):
        raise refuse(f"ckptstat follows redirects to http(s) URLs only ({to[0] or 'no scheme'}:// is not)")
    if origin(here)[0] == "https" and to[0] == "http":
        raise refuse("an https URL may not redirect to plain http")
    if to == start:
        return
    if not (allow_external or _host_allowed(to[1], to[2], hosts)):
        raise refuse(f"it leads to another host or port than {start[1]}:{start[2]} (docs/remote.md, \"Redirects\"; "
                     "--allow-external follows it)")
    if to[1] != start[1] and await address_class(start[1]) == "public":
        if await address_class(to[1]) != "public":
            raise refuse("a public host may not redirect to a loopback, private or link-local address")
        PUBLIC_ONLY.add(to[1])   # (its connections: public addresses only, whatever DNS answers next)


# Hosts a public host redirected to (rule 4 let them through): a connection to one goes to public addresses only.
PUBLIC_ONLY: set[str] = set()


class Rebound(Exception):
    """A host of PUBLIC_ONLY resolved, when a connection to it was made, to an address that is not public. Not an
    OSError, so that neither aiohttp nor a retry takes it for a failed connection: both clients turn it into
    RedirectRefused (`refused`), naming the URL."""


def rebound(first: str, here: str, e: Rebound) -> RedirectRefused:
    """The one-line error of a Rebound while reading `first` (at `here`, the URL a redirect led to, or `first`)."""
    return refused(first, here, str(e)) if here != first else RedirectRefused(redact(first), f"refused to connect: {e}")


def connectable(host: str, port: int, family: int = 0, flags: int = 0) -> list[tuple[int, str]]:
    """The addresses a connection to host:port goes to (`addresses`), those of a host in PUBLIC_ONLY checked: Rebound
    when any is not public (the check of the redirect saw public ones: DNS rebinding)."""
    found = addresses(host, port, family, flags)
    if host.lower() in PUBLIC_ONLY:
        inside = [a for _, a in found if _literal_class(a) != "public"]
        if inside:
            raise Rebound(f"{host} now resolves to {inside[0]}, not a public address (it resolved to public ones when "
                          "the redirect to it was checked: DNS rebinding)")
    return found


def connect(host: str, port: int, timeout: float | None, source: tuple[str, int] | None = None) -> socket.socket:
    """socket.create_connection to each address `connectable` returns in turn, an address literal (no second lookup):
    http.client's `_create_connection` (sources/threaded.py), so the connection goes where the check looked."""
    last: OSError | None = None
    for _, address in connectable(host, port):
        try:
            return socket.create_connection((address, port), timeout, source)
        except OSError as e:
            last = e
    raise last or OSError(f"{host}: no address to connect to")


def check_blocking(first: str, here: str, there: str, hosts: Iterable[str], allow_external: bool) -> None:
    """`check` from a thread that runs no event loop (sources/threaded.py's value reads): the same rules, run to
    their end on an event loop of its own."""
    asyncio.run(check(first, here, there, hosts, allow_external))
