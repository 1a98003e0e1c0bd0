"""The safetensors reader on files written by the real writers (fixtures/make_safetensors.py)."""
import json
import os
import shutil

import numpy as np
import pytest
from conftest import fixture

from ckptstat import open_checkpoint, summarize
from ckptstat.errors import UnknownFormatError


def bucket_totals(report: dict) -> dict:
    return {b["bucket"]: b["params"] for b in report["buckets"]}


def bert_oracle(cfg: dict) -> dict:
    """BertModel's parameter split from its config, by the closed form in docs/oracles.md."""
    h, f, L = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]
    emb = (cfg["vocab_size"] + cfg["max_position_embeddings"] + cfg["type_vocab_size"]) * h + 2 * h
    layer = 4 * (h * h + h) + 2 * h + (h * f + f) + (f * h + h) + 2 * h
    return {"embedding": emb, "encoder": L * layer, "pooler": h * h + h}


@pytest.mark.parametrize("name", ["bert-tiny", "bert-tiny-buffers", "gpt2-tiny", "llama-tiny-sharded", "bert-tiny-mlm"])
def test_parameter_count_matches_model_parameters(name, expected_st):
    r = summarize(fixture(name))
    # A save_pretrained file drops tied heads, so its unique count is model.parameters()'s.
    assert r["parameters"]["unique"] == expected_st[name]["parameters"]


def test_bert_bucket_split_matches_closed_form():
    r = summarize(fixture("bert-tiny"))
    with open(fixture("bert-tiny", "config.json")) as f:
        cfg = json.load(f)
    assert bucket_totals(r) == bert_oracle(cfg)
    assert r["architecture"]["family"] == "bert" and r["architecture"]["source"] == "config.json"
    assert sum(b["share"] for b in r["buckets"]) == pytest.approx(1.0)
    layers = [row for row in r["layers"] if row["bucket"] == "encoder"]
    assert [row["layer"] for row in layers] == list(range(cfg["num_hidden_layers"]))
    assert sum(row["params"] for row in layers) == bert_oracle(cfg)["encoder"]


def test_buffers_counted_apart():
    r = summarize(fixture("bert-tiny-buffers"))
    (buf,) = r["non_parameters"]
    assert buf["role"] == "buffer" and buf["names"] == ["embeddings.position_ids"] and buf["elements"] == 64
    assert r["parameters"]["unique"] == summarize(fixture("bert-tiny"))["parameters"]["unique"]
    assert r["metadata"] == {"format": "pt"}


def test_dtype_totals_and_storage_accounting():
    ckpt = open_checkpoint(fixture("dtypes.safetensors"))
    r = summarize(ckpt)
    by_dtype = {d["dtype"]: d for d in r["dtypes"]}
    assert by_dtype["BF16"]["params"] == 24 and by_dtype["BF16"]["bytes"] == 48
    assert by_dtype["F32"]["params"] == 24 + 1 + 0  # f32, scalar, empty
    s = r["storage"]
    assert s["file_bytes"] == os.path.getsize(fixture("dtypes.safetensors"))
    assert s["tensor_bytes"] == sum(t.nbytes for t in ckpt)
    assert s["overhead_bytes"] == 8 + int.from_bytes(open(fixture("dtypes.safetensors"), "rb").read(8), "little")
    assert r["metadata"] == {"written_by": "safetensors.torch"}


def test_values_of_every_dtype(expected_st):
    ckpt = open_checkpoint(fixture("dtypes.safetensors"))
    for name, want in expected_st["dtypes.safetensors"].items():
        got = ckpt.read(name)
        assert list(got.shape) == want["shape"], name
        flat = got.reshape(-1)
        if np.iscomplexobj(flat):
            flat = np.stack([flat.real, flat.imag], axis=-1).reshape(-1)
        np.testing.assert_array_equal(flat.astype(np.float64), np.array(want["values"], dtype=np.float64), err_msg=name)


def test_chunked_reads_equal_whole_reads():
    ckpt = open_checkpoint(fixture("llama-tiny-sharded"))
    for t in ckpt:
        whole = ckpt.read(t.name).reshape(-1)
        chunks = np.concatenate(list(ckpt.iter_chunks(t.name, chunk_bytes=64)))
        np.testing.assert_array_equal(whole, chunks)


def test_values_against_safetensors_library():
    from safetensors import safe_open

    path = fixture("gpt2-tiny", "model.safetensors")
    ckpt = open_checkpoint(path)
    with safe_open(path, framework="numpy") as f:
        for name in f.keys():
            np.testing.assert_array_equal(ckpt.read(name), f.get_tensor(name))


def test_sharded_index():
    ckpt = open_checkpoint(fixture("llama-tiny-sharded", "model.safetensors.index.json"))
    assert len(ckpt.files) == 7 and ckpt.format == "safetensors (sharded)"
    with open(fixture("llama-tiny-sharded", "model.safetensors.index.json")) as f:
        index = json.load(f)
    assert set(ckpt.tensors) == set(index["weight_map"])
    assert ckpt.metadata["index.total_size"] == str(index["metadata"]["total_size"])
    assert sum(t.byte_size for t in ckpt) == index["metadata"]["total_size"]
    r = summarize(ckpt)
    assert bucket_totals(r)["cls"] == 128 * 32 and bucket_totals(r)["embedding"] == 128 * 32


def test_folder_and_magic_detection(tmp_path):
    # A folder: weights and config.json are found in it.
    r = summarize(fixture("gpt2-tiny"))
    assert r["config"].endswith("config.json") and r["architecture"]["architectures"] == ["GPT2LMHeadModel"]
    # Detected by magic bytes, not by the extension.
    odd = tmp_path / "weights.bin"
    shutil.copy(fixture("gpt2-tiny", "model.safetensors"), odd)
    assert open_checkpoint(odd).format == "safetensors"
    assert summarize(odd)["config"] is None and summarize(odd)["architecture"]["family"] == "gpt2"


def test_unknown_format(tmp_path):
    p = tmp_path / "notes.txt"
    p.write_text("hello, not a checkpoint")
    with pytest.raises(UnknownFormatError, match="notes.txt"):
        open_checkpoint(p)


def test_input_is_never_modified():
    path = fixture("bert-tiny", "model.safetensors")
    before = (os.stat(path).st_mtime_ns, open(path, "rb").read())
    ckpt = open_checkpoint(path)
    for t in ckpt:
        ckpt.read(t.name)
    assert (os.stat(path).st_mtime_ns, open(path, "rb").read()) == before


def test_folder_with_several_weight_files_is_not_guessed(tmp_path, cli):
    for name in ("a.safetensors", "b.safetensors"):
        shutil.copy(fixture("gpt2-tiny", "model.safetensors"), tmp_path / name)
    rc, out, err = cli(str(tmp_path))
    assert rc == 2 and out == "" and "a.safetensors, b.safetensors" in err


def test_no_safetensors_name_is_an_alias():
    """safetensors refuses overlapping data_offsets, so the reader marks the checkpoint `distinct` and the
    census skips the alias search; a torch save of tied weights is not marked, and its aliases are found."""
    from ckptstat.census import aliases
    for name in ("gpt2-tiny", "llama-tiny-sharded"):
        ckpt = open_checkpoint(fixture(name))
        assert ckpt.distinct and aliases(ckpt) == {}
        keys = [t.alias_key for t in ckpt]
        assert len(set(keys)) == len(keys)   # what the search would have found
    torch_ckpt = open_checkpoint(fixture("torch", "bert-mlm"))
    assert not torch_ckpt.distinct and aliases(torch_ckpt)


def test_reader_tensors_equal_checked_ones():
    """The reader builds each tensor without the dataclass's checks (TensorInfo.validated): equal to one built
    with them, its `extra` empty and read-only, and a copy or pickle of it the same tensor."""
    import copy
    import dataclasses
    import pickle

    from ckptstat.core import TensorInfo
    ckpt = open_checkpoint(fixture("gpt2-tiny"))
    for t in ckpt:
        checked = TensorInfo(t.name, t.dtype, t.shape, t.file, t.offset, t.nbytes)
        assert t == checked and t.extra == {} and hash(t) == hash(checked)
        assert pickle.loads(pickle.dumps(t)) == t and copy.deepcopy(t) == t
    t = next(iter(ckpt))
    with pytest.raises(TypeError):
        t.extra["x"] = 1   # type: ignore[index]
    other = dataclasses.replace(t, extra={"layout": "in_out"})
    assert other.extra == {"layout": "in_out"} and t.extra == {} and next(iter(ckpt)).extra == {}


# ---- the compact-header fast path (formats/safetensors.py `_compact`) ----

def _open_both(path):
    """(the Checkpoint or error line by the fast path, by json alone; whether the fast path read it)."""
    from ckptstat.errors import CheckpointError
    from ckptstat.formats import safetensors as st

    def one():
        try:
            c = st.open_safetensors(str(path))
            return c.tensors, c.metadata, c.dropped
        except CheckpointError as e:
            return str(e)

    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        took = st._compact(f.read(n).decode("utf-8", "replace")) is not None
    fast = one()
    real, st._compact = st._compact, lambda text: None
    table, st._table = st._table, lambda *args: None
    try:
        slow = one()
    finally:
        st._compact, st._table = real, table
    return fast, slow, took


def test_compact_headers_by_the_writer_read_as_json_does(tmp_path):
    """Files by safetensors' own writer (every dtype numpy has, 0-d, empty and 0-sized shapes, metadata, non-ASCII
    names, names with quotes a JSON writer escapes): the fast path reads them, equal to the JSON parse."""
    from safetensors.numpy import save_file

    rng = np.random.default_rng(0)
    cases = {
        "dtypes": {f"t.{d}": rng.standard_normal((3, 2)).astype(d) for d in
                   ("float16", "float32", "float64", "int8", "uint8", "int16", "int32", "int64", "bool")},
        "shapes": {"scalar": np.array(1.5, np.float32), "empty": np.zeros((0, 4), np.float16),
                   "vec": np.ones(7, np.float16), "big": np.zeros((2, 3, 4, 5), np.float32)},
        "names": {"模型.权重": np.ones(2, np.float32), "emb😀.weight": np.ones(3, np.float32), "a:b,c}{[]": np.ones(1)},
        "escaped": {'quote"name': np.ones(2, np.float32), "back\\slash": np.ones(2, np.float32)},
    }
    for label, tensors in cases.items():
        for i, metadata in enumerate((None, {"format": "pt", "k": "v,x}{"}, {"quoted": 'a"b'})):
            path = tmp_path / f"{label}-{i}.safetensors"
            save_file(tensors, str(path), metadata=metadata)
            fast, slow, took = _open_both(path)
            assert fast == slow, label
            assert took == (label != "escaped" and i < 2), (label, metadata)   # an escape: json reads it


def _taken(path):
    """formats/safetensors.py `_table` of the file's header, read in pieces (`_pieces`) as open_safetensors reads a
    large one: (metadata, TensorTable), or None where it is not taken."""
    from ckptstat.formats import safetensors as st

    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        return st._table(st._pieces(f, n), str(path), 8 + n, os.path.getsize(path))


@pytest.mark.parametrize("header", [
    '{"a":{"dtype":"F16","shape":[2],"data_offsets":[0,4]},"a":{"dtype":"F16","shape":[2],"data_offsets":[4,8]}}',
    '{"__metadata__":{"x":"y"},"__metadata__":{"dtype":"F16","shape":[2],"data_offsets":[0,4]},'
    '"b":{"dtype":"F16","shape":[2],"data_offsets":[4,8]}}',
    '{"a":{"dtype":"F16","shape":[2],"data_offsets":[0,4]},"b":{"shape":[2],"dtype":"F16","data_offsets":[4,8]}}',
    '{"a":{"dtype":"F16","shape":[02],"data_offsets":[0,4]},"b":{"dtype":"F16","shape":[2],"data_offsets":[4,8]}}',
    '{"a":{"dtype":"F16","shape":[2],"data_offsets":[0,4]} ,"b":{"dtype":"F16","shape":[2],"data_offsets":[4,8]}}',
    '{"a\x01":{"dtype":"F16","shape":[2],"data_offsets":[0,4]},"b":{"dtype":"F16","shape":[2],"data_offsets":[4,8]}}',
    '{"a":{"dtype":"F16","shape":[2],"data_offsets":[0,4]},"b":{"dtype":"F16","shape":[2],"data_offsets":[4,8]}},{}',
    '{"__metadata__":{"x":1},"a":{"dtype":"F16","shape":[2],"data_offsets":[0,4]},'
    '"b":{"dtype":"F16","shape":[2],"data_offsets":[4,8]}}',
    '{"__metadata__":[],"a":{"dtype":"F16","shape":[2],"data_offsets":[0,4]},"b":{"dtype":"F16","shape":[2],"data_offsets":[4,8]}}',
    '{"a":{"dtype":"F16","shape":[2],"data_offsets":[0,4]},"b":{"dtype":"F16","shape":[2],"data_offsets":[4,9]}}',
    '{"a":{"dtype":"Q4","shape":[2],"data_offsets":[0,4]},"b":{"dtype":"F16","shape":[2],"data_offsets":[4,8]}}',
    '{"a":{"dtype":"F16","shape":[2,99999999999999999999999],"data_offsets":[0,4]},'
    '"b":{"dtype":"F16","shape":[2],"data_offsets":[4,8]}}',
])
@pytest.mark.parametrize("slice_chars", [None, 1, 40])
def test_headers_the_fast_path_does_not_take_or_refuses_as_json_does(tmp_path, monkeypatch, header, slice_chars):
    """Repeated names (a tensor named `__metadata__` too), another key order, a leading zero, whitespace, a control
    character, trailing text, bad metadata, wrong sizes, an unknown dtype, an overflowing shape: the same
    Checkpoint or the same one-line error as the JSON parse, whatever slices the text is matched in."""
    from ckptstat.formats import safetensors as st

    if slice_chars:
        monkeypatch.setattr(st, "_SLICE", slice_chars)
    raw = header.encode()
    path = tmp_path / "h.safetensors"
    path.write_bytes(len(raw).to_bytes(8, "little") + raw + bytes(8))
    fast, slow, _ = _open_both(path)
    assert fast == slow


@pytest.mark.parametrize("slice_chars", [1, 57, 200, 1 << 22])
def test_a_header_matched_in_slices_reads_as_json_does(tmp_path, monkeypatch, slice_chars):
    """The compact header's text is matched a slice at a time (formats/safetensors.py `_table`, `_SLICE`), each cut
    where an entry ends (`]},"`): at every slice size the table is taken and holds the JSON parse's tensors; names
    that hold the cut's own characters (`]},` before the closing quote, `]},"` escaped) read as the JSON parse
    reads them; a repeat or a gap in the last slice is refused as the JSON parse refuses it."""
    from safetensors.numpy import save_file

    from ckptstat.formats import safetensors as st

    monkeypatch.setattr(st, "_SLICE", slice_chars)
    names = [f"model.layers.{i}.mlp.w{j}" for i in range(30) for j in range(3)]
    arrays = {n: np.full((i % 4 + 1, 2), i, np.float16) for i, n in enumerate(names)}
    for metadata in (None, {"format": "pt"}):
        path = tmp_path / f"plain-{metadata is None}.safetensors"
        save_file(arrays, str(path), metadata=metadata)
        taken = _taken(path)
        assert taken is not None
        fast, slow, _ = _open_both(path)
        assert fast == slow and not isinstance(fast, str) and dict(taken[1].items()) == fast[0]
    for odd in (["x]},", "y]},z", "]},"], ['q]},"r']):
        path = tmp_path / "odd.safetensors"
        save_file(arrays | {n: np.ones(3, np.float32) for n in odd}, str(path))
        fast, slow, _ = _open_both(path)
        assert fast == slow and not isinstance(fast, str)
    entries = [f'"t{i}":{{"dtype":"F16","shape":[2],"data_offsets":[{4 * i},{4 * i + 4}]}}' for i in range(40)]
    for last, data in (('"t0":{"dtype":"F16","shape":[2],"data_offsets":[156,160]}', 160),
                       ('"t39":{"dtype":"F16","shape":[2],"data_offsets":[160,164]}', 164)):
        raw = ("{" + ",".join(entries[:39] + [last]) + "}").encode()
        path = tmp_path / "bad.safetensors"
        path.write_bytes(len(raw).to_bytes(8, "little") + raw + bytes(data))
        fast, slow, _ = _open_both(path)
        assert fast == slow and isinstance(fast, str)


@pytest.mark.parametrize("slice_chars", [None, 1 << 16])
def test_a_large_header_is_read_in_pieces_as_json_and_safe_open_read_it(tmp_path, monkeypatch, slice_chars):
    """A header past _SLICE (1.5 MB here: 14,000 tensors; the default 1 MiB and 64 KiB pieces) is read, matched and
    checked a piece at a time (formats/safetensors.py `_pieces`), never held whole (at 1M tensors the 96 MB text was
    the parse's peak beside the columns). Two dtypes, so the data lies sorted by dtype and not in the header's order
    (the contiguity check's sorted route). The tensors equal the JSON route's and safetensors' own safe_open's."""
    from safetensors import safe_open
    from safetensors.numpy import save_file

    from ckptstat.formats import safetensors as st

    if slice_chars:
        monkeypatch.setattr(st, "_SLICE", slice_chars)
    names = [f"model.layers.{i // 300}.mlp.experts.{i % 300}.down_proj.weight" for i in range(14000)]
    path = tmp_path / "large.safetensors"
    save_file({n: np.full(i % 3 + 1, i, np.float16 if i % 5 else np.float32) for i, n in enumerate(names)}, str(path),
              metadata={"format": "pt"})
    assert int.from_bytes(path.read_bytes()[:8], "little") > st._SLICE
    pieces, real = [], st._pieces

    def spy(f, n):
        for text, last in real(f, n):
            pieces.append(len(text))
            yield text, last
    monkeypatch.setattr(st, "_pieces", spy)
    fast, slow, _ = _open_both(path)
    assert fast == slow and not isinstance(fast, str)
    assert len(pieces) >= 2 and max(pieces) < st._SLICE + 100   # a read, and what the last cut left of the one before
    tensors, metadata, _ = fast
    assert metadata == {"format": "pt"}
    with safe_open(str(path), framework="np") as f:
        assert set(tensors) == set(f.keys()) == set(names)
        for name in list(f.keys())[::997]:
            sl = f.get_slice(name)
            assert tensors[name].shape == tuple(sl.get_shape()) and tensors[name].dtype == sl.get_dtype()


@pytest.mark.parametrize("slice_chars", [None, 64, 300])
def test_a_piece_that_is_not_utf8_is_refused_as_the_whole_header_is(tmp_path, monkeypatch, slice_chars):
    """Bytes that are not UTF-8 in a name past the first piece: the one-line error of the whole header's decode
    (`header is not valid UTF-8`), not a partial table; safetensors' own reader refuses the file too."""
    from safetensors import safe_open

    from ckptstat.formats import safetensors as st

    if slice_chars:
        monkeypatch.setattr(st, "_SLICE", slice_chars)
    entries = [f'"t{i}":{{"dtype":"F16","shape":[2],"data_offsets":[{4 * i},{4 * i + 4}]}}'.encode() for i in range(40)]
    entries[30] = entries[30].replace(b'"t30"', b'"t\xff30"')
    raw = b"{" + b",".join(entries) + b"}"
    path = tmp_path / "bad.safetensors"
    path.write_bytes(len(raw).to_bytes(8, "little") + raw + bytes(160))
    fast, slow, _ = _open_both(path)
    assert fast == slow and isinstance(fast, str) and fast.endswith("header is not valid UTF-8"), fast
    with pytest.raises(Exception):   # noqa: B017 - the library's own error type
        safe_open(str(path), framework="np")


def test_mutated_headers_read_the_same_in_pieces_as_whole(tmp_path, monkeypatch):
    """Differential: 400 random byte edits of a writer's header (a character deleted, replaced or inserted from the
    ones the pieces cut and check on, an entry repeated, a span of the file cut off) open to the same Checkpoint or
    the same one-line error whether the header is one piece or cut into pieces of 1, 7 and 64 bytes
    (formats/safetensors.py `_pieces`)."""
    import random

    from safetensors.numpy import save_file

    from ckptstat.formats import safetensors as st

    def opened(path):
        try:
            c = st.open_safetensors(str(path))
            return dict(c.tensors.items()), c.metadata, c.dropped
        except CheckpointError as e:
            return str(e)

    from ckptstat.errors import CheckpointError

    good = tmp_path / "good.safetensors"
    save_file({f"model.layers.{i}.w{j}": np.full(i % 3 + 1, i, np.float16 if j else np.float32)
               for i in range(6) for j in range(3)}, str(good), metadata={"format": "pt"})
    data = good.read_bytes()
    n = int.from_bytes(data[:8], "little")
    rng = random.Random(0)
    alphabet = b']},"{[:\\ 0123456789aF\xff'
    path = tmp_path / "m.safetensors"
    differ = []
    for case in range(400):
        header = bytearray(data[8:8 + n])
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(len(header))
            kind = rng.randrange(4)
            if kind == 0:
                del header[at]
            elif kind == 1:
                header[at] = rng.choice(alphabet)
            elif kind == 2:
                header.insert(at, rng.choice(alphabet))
            else:   # an entry repeated
                cut = header.find(b']},"', at)
                start = header.rfind(b']},"', 0, cut)
                if 0 <= start < cut:
                    header[cut + 2:cut + 2] = header[start + 2:cut + 2]
        tail = data[8 + n:] if rng.random() < 0.8 else data[8 + n:-rng.randint(1, 8)]
        path.write_bytes(len(header).to_bytes(8, "little") + bytes(header) + tail)
        monkeypatch.setattr(st, "_SLICE", 1 << 20)
        whole = opened(path)
        for piece in (1, 7, 64):
            monkeypatch.setattr(st, "_SLICE", piece)
            if opened(path) != whole:
                differ.append((case, piece, bytes(header)))
    assert not differ, differ[:3]


def test_a_writers_header_is_checked_by_columns(tmp_path):
    """A compact header of plain tensors (no 0-byte one, which shares its neighbour's offset) takes the column check
    (formats/safetensors.py `_table`), and its tensors are those the entry loop builds from the same entries."""
    from safetensors.numpy import save_file

    from ckptstat.formats import safetensors as st

    path = tmp_path / "plain.safetensors"
    save_file({f"layers.{i}.w": np.ones((i + 1, 3), np.float16) for i in range(12)} | {"b": np.ones(5, np.float32)},
              str(path))
    n, _, found = st.read_header(str(path))
    size = path.stat().st_size
    fast = _taken(path)
    assert fast is not None
    assert dict(fast[1].items()) == st._checked(st._entries(found, str(path)), str(path), 8 + n, size, ValueError)
