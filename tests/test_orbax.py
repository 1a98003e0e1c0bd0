"""orbax checkpoints (formats/orbax/): every array of every fixture folder against what orbax-checkpoint (tensorstore)
restores from it, recorded by fixtures/make_orbax.py in expected_orbax.json; the layouts users have (OCDBT, a folder
per array, zarr v3, sharded arrays, a CheckpointManager's steps); hostile folders refused in one line, nothing read
outside and nothing written."""
from __future__ import annotations

import hashlib
import json
import os
import shutil

import numpy as np
import pytest
from conftest import FIXTURES, fixture
from fuzz.layouts import OCDBT_BTREE, leb128, ocdbt_encoded, ocdbt_manifest, ocdbt_table
from test_remote import fresh_sources  # noqa: F401  (autouse: empty caches, quick retries, no full downloads)

from ckptstat import open_checkpoint, summarize
from ckptstat.cli import main
from ckptstat.core import dtypes
from ckptstat.errors import CheckpointError, CorruptCheckpointError, ExternalReferenceError, UsageError

EXPECTED = json.load(open(os.path.join(FIXTURES, "expected_orbax.json")))
CASES = EXPECTED["cases"]


def _values(ck, name: str) -> np.ndarray:
    parts = [c.astype(np.float64).reshape(-1) for c in ck.iter_chunks(name, 64)]   # small reads cross the chunks
    return np.concatenate(parts) if parts else np.zeros(0)


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_array_is_what_orbax_restores(case):
    rec = CASES[case]
    with open_checkpoint(fixture(rec["path"])) as ck:
        assert ck.format.startswith("orbax (")
        assert sorted(ck.tensors) == sorted(rec["arrays"])
        for name, a in rec["arrays"].items():
            t = ck[name]
            assert list(t.shape) == a["shape"], name
            assert t.dtype == dtypes.NUMPY_NAMES[a["dtype"]], name
            values = _values(ck, name)
            assert hashlib.sha256(values.astype("<f8").tobytes()).hexdigest() == a["sha256"], name
            assert ck.read(name).shape == tuple(a["shape"])
        assert sum(t.numel for t in ck) == rec["elements"]


def test_a_training_state_counts_the_model_apart_from_its_optimizer_and_step():
    rec = CASES["train"]
    report = summarize(open_checkpoint(fixture(rec["path"])))
    assert report["parameters"]["unique"] == rec["params"]          # the Flax model's parameters, as jax counts them
    rows = {r["role"]: r for r in report["non_parameters"]}
    assert set(rows) == {"optimizer", "counter"}
    assert rows["optimizer"]["elements"] + rows["counter"]["elements"] == rec["elements"] - rec["params"]


def test_sharded_arrays_are_read_across_their_chunks():
    """Each array sharded over the fixture's devices is the chunks tensorstore lists for it (their values are the main
    test's)."""
    arrays = CASES["sharded"]["arrays"]
    with open_checkpoint(fixture("orbax", "sharded")) as ck:
        assert {n: ck[n].extra["zarr_chunks"] for n in arrays} == {n: a["chunks"] for n, a in arrays.items()}
        assert all(a["chunks"] > 1 for a in arrays.values())


def test_a_step_folder_reads_its_array_items_under_their_names(capsys):
    with open_checkpoint(fixture("orbax", "manager", "20")) as ck:
        assert sorted(ck.tensors) == ["state.b", "state.w"]     # `meta` (JsonSave) holds no array
        assert ck.metadata["orbax.items"] == "state"
        assert float(ck.read("state.w").max()) == 20
    assert main(["tensors", fixture("orbax", "manager", "10")]) == 0
    assert "state.w" in capsys.readouterr().out


def test_a_checkpoint_manager_folder_is_refused_naming_its_steps(capsys):
    with pytest.raises(UsageError, match=r"CheckpointManager folder of 2 step\(s\) \(10, 20\).*manager/20"):
        open_checkpoint(fixture("orbax", "manager"))
    assert main([fixture("orbax", "manager")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_the_manifest_file_opens_its_folder():
    with open_checkpoint(fixture("orbax", "train", "manifest.ocdbt")) as ck:
        assert len(ck.tensors) == len(CASES["train"]["arrays"])


def test_cli_commands_read_an_orbax_folder(capsys):
    path = fixture("orbax", "train")
    assert main(["stats", path, "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["tensors"] and all(t["count"] == t["finite"] for t in stats["tensors"])
    assert main(["diff", path, path]) == 0


# ---- hostile folders ------------------------------------------------------------------------------------------

def _copy(tmp_path, case="train"):
    dst = tmp_path / "ckpt"
    shutil.copytree(fixture("orbax", case), dst)
    return dst


def _snapshot(root):
    return {os.path.join(d, n): (os.path.getsize(os.path.join(d, n)), os.path.getmtime(os.path.join(d, n)))
            for d, _, ns in os.walk(root) for n in ns}


def _cli_refuses(path, capsys, code=1):
    before = _snapshot(path)
    assert main([str(path)]) == code
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert _snapshot(path) == before
    return err


def _leaf(entries: dict[bytes, bytes]) -> bytes:
    keys = sorted(entries)
    body = bytes([0]) + ocdbt_table([]) + leb128(len(keys)) + b"".join(leb128(0) for _ in keys[1:])
    body += b"".join(leb128(len(k)) for k in keys) + b"".join(keys)
    body += b"".join(leb128(len(entries[k])) for k in keys) + bytes(len(keys)) + b"".join(entries[k] for k in keys)
    return ocdbt_encoded(OCDBT_BTREE, body)


def _interior(children: list[tuple[bytes, str, int, int]], height: int) -> bytes:
    files = sorted({c[1] for c in children})
    body = bytes([height]) + ocdbt_table(files) + leb128(len(children)) + b"".join(leb128(0) for _ in children[1:])
    body += b"".join(leb128(len(k)) for k, *_ in children) + b"".join(leb128(0) for _ in children)
    body += b"".join(k for k, *_ in children) + b"".join(leb128(files.index(f)) for _, f, _, _ in children)
    body += b"".join(leb128(o) for _, _, o, _ in children) + b"".join(leb128(n) for *_, n in children)
    body += b"".join(leb128(1) for _ in children) * 3
    return ocdbt_encoded(OCDBT_BTREE, body)


def _database(tmp_path, nodes: dict[str, bytes], root: str, height: int = 0):
    db = tmp_path / "db"
    (db / "d").mkdir(parents=True)
    for name, data in nodes.items():
        (db / "d" / name).write_bytes(data)
    (db / "manifest.ocdbt").write_bytes(ocdbt_manifest(f"d/{root}", 0, len(nodes[root]), height))
    return db


ZARRAY = json.dumps({"zarr_format": 2, "shape": [2, 3], "chunks": [2, 3], "dtype": "<f4", "compressor": None,
                     "fill_value": None, "filters": None, "order": "C"}).encode()


def test_the_hand_built_encoders_write_a_database_ckptstat_reads(tmp_path):
    values = np.arange(6, dtype="<f4")
    db = _database(tmp_path, {"a": _leaf({b"w/.zarray": ZARRAY, b"w/0.0": values.tobytes()})}, "a")
    with open_checkpoint(str(db)) as ck:
        assert ck["w"].shape == (2, 3) and ck.read("w").reshape(-1).tolist() == values.tolist()


@pytest.mark.parametrize("cut", [0, 5, 17, -1])
def test_a_truncated_manifest_is_refused(tmp_path, capsys, cut):
    db = _copy(tmp_path)
    data = (db / "manifest.ocdbt").read_bytes()
    (db / "manifest.ocdbt").write_bytes(data[:cut] if cut >= 0 else data[:-1])
    assert "manifest" in _cli_refuses(db, capsys)


def test_a_flipped_byte_in_a_node_fails_its_crc32c(tmp_path, capsys):
    db = _copy(tmp_path)
    node = next(p for p in sorted((db / "d").iterdir()))
    data = bytearray(node.read_bytes())
    data[len(data) // 2] ^= 0xFF
    node.write_bytes(bytes(data))
    assert "crc32c" in _cli_refuses(db, capsys)


@pytest.mark.parametrize("path", ["../outside", "/etc/passwd", "d/../../x", "d//x", ""])
def test_a_data_file_path_outside_the_database_is_refused(tmp_path, capsys, path):
    db = tmp_path / "db"
    db.mkdir()
    (tmp_path / "outside").write_bytes(_leaf({b"w/.zarray": ZARRAY}))
    (db / "manifest.ocdbt").write_bytes(ocdbt_manifest(path, 0, 10))
    assert "inside the database's folder" in _cli_refuses(db, capsys)


def test_a_data_file_symlinked_outside_is_refused(tmp_path, capsys):
    outside = tmp_path / "elsewhere"
    outside.write_bytes(_leaf({b"w/.zarray": ZARRAY, b"w/0.0": bytes(24)}))
    db = tmp_path / "db"
    (db / "d").mkdir(parents=True)
    os.symlink(outside, db / "d" / "a")
    (db / "manifest.ocdbt").write_bytes(ocdbt_manifest("d/a", 0, outside.stat().st_size))
    with pytest.raises(ExternalReferenceError):
        open_checkpoint(str(db))
    _cli_refuses(db, capsys)


def test_a_node_past_its_file_is_refused(tmp_path, capsys):
    leaf = _leaf({b"w/.zarray": ZARRAY})
    db = _database(tmp_path, {"a": leaf}, "a")
    (db / "manifest.ocdbt").write_bytes(ocdbt_manifest("d/a", 0, len(leaf) + 1))
    assert "-byte file" in _cli_refuses(db, capsys)


def test_a_tree_that_points_at_one_node_twice_is_refused(tmp_path, capsys):
    leaf = _leaf({b"w/.zarray": ZARRAY})
    root = _interior([(b"a", "d/leaf", 0, len(leaf)), (b"b", "d/leaf", 0, len(leaf))], height=1)
    db = _database(tmp_path, {"leaf": leaf, "root": root}, "root", height=1)
    assert "referenced twice" in _cli_refuses(db, capsys)


def test_a_child_whose_height_is_not_its_parents_less_one_is_refused(tmp_path, capsys):
    leaf = _leaf({b"w/.zarray": ZARRAY})
    root = _interior([(b"a", "d/leaf", 0, len(leaf))], height=2)
    db = _database(tmp_path, {"leaf": leaf, "root": root}, "root", height=2)
    assert "height 0, where its parent says 1" in _cli_refuses(db, capsys)


def test_an_array_of_more_chunks_than_the_folder_can_hold_is_refused_at_open(tmp_path, capsys):
    huge = json.dumps({"zarr_format": 2, "shape": [2**40], "chunks": [1], "dtype": "<f4", "compressor": None,
                       "fill_value": None, "filters": None, "order": "C"}).encode()
    db = _database(tmp_path, {"a": _leaf({b"w/.zarray": huge})}, "a")
    with pytest.raises(CorruptCheckpointError, match="chunks; more than"):
        open_checkpoint(str(db))


@pytest.mark.parametrize("chunk", [bytes(20), bytes(28)])
def test_a_chunk_of_the_wrong_size_is_refused_when_read(tmp_path, chunk):
    db = _database(tmp_path, {"a": _leaf({b"w/.zarray": ZARRAY, b"w/0.0": chunk})}, "a")
    with open_checkpoint(str(db)) as ck, pytest.raises(CorruptCheckpointError, match="the chunk's 24"):
        ck.read("w")


def test_a_zstd_chunk_that_inflates_past_its_chunk_is_refused(tmp_path):
    zstandard = pytest.importorskip("zstandard")
    meta = json.loads(ZARRAY)
    meta["compressor"] = {"id": "zstd", "level": 1}
    bomb = zstandard.ZstdCompressor().compress(bytes(64 << 20))
    db = _database(tmp_path, {"a": _leaf({b"w/.zarray": json.dumps(meta).encode(), b"w/0.0": bomb})}, "a")
    with open_checkpoint(str(db)) as ck, pytest.raises(CorruptCheckpointError, match="more than the chunk's 24 bytes"):
        ck.read("w")


@pytest.mark.parametrize("meta", [
    {"zarr_format": 2, "shape": [2, 3], "chunks": [2], "dtype": "<f4"},
    {"zarr_format": 2, "shape": [2, 3], "chunks": [2, 3], "dtype": "object"},
    {"zarr_format": 2, "shape": [2, 3], "chunks": [2, 3], "dtype": "<f4", "compressor": {"id": "blosc"}},
    {"zarr_format": 2, "shape": [-1], "chunks": [1], "dtype": "<f4"},
    {"zarr_format": 2, "shape": [4], "chunks": [0], "dtype": "<f4"},
    {"zarr_format": 3, "shape": [4], "data_type": "float32", "chunk_grid": {"name": "rectilinear"}, "codecs": []},
    {"zarr_format": 3, "shape": [4], "data_type": "float32",   # a chunk's own crc32c codec: not decoded, refused
     "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4]}},
     "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}]},
    {"zarr_format": 9},
    [1, 2],
])
def test_zarr_metadata_ckptstat_cannot_read_is_refused_naming_the_array(tmp_path, capsys, meta):
    db = _database(tmp_path, {"a": _leaf({b"w/.zarray": json.dumps(meta).encode()})}, "a")
    assert "array 'w': zarr metadata" in _cli_refuses(db, capsys)


def test_a_chunk_absent_with_a_nonzero_fill_value_is_refused_not_invented(tmp_path):
    meta = json.loads(ZARRAY)
    meta["fill_value"] = 1.5
    db = _database(tmp_path, {"a": _leaf({b"w/.zarray": json.dumps(meta).encode()})}, "a")
    with open_checkpoint(str(db)) as ck, pytest.raises(CheckpointError, match="fill value is not zero"):
        ck.read("w")


def test_audit_takes_an_orbax_folder_as_one_checkpoint_and_each_step_as_one(tmp_path, capsys):
    zoo = tmp_path / "zoo"
    shutil.copytree(fixture("orbax", "train"), zoo / "jax-run")
    shutil.copytree(fixture("orbax", "manager"), zoo / "runs" / "mgr")
    out = tmp_path / "audit.jsonl"
    assert main(["audit", str(zoo), "--out", str(out)]) == 0
    records = {os.path.relpath(r["path"], zoo): r for r in map(json.loads, out.read_text().splitlines())}
    assert sorted(records) == ["jax-run", os.path.join("runs", "mgr", "10"), os.path.join("runs", "mgr", "20")]
    assert records["jax-run"]["parameters"] == CASES["train"]["params"]
    assert all(r["format"].startswith("orbax (") and r["error"] is None for r in records.values())
    assert "0 files skipped" in capsys.readouterr().out


def test_trend_follows_a_checkpoint_managers_steps_with_optax_second_moments(capsys):
    """`trend` over an orbax CheckpointManager's run: the parameters' norm per step and the mean of Adam's second
    moments (optax's `nu`, each attributed to its parameter) as jax computed them when it saved them."""
    assert main(["trend", fixture("orbax", "run"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    run = EXPECTED["run"]
    assert [s["step"] for s in report["steps"]] == sorted(map(int, run))
    for series, opt in zip(report["total"]["series"], report["optimizer"]):
        want = run[str(series["step"])]
        assert series["norm"] == pytest.approx(want["params_norm"], rel=1e-12)
        assert opt["elements"] == want["nu_elements"] and opt["mean"] == pytest.approx(want["nu_mean"], rel=1e-9)
        assert opt["attributed"] == opt["tensors"]


# ---- over a URL -------------------------------------------------------------------------------------------------

def _json_of(capsys, *args: str) -> tuple[int, dict | None, str]:
    rc = main([*args, "--json"])
    out, err = capsys.readouterr()
    return rc, (json.loads(out) if rc == 0 else None), err


@pytest.mark.parametrize("case", ["train", "sharded", "dtypes-zarr3", "manager/20"])
def test_an_orbax_folder_over_https_and_hf_reads_as_the_local_one(capsys, monkeypatch, case):
    from remote_server import Server

    local = {cmd: _json_of(capsys, cmd, fixture("orbax", case))[1] for cmd in ("summary", "stats")}
    with Server(fixture("orbax"), hub={"org/jax": fixture("orbax", case)}) as s:
        monkeypatch.setenv("HF_ENDPOINT", s.url)
        for url in (f"{s.url}/{case}/", "hf://org/jax"):
            for cmd in ("summary", "stats"):
                rc, report, err = _json_of(capsys, cmd, url)
                assert rc == 0, err
                for r in (report, local[cmd]):
                    for k in ("path", "files", "seconds", "fetched", "file_size", "checkpoint"):
                        r.pop(k, None)
                assert json.loads(json.dumps(report).replace(url.rstrip("/"), "X")) == \
                    json.loads(json.dumps(local[cmd]).replace(fixture("orbax", case), "X")), (url, cmd)


@pytest.mark.parametrize("behaviour", [{"claim": 64}, {"overlong": 7}, {"ranges": False}, {"drop": True},
                                       {"failures": {"/train/manifest.ocdbt": [503, 503, 503]}}])
def test_a_server_that_lies_or_fails_gives_the_local_figures_or_one_line(capsys, behaviour):
    """Values are never invented from what a server claims: the report equals the local one, or one line says why."""
    from remote_server import Server

    _, local, _ = _json_of(capsys, "stats", fixture("orbax", "train"))
    with Server(fixture("orbax"), **behaviour) as s:
        rc, report, err = _json_of(capsys, "stats", f"{s.url}/train/")
    if rc == 0:
        for r in (report, local):
            for k in ("path", "seconds", "fetched"):
                r.pop(k, None)
        assert json.loads(json.dumps(report).replace(f"{s.url}/train", "X")) == \
            json.loads(json.dumps(local).replace(fixture("orbax", "train"), "X"))
    else:
        assert rc == 1 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err


def test_a_folder_per_array_item_over_a_url_is_refused_in_one_line(capsys):
    from remote_server import Server

    with Server(fixture("orbax")) as s:
        assert main([f"{s.url}/no-ocdbt/"]) == 1
    err = capsys.readouterr().err
    assert "use_ocdbt=False" in err and len(err.strip().splitlines()) == 1


def test_the_chunks_of_the_tensor_being_read_are_held_in_memory_up_to_the_budget(tmp_path, monkeypatch):
    """A tensor of many chunks read in C order across them: its decoded chunks are kept (no chunk decoded twice),
    past HELD_IN_MEMORY on disk, and the values are the stored ones."""
    from ckptstat.formats import orbax

    monkeypatch.setattr(orbax, "HELD_IN_MEMORY", 16 << 10)
    values = np.arange(64 * 1024, dtype="<f4").reshape(64, 1024)
    meta = {"zarr_format": 2, "shape": [64, 1024], "chunks": [64, 16], "dtype": "<f4", "compressor": None,
            "fill_value": None, "filters": None, "order": "C"}
    entries = {b"w/.zarray": json.dumps(meta).encode()}
    for j in range(64):
        entries[f"w/0.{j}".encode()] = values[:, 16 * j:16 * (j + 1)].tobytes()
    db = _database(tmp_path, {"a": _leaf(entries)}, "a")
    with open_checkpoint(str(db)) as ck:
        got = np.concatenate([c for c in ck.iter_chunks("w", 8 << 10)])
        reader = ck.readers[ck["w"].file]
        assert reader.in_memory <= 16 << 10 and len(reader.decoded) == 64
        assert sum(f._rolled for f in reader.decoded.values()) >= 64 - (16 << 10) // 4096
    assert got.tolist() == values.reshape(-1).tolist()


def test_audit_of_a_url_takes_each_orbax_folder_as_one_checkpoint(tmp_path, capsys):
    from remote_server import Server

    zoo = tmp_path / "zoo"
    shutil.copytree(fixture("orbax", "train"), zoo / "jax-run")
    shutil.copytree(fixture("orbax", "manager", "20"), zoo / "step-20")
    out = tmp_path / "audit.jsonl"
    with Server(str(zoo)) as s:
        assert main(["audit", s.url + "/", "--out", str(out)]) == 0
        records = {r["path"].rstrip("/").rsplit("/", 1)[-1]: r for r in map(json.loads, out.read_text().splitlines())}
    assert sorted(records) == ["jax-run", "step-20"]
    assert records["jax-run"]["parameters"] == CASES["train"]["params"]
    assert all(r["format"].startswith("orbax (") and r["error"] is None for r in records.values())


def test_a_save_whose_process_databases_were_never_merged_reads_them_together(tmp_path):
    """orbax merges each process's OCDBT database (ocdbt.process_N/) into the item's manifest.ocdbt when the save
    finalises; a save stopped before that holds the per-process databases alone: they are read together."""
    item = tmp_path / "train"
    shutil.copytree(fixture("orbax", "train"), item)
    (item / "manifest.ocdbt").unlink()
    shutil.rmtree(item / "d")
    with open_checkpoint(str(item)) as ck:
        assert "not merged" in ck.format
        assert sorted(ck.tensors) == sorted(CASES["train"]["arrays"])
        name = "params.params.embed_tokens.embedding"
        values = _values(ck, name)
        assert hashlib.sha256(values.astype("<f8").tobytes()).hexdigest() == CASES["train"]["arrays"][name]["sha256"]
