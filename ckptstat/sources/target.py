"""Where one URL's bytes come from: what the generic remote source (`remote.py`) and the hub's resolver
(`hub.py`) both speak, kept apart so that neither imports the other at module level."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Target:
    """Where one URL's bytes come from."""

    url: str                     # as the user (or an index) named it
    http_url: str | None = None  # http(s) and hf://: the URL range GETs go to
    headers: dict[str, str] = field(default_factory=dict)
    fs: Any = None               # other schemes: the fsspec filesystem and its path
    path: str = ""
    hint: str = ""               # said after an access-denied error
    hosts: tuple[str, ...] = ()  # hosts besides the URL's own a redirect may lead to (sources/redirects.py)
    size: int | None = None      # known from a listing (hf://: the repository's tree) before any request
    repo: str = ""                # hf://: the repository and revision as named (its files' replies say one commit)
