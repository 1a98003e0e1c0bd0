"""Flax msgpack checkpoints (ckptstat/formats/flax_msgpack.py, docs/flax.md). The fixtures are written by
flax and transformers' Flax classes (fixtures/make_flax.py), which also recorded the oracle
(fixtures/expected_flax.json: every array as flax.serialization.msgpack_restore read it back, and each
model's parameter count from model.params). jax and flax are not installed here: the tests read the
committed files with numpy; hostile files are built with msgpack and struct. Round trip, truncation at
every msgpack boundary, bit flips and hostile claims also run in tests/test_reader_contract.py."""
from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import struct
import tempfile

import msgpack
import numpy as np
import pytest
from conftest import FIXTURES, fixture
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ckptstat import open_checkpoint, summarize
from ckptstat.cli import main
from ckptstat.errors import CorruptCheckpointError
from ckptstat.families.framework.infer import canonical_name
from ckptstat.formats import flax_msgpack, msgpack_walk, registry

with open(fixture("expected_flax.json")) as _f:
    EXPECTED = json.load(_f)
MODELS = EXPECTED["models"]


def _f64(a: np.ndarray) -> np.ndarray:
    return np.stack([a.real, a.imag], axis=-1).astype("<f8") if np.iscomplexobj(a) else a.astype("<f8")


@pytest.mark.parametrize("rel", sorted(EXPECTED["files"]))
def test_every_array_as_flax_reads_it(rel):
    path = fixture("flax", rel)
    assert registry.detect(path).name == "flax (msgpack)"
    ckpt = open_checkpoint(path)
    want = EXPECTED["files"][rel]
    assert sorted(ckpt.tensors) == sorted(want)
    for name, rec in want.items():
        t = ckpt.tensors[name]
        assert list(t.shape) == rec["shape"], name
        assert t.dtype == flax_msgpack.FLAX_DTYPES[rec["dtype"]], name
        values = _f64(ckpt.read(name))
        assert hashlib.sha256(values.tobytes()).hexdigest() == rec["sha256_f64"], name
        if "values" in rec:
            np.testing.assert_array_equal(values.reshape(-1), np.array(rec["values"]), err_msg=name)
        if len(t.shape) == 2 and name.endswith(".kernel"):
            assert t.extra["layout"] == "in_out"


def test_chunked_array_reads_across_its_chunks():
    """flax splits an array over MAX_CHUNK_SIZE into chunks (the generator lowered it): one tensor, read in
    pieces that straddle the chunks' boundaries."""
    ckpt = open_checkpoint(fixture("flax", "dtypes.msgpack"))
    t = ckpt.tensors["params.big"]
    assert t.shape == (5, 8) and len(t.extra["chunks"]) == 3
    assert not any(n.startswith("params.big.") for n in ckpt.tensors)
    want = np.array(EXPECTED["files"]["dtypes.msgpack"]["params.big"]["values"])
    for chunk_bytes in (8, 24, 1 << 20):
        got = np.concatenate(list(ckpt.iter_chunks("params.big", chunk_bytes=chunk_bytes)))
        np.testing.assert_array_equal(got.astype(np.float64), want)
    assert ckpt.tensors["step"].shape == () and ckpt.tensors["step"].extra["scalar"] is True
    assert any("6 leaf value(s)" in n for n in ckpt.notes)   # count, lr, tag, z and the list's two items


@pytest.mark.parametrize("model", sorted(MODELS))
@pytest.mark.parametrize("with_config", [True, False])
def test_census_counts_flax_models_as_flax_does(model, with_config, tmp_path):
    """Family, head and unique parameter count from the census equal the Flax model's (model.params), from
    config.json or from the tensor names alone; BART's final_logits_bias, a Flax param that PyTorch registers
    as a buffer, is counted as PyTorch counts it (the generator's torch count of the same config)."""
    rec = MODELS[model]
    folder = fixture("flax", model)
    if not with_config:
        folder = str(tmp_path / model)
        shutil.copytree(fixture("flax", model), folder, ignore=shutil.ignore_patterns("*config.json"))
    report = summarize(folder)
    assert report["parameters"]["unique"] == rec["torch_parameters"]
    buffers = {n: r["elements"] for r in report["non_parameters"] for n in r["names"]}
    if model == "bart":
        stored = EXPECTED["files"]["bart/flax_model.msgpack"]["final_logits_bias"]["shape"]
        assert buffers == {"final_logits_bias": math.prod(stored)}
        assert rec["parameters"] == rec["torch_parameters"] + math.prod(stored)
    elif "batch_stats" in rec:   # BatchNorm's running mean and var, Flax's batch_stats collection: buffers, as torch's
        rows = {r["role"]: r for r in report["non_parameters"]}
        assert set(rows) == {"buffer"} and rows["buffer"]["elements"] == rec["batch_stats"]
        assert all(n.startswith("batch_stats.") for n in rows["buffer"]["names"])
        assert report["parameters"]["unique"] == rec["parameters"]
    else:
        assert buffers == {} and report["parameters"]["unique"] == rec["parameters"]
    if model == "resnet" and not with_config:   # Flax ResNet's `layer.layer_0` modules: no family from names alone
        assert report["resolved"]["family"] is None and report["unplaced"] == []
        return
    assert report["resolved"]["family"] == rec["model_type"]
    assert report["unplaced"] == []
    head = {"FlaxBertForMaskedLM": "mlm", "FlaxGPT2LMHeadModel": "lm", "FlaxT5ForConditionalGeneration": "lm",
            "FlaxBartForConditionalGeneration": "lm", "FlaxViTForImageClassification": "imgcls",
            "FlaxResNetForImageClassification": "imgcls"}
    if rec["class"] in head:
        assert report["resolved"]["head"] == head[rec["class"]]


@pytest.mark.parametrize("model", ["bert-mlm", "gpt2-lm", "t5", "bart", "vit"])
def test_same_model_as_transformers_converts_it(model, capsys):
    """transformers' own converter (load_flax_weights_in_pytorch_model) put the same weights in the PyTorch
    class (fixtures/flax/pt/): `ckptstat diff` lines every Flax name up with its PyTorch name, kernels
    transposed, and finds no difference; the two census counts agree."""
    flax_dir, pt_dir = fixture("flax", model), fixture("flax", "pt", model)
    assert main(["diff", flax_dir, pt_dir]) == 0
    assert "no differences" in capsys.readouterr().out
    assert summarize(flax_dir)["parameters"]["unique"] == summarize(pt_dir)["parameters"]["unique"]


def test_conv_kernel_reads_as_torch_shape():
    """A Flax Conv kernel is [h, w, in, out]; its canonical shape is torch's [out, in, h, w] (the converter's
    transpose(2, 3, 1, 0)), which the ViT config check expects."""
    from ckptstat.families.framework.infer import canonical_tensors

    ckpt = open_checkpoint(fixture("flax", "vit"))
    name = "vit.embeddings.patch_embeddings.projection.kernel"
    h, w, cin, cout = ckpt.tensors[name].shape
    assert ckpt.tensors[name].extra["layout"] == "hwio"
    assert canonical_tensors(ckpt.tensors)[name.replace("kernel", "weight")].shape == (cout, cin, h, w)


def test_training_state_keeps_optimizer_and_step_apart():
    """to_bytes({"params", "opt_state": optax.adam, "step"}): the parameters count as the model's, the
    optimizer's arrays (count, mu, nu) and the step are listed apart."""
    rec = EXPECTED["training"]["bert-train.msgpack"]
    report = summarize(fixture("flax", "bert-train.msgpack"))
    assert report["parameters"]["unique"] == rec["parameters"]
    assert report["resolved"]["family"] == "bert" and report["resolved"]["head"] == "mlm"
    roles = {r["role"]: r for r in report["non_parameters"]}
    assert set(roles) == {"optimizer", "counter"}
    assert roles["optimizer"]["tensors"] == rec["optimizer_arrays"] and roles["counter"]["names"] == ["step"]


def test_mlm_decoder_tied_to_word_embeddings():
    """FlaxBertForMaskedLM stores no decoder kernel: the decoder uses the word embeddings (tie_word_embeddings)."""
    pairs = {p["alias"]: p for p in summarize(fixture("flax", "bert-mlm"))["ties"]["pairs"]}
    assert pairs["cls.predictions.decoder.weight"]["target"] == "bert.embeddings.word_embeddings.embedding"
    assert pairs["cls.predictions.decoder.weight"]["status"] == "absent from file"


def test_sharded_index_is_the_union_of_its_shards():
    folder = fixture("flax", "bert-sharded")
    ckpt = open_checkpoint(folder)
    assert ckpt.format == "flax (msgpack) (sharded)" and len(ckpt.files) == 4
    want = {n for rel, arrays in EXPECTED["files"].items() if rel.startswith("bert-sharded/") for n in arrays}
    assert set(ckpt.tensors) == want
    with open(os.path.join(folder, "flax_model.msgpack.index.json")) as f:
        index = json.load(f)
    assert {n.replace("/", ".") for n in index["weight_map"]} == want   # transformers keys it by "/"
    assert ckpt.metadata["index.total_size"] == str(index["metadata"]["total_size"])


def test_folder_prefers_safetensors_and_bin(tmp_path):
    torch = pytest.importorskip("torch")
    from safetensors.torch import save_file

    shutil.copy(fixture("flax", "bert-mlm", "flax_model.msgpack"), tmp_path / "flax_model.msgpack")
    assert registry.resolve_folder(str(tmp_path)).endswith("flax_model.msgpack")
    torch.save({"w": torch.zeros(2)}, tmp_path / "pytorch_model.bin")
    assert registry.resolve_folder(str(tmp_path)).endswith("pytorch_model.bin")
    save_file({"w": torch.zeros(2)}, str(tmp_path / "model.safetensors"))
    assert registry.resolve_folder(str(tmp_path)).endswith("model.safetensors")


def test_never_steals_another_formats_file():
    """msgpack has no magic: no committed fixture of another format is accepted."""
    seen = 0
    for root, _, files in os.walk(FIXTURES):
        if os.path.relpath(root, FIXTURES).split(os.sep)[0] == "flax":
            continue
        for name in files:
            p = os.path.join(root, name)
            if os.path.isfile(p) and os.path.getsize(p) > 0:
                seen += 1
                assert not flax_msgpack.accept(registry.Probe.of(p)), p
    assert seen > 50


def test_scan_of_a_folder_does_not_take_flax_for_a_pickle():
    """A Flax file's map markers (0x81-0x8F) are pickle EXT opcodes: `ckptstat scan FOLDER` picks files by
    content, and leaves Flax files out (flax's loader never unpickles)."""
    from ckptstat.analysis.scan import pickle_bearing

    for rel in EXPECTED["files"]:
        assert not pickle_bearing(fixture("flax", rel)), rel
    assert pickle_bearing(fixture("torch", "dtypes-legacy.pt"))


def test_scan_of_a_flax_file_says_it_holds_no_pickle(cli):
    # as for a safetensors file (exit 2, one line): not "UNSAFE" for the EXT opcode its first map marker reads as
    for rel in EXPECTED["files"]:
        rc, out, err = cli("scan", fixture("flax", rel))
        assert (rc, out) == (2, "") and "no pickle to scan: a Flax msgpack checkpoint" in err and err.count("\n") == 1


def test_detected_by_content_not_name(tmp_path):
    p = tmp_path / "weights.bin"
    shutil.copy(fixture("flax", "t5", "flax_model.msgpack"), p)
    assert registry.detect(str(p)).name == "flax (msgpack)"


def test_flax_spellings_map_to_pytorch_names():
    assert canonical_name("bert.embeddings.word_embeddings.embedding") == "bert.embeddings.word_embeddings.weight"
    assert canonical_name("bert.encoder.layer.0.output.LayerNorm.scale") == "bert.encoder.layer.0.output.LayerNorm.weight"
    assert canonical_name("transformer.ln_f.scale") == "transformer.ln_f.weight"
    assert canonical_name("transformer.h.0.attn.c_attn.kernel") == "transformer.h.0.attn.c_attn.weight"
    # HQQ stores a `scale` of its own beside W_q: not a norm's, left alone
    assert canonical_name("model.layers.0.self_attn.q_proj.scale") == "model.layers.0.self_attn.q_proj.scale"


# ---------------------------------------------------------------------------------------------- hostile
def _array(shape: list[int], dtype: str, raw: bytes) -> msgpack.ExtType:
    return msgpack.ExtType(1, msgpack.packb((shape, dtype, raw), use_bin_type=True))


GOOD = msgpack.packb({"params": {"w": _array([2], "float32", b"\0" * 8)}}, use_bin_type=True)


def _hostile() -> dict[str, bytes]:
    good_ext = GOOD.index(b"\xc7")   # ext 8: marker, length, type
    return {
        "truncated": GOOD[:-3],
        "trailing bytes": GOOD + b"\xc0",
        "ext length past the end": GOOD[:good_ext + 1] + b"\xff" + GOOD[good_ext + 2:],
        "ext32 length 2**32 - 1": b"\x81\xa1w\xc9\xff\xff\xff\xff\x01",
        "bin length lies": msgpack.packb({"w": msgpack.ExtType(1, b"\x93\x91\x02\xa7float32\xc6\xff\xff\xff\xf0")}),
        "shape larger than the bytes": msgpack.packb({"w": _array([3], "float32", b"\0" * 8)}, use_bin_type=True),
        "shape 2**62 x 4": msgpack.packb({"w": _array([2**62, 4], "float32", b"")}, use_bin_type=True),
        "negative dimension": msgpack.packb({"w": _array([-1], "float32", b"")}, use_bin_type=True),
        "dtype object": msgpack.packb({"w": _array([1], "object", b"\0" * 8)}, use_bin_type=True),
        "dtype a list": msgpack.packb({"w": msgpack.ExtType(1, msgpack.packb(([1], ["f4"], b"\0" * 4)))}),
        "payload not a triple": msgpack.packb({"w": msgpack.ExtType(1, msgpack.packb([1, 2]))}),
        "deep nesting": b"\x81\xa1a" * 10_000 + b"\x80",
        "map of 2**32 - 1 entries": b"\xdf\xff\xff\xff\xff" + GOOD[1:],
        "array of 2**32 - 1 items": b"\x81\xa1a\xdd\xff\xff\xff\xff",
        "key of 2**32 - 1 bytes": b"\x81\xdb\xff\xff\xff\xff" + GOOD[1:],
        "top level an array": msgpack.packb([{"w": _array([2], "float32", b"\0" * 8)}], use_bin_type=True),
        "top level an integer": b"\xcd\x01\x02",
        "integer key": msgpack.packb({1: _array([2], "float32", b"\0" * 8)}, use_bin_type=True),
        "binary key": msgpack.packb({b"w": _array([2], "float32", b"\0" * 8)}, use_bin_type=True),
        "key not UTF-8": b"\x81\xa2\xff\xfe\xc0",
        "marker 0xc1": b"\x81\xa1a\xc1",
        "repeated key": b"\x82" + _twice(),
        "chunked array with a wrong shape": msgpack.packb({"big": {
            "__msgpack_chunked_array__": True, "shape": {"0": 5},
            "chunks": {"0": _array([2], "float32", b"\0" * 8)}}}, use_bin_type=True),
    }


def _twice() -> bytes:
    entry = msgpack.packb({"w": _array([2], "float32", b"\0" * 8)}, use_bin_type=True)[1:]
    return entry + entry


@pytest.mark.parametrize("label", sorted(_hostile()))
def test_hostile_file_is_one_line(label, tmp_path, capsys):
    p = tmp_path / "flax_model.msgpack"
    p.write_bytes(_hostile()[label])
    with pytest.raises(CorruptCheckpointError) as e:
        ckpt = open_checkpoint(str(p))
        for t in ckpt:   # (a lie only the values can show is caught where they are read)
            ckpt.read(t.name)
    assert str(p) in str(e.value)
    assert main([str(p)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("ckptstat: error: ") and "flax_model.msgpack" in err, err


def test_hostile_headers_never_allocate_their_claims():
    """A count or length is checked against the bytes left before anything is read or looped on."""
    data = b"\xdf\xff\xff\xff\xff" + struct.pack(">B", 0xA1) + b"a"
    src = msgpack_walk.Source("x", len(data), lambda at, n: data[at:at + n])
    with pytest.raises(CorruptCheckpointError, match="needs 8,589,934,590 bytes"):
        msgpack_walk.walk(src, lambda *a: None, {})


@settings(max_examples=300, derandomize=True, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(base=st.sampled_from(["hostile GOOD", "dtypes.msgpack"]), cut=st.floats(0, 1), junk=st.binary(max_size=64),
       flips=st.lists(st.floats(0, 1, exclude_max=True), max_size=4))
def test_mangled_bytes_raise_only_corrupt_checkpoint_errors(base, cut, junk, flips):
    """The reader itself (not the registry's catch-all boundary) raises nothing but CorruptCheckpointError,
    and detection nothing at all, on a valid file (chunked arrays, scalars, strings...) cut, extended with
    junk and bit-flipped."""
    good = GOOD if base == "hostile GOOD" else open(fixture("flax", base), "rb").read()
    data = bytearray(good[:round(cut * len(good))] + junk)
    for bit in (int(f * 8 * len(data)) for f in flips if data):
        data[bit // 8] ^= 1 << (bit % 8)
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "flax_model.msgpack")
        with open(p, "wb") as f:
            f.write(bytes(data))
        flax_msgpack.accept(registry.Probe.of(p))
        try:
            ckpt = flax_msgpack.open_flax(p)
        except CorruptCheckpointError:
            return
        for t in ckpt:
            ckpt.read(t.name)


# ---------------------------------------------------------------------------------------------- remote
def test_http_summary_equals_local():
    from remote_server import Server

    from ckptstat import sources  # noqa: F401 - installs the remote source

    with Server(os.path.join(FIXTURES, "flax")) as s:
        for rel in ("bert-sharded/", "gpt2-lm/flax_model.msgpack", "bert-train.msgpack"):
            local = fixture("flax", rel.rstrip("/"))
            remote = json.dumps(summarize(open_checkpoint(f"{s.url}/{rel}")), sort_keys=True)
            want = json.loads(json.dumps(summarize(open_checkpoint(local)), sort_keys=True))
            assert json.loads(remote.replace(s.url, os.path.join(FIXTURES, "flax"))) == want, rel


def test_http_headers_fetch_a_small_part(tmp_path):
    """Over HTTP the walk fetches the structure around each array, never the payloads it skips."""
    from remote_server import Server

    from ckptstat import sources

    layers = {str(i): {"kernel": _array([64, 64], "float32", np.full((64, 64), i, "<f4").tobytes())} for i in range(100)}
    big = np.arange(1 << 20, dtype="<f4")
    data = msgpack.packb({"layer": layers, "big": {"embedding": _array([1 << 10, 1 << 10], "float32", big.tobytes())}},
                         use_bin_type=True)
    (tmp_path / "flax_model.msgpack").write_bytes(data)
    with Server(str(tmp_path)) as s:
        sources.METER.requests = sources.METER.bytes = 0
        ckpt = open_checkpoint(s.url + "/flax_model.msgpack")
        assert len(ckpt.tensors) == 101
        got = (sources.METER.requests, sources.METER.bytes)
        assert got[0] <= 16 and got[1] < len(data) // 2, got   # (8 and 2 MiB of 5.6 when written: the source reads ahead)
        assert ckpt.read("layer.99.kernel")[63, 63] == 99.0
        assert ckpt.read("big.embedding").reshape(-1)[-1] == big[-1]


@pytest.mark.parametrize("chunk_bytes", [8, 40, 1 << 20])
def test_conv_kernel_compared_transposed_in_blocks(chunk_bytes):
    # the [h, w, in, out] kernel read as [out, in, h, w] a block of `out` at a time, whatever the chunk size
    from ckptstat.analysis.diff import diff
    r = diff(open_checkpoint(fixture("flax", "vit")), open_checkpoint(fixture("flax", "pt", "vit")), chunk_bytes=chunk_bytes)
    conv = next(t for t in r["tensors"] if t["name"].endswith("patch_embeddings.projection.weight"))
    assert (conv["status"], conv["transposed"], conv["identical"]) == ("equal", "a", True) and r["same"]
