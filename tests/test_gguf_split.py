"""GGUF split sets and bits per weight by ggml type (issue 18; docs/gguf.md).

Split sets are written by gguf-py's own GGUFWriter: the committed fixtures/gguf/split/ set by its
split_max_tensors (fixtures/make_gguf.py), and at test time single GGUFWriter files carrying the
split.* keys as llama.cpp's gguf-split writes them (u16 split.no, u16 split.count, i32
split.tensors.count), for the damaged sets. The oracle is what gguf-py's GGUFReader read back
(fixtures/expected_gguf.json) and gguf-py's GGML_QUANT_SIZES.
"""
from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest
from conftest import fixture

from ckptstat import open_checkpoint, summarize
from ckptstat.analysis.summary import tensors as tensor_report
from ckptstat.errors import CorruptCheckpointError, ExternalReferenceError
from ckptstat.formats.gguf import GGML_TYPES
from ckptstat.formats.gguf_split import pick_shard

gguf = pytest.importorskip("gguf")   # in the test extra; the reader itself never imports it

SPLIT = fixture("gguf", "split")
SHARDS = [f"llama-tiny-split-{i:05d}-of-00003.gguf" for i in (1, 2, 3)]


@pytest.fixture(scope="module")
def expected() -> dict:
    with open(fixture("expected_gguf.json")) as f:
        return json.load(f)


@pytest.fixture
def split_copy(tmp_path):
    """A copy of the committed split set, to remove shards from."""
    folder = tmp_path / "set"
    shutil.copytree(SPLIT, folder)
    return folder


def shard_tensors(expected: dict) -> dict[str, dict]:
    return expected["split"]["shards"]


# ------------------------------------------------------------------ the whole set from any shard
@pytest.mark.parametrize("name", SHARDS)
def test_any_shard_opens_the_whole_set(name, expected):
    shards = shard_tensors(expected)
    ckpt = open_checkpoint(os.path.join(SPLIT, name))
    assert [os.path.basename(f) for f in ckpt.files] == SHARDS
    want = {t: (s, e) for s, rec in shards.items() for t, e in rec["tensors"].items()}
    assert set(ckpt.tensors) == set(want)
    order = [n for s in SHARDS for n in (t.name for t in gguf.GGUFReader(os.path.join(SPLIT, s)).tensors)]
    assert list(ckpt.tensors) == order   # shard order, then each shard's own order
    assert len(ckpt) == shards[SHARDS[0]]["split"]["split.tensors.count"]
    for t in ckpt:
        shard, e = want[t.name]
        assert os.path.basename(t.file) == shard
        assert (t.dtype, t.numel, t.nbytes, t.offset) == (e["ggml_type"], e["n_elements"], e["n_bytes"], e["file_offset"])
    # the first shard holds the model's metadata; the others only split.*
    assert shards[SHARDS[1]]["architecture"] is None and ckpt.declared_architecture == "llama"
    assert ckpt.partial is None and not [n for n in ckpt.notes if "warning" in n]


def test_set_counts_like_the_unsplit_file(expected):
    """The same model in one file (llama-tiny-q.gguf, same shapes) and split in three: same totals."""
    whole = summarize(open_checkpoint(fixture("gguf", "llama-tiny-q.gguf")))
    split = summarize(open_checkpoint(os.path.join(SPLIT, SHARDS[1])))
    assert split["parameters"]["unique"] == whole["parameters"]["unique"]
    assert split["parameters"]["partial"] is None
    assert [(b["bucket"], b["params"]) for b in split["buckets"]] == [(b["bucket"], b["params"]) for b in whole["buckets"]]
    assert split["architecture"]["family"] == "llama" and split["analytic"]["agree"] is not False


def test_values_read_from_every_shard():
    ckpt = open_checkpoint(os.path.join(SPLIT, SHARDS[0]))
    for shard in SHARDS:
        r = gguf.GGUFReader(os.path.join(SPLIT, shard))
        t = r.tensors[-1]
        want = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32).reshape(-1)
        assert np.array_equal(ckpt.read(t.name).reshape(-1), want), (shard, t.name)


def test_folder_of_shards_opens_the_set(cli):
    ckpt = open_checkpoint(SPLIT)
    assert len(ckpt.files) == 3 and ckpt.partial is None
    rc, out, err = cli(SPLIT, "--json")
    assert rc == 0, err
    r = json.loads(out)
    assert len(r["files"]) == 3 and "index.json" not in out + err


def test_pick_shard():
    assert pick_shard(SHARDS[::-1]) == SHARDS[0]
    assert pick_shard(SHARDS[1:]) == SHARDS[1]
    assert pick_shard([*SHARDS, "mmproj.gguf"]) is None                       # not one set: ambiguous
    assert pick_shard([SHARDS[0], "other-00002-of-00003.gguf"]) is None
    assert pick_shard([SHARDS[0], "llama-tiny-split-00002-of-00004.gguf"]) is None


def test_folder_of_unrelated_gguf_files_advice(cli, tmp_path):
    for n in ("a.gguf", "b.gguf"):
        shutil.copy(fixture("gguf", "llama-tiny-q.gguf"), tmp_path / n)
    rc, out, err = cli(str(tmp_path))
    assert rc == 2 and "index.json" not in err and "split set" in err


# ------------------------------------------------------------------ a missing shard: one warning, partial totals
@pytest.mark.parametrize("gone", [0, 1, 2])
def test_missing_shard_warns_once_with_tensor_count(split_copy, expected, gone, cli):
    shards = shard_tensors(expected)
    os.remove(split_copy / SHARDS[gone])
    opened = SHARDS[(gone + 1) % 3]
    ckpt = open_checkpoint(str(split_copy / opened))
    lost = len(shards[SHARDS[gone]]["tensors"])
    total = shards[SHARDS[0]]["split"]["split.tensors.count"]
    assert len(ckpt) == total - lost
    warnings = [n for n in ckpt.notes if n.startswith("warning")]
    assert len(warnings) == 1 and SHARDS[gone] in warnings[0] and f"{lost} of {total} tensors" in warnings[0]
    assert ckpt.partial is not None and f"{lost} of {total}" in ckpt.partial
    r = summarize(ckpt)
    assert r["parameters"]["partial"] == ckpt.partial
    held = sum(e["n_elements"] for s, rec in shards.items() if s != SHARDS[gone] for e in rec["tensors"].values())
    assert r["parameters"]["unique"] + sum(n["elements"] for n in r["non_parameters"]) == held
    rc, out, err = cli(str(split_copy / opened))
    assert rc == 0 and "PARTIAL" in out and out.count("warning") == 1
    if gone == 0:   # the model's metadata went with the first shard
        assert ckpt.declared_architecture is None


def test_folder_missing_first_shard_opens_the_rest(split_copy):
    os.remove(split_copy / SHARDS[0])
    ckpt = open_checkpoint(str(split_copy))
    assert [os.path.basename(f) for f in ckpt.files] == SHARDS[1:] and ckpt.partial


def test_shard_symlinked_outside_is_refused(split_copy, tmp_path):
    outside = tmp_path / "elsewhere.gguf"
    shutil.move(str(split_copy / SHARDS[2]), outside)
    os.symlink(outside, split_copy / SHARDS[2])
    with pytest.raises(ExternalReferenceError):
        open_checkpoint(str(split_copy / SHARDS[0]))
    assert len(open_checkpoint(str(split_copy / SHARDS[0]), allow_external=True).files) == 3


# ------------------------------------------------------------------ split metadata that disagrees with the files
def write_shard(path, no=None, count=None, total=None, names=("a",), extra=None) -> None:
    """One shard as gguf-split writes it: a whole GGUF file plus the split.* keys (u16, u16, i32)."""
    w = gguf.GGUFWriter(str(path), "llama")
    if no is not None:
        w.add_uint16("split.no", no)
    if count is not None:
        w.add_uint16("split.count", count)
    if total is not None:
        w.add_int32("split.tensors.count", total)
    for key, value in (extra or {}).items():
        w.add_string(key, value)
    for n in names:
        w.add_tensor(n, np.arange(8, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def pair(tmp_path, a: dict, b: dict) -> str:
    write_shard(tmp_path / "m-00001-of-00002.gguf", **{"no": 0, "count": 2, "total": 2, "names": ("a",), **a})
    write_shard(tmp_path / "m-00002-of-00002.gguf", **{"no": 1, "count": 2, "total": 2, "names": ("b",), **b})
    return str(tmp_path / "m-00001-of-00002.gguf")


def test_hand_written_pair_opens(tmp_path):
    ckpt = open_checkpoint(pair(tmp_path, {}, {}))
    assert list(ckpt.tensors) == ["a", "b"] and ckpt.partial is None


HOSTILE = {
    "tensor count too high": ({"total": 3}, {"total": 3}, "split.tensors.count is 3, but the 2 shard(s) hold 2"),
    "tensor count too low": ({"total": 1}, {"total": 1}, "split.tensors.count is 1"),
    "shards disagree on tensor count": ({}, {"total": 5}, "split.tensors.count 5 differs from 2"),
    "duplicate tensor across shards": ({}, {"names": ("a",)}, "tensor 'a' is also in m-00001-of-00002.gguf"),
    "split.no does not match the name": ({}, {"no": 0}, "file name says shard 2 of 2, but its metadata says shard 1 of 2"),
    "first shard's split.no wrong": ({"no": 1}, {}, "file name says shard 1 of 2, but its metadata says shard 2 of 2"),
    "split.count does not match the name": ({"count": 3}, {}, "file name says shard 1 of 2, but its metadata says shard 1 of 3"),
    "other shard's split.count differs": ({}, {"count": 3, "no": 1}, "its metadata says shard 2 of 3"),
    "shard without split keys": ({}, {"no": None, "count": None, "total": None}, "has no split.* metadata"),
    "split.no beyond split.count": ({"no": 2}, {}, "split.no 2 is not a shard of split.count 2"),
    "split.count zero": ({"count": 0, "no": 0}, {}, "split.count 0 is not between 1"),
    "split.no without split.count": ({"count": None}, {}, "split.no is set but split.count is missing"),
}


@pytest.mark.parametrize("case", HOSTILE, ids=list(HOSTILE))
def test_hostile_split_metadata(tmp_path, case):
    a, b, message = HOSTILE[case]
    path = pair(tmp_path, a, b)
    with pytest.raises(CorruptCheckpointError) as e:
        open_checkpoint(path)
    assert message in str(e.value) and "m-0000" in str(e.value) and "\n" not in str(e.value)


def test_split_key_of_wrong_type(tmp_path):
    write_shard(tmp_path / "m-00001-of-00002.gguf", no=0, total=2, extra={"split.count": "2"})
    with pytest.raises(CorruptCheckpointError, match="split.count is not an integer"):
        open_checkpoint(str(tmp_path / "m-00001-of-00002.gguf"))


def test_missing_shard_with_too_few_declared(tmp_path):
    write_shard(tmp_path / "m-00001-of-00003.gguf", no=0, count=3, total=1, names=("a", "b"))
    with pytest.raises(CorruptCheckpointError, match="the shards present already hold 2"):
        open_checkpoint(str(tmp_path / "m-00001-of-00003.gguf"))


def test_renamed_shard_opens_alone_with_warning(tmp_path):
    shutil.copy(os.path.join(SPLIT, SHARDS[0]), tmp_path / "model.gguf")
    ckpt = open_checkpoint(str(tmp_path / "model.gguf"))
    assert len(ckpt.files) == 1 and ckpt.partial and "2 of the 3 shards" in ckpt.partial
    assert sum("does not follow" in n for n in ckpt.notes) == 1


def test_hostile_split_cli_one_line(cli, tmp_path):
    rc, out, err = cli(pair(tmp_path, {"total": 7}, {"total": 7}))
    assert rc == 1 and len(err.strip().splitlines()) == 1 and "split.tensors.count" in err


# ------------------------------------------------------------------ bits per weight by ggml type
def test_every_known_ggml_type_is_in_the_types_fixture(expected):
    written = {e["ggml_type"] for e in expected["ggml-types.gguf"]["tensors"].values()}
    assert set(GGML_TYPES.values()) <= written


def test_ggml_type_codes_match_gguf_py():
    for code, name in GGML_TYPES.items():
        assert gguf.GGMLQuantizationType(code).name == name


def test_bits_per_weight_by_ggml_type(expected):
    e = expected["ggml-types.gguf"]["tensors"]
    ckpt = open_checkpoint(fixture("gguf", "ggml-types.gguf"))
    rows = {r["name"]: r for r in tensor_report(ckpt)["tensors"]}
    assert set(rows) == set(e)
    for t in ckpt:
        qtype = gguf.GGMLQuantizationType[t.dtype]
        block, type_size = gguf.GGML_QUANT_SIZES[qtype]
        assert t.dtype == e[t.name]["ggml_type"]
        assert t.numel == e[t.name]["n_elements"]                   # logical elements, not blocks or bytes
        assert t.nbytes == t.byte_size == e[t.name]["n_bytes"] == t.numel // block * type_size
        assert rows[t.name]["bits_per_weight"] == pytest.approx(8 * type_size / block), t.dtype
        assert rows[t.name]["numel"] == t.numel and rows[t.name]["bytes"] == t.nbytes


def test_bits_per_weight_of_written_quants(tmp_path):
    """Quantised at test time with gguf.quants and written by GGUFWriter (shapes not multiples of 256)."""
    rng = np.random.default_rng(0)
    path = tmp_path / "q.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    types = [q for q in (gguf.GGMLQuantizationType.Q4_0, gguf.GGMLQuantizationType.Q8_0, gguf.GGMLQuantizationType.BF16,
                         gguf.GGMLQuantizationType.Q5_1, gguf.GGMLQuantizationType.MXFP4)]
    for i, q in enumerate(types):
        data = gguf.quants.quantize(rng.standard_normal((5, 96)).astype(np.float32), q)
        w.add_tensor(f"t{i}", data, raw_shape=data.shape, raw_dtype=q)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    reader = {t.name: t for t in gguf.GGUFReader(str(path)).tensors}
    rows = {r["name"]: r for r in tensor_report(open_checkpoint(str(path)))["tensors"]}
    for i, q in enumerate(types):
        block, type_size = gguf.GGML_QUANT_SIZES[q]
        r, t = rows[f"t{i}"], reader[f"t{i}"]
        assert (r["numel"], r["bytes"]) == (int(t.n_elements), int(t.n_bytes)) == (480, 480 // block * type_size)
        assert r["bits_per_weight"] == pytest.approx(8 * type_size / block)


def test_mutated_shard_raises_only_our_errors(split_copy):
    """Byte flips in the split.* keys and headers of the second shard, opened through the first:
    a whole set, a partial one, or one CkptstatError line (never a traceback)."""
    import random

    from ckptstat.errors import CkptstatError

    target = split_copy / SHARDS[1]
    base = target.read_bytes()
    head = base.index(b"split.tensors.count") + 40   # the three split.* keys and the first tensor infos
    rng = random.Random(0)
    for _ in range(150):
        b = bytearray(base)
        for _ in range(rng.randint(1, 3)):
            b[rng.randrange(head)] = rng.randrange(256)
        target.write_bytes(bytes(b))
        try:
            ckpt = open_checkpoint(str(split_copy / SHARDS[0]))
            summarize(ckpt)
        except CkptstatError as e:
            assert "\n" not in str(e)


def test_split_set_over_http(split_copy):
    """Shards beside a URL are found by name the same way (a loopback Range server, tests/remote_server.py)."""
    from remote_server import Server

    from ckptstat import sources

    sources.reset()
    with Server(str(split_copy)) as s:
        ckpt = open_checkpoint(f"{s.url}/{SHARDS[1]}")
        assert [f.rsplit("/", 1)[-1] for f in ckpt.files] == SHARDS and ckpt.partial is None
        whole = summarize(open_checkpoint(os.path.join(SPLIT, SHARDS[0])))["parameters"]["unique"]
        assert summarize(ckpt)["parameters"]["unique"] == whole
        assert len(open_checkpoint(f"{s.url}/").files) == 3   # a folder URL: its listing holds one split set
        os.remove(split_copy / SHARDS[2])
        sources.reset()
        ckpt = open_checkpoint(f"{s.url}/{SHARDS[0]}")
        assert ckpt.partial and sum(n.startswith("warning") for n in ckpt.notes) == 1


def test_bucket_bits_per_weight_of_a_quantised_gguf(expected):
    """The summary's per-bucket and total bits per weight on a file of mixed ggml types: logical elements
    and stored bytes as gguf-py's reader counts them (n_elements, n_bytes)."""
    e = expected["llama-tiny-q.gguf"]["tensors"]
    ckpt = open_checkpoint(fixture("gguf", "llama-tiny-q.gguf"))
    r = summarize(ckpt)
    rows = tensor_report(ckpt)["tensors"]
    total_params = total_bytes = 0
    for b in r["buckets"]:
        names = [t["name"] for t in rows if t["bucket"] == b["bucket"] and t["role"] == "parameter"]
        params, nbytes = sum(e[n]["n_elements"] for n in names), sum(e[n]["n_bytes"] for n in names)
        assert (b["params"], b["bytes"]) == (params, nbytes), b["bucket"]
        assert b["bits_per_weight"] == pytest.approx(8 * nbytes / params, abs=1e-4)
        total_params, total_bytes = total_params + params, total_bytes + nbytes
    p = r["parameters"]
    assert (p["unique"], p["stored_bytes"]) == (total_params, total_bytes)
    assert p["bits_per_weight"] == pytest.approx(8 * total_bytes / total_params, abs=1e-4)
