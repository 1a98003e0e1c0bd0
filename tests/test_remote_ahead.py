"""Issue 35: a sharded URL's `stats` reads values ahead while the shards' headers are still coming in
(analysis/stats/readahead.py `ShardsAhead`, sources/remote.py `Blob.read_ahead`): the same range requests, made
earlier, within REMOTE_PREFETCH bytes held, which the plan's reads then take. On loopback servers
(tests/remote_server.py); counted, never timed."""
from __future__ import annotations

import copy
import json
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
from remote_server import Server
from test_remote import fresh_sources  # noqa: F401  (autouse: empty caches, quick retries, no full downloads)
from test_remote_values import plain, stats  # (stats --json in-process, and its report less timings and fetches)

from ckptstat import sources
from ckptstat.analysis.stats import readahead
from ckptstat.sources import remote

SHARDS = 12
BIG = 1 << 20   # a value request (sources/remote.py DIRECT)
INDEX = "/model.safetensors.index.json"


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """12 shards, each an F16 matrix of 2-6 MiB (the larger ones read as two parts) and an F32 one of 2 MiB, written by
    safetensors, and their index. Every value read is a range request of its own (no tiny tensor read through the
    cache's windows, whose sizes depend on which thread's read comes first), so the requests are the same on every run."""
    from safetensors.numpy import save_file

    root = tmp_path_factory.mktemp("ahead")
    rng = np.random.default_rng(0)
    weight_map = {}
    for i in range(SHARDS):
        shard = f"model-{i + 1:05d}-of-{SHARDS:05d}.safetensors"
        tensors = {f"model.layers.{i}.mlp.up_proj.weight": (rng.standard_normal((1024 * (1 + i % 3), 1024)) * 0.02
                                                            ).astype(np.float16),
                   f"model.layers.{i}.self_attn.o_proj.weight": rng.standard_normal((512, 1024)).astype(np.float32)}
        save_file(tensors, str(root / shard))
        weight_map.update(dict.fromkeys(tensors, shard))
    (root / INDEX[1:]).write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return str(root)


@pytest.fixture
def started(monkeypatch):
    """The reads ahead started (offset, bytes held) and the bytes held after each."""
    seen: list[tuple[int, int, int]] = []
    real = getattr(remote.Blob, "read_ahead", None)

    def spy(self: remote.Blob, offset: int, n: int) -> int:
        got = real(self, offset, n) if real is not None else 0
        if got:
            seen.append((offset, got, sources.BACKEND.held))
        return got

    monkeypatch.setattr(remote.Blob, "read_ahead", spy, raising=False)
    return seen


def value_requests(s: Server) -> list[tuple[str, str]]:
    out = []
    for _, path, r in s.log:
        if r.startswith("bytes="):
            a, b = r[len("bytes="):].split("-")
            if b and int(b) - int(a) + 1 >= BIG:
                out.append((path, r))
    return out


def test_values_read_ahead_of_the_last_header_equal_numpys(folder, capsys, monkeypatch, started):
    """The first value request reaches the server before the last shard's header is asked for (2 requests at a time
    to the host: the headers take 6 rounds), every read ahead is taken by the plan's read (each value range asked
    once, the same requests and bytes as without reading ahead, nothing held at the end), and the values are the
    local folder's report bit for bit, and numpy's reading of the same files through safetensors."""
    from safetensors.numpy import load_file

    monkeypatch.setattr(sources.SETTINGS, "concurrency", 2)
    local = plain(stats(capsys, folder)[1])
    with Server(folder, stall=0.02) as s:
        runs = {}
        for budget in (0, readahead.REMOTE_PREFETCH):
            monkeypatch.setattr(readahead, "REMOTE_PREFETCH", budget)
            s.reset()
            rc, out, err = stats(capsys, s.url + INDEX)
            assert rc == 0, err
            assert plain(out, s.url, folder) == local
            runs[budget] = (sorted(s.log), json.loads(out)["fetched"], list(s.log), sources.BACKEND.held)
        (log0, fetched0, _, _), (log1, fetched1, order, held) = runs[0], runs[readahead.REMOTE_PREFETCH]
        values = value_requests(s)
        kinds = ["value" if (p, r) in values else "header" if p.endswith(".safetensors") and r == "bytes=0-65535"
                 else "" for _, p, r in order]
        assert kinds.index("value") < max(i for i, k in enumerate(kinds) if k == "header")
        assert log1 == log0 and fetched1 == fetched0 and len(values) == len(set(values))
        assert started and all(n <= readahead.REMOTE_PREFETCH for _, _, n in started) and held == 0
    rows = {t["name"]: t for t in local["tensors"]}
    for name in sorted(os.listdir(folder)):
        if name.endswith(".safetensors"):
            for key, x in load_file(os.path.join(folder, name)).items():
                wide = x.astype(np.float64)
                assert rows[key]["min"] == wide.min() and rows[key]["max"] == wide.max()
                assert rows[key]["mean"] == pytest.approx(wide.mean(), rel=1e-12, abs=1e-15)


def test_reads_ahead_hold_at_most_the_budget(folder, capsys, monkeypatch, started):
    """The bytes held by reads ahead (started, not yet taken) never pass REMOTE_PREFETCH: here 7 MiB, which the first
    shards' reads fill in the plan's order (the next read that would pass it stops them); the report is the same."""
    monkeypatch.setattr(readahead, "REMOTE_PREFETCH", 7 << 20)
    local = plain(stats(capsys, folder)[1])
    with Server(folder) as s:
        rc, out, err = stats(capsys, s.url + INDEX)
        assert rc == 0, err
        assert plain(out, s.url, folder) == local
    assert started and max(held for _, _, held in started) <= 7 << 20
    assert sum(n for _, n, _ in started) > 4 << 20   # (the first shard's reads, and the second's F16 matrix)
    assert sources.BACKEND.held == 0


@pytest.mark.parametrize("behaviour", [{"claim": 4 << 30}, {"short": 1 << 19}, {"failures": {
    f"/model-00001-of-{SHARDS:05d}.safetensors": [503] * 10}}], ids=["claims-more", "cut-short", "503"])
def test_a_server_lying_to_a_read_ahead_gives_todays_error(folder, capsys, monkeypatch, started, behaviour):
    """A server that lies about or fails the value requests a read ahead makes: the same one-line error, exit 1, as
    the same run without reading ahead (raised where the plan's read takes it, not while the headers are read)."""
    errors = []
    for budget in (readahead.REMOTE_PREFETCH, 0):
        monkeypatch.setattr(readahead, "REMOTE_PREFETCH", budget)
        with Server(folder, hostile_from=BIG, **copy.deepcopy(behaviour)) as s:   # (it spends its failures)
            rc, out, err = stats(capsys, s.url + INDEX)
            assert rc == 1 and err.count("\n") == 1 and "Traceback" not in err, err
            errors.append(err.replace(s.url, "URL"))
        if budget:
            assert started   # (the lie met a read ahead)
    assert errors[0] == errors[1]
    assert sources.BACKEND.held == 0


@pytest.mark.parametrize("args", [["-f", "o_proj"], ["--bucket", "embedding"], ["--workers", "2"]])
def test_a_filter_reads_nothing_ahead(folder, capsys, started, args):
    """With a filter (or the values read by worker processes) nothing is read ahead: the bytes fetched are the headers'
    windows and the selected tensors' bytes, no more."""
    from safetensors.numpy import load_file

    with Server(folder) as s:
        rc, out, err = stats(capsys, *args, s.url + INDEX)
        assert rc in (0, 1), err
        fetched = json.loads(out)["fetched"]["bytes"]
    needed = os.path.getsize(os.path.join(folder, INDEX[1:]))
    for name in os.listdir(folder):
        if name.endswith(".safetensors"):
            needed += 1 << 16   # (its first window: the header)
            needed += sum(x.nbytes for k, x in load_file(os.path.join(folder, name)).items()
                          if args[0] == "--workers" or (args[0] == "-f" and "o_proj" in k))
    assert fetched <= needed
    assert not started
