"""A folder URL's listing page (sources/http.py `HttpTransport.ls`): how much of it is read, and its links."""
from __future__ import annotations

import html
import re
from urllib.parse import urlsplit

from ..core.urls import redact
from ..errors import CheckpointError

PAGE_BYTES = 1 << 22   # a listing page is read whole, up to this (real ones: a few KB to a few hundred)
# A listing page's links, as fsspec's HTTPFileSystem reads them (implementations/http.py `ex`, `ex2`)
_HREF = re.compile(r"""<(a|A)\s+(?:[^>]*?\s+)?(href|HREF)=["'](?P<url>[^"']+)""")
_PLAIN_URL = re.compile(r"""(?P<url>http[s]?://[-a-zA-Z0-9@:%_+.~#?&/=]+)""")


def page_links(url: str, page: bytes, ctype: str) -> list[str]:
    """A listing page's links, sorted, as fsspec's HTTPFileSystem.ls read them (`_ls_real`): in a page labelled
    text/html or not labelled, every `<a href>` (its entities decoded, as a browser reads it) and every plain http(s)
    URL in the text, a path from the host's root made absolute, a relative one joined to the folder; an absolute one
    kept when it is under the folder (http and https alike); `..` passed over. sources/listing.py then keeps the
    plain names under the folder (core/urls.py `under`)."""
    if ctype not in ("text/html", ""):
        return []
    text = page.decode("utf-8", "ignore")
    parts = urlsplit(url)
    folder = url.rstrip("/") + "/"
    out = set()
    for link in _PLAIN_URL.findall(text) + [html.unescape(m[2]) for m in _HREF.findall(text)]:
        if link.startswith("/") and len(link) > 1:
            link = f"{parts.scheme}://{parts.netloc}{link}"
        if link.startswith("http"):
            if link.replace("https", "http").startswith(folder.replace("https", "http")):
                out.add(link)
        elif link not in ("..", "../"):
            out.add(folder + link.lstrip("/"))
    return sorted(out)


def page_too_long(url: str) -> CheckpointError:
    return CheckpointError(redact(url), f"the folder's listing page is longer than {PAGE_BYTES:,} bytes")
