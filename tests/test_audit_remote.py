"""`ckptstat audit URL` (issue 23's remote part, docs/audit.md "Remote roots"): a zoo written by the real
writers (fixtures/make_zoo.py: transformers models with configs, broken and duplicated ties, config drift,
sharded indexes, torch zips and legacy streams, GGUF, pickles that run code, truncated and lying files, a
missing shard) served over loopback https-style HTTP (tests/remote_server.py), moto's S3 and the Hub
stand-in. The oracle for every record is the local run over the same files (whose values tests/test_audit.py
checks against the writers): the records must be equal apart from the path, timing, resume-key and fetched
fields; a remote pickle is scanned with range requests (analysis/scan/ scan_url), so its scan verdict is
the local one too.
"""
from __future__ import annotations

import json
import os
import sys
import urllib.parse

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from conftest import fixture_script  # noqa: E402

_make_zoo = fixture_script("make_zoo")
gguf_units = _make_zoo.gguf_units
hostile_units = _make_zoo.hostile_units
torch_units = _make_zoo.torch_units
transformers_units = _make_zoo.transformers_units
from remote_server import Server, _Handler, moto_s3, round_trips  # noqa: E402

from ckptstat import sources  # noqa: E402
from ckptstat.analysis.audit import NOT_SCANNED, run_serial, strip_timing  # noqa: E402
from ckptstat.analysis.audit.find import discover  # noqa: E402
from ckptstat.cli import main  # noqa: E402

REMOTE_ONLY = ("mtime_ns", "etag", "fetched")   # the resume key's version and the network counts


@pytest.fixture(autouse=True)
def fresh_sources(monkeypatch):
    sources.reset()
    monkeypatch.setattr(sources.SETTINGS, "backoff", 0.01)
    monkeypatch.setattr(sources.SETTINGS, "retries", 1)
    yield
    sources.reset()


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    """The formats the remote readers read (docs/remote.md), some broken: 36 units."""
    root = str(tmp_path_factory.mktemp("rzoo"))
    manifest: dict = {}
    for step in (transformers_units, gguf_units, torch_units, hostile_units):
        step(root, manifest)
    return root


@pytest.fixture(scope="module")
def local(zoo):
    units, _ = discover(zoo)
    return {r["path"]: r for r in run_serial(units)}


class _ETagHandler(_Handler):
    """The loopback server, sending an ETag for every file as nginx does (mtime and size, in hex)."""

    def end_headers(self) -> None:
        path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)
        real = os.path.join(self.server_state.root, path.lstrip("/"))
        if os.path.isfile(real):
            st = os.stat(real)
            self.send_header("ETag", f'"{st.st_mtime_ns:x}-{st.st_size:x}"')
        super().end_headers()


def etag_server(root: str) -> Server:
    s = Server(root)
    s.httpd.RequestHandlerClass = type("Handler", (_ETagHandler,), {"server_state": s})
    return s


def audit(capsys, target: str, out: str, *extra: str) -> tuple[int, dict, dict[str, dict]]:
    sources.reset()
    rc = main(["audit", target, "--out", out, "--json", "--no-progress", *extra])
    report = json.loads(capsys.readouterr().out)
    records = {}
    for line in open(out):
        r = json.loads(line)
        records[r["path"]] = r
    return rc, report, records


def assert_same_as_local(remote: dict[str, dict], local: dict[str, dict], prefix: str, root: str) -> None:
    """Each remote record equals the local one of the same files, apart from the fields a URL changes."""
    mapped = {}
    for path, r in remote.items():
        bare = {k: v for k, v in strip_timing(r).items() if k not in REMOTE_ONLY}
        mapped[root + path[len(prefix):]] = json.loads(json.dumps(bare).replace(prefix, root))
    assert set(mapped) == set(local)
    for path, r in mapped.items():
        want = {k: v for k, v in strip_timing(local[path]).items() if k not in REMOTE_ONLY}
        assert r["scan"] == want["scan"], path   # pickles scanned remotely: the local verdicts, file by file
        if want["error"] and "is missing" in want["error"]:   # a shard an index names: the store's 404
            assert r["error"].endswith("not found") or r["error"].endswith("not found (HTTP 404)"), r["error"]
            r["error"] = want["error"]
        assert r == want, path


def test_http_zoo_equals_local(zoo, local, tmp_path, capsys):
    with etag_server(zoo) as s:
        rc, report, records = audit(capsys, s.url + "/", str(tmp_path / "r.jsonl"))
    assert rc == 1   # unsafe pickles (local) / errors and broken ties: exit 1 either way
    assert len(records) == len(local) >= 30
    assert_same_as_local(records, local, s.url, zoo)
    local_unsafe = sorted(p for p, r in local.items() if r["scan"]["verdict"] == "unsafe")
    assert report["broken_ties"] and report["unsafe"] == sorted(s.url + p[len(zoo):] for p in local_unsafe)
    assert local_unsafe and NOT_SCANNED not in report["scan"]   # every remote pickle got a real verdict
    for r in records.values():   # per checkpoint: what auditing it fetched, from cold caches
        assert r["fetched"]["requests"] >= 1 and r["etag"] and r["mtime_ns"] is None
    assert report["fetched"]["requests"] > sum(r["fetched"]["requests"] for r in records.values())   # + the listing


def test_pool_equals_serial_and_sums_the_workers_fetches(zoo, tmp_path, capsys):
    sub = os.path.join(zoo, "hub")
    with Server(sub) as s:
        rc, serial, one = audit(capsys, s.url + "/", str(tmp_path / "a.jsonl"))
        rc2, pooled, two = audit(capsys, s.url + "/", str(tmp_path / "b.jsonl"), "--workers", "2")
    assert rc == rc2 == 1
    assert {p: strip_timing(r) for p, r in one.items()} == {p: strip_timing(r) for p, r in two.items()}
    assert {r["worker"] for r in two.values()} != {"local"}
    assert serial["fetched"] == pooled["fetched"]   # the workers' requests and bytes are in the command's total


def test_etag_keys_resume(zoo, tmp_path, capsys):
    out = str(tmp_path / "r.jsonl")
    sub = os.path.join(zoo, "gguf")
    with etag_server(sub) as s:
        _, first, _ = audit(capsys, s.url + "/", out)
        _, again, _ = audit(capsys, s.url + "/", out)
        assert first["run"]["audited"] == 5 and again["run"]["audited"] == 0 and again["run"]["resumed"] == 5
        changed = os.path.join(sub, "model-1.gguf")
        data, st = open(changed, "rb").read(), os.stat(changed)
        try:
            with open(changed, "wb") as f:   # the same size, other values: a new ETag
                f.write(data[:-1] + bytes([data[-1] ^ 0xFF]))
            _, third, records = audit(capsys, s.url + "/", out)
        finally:
            with open(changed, "wb") as f:
                f.write(data)
            os.utime(changed, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert third["run"]["audited"] == 1 and third["run"]["resumed"] == 4
    lines = [json.loads(x) for x in open(out)]
    assert len(lines) == 6 and lines[-1]["path"] == s.url + "/model-1.gguf"


def test_no_version_means_audited_again(zoo, tmp_path, capsys):
    """A server that sends neither ETag nor Last-Modified: the records cannot be resumed safely."""
    out = str(tmp_path / "r.jsonl")
    with Server(os.path.join(zoo, "gguf")) as s:
        audit(capsys, s.url + "/", out)
        _, again, records = audit(capsys, s.url + "/", out)
    assert again["run"]["audited"] == 5 and again["run"]["resumed"] == 0
    assert all(r["etag"] is None for r in records.values())


def test_list_with_a_404_is_an_error_record(zoo, tmp_path, capsys):
    listing = tmp_path / "list.txt"
    with Server(zoo) as s:
        listing.write_text(f"# two\n{s.url}/gguf/model-0.gguf\n{s.url}/gone/model.safetensors\n{s.url}/hub/gpt2-st/\n")
        rc, report, records = audit(capsys, f"@{listing}", str(tmp_path / "r.jsonl"))
    assert rc == 1 and report["records"] == 3 and report["errors"] == 1
    gone = records[f"{s.url}/gone/model.safetensors"]
    assert gone["error"] == f"{s.url}/gone/model.safetensors: not found (HTTP 404)"
    assert records[f"{s.url}/gguf/model-0.gguf"]["error"] is None
    assert records[f"{s.url}/hub/gpt2-st/model.safetensors"]["config"]["verdict"] == "match"


@pytest.fixture(scope="module")
def s3(zoo):
    pytest.importorskip("moto.server")
    files = {"models/" + os.path.relpath(os.path.join(d, n), zoo): os.path.join(d, n) for d, _, ns in os.walk(zoo) for n in ns}
    with moto_s3("zoo", files) as client:
        yield client


def test_s3_zoo_equals_local_and_resumes_by_etag(s3, zoo, local, tmp_path, capsys):
    out = str(tmp_path / "r.jsonl")
    rc, first, records = audit(capsys, "s3://zoo/models", out)
    assert_same_as_local(records, local, "s3://zoo/models", zoo)
    assert all(r["etag"] for r in records.values())   # S3's ETag (an MD5 of the object), per file
    _, again, _ = audit(capsys, "s3://zoo/models", out)
    assert again["run"]["audited"] == 0 and again["run"]["resumed"] == len(records)
    key = "models/gguf/model-2.gguf"
    data = s3.get_object(Bucket="zoo", Key=key)["Body"].read()
    s3.put_object(Bucket="zoo", Key=key, Body=data[:-1] + bytes([data[-1] ^ 0xFF]))   # same size, new ETag
    try:
        _, third, _ = audit(capsys, "s3://zoo/models", out)
    finally:
        s3.put_object(Bucket="zoo", Key=key, Body=data)
    assert third["run"]["audited"] == 1 and third["run"]["resumed"] == len(records) - 1


def test_hf_repo_equals_local(zoo, local, tmp_path, capsys, monkeypatch):
    repos = {"org/gpt2": os.path.join(zoo, "hub", "gpt2-st"), "org/llama": os.path.join(zoo, "hub", "llama-sharded-st")}
    with Server(zoo, hub=repos, revisions=("main", "v1")) as s:
        monkeypatch.setenv("HF_ENDPOINT", s.url)
        listing = tmp_path / "l.txt"
        listing.write_text("hf://org/gpt2\nhf://org/llama@v1\nhf://org/nope\n")
        rc, report, records = audit(capsys, f"@{listing}", str(tmp_path / "r.jsonl"))
    assert rc == 1 and report["errors"] == 1
    assert "repository not found" in records["hf://org/nope"]["error"]
    for url, folder in (("hf://org/gpt2", repos["org/gpt2"]), ("hf://org/llama@v1", repos["org/llama"])):
        mine = {p: r for p, r in records.items() if p.startswith(url + "/")}
        assert len(mine) == 1
        theirs = {p: r for p, r in local.items() if os.path.dirname(p) == folder}
        assert_same_as_local(mine, theirs, url, folder)
        etag = next(iter(mine.values()))["etag"]   # the blob oid the tree lists; a digest of the shards' oids
        assert etag == "0" * 40 if url == "hf://org/gpt2" else etag.startswith("files:")


class _OrgHandler(_Handler):
    """The Hub stand-in, also answering huggingface_hub's `list_models(author=...)`: GET /api/models?author=."""

    def _hub(self, path: str, head: bool) -> bool:
        if path != "/api/models":
            return super()._hub(path, head)
        author = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query).get("author", [""])[0]
        self._json([{"id": r, "modelId": r} for r in sorted(self.server_state.b.hub) if r.startswith(author + "/")], head)
        return True


def test_hf_org_audits_its_repositories(zoo, local, tmp_path, capsys, monkeypatch):
    repos = {"org/gpt2": os.path.join(zoo, "hub", "gpt2-st"), "org/llama": os.path.join(zoo, "hub", "llama-sharded-st")}
    s = Server(zoo, hub=repos)
    s.httpd.RequestHandlerClass = type("Handler", (_OrgHandler,), {"server_state": s})
    with s:
        monkeypatch.setenv("HF_ENDPOINT", s.url)
        listing = tmp_path / "l.txt"
        listing.write_text("hf://org\nhf://nobody\n")
        rc, report, records = audit(capsys, f"@{listing}", str(tmp_path / "r.jsonl"))
    assert "no such repository, user or organisation" in records.pop("hf://nobody")["error"]
    assert sorted(records) == ["hf://org/gpt2/model.safetensors", "hf://org/llama/model.safetensors.index.json"]
    for url, folder in (("hf://org/gpt2", repos["org/gpt2"]), ("hf://org/llama", repos["org/llama"])):
        mine = {p: r for p, r in records.items() if p.startswith(url + "/")}
        assert_same_as_local(mine, {p: r for p, r in local.items() if os.path.dirname(p) == folder}, url, folder)


def test_stats_workers_fetched_counts_the_workers(tmp_path, capsys):
    import numpy as np
    from safetensors.numpy import save_file

    tensors = {f"w{i}": np.full((256, 1024), i, np.float32) for i in range(4)}
    save_file(tensors, str(tmp_path / "model.safetensors"))
    with Server(str(tmp_path)) as s:
        sources.reset()
        assert main(["stats", "--workers", "2", "--json", "--no-progress", s.url + "/model.safetensors"]) == 0
        fetched = json.loads(capsys.readouterr().out)["fetched"]
        assert fetched["requests"] == sum(s.requests.values())   # every request, the workers' included
        assert s.bytes_sent >= fetched["bytes"] >= sum(a.nbytes for a in tensors.values())


def test_allow_full_download_reaches_the_workers(tmp_path, capsys):
    """A server that ignores Range: refused per record, unless --allow-full-download, which pool workers
    apply too (analysis/audit/ `settings`)."""
    import numpy as np
    from safetensors.numpy import save_file

    for i in range(2):
        save_file({"w": np.full((256, 256), i, np.float32)}, str(tmp_path / f"m{i}.safetensors"))   # 256 KiB each
    with Server(str(tmp_path), ranges=False) as s:
        rc, _, refused = audit(capsys, s.url + "/", str(tmp_path / "a.jsonl"), "--workers", "2")
        sources.reset()
        assert main(["--allow-full-download", "audit", s.url + "/", "--out", str(tmp_path / "b.jsonl"), "--json",
                     "--no-progress", "--workers", "2"]) == 0
        capsys.readouterr()
    assert rc == 1 and all("--allow-full-download" in r["error"] for r in refused.values()) and len(refused) == 2
    records = [json.loads(x) for x in open(tmp_path / "b.jsonl")]
    assert [r["parameters"] for r in records] == [256 * 256] * 2 and all(r["fetched"]["full_downloads"] for r in records)


def test_a_scan_the_store_cuts_short_is_not_scanned_never_safe(monkeypatch):
    """A remote pickle whose scan fails in the store (a 404 after listing, a request limit): `not scanned
    (remote)` with the store's line, never `safe`; a file torch.load cannot read stays `unreadable`."""
    from ckptstat.analysis import audit as audit_mod
    from ckptstat.analysis import scan as scan_mod
    from ckptstat.errors import CheckpointError, CorruptCheckpointError

    def fake_scan(url: str) -> dict:
        if url.endswith("gone.pt"):
            raise CheckpointError(url, "not found (HTTP 404)")
        raise CorruptCheckpointError(url, "torch.load raises: a zip without an end of central directory")

    monkeypatch.setattr(scan_mod, "scan_url", fake_scan)   # (both named *.pt: listed however their scan ends)
    r = audit_mod._scan(["https://h/m/gone.pt", "https://h/m/cut.pt"])
    assert [f["status"] for f in r["files"]] == [NOT_SCANNED, "unreadable"]
    assert r["files"][0]["error"] == "https://h/m/gone.pt: not found (HTTP 404)"
    assert r["verdict"] == "unreadable"   # the worse of the two (analysis/audit/ SCAN_ORDER)


def test_a_sharded_checkpoints_files_are_scanned_together(tmp_path, capsys):
    """`audit` of a URL checkpoint of 48 shards at 50 ms a request: each shard's first bytes (what the scan judges
    it by) are fetched together, not one shard after another (53 requests in sequence before, counted by the
    server, which holds the shards' requests until 48 are in flight: the count is the client's, not the machine's
    load); the record is the local folder's."""
    from test_remote import many_shards

    os.makedirs(tmp_path / "zoo" / "m")
    many_shards(str(tmp_path / "zoo" / "m"), 48)
    local = {r["path"]: r for r in run_serial(discover(str(tmp_path / "zoo"))[0])}
    with Server(str(tmp_path / "zoo"), stall=0.05, gather=(48, 48), gather_suffix=".safetensors") as s:
        rc, report, records = audit(capsys, s.url + "/", str(tmp_path / "out.jsonl"))
        assert rc == 0, records
        assert s.max_in_flight > 48   # every shard's first bytes at once (and one other request)
        assert round_trips(s) <= 8, round_trips(s)   # discovery's listing and each file's first bytes, then the
                                                     # record's, cold (its counts its own), and config.json
    assert_same_as_local(records, local, s.url, str(tmp_path / "zoo"))
