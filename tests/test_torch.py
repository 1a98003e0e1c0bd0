"""The PyTorch reader against files written by torch.save (fixtures/make_torch.py) and torch.load."""
from __future__ import annotations

import json
import os
import zipfile

import numpy as np
import pytest

from ckptstat import CkptstatError, census, open_checkpoint
from ckptstat.analysis import summary as report
from ckptstat.analysis.scan.torch_load import scan
from ckptstat.cli import main

FIX = os.path.join(os.path.dirname(__file__), "..", "fixtures")
TORCH_FIX = os.path.join(FIX, "torch")
EXPECTED = json.load(open(os.path.join(FIX, "expected_torch.json")))
FILES = ["bert-mlm/pytorch_model.bin", "bert-mlm-legacy/pytorch_model.bin", "dtypes.pt", "dtypes-legacy.pt",
         "train.pt", "my_weights.v2.pth"]
# torch dtype name -> ckptstat canonical dtype
DTYPE = {"float32": "F32", "float64": "F64", "float16": "F16", "bfloat16": "BF16", "float8_e4m3fn": "F8_E4M3",
         "float8_e5m2": "F8_E5M2", "int64": "I64", "int32": "I32", "uint8": "U8", "bool": "BOOL"}


def fx(rel: str) -> str:
    return os.path.join(TORCH_FIX, rel)


def flat(obj, prefix=""):
    import torch

    if isinstance(obj, torch.Tensor):
        return {prefix or "tensor": obj}
    out = {}
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.update(flat(v, f"{prefix}.{k}" if prefix else str(k)))
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            out.update(flat(v, f"{prefix}.{i}" if prefix else str(i)))
    return out


def torch_values(t) -> np.ndarray:
    import torch

    if t.dtype in (torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2):
        t = t.float()
    return t.detach().contiguous().numpy()


@pytest.mark.parametrize("rel", FILES + ["bert-mlm-sharded"])
def test_matches_generator_record(rel):
    exp = EXPECTED[rel]
    ckpt = open_checkpoint(fx(rel) if rel != "bert-mlm-sharded" else fx(rel + "/pytorch_model.bin.index.json"))
    assert sorted(ckpt.tensors) == sorted(exp["tensors"])
    for name, e in exp["tensors"].items():
        info = ckpt[name]
        assert info.dtype == DTYPE[e["dtype"]], name
        assert list(info.shape) == e["shape"], name
        assert (info.stride is None) == e["contiguous"], name
        total = float(ckpt.read(name).astype(np.float64).sum())
        assert total == pytest.approx(e["sum"], rel=1e-6, abs=1e-6), name
    if "aliases" in exp:
        assert census.aliases(ckpt) == exp["aliases"]
    if "parameters" in exp:
        assert report.summarize(ckpt)["parameters"]["unique"] == exp["parameters"]


@pytest.mark.parametrize("rel", FILES)
def test_values_equal_torch_load(rel):
    torch = pytest.importorskip("torch")
    loaded = flat(torch.load(fx(rel), weights_only=True))
    ckpt = open_checkpoint(fx(rel))
    assert set(loaded) == set(ckpt.tensors)
    for name, t in loaded.items():
        ours = ckpt.read(name)
        assert ours.shape == tuple(t.shape)
        np.testing.assert_array_equal(ours, torch_values(t), err_msg=name)
        # chunked reads give the same values in C order
        chunks = list(ckpt.iter_chunks(name, chunk_bytes=8))
        flat_chunks = np.concatenate(chunks) if chunks else np.empty(0)
        np.testing.assert_array_equal(flat_chunks, torch_values(t).reshape(-1), err_msg=name)


def test_sharded_index_equals_torch_load():
    torch = pytest.importorskip("torch")
    folder = fx("bert-mlm-sharded")
    ckpt = open_checkpoint(folder)
    assert ckpt.format == "pytorch (zip) (sharded)" and len(ckpt.files) == EXPECTED["bert-mlm-sharded"]["shards"]
    index = json.load(open(os.path.join(folder, "pytorch_model.bin.index.json")))
    for shard in set(index["weight_map"].values()):
        for name, t in torch.load(os.path.join(folder, shard), weights_only=True).items():
            np.testing.assert_array_equal(ckpt.read(name), torch_values(t))


def test_tied_decoder_is_an_alias_of_word_embeddings():
    for rel in ("bert-mlm/pytorch_model.bin", "bert-mlm-legacy/pytorch_model.bin"):
        ckpt = open_checkpoint(fx(rel))
        dec, emb = ckpt["cls.predictions.decoder.weight"], ckpt["bert.embeddings.word_embeddings.weight"]
        assert dec.storage == emb.storage and dec.alias_key == emb.alias_key
        r = report.summarize(ckpt)
        tie = {"name": "cls.predictions.decoder.weight", "same_as": "bert.embeddings.word_embeddings.weight"}
        assert tie in r["parameters"]["aliases"]


def test_views_strides_and_partial_view_note():
    ckpt = open_checkpoint(fx("dtypes.pt"))
    assert ckpt["transposed"].stride == (1, 4)
    assert ckpt["column"].stride == (4,)
    assert ckpt["expanded"].stride == (1, 0)
    assert ckpt["rows"].stride is None and ckpt["rows"].storage == ckpt["base"].storage
    assert ckpt["rows"].offset == ckpt["base"].offset + 2 * 4 * 4
    assert ckpt["transposed"].storage == ckpt["base"].storage
    assert "rows" not in census.aliases(ckpt)  # a partial view is not a tied weight
    assert any("several different views" in n for n in ckpt.notes)


def test_training_checkpoint_roles_and_metadata():
    ckpt = open_checkpoint(fx("train.pt"))
    rows = {r["name"]: r for r in report.tensors(ckpt)["tensors"]}
    assert rows["optimizer.state.0.exp_avg"]["role"] == "optimizer"
    assert rows["optimizer.state.3.exp_avg_sq"]["role"] == "optimizer"
    assert rows["optimizer.state.1.step"]["role"] == "optimizer"  # Adam's per-parameter step is optimizer state
    assert rows["model.0.weight"]["role"] == "parameter"
    assert ckpt.metadata["epoch"] == "3"
    r = report.summarize(ckpt)
    assert r["parameters"]["unique"] == EXPECTED["train.pt"]["parameters"]
    roles = {n["role"]: n["tensors"] for n in r["non_parameters"]}
    assert roles == {"optimizer": 12}


def test_archive_prefix_is_the_file_stem():
    ckpt = open_checkpoint(fx("my_weights.v2.pth"))
    assert ckpt.metadata["torch.archive"] == "my_weights.v2"
    assert zipfile.ZipFile(fx("my_weights.v2.pth")).namelist()[0] == "my_weights.v2/data.pkl"


def test_uncompressed_offsets_come_from_local_headers():
    ckpt = open_checkpoint(fx("dtypes.pt"))
    with zipfile.ZipFile(fx("dtypes.pt")) as zf, open(fx("dtypes.pt"), "rb") as f:
        info = zf.getinfo("dtypes/data/" + ckpt["f32"].storage)
        f.seek(ckpt["f32"].offset)
        assert f.read(info.file_size) == zf.read(info)
    assert ckpt["f32"].offset % 64 == 0  # torch aligns records to 64 bytes
    assert not ckpt.readers


def _rezip(src: str, dst: str, compression: int, transform=None) -> None:
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", compression) as zout:
        for info in zin.infolist():
            data = zin.read(info)
            if transform:
                data = transform(info.filename, data)
            if data is not None:
                zout.writestr(info.filename, data)


def test_compressed_records_are_streamed(tmp_path):
    torch = pytest.importorskip("torch")
    dst = str(tmp_path / "dtypes.pt")
    _rezip(fx("dtypes.pt"), dst, zipfile.ZIP_DEFLATED)
    ckpt = open_checkpoint(dst)
    assert ckpt["f32"].offset is None and dst in ckpt.readers
    for name, t in flat(torch.load(fx("dtypes.pt"), weights_only=True)).items():
        np.testing.assert_array_equal(ckpt.read(name), torch_values(t), err_msg=name)
        np.testing.assert_array_equal(np.concatenate(list(ckpt.iter_chunks(name, 8)) or [np.empty(0)]),
                                      torch_values(t).reshape(-1))


def test_big_endian_byteorder_record(tmp_path):
    """A big-endian writer's file: byteorder says "big" and each storage holds big-endian elements."""
    src = open_checkpoint(fx("dtypes.pt"))
    itemsize = {t.storage: t.dt.bits // 8 for t in src}

    def swap(name: str, data: bytes):
        if name.endswith("/byteorder"):
            return b"big"
        key = name.rsplit("/", 1)[-1]
        if "/data/" in name and itemsize[key] > 1:
            return np.frombuffer(data, f"<u{itemsize[key]}").byteswap().tobytes()
        return data

    dst = str(tmp_path / "dtypes.pt")
    _rezip(fx("dtypes.pt"), dst, zipfile.ZIP_STORED, swap)
    ckpt = open_checkpoint(dst)
    assert ckpt["f64"].byteorder == "big"
    for name in src.tensors:
        np.testing.assert_array_equal(ckpt.read(name), src.read(name), err_msg=name)


def test_zip_without_data_pkl_is_not_torch(tmp_path):
    p = tmp_path / "a.zip"
    with zipfile.ZipFile(p, "w") as z:
        z.writestr("x/other.txt", "hi")
    with pytest.raises(CkptstatError):
        open_checkpoint(p)


@pytest.mark.slow
def test_bert_base_unique_parameters(tmp_path):
    """bert-base BertForMaskedLM from BertConfig defaults (docs/oracles.md): 109,514,298 unique parameters."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    # Built on the meta device and given uninitialised CPU memory: the file's structure (names, shapes,
    # shared storages) is what torch.save writes for a trained model; random init would only cost time.
    with torch.device("meta"):
        model = transformers.BertForMaskedLM(transformers.BertConfig())
    model = model.to_empty(device="cpu")
    model.tie_weights()
    path = str(tmp_path / "pytorch_model.bin")
    torch.save(model.state_dict(), path)
    expected = sum(p.numel() for p in model.parameters())
    del model
    ckpt = open_checkpoint(path)
    r = report.summarize(ckpt)
    assert r["parameters"]["unique"] == expected == 109_514_298
    aliases = census.aliases(ckpt)
    assert aliases["cls.predictions.decoder.weight"] == "bert.embeddings.word_embeddings.weight"
    assert aliases["cls.predictions.decoder.bias"] == "cls.predictions.bias"


def test_cli_summary_and_tensors_json(capsys):
    assert main([fx("bert-mlm"), "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["format"] == "pytorch (zip)" and r["parameters"]["unique"] == EXPECTED["bert-mlm/pytorch_model.bin"]["parameters"]
    assert main(["tensors", fx("dtypes.pt"), "--json", "-f", "fp8*"]) == 0
    rows = json.loads(capsys.readouterr().out)["tensors"]
    assert {r["dtype"] for r in rows} == {"F8_E4M3", "F8_E5M2"}


# ---------------------------------------------------------------------------------------------
# scan

def test_scan_fixture_is_weights_only_loadable(capsys):
    r = scan(fx("train.pt"))
    assert r["schema"] == "ckptstat.scan/1" and r["would_run_code"] is False and r["weights_only_loadable"]
    names = {g["name"] for g in r["globals"]}
    assert {"torch._utils._rebuild_tensor_v2", "collections.OrderedDict", "torch.FloatStorage"} <= names
    r = scan(fx("bert-mlm-legacy/pytorch_model.bin"))
    assert [p["record"] for p in r["pickles"]][3] == "object pickle" and not r["unsafe_globals"]
    assert main(["scan", fx("dtypes.pt"), "--json"]) == 0
    assert "torch.float8_e4m3fn" in {g["name"] for g in json.loads(capsys.readouterr().out)["globals"]}
    assert main(["scan", fx("dtypes.pt")]) == 0
    assert "safe" in capsys.readouterr().out


def test_scan_resolves_stack_global_through_memo(tmp_path):
    import pickle

    class Evil:
        def __reduce__(self):
            return (os.system, ("true",))

    p = tmp_path / "evil.pkl"
    p.write_bytes(pickle.dumps({"a": Evil(), "b": Evil()}, protocol=4))  # protocol 4: STACK_GLOBAL + MEMOIZE
    r = scan(str(p))
    assert r["unsafe_globals"] == [f"{os.system.__module__}.system"] and r["would_run_code"]


def test_opcode_bound_grows_with_the_pickle(tmp_path, monkeypatch):
    """The opcode bound is 4,000,000 or the pickle's byte count, whichever is more: each opcode is a byte at least,
    so the walk stays linear in the bytes, and a real save of more tensors than the fixed bound allows (~30 opcodes
    a tensor: 130k tensors) opens and scans. Here the fixed part is shrunk to 50 instead of saving 130k tensors."""
    torch = pytest.importorskip("torch")
    from ckptstat.analysis.scan.torch_load import scan
    from ckptstat.formats.torch import pickle_walk, unpickler

    sd = {f"layer.{i}.weight": torch.full((2,), float(i)) for i in range(40)}
    path = str(tmp_path / "many.pt")
    torch.save(sd, path)
    with zipfile.ZipFile(path) as z:
        pkl = z.read(next(n for n in z.namelist() if n.endswith("data.pkl")))
    assert len(pkl) > 50 * 4   # well over the shrunk bound in bytes, and in opcodes (~30 a tensor)
    monkeypatch.setattr(unpickler, "MAX_OPS", 50)
    monkeypatch.setattr(pickle_walk, "MAX_OPS", 50)
    ckpt = open_checkpoint(path)
    assert sorted(ckpt.tensors) == sorted(sd) and ckpt.read("layer.7.weight").tolist() == [7.0, 7.0]
    assert scan(path)["status"] == "safe"


@pytest.mark.parametrize("name", ["model.bin", "model_legacy.bin", "optimizer.pt", "scaler.pt"])
def test_files_saved_on_a_gpu(name):
    """fixtures/cuda/, written on an H200 by fixtures/make_cuda_saves.py (torch 2.11): a bf16 GPT-2 state_dict in the
    zip and legacy layouts, a fused AdamW's state with CUDA `step` counters, a GradScaler's state (no tensors).
    Every tensor and value as torch.load(map_location="cpu") gives it; scan calls each safe, as torch's
    weights_only loader agrees."""
    torch = pytest.importorskip("torch")
    path = os.path.join(FIX, "cuda", name)
    with open(path, "rb") as f:
        assert b"cuda:0" in f.read() or name == "scaler.pt"   # the storages' device tag a GPU save writes
    loaded = flat(torch.load(path, map_location="cpu", weights_only=True))
    ckpt = open_checkpoint(path)
    assert set(ckpt.tensors) == set(loaded), name
    for key, t in loaded.items():
        np.testing.assert_array_equal(ckpt.read(key), torch_values(t), err_msg=key)
    r = scan(path)
    assert r["would_run_code"] is False and r["weights_only_loadable"], r


def test_dcp_folder_saved_on_a_gpu():
    """fixtures/cuda/dcp/: dcp.save of the same model's and optimizer's state from the GPU, one process: every item
    as dcp.load reads it back on the CPU."""
    torch = pytest.importorskip("torch")
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    folder = os.path.join(FIX, "cuda", "dcp")
    meta = dcp.FileSystemReader(folder).read_metadata()
    want = {k: torch.empty(m.size, dtype=m.properties.dtype)
            for k, m in meta.state_dict_metadata.items() if isinstance(m, TensorStorageMetadata)}
    dcp.load(want, checkpoint_id=folder, no_dist=True)
    ckpt = open_checkpoint(folder)
    assert set(ckpt.tensors) == set(want)
    for key, t in want.items():
        np.testing.assert_array_equal(ckpt.read(key), torch_values(t), err_msg=key)


@pytest.mark.parametrize("legacy", [False, True])
def test_storages_saved_from_a_gpu(tmp_path, legacy):
    """A file torch.save wrote from a GPU names each storage's device (`cuda:0`) in the pickle; nothing else in
    it differs from a CPU save. torch's own location-tag registry writes that tag here (no GPU on this machine):
    a bfloat16 state_dict and a fused AdamW's state (its `step` counters on the device too), in the zip and the
    legacy layout. The oracle is torch.load(map_location="cpu")."""
    torch = pytest.importorskip("torch")
    import torch.serialization as ser

    torch.manual_seed(0)
    layer = torch.nn.Linear(8, 4)
    opt = torch.optim.AdamW(layer.parameters(), fused=True)
    layer(torch.randn(2, 8)).sum().backward()
    opt.step()
    objects = {"model.bin": {k: v.bfloat16() for k, v in layer.state_dict().items()}, "optimizer.pt": opt.state_dict()}
    tag = lambda obj: "cuda:0" if obj.device.type == "cpu" else None   # noqa: E731
    ser.register_package(1, tag, lambda obj, location: None)   # ahead of torch's own "cpu" tag; undone below
    try:
        for name, obj in objects.items():
            torch.save(obj, tmp_path / name, _use_new_zipfile_serialization=not legacy)
    finally:
        ser._package_registry[:] = [e for e in ser._package_registry if e[1] is not tag]
    for name in objects:
        path = str(tmp_path / name)
        with open(path, "rb") as f:
            assert b"cuda:0" in f.read()   # the tag a GPU save writes
        loaded = flat(torch.load(path, map_location="cpu", weights_only=True))
        ckpt = open_checkpoint(path)
        assert set(ckpt.tensors) == set(loaded), name
        for key, t in loaded.items():
            np.testing.assert_array_equal(ckpt.read(key), torch_values(t), err_msg=key)
        r = scan(path)   # torch.load(weights_only=True) loaded it above: safe
        assert r["would_run_code"] is False and r["weights_only_loadable"], r
