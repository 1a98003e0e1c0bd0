"""`ckptstat scan URL` of files a library's own loader reads (analysis/scan/loaders.py `judged_by_own_loader`,
docs/torch.md "Files judged by their own loader"): a real Trainer run folder, DeepSpeed ZeRO folders and DCP
`.metadata` files served over loopback https (tests/remote_server.py) and the Hub stand-in (hf://) get the per-file
verdicts the local scan gives. The oracles are test_scan_rng_state.py's: the library's own loader reads the genuine
RNG state, and a hostile one's payload ran under torch.load(weights_only=False) (a marker file it wrote)."""
from __future__ import annotations

import os
import shutil
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("accelerate")

import test_scan_remote  # noqa: E402
import test_scan_rng_state as rng  # noqa: E402
from remote_server import Server  # noqa: E402
from test_scan_rng_state import TORCH_ALLOWED, _loader, _pickled_globals, _trainer_adds  # noqa: E402

from ckptstat import sources  # noqa: E402
from ckptstat.analysis.scan import scan_path  # noqa: E402
from ckptstat.errors import CheckpointError, CkptstatError  # noqa: E402

run, hostile = rng.run, rng.hostile   # its module fixtures (a real Trainer run; hostile RNG states), shared
fresh_sources = test_scan_remote.fresh_sources   # (autouse: empty caches, quick retries, limits reset)
FIXTURES = os.path.join(os.path.dirname(HERE), "fixtures")


def _report(path: str) -> dict | str:
    """The report without its path, or the error's reason."""
    sources.reset()
    try:
        r = dict(scan_path(path))
    except CkptstatError as e:
        return e.reason if isinstance(e, CheckpointError) else str(e)
    r.pop("path")
    r.pop("fetched", None)
    return r


def _files(folder: str) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, n), folder) for d, _, ns in os.walk(folder) for n in ns)


def _same_remotely(folder: str, monkeypatch: pytest.MonkeyPatch, hub: bool = True) -> dict[str, dict | str]:
    """Every file's report over https (and hf:// for a flat folder) equal to the local one; the local reports."""
    local = {n: _report(os.path.join(folder, n)) for n in _files(folder)}
    with Server(folder, hub={"org/ckpt": folder}) as s:
        monkeypatch.setenv("HF_ENDPOINT", s.url)
        for n, r in local.items():
            assert _report(f"{s.url}/{n}") == r, n
            if hub:
                assert _report(f"hf://org/ckpt@main/{n}") == r, n
        sources.reset()
        assert scan_path(s.url + "/")["files"] == scan_path(folder)["files"]   # the folder URL, as the folder
        if hub:
            sources.reset()
            assert scan_path("hf://org/ckpt")["files"] == scan_path(folder)["files"]
    return local


def test_a_trainer_run_folder_over_https_and_hf(run, monkeypatch):
    ckpt = str(run / "run" / "checkpoint-1")
    local = _same_remotely(ckpt, monkeypatch)
    assert isinstance(_loader(os.path.join(ckpt, "rng_state.pth")), dict)   # the Trainer's own load reads it
    rng = local["rng_state.pth"]
    assert rng["status"] == "safe" and rng["verdict"].startswith("safe: transformers' Trainer loads it")
    assert local["training_args.bin"]["status"] == "safe"   # torch.load's: plain data (test_scan_plain_data.py)
    acc = str(run / "acc")
    local = _same_remotely(acc, monkeypatch)
    assert local["random_states_0.pkl"]["status"] == "safe"


def test_a_hostile_rng_state_is_unsafe_remotely(run, hostile, tmp_path, monkeypatch):
    bad = tmp_path / "checkpoint-1"   # the Trainer's folder with an rng_state.pth whose payload runs under torch.load
    shutil.copytree(run / "run" / "checkpoint-1", bad)
    evil = next(p for p in hostile if p.endswith("os.system-rng_state.pth/rng_state.pth"))
    assert hostile[evil]   # it ran under torch.load(weights_only=False)
    shutil.copy(evil, bad / "rng_state.pth")
    beyond = sorted(_pickled_globals(evil) - TORCH_ALLOWED - _trainer_adds())   # what neither allowlist holds
    local = _same_remotely(str(bad), monkeypatch)
    assert local["rng_state.pth"]["status"] == "unsafe" and local["rng_state.pth"]["unsafe_globals"] == beyond


@pytest.mark.parametrize("zero", [0, 1, 2, 3])
def test_deepspeed_folders_remotely(zero, monkeypatch):
    folder = os.path.join(FIXTURES, "training", f"deepspeed-zero{zero}")
    local = _same_remotely(folder, monkeypatch, hub=False)   # (the Hub stand-in lists a flat folder only)
    optim = [r for n, r in local.items() if n.endswith("_optim_states.pt")]
    assert optim or zero == 0   # (ZeRO stage 0 saves no optimizer shards)
    assert all(r["format"] == "DeepSpeed ZeRO optimizer state" and r["status"] == "safe" for r in optim)


@pytest.mark.parametrize("name", ["single", "sharded", "zstd"])
def test_dcp_metadata_remotely(name):
    """A `.metadata` is judged by DCP's globals over a URL too; the folder's non-tensor items (each names
    BytesStorageMetadata) are traced only locally, so remotely the verdict is unknown, never the local safe."""
    folder = os.path.join(FIXTURES, "dcp", name)
    local = _report(os.path.join(folder, ".metadata"))
    assert isinstance(local, dict) and local["format"] == "torch.distributed.checkpoint metadata"
    with Server(folder) as s:
        remote = _report(f"{s.url}/.metadata")
    assert isinstance(remote, dict) and remote["format"] == local["format"]
    assert remote["status"] == "unknown" and "not traced over a URL" in remote["verdict"]
    assert not remote["unsafe_globals"]   # the metadata's own pickles: as the local scan walked them, items aside
    assert remote["pickles"] == [p for p in local["pickles"] if " item " not in p["record"]]
