"""`ckptstat scan URL` (docs/torch.md, "Remote files"): the scan corpus (fixtures/make_scan_corpus.py) and
hostile variants of it served over loopback HTTP (tests/remote_server.py), moto's S3 and the Hub stand-in.

The oracle is torch itself, as in tests/test_scan_differential.py: a remote scan flags exactly the files whose
payload ran under torch.load(weights_only=False) (in a throw-away subprocess) and says weights_only loads
exactly what torch.load(weights_only=True) loads. Beyond that, every remote report equals the local scan of
the same bytes apart from `path` (and `fetched`), and a big zip costs a small fraction of its bytes.
"""
from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys

import library_runner
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from conftest import fixture_script  # noqa: E402

_make_scan_corpus = fixture_script("make_scan_corpus")
write_corpus = _make_scan_corpus.write_corpus
from remote_server import Server, moto_s3  # noqa: E402
from test_scan_differential import LOADER, WEIGHTS_ONLY_LOADER  # noqa: E402

from ckptstat import sources  # noqa: E402
from ckptstat.analysis.scan import scan_path  # noqa: E402
from ckptstat.cli import main  # noqa: E402
from ckptstat.core import limits  # noqa: E402
from ckptstat.errors import CheckpointError, CkptstatError  # noqa: E402

torch = pytest.importorskip("torch")


@pytest.fixture(autouse=True)
def fresh_sources(monkeypatch):
    sources.reset()
    monkeypatch.setattr(sources.SETTINGS, "backoff", 0.01)
    monkeypatch.setattr(sources.SETTINGS, "retries", 1)
    yield
    sources.reset()
    limits.reset()


def _hostile(folder: str, names: list[str]) -> None:
    """Truncated and byte-flipped copies of some corpus files: zips cut inside the central directory or a
    pickle record, legacy streams cut mid-pickle."""
    for n in names:
        data = open(os.path.join(folder, n), "rb").read()
        for cut in (len(data) // 3, len(data) - 30):
            open(os.path.join(folder, f"cut{cut}-{n}"), "wb").write(data[:cut])
        flipped = bytearray(data)
        flipped[len(data) // 2] ^= 0xFF
        open(os.path.join(folder, f"flip-{n}"), "wb").write(bytes(flipped))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    folder = str(tmp_path_factory.mktemp("rscan"))
    cases = write_corpus(folder)
    _hostile(folder, ["benign-zip.pt", "evil-zip-deflated.pt", "benign-legacy.pt", "evil-legacy-object.pt",
                      "benign-tar.pt", "evil-proto5.pkl"])
    names = sorted(n for n in os.listdir(folder) if not n.endswith(".marker"))
    paths = [os.path.join(folder, c) for c in sorted(cases)]
    library_runner.python(LOADER, *paths, cwd=folder)
    ran = {c: os.path.exists(os.path.join(folder, c + ".marker")) for c in cases}
    for c in cases:   # the markers are no part of what is served
        if ran[c]:
            os.unlink(os.path.join(folder, c + ".marker"))
    return folder, cases, ran, names


def _report(path: str) -> dict | str:
    """The report without its path, or the error's reason."""
    try:
        r = dict(scan_path(path))
    except CkptstatError as e:
        return e.reason if isinstance(e, CheckpointError) else str(e)
    r.pop("path")
    return r


def test_every_remote_report_equals_the_local_one(corpus):
    folder, _, _, names = corpus
    with Server(folder) as s:
        for n in names:
            sources.reset()
            assert _report(f"{s.url}/{n}") == _report(os.path.join(folder, n)), n


def test_remote_verdicts_match_torch(corpus, tmp_path):
    """would_run_code: exactly where torch.load(weights_only=False) ran the payload; weights_only_loadable:
    exactly what torch.load(weights_only=True) loads (tests/test_scan_differential.py's oracles)."""
    folder, cases, ran, _ = corpus
    paths = [os.path.join(folder, c) for c in sorted(cases)]
    proc = subprocess.run([sys.executable, "-c", WEIGHTS_ONLY_LOADER, *paths], cwd=tmp_path, timeout=300,
                          capture_output=True, text=True)
    loads = json.loads(proc.stdout.strip().splitlines()[-1])
    wrong = []
    with Server(folder) as s:
        for c in sorted(cases):
            sources.reset()
            try:
                r = scan_path(f"{s.url}/{c}")
                flagged, loadable = r["would_run_code"], r["weights_only_loadable"]
            except CkptstatError:
                flagged, loadable = False, False
            if flagged != ran[c] or loadable != (loads[os.path.join(folder, c)] is None):
                wrong.append((c, flagged, ran[c], loadable))
    assert not wrong, wrong
    assert sum(ran.values()) >= 20


def test_folder_url_equals_the_local_folder_scan(corpus, capsys):
    folder, _, _, names = corpus
    with Server(folder) as s:
        rc_local = main(["scan", folder, "--json"])
        local = json.loads(capsys.readouterr().out)
        sources.reset()
        rc = main(["scan", s.url + "/", "--json"])
        remote = json.loads(capsys.readouterr().out)
    assert rc == rc_local == 1
    assert remote["files"] == local["files"] and remote["totals"] == local["totals"]
    assert len(remote["files"]) == len(names)
    assert remote["fetched"]["requests"] >= len(names) and "fetched" not in local


def _big_zip(folder: str) -> str:
    """A torch.save zip with 48 MiB of tensor data."""
    path = os.path.join(folder, "pytorch_model.bin")
    torch.manual_seed(0)
    torch.save({f"layer.{i}.weight": torch.randn(1024, 1024) for i in range(12)}, path)
    return path


def test_a_big_zip_costs_under_one_percent(tmp_path, capsys):
    path = _big_zip(str(tmp_path))
    size = os.path.getsize(path)
    assert size > 40 << 20
    with Server(str(tmp_path)) as s:
        sources.reset()
        assert main(["scan", s.url + "/pytorch_model.bin", "--json"]) == 0
        remote = json.loads(capsys.readouterr().out)
        assert remote["fetched"]["bytes"] < size / 100 and s.bytes_sent < size / 100   # (the server counts as it sends)
    sources.reset()
    assert main(["scan", path, "--json"]) == 0
    local = json.loads(capsys.readouterr().out)
    assert {k: v for k, v in remote.items() if k not in ("path", "fetched")} == {k: v for k, v in local.items()
                                                                                  if k != "path"}


def test_a_legacy_stream_past_the_bound_is_read_by_ranges(tmp_path):
    """A legacy stream bigger than remote_scan_bytes: its pickles lie before its storages, so they are read
    by ranges and the verdict is the local one; a pickle whose STOP lies past the bound is 'unknown'."""
    legacy = str(tmp_path / "legacy.pt")
    torch.save({"w": torch.zeros(1024, 1024)}, legacy, _use_new_zipfile_serialization=False)   # 4 MiB of storage
    skipped = str(tmp_path / "skipped.pkl")   # builtins.exec, then 1 MiB of bytes the walk seeks over, then the call
    with open(skipped, "wb") as f:
        f.write(b"\x80\x02cbuiltins\nexec\nB" + (1 << 20).to_bytes(4, "little") + bytes(1 << 20) + b"\x85R.")
    walked = str(tmp_path / "walked.pkl")   # builtins.exec, then 1 MiB of opcodes the walk must read
    with open(walked, "wb") as f:
        f.write(b"\x80\x02cbuiltins\nexec\n" + b"K\x010" * 350_000 + b"X\x01\x00\x00\x001\x85R.")
    limits.set_limits(remote_scan_bytes=512 << 10)
    with Server(str(tmp_path)) as s:
        sources.reset()
        remote = _report(f"{s.url}/legacy.pt")
        assert s.bytes_sent < os.path.getsize(legacy) / 4
        assert remote == _report(legacy) and remote["status"] == "safe"
        s.reset()
        sources.reset()
        remote = _report(f"{s.url}/skipped.pkl")
        assert s.bytes_sent < 512 << 10
        assert remote == _report(skipped) and remote["status"] == "unsafe"
        sources.reset()
        r = scan_path(f"{s.url}/walked.pkl")
    assert _report(walked)["status"] == "unsafe"   # locally: read through
    assert r["status"] == "unknown" and "remote_scan_bytes" in r["verdict"] and "builtins.exec" in r["verdict"]
    assert r["would_run_code"] and not r["weights_only_loadable"]


def test_a_zip_past_the_bound_is_unknown(tmp_path):
    path = str(tmp_path / "big-pickle.pt")
    torch.save({f"k{i}": list(range(64)) for i in range(2000)}, path)   # a data.pkl of ~300 KB
    limits.set_limits(remote_scan_bytes=128 << 10)
    with Server(str(tmp_path)) as s:
        r = scan_path(f"{s.url}/big-pickle.pt")
    assert r["status"] == "unknown" and "remote_scan_bytes" in r["unknown"][0]
    limits.reset()
    assert scan_path(path)["status"] == "safe"


def test_a_small_pickle_is_fetched_whole(tmp_path):
    path = str(tmp_path / "x.pkl")
    with open(path, "wb") as f:
        pickle.dump({"a": list(range(100_000))}, f, protocol=2)
    with Server(str(tmp_path)) as s:
        sources.reset()
        r = scan_path(f"{s.url}/x.pkl")
        assert sum(s.requests.values()) <= 2   # the first window, then the rest in one range
    assert r["status"] == "safe" and r["path"] == f"{s.url}/x.pkl"


def test_404_is_one_line(tmp_path, capsys):
    with Server(str(tmp_path)) as s:
        sources.reset()
        assert main(["scan", s.url + "/gone.pt"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"ckptstat: error: {s.url}/gone.pt: not found (HTTP 404)"


def test_hf_repo_and_s3_prefix(corpus, monkeypatch):
    """hf://org/model (the Hub stand-in) and s3://bucket/prefix (moto): the local folder scan's files."""
    folder, _, _, _ = corpus
    local = scan_path(folder)
    with Server(folder, hub={"org/corpus": folder}) as s:
        monkeypatch.setenv("HF_ENDPOINT", s.url)
        sources.reset()
        hub = scan_path("hf://org/corpus")
        sources.reset()
        one = _report("hf://org/corpus@main/evil-zip-deflated.pt")
    assert hub["files"] == local["files"] and hub["totals"] == local["totals"]
    assert one == _report(os.path.join(folder, "evil-zip-deflated.pt")) and one["status"] == "unsafe"

    pytest.importorskip("moto.server")
    with moto_s3("zoo", {"scan/" + n: os.path.join(folder, n) for n in os.listdir(folder)}):
        sources.reset()
        s3 = scan_path("s3://zoo/scan")
    assert s3["files"] == local["files"] and s3["totals"] == local["totals"]


class _Mkdir:
    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return os.mkdir, (self.path,)


def test_a_url_fragment_is_no_part_of_the_name(tmp_path):
    """(A red team of scan, 2026-12-07.) `URL/evil.pt#.safetensors`: no client sends the fragment, and
    torch.hub.load_state_dict_from_url names its download by the URL's path (`evil.pt`) and torch.loads it (the
    payload ran); scan took the name for safetensors': "no pickle to scan", exit 2."""
    served = tmp_path / "served"
    served.mkdir()
    marker = tmp_path / "payload-ran"
    torch.save({"w": torch.zeros(2), "x": _Mkdir(str(marker))}, served / "evil.pt")
    with Server(str(served)) as s:
        url = f"{s.url}/evil.pt#.safetensors"
        code = (f"import torch, warnings\nwarnings.simplefilter('ignore')\ntry:\n    torch.hub.load_state_dict_from_url("
                f"{url!r}, model_dir={str(tmp_path / 'hub')!r}, weights_only=False, progress=False)\n"
                "except Exception:\n    pass\n")
        subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=300)
        assert marker.exists()
        sources.reset()
        r = scan_path(url)
    assert r["status"] == "unsafe", r["verdict"]
