"""Every command on every hostile file (issue 14): built here with struct.pack or the real writers, in
a temporary folder, never committed.

Each run is a separate process (forked from tests/hostile_runner.py, which imports ckptstat once)
with its address space capped (RLIMIT_AS: its size after imports + 1 GiB), and 10 s of CPU time (plus
a 120 s wall-clock alarm for a blocked read) as the hang guard. Asserted for every run: the exit code
(1 a bad checkpoint, 2 usage; diff says trouble with 2), exactly one line on stderr when it fails and
none when it succeeds, no traceback, no internal error, peak RSS under 300 MB (ru_maxrss from
os.wait4, which includes the ~90 MB of imported libraries), and every input file unchanged (sha256 and
the folder listing, before and after).
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
import zipfile
import zlib
from dataclasses import dataclass, field

import h5py
import numpy as np
import pytest
from conftest import FIXTURES, fixture
from fuzz.layouts import safetensors_layout, zip_layout
from hostile_corpus_bounds import BOUNDS_CASE_NAMES, add_bounds_cases
from hostile_corpus_dcp import DCP_ZSTD_CASE_NAMES, add_dcp_zstd_cases
from hostile_corpus_formats import WAVE_CASE_NAMES, add_wave_cases
from hostile_corpus_polyglots import POLYGLOT_CASE_NAMES, add_polyglot_cases
from test_cli_hostile import _hostile_files
from test_gguf import gguf_bytes, kv, kv_str
from test_tf_bundle import block, entry, pb, table, trailer, varint

from ckptstat.formats.tf_bundle import MAGIC_BYTES, slice_key

RUNNER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hostile_runner.py")
MAX_RSS_MIB = 300
COMMANDS = ["summary", "tensors", "ties", "ties --deep", "diff", "flops", "memory", "stats", "plot", "scan"]
VALUE_COMMANDS = {"ties --deep", "stats", "plot"}
NO_FAMILY = 2   # flops on tensors no family matches, without a config: a usage error


@dataclass
class Case:
    """A hostile input. `kind`: "open" (refused when opened: 1 for every command, diff 2), "values"
    (headers read; commands that read values refuse: 1), "ok" (handled). `expect` overrides a command's
    exit code; `args` are extra options on every command; `why` is matched in the failing commands' line."""

    path: str
    kind: str
    why: str = ""
    expect: dict[str, int] = field(default_factory=dict)
    args: tuple[str, ...] = ()

    def says_why(self, command: str) -> bool:
        """Whether `command`'s failure is this case's own (its line must say `why`)."""
        if self.kind == "open":
            return command not in ("scan", "diff")
        return command in (VALUE_COMMANDS if self.kind == "values" else self.expect)

    def code(self, command: str) -> int | tuple[int, ...] | None:
        if command in self.expect:
            return self.expect[command]
        if command == "scan":
            return None          # scan's own verdicts: tests/test_scan_*.py
        if self.kind == "open":
            return 2 if command == "diff" else 1
        if command == "flops":
            return NO_FAMILY
        if command == "memory":
            return (0, 2)        # without an architecture: the weights' bytes alone, or a usage error
        if self.kind == "values" and command in VALUE_COMMANDS:
            return 1
        return 0


# ---------------------------------------------------------------------------------------------- builders
def _safetensors(path, tensors: dict[str, tuple[str, list[int], int]], pad: bytes = b"") -> str:
    header, off = {}, 0
    for name, (dtype, shape, nbytes) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + nbytes]}
        off += nbytes
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * off + pad)
    return str(path)


def _small_safetensors(path) -> str:
    return _safetensors(path, {"w": ("F32", [2, 2], 16)})


def _zip(path, members: list[tuple[str, bytes, int]]) -> str:
    with zipfile.ZipFile(path, "w") as z:
        for name, data, ctype in members:
            z.writestr(zipfile.ZipInfo(name), data, compress_type=ctype)
    return str(path)


def _torch_save(path, obj) -> str:
    torch = pytest.importorskip("torch")
    torch.save(obj, path)
    return str(path)


def _tf_bundle(folder, entries: list[tuple[bytes, bytes]], data: bytes, index: bytes | None = None) -> str:
    os.makedirs(folder, exist_ok=True)
    prefix = os.path.join(folder, "model.ckpt-1")
    with open(prefix + ".index", "wb") as f:
        f.write(index if index is not None else table(sorted(entries)))
    with open(prefix + ".data-00000-of-00001", "wb") as f:
        f.write(data)
    return prefix


def _object_graph_chain(n: int) -> bytes:
    """A TrackableObjectGraph whose nodes form one chain of n, the last holding an optimizer/ key."""
    nodes = []
    for i in range(n):
        child = pb(1, 2, pb(1, 0, i + 1) + pb(2, 2, b"c")) if i + 1 < n else b""
        attr = pb(2, 2, pb(3, 2, b"optimizer/x/.ATTRIBUTES/VARIABLE_VALUE")) if i == n - 1 else b""
        nodes.append(pb(1, 2, child + attr))
    graph = b"".join(nodes)
    return varint(len(graph)) + b"\0\0\0\0" + graph     # DT_STRING scalar: length, masked crc, bytes


def _repeated_block_index(entries: list[tuple[bytes, bytes]], times: int) -> bytes:
    """A table whose index block lists its one data block `times` times."""
    data = block(entries)
    out = trailer(data)
    handle = varint(0) + varint(len(data))
    index = block([(entries[-1][0] + bytes([i % 256]) * (i // 256 + 1), handle) for i in range(times)])
    ioff = len(out)
    out += trailer(index)
    meta = block([])
    moff = len(out)
    out += trailer(meta)
    footer = varint(moff) + varint(len(meta)) + varint(ioff) + varint(len(index))
    return out + footer.ljust(40, b"\x00") + MAGIC_BYTES


def _partitioned(folder, slices: list[tuple[int, int]]) -> str:
    """A [4, 2] F32 variable `w` partitioned along dimension 0 into `slices` (start, length)."""
    ext = b"".join(pb(7, 2, pb(1, 2, pb(1, 0, s) + pb(2, 0, n)) + pb(1, 2, b"")) for s, n in slices)
    full = pb(1, 0, 1) + pb(2, 2, pb(2, 2, pb(1, 0, 4)) + pb(2, 2, pb(1, 0, 2))) + ext
    entries = [(b"", pb(1, 0, 1)), (b"w", full)]
    offset = 0
    for s, n in dict.fromkeys(slices):
        entries.append((slice_key("w", ((s, n), (0, -1))), entry(1, [n, 2], offset, n * 8)))
        offset += n * 8
    return _tf_bundle(folder, entries, b"\0" * offset)


def _pickle_zip(path, pkl: bytes, compress: int = zipfile.ZIP_STORED) -> str:
    return _zip(path, [("archive/data.pkl", pkl, compress), ("archive/byteorder", b"little", zipfile.ZIP_STORED)])


def _bytearray_bomb() -> bytes:
    """A 60 KB bytearray, memoized, copied 60,000 times by bytearray() calls (3.6 GB of copies)."""
    n = 60_000
    p = bytearray(b"\x80\x05\x96" + struct.pack("<Q", n) + b"a" * n + b"\x94")
    p += b"\x8c\x08builtins\x94\x8c\x09bytearray\x94\x93\x94]"
    p += b"h\x03h\x00\x85Ra" * 60_000
    return bytes(p + b".")


def _deflate_bomb() -> tuple[bytes, int]:
    """data.pkl: 1 GiB of zeros inside a BINBYTES8, deflated to ~1 MB (1000:1). After a full flush a
    deflate stream refers to nothing before it, so one compressed 16 MiB block is repeated 64 times."""
    n, chunk = 1 << 30, 1 << 24
    head = b"\x80\x04\x8e" + struct.pack("<Q", n)
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    first = c.compress(head) + c.flush(zlib.Z_FULL_FLUSH)
    zeros = c.compress(b"\0" * chunk) + c.flush(zlib.Z_FULL_FLUSH)
    tail = c.compress(b".") + c.flush()
    return first + zeros * (n // chunk) + tail, n + len(head) + 1


def _raw_deflate_zip(path, name: str, deflated: bytes, size: int) -> str:
    """A zip with one deflated member whose compressed bytes are given (no recompression here)."""
    crc = 0   # wrong on purpose: a reader must refuse before decompressing 1 GB to find out
    nm = name.encode()
    local = struct.pack("<4s5H3L2H", b"PK\x03\x04", 20, 0, 8, 0, 0, crc, len(deflated), size, len(nm), 0) + nm
    cd = struct.pack("<4s6H3L5H2L", b"PK\x01\x02", 20, 20, 0, 8, 0, 0, crc, len(deflated), size, len(nm), 0, 0, 0, 0, 0, 0)
    cd += nm
    body = local + deflated
    end = struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, 1, 1, len(cd), len(body), 0)
    with open(path, "wb") as f:
        f.write(body + cd + end)
    return str(path)


def _h5(path, build, libver: str = "earliest") -> str:
    with h5py.File(path, "w", libver=libver) as f:
        build(f)
    return str(path)


def build_corpus(tmp) -> dict[str, Case]:
    cases: dict[str, Case] = {}
    outside = tmp / "outside"
    outside.mkdir()
    secret = np.arange(16, dtype="<f4")
    (outside / "secret.bin").write_bytes(secret.tobytes())
    _small_safetensors(outside / "model.safetensors")

    # --- the damaged file of every format from test_cli_hostile, and truncations at structural cuts
    (tmp / "damaged").mkdir()
    for fmt, path in _hostile_files(tmp / "damaged").items():
        cases[f"damaged {fmt}"] = Case(path, "open")
    data = open(fixture("bert-tiny", "model.safetensors"), "rb").read()
    cuts, _ = safetensors_layout(data)
    for cut in (cuts[1] - 3, cuts[len(cuts) // 2]):
        p = tmp / f"cut{cut}.safetensors"
        p.write_bytes(data[:cut])
        cases[f"safetensors cut at {cut}"] = Case(str(p), "open")
    data = open(fixture("torch", "dtypes.pt"), "rb").read()
    cuts, fields = zip_layout(data)
    p = tmp / "zip-field.pt"
    mutated = bytearray(data)
    off, width = fields[-3]      # the end record's central-directory size
    mutated[off:off + width] = b"\xff" * width
    p.write_bytes(bytes(mutated))
    cases["zip end record size field"] = Case(str(p), "open")

    # --- reads outside the target
    p = _h5(tmp / "h5-external-storage.h5",
            lambda f: f.create_dataset("w", shape=(16,), dtype="<f4", external=[(str(outside / "secret.bin"), 0, 64)]))
    cases["h5 external raw storage"] = Case(p, "open", "external file")

    def vds(f):
        with h5py.File(outside / "src.h5", "w") as src:
            src.create_dataset("s", data=secret)
        layout = h5py.VirtualLayout(shape=(16,), dtype="<f4")
        layout[:] = h5py.VirtualSource(str(outside / "src.h5"), "s", shape=(16,))
        f.create_virtual_dataset("w", layout)
    cases["h5 virtual dataset"] = Case(_h5(tmp / "h5-vds.h5", vds), "open", "virtual dataset")

    def ext_link(f):
        with h5py.File(outside / "linked.h5", "w") as other:
            other.create_dataset("kernel", data=secret)
        g = f.create_group("dense")
        g["kernel:0"] = h5py.ExternalLink(str(outside / "linked.h5"), "/kernel")
        g.attrs["weight_names"] = [b"kernel:0"]
        f.attrs["layer_names"] = [b"dense"]
    cases["h5 external link"] = Case(_h5(tmp / "h5-extlink.h5", ext_link), "open", "external link")

    folder = tmp / "tf-pointer"
    src = os.path.dirname(os.path.join(FIXTURES, "tf1-bert", "model.ckpt-0"))
    shutil.copytree(src, outside / "tf-run")
    folder.mkdir()
    (folder / "checkpoint").write_text(f'model_checkpoint_path: "{outside / "tf-run" / "model.ckpt-0"}"\n')
    cases["tf pointer outside"] = Case(str(folder), "open", "model_checkpoint_path")

    folder = tmp / "symlinked"
    folder.mkdir()
    os.symlink(outside / "model.safetensors", folder / "model.safetensors")
    cases["symlink out of the folder"] = Case(str(folder), "open", "symlink")

    folder = tmp / "shard-link"
    folder.mkdir()
    os.symlink(outside / "model.safetensors", folder / "a.safetensors")
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"w": "a.safetensors"}}))
    cases["index shard symlinked out"] = Case(str(folder), "open", "symlink")

    folder = tmp / "config-link"
    folder.mkdir()
    _small_safetensors(folder / "model.safetensors")
    (outside / "config.json").write_text(json.dumps({"model_type": "bert"}))
    os.symlink(outside / "config.json", folder / "config.json")
    cases["config symlinked out"] = Case(str(folder), "open", "config")

    # --- not a file
    folder = tmp / "fifo"
    folder.mkdir()
    os.mkfifo(folder / "model.safetensors")
    cases["FIFO named model.safetensors"] = Case(str(folder), "open", "FIFO")
    folder = tmp / "dir-shard"
    (folder / "a.safetensors").mkdir(parents=True)
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"w": "a.safetensors"}}))
    cases["index shard is a folder"] = Case(str(folder), "open", "folder")
    cases["config is /dev/zero"] = Case(_small_safetensors(tmp / "zero-config.safetensors"), "open", "character device",
                                        args=("--config", "/dev/zero"), expect={"diff": 0})

    # --- unbounded memory
    cases["pickle bytearray copies"] = Case(_pickle_zip(tmp / "bytearray.pt", _bytearray_bomb()), "open", "build more than")
    deflated, size = _deflate_bomb()
    cases["deflate bomb data.pkl"] = Case(_raw_deflate_zip(tmp / "bomb.pt", "archive/data.pkl", deflated, size), "open",
                                          "compressed")
    pkl = b"\x80\x04\x8e" + struct.pack("<Q", 2**62) + b"x" * 100 + b"."
    cases["BINBYTES8 claims 2^62"] = Case(_pickle_zip(tmp / "binbytes8.pt", pkl), "open")
    pkl = b"\x80\x05\x96" + struct.pack("<Q", 2**40) + b"."
    cases["BYTEARRAY8 claims 2^40"] = Case(_pickle_zip(tmp / "bytearray8.pt", pkl), "open")

    graph = _object_graph_chain(20_000)
    entries = [(b"", pb(1, 0, 1)), (b"_CHECKPOINTABLE_OBJECT_GRAPH", entry(7, [], 0, len(graph)))]
    prefix = _tf_bundle(tmp / "tf-chain", entries, graph)
    cases["tf object graph chain"] = Case(prefix, "ok", expect={"stats": 1, "plot": 1})   # no numeric tensor

    entries = [(b"", pb(1, 0, 1)), (b"w", entry(1, [2], 0, 8))]
    prefix = _tf_bundle(tmp / "tf-repeat", entries, b"\0" * 8, index=_repeated_block_index(entries, 50_000))
    cases["tf index repeats one block"] = Case(prefix, "open", "overlaps or repeats")
    cases["tf partition listed twice"] = Case(_partitioned(tmp / "tf-part-dup", [(0, 2), (0, 2)]), "open", "overlap")
    cases["tf partitions overlap, leave a gap"] = Case(_partitioned(tmp / "tf-part-gap", [(0, 3), (2, 1)]), "open")

    p = tmp / "gguf-keys.gguf"
    p.write_bytes(gguf_bytes(kvs=[kv(f"k{i}", 4, b"\0" * 4) for i in range(70_000)]))
    cases["gguf 70,000 metadata keys"] = Case(str(p), "open", "metadata keys")
    p = tmp / "gguf-tensors.gguf"
    p.write_bytes(gguf_bytes(n_tensors=1_000_000))
    cases["gguf claims 1M tensors"] = Case(str(p), "open", "tensors")
    p = tmp / "gguf-name.gguf"
    p.write_bytes(gguf_bytes(kvs=[struct.pack("<Q", 1 << 20) + b"k" * (1 << 20) + struct.pack("<I", 4) + b"\0" * 4]))
    cases["gguf 1 MiB key name"] = Case(str(p), "open", "longer than")
    p = tmp / "gguf-string.gguf"
    p.write_bytes(gguf_bytes(kvs=[kv_str("general.name", "x" * (2 << 20))]))
    cases["gguf 2 MiB string value"] = Case(str(p), "ok")     # kept as "<string of N bytes>"

    def sparse(f):
        for name in ("w", "v"):
            f.create_dataset(name, shape=(1 << 30, 1 << 30), dtype="<f4", chunks=(64, 64))
    cases["h5 sparse 2^30 x 2^30"] = Case(_h5(tmp / "sparse.h5", sparse), "values", "stores")
    cases["h5 2^40 x 2^40 overflows int64"] = Case(_h5(tmp / "overflow.h5", lambda f: f.create_dataset(
        "w", shape=(1 << 40, 1 << 40), dtype="<f4", chunks=(64, 64))), "open", "int64")

    def big_attr(f):
        f.attrs.create("layer_names", np.full(1_100_000, b"d", dtype="S1"))
    cases["h5 1.1M-item layer_names"] = Case(_h5(tmp / "attr.h5", big_attr, "latest"), "open", "items")

    p = tmp / "st-overflow.safetensors"
    cases["safetensors dims overflow"] = Case(_safetensors(p, {"w": ("F32", [2**40, 2**40], 0)}), "open", "overflow")
    p = tmp / "st-offsets.safetensors"
    raw = json.dumps({"w": {"dtype": "F32", "shape": [1], "data_offsets": list(range(200_000))}}).encode()
    p.write_bytes(struct.pack("<Q", len(raw)) + raw)
    cases["safetensors 200,000 data_offsets"] = Case(str(p), "open", "data_offsets")
    p = tmp / "st-longname.safetensors"
    raw = json.dumps({"\x1b[31m" + "n" * (1 << 20): {"dtype": "X" * 100_000, "shape": [1], "data_offsets": [0, 4]}})
    p.write_bytes(struct.pack("<Q", len(raw)) + raw.encode() + b"\0" * 4)
    cases["safetensors 1 MB name, bad dtype"] = Case(str(p), "open")

    # --- views that repeat stored bytes
    torch = pytest.importorskip("torch")
    # (two of each, of one shape: `ties --deep` compares same-shape tensors by their values)
    cases["torch stride-0 view, 2^40 elements"] = Case(_torch_save(tmp / "expand.pt", {
        "w": torch.zeros(1).expand(2**40), "v": torch.ones(1).expand(2**40)}), "values", "stores")
    cases["torch stride-0 view, 2^30 x 2^30"] = Case(_torch_save(tmp / "expand2d.pt", {
        "w": torch.zeros(1, 1).expand(2**30, 2**30), "v": torch.ones(1, 1).expand(2**30, 2**30)}), "values", "stores")
    base = torch.zeros(2 * 65536)
    cases["torch overlapping strides"] = Case(_torch_save(tmp / "overlap.pt", {
        "w": base.as_strided((65536, 65536), (1, 1)), "v": base[1:].as_strided((65536, 65536), (1, 1))}), "values",
        "stores")
    cases["torch pickle ends at a global"] = Case(_pickle_zip(tmp / "global-end.pt",
                                                              b"\x80\x02ctorch._utils\n_rebuild_tensor_v2\n."), "ok",
                                                 expect={"stats": 1, "plot": 1})   # no tensor

    # --- impossible configs (the analytic commands name the field; header-only ones still answer)
    for label, value in (("10^12 layers", 10**12), ("4200-digit layers", int("9" * 4200)), ("zero heads", 0),
                         ("negative heads", -4)):
        folder = tmp / f"config-{label.replace(' ', '-').replace('^', '')}"
        shutil.copytree(fixture("bert-tiny"), folder)
        cfg = json.loads((folder / "config.json").read_text())
        cfg["num_attention_heads" if "heads" in label else "num_hidden_layers"] = value
        (folder / "config.json").write_text(json.dumps(cfg))
        cases[f"config {label}"] = Case(str(folder), "ok", "num_", expect={"flops": 2})

    # --- writing: the plot's output is an input
    p = _small_safetensors(tmp / "plot-self.png")     # a checkpoint is recognised by its bytes, not its name
    cases["plot -o the input"] = Case(p, "ok", "is an input", expect={"plot": 2})
    add_wave_cases(tmp, cases, Case, outside)   # the third and fourth passes' file-shaped cases
    add_polyglot_cases(tmp, cases, Case, outside)   # the fifth's: polyglots, Hugging Face cache links
    add_bounds_cases(tmp, cases, Case)   # the fifth pass's names and bounds
    add_dcp_zstd_cases(tmp, cases, Case)   # DCP items through torch's ZStandard extension (issue 36)
    return cases


def _digest(paths: list[str]) -> dict[str, str]:
    out = {}
    for top in paths:
        folder = top if os.path.isdir(top) else os.path.dirname(top)
        for name in sorted(os.listdir(folder)):
            p = os.path.join(folder, name)
            if os.path.isfile(p) and not os.path.islink(p):
                with open(p, "rb") as f:
                    out[p] = hashlib.sha256(f.read()).hexdigest()
            else:
                out[p] = "link" if os.path.islink(p) else "other"
    return out


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hostile-corpus")
    (tmp / "corpus").mkdir()
    cases = build_corpus(tmp / "corpus")
    plots = tmp / "plots"
    logs = tmp / "logs"
    plots.mkdir()
    logs.mkdir()
    runs, index = [], {}
    for name, case in cases.items():
        for command in COMMANDS:
            argv = command.split() + [case.path]
            if command == "diff":
                argv.append(case.path)
            if command == "plot":
                out = case.path if name == "plot -o the input" else str(plots / f"{len(runs)}.png")
                argv += ["-o", out]
            if command not in ("diff", "scan"):   # the commands that take --config
                argv += list(case.args)
            rid = str(len(runs))
            runs.append({"id": rid, "argv": argv, "out": str(logs / f"{rid}.out"), "err": str(logs / f"{rid}.err")})
            index[rid] = (name, command)
    before = _digest([c.path for c in cases.values()] + [str(tmp / "corpus" / "outside")])
    proc = subprocess.run([sys.executable, RUNNER], input=json.dumps(runs), capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    after = _digest([c.path for c in cases.values()] + [str(tmp / "corpus" / "outside")])
    replies = {}
    for line in proc.stdout.splitlines():
        r = json.loads(line)
        name, command = index[r["id"]]
        run = runs[int(r["id"])]
        r["stdout"] = open(run["out"], encoding="utf-8", errors="replace").read()
        r["stderr"] = open(run["err"], encoding="utf-8", errors="replace").read()
        r["argv"] = run["argv"]
        replies[(name, command)] = r
    return {"cases": cases, "replies": replies, "before": before, "after": after, "plots": plots}


CASE_NAMES = [
    "damaged safetensors", "damaged torch-zip", "damaged torch-legacy", "damaged tf-bundle", "damaged keras-h5",
    "damaged gguf", "zip end record size field", "h5 external raw storage", "h5 virtual dataset", "h5 external link",
    "tf pointer outside", "symlink out of the folder", "index shard symlinked out", "config symlinked out",
    "FIFO named model.safetensors", "index shard is a folder", "config is /dev/zero", "pickle bytearray copies",
    "deflate bomb data.pkl", "BINBYTES8 claims 2^62", "BYTEARRAY8 claims 2^40", "tf object graph chain",
    "tf index repeats one block", "tf partition listed twice", "tf partitions overlap, leave a gap",
    "gguf 70,000 metadata keys", "gguf claims 1M tensors", "gguf 1 MiB key name", "gguf 2 MiB string value",
    "h5 sparse 2^30 x 2^30", "h5 2^40 x 2^40 overflows int64", "h5 1.1M-item layer_names", "safetensors dims overflow",
    "safetensors 200,000 data_offsets", "safetensors 1 MB name, bad dtype", "torch stride-0 view, 2^40 elements",
    "torch stride-0 view, 2^30 x 2^30", "torch overlapping strides", "torch pickle ends at a global",
    "config 10^12 layers", "config 4200-digit layers", "config zero heads", "config negative heads", "plot -o the input",
    *WAVE_CASE_NAMES, *POLYGLOT_CASE_NAMES, *BOUNDS_CASE_NAMES, *DCP_ZSTD_CASE_NAMES,
]


def test_the_corpus_is_complete(results):
    assert sorted(results["cases"]) == sorted(CASE_NAMES + [n for n in results["cases"] if n.startswith("safetensors cut")])


@pytest.mark.parametrize("name", CASE_NAMES)
def test_every_command(results, name):
    case = results["cases"][name]
    problems = []
    for command in COMMANDS:
        r = results["replies"][(name, command)]
        err, want = r["stderr"], case.code(command)
        lines = err.splitlines()
        label = (f"{command}: rc={r['rc']} signal={r['signal']} {r['cpu_s']} s cpu {r['maxrss_kib'] // 1024} MiB: "
                 f"{err[-400:]!r}")
        if r["signal"] is not None:
            problems.append(f"killed by signal {r['signal']} (SIGXCPU 24: 10 s of CPU; SIGALRM 14: blocked) -- {label}")
            continue
        if want is not None and r["rc"] not in (want if isinstance(want, tuple) else (want,)):
            problems.append(f"exit {r['rc']}, expected {want} -- {label}")
        if r["rc"] not in (0, 1, 2):
            problems.append(f"exit code outside 0/1/2 -- {label}")
        if "Traceback" in err or "internal error" in err:
            problems.append(f"traceback or internal error -- {label}")
        if r["rc"] == 0 and err:
            problems.append(f"succeeded but wrote to stderr -- {label}")
        if r["rc"] != 0 and command != "scan" and len(lines) != 1:
            problems.append(f"{len(lines)} lines on stderr, expected 1 -- {label}")
        if command == "scan" and len(lines) > 1:
            problems.append(f"{len(lines)} lines on stderr -- {label}")
        if r["maxrss_kib"] > MAX_RSS_MIB * 1024:
            problems.append(f"peak RSS {r['maxrss_kib'] // 1024} MiB > {MAX_RSS_MIB} -- {label}")
        if case.why and r["rc"] and r["rc"] == want and case.says_why(command) and case.why.lower() not in err.lower():
            problems.append(f"the line does not say {case.why!r} -- {label}")
        if any(c in err + r["stdout"] for c in "\x1b\u202e\u2066\u2028\u2029"):
            problems.append(f"a raw escape byte, bidi override or line separator reached the terminal -- {label}")
    assert not problems, f"{name}:\n" + "\n".join(problems)


def test_inputs_unchanged_and_no_partial_plots(results):
    assert results["before"] == results["after"]
    written = sorted(os.listdir(results["plots"]))
    ok = {str(results["plots"] / w) for w in written}
    for (name, command), r in results["replies"].items():
        if command == "plot":
            out = r["argv"][r["argv"].index("-o") + 1]
            if r["rc"] != 0:
                assert out not in ok, (name, "a failed plot left a file")
    assert not [w for w in written if w.startswith(".")], written   # no temporary file left behind
