"""Issue 14, one behaviour at a time (docs/security.md): what is read (containment, --allow-external,
non-regular files), what is written (outputs never over an input, written beside and renamed), and the
bounds that need a specific check beyond the hostile corpus (tests/test_hostile_corpus.py)."""
from __future__ import annotations

import io
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import time
import warnings
import zipfile

import h5py
import numpy as np
import pytest
from conftest import FIXTURES, fixture

from ckptstat import CheckpointError, CorruptCheckpointError, UsageError, open_checkpoint, summarize
from ckptstat.core import files, limits
from ckptstat.core.switches import switches
from ckptstat.errors import ExternalReferenceError, as_checkpoint_error

SECRET = np.arange(16, dtype="<f4")


def _st(path, n: int = 4) -> str:
    from safetensors.numpy import save_file

    save_file({"w": np.ones(n, "<f4")}, str(path))
    return str(path)


# ---------------------------------------------------------------------------------------------- reading
def test_hdf5_external_storage_refused_then_allowed(tmp_path):
    (tmp_path / "raw.bin").write_bytes(SECRET.tobytes())
    p = tmp_path / "ext.h5"
    with h5py.File(p, "w") as f:
        f.create_dataset("w", shape=(16,), dtype="<f4", external=[("raw.bin", 0, 64)])
    with pytest.raises(ExternalReferenceError, match="external file.*raw.bin.*--allow-external"):
        open_checkpoint(p)
    cwd = os.getcwd()
    os.chdir(tmp_path)   # HDF5 looks for relative external files from the working folder
    try:
        ckpt = open_checkpoint(p, allow_external=True)
        assert ckpt["w"].offset is None and ckpt.read("w").tolist() == SECRET.tolist()
    finally:
        os.chdir(cwd)


def test_hdf5_external_link_is_read_from_the_linked_file_when_allowed(tmp_path):
    with h5py.File(tmp_path / "other.h5", "w") as o:
        o.create_dataset("pad", data=np.zeros(1000, "f4"))   # the linked dataset's offset differs from any here
        o.create_dataset("kernel", data=SECRET)
    p = tmp_path / "model.h5"
    with h5py.File(p, "w") as f:
        g = f.create_group("dense")
        g["kernel:0"] = h5py.ExternalLink("other.h5", "/kernel")
        g.attrs["weight_names"] = [b"kernel:0"]
        f.attrs["layer_names"] = [b"dense"]
    with pytest.raises(ExternalReferenceError, match="external link"):
        open_checkpoint(p)
    ckpt = open_checkpoint(p, allow_external=True)
    assert ckpt.read("kernel:0").tolist() == SECRET.tolist()   # not the bytes at that offset of model.h5


def test_hdf5_soft_link_through_an_external_link_refused(tmp_path):
    with h5py.File(tmp_path / "other.h5", "w") as o:
        o.create_dataset("kernel", data=SECRET)
    p = tmp_path / "model.h5"
    with h5py.File(p, "w") as f:
        f["hidden"] = h5py.ExternalLink("other.h5", "/kernel")
        g = f.create_group("dense")
        g["kernel:0"] = h5py.SoftLink("/hidden")
        g.attrs["weight_names"] = [b"kernel:0"]
        f.attrs["layer_names"] = [b"dense"]
    with pytest.raises(ExternalReferenceError):
        open_checkpoint(p)


def test_hdf5_virtual_dataset_refused(tmp_path):
    with h5py.File(tmp_path / "src.h5", "w") as s:
        s.create_dataset("s", data=SECRET)
    p = tmp_path / "vds.h5"
    with h5py.File(p, "w") as f:
        layout = h5py.VirtualLayout(shape=(16,), dtype="<f4")
        layout[:] = h5py.VirtualSource(str(tmp_path / "src.h5"), "s", shape=(16,))
        f.create_virtual_dataset("w", layout)
    with pytest.raises(ExternalReferenceError, match="virtual dataset"):
        open_checkpoint(p)
    assert open_checkpoint(p, allow_external=True).read("w").tolist() == SECRET.tolist()


def _tf_copy(dst) -> str:
    src = os.path.dirname(os.path.join(FIXTURES, "tf1-bert", "model.ckpt-0"))
    shutil.copytree(src, dst)
    return str(dst)


def test_tf_pointer_prefers_the_copy_in_the_folder(tmp_path):
    """A copied run whose `checkpoint` names the original's absolute path reads its own weights."""
    original = _tf_copy(tmp_path / "original")
    copy = _tf_copy(tmp_path / "copy")
    (tmp_path / "copy" / "checkpoint").write_text(f'model_checkpoint_path: "{original}/model.ckpt-0"\n')
    ckpt = open_checkpoint(copy)
    assert all(os.path.dirname(f) == copy for f in ckpt.files), ckpt.files


def test_tf_pointer_outside_refused_unless_allowed(tmp_path):
    original = _tf_copy(tmp_path / "original")
    (tmp_path / "pointer").mkdir()
    (tmp_path / "pointer" / "checkpoint").write_text(f'model_checkpoint_path: "{original}/model.ckpt-0"\n')
    with pytest.raises(ExternalReferenceError, match="model_checkpoint_path"):
        open_checkpoint(tmp_path / "pointer")
    (tmp_path / "pointer" / "checkpoint").write_text('model_checkpoint_path: "../original/model.ckpt-0"\n')
    with pytest.raises(ExternalReferenceError):
        open_checkpoint(tmp_path / "pointer")
    assert len(open_checkpoint(tmp_path / "pointer", allow_external=True)) == 46


def test_symlinks_out_of_the_folder(tmp_path, cli):
    (tmp_path / "elsewhere").mkdir()
    target = _st(tmp_path / "elsewhere" / "model.safetensors")
    (tmp_path / "model").mkdir()
    os.symlink(target, tmp_path / "model" / "model.safetensors")
    with pytest.raises(ExternalReferenceError, match="symlink"):
        open_checkpoint(tmp_path / "model")
    assert len(open_checkpoint(tmp_path / "model", allow_external=True)) == 1
    assert len(open_checkpoint(tmp_path / "model" / "model.safetensors")) == 1   # a file the user named: read
    rc, _, err = cli(str(tmp_path / "model"))
    assert rc == 1 and err.count("\n") == 1 and "--allow-external" in err
    rc, out, err = cli(str(tmp_path / "model"), "--allow-external")
    assert rc == 0 and err == "", err
    rc, _, _ = cli("--allow-external", "tensors", str(tmp_path / "model"))
    assert rc == 0
    # the process default is back after each in-process run
    assert switches().allow_external is False


def test_symlinks_inside_the_folder_and_hf_cache_layout(tmp_path):
    """A symlink that stays inside the folder is fine; so is the Hugging Face cache's snapshot -> blobs."""
    (tmp_path / "m").mkdir()
    _st(tmp_path / "m" / "real.safetensors")
    os.symlink("real.safetensors", tmp_path / "m" / "model.safetensors")
    assert len(open_checkpoint(tmp_path / "m")) == 1
    repo = tmp_path / "models--org--name"
    (repo / "blobs").mkdir(parents=True)
    (repo / "snapshots" / "abc123").mkdir(parents=True)
    _st(repo / "blobs" / "0f0f")
    os.symlink("../../blobs/0f0f", repo / "snapshots" / "abc123" / "model.safetensors")
    (repo / "blobs" / "c0c0").write_text(json.dumps({"model_type": "bert"}))
    os.symlink("../../blobs/c0c0", repo / "snapshots" / "abc123" / "config.json")
    ckpt = open_checkpoint(repo / "snapshots" / "abc123")
    assert len(ckpt) == 1 and ckpt.config == {"model_type": "bert"}


def test_index_shard_symlinked_out_and_config_symlinked_out(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "m").mkdir()
    os.symlink(_st(tmp_path / "out" / "a.safetensors"), tmp_path / "m" / "a.safetensors")
    (tmp_path / "m" / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"w": "a.safetensors"}}))
    with pytest.raises(ExternalReferenceError, match="shard"):
        open_checkpoint(tmp_path / "m")
    (tmp_path / "c").mkdir()
    _st(tmp_path / "c" / "model.safetensors")
    (tmp_path / "out" / "config.json").write_text("{}")
    os.symlink(tmp_path / "out" / "config.json", tmp_path / "c" / "config.json")
    with pytest.raises(ExternalReferenceError, match="config"):
        open_checkpoint(tmp_path / "c")
    assert open_checkpoint(tmp_path / "c", config=tmp_path / "out" / "config.json").config == {}  # named: read


@pytest.mark.parametrize("kind", ["fifo", "folder", "device"])
def test_not_a_regular_file_refused_without_blocking(tmp_path, kind):
    if kind == "fifo":
        p = tmp_path / "model.safetensors"
        os.mkfifo(p)
        what = "FIFO"
    elif kind == "folder":
        (tmp_path / "a.safetensors").mkdir()
        (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"w": "a.safetensors"}}))
        p, what = tmp_path, "folder"
    else:
        p, what = "/dev/null", "character device"
    t = time.monotonic()
    with pytest.raises(CheckpointError, match=what):
        open_checkpoint(p)
    assert time.monotonic() - t < 5


def test_config_must_be_a_small_regular_file(tmp_path):
    p = _st(tmp_path / "model.safetensors")
    with pytest.raises(CheckpointError, match="character device"):
        open_checkpoint(p, config="/dev/zero")
    big = tmp_path / "big.json"
    big.write_text('{"a": "' + "x" * 200 + '"}')
    old = limits.set_limits(config_bytes=100)
    try:
        with pytest.raises(CheckpointError, match="more than the 100"):
            open_checkpoint(p, config=big)
    finally:
        limits.reset(old)


def test_messages_never_echo_raw_bytes():
    e = as_checkpoint_error("f", KeyError("\x1b[31m" + "k" * 10_000))
    assert "\x1b" not in str(e) and len(str(e)) < 300 and "\\x1b" in str(e)


# ---------------------------------------------------------------------------------------------- writing
def _plot(cli, src: str, out: str, *extra: str):
    return cli("plot", src, "-o", out, *extra)


def test_plot_over_its_input_refused(cli, tmp_path):
    src = _st(tmp_path / "model.safetensors", 64)
    before = open(src, "rb").read()
    png = _st(tmp_path / "weights.png", 64)     # read by its bytes, whatever its name
    rc, _, err = _plot(cli, png, png)
    assert rc == 2 and "is an input" in err and err.count("\n") == 1
    os.symlink(src, tmp_path / "link.png")
    rc, _, err = _plot(cli, src, str(tmp_path / "link.png"))
    assert rc == 2 and "is an input" in err
    os.link(src, tmp_path / "hard.png")
    rc, _, err = _plot(cli, src, str(tmp_path / "hard.png"))
    assert rc == 2 and "is an input" in err
    ckpt = open_checkpoint(tmp_path, allow_external=False)   # the folder: its weights are inputs
    with pytest.raises(UsageError, match="is an input"):
        files.check_output(src, [str(tmp_path), *ckpt.files])
    assert open(src, "rb").read() == before


def test_plot_replaces_a_planted_symlink_never_writes_through_it(cli, tmp_path):
    src = _st(tmp_path / "model.safetensors", 64)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    os.symlink(victim, tmp_path / "out.png")
    rc, _, err = _plot(cli, src, str(tmp_path / "out.png"))
    assert rc == 0, err
    assert victim.read_text() == "precious"
    assert not os.path.islink(tmp_path / "out.png") and open(tmp_path / "out.png", "rb").read(4) == b"\x89PNG"
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".")]   # the temporary file was renamed


def test_plot_into_a_missing_folder_is_one_clean_line(cli, tmp_path):
    src = _st(tmp_path / "model.safetensors", 64)
    rc, out, err = _plot(cli, src, str(tmp_path / "no" / "such" / "out.png"))
    assert rc == 2 and out == "" and err.count("\n") == 1 and "does not exist" in err and "Traceback" not in err


def test_atomic_output_leaves_nothing_on_failure(tmp_path):
    target = tmp_path / "out.png"
    with pytest.raises(RuntimeError), files.atomic_output(target) as tmp:
        open(tmp, "wb").write(b"half")
        raise RuntimeError("boom")
    assert os.listdir(tmp_path) == []
    with files.atomic_output(target) as tmp:
        open(tmp, "wb").write(b"whole")
    assert target.read_bytes() == b"whole" and (os.stat(target).st_mode & 0o777) == 0o666 & ~files._umask()


def test_check_output_refuses_a_folder(tmp_path):
    with pytest.raises(UsageError, match="is a folder"):
        files.check_output(tmp_path, [])


# ---------------------------------------------------------------------------------------------- bounds
def test_gguf_truncated_while_it_is_parsed(tmp_path):
    """No memory map: a file shorter than its size at open ends in an error, never SIGBUS."""
    from test_gguf import gguf_bytes, kv_str

    from ckptstat.formats import gguf

    p = tmp_path / "x.gguf"
    data = gguf_bytes(kvs=[kv_str("general.name", "x" * (3 << 20))])
    p.write_bytes(data[: len(data) // 2])
    with open(p, "rb") as f, pytest.raises(CorruptCheckpointError, match="truncated while being read|file has"):
        gguf._parse(str(p), f, len(data))   # the size it had when it was stat'ed
    code = ("import mmap,sys\nfrom ckptstat.formats import gguf\nassert gguf.__dict__.get('mmap') is None")
    assert subprocess.run([sys.executable, "-c", code], cwd=os.path.dirname(FIXTURES)).returncode == 0


def test_gguf_long_string_value_summarised(tmp_path):
    from test_gguf import gguf_bytes, kv_str

    p = tmp_path / "x.gguf"
    p.write_bytes(gguf_bytes(kvs=[kv_str("general.name", "x" * (2 << 20)), kv_str("b", "short")]))
    ckpt = open_checkpoint(p)
    assert ckpt.metadata == {"general.name": "<string of 2,097,152 bytes>", "b": "short"}


def test_tf_partitions_that_repeat_or_leave_gaps(tmp_path):
    from test_hostile_corpus import _partitioned

    with pytest.raises(CorruptCheckpointError, match="overlap"):
        open_checkpoint(_partitioned(tmp_path / "dup", [(0, 2), (0, 2)]))
    with pytest.raises(CorruptCheckpointError, match="overlap"):
        open_checkpoint(_partitioned(tmp_path / "gap", [(0, 3), (2, 1)]))
    ok = open_checkpoint(_partitioned(tmp_path / "ok", [(2, 2), (0, 2)]))
    assert ok.read("w").shape == (4, 2)


def test_tf_object_graph_chain_is_linear(tmp_path):
    from test_hostile_corpus import _object_graph_chain

    from ckptstat.formats.tf_bundle.graph import model_paths, object_graph

    t = time.process_time()
    nodes = object_graph(_object_graph_chain(50_000))
    assert list(model_paths(nodes)) == []          # the key lies deeper than tf_graph_depth
    nodes = object_graph(_object_graph_chain(500))
    assert list(model_paths(nodes)) == [("optimizer/x/.ATTRIBUTES/VARIABLE_VALUE", "/".join(["c"] * 499)
                                         + "/.ATTRIBUTES/VARIABLE_VALUE")]
    assert time.process_time() - t < 5


def test_tensor_info_refuses_int64_overflow():
    from ckptstat.core import TensorInfo

    with pytest.raises(CorruptCheckpointError, match="int64"):
        TensorInfo("w", "F32", (2**40, 2**40), "f", 0, 0)
    with pytest.raises(CorruptCheckpointError, match="larger than 2"):
        TensorInfo("w", "F32", (2**70,), "f", 0, 0)


def test_expansion_limit_is_raisable(tmp_path, cli):
    torch = pytest.importorskip("torch")
    p = tmp_path / "e.pt"
    torch.save({"w": torch.ones(1).expand(100_000_000)}, p)   # 400 MB of values from 4 stored bytes
    rc, _, err = cli("stats", str(p))
    assert rc == 1 and "stores 4" in err and "--limit expansion" in err
    rc, out, err = cli("stats", str(p), "--limit", "expansion_floor=1000000000", "--json")
    assert rc == 0, err
    assert json.loads(out)["tensors"][0]["mean"] == 1.0
    assert limits.limits() == limits.Limits()


def test_pickle_build_budget(tmp_path):
    from test_hostile_corpus import _bytearray_bomb, _pickle_zip

    with pytest.raises(CorruptCheckpointError, match="build more than"):
        open_checkpoint(_pickle_zip(tmp_path / "b.pt", _bytearray_bomb()))


def test_zip_decompression_ratio(tmp_path):
    from test_hostile_corpus import _deflate_bomb, _raw_deflate_zip

    deflated, size = _deflate_bomb()
    with pytest.raises(CorruptCheckpointError, match="more than 64:1"):
        open_checkpoint(_raw_deflate_zip(tmp_path / "bomb.pt", "archive/data.pkl", deflated, size))


def test_duplicate_zip_members_read_as_torch_reads_them(tmp_path):
    torch = pytest.importorskip("torch")
    a, b = io.BytesIO(), io.BytesIO()
    torch.save({"a": torch.ones(2)}, a)
    torch.save({"b": torch.zeros(3)}, b)
    za, zb = zipfile.ZipFile(a), zipfile.ZipFile(b)
    p = tmp_path / "dup.pt"
    with zipfile.ZipFile(p, "w") as z, warnings.catch_warnings():
        warnings.simplefilter("ignore")    # zipfile warns about the duplicate names
        for n in za.namelist():
            z.writestr(n, za.read(n))
        for n in zb.namelist():
            if n.endswith(("data.pkl", "/data/0")):
                z.writestr(n, zb.read(n))
    want = torch.load(p, weights_only=True)
    ckpt = open_checkpoint(p)
    assert {t.name: list(t.shape) for t in ckpt} == {k: list(v.shape) for k, v in want.items()}
    assert [ckpt.read(n).tolist() for n in ckpt.tensors] == [v.tolist() for v in want.values()]


def test_killed_stats_worker_ends_the_run_with_one_line(tmp_path):
    from safetensors.numpy import save_file

    p = tmp_path / "big.safetensors"
    # float64 in 4 KiB chunks goes through the chunk accumulator: seconds of work, so the workers are still
    # running when one is killed (F32's kernel reads 512 KiB at a time and ends this file in under a second)
    save_file({f"layer.{i}.weight": np.ones((1024, 1024), "f8") for i in range(24)}, str(p))
    proc = subprocess.Popen([sys.executable, "-m", "ckptstat", "stats", str(p), "--workers", "2", "--chunk-bytes", "4096"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=os.path.dirname(FIXTURES))
    kids: list[str] = []
    deadline = time.monotonic() + 60
    while len(kids) < 2 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
        kids = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()
    if proc.poll() is not None:
        pytest.skip("the run finished before a worker could be killed")
    time.sleep(0.5)
    os.kill(int(kids[0]), signal.SIGKILL)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err
    assert err.decode().count("\n") == 1 and "worker process died" in err.decode(), err


def test_a_valid_safetensors_with_200000_tensors_summarises(tmp_path):
    """Not hostile, only big: it must summarise (its speed is the performance issue's)."""
    n = 200_000
    header = {f"model.layers.{i // 10}.mlp.w{i % 10}.weight": {"dtype": "F32", "shape": [2], "data_offsets": [8 * i, 8 * i + 8]}
              for i in range(n)}
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    p = tmp_path / "model.safetensors"
    p.write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * (8 * n))
    r = summarize(str(p))
    assert r["parameters"]["tensors"] == n and r["parameters"]["unique"] == 2 * n
    assert fixture  # (conftest's helper, kept for symmetry with the other tests)
