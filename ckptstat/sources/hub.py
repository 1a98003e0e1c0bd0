"""hf://org/model[@revision][/file]: a Hugging Face Hub repository read like a local model folder
(docs/remote.md).

huggingface_hub's `HfFileSystem` (an fsspec filesystem, huggingface_hub/hf_file_system.py) resolves
the repository and revision (`/api/models/{repo}/revision/{rev}`) and lists its files
(`/api/models/{repo}/tree/{rev}`); the bytes are read with range GETs on the file's resolve URL
(`{endpoint}/{repo}/resolve/{rev}/{file}`, `hf_hub_url`), which the Hub redirects to its CDN, with
the headers `build_hf_headers` makes: the token from HF_TOKEN or the hub's token cache, never printed.
The endpoint is HF_ENDPOINT, read when a URL is first opened (a mirror, or a test's stand-in).
Every reply of the resolve route names the commit at the revision's head (X-Repo-Commit): a repository's files
read in one command must come from one (sources/remote.py `Blob._http`; a push between two shards' reads).
"""
from __future__ import annotations

import os
import sys
import threading
from typing import Any

from ..core.urls import basename, redact, redact_text, under
from ..errors import CheckpointError, FileNotFound, missing_extra
from .meter import METER
from .target import Target

# Where the Hub's resolve URL redirects a file's bytes (its CDN: cdn-lfs.hf.co, cdn-lfs-us-1.hf.co, the Xet bridge
# cas-bridge.xethub.hf.co, the older cdn-lfs.huggingface.co): the hosts besides the endpoint's own that a redirect
# of an hf:// read may lead to (sources/redirects.py; still never from a public host to an internal one).
HUB_HOSTS = ("hf.co", "*.hf.co", "huggingface.co", "*.huggingface.co")
HINT = "; a gated or private repository needs a token: set HF_TOKEN or run `hf auth login`"
_fs: dict[str, Any] = {}
_lock = threading.Lock()


def _filesystem() -> Any:
    endpoint = os.environ.get("HF_ENDPOINT", "").rstrip("/") or None
    key = endpoint or ""
    with _lock:
        if key not in _fs:
            if "huggingface_hub" not in sys.modules:   # its settings are read when it is imported
                # huggingface_hub's request headers carry telemetry: torch's version and, since 1.x, the AI agent
                # running the process, found from a registry it fetches from {endpoint}/api/agent-harnesses on the
                # first request and caches under HF_HOME: a request to a path the user never named, and a file
                # written. Off unless the user's environment says otherwise (docs/remote.md).
                os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
            try:
                from huggingface_hub import HfFileSystem
            except ImportError:
                raise missing_extra("reading hf:// URLs", "huggingface_hub", "remote") from None
            _fs[key] = HfFileSystem(endpoint=endpoint, skip_instance_cache=True)
        return _fs[key]


def forget() -> None:
    with _lock:
        _fs.clear()


def _status(e: BaseException) -> int | None:
    while e is not None:
        response = getattr(e, "response", None)
        code = getattr(response, "status_code", None)
        if isinstance(code, int):
            return code
        e = e.__cause__ or e.__context__   # type: ignore[assignment]
    return None


def _error(url: str, e: Exception) -> CheckpointError:
    shown = redact(url)
    status = _status(e)
    if status in (401, 403):
        return CheckpointError(shown, f"access denied (HTTP {status}){HINT}")
    if isinstance(e, (FileNotFoundError, NotImplementedError)):
        text = str(e)
        why = "revision not found" if "revision not found" in text else \
              "repository not found" if "repository not found" in text or isinstance(e, NotImplementedError) else "not found"
        return FileNotFound(shown, why + (f" (HTTP {status})" if status else "") + (HINT if "repository" in why else ""))
    text = " ".join(redact_text(str(e)).split())[:120]
    return CheckpointError(shown, f"the Hub answered {type(e).__name__}{': ' + text if text else ''}")


def _cached(fs: Any) -> int:
    return len(getattr(fs, "_repo_and_revision_exists_cache", ())) + len(getattr(fs, "dircache", ()))


def _call(url: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
    """One HfFileSystem call, counted as a request when it asked the Hub (its caches grew or it failed):
    a resolved revision and a listed folder are answered from HfFileSystem's caches afterwards."""
    fs = _filesystem()
    before = _cached(fs)
    try:
        out = fn(*args, **kwargs)
    except CheckpointError:
        raise
    except Exception as e:  # noqa: BLE001 - requests' and huggingface_hub's errors, as one line
        METER.request(url)
        raise _error(url, e) from None
    if _cached(fs) != before:
        METER.request(url)
    return out


def target(url: str) -> Target:
    fs = _filesystem()   # (first: says so when huggingface_hub is missing)
    from huggingface_hub import hf_hub_url
    from huggingface_hub.utils import build_hf_headers

    rp = _call(url, fs.resolve_path, url)
    if not rp.path_in_repo:
        raise CheckpointError(redact(url), "is a repository, not a file")
    http_url = hf_hub_url(rp.repo_id, rp.path_in_repo, repo_type=rp.repo_type, revision=rp.revision, endpoint=fs.endpoint)
    # The file's size from the repository's tree, which the folder's listing (or the file's kind) already fetched:
    # a whole small file (an index, a config) is then one range request, not a first window and the rest.
    size = _call(url, fs.info, url).get("size")
    return Target(url, http_url=http_url, headers=dict(build_hf_headers()), hint=HINT, hosts=HUB_HOSTS,
                  size=int(size) if isinstance(size, int) and size >= 0 else None,
                  repo=f"{rp.repo_type}:{rp.repo_id}@{rp.revision}")


def kind(url: str) -> str | None:
    fs = _filesystem()
    try:
        info = _call(url, fs.info, url)
    except FileNotFound:
        rp = _call(url, fs.resolve_path, url)   # a missing repository or revision says so, a missing file is None
        if not rp.path_in_repo:
            raise
        return None
    return "directory" if info.get("type") == "directory" else "file"


def listdir(url: str) -> list[str]:
    fs = _filesystem()
    entries = _call(url, fs.ls, url, detail=True)
    folder = url.rstrip("/")
    # (a name the tree lists that is no plain name in the folder, `..` or a control character, is no file of it)
    return sorted(n for e in entries if e.get("type") == "file"
                  and under(f"{folder}/{(n := basename(e['name']))}", folder))


def repos(url: str) -> list[str]:
    """hf://name: the model repositories of the user or organisation `name`, as hf:// URLs (huggingface_hub
    `HfApi.list_models(author=name)`: GET /api/models?author=name, the Hub's paginated listing; each page
    counted as a request, 1,000 ids a page assumed)."""
    fs = _filesystem()
    from huggingface_hub import HfApi

    author = url.split("://", 1)[1].strip("/")
    METER.request(url)
    try:
        ids = sorted({m.id for m in HfApi(endpoint=fs.endpoint).list_models(author=author)})
    except Exception as e:  # noqa: BLE001 - requests' and huggingface_hub's errors, as one line
        raise _error(url, e) from None
    for _ in range(len(ids) // 1000):
        METER.request(url)
    return [f"hf://{i}" for i in ids if i.startswith(author + "/")]
