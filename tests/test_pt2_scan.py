"""`ckptstat scan` of torch.export archives (analysis/scan/pt2.py) against what torch.export.load really runs: each
hostile archive of tests/pt2_corpus.py carries, in one member torch.export.load reads, a payload that creates a
marker file, and whether it does is measured by loading it with torch in a subprocess. scan must call every archive
whose payload ran `unsafe` (from the file, from a folder holding it under another name, and over http), never
`safe` one whose code runs when the loaded module is called (guards_code), and raise no alarm on the benign
archives the same torch writes. The reader reads those benign archives as torch.export.load does."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import pt2_corpus  # noqa: E402
from remote_server import Server  # noqa: E402

from ckptstat import open_checkpoint  # noqa: E402
from ckptstat.analysis.scan import scan_path  # noqa: E402
from ckptstat.analysis.scan.pt2 import SYMPY_CALLS, plain_sympy  # noqa: E402


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    folder = tmp_path_factory.mktemp("pt2")
    marker = folder / "marker"
    return pt2_corpus.hostile(folder / "hostile", marker), pt2_corpus.benign(folder / "benign")


def test_the_corpus_runs_what_it_says(corpus):
    hostile, _ = corpus
    ran = {c.name for c in hostile if c.executes}
    assert ran == {"weight_use_pickle", "weight_use_pickle_raw", "constant_use_pickle", "opaque_obj", "sample_inputs",
                   "legacy_weights", "legacy_constants", "sympy_expr", "v27_zip"}


def test_scan_calls_every_payload_torch_runs_unsafe(corpus):
    hostile, _ = corpus
    for case in hostile:
        r = scan_path(str(case.path))
        if case.executes:
            assert r["status"] == "unsafe", (case.name, r["verdict"])
            assert r["verdict"].startswith("UNSAFE: torch.export.load would"), case.name
            where = case.member.split("/", 1)[-1] if case.name != "v27_zip" else case.member
            assert any(where in f["record"] for f in r["findings"]), (case.name, r["findings"])
        elif case.name == "guards_code":   # runs when the loaded module is called: never safe
            assert r["status"] == "unknown" and "guards_code" in r["verdict"], r["verdict"]
        else:                                # custom_obj (TorchScript's unpickler), extra/ (read as text)
            assert r["status"] == "safe", (case.name, r["verdict"])


def test_a_folder_lists_them_under_any_name(corpus, tmp_path, cli):
    """A folder scan lists a .pt2, and a .pt2 renamed to what a download might be called, by its bytes."""
    hostile, _ = corpus
    case = next(c for c in hostile if c.name == "opaque_obj")
    shutil.copy(case.path, tmp_path / "model.pt2")
    shutil.copy(case.path, tmp_path / "weights.data")
    rc, out, _ = cli("scan", str(tmp_path), "--json")
    assert rc == 1
    files = {f["path"]: f["status"] for f in json.loads(out)["files"]}
    assert files == {"model.pt2": "unsafe", "weights.data": "unsafe"}


def test_over_http_the_same(corpus, tmp_path):
    """`ckptstat scan URL` (a subprocess, a loopback server) says what the local scan says, for every hostile case."""
    hostile, _ = corpus
    for case in hostile:
        shutil.copy(case.path, tmp_path / f"{case.name}.pt2")
    with Server(str(tmp_path)) as s:
        for case in hostile:
            p = subprocess.run([sys.executable, "-m", "ckptstat", "scan", f"{s.url}/{case.name}.pt2", "--json"],
                               capture_output=True, text=True, timeout=300)
            remote, local = json.loads(p.stdout), scan_path(str(tmp_path / f"{case.name}.pt2"))
            assert p.returncode == (0 if local["status"] == "safe" else 1), (case.name, p.stderr)
            assert remote["status"] == local["status"] and remote["findings"] == local["findings"], case.name


def test_benign_archives_scan_safe_and_read_as_torch_loads_them(corpus):
    _, benign = corpus
    for name, path in benign.items():
        r = scan_path(str(path))
        want = pt2_corpus.oracle(path)
        subclass = {k for k, v in want.items() if v.get("subclass")}
        if subclass:   # a tensor subclass is torch.load(weights_only=False)'d: its class is imported
            assert r["status"] == "unsafe" and "two_tensor.TwoTensor" in r["verdict"], (name, r["verdict"])
        else:
            assert r["status"] == "safe", (name, r["verdict"])
        ckpt = open_checkpoint(str(path))
        assert sorted(t.name for t in ckpt) == sorted(set(want) - subclass), name
        for t in ckpt:
            w = want[t.name]
            assert (t.dtype, list(t.shape)) == (w["dtype"], list(w["shape"])), (name, t.name)
            np.testing.assert_array_equal(ckpt.read(t.name).astype(np.float64).reshape(-1),
                                          np.asarray(w["values"], dtype=np.float64).reshape(-1), err_msg=f"{name} {t.name}")
        assert (ckpt.partial is not None) == bool(subclass), name
        for k in subclass:
            assert k in ckpt.partial, (name, k)


def test_dynamic_shapes_are_plain_sympy(tmp_path):
    """What torch writes for symbolic sizes (srepr of its shape expressions) passes; Python hidden in one does not."""
    class Net(torch.nn.Module):
        def forward(self, x, y):
            z = torch.cat([x, y], dim=0)
            return z.reshape(-1, 2)[: z.shape[0] // 2] * 2

    dim = torch.export.Dim("n", min=2, max=64)
    ep = torch.export.export(Net(), (torch.randn(4, 4), torch.randn(6, 4)),
                             dynamic_shapes={"x": {0: dim}, "y": {0: torch.export.Dim("m", min=2, max=64)}})
    path = tmp_path / "dynamic.pt2"
    torch.export.save(ep, path)
    text = pt2_corpus.members(path)[1]
    graph = next(b for n, b in text if n.endswith("models/model.json")).decode()
    exprs = re.findall(r'"expr_str": "((?:[^"\\]|\\.)*)"', graph)
    assert exprs, "the export has no symbolic size"
    assert [e for e in map(lambda s: json.loads(f'"{s}"'), exprs) if plain_sympy(e) is not None] == []
    assert scan_path(str(path))["status"] == "safe"
    for evil in ("open('/tmp/x', 'w')", "Symbol('s0').__class__", "__import__('os')", "Integer(1).func",
                 "Symbol('s0', integer=exec('1'))", "(lambda: 1)()", "Symbol('a\\x27)')", "[1][0]"):
        assert plain_sympy(evil) is not None, evil


def test_sympy_calls_cover_torchs_sympy_functions():
    """Every name torch's deserializer puts in sympify's locals (torch/_export/serde/serialize.py) is allowed."""
    import torch._export.serde.serialize as serialize

    source = open(serialize.__file__).read()
    names = set(re.findall(r'"(\w+)": torch\.utils\._sympy\.functions\.\1\b', source))
    assert names and names <= SYMPY_CALLS, names - SYMPY_CALLS
