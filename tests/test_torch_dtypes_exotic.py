"""torch's complex32, bcomplex32 and float4_e2m1fn_x2 tensors (C32, BC32, F4_X2: docs/formats.md section 2) in
files the installed torch (2.13) writes. Names, shapes and parameter counts are torch.load's (a float4_e2m1fn_x2
element is torch's packed pair: `numel()` counts pairs); complex32 values are torch's own widening to complex64;
fp4 values, which torch 2.13 cannot convert on the CPU, are the OCP MX e2m1 table applied to torch's uint8 view,
low nibble first. torch 2.13 has no bcomplex32: its file is a complex32 save of bfloat16 pairs with the dtype's
name written in, as torch 2.15 writes it (`_rebuild_tensor_v3(..., torch.bcomplex32)`)."""
from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
import textwrap
import zipfile

import numpy as np
import pytest
from conftest import ROOT

from ckptstat import open_checkpoint
from ckptstat.analysis.diff import diff
from ckptstat.analysis.stats import stats

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental")

# OCP Microscaling Formats (MX) v1.0, section 5.3.3: the FP4 (E2M1) values of codes 0-7; bit 3 is the sign.
E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], dtype=np.float32)
E2M1 = np.concatenate([E2M1, -E2M1])
CODES = {torch.complex32: "C32", torch.float4_e2m1fn_x2: "F4_X2", torch.float32: "F32"}


def fp4_values(t) -> np.ndarray:
    """A float4_e2m1fn_x2 tensor's values: its shape plus a last axis of the pair (low nibble, high nibble)."""
    u = t.view(torch.uint8).numpy()
    return E2M1[np.stack([u & 0x0F, u >> 4], axis=-1)]


def _objects() -> dict:
    g = torch.Generator().manual_seed(0)
    return {
        "c32": torch.randn(3, 4, dtype=torch.complex64, generator=g).to(torch.complex32),
        "c32_t": torch.randn(4, 5, dtype=torch.complex64, generator=g).to(torch.complex32).t(),   # a strided view
        "w": torch.randn(5, generator=g),
        "f4": torch.randint(0, 256, (4, 6), dtype=torch.uint8, generator=g).view(torch.float4_e2m1fn_x2),
        "f4_t": torch.randint(0, 256, (6, 3), dtype=torch.uint8, generator=g).view(torch.float4_e2m1fn_x2).t(),
    }


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("exotic") / "exotic.pt")
    torch.save(_objects(), path)
    return path


def _rewritten(src: str, dst: str, change, compression: int = zipfile.ZIP_STORED) -> str:
    """The torch.save zip `src` with each record's bytes put through change(name, data)."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", compression) as zout:
        for info in zin.infolist():
            zout.writestr(info.filename, change(info.filename, zin.read(info)))
    return dst


def _renamed_dtype(src: str, dst: str, new: str) -> str:
    """`src` with its pickle's `torch.complex32` global renamed `torch.<new>`."""
    def change(name: str, data: bytes) -> bytes:
        if name.endswith("/data.pkl"):
            assert data.count(b"ctorch\ncomplex32\n") == 1
            return data.replace(b"ctorch\ncomplex32\n", b"ctorch\n" + new.encode() + b"\n")
        return data
    return _rewritten(src, dst, change)


def test_names_shapes_dtypes_and_counts_are_torch_loads(saved):
    want = torch.load(saved, weights_only=True)
    ckpt = open_checkpoint(saved)
    assert sorted(t.name for t in ckpt) == sorted(want)
    for name, t in want.items():
        info = ckpt[name]
        assert (info.dtype, info.shape, info.numel) == (CODES[t.dtype], tuple(t.shape), t.numel()), name
        assert info.nbytes == t.numel() * t.element_size(), name
        assert (info.stride is None) == t.is_contiguous(), name


def test_complex32_values_are_torchs_widening(saved):
    ckpt = open_checkpoint(saved)
    for name, t in torch.load(saved, weights_only=True).items():
        if t.dtype == torch.complex32:
            got = ckpt.read(name)
            assert got.dtype == np.complex64
            np.testing.assert_array_equal(got, t.to(torch.complex64).numpy(), err_msg=name)
            chunks = np.concatenate(list(ckpt.iter_chunks(name, chunk_bytes=12)))
            np.testing.assert_array_equal(chunks, t.to(torch.complex64).numpy().reshape(-1), err_msg=name)


def test_fp4_pairs_decode_to_the_e2m1_table(saved):
    """A float4_e2m1fn_x2 element reads as its two values along a last axis; iter_chunks gives them flat, two an
    element, contiguous or strided."""
    ckpt = open_checkpoint(saved)
    for name, t in torch.load(saved, weights_only=True).items():
        if t.dtype == torch.float4_e2m1fn_x2:
            want = fp4_values(t)
            np.testing.assert_array_equal(ckpt.read(name), want, err_msg=name)
            chunks = np.concatenate(list(ckpt.iter_chunks(name, chunk_bytes=5)))
            np.testing.assert_array_equal(chunks, want.reshape(-1), err_msg=name)


def test_bcomplex32_name_reads_bfloat16_pairs(tmp_path):
    g = torch.Generator().manual_seed(1)
    re, im = torch.randn(2, 3, 4, generator=g).bfloat16()
    pairs = torch.stack([re, im], dim=-1)            # (3, 4, 2) bfloat16: real, imaginary
    torch.save({"b": pairs.view(torch.complex32)[..., 0]}, tmp_path / "as_c32.pt")
    path = _renamed_dtype(str(tmp_path / "as_c32.pt"), str(tmp_path / "bc32.pt"), "bcomplex32")
    ckpt = open_checkpoint(path)
    assert (ckpt["b"].dtype, ckpt["b"].shape, ckpt["b"].nbytes) == ("BC32", (3, 4), 48)
    want = re.float().numpy() + 1j * im.float().numpy()
    np.testing.assert_array_equal(ckpt.read("b"), want.astype(np.complex64))


def test_a_file_torch_2_15_wrote(cli):
    """fixtures/torch215/exotic.pt, written by torch 2.15 (its own bcomplex32; fixtures/make_torch215_dtypes.py),
    against what torch 2.15 read back: dtypes, shapes, counts, complex values as torch widens them, fp4 bytes."""
    want = json.loads(open(os.path.join(ROOT, "fixtures", "expected_torch215_dtypes.json")).read())["tensors"]
    path = os.path.join(ROOT, "fixtures", "torch215", "exotic.pt")
    ckpt = open_checkpoint(path)
    codes = {"torch.bcomplex32": "BC32", "torch.complex32": "C32", "torch.float4_e2m1fn_x2": "F4_X2",
             "torch.float32": "F32"}
    for name, w in want.items():
        t = ckpt.tensors[name]
        assert (t.dtype, list(t.shape), t.numel) == (codes[w["dtype"]], w["shape"], w["numel"]), name
        got = ckpt.read(name)
        if t.dtype in ("BC32", "C32"):
            got = np.stack([got.real, got.imag], -1)
        elif t.dtype == "F4_X2":   # torch gave the bytes: each decodes to (low nibble, high nibble)
            u = np.array(w["values"], np.uint8)
            np.testing.assert_array_equal(got.reshape(-1), E2M1[np.stack([u & 0x0F, u >> 4], -1)].reshape(-1))
            continue
        np.testing.assert_array_equal(got.reshape(-1), np.array(w["values"], np.float32), err_msg=name)
    rc, out, _ = cli(path, "--json")
    assert rc == 0 and json.loads(out)["parameters"]["unique"] == sum(w["numel"] for w in want.values())


def test_big_endian_pairs_swap_each_part(saved, tmp_path):
    """A big-endian writer's complex32 swaps each float16 part on its own, as torch's byteswap does (a complex
    element: two halves of its element size); fp4 bytes are not swapped."""
    ckpt = open_checkpoint(saved)
    swapped = {t.storage: 2 if t.dtype == "C32" else t.dt.bits // 8 for t in ckpt}   # bytes swapped together

    def swap(name: str, data: bytes) -> bytes:
        if name.endswith("/byteorder"):
            return b"big"
        n = swapped.get(name.rsplit("/", 1)[-1], 1) if "/data/" in name else 1
        return np.frombuffer(data, f"<u{n}").byteswap().tobytes() if n > 1 else data

    big = open_checkpoint(_rewritten(saved, str(tmp_path / "big.pt"), swap))
    assert big["c32"].byteorder == "big" and big["f4"].byteorder == "little"
    for name in ckpt.tensors:
        np.testing.assert_array_equal(big.read(name), ckpt.read(name), err_msg=name)


def test_compressed_records_stream_the_same_values(saved, tmp_path):
    ckpt = open_checkpoint(saved)
    deflated = open_checkpoint(_rewritten(saved, str(tmp_path / "deflated.pt"), lambda _, d: d, zipfile.ZIP_DEFLATED))
    assert deflated["f4"].offset is None
    for name in ckpt.tensors:
        np.testing.assert_array_equal(deflated.read(name), ckpt.read(name), err_msg=name)
        np.testing.assert_array_equal(np.concatenate(list(deflated.iter_chunks(name, chunk_bytes=8))),
                                      ckpt.read(name).reshape(-1), err_msg=name)


def test_other_unsupported_dtypes_are_still_refused(saved, tmp_path, cli):
    path = _renamed_dtype(saved, str(tmp_path / "bits16.pt"), "bits16")
    rc, out, err = cli(path)
    assert rc == 1 and out == "" and "dtype torch.bits16 is not supported by ckptstat" in err, err


def test_stats_count_both_numbers_of_each_element(saved):
    """A complex element is two numbers, an fp4 pair two values: `count` is twice torch's numel, and the
    statistics are over those numbers (conventions.values says so)."""
    r = stats(open_checkpoint(saved), workers=1)
    want = torch.load(saved, weights_only=True)
    rows = {row["name"]: row for row in r["tensors"]}
    for name, t in want.items():
        if t.dtype == torch.complex32:
            numbers = torch.view_as_real(t.to(torch.complex64)).numpy().reshape(-1)
        elif t.dtype == torch.float4_e2m1fn_x2:
            numbers = fp4_values(t).reshape(-1)
        else:
            numbers = t.numpy().reshape(-1)
        row = rows[name]
        assert row["count"] == numbers.size, name
        assert (row["min"], row["max"]) == (float(numbers.min()), float(numbers.max())), name
        assert row["mean"] == pytest.approx(float(numbers.astype(np.float64).mean()), rel=1e-12, abs=1e-15), name
        assert row["zeros"] == int(np.count_nonzero(numbers == 0)), name
        # fp4 values are exact in the bfloat16-keyed histogram: numpy's quantiles, exactly
        assert row["quantiles_exact"] == (t.dtype == torch.float4_e2m1fn_x2), name
        if row["quantiles_exact"]:
            assert [row["quantiles"][f"p{100 * p:g}"] for p in r["quantile_levels"]] == \
                np.quantile(numbers.astype(np.float64), r["quantile_levels"]).tolist(), name
    assert r["total"]["count"] == sum(rows[n]["count"] for n in want)
    assert "F4_X2" in r["conventions"]["values"] and "complex" in r["conventions"]["values"]


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ckptstat", *args], capture_output=True, text=True, timeout=300,
                          cwd=ROOT, env={**os.environ, "COLUMNS": "200"})


def test_cli_summary_and_stats(saved):
    """`ckptstat FILE --json` and `ckptstat stats FILE` as a user runs them: exit 0, the parameters torch counts."""
    want = torch.load(saved, weights_only=True)
    done = _run(saved, "--json")
    assert done.returncode == 0, done.stderr
    r = json.loads(done.stdout)
    assert r["parameters"]["unique"] == sum(t.numel() for t in want.values())
    by_dtype = {d["dtype"]: d["params"] for d in r["dtypes"]}
    assert by_dtype == {"C32": 12 + 20, "F32": 5, "F4_X2": 24 + 18}
    done = _run("stats", saved)
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())
    assert "F4_X2" in text and "values count and every statistic" in text and "twice its shape's elements" in text
    done = _run("stats", saved, "--json")
    assert done.returncode == 0, done.stderr
    counts = {t["name"]: t["count"] for t in json.loads(done.stdout)["tensors"]}
    assert counts == {n: t.numel() * (1 if t.dtype == torch.float32 else 2) for n, t in want.items()}


def test_stats_of_plain_dtypes_print_no_values_line(tmp_path, cli):
    path = tmp_path / "plain.pt"
    torch.save({"w": torch.randn(3, 4)}, path)
    rc, out, _ = cli("stats", str(path))
    assert rc == 0 and "twice its shape's elements" not in " ".join(out.split())


def test_diff_compares_fp4_pairs_with_fp4_pairs_only(saved, tmp_path):
    """Two F4_X2 tensors are compared value by value; an F4_X2 tensor and a uint8 one of the same shape (the
    same bytes) are not: two values an element face one."""
    objs = _objects()
    changed = objs["f4"].view(torch.uint8).clone()
    changed[0, 0] ^= 0x01
    torch.save({"f4": changed.view(torch.float4_e2m1fn_x2)}, tmp_path / "changed.pt")
    torch.save({"f4": objs["f4"].view(torch.uint8)}, tmp_path / "bytes.pt")
    torch.save({"f4": objs["f4"]}, tmp_path / "same.pt")
    a = open_checkpoint(str(tmp_path / "same.pt"))
    row = diff(a, open_checkpoint(str(tmp_path / "changed.pt")))["tensors"][0]
    assert row["status"] == "values" and row["max_abs"] == abs(E2M1[objs["f4"].view(torch.uint8)[0, 0].item() & 15]
                                                               - E2M1[changed[0, 0].item() & 15])
    row = diff(a, open_checkpoint(str(tmp_path / "bytes.pt")))["tensors"][0]
    assert row["status"] == "dtype" and row["max_abs"] is None


# A 2-rank gloo group saves one float4_e2m1fn_x2 DTensor split by columns (Shard(1)): each rank's chunk a box of
# columns, read back by ckptstat from the two rank files.
DCP_WRITER = textwrap.dedent("""
    import os, sys, warnings
    warnings.simplefilter("ignore")
    import torch, torch.distributed as dist, torch.multiprocessing as mp
    import torch.distributed.checkpoint as dcp

    def rank(r, out, port):
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
        dist.init_process_group("gloo", rank=r, world_size=2)
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import DTensor, Shard
        full = torch.randint(0, 256, (3, 10), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
        local = full[:, 5 * r:5 * r + 5].contiguous().view(torch.float4_e2m1fn_x2)
        mesh = init_device_mesh("cpu", (2,))
        dcp.save({"f4": DTensor.from_local(local, mesh, [Shard(1)], run_check=False)}, checkpoint_id=out)
        dist.destroy_process_group()

    if __name__ == "__main__":
        mp.spawn(rank, args=(sys.argv[1], sys.argv[2]), nprocs=2, join=True)
""")


def test_dcp_fp4_pairs_sharded_by_columns(tmp_path):
    dcp = pytest.importorskip("torch.distributed.checkpoint")
    script, out = tmp_path / "write_dcp.py", str(tmp_path / "f4")
    script.write_text(DCP_WRITER)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    done = subprocess.run([sys.executable, str(script), out, port], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    want = {"f4": torch.empty((3, 10), dtype=torch.float4_e2m1fn_x2)}
    dcp.load(want, checkpoint_id=out, no_dist=True)   # torch reading the folder back
    ckpt = open_checkpoint(out)
    info = ckpt["f4"]
    assert (info.dtype, info.shape, info.extra["dcp_chunks"]) == ("F4_X2", (3, 10), 2)
    np.testing.assert_array_equal(ckpt.read("f4"), fp4_values(want["f4"]))
    # chunks of 8 elements (iter_chunks' least): ranges that cross rows and the ranks' boxes of 5 columns
    chunks = np.concatenate(list(ckpt.iter_chunks("f4", chunk_bytes=1)))
    np.testing.assert_array_equal(chunks, fp4_values(want["f4"]).reshape(-1))
    assert math.prod(info.shape) == want["f4"].numel()
