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
loopback. Known gap: a name is resolved here and again by aiohttp when it connects; a DNS server that
answers differently the second time (DNS rebinding) is not caught.
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


async def _resolve_class(host: str) -> str:
    literal = _literal_class(host)
    if literal is not None:
        return literal
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError:
        return "public"   # unresolvable: the connection will fail; nothing internal is reached
    classes = {_literal_class(str(info[4][0])) for info in infos}
    return "internal" if "internal" in classes else "public"


async def address_class(host: str) -> str:
    """'public', or 'internal' (loopback, private, link-local, reserved...): the one classification."""
    return await _resolve_class(host)


def _host_allowed(host: str, port: int, patterns: Iterable[str]) -> bool:
    """A host matching one of `patterns` (fnmatch, `*.hf.co`; `host:port` to name a port too)."""
    return any(fnmatch.fnmatchcase(f"{host}:{port}" if ":" in p else host, p.lower()) for p in patterns)


async def check(first: str, here: str, there: str, hosts: Iterable[str], allow_external: bool) -> None:
    """Raise RedirectRefused unless the redirect from `here` to `there` (while reading `first`, the URL the
    user or the source named) passes the policy above."""
    def refuse(why: str) -> RedirectRefused:
        return RedirectRefused(redact(first), f"refused a redirect to {redact(there)}: {why}")

    to, start = origin(there), origin(first)
    if to[0] not in ("http", "https"):
        raise refuse(f"ckptstat follows redirects to http(s) URLs only ({to[0] or 'no scheme'}:// is not)")
    if origin(here)[0] == "https" and to[0] == "http":
        raise refuse("an https URL may not redirect to plain http")
    if to == start:
        return
    if not (allow_external or _host_allowed(to[1], to[2], hosts)):
        raise refuse(f"it leads to another host or port than {start[1]}:{start[2]} (docs/remote.md, \"Redirects\"; "
                     "--allow-external follows it)")
    if to[1] != start[1] and await address_class(start[1]) == "public" and await address_class(to[1]) != "public":
        raise refuse("a public host may not redirect to a loopback, private or link-local address")


def check_blocking(first: str, here: str, there: str, hosts: Iterable[str], allow_external: bool) -> None:
    """`check` from a thread that runs no event loop (sources/threaded.py's value reads): the same rules, run to
    their end on an event loop of its own."""
    asyncio.run(check(first, here, there, hosts, allow_external))
