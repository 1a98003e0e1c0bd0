"""Hostile inputs, third wave (docs/security.md, "Checks added by the third red-team pass"): each case is
built here with the real writer (safetensors, numpy, onnx, h5py, zipfile) or with pickle opcodes, run
through the CLI and the library, and expected to end in one line naming the file, a non-zero exit, no
traceback, nothing read outside tmp_path and nothing run. Each test names what escaped before its fix.
"""
from __future__ import annotations

import builtins
import csv
import io
import json
import os
import shutil
import struct
import tracemalloc
import zipfile

import h5py
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from safetensors.numpy import save_file

from ckptstat import open_checkpoint
from ckptstat.formats import keras_zip, onnx_model

SECRET = "TOPSECRET-5b2e"   # bytes of a file beside the target that must never show up anywhere
EVIL = "a\x1b[31mred\x1b[0m\n<script>x</script>|`b`\r\x07![l](https://e.x/t.png)"


def _refused(rc: int, out: str, err: str, name: str, what: str = "") -> None:
    assert rc not in (0, None), (rc, out, err)
    assert err.count("\n") == 1 and err.startswith("ckptstat: error:"), err
    assert "Traceback" not in err and "internal error" not in err, err
    assert name in err and what in err, err
    assert SECRET not in out + err


@pytest.fixture
def secret(tmp_path):
    """A folder beside the checkpoint's, holding files whose bytes must never be read."""
    d = tmp_path / "secret"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"model_type": "bert", "unet": ["diffusers", SECRET], "hidden_size": 8}))
    (d / "data.bin").write_bytes(SECRET.encode() * 64)
    save_file({SECRET: np.ones(2, np.float32)}, str(d / "w.safetensors"))
    return d


@pytest.fixture
def opened(monkeypatch):
    """Every path opened through Python (builtins.open, os.open) while the test runs."""
    seen: list[str] = []
    real_open, real_os_open = builtins.open, os.open

    def spy_open(file, *a, **k):
        if isinstance(file, (str, bytes, os.PathLike)):
            seen.append(os.path.realpath(os.fsdecode(file)))
        return real_open(file, *a, **k)

    def spy_os_open(path, *a, **k):
        seen.append(os.path.realpath(os.fsdecode(path)))
        return real_os_open(path, *a, **k)

    monkeypatch.setattr(builtins, "open", spy_open)
    monkeypatch.setattr(os, "open", spy_os_open)
    return seen


# ---------------------------------------------------------------------------------------------- output injection
def _evil_pair(tmp_path) -> tuple[str, str]:
    a, b = str(tmp_path / "a.safetensors"), str(tmp_path / "b.safetensors")
    save_file({EVIL: np.ones(4, np.float32), "model.layers.0.mlp.w": np.ones((4, 4), np.float32)}, a, metadata={"k": EVIL})
    save_file({EVIL: np.zeros(4, np.float32), "model.layers.0.mlp.w": np.ones((4, 4), np.float32),
               EVIL + "2": np.zeros(2, np.float32)}, b)
    return a, b


def _inert(text: str) -> bool:
    return not any(c in text for c in "\x1b\x07\r")


def test_csv_markdown_and_html_outputs_show_control_characters_inert(cli, tmp_path):
    """Escaped before: `stats --csv`, `diff --format md|html` (stdout and -o) and `report -o x.md|x.html`
    wrote a name's ESC, BEL and CR raw (`cat report.md` replayed them), and a markdown name `![l](https://...)`
    was an image fetched when the report is viewed. Now \\xNN, as the tables do, and brackets escaped."""
    a, b = _evil_pair(tmp_path)
    rc, out, _ = cli("stats", a, "--csv")
    assert rc == 0 and _inert(out) and "\\x1b[31mred" in out
    rows = list(csv.DictReader(io.StringIO(out)))
    assert len(out.splitlines()) == len(rows) + 1   # a newline in a name no longer splits a row over two lines
    assert any(r["name"].startswith("a\\x1b[31mred") for r in rows)
    for fmt in ("md", "html"):
        rc, out, _ = cli("diff", a, b, "--format", fmt)
        assert rc == 1 and _inert(out) and "\\x1b" in out and "31mred" in out and "<script>" not in out, fmt
        assert fmt == "html" or ("![l](https" not in out and "!\\[l\\](https" in out)   # no image, no link
        target = tmp_path / f"diff.{fmt}"
        rc, out, _ = cli("diff", a, b, "--format", fmt, "-o", str(target))
        text = target.read_text()
        assert rc == 1 and _inert(text) and "\\x1b" in text and "31mred" in text and "<script>" not in text, fmt
        target = tmp_path / f"report.{fmt}"
        rc, out, _ = cli("report", a, "-o", str(target))
        text = target.read_text()
        assert rc == 0 and _inert(text) and "\\x1b" in text and "31mred" in text and "<script>" not in text, fmt
    rc, out, _ = cli("stats", a, "--json")   # JSON keeps the exact name (json escapes it as \u001b)
    assert rc == 0 and _inert(out) and any(t["name"] == EVIL for t in json.loads(out)["tensors"])


# ---------------------------------------------------------------------------------------------- reads outside
def test_pipeline_model_index_symlinked_out_is_refused(cli, tmp_path, secret, opened):
    """Escaped before: a diffusers pipeline folder whose model_index.json is a symlink out of it was read
    and its keys printed (the secret's contents in `summary`'s output, exit 0)."""
    pipe = tmp_path / "pipe"
    (pipe / "unet").mkdir(parents=True)
    os.symlink(secret / "config.json", pipe / "model_index.json")
    for args in ((), ("--json",)):
        rc, out, err = cli("summary", str(pipe), *args)
        _refused(rc, out, err, "model_index.json", "outside the checkpoint")
    assert not any(p.startswith(str(secret)) for p in opened), opened
    rc, out, err = cli("--allow-external", "summary", str(pipe), "--json")   # the flag follows it
    assert rc == 0 and SECRET in out


def _onnx_external(folder, location: str) -> str:
    t = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[2], data_location=TensorProto.EXTERNAL)
    for k, v in (("location", location), ("offset", "0"), ("length", "8")):
        t.external_data.add(key=k, value=v)
    graph = helper.make_graph([], "g", [], [], initializer=[t])
    path = os.path.join(folder, "model.onnx")
    onnx.save_model(helper.make_model(graph), path)
    return path


@pytest.mark.parametrize("how", ["symlink", "dir-symlink", "dotdot", "absolute", "fifo"])
def test_onnx_external_data_never_read_outside(cli, tmp_path, secret, opened, how):
    folder = tmp_path / "m"
    folder.mkdir()
    location = {"symlink": "w.bin", "dir-symlink": "sub/data.bin", "dotdot": "sub/../../secret/data.bin",
                "absolute": str(secret / "data.bin"), "fifo": "pipe.bin"}[how]
    if how == "symlink":
        os.symlink(secret / "data.bin", folder / "w.bin")
    elif how == "dir-symlink":
        os.symlink(secret, folder / "sub")
    elif how == "fifo":
        os.mkfifo(folder / "pipe.bin")
    path = _onnx_external(str(folder), location)
    for command in ("summary", "stats"):
        rc, out, err = cli(command, path)
        _refused(rc, out, err, "model.onnx" if how != "fifo" else "pipe.bin")
    assert not any(p.startswith(str(secret)) for p in opened), opened


def test_gguf_split_shard_symlinked_out_is_refused(cli, tmp_path, secret, opened):
    from test_gguf import gguf_bytes, kv

    def shard(no: int) -> bytes:
        keys = [kv("split.no", 2, struct.pack("<H", no)), kv("split.count", 2, struct.pack("<H", 2)),
                kv("split.tensors.count", 5, struct.pack("<i", 4))]
        return gguf_bytes(kvs=keys)

    folder = tmp_path / "g"
    folder.mkdir()
    (folder / "m-00001-of-00002.gguf").write_bytes(shard(0))
    (secret / "m-00002-of-00002.gguf").write_bytes(shard(1))
    os.symlink(secret / "m-00002-of-00002.gguf", folder / "m-00002-of-00002.gguf")
    rc, out, err = cli("summary", str(folder / "m-00001-of-00002.gguf"))
    _refused(rc, out, err, "m-00001-of-00002.gguf", "outside the checkpoint")
    assert not any(p.startswith(str(secret)) for p in opened), opened


# ---------------------------------------------------------------------------------------------- ONNX varint values
def _varint_model(tmp_path) -> tuple[str, onnx.ModelProto]:
    rng = np.random.default_rng(0)
    tensors = [
        helper.make_tensor("i64", TensorProto.INT64, [3000], rng.integers(-2**62, 2**62, 3000).tolist()),
        helper.make_tensor("i32", TensorProto.INT32, [50, 40], rng.integers(-2**31, 2**31, 2000).tolist()),
        helper.make_tensor("u64", TensorProto.UINT64, [700], rng.integers(0, 2**64, 700, dtype=np.uint64).tolist()),
        helper.make_tensor("b", TensorProto.BOOL, [999], (rng.random(999) > 0.5).tolist()),
        helper.make_tensor("f16", TensorProto.FLOAT16, [300], rng.standard_normal(300).astype(np.float16).tolist()),
        helper.make_tensor("u8", TensorProto.UINT8, [17], list(range(200, 217))),
        helper.make_tensor("empty", TensorProto.INT64, [0], []),
    ]
    model = helper.make_model(helper.make_graph([], "g", [], [], initializer=tensors))
    path = str(tmp_path / "v.onnx")
    onnx.save_model(model, path)
    return path, model


def test_onnx_varint_values_equal_onnx_across_blocks(tmp_path, monkeypatch):
    """The varint decoder (vectorised, in blocks) against onnx.numpy_helper on every typed varint field,
    with blocks of 64 bytes so that every tensor spans many, and odd chunk sizes."""
    monkeypatch.setattr(onnx_model, "VARINT_BLOCK", 64)
    path, model = _varint_model(tmp_path)
    with open_checkpoint(path) as ckpt:
        for t in model.graph.initializer:
            ref = numpy_helper.to_array(t).reshape(-1)
            assert ckpt[t.name].extra.get("encoding") == "varint" or t.name == "empty"
            np.testing.assert_array_equal(ckpt.read(t.name).reshape(-1), ref, err_msg=t.name)
            got = np.concatenate([c.reshape(-1) for c in ckpt.iter_chunks(t.name, chunk_bytes=37)] or [np.zeros(0)])
            np.testing.assert_array_equal(got, ref, err_msg=t.name)


def test_onnx_varint_reads_are_linear(tmp_path, monkeypatch):
    """Escaped before: every chunk of a varint-packed tensor decoded the whole field in Python (stats of a
    4 MB int64_data field: 22 s of CPU, 20 MB: ~10 min). Now each chunk decodes from its block: the bytes
    read over all chunks stay a small multiple of the field, and the memory traced stays near a chunk."""
    n = 400_000
    model = helper.make_model(helper.make_graph([], "g", [], [], initializer=[
        helper.make_tensor("w", TensorProto.INT64, [n], np.arange(n, dtype=np.int64).tolist())]))
    path = str(tmp_path / "big.onnx")
    onnx.save_model(model, path)
    field = os.path.getsize(path)
    read = []
    real = onnx_model.read_bytes
    monkeypatch.setattr(onnx_model, "read_bytes", lambda p, o, s: read.append(s) or real(p, o, s))
    with open_checkpoint(path) as ckpt:
        tracemalloc.start()
        try:
            total = sum(int(c.sum()) for c in ckpt.iter_chunks("w", chunk_bytes=64 << 10))
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert total == n * (n - 1) // 2
    assert sum(read) < 4 * field, (sum(read), field)
    assert peak < 96 << 20, peak


def test_onnx_unterminated_varint_is_one_line(cli, tmp_path):
    model = helper.make_model(helper.make_graph([], "g", [], [], initializer=[
        helper.make_tensor("w", TensorProto.INT64, [1], [1])]))
    data = onnx._serialize(model) if hasattr(onnx, "_serialize") else model.SerializeToString()
    assert data.count(b"\x3a\x01\x01") == 1          # int64_data (field 7, packed): one byte, value 1
    p = tmp_path / "cut.onnx"
    p.write_bytes(data.replace(b"\x3a\x01\x01", b"\x3a\x01\x81"))   # its last byte says "more follows"
    rc, out, err = cli("stats", str(p), "--all-roles")
    _refused(rc, out, err, "cut.onnx", "never ends")


# ---------------------------------------------------------------------------------------------- Keras zips
def _keras(path, config: dict, datasets: int = 2, compress: int = zipfile.ZIP_STORED) -> str:
    h5 = str(path) + ".h5"
    with h5py.File(h5, "w") as f:
        for i in range(datasets):
            f.create_dataset(f"layers/dense_{i}/vars/0", data=np.full((4, 3), i, np.float32))
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("metadata.json", json.dumps({"keras_version": "3.5.0"}))
        z.writestr("config.json", json.dumps(config))
        z.write(h5, "model.weights.h5", compress_type=compress)
    os.unlink(h5)
    return str(path)


def test_deflated_keras_weights_are_decompressed_once(cli, tmp_path, monkeypatch):
    """Escaped before: values of a deflated model.weights.h5 were read by decompressing the whole member
    again for every chunk of every tensor (n tensors: n times the member, which may declare ~1000x its
    compressed size). Now once per open and once for all the reads."""
    path = _keras(tmp_path / "d.keras", {"class_name": "Sequential"}, datasets=40, compress=zipfile.ZIP_DEFLATED)
    copies = []
    real = shutil.copyfileobj
    monkeypatch.setattr(keras_zip.shutil, "copyfileobj", lambda *a: copies.append(1) or real(*a))
    with open_checkpoint(path) as ckpt:
        opened_copies = len(copies)
        for i in range(40):
            assert ckpt.read(f"layers/dense_{i}/vars/0").tolist() == np.full((4, 3), i, np.float32).tolist()
    assert opened_copies == 1 and len(copies) == 2, copies
    rc, out, err = cli("--limit", "spill_bytes=1000", "stats", path)   # and the temporary copy is bounded
    _refused(rc, out, err, "d.keras", "spill_bytes")


def test_keras_lambda_layers_are_flagged_by_scan(cli, tmp_path):
    """Escaped before: `scan` of a .keras archive said torch.load cannot read it (exit 2), and a folder scan
    skipped it, whatever its config held. Now a Lambda layer or a __lambda__ function (marshalled
    bytecode, run by load_model(safe_mode=False)) is a finding: UNSAFE, exit 1."""
    lam = {"class_name": "Lambda", "config": {"name": "evil\x1b[31m", "function": {
        "class_name": "__lambda__", "config": {"code": "4wEAAAAAAAAA", "defaults": None, "closure": None}}}}
    bad = _keras(tmp_path / "lam.keras", {"class_name": "Sequential", "config": {"layers": [lam]}})
    good = _keras(tmp_path / "ok.keras", {"class_name": "Sequential", "config": {"layers": [{"class_name": "Dense"}]}})
    rc, out, _ = cli("scan", bad, "--json")
    r = json.loads(out)
    assert rc == 1 and r["status"] == "unsafe" and r["would_run_code"] and len(r["findings"]) == 2
    rc, out, _ = cli("scan", bad)
    assert rc == 1 and "UNSAFE" in out and "\x1b" not in out and "evil\\x1b[31m" in out
    rc, out, _ = cli("scan", good, "--json")
    assert rc == 0 and json.loads(out)["status"] == "safe"
    rc, out, _ = cli("scan", str(tmp_path), "--json")
    assert rc == 1 and {f["path"]: f["status"] for f in json.loads(out)["files"]} == {"lam.keras": "unsafe", "ok.keras": "safe"}


# ---------------------------------------------------------------------------------------------- numpy object arrays
class _Canary:
    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return (os.system, (f"touch {self.path}",))


def test_npy_object_arrays_are_scanned_never_unpickled(cli, tmp_path):
    """Escaped before: `scan` of an .npy/.npz object array holding an os.system pickle said torch.load cannot
    read it (exit 2) and a folder scan skipped it (exit 0: "0 files"). Now np.load's pickle is walked:
    numpy's own reconstruction globals and torch's allowlist are allowed, anything else is UNSAFE; summary refuses it."""
    canary = str(tmp_path / "PWNED")
    evil = np.empty(2, dtype=object)
    evil[0], evil[1] = _Canary(canary), "x"
    plain = np.empty(2, dtype=object)
    plain[0], plain[1] = "a", 3
    d = tmp_path / "arrays"
    d.mkdir()
    np.save(d / "evil.npy", evil, allow_pickle=True)
    np.savez(d / "evil_stored.npz", x=evil, y=np.ones(3))
    np.savez_compressed(d / "evil_deflated.npz", x=evil)
    np.save(d / "objects.npy", plain, allow_pickle=True)
    np.save(d / "structured.npy", np.zeros(2, dtype=[("a", object), ("b", "<f4")]), allow_pickle=True)
    np.save(d / "floats.npy", np.ones(3, np.float32))
    expect = {"evil.npy": "unsafe", "evil_stored.npz": "unsafe", "evil_deflated.npz": "unsafe", "objects.npy": "safe",
              "structured.npy": "safe", "floats.npy": "safe"}
    for name, status in expect.items():
        rc, out, _ = cli("scan", str(d / name), "--json")
        r = json.loads(out)
        assert (rc, r["status"]) == ((1, "unsafe") if status == "unsafe" else (0, "safe")), (name, r)
        if status == "unsafe":
            assert any(g.endswith("system") for g in r["unsafe_globals"]), r
    rc, out, _ = cli("scan", str(d), "--json")
    assert rc == 1 and {f["path"]: f["status"] for f in json.loads(out)["files"]} == expect
    rc, out, err = cli("summary", str(d / "evil.npy"))
    _refused(rc, out, err, "evil.npy", "Python objects")
    out_file = tmp_path / "audit.jsonl"
    rc, out, err = cli("audit", str(d), "-o", str(out_file))
    verdicts = {os.path.basename(json.loads(line)["path"]): json.loads(line)["scan"]["verdict"]
                for line in out_file.read_text().splitlines()}
    assert verdicts["evil.npy"] == "unsafe" and verdicts["objects.npy"] == "safe", verdicts
    assert not os.path.exists(canary)


# ---------------------------------------------------------------------------------------------- pickle opcode paths
def _s(b: bytes) -> bytes:   # SHORT_BINUNICODE
    return b"\x8c" + bytes([len(b)]) + b


def _pickles(canary: str) -> dict[str, tuple[bytes, str]]:
    cmd = f"touch {canary}".encode()
    return {
        "INST": (b"(" + b"X" + struct.pack("<I", len(cmd)) + cmd + b"ios\nsystem\n.", "os.system"),
        "OBJ": (b"\x80\x02(cos\nsystem\n" + _s(cmd) + b"o.", "os.system"),
        "NEWOBJ": (b"\x80\x02csubprocess\nPopen\n(" + _s(b"touch") + _s(canary.encode()) + b"l\x85\x81.", "subprocess.Popen"),
        "NEWOBJ_EX": (b"\x80\x04" + _s(b"subprocess") + _s(b"Popen") + b"\x93(" + _s(b"touch") + _s(canary.encode())
                      + b"l\x85}\x92.", "subprocess.Popen"),
        "BUILD": (b"\x80\x02cos\n_wrap_close\n)\x81}b.", "os._wrap_close"),
        "LONG_BINGET": (b"\x80\x04" + _s(b"os") + b"r\x05\x00\x00\x00" + _s(b"system") + b"r\x06\x00\x00\x00"
                        + b"j\x05\x00\x00\x00j\x06\x00\x00\x00\x93" + _s(cmd) + b"\x85R.", "os.system"),
        "getattr": (b"\x80\x02cbuiltins\ngetattr\ncbuiltins\n__import__\n" + _s(b"os") + b"\x85R" + _s(b"system")
                    + b"\x86R" + _s(cmd) + b"\x85R.", "builtins.getattr"),
    }


@pytest.mark.parametrize("case", ["INST", "OBJ", "NEWOBJ", "NEWOBJ_EX", "BUILD", "LONG_BINGET", "getattr"])
@pytest.mark.parametrize("member", ["archive/data.pkl", "ARCHIVE/DATA.PKL", "a\x1b[1m\n/data.pkl"])
def test_every_call_opcode_is_flagged_and_nothing_runs(cli, tmp_path, case, member):
    canary = str(tmp_path / "PWNED")
    pkl, name = _pickles(canary)[case]
    p = tmp_path / "evil.pt"
    with zipfile.ZipFile(p, "w") as z:
        z.writestr(member, pkl)
    rc, out, _ = cli("scan", str(p), "--json")
    r = json.loads(out)
    assert rc == 1 and r["status"] == "unsafe" and name in r["unsafe_globals"], r
    rc, out, err = cli("summary", str(p))
    _refused(rc, out, err, "evil.pt")
    assert "\x1b" not in err
    assert not os.path.exists(canary)


# ---------------------------------------------------------------------------------------------- JSON nested deep
DEEP = "[" * 100_000 + "]" * 100_000


def _deep_cases(tmp_path) -> dict[str, str]:
    out = {}
    d = tmp_path / "config"
    d.mkdir()
    save_file({"a": np.ones(2, np.float32)}, str(d / "model.safetensors"))
    (d / "config.json").write_text(DEEP)
    out["config.json"] = str(d)
    d = tmp_path / "index"
    d.mkdir()
    (d / "model.safetensors.index.json").write_text('{"weight_map": ' + DEEP + "}")
    out["model.safetensors.index.json"] = str(d)
    d = tmp_path / "adapter"
    d.mkdir()
    save_file({"a": np.ones(2, np.float32)}, str(d / "adapter_model.safetensors"))
    (d / "adapter_config.json").write_text(DEEP)
    out["adapter_config.json"] = str(d)
    d = tmp_path / "pipeline"
    d.mkdir()
    (d / "model_index.json").write_text(DEEP)
    out["model_index.json"] = str(d)
    out["deep.keras"] = _keras(tmp_path / "deep.keras", {})
    with zipfile.ZipFile(out["deep.keras"], "a") as z:
        z.writestr("config.json", DEEP)   # a second config.json: the last one is what zipfile reads
    header = ('{"__metadata__": {"a": ' + DEEP + "}}").encode()
    (tmp_path / "deep.safetensors").write_bytes(struct.pack("<Q", len(header)) + header)
    out["deep.safetensors"] = str(tmp_path / "deep.safetensors")
    return out


def test_json_nested_100000_deep_is_one_line_everywhere(cli, tmp_path):
    """RecursionError from json, in every JSON ckptstat reads, is the file's error: never a traceback or an
    internal error (a regression guard: every reader already goes through errors.reading)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # zipfile's duplicate-name warning for deep.keras
        cases = _deep_cases(tmp_path)
    for name, path in cases.items():
        for command in ("summary", "tensors") if name != "model_index.json" else ("summary",):
            rc, out, err = cli(command, path)
            _refused(rc, out, err, name)
    rc, out, _ = cli("scan", cases["deep.keras"])   # scan's walk of the config is iterative; json's depth is the limit
    assert rc == 2 and "Traceback" not in out


# ---------------------------------------------------------------------------------------------- figures
def test_names_in_figures_are_never_parsed_as_mathtext(cli, tmp_path):
    """Escaped before: `diff --format html` drew the per-layer heatmap with tensor names as tick labels, and a
    name holding `$\\nocmd{$` made matplotlib's mathtext parser raise (`internal error: ValueError`, exit 2);
    an ESC in a name reached stderr raw in matplotlib's missing-glyph warning. Labels are now inert, `$` escaped."""
    name = "$\\nocmd{$\x1b[31m"
    folder = tmp_path / f"m{name}"
    folder.mkdir()
    a, b = str(folder / f"{name}a.safetensors"), str(folder / "b.safetensors")
    save_file({f"model.layers.{i}.mlp.{name}.weight": np.full((4, 4), i, np.float32) for i in range(2)}, a)
    save_file({f"model.layers.{i}.mlp.{name}.weight": np.zeros((4, 4), np.float32) for i in range(2)}, b)
    rc, out, err = cli("diff", a, b, "--format", "html", "-o", str(tmp_path / "d.html"))
    assert rc == 1 and err == "" and "<img" in (tmp_path / "d.html").read_text()
    rc, out, err = cli("plot", a, "-o", str(tmp_path / "p.png"))
    assert rc == 0 and err == "" and (tmp_path / "p.png").stat().st_size > 0


def test_keras_zip_hdf5_references_outside_are_refused(cli, tmp_path, secret, opened):
    """Regression guard: a .keras archive's model.weights.h5 with external raw storage or a virtual dataset
    pointing at a file outside is refused before any value is read; an external link is not followed, and refused as
    Keras 3 refuses it (keras/src/saving/saving_lib.py: "Not allowed: H5 file with ExternalLink")."""
    with h5py.File(secret / "src.h5", "w") as f:
        f.create_dataset("x", data=np.full((2, 2), 7, np.float32))
    for kind in ("external", "virtual", "link"):
        h5 = tmp_path / f"{kind}.h5"
        with h5py.File(h5, "w") as f:
            f.create_dataset("layers/dense/vars/0", data=np.ones((2, 2), np.float32))
            if kind == "external":
                f.create_dataset("layers/dense/vars/1", shape=(16,), dtype="u1", external=[(str(secret / "data.bin"), 0, 16)])
            elif kind == "virtual":
                layout = h5py.VirtualLayout(shape=(2, 2), dtype="f4")
                layout[:] = h5py.VirtualSource(str(secret / "src.h5"), "x", shape=(2, 2))
                f.create_virtual_dataset("layers/dense/vars/1", layout)
            else:
                f["layers/dense/vars/1"] = h5py.ExternalLink(str(secret / "src.h5"), "x")
        path = tmp_path / f"{kind}.keras"
        with zipfile.ZipFile(path, "w") as z:
            z.writestr("metadata.json", "{}")
            z.writestr("config.json", "{}")
            z.write(h5, "model.weights.h5")
        for command in ("summary", "stats"):
            rc, out, err = cli(command, str(path))
            if kind == "link":
                _refused(rc, out, err, f"{kind}.keras", "ExternalLink")
            else:
                _refused(rc, out, err, f"{kind}.keras", "outside the checkpoint")
    assert not any(p.startswith(str(secret)) for p in opened), opened


# ---------------------------------------------------------------------------------------------- PEFT adapter configs
PEFT_KEYS = ["model.layers.1.self_attn.q_proj", r"layers\.[02]\.self_attn\.(q|v)_proj", "v_proj", ".*mlp.up_proj",
             "layers.3.mlp.down_proj", "(a+)+$", "lm_head", r"model\.layers\.\d+\.mlp\.gate_proj", "q_proj"]
PEFT_MODULES = [f"model.layers.{i}.{m}" for i in range(4) for m in ("self_attn.q_proj", "self_attn.v_proj",
                                                                     "mlp.up_proj", "mlp.down_proj", "mlp.gate_proj")]


@pytest.mark.parametrize("rotation", range(3))
def test_adapter_patterns_match_as_peft(rotation):
    """The linear-time matcher (analysis/adapter/match.py) picks the key peft's get_pattern_key picks, in
    the config's order (keys rotated so that each kind comes first)."""
    from peft.utils.other import get_pattern_key

    from ckptstat.analysis.adapter.match import Names, Patterns

    keys = PEFT_KEYS[rotation * 3:] + PEFT_KEYS[:rotation * 3]
    pats = Patterns(keys, None)
    for module in PEFT_MODULES + ["lm_head", "x.lm_head", "qq_proj", "q_proj"]:
        ref = get_pattern_key(keys, module)
        assert pats.match(module) == (None if ref == module and ref not in keys else ref), (keys, module)
    names = Names(["v_proj", "self_attn.q_proj", "q_proj", "lm_head"])
    assert [names.match(m) for m in ("model.layers.0.self_attn.q_proj", "lm_head", "a.xlm_head", "v_proj.q")] == \
        ["self_attn.q_proj", "lm_head", None, None]


def _adapter(tmp_path, modules: list[str], config: dict) -> str:
    d = tmp_path / "adapter"
    d.mkdir()
    tensors = {}
    for m in modules:
        tensors[f"base_model.model.{m}.lora_A.weight"] = np.ones((2, 4), np.float32)
        tensors[f"base_model.model.{m}.lora_B.weight"] = np.ones((4, 2), np.float32)
    save_file(tensors, str(d / "adapter_model.safetensors"))
    (d / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 2, "lora_alpha": 4, **config}))
    return str(d)


def test_adapter_config_cannot_make_matching_quadratic(cli, tmp_path, monkeypatch):
    """Escaped before: rank_pattern keys ran peft's regex on every module name whatever its length (a
    200,000-dot name against `.*x` and `.*y`: 28 s of CPU), and target_modules / modules_to_save were
    looped over for every module (entries x modules). Now plain names go through a trie of their parts and
    the regex never sees a name past MAX_NAME or a key with two quantifiers (`" * * * *"`)."""
    from ckptstat.analysis.adapter import match as adapter_match

    long_module = "q" + "." * 200_000 + "q"
    modules = [long_module] + [f"model.layers.{i}.mlp.up_proj" for i in range(2000)]
    config = {"target_modules": [f"t{i}" for i in range(50_000)] + ["up_proj"],
              "modules_to_save": [f"m{i}" for i in range(50_000)],
              "rank_pattern": {".*x": 4, " * * * * * * * * * * * *$": 8}, "alpha_pattern": {".*y": 3}}
    path = _adapter(tmp_path, modules, config)
    tried: list[int] = []
    real = adapter_match.re.match
    monkeypatch.setattr(adapter_match.re, "match", lambda p, s: tried.append(len(s)) or real(p, s))
    rc, out, err = cli("summary", path, "--json")
    assert rc == 0, err
    r = json.loads(out)
    assert {t["target"]: t["modules"] for t in r["targets"]}["up_proj"] == 2000
    assert tried and max(tried) <= adapter_match.MAX_NAME and len(tried) == 2 * 2000, (len(tried), max(tried))


def test_adapter_regex_work_is_bounded(cli, tmp_path, monkeypatch):
    from ckptstat.analysis.adapter import match as adapter_match

    monkeypatch.setattr(adapter_match, "MAX_WORK", 10_000)
    path = _adapter(tmp_path, [f"model.layers.{i}.self_attn.q_proj" for i in range(50)],
                    {"target_modules": ["q_proj"], "rank_pattern": {f"nomatch{i}.*": 4 for i in range(50)}})
    rc, out, err = cli("summary", path)
    _refused(rc, out, err, "adapter_config.json", "regex work")


# ---------------------------------------------------------------------------------------------- TF checkpoint pointer
def test_tf_checkpoint_pointer_of_newlines_is_searched_once(cli, tmp_path):
    """Escaped before: the `checkpoint` pointer was searched with `^\\s*model_checkpoint_path:`, whose `\\s*`
    runs across newlines: from every line start of a file of newlines it scanned to the end (1 MB: ~15 CPU
    minutes; these 200,000 lines: ~40 s). Now each line is scanned once, and the path is found after them."""
    from test_security import _tf_copy

    folder = _tf_copy(tmp_path / "run")
    pointer = os.path.join(folder, "checkpoint")
    with open(pointer, "w") as f:
        f.write("\n" * 200_000 + ' \t\n' * 1000 + 'model_checkpoint_path: "model.ckpt-0"\n')
    assert len(open_checkpoint(folder)) == 46
    with open(pointer, "w") as f:   # a value whose quote is not closed on its line is no value
        f.write('model_checkpoint_path: "model.ckpt-0\n"\n' + "\n" * 200_000)
    rc, out, err = cli("summary", folder)
    _refused(rc, out, err, "checkpoint", "no model_checkpoint_path")


def test_flops_module_grouping_is_linear_and_equals_the_regex():
    """Escaped before: flops' table grouped modules with `^(.*?\\[[^\\]]*\\])\\.(.*)$`, which retried `[^\\]]*`
    from every `[` (a 1 MB name of `[`s: ~6 CPU minutes). The scan that replaced it says the same on every
    short name over its alphabet, and on a long hostile one answers after one pass. (A name holding a
    newline, which `.` and `$` treat apart, is not grouped: shown whole.)"""
    import itertools
    import re

    from ckptstat.render import _group

    rx = re.compile(r"^(.*?\[[^\]]*\])\.(.*)$")
    for n in range(8):
        for chars in itertools.product("a[].", repeat=n):
            s = "".join(chars)
            m = rx.match(s)
            assert _group(s) == ((m.group(1), m.group(2)) if m else None), s
    assert _group("encoder.layer[12].attention.self.query") == ("encoder.layer[12]", "attention.self.query")
    assert _group("a[1].b\n") is None
    assert _group("[" * 1_000_000) is None and _group("[" * 500_000 + "].x") == ("[" * 500_000 + "]", "x")


def test_diff_heatmap_column_of_a_hostile_name_is_linear():
    """Escaped before: `module_in_layer` searched `(?:^|[._])1\\.(.+)$` without DOTALL: in a name `_1._1._1...`
    that ends in a newline, `.+$` failed from every start (20,000 repeats: 3.7 CPU s; a 1 MB name: minutes).
    Now the first start that fits is the match; real names give the same column."""
    from ckptstat.analysis.diff import module_in_layer

    assert module_in_layer("encoder.layer.3.attention.self.query.weight", 3) == "attention.self.query"
    assert module_in_layer("model.layers.1.mlp.experts.7.w1.weight", 1) == "mlp.experts.*.w1"
    name = "_1." * 300_000 + "\nX"
    assert module_in_layer(name, 1).startswith("_1._1.")


# ---------------------------------------------------------------------------------------------- names the census trips on
NAME_CASES = {
    # summary's module tree recursed once per part: RecursionError, "internal error"
    "5,000 parts": ("h.0." * 5000 + "weight", 0),
    # summary grouped numbered parts with int(): "²".isdigit() is True, int("²") raises ValueError
    "superscript part": ("model.\u00b2.weight", 0),
    # diff's natural sort and summary's numbered parts: int() of 20,000 digits raises ValueError
    "20,000 digits": ("0" * 20_000, 0),
    # the layer index itself past int()'s limit: now the file's error, one line
    "5,000-digit layer": ("model.layers." + "1" * 5000 + ".mlp.up_proj.weight", 1),
}


@pytest.mark.parametrize("case", sorted(NAME_CASES))
def test_hostile_names_never_reach_an_internal_error(cli, tmp_path, case):
    """Escaped before: each of these names made `summary` (and some `diff`, `tensors`...) end in `internal
    error: RecursionError / ValueError`. Now the tree stops at depth 64 (analysis/summary.py MAX_TREE_DEPTH),
    numbered parts are ASCII digits of at most 18, long digit runs sort by their text, and a layer index
    past int()'s limit is one line naming the file."""
    name, code = NAME_CASES[case]
    a, b = str(tmp_path / "a.safetensors"), str(tmp_path / "b.safetensors")
    save_file({name: np.ones((4, 4), np.float32), "model.layers.0.mlp.up_proj.weight": np.ones((4, 4), np.float32)}, a)
    save_file({name: np.zeros((4, 4), np.float32)}, b)
    for args in (("summary", a), ("summary", a, "--json"), ("tensors", a), ("ties", a), ("memory", a), ("stats", a),
                 ("diff", a, b), ("diff", a, b, "--format", "md")):
        rc, out, err = cli(*args)
        assert "internal error" not in err and "Traceback" not in err, (args, err)
        if code:
            expect = 2 if args[0] == "diff" else 1
            assert rc == expect and err.count("\n") == 1 and "a.safetensors" in err and "digits" in err, (args, err)
        else:
            assert rc in (0, 1) if args[0] == "diff" else rc in (0, 2), (args, rc, err)
    if case == "5,000 parts":
        rc, out, _ = cli("summary", a, "--json")
        depth, node = 0, {"children": json.loads(out)["modules"]}
        while node["children"]:
            node, depth = node["children"][0], depth + 1
        assert depth <= 64


def test_npz_scan_is_bounded_by_the_member_count(cli, tmp_path, monkeypatch):
    """An .npz listing more .npy members than the reader reads (numpy_npy.MAX_MEMBERS) is not walked member by
    member (a 28 MB central directory of 500,000 entries took 155 s and printed a note per member): UNKNOWN."""
    from ckptstat.analysis.scan import loaders as loader_scan

    monkeypatch.setattr(loader_scan, "MAX_MEMBERS", 2)
    np.savez(tmp_path / "many.npz", a=np.ones(2), b=np.ones(2), c=np.ones(2))
    rc, out, _ = cli("scan", str(tmp_path / "many.npz"), "--json")
    r = json.loads(out)
    assert rc == 1 and r["status"] == "unknown" and "3 members" in r["unknown"][0] and len(r["notes"]) <= 1


def test_saved_model_variables_never_read_outside(cli, tmp_path, opened):
    """Regression guard: a SavedModel whose variables/ folder, or one of its data shards, is a symlink out of
    the model's folder is refused before the bytes are read; a damaged saved_model.pb is one line."""
    from conftest import fixture

    src = fixture("tf-saved-model")
    secret = tmp_path / "secret"
    shutil.copytree(os.path.join(src, "variables"), secret)
    whole = tmp_path / "m"
    whole.mkdir()
    shutil.copy(os.path.join(src, "saved_model.pb"), whole)
    os.symlink(secret, whole / "variables")
    shard = tmp_path / "m2"
    (shard / "variables").mkdir(parents=True)
    shutil.copy(os.path.join(src, "saved_model.pb"), shard)
    for f in os.listdir(secret):
        if f.endswith(".index"):
            shutil.copy(secret / f, shard / "variables" / f)
        else:
            os.symlink(secret / f, shard / "variables" / f)
    damaged = tmp_path / "m3"
    shutil.copytree(src, damaged)
    (damaged / "saved_model.pb").write_bytes(b"\x12\xff\xff\xff\x0f" + b"\x00" * 100)
    opened.clear()
    for folder, what in ((whole, "outside the checkpoint"), (shard, "outside the checkpoint"), (damaged, "not a SavedModel")):
        for command in ("summary", "stats"):
            rc, out, err = cli(command, str(folder))
            _refused(rc, out, err, "m", what)
    assert not any(p.startswith(str(secret)) for p in opened), opened


def test_a_huge_tar_extended_header_is_refused_before_tarfile_parses_it(cli, tmp_path):
    """scan's torch.load trace opens every file that is no zip with tarfile, whose PAX parsing is quadratic before
    CPython 3.11.10 / 3.12.6 (CVE-2024-6232): a 256 KiB header of digits took 38 s, and the time grew with its square.
    An extended header over 8 KiB (core/tar.py MAX_TAR_EXTENDED) is now unknown before it is parsed."""
    import tarfile
    import time

    pax = b"1" * (256 << 10)
    info = tarfile.TarInfo("././@PaxHeader")
    info.type, info.size = tarfile.XHDTYPE, len(pax)
    path = tmp_path / "weights.bin"
    path.write_bytes(info.tobuf(tarfile.USTAR_FORMAT) + pax + bytes(1024))
    start = time.process_time()
    rc, out, _ = cli("scan", str(path), "--json")
    assert time.process_time() - start < 2
    r = json.loads(out)
    assert rc == 1 and r["status"] == "unknown" and "extended header of 262,144 bytes" in r["verdict"], r["verdict"]


def test_a_string_attribute_claiming_gigabytes_is_refused_in_bounded_memory(tmp_path):
    """A Keras .h5 (the corpus' TF BERT, 115 KB) whose `weight_names` strings claim 2 GiB in the global heap, which
    h5py does not show: libhdf5 allocates the claim before it finds the bytes missing, so reading the attribute touched
    4 GB. h5py itself cannot read it in 512 MiB (the oracle: a child process bounded so); ckptstat refuses it in one
    line, its peak RSS far below the claim (keras_h5.attribute under core/allocations.bounded)."""
    import subprocess
    import sys

    b = bytearray(open(os.path.join(os.path.dirname(__file__), "..", "fixtures", "keras-corpus", "hf-tf-bert-mlm",
                                    "tf_model.h5"), "rb").read())
    b[7027:7035] = (2**63 - 1).to_bytes(8, "little")
    b[99329:99333] = (2**31 - 1).to_bytes(4, "little")
    path = tmp_path / "bomb.h5"
    path.write_bytes(bytes(b))
    h5py_alone = ("import resource, h5py, sys; resource.setrlimit(resource.RLIMIT_AS, (512 << 20, -1)); "
                  "f = h5py.File(sys.argv[1], 'r');\ntry: f['bert'].attrs['weight_names']\n"
                  "except OSError as e: print(e)")
    out = subprocess.run([sys.executable, "-c", h5py_alone, str(path)], capture_output=True, text=True).stdout
    assert "memory allocation failed" in out
    # the command, its peak resident memory read from its own /proc (VmHWM: reset at exec, unlike ru_maxrss, which
    # keeps the peak of the process it was forked from: a test worker's) as it exits
    peak = ("import atexit, sys\n"
            "atexit.register(lambda: print(open('/proc/self/status').read().split('VmHWM:')[1].split()[0]))\n"
            "from ckptstat.__main__ import run\nrun()")
    p = subprocess.run([sys.executable, "-c", peak, "summary", str(path)], capture_output=True, text=True)
    assert p.returncode == 1 and p.stderr.count("\n") == 1 and "Traceback" not in p.stderr
    assert str(path) in p.stderr and "claims strings of more than" in p.stderr
    assert int(p.stdout.split()[-1]) < 1 << 20   # KiB: under 1 GiB (4 GB before)
