"""A Hugging Face cache repository as huggingface_hub writes it (file_download.py: `models--org--name/blobs/<sha256>`,
`refs/main`, `snapshots/<rev>/<file> -> ../../blobs/<sha256>`, relative links), for tests/test_hostile_links.py and
tests/hostile_corpus_polyglots.py. Not collected by pytest (no test_ prefix)."""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

REV = "0123456789abcdef0123456789abcdef01234567"


def hf_repo(cache: Path, files: dict[str, bytes], name: str = "models--org--name") -> Path:
    """Writes `files` (snapshot-relative name -> bytes) into the cache under `cache`; returns the snapshot folder."""
    repo = cache / name
    snap = repo / "snapshots" / REV
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(REV)
    for rel, data in files.items():
        sha = hashlib.sha256(data).hexdigest()
        (repo / "blobs" / sha).write_bytes(data)
        link = snap / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(os.path.relpath(repo / "blobs" / sha, link.parent), link)
    return snap


def hostile_blobs(cache: Path, links: dict[str, str], name: str = "models--evil--repo") -> Path:
    """A repository whose `blobs` is a link to `/`, and snapshot files linking through it to absolute paths
    (`links`: snapshot name -> absolute target): every target would be "inside the snapshot's blobs"."""
    repo = cache / name
    snap = repo / "snapshots" / REV
    snap.mkdir(parents=True)
    os.symlink("/", repo / "blobs")
    for rel, target in links.items():
        os.symlink("../../blobs" + target, snap / rel)
    return snap
