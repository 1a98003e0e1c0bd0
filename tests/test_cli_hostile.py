"""Every CLI command on a hostile file of every format: exit 1, one line on stderr, no traceback (the
documented exit codes: 0 ok, 1 checkpoint problem, 2 usage); --debug shows the traceback. And names
that come from files (ANSI escapes, rich markup) are printed inert, in every format where one can
be crafted."""
from __future__ import annotations

import json
import os
import shutil
import struct
import zipfile

import h5py
import numpy as np
import pytest
import typer
from conftest import fixture
from test_gguf import gguf_bytes, kv_str, ti
from test_tf_bundle import entry, pb, table

from ckptstat.cli import app

COMMANDS = sorted(typer.main.get_command(app).commands)
# Commands whose one argument is a checkpoint; `run` also, but it needs torch + transformers and a
# config, and goes through the same open_checkpoint before building anything.
# audit turns an unreadable file into a record with its error, never the end of the run (tests/test_audit.py)
PATH_COMMANDS = [c for c in COMMANDS if c not in ("run", "audit")]
EVIL = "\x1b[31mred\x1b[0m[bold]x[/bold]\x07"


def _hostile_files(tmp) -> dict[str, str]:
    """One damaged file per format, each damaged where its reader must notice."""
    out = {}
    p = tmp / "bad.safetensors"
    p.write_bytes(struct.pack("<Q", 5) + b"{oops")
    out["safetensors"] = str(p)
    data = open(fixture("torch", "dtypes.pt"), "rb").read()
    p = tmp / "cut.pt"
    p.write_bytes(data[: len(data) // 2])
    out["torch-zip"] = str(p)
    data = open(fixture("torch", "dtypes-legacy.pt"), "rb").read()
    p = tmp / "cut-legacy.pt"
    p.write_bytes(data[:300])
    out["torch-legacy"] = str(p)
    os.makedirs(tmp / "tf")
    idx = bytearray(table([(b"", pb(1, 0, 1))]))
    idx[-1] ^= 0xFF
    (tmp / "tf" / "model.ckpt-1.index").write_bytes(bytes(idx))
    out["tf-bundle"] = str(tmp / "tf" / "model.ckpt-1.index")
    data = open(fixture("keras2", "weights.h5"), "rb").read()
    p = tmp / "cut.h5"
    p.write_bytes(data[: len(data) - 4000])
    out["keras-h5"] = str(p)
    data = bytearray(open(fixture("gguf", "llama-tiny-q.gguf"), "rb").read())
    struct.pack_into("<Q", data, 8, 2**64 - 1)     # tensor_count: far more than the file holds
    p = tmp / "huge-count.gguf"
    p.write_bytes(bytes(data))
    out["gguf"] = str(p)
    return out


@pytest.fixture(scope="module")
def hostile(tmp_path_factory) -> dict[str, str]:
    return _hostile_files(tmp_path_factory.mktemp("hostile"))


@pytest.mark.parametrize("fmt", ["safetensors", "torch-zip", "torch-legacy", "tf-bundle", "keras-h5", "gguf"])
@pytest.mark.parametrize("command", PATH_COMMANDS)
def test_every_command_on_a_hostile_file(cli, hostile, command, fmt, tmp_path):
    path = hostile[fmt]
    args = {"diff": [path, path], "trend": [path, fixture("bert-tiny")],
            "plot": [path, "-o", str(tmp_path / "out.png")]}.get(command, [path])
    before = sorted(os.listdir(os.path.dirname(path))), open(path, "rb").read()
    # diff answers as diff(1): 0 same, 1 different, 2 trouble; scan: 0 clean, 1 unsafe, 2 unreadable
    trouble = 2 if command in ("diff", "scan") else 1
    rc, out, err = cli(command, *args)
    assert rc == trouble, (rc, out, err)
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("ckptstat: error: ") and "Traceback" not in err, err
    assert os.path.basename(path) in err
    rc, out, err = cli(command, *args, "--json")
    assert rc == trouble and out == "" and err.count("\n") == 1
    assert not (tmp_path / "out.png").exists()  # no partial output
    rc, _, err = cli(command, *args, "--debug")
    assert rc == trouble and "Traceback (most recent call last)" in err
    assert err.rstrip().splitlines()[-1].startswith("ckptstat: error: ")
    assert (sorted(os.listdir(os.path.dirname(path))), open(path, "rb").read()) == before  # wrote nothing


def test_deep_ties_on_a_file_whose_values_are_damaged(cli, tmp_path):
    """Headers fine, values unreadable (a compressed storage record whose deflate stream is broken):
    `ties --deep` reads values, so the error comes from iter_chunks, after open_checkpoint."""
    src = fixture("torch", "bert-mlm", "pytorch_model.bin")   # many same-shape tensors: --deep hashes them
    p = tmp_path / "deflated.pt"
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(p, "w") as zout:
        for info in zin.infolist():
            ctype = zipfile.ZIP_DEFLATED if "/data/" in info.filename else zipfile.ZIP_STORED
            zout.writestr(info.filename, zin.read(info), compress_type=ctype)
    data = bytearray(p.read_bytes())
    with zipfile.ZipFile(p) as z:
        for info in z.infolist():
            if "/data/" in info.filename:
                start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
                data[start:start + info.compress_size] = b"\xff" * info.compress_size
    p.write_bytes(bytes(data))
    rc, out, err = cli("ties", str(p), "--deep")
    assert rc == 1 and err.count("\n") == 1 and "Traceback" not in err and "internal error" not in err, err


def test_usage_errors_exit_2(cli):
    for args in (["summary"], ["flops", fixture("bert-tiny"), "--batch", "0"], ["tensors", fixture("bert-tiny"), "--nope"],
                 ["no-such-command-or-file"]):
        rc, out, err = cli(*args)
        assert rc in (1, 2) and "Traceback" not in err
        assert err.count("\n") == 1 and err.startswith("ckptstat: "), err   # one line, as every other error
        if args[0] != "no-such-command-or-file":   # a lone word is read as a path: exit 1, no such file
            assert rc == 2, (args, rc, err)


# ---------------------------------------------------------------------------------------------- names
def _evil_safetensors(tmp) -> str:
    header = json.dumps({EVIL: {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}).encode()
    header += b" " * (-len(header) % 8)
    p = tmp / "evil.safetensors"
    p.write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 8)
    return str(p)


def _evil_torch(tmp) -> str:
    torch = pytest.importorskip("torch")
    p = tmp / "evil.pt"
    torch.save({EVIL: torch.ones(2), "ok.weight": torch.zeros(3)}, p)  # the real writer
    return str(p)


def _evil_h5(tmp) -> str:
    p = tmp / "evil.weights.h5"
    with h5py.File(p, "w") as f:                                   # HDF5 names may hold any byte but "/"
        f.create_dataset(f"layers/{EVIL}/vars/0", data=np.ones((2, 2), "f4"))
        f.attrs["keras_version"] = EVIL
    return str(p)


def _evil_tf(tmp) -> str:
    prefix = tmp / "model.ckpt-1"
    (tmp / "model.ckpt-1.index").write_bytes(table([(b"", pb(1, 0, 1)), (EVIL.encode(), entry(1, [2], 0, 8))]))
    (tmp / "model.ckpt-1.data-00000-of-00001").write_bytes(b"\0" * 8)
    return str(prefix)


def _evil_gguf(tmp) -> str:
    p = tmp / "evil.gguf"
    p.write_bytes(gguf_bytes(kvs=[kv_str("general.name", EVIL)], tis=[ti(EVIL, (4,))], data=b"\0" * 16))
    return str(p)


@pytest.mark.parametrize("make", [_evil_safetensors, _evil_torch, _evil_h5, _evil_tf, _evil_gguf],
                         ids=lambda f: f.__name__[6:])
def test_names_from_files_are_escaped(cli, tmp_path, monkeypatch, make):
    monkeypatch.setenv("COLUMNS", "200")
    path = make(tmp_path)
    for command in ("summary", "tensors", "ties", "memory", "flops"):
        rc, out, err = cli(command, path)
        assert "\x1b" not in out + err and "\x07" not in out + err, (command, out, err)
        assert rc in (0, 1, 2), (command, rc, err)   # memory/flops: 2 when no config names the family
        if command == "tensors":
            assert rc == 0 and "\\x1b[31mred" in out and "[bold]x[/bold]" in out, out
    rc, out, _ = cli("tensors", path, "--json")
    assert rc == 0 and any(t["name"].endswith(EVIL) or EVIL in t["name"] for t in json.loads(out)["tensors"])


def test_error_messages_escape_file_derived_names(cli, tmp_path):
    """A sharded index naming a missing shard with an escape sequence: the one error line shows it inert."""
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"a": "\x1b[31mred\x07.safetensors"}}))
    rc, out, err = cli(str(tmp_path))   # (no "/" in the name: that is refused earlier, with repr)
    assert rc == 1 and "\x1b" not in err and "\x07" not in err and "\\x1b[31mred" in err and err.count("\n") == 1


def test_scan_names_from_files_are_escaped(cli, tmp_path):
    pkl = b"\x80\x02c" + EVIL.replace("\x07", "").encode() + b"\nsystem\n)R."   # GLOBAL "<evil> system"
    p = tmp_path / "evil.pt"
    with zipfile.ZipFile(p, "w") as z:
        z.writestr("archive/data.pkl", pkl)
    rc, out, _ = cli("scan", str(p))
    assert rc == 1 and "\x1b" not in out and "UNSAFE" in out and "\\x1b[31mred" in out
    shutil.rmtree(tmp_path, ignore_errors=True)


# ---------------------------------------------------------------------------------------------- scan
SCAN_CASES = {
    # GLOBAL opcode, protocol 2
    "builtins.eval": (b"\x80\x02cbuiltins\neval\nX\x0a\x00\x00\x00__import__\x85R.", ["builtins.eval"]),
    # STACK_GLOBAL with both names memoized, then fetched back through BINGET for a second lookup
    "os.system via memo": (b"\x80\x04\x8c\x02os\x94\x8c\x06system\x94\x93\x94h\x00h\x01\x93\x85R.", ["os.system"]),
    # STACK_GLOBAL over a DUP of a string: the stack model follows it (system.system)
    "dup": (b"\x80\x04\x8c\x02os\x8c\x06system2\x93.", ["system.system"]),
    # STACK_GLOBAL over a value scan cannot follow (a call's result): reported unresolved, hence unsafe
    "unresolved": (b"\x80\x04\x8c\x02osctorch\nSize\n)R\x93.", ["<unresolved STACK_GLOBAL>"]),
    # an allowed rebuild function next to a forbidden one, nested in a dict
    "nested": (b"\x80\x02}(X\x01\x00\x00\x00actorch._utils\n_rebuild_tensor_v2\nX\x01\x00\x00\x00bcposix\nsystem\nu.",
               ["posix.system"]),
}


@pytest.mark.parametrize("case", sorted(SCAN_CASES))
def test_scan_names_hostile_globals_and_runs_nothing(cli, tmp_path, case):
    pkl, unsafe = SCAN_CASES[case]
    for name, blob in (("evil.pt", None), ("evil.pkl", pkl)):
        p = tmp_path / name
        if blob is None:
            with zipfile.ZipFile(p, "w") as z:
                z.writestr("archive/data.pkl", pkl)
        else:
            p.write_bytes(blob)
        before = sorted(os.listdir(tmp_path))
        rc, out, err = cli("scan", str(p), "--json")
        r = json.loads(out)
        assert rc == 1 and r["unsafe_globals"] == unsafe and r["would_run_code"], (case, r)
        if name == "evil.pt":   # opening it refuses the global by name; nothing ran
            rc, out, err = cli(str(p))
            assert rc == 1 and err.count("\n") == 1, err
            assert "outside torch's weights_only allowlist" in err or "malformed" in err, err
        assert sorted(os.listdir(tmp_path)) == before


@pytest.mark.parametrize("blob", [b"\x80\x02(X\x01\x00\x00", b"\x80\x02\xff\xfe", b"\x80" + b"\x00" * 40, b"\x80\x02]" * 3])
def test_scan_of_truncated_or_garbage_pickles(cli, tmp_path, blob):
    p = tmp_path / "bad.pkl"
    p.write_bytes(blob)
    rc, out, err = cli("scan", str(p))   # a pickle torch.load cannot read: a read error, exit 2
    assert rc == 2 and out == "" and err.count("\n") == 1 and "Traceback" not in err
    assert "torch.load raises at byte" in err and "bad.pkl" in err, err


def test_a_file_named_as_a_format_it_does_not_start_as(cli, tmp_path):
    """A reader chosen by the file's name alone is one whose files start as this one does: a text file named
    `.bin` / `.pt` is no damaged zip or pickle, a truncated `.keras` (a zip) no HDF5 file."""
    import zipfile
    text = b"not a checkpoint, a page saved under the wrong name\n"
    keras = tmp_path / "src.keras"
    with zipfile.ZipFile(keras, "w") as z:
        z.writestr("config.json", "{}" * 2000)
        z.writestr("model.weights.h5", b"\0" * 4096)
    cases = {"pytorch_model.bin": (text, "not a checkpoint format ckptstat reads (first bytes 6e 6f 74"),
             "model.pt": (text, "not a checkpoint format ckptstat reads"),
             "weights.npz": (text, "not a checkpoint format ckptstat reads"),
             "model.keras": (keras.read_bytes()[:3000], "damaged or truncated zip")}
    for name, (data, says) in cases.items():
        (tmp_path / name).write_bytes(data)
        rc, out, err = cli("summary", str(tmp_path / name))
        assert rc == 1 and out == "" and err.count("\n") == 1 and says in err, (name, err)


def test_a_config_json_that_is_no_file_is_said(cli, tmp_path):
    """A folder's config.json that is a folder or a FIFO: one line naming it (it was passed over in silence, and a
    FIFO's reader would wait forever), whatever the command reads it for."""
    import shutil
    src = os.path.join(os.path.dirname(__file__), "..", "fixtures", "gpt2-tiny", "model.safetensors")
    for kind in ("folder", "fifo"):
        folder = tmp_path / kind
        folder.mkdir()
        shutil.copy(src, folder / "model.safetensors")
        (folder / "config.json").mkdir() if kind == "folder" else os.mkfifo(folder / "config.json")
        for command in ("summary", "flops"):
            rc, out, err = cli(command, str(folder))
            assert rc != 0 and out == "" and err.count("\n") == 1 and "config.json" in err and "not a regular file" in err


def test_audit_of_a_fifo_or_a_device_says_what_it_is(cli, tmp_path):
    """`audit PATH` of a FIFO, a link to /dev/zero or a symlink loop: the record's error said "no such file or
    folder" of a path `ls` shows; it now says what the path is, as every other command does, without opening it."""
    os.mkfifo(tmp_path / "pipe.safetensors")
    os.symlink("/dev/zero", tmp_path / "zero.safetensors")
    os.symlink("loop.b", tmp_path / "loop.a")
    os.symlink("loop.a", tmp_path / "loop.b")
    for name, said in (("pipe.safetensors", "is a FIFO (named pipe), not a regular file"),
                       ("zero.safetensors", "is a character device, not a regular file")):
        out = tmp_path / f"{name}.jsonl"
        rc, _, err = cli("audit", str(tmp_path / name), "--out", str(out), "--json")
        (record,) = [json.loads(line) for line in out.read_text().splitlines()]
        assert rc == 1 and said in record["error"] and "no such file" not in record["error"], (err, record)
    # a root that resolves to nothing (a symlink loop, as a typo) is one line and no results file, as every command
    out = tmp_path / "loop.a.jsonl"
    rc, _, err = cli("audit", str(tmp_path / "loop.a"), "--out", str(out), "--json")
    assert rc == 1 and "symbolic links" in err and err.count("\n") == 1 and not out.exists(), err
