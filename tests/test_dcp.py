"""torch.distributed.checkpoint folders (ckptstat/formats/dcp/, docs/dcp.md), on the samples
fixtures/make_dcp.py wrote with torch's own `dcp.save` (a 2-rank gloo group of DTensors, and one process).
Every expected count, shape, dtype and value comes from torch reading the same folder."""
from __future__ import annotations

import argparse
import io
import json
import os
import pickle
import shutil
import subprocess
import sys
import warnings

import library_runner
import numpy as np
import pytest
from conftest import ROOT, fixture
from hostile_corpus_dcp import calling_mkdir, frame, item_bytes, zstd_folder

from ckptstat import open_checkpoint
from ckptstat.cli import main
from ckptstat.errors import CheckpointError, CorruptCheckpointError, UnsafeCheckpointError
from ckptstat.naming import role_of

torch = pytest.importorskip("torch")
import torch.distributed.checkpoint as dcp  # noqa: E402
from torch.distributed.checkpoint.metadata import TensorStorageMetadata  # noqa: E402

FOLDERS = ["sharded", "single", "zstd"]   # zstd: through torch's ZStandard extension


def _torch(folder: str) -> tuple[object, dict[str, torch.Tensor]]:
    """torch's Metadata of the folder and every tensor as dcp.load reads it (no process group)."""
    meta = dcp.FileSystemReader(folder).read_metadata()
    sd = {k: torch.empty(m.size, dtype=m.properties.dtype) for k, m in meta.state_dict_metadata.items()
          if isinstance(m, TensorStorageMetadata)}
    dcp.load(sd, checkpoint_id=folder, no_dist=True)
    return meta, sd


@pytest.mark.parametrize("name", FOLDERS)
def test_tensors_and_values_equal_torchs_load(name):
    folder = fixture("dcp", name)
    meta, sd = _torch(folder)
    ckpt = open_checkpoint(folder)
    assert ckpt.format == "dcp" and ckpt.path.endswith(".metadata")
    assert sorted(ckpt.tensors) == sorted(sd)
    for fqn, t in sd.items():
        info = ckpt[fqn]
        assert info.shape == tuple(t.shape), fqn
        assert info.dtype == {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16", torch.int64: "I64",
                              torch.bool: "BOOL", torch.float64: "F64"}[t.dtype], fqn
        assert info.extra["dcp_chunks"] == len(meta.state_dict_metadata[fqn].chunks), fqn
        want = (t.float() if t.dtype == torch.bfloat16 else t).numpy()
        np.testing.assert_array_equal(ckpt.read(fqn), want, err_msg=fqn)
    files = {s.relative_path for s in meta.storage_data.values()}
    assert sorted(os.path.basename(f) for f in ckpt.files[1:]) == sorted(files)
    non_tensors = [k for k in meta.state_dict_metadata if k not in sd]
    assert non_tensors and list(ckpt.objects) == non_tensors


def _objects(folder: str) -> dict[str, object]:
    """Every non-tensor item as torch's own dcp.load gives it back (torch.load(weights_only=False) of its bytes)."""
    meta = dcp.FileSystemReader(folder).read_metadata()
    objects = {k: None for k, m in meta.state_dict_metadata.items() if not isinstance(m, TensorStorageMetadata)}
    dcp.load(objects, checkpoint_id=folder, no_dist=True)
    return objects


def _json(v: object) -> object:
    return json.loads(json.dumps(v))   # tuples as lists: what ckptstat's JSON holds


@pytest.mark.parametrize("name", FOLDERS)
def test_non_tensor_items_equal_dcp_loads(name):
    """BytesStorageMetadata items: each listed with its stored size; a plain value equal to dcp.load's, an
    argparse.Namespace (outside torch's allowlist: training scripts' plain data) as its attributes."""
    folder = fixture("dcp", name)
    meta = dcp.FileSystemReader(folder).read_metadata()
    want = _objects(folder)
    ckpt = open_checkpoint(folder)
    assert list(ckpt.objects) == list(want)
    sizes = {k.fqn: s.length for k, s in meta.storage_data.items() if k.fqn in want}
    for fqn, v in want.items():
        o = ckpt.objects[fqn]
        assert o["bytes"] == sizes[fqn], fqn
        if isinstance(v, (int, float, str, list, tuple, type(None))):
            assert o["value"] == _json(v) and o["type"] == type(v).__name__, fqn
        elif isinstance(v, argparse.Namespace):
            assert o["value"] == _json(vars(v)) and o["type"] == "Namespace", fqn
        else:
            assert "value" not in o and f"'{type(v).__module__}.{type(v).__name__}'" in o["unread"], fqn


def test_non_tensor_items_past_the_bound_are_listed_unread(monkeypatch):
    from ckptstat.formats.dcp import objects

    monkeypatch.setattr(objects, "MAX_OBJECTS", 3)
    ckpt = open_checkpoint(fixture("dcp", "sharded"))
    assert len(ckpt.objects) == len(_objects(fixture("dcp", "sharded")))
    assert sum("value" in o for o in ckpt.objects.values()) == 3
    assert all("past the first 3" in o["unread"] for o in ckpt.objects.values() if "value" not in o)


def test_step_and_learning_rate_in_the_training_line(capsys):
    """The `step` and `lr` a training loop saved beside the model (the shallowest names; the optimizer's own
    param_groups lr is deeper) make the training line, as for the Trainer folders."""
    folder = fixture("dcp", "sharded")
    want = _objects(folder)
    ckpt = open_checkpoint(folder)
    assert ckpt.training == {"library": "torch.distributed.checkpoint", "global_step": want["step"], "epoch": None,
                             "learning_rate": want["lr"], "learning_rate_from": "lr"}
    assert main([folder]) == 0
    out = capsys.readouterr().out
    assert f"training     torch.distributed.checkpoint, step {want['step']}, learning rate {want['lr']:.6g} (lr)" in out
    assert f"objects      step = {want['step']}" in out
    assert main([folder, "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["training"]["global_step"] == want["step"] and r["objects"]["extra.run"]["value"] == want["extra.run"]
    # an optimizer's folder alone: its param_groups' lr
    lr_only = {k: v for k, v in want.items() if k.startswith("optim.")}
    from ckptstat.formats.dcp.objects import training_of
    assert training_of({k: {"value": v} for k, v in lr_only.items()})["learning_rate"] == want["optim.param_groups.0.lr"]


def test_a_tensor_sharded_across_two_rank_files_reads_in_small_chunks():
    folder = fixture("dcp", "sharded")
    meta, sd = _torch(folder)
    ckpt = open_checkpoint(folder)
    two = [k for k, m in meta.state_dict_metadata.items() if isinstance(m, TensorStorageMetadata) and len(m.chunks) == 2]
    assert "model.0.weight" in two and "model.2.bias" in two   # Shard(0), one of them uneven (5 rows over 2 ranks)
    cols = meta.state_dict_metadata["model.2.weight"].chunks    # Shard(1): each chunk a box of columns
    assert sorted(tuple(c.offsets) for c in cols) == [(0, 0), (0, 4)]
    for fqn in two:
        stored = {meta.storage_data[k].relative_path for k in meta.storage_data if k.fqn == fqn}
        assert len(stored) == 2, fqn            # one chunk in each rank's file
        assert ckpt[fqn].offset is None
        # chunks of 3 elements: every range crosses rows and the boundary between the ranks' chunks
        got = np.concatenate(list(ckpt.iter_chunks(fqn, chunk_bytes=12)))
        np.testing.assert_array_equal(got, sd[fqn].numpy().reshape(-1), err_msg=fqn)


def test_optimizer_state_apart_from_the_model():
    folder = fixture("dcp", "sharded")
    _, sd = _torch(folder)
    ckpt = open_checkpoint(folder)
    roles = {t.name: role_of(t.name, t.dtype, t.shape) for t in ckpt}
    assert {k for k, r in roles.items() if r == "optimizer"} == {k for k in sd if k.startswith("optim.")}
    assert {k for k, r in roles.items() if r != "optimizer"} == {k for k in sd if k.startswith("model.")}


def test_headers_without_importing_torch():
    code = ("import sys; from ckptstat import open_checkpoint; c = open_checkpoint(sys.argv[1]); "
            "c.read('model.0.weight'); assert 'torch' not in sys.modules, 'torch imported'; print(len(c.tensors))")
    out = subprocess.run([sys.executable, "-c", code, fixture("dcp", "sharded")], capture_output=True, text=True,
                         cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT})
    assert out.returncode == 0, out.stderr
    assert int(out.stdout) == len(_torch(fixture("dcp", "sharded"))[1])


def test_the_safetensors_serialization_format():
    """FileSystemWriter(serialization_format=SAFETENSORS) over 2 ranks: each rank file ends with one safetensors blob of
    its chunks. torch's own FileSystemReader cannot load it back (it torch.loads the blob's bytes); the oracle is the
    safetensors library's load of each blob, each chunk placed at its DCP_SHARDING_INFO offsets, into tensors of the
    sizes torch's metadata states."""
    from safetensors.torch import load as load_safetensors

    folder = fixture("dcp", "safetensors")
    meta = dcp.FileSystemReader(folder).read_metadata()
    tensors = {k: m for k, m in meta.state_dict_metadata.items() if isinstance(m, TensorStorageMetadata)}
    want = {k: torch.full(tuple(m.size), float("nan"), dtype=m.properties.dtype) for k, m in tensors.items()}
    for rel in {s.relative_path for k, s in meta.storage_data.items() if k.fqn in tensors}:
        start = min(s.offset for k, s in meta.storage_data.items() if k.fqn in tensors and s.relative_path == rel)
        with open(os.path.join(folder, rel), "rb") as f:
            blob = f.read()[start:]
        n = int.from_bytes(blob[:8], "little")
        sharding = json.loads(json.loads(blob[8:8 + n])["__metadata__"]["DCP_SHARDING_INFO"])
        for fqn, chunk in load_safetensors(blob).items():
            box = tuple(slice(o, o + s) for o, s in zip(sharding[fqn]["saved_offsets"], chunk.shape))
            want[fqn][box] = chunk
    ckpt = open_checkpoint(folder)
    assert sorted(ckpt.tensors) == sorted(want)
    assert any(m.extra["dcp_chunks"] == 2 for m in ckpt)
    for fqn, t in want.items():
        assert not t.isnan().any(), fqn
        assert ckpt[fqn].extra["dcp_chunks"] == len(tensors[fqn].chunks)
        np.testing.assert_array_equal(ckpt.read(fqn), t.numpy(), err_msg=fqn)
    assert ckpt.objects["step"]["value"] == _objects(folder)["step"]


def test_huggingface_storage_writer_shards(capsys):
    """HuggingFaceStorageWriter(save_distributed=True): a safetensors file a rank, its chunks placed by
    DCP_SHARDING_INFO, no index. Read as one checkpoint equal to torch's own HuggingFaceStorageReader load; one rank's
    file alone is refused in one line pointing at the folder."""
    from torch.distributed.checkpoint import HuggingFaceStorageReader

    folder = fixture("dcp", "hf_shards")
    reader = HuggingFaceStorageReader(folder)
    meta = reader.read_metadata()
    sd = {k: torch.empty(m.size, dtype=m.properties.dtype) for k, m in meta.state_dict_metadata.items()}
    dcp.load(sd, storage_reader=reader, no_dist=True)
    ckpt = open_checkpoint(folder)
    assert ckpt.format == "dcp (safetensors shards)" and sorted(ckpt.tensors) == sorted(sd)
    assert any(t.extra["dcp_chunks"] == 2 for t in ckpt)
    for fqn, t in sd.items():
        assert ckpt[fqn].shape == tuple(t.shape) and ckpt[fqn].extra["dcp_chunks"] == len(meta.state_dict_metadata[fqn].chunks)
        np.testing.assert_array_equal(ckpt.read(fqn), t.numpy(), err_msg=fqn)
    one = os.path.join(folder, sorted(os.listdir(folder))[0])
    assert main([one]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "open the folder" in err, err


def test_rank_local_metadata(capsys):
    """dcp.save(use_collectives=False): each rank writes `__<rank>.metadata` of its own chunks (torch's
    read_metadata(rank=r) reads each); the folder, or any one of them, is read as the union, a chunk two ranks
    stored (the Replicate bias) once. The same model, saved in the same run with rank coordination, is the `sharded`
    folder: its values as torch's dcp.load reads them are the oracle."""
    folder = fixture("dcp", "rank_local")
    reader = dcp.FileSystemReader(folder)
    metas = [reader.read_metadata(rank=r) for r in range(2)]
    boxes: dict[str, set] = {}
    for m in metas:
        for fqn, md in m.state_dict_metadata.items():
            if isinstance(md, TensorStorageMetadata):
                boxes.setdefault(fqn, set()).update((tuple(c.offsets), tuple(c.sizes)) for c in md.chunks)
    repeated = sum(len(m.state_dict_metadata[f].chunks) for m in metas for f in boxes if f in m.state_dict_metadata) \
        - sum(map(len, boxes.values()))
    assert repeated >= 1
    _, sd = _torch(fixture("dcp", "sharded"))
    step = {"step": None}
    dcp.load(step, checkpoint_id=folder, no_dist=True)   # (no global .metadata: torch falls back to rank 0's own)
    for path in (folder, os.path.join(folder, "__1.metadata")):
        ckpt = open_checkpoint(path)
        assert sorted(ckpt.tensors) == sorted(boxes) == sorted(k for k in sd if k.startswith("model."))
        for fqn in boxes:
            assert ckpt[fqn].extra["dcp_chunks"] == len(boxes[fqn]), fqn
            np.testing.assert_array_equal(ckpt.read(fqn), sd[fqn].numpy(), err_msg=fqn)
        assert ckpt.metadata["dcp.rank_local_metadata"] == "2"
        assert any(f"{repeated} chunk(s) stored by several ranks" in n for n in ckpt.notes)
        assert ckpt.objects["step"]["value"] == ckpt.training["global_step"] == step["step"]
    assert main(["scan", folder, "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert sorted(e["path"] for e in r["files"]) == ["__0.metadata", "__1.metadata"]
    assert all(e["status"] == "safe" for e in r["files"])


def test_a_folder_written_through_the_zstd_extension(capsys):
    """torch's own ZStandard stream extension with the real zstandard package (fixtures/make_dcp.py): every item a
    zstd frame, named in the metadata; values and items equal torch's dcp.load (FOLDERS above); `stats` streams them;
    scan decompresses each non-tensor item and traces the pickle inside (safe here)."""
    folder = fixture("dcp", "zstd")
    meta = dcp.FileSystemReader(folder).read_metadata()
    assert {tuple(s.transform_descriptors) for s in meta.storage_data.values()} == {("stream.zstd/1",)}
    ckpt = open_checkpoint(folder)
    assert all(t.extra["dcp_extensions"] == ["stream.zstd/1"] for t in ckpt)
    assert any("decompressed (bounded)" in n for n in ckpt.notes)
    assert main(["stats", folder, "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["scan", os.path.join(folder, ".metadata"), "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    items = [p for p in r["pickles"] if " item " in p["record"]]
    assert r["status"] == "safe" and not r["unknown"]
    assert sorted(p["record"].split("'")[1] for p in items) == sorted(_objects(folder))
    assert all("(zstd-decompressed)" in p["record"] for p in items)


def test_zstd_without_the_extra_names_it(tmp_path):
    """Without zstandard (the import refused as an absent package is): the folder is listed, a value read is one line
    naming the extra, the non-tensor items unread saying so, and scan unknown naming the extra."""
    from test_extras import WRAPPER

    folder = fixture("dcp", "zstd")
    run = [sys.executable, "-c", WRAPPER, "zstandard"]
    r = subprocess.run([*run, "stats", folder, "--no-progress"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "pip install 'ckptstat[zstd]'" in r.stderr, r.stderr
    assert "stream.zstd/1" in r.stderr and "(zstandard is not installed)" in r.stderr, r.stderr
    r = subprocess.run([*run, "summary", folder, "--json"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    objects = json.loads(r.stdout)["objects"]
    assert objects and all("ckptstat[zstd]" in o["unread"] for o in objects.values())
    r = subprocess.run([*run, "scan", os.path.join(folder, ".metadata"), "--json"], capture_output=True, text=True,
                       timeout=300)
    report = json.loads(r.stdout)
    assert r.returncode == 1 and report["status"] == "unknown", r.stderr
    assert len(report["unknown"]) == len(_objects(folder)) and all("ckptstat[zstd]" in u for u in report["unknown"])


# RFC 8878: magic, Frame_Header_Descriptor 0xE0 (Single_Segment, an 8-byte Frame_Content_Size), 2,000; one raw
# block, the last, of 1,000 bytes
RAW_FRAME_DECLARING_2000 = (b"\x28\xb5\x2f\xfd\xe0" + (2000).to_bytes(8, "little")
                            + ((1000 << 3) | 1).to_bytes(3, "little") + b"\1" * 1000)


@pytest.mark.parametrize("label, replace, why", [
    ("declares", lambda w: {"w": frame(b"\0" * (1 << 20))}, "declares 1,048,576 bytes"),
    ("cut", lambda w: {"w": w[:-6]}, "cut short"),
    ("inflates", lambda w: {"w": frame(b"\0" * (8 << 20), declare=False)}, "inflates past"),
    ("not zstd", lambda w: {"w": b"PK" + w[2:]}, "not a zstd frame"),
    ("lies", lambda w: {"w": RAW_FRAME_DECLARING_2000}, "zstd: "),   # (zstd itself finds 1,000 bytes, not 2,000)
])
def test_hostile_zstd_frames(tmp_path, capsys, label, replace, why):
    """A tensor item whose frame claims more than its chunk's zip can take, is cut short, inflates past that bound
    with no size declared, is not a zstd frame, or holds other than it declares: listed (headers), its values refused
    in one line naming the file, before decompressing what the header claims (docs/dcp.md)."""
    folder = zstd_folder(str(tmp_path / label), replace(item_bytes(fixture("dcp", "zstd"), "w")))
    ckpt = open_checkpoint(folder)
    with pytest.raises(CorruptCheckpointError, match=why):
        ckpt.read("w")
    assert main(["stats", folder, "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and why in err and "__0_0.distcp" in err and "Traceback" not in err, err


def test_a_pickle_payload_inside_a_compressed_item(tmp_path, capsys):
    """A non-tensor item whose zstd frame holds a torch.save zip calling os.mkdir: DCP's own load (the real
    zstandard, torch.load(weights_only=False)) runs it, proven in a throw-away process; ckptstat lists it unread and
    scan, decompressing it, calls the folder UNSAFE naming os.mkdir."""
    marker = tmp_path / "RAN"
    folder = zstd_folder(str(tmp_path / "evil"), {"step": frame(calling_mkdir(str(marker)), declare=False)})
    load = ("import sys, torch.distributed.checkpoint as dcp\n"
            "dcp.load({'step': None}, checkpoint_id=sys.argv[1], no_dist=True)")
    library_runner.python(load, folder)
    assert os.path.isdir(marker), "the payload must run under DCP's load"
    os.rmdir(marker)
    ckpt = open_checkpoint(folder)
    assert "os.mkdir" in ckpt.objects["step"]["unread"]
    assert main(["scan", os.path.join(folder, ".metadata"), "--json"]) == 1
    r = json.loads(capsys.readouterr().out)
    assert r["status"] == "unsafe" and r["unsafe_globals"] == ["os.mkdir"], r
    (finding,) = r["findings"]
    assert "item 'step'" in finding["record"] and "(zstd-decompressed)" in finding["record"]
    assert not os.path.exists(marker)


# ---------------------------------------------------------------------------------------------- hostile
@pytest.fixture
def copy(tmp_path):
    shutil.copytree(fixture("dcp", "sharded"), tmp_path / "ckpt")
    return tmp_path / "ckpt"


def _one_line(path, capsys) -> str:
    assert main([str(path)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("ckptstat: error: ") and "Traceback" not in err, err
    return err


def test_truncated_distcp(copy, capsys):
    f = copy / "__1_0.distcp"
    f.write_bytes(f.read_bytes()[:-100])
    with pytest.raises(CorruptCheckpointError, match="past the end"):
        open_checkpoint(copy)
    assert ".metadata" in _one_line(copy, capsys)


def _rewrite(folder, change) -> None:
    meta = pickle.loads((folder / ".metadata").read_bytes())   # the fixture torch wrote: trusted here
    change(meta)
    (folder / ".metadata").write_bytes(pickle.dumps(meta))


def test_metadata_offset_past_the_file(copy, capsys):
    def far(meta) -> None:
        info = next(iter(meta.storage_data.values()))
        info.offset = 10**12
    _rewrite(copy, far)
    with pytest.raises(CorruptCheckpointError, match="past the end"):
        open_checkpoint(copy)
    _one_line(copy, capsys)


def test_chunk_outside_its_tensor(copy):
    def outside(meta) -> None:
        meta.state_dict_metadata["model.0.weight"].chunks[1].offsets = torch.Size([7, 0])
    _rewrite(copy, outside)
    with pytest.raises(CorruptCheckpointError, match="not inside"):
        open_checkpoint(copy)


def test_item_that_is_another_chunks_bytes(copy):
    """An item pointing at another tensor's zip: its dtype or shape differs from what the metadata says."""
    def swap(meta) -> None:
        infos = [i for k, i in meta.storage_data.items() if k.fqn in ("model.0.weight", "model.2.bias")
                 and i.relative_path == "__1_0.distcp"]
        infos[0].offset, infos[1].offset = infos[1].offset, infos[0].offset
        infos[0].length, infos[1].length = infos[1].length, infos[0].length
    _rewrite(copy, swap)
    with pytest.raises(CorruptCheckpointError, match="metadata says"):
        open_checkpoint(copy)


def test_global_outside_the_allowlist_is_refused(copy, capsys):
    data = (copy / ".metadata").read_bytes()
    at = data.index(b"\x81")     # after Metadata's NEWOBJ
    (copy / ".metadata").write_bytes(data[:at] + b"cposix\nsystem\n(S'touch pwned'\ntR.")
    with pytest.raises(UnsafeCheckpointError, match="posix.system"):
        open_checkpoint(copy)
    assert "posix.system" in _one_line(copy, capsys)
    assert not os.path.exists("pwned")


def test_a_plain_class_in_the_metadata_is_refused(copy):
    """A DCP pickle may NEWOBJ only DCP's own metadata classes: not even an allowlisted torch global."""
    data = (copy / ".metadata").read_bytes()
    at = data.index(b"\x81")
    (copy / ".metadata").write_bytes(data[:at] + b"\x8c\x05torch\x8c\x04Size\x93)\x81.")
    with pytest.raises(CorruptCheckpointError, match="NEWOBJ"):
        open_checkpoint(copy)


def test_one_rank_file_alone_points_to_the_folder(capsys):
    path = fixture("dcp", "sharded", "__1_0.distcp")
    assert main([path]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "open the folder" in err, err


# ------------------------------------------------------------------------------------------------- scan
DCP_READ = """
import sys
from torch.distributed.checkpoint import FileSystemReader
FileSystemReader(sys.argv[1]).read_metadata()
"""


def _dcp_reader_runs(folder, marker) -> bool:
    """Whether torch.distributed.checkpoint's own reader (plain pickle.load of .metadata), in a throw-away
    process, creates `marker`."""
    library_runner.python(DCP_READ, str(folder))
    return os.path.isdir(marker)


def test_scan_calls_a_genuine_metadata_safe(capsys):
    """DCP's reader unpickles .metadata with plain pickle.load: a genuine one imports only DCP's own classes; its
    non-tensor items (torch.load(weights_only=False) in DCP's load) are traced too, and hold plain values."""
    folder = fixture("dcp", "sharded")   # (torch's own dcp.load reads it: test_tensors_and_values_equal_torchs_load)
    assert main(["scan", folder, "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    (entry,) = r["files"]
    assert entry["path"] == ".metadata" and entry["status"] == "safe", entry["verdict"]
    assert entry["format"] == "torch.distributed.checkpoint metadata" and not entry["weights_only_loadable"]
    assert main(["scan", os.path.join(folder, ".metadata"), "--json"]) == 0
    items = [p for p in json.loads(capsys.readouterr().out)["pickles"] if " item " in p["record"]]
    assert sorted(p["record"].split("'")[1] for p in items) == sorted(_objects(folder))


def test_scan_judges_the_non_tensor_items(capsys):
    """The single folder's `args` item names argparse.Namespace: torch.load(weights_only=True) refuses it, DCP's load
    (weights_only=False) imports it, plain data that runs no code of the file's choosing: scan says safe, naming it;
    a payload in an item is UNSAFE, naming the item (test_a_pickle_payload_inside_a_compressed_item)."""
    folder = fixture("dcp", "single")
    meta = dcp.FileSystemReader(folder).read_metadata()
    ((key, info),) = [(k, s) for k, s in meta.storage_data.items() if k.fqn == "args"]
    with open(os.path.join(folder, info.relative_path), "rb") as f:
        f.seek(info.offset)
        raw = f.read(info.length)
    with pytest.raises(pickle.UnpicklingError, match="argparse.Namespace"):
        torch.load(io.BytesIO(raw), weights_only=True)
    assert main(["scan", os.path.join(folder, ".metadata"), "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["status"] == "safe" and r["unsafe_globals"] == [] and r["plain_data_globals"] == ["argparse.Namespace"]
    assert "argparse.Namespace" in r["verdict"]


def test_scan_calls_a_hostile_metadata_unsafe(copy, tmp_path, capsys):
    """A .metadata that makes DCP's own reader run os.mkdir (proven by running it): UNSAFE, file and folder."""
    marker = tmp_path / "RAN"
    # DCP's Metadata first (as filesystem.py pickles it), then the payload; protocol 2: no frames to mend
    (copy / ".metadata").write_bytes(b"\x80\x02ctorch.distributed.checkpoint.metadata\nMetadata\n)\x81"
                                     + b"cos\nmkdir\n(" + pickle.dumps(str(marker), 0)[:-1] + b"tR0.")
    assert _dcp_reader_runs(copy, str(marker)), "the payload must run under DCP's reader"
    os.rmdir(marker)
    assert main(["scan", str(copy / ".metadata")]) == 1
    assert "os.mkdir" in capsys.readouterr().out
    assert main(["scan", str(copy)]) == 1
    capsys.readouterr()


# ------------------------------------------------------------------------- a Trainer checkpoint of an FSDP run
@pytest.fixture(scope="module")
def fsdp_run(tmp_path_factory):
    """Three `checkpoint-N/` folders as the Trainer leaves them with FSDP2 and a sharded state dict: accelerate's
    own save_fsdp_model / save_fsdp_optimizer in a 2-process gloo group (fixtures/make_fsdp_run.py)."""
    pytest.importorskip("accelerate")
    pytest.importorskip("transformers")
    out = tmp_path_factory.mktemp("fsdp") / "run"
    done = subprocess.run([sys.executable, os.path.join(ROOT, "fixtures", "make_fsdp_run.py"), str(out), "3"],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    return str(out)


def _fsdp_states(run):
    """Per checkpoint: (folder, the model's and the optimizer's tensors as dcp.load gives them, trainer_state.json)."""
    folders = sorted((d for d in os.listdir(run) if d.startswith("checkpoint-")), key=lambda d: int(d.split("-")[1]))
    out = []
    for d in folders:
        path = os.path.join(run, d)
        with open(os.path.join(path, "trainer_state.json")) as f:
            state = json.load(f)
        out.append((path, _torch(os.path.join(path, "pytorch_model_fsdp_0"))[1],
                    _torch(os.path.join(path, "optimizer_0"))[1], state))
    return out


def test_an_fsdp_trainer_checkpoint_is_read_as_a_whole(fsdp_run, capsys):
    path, model, optim, state = _fsdp_states(fsdp_run)[-1]
    assert {n for n in os.listdir(path) if os.path.isdir(os.path.join(path, n))} == {"pytorch_model_fsdp_0", "optimizer_0"}
    ckpt = open_checkpoint(path)
    assert sorted(ckpt.tensors) == sorted([*model, *optim])
    for name, t in [*model.items(), *optim.items()]:
        np.testing.assert_array_equal(ckpt.read(name), t.numpy(), err_msg=name)
    roles = {t.name: role_of(t.name, t.dtype, t.shape) for t in ckpt}
    assert {n for n, r in roles.items() if r == "optimizer"} == set(optim)
    assert [n for n in ckpt.objects if not n.startswith("trainer_state.")] == \
        list(_objects(os.path.join(path, "optimizer_0")))
    assert ckpt.object_value("trainer_state.global_step") == state["global_step"]   # trainer_state.json's values
    logged = [e["learning_rate"] for e in state["log_history"] if "learning_rate" in e]
    assert ckpt.training["library"] == "Hugging Face Trainer" and ckpt.training["global_step"] == state["global_step"]
    assert ckpt.training["epoch"] == state["epoch"] and ckpt.training["learning_rate"] == logged[-1]
    assert ckpt.training["optimizer"] == os.path.join(path, "optimizer_0")
    assert main([path, "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["parameters"]["unique"] == sum(t.numel() for t in model.values())
    assert r["architecture"]["family"] == "llama"


def test_trend_over_an_fsdp_trainer_run(fsdp_run):
    from test_trend import _figures, _same

    from ckptstat.analysis.trend import trend

    states = _fsdp_states(fsdp_run)
    ws = [s[1] for s in states]
    names = list(ws[0])
    r = trend([fsdp_run])
    assert r["layout"].startswith("Hugging Face Trainer")
    assert [s["global_step"] for s in r["steps"]] == [s[3]["global_step"] for s in states]
    assert sorted(t["name"] for t in r["tensors"]) == sorted(names)
    for t in range(len(states)):
        _same(r["total"]["series"][t], _figures(ws, t, names))
        for x in r["tensors"]:
            _same(x["series"][t], _figures(ws, t, [x["name"]]))
        vs = {n: v for n, v in states[t][2].items() if n.endswith(".exp_avg_sq")}
        cat = torch.cat([v.double().flatten() for v in vs.values()])
        opt = r["optimizer"][t]
        assert opt["tensors"] == len(vs) and opt["elements"] == cat.numel() and opt["max"] == cat.max().item()
        assert opt["mean"] == pytest.approx(cat.mean().item(), rel=1e-9)
        assert opt["attributed"] == len(vs)   # DCP's optimizer state is keyed by the parameter's name


def test_a_damaged_non_tensor_item_is_one_line(tmp_path, capsys):
    shutil.copytree(fixture("dcp", "single"), tmp_path / "ckpt")
    meta = dcp.FileSystemReader(str(tmp_path / "ckpt")).read_metadata()
    ((key, info),) = [(k, s) for k, s in meta.storage_data.items() if k.fqn == "step"]
    f = tmp_path / "ckpt" / info.relative_path
    data = bytearray(f.read_bytes())
    at = data.index(b"data.pkl", info.offset) + 8        # the pickle's bytes, after its local header's name
    data[at:at + 64] = b"\xff" * 64
    f.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="non-tensor item 'step'"):
        open_checkpoint(tmp_path / "ckpt")
    assert "'step'" in _one_line(tmp_path / "ckpt", capsys)


def test_a_missing_hf_shard_is_one_line(tmp_path, capsys):
    """The first rank's shard file gone: a gap in the writer's rank numbering (the last one gone cannot be told: no
    file records the tensors' sizes); a chunk's saved_offsets moved: its chunks no longer hold its elements."""
    shutil.copytree(fixture("dcp", "hf_shards"), tmp_path / "ckpt")
    first, last = sorted(os.listdir(tmp_path / "ckpt"))
    shutil.move(tmp_path / "ckpt" / first, tmp_path / first)
    with pytest.raises(CorruptCheckpointError, match="rank.s. 1 are missing"):
        open_checkpoint(tmp_path / "ckpt")
    _one_line(tmp_path / "ckpt", capsys)
    shutil.move(tmp_path / first, tmp_path / "ckpt" / first)
    from safetensors.torch import load_file, save_file

    path = str(tmp_path / "ckpt" / last)
    n = int.from_bytes(open(path, "rb").read(8), "little")
    header = json.loads(open(path, "rb").read(8 + n)[8:])
    sharding = json.loads(header["__metadata__"]["DCP_SHARDING_INFO"])
    fqn = next(k for k, v in sharding.items() if any(v["saved_offsets"]))
    sharding[fqn]["saved_offsets"] = [o + 1 for o in sharding[fqn]["saved_offsets"]]
    save_file(load_file(path), path, metadata={**header["__metadata__"], "DCP_SHARDING_INFO": json.dumps(sharding)})
    with pytest.raises(CorruptCheckpointError, match="chunks hold"):
        open_checkpoint(tmp_path / "ckpt")
    _one_line(tmp_path / "ckpt", capsys)


def test_transformers_distributed_save_reads_its_config(tmp_path, capsys):
    """transformers 5.25's save_pretrained(distributed_checkpoint=True) (distributed/checkpoint.py
    _save_model_checkpoint_distributed): HuggingFaceStorageWriter(save_distributed=True) shards beside the config.json
    save_pretrained writes. The shards were read without it (architecture from names, no config, no --config either):
    now the config is the folder's, as for any weights beside config.json."""
    T = pytest.importorskip("transformers")
    from torch.distributed.checkpoint import HuggingFaceStorageWriter

    model = T.Qwen3ForCausalLM(T.Qwen3Config(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                             num_attention_heads=2, num_key_value_heads=1, head_dim=16, vocab_size=100,
                                             tie_word_embeddings=False))
    model.config.architectures = [type(model).__name__]   # (as save_pretrained writes it)
    model.config.save_pretrained(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # (torch: "torch.distributed is disabled ... save in a single process")
        dcp.save(model.state_dict(), storage_writer=HuggingFaceStorageWriter(path=str(tmp_path), save_distributed=True,
                                                                             enable_consolidation=False))
    assert main(["summary", str(tmp_path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["config"] == str(tmp_path / "config.json") and out["resolved"]["model"] == "Qwen3ForCausalLM"
    assert out["parameters"]["unique"] == model.num_parameters()
    other = tmp_path / "elsewhere.json"
    T.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                  vocab_size=100).to_json_file(other)
    assert main(["summary", str(tmp_path), "--config", str(other), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["architecture"]["model_type"] == "llama"
