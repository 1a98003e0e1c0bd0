"""torch.export archives (.pt2; formats/torch/pt2.py), against torch.export itself: the committed fixtures
(fixtures/make_pt2.py) and the same modules exported by the installed torch at test time, read back by
torch.export.load (the oracle): every weight and tensor constant's name, dtype, shape and values; parameters against
the module's own parameters() (a tied weight once); buffers and constants apart, as the file's is_param says; the
dtype table against torch's serializer. The scan side: tests/test_pt2_scan.py."""
from __future__ import annotations

import importlib.util
import json
import os

import numpy as np
import pytest
from conftest import FIXTURES

torch = pytest.importorskip("torch")

from ckptstat import open_checkpoint  # noqa: E402
from ckptstat.formats.registry import detect  # noqa: E402
from ckptstat.formats.torch.allowlist import TORCH_DTYPES  # noqa: E402
from ckptstat.formats.torch.pt2 import FORMAT, SCALAR_TYPES  # noqa: E402


def _make_pt2():
    spec = importlib.util.spec_from_file_location("make_pt2", os.path.join(FIXTURES, "make_pt2.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _oracle(path: str) -> dict[str, tuple[object, torch.Tensor]]:
    """name -> (kind, tensor) as torch.export.load (load_pt2 for several programs) gives them: `param`, `buffer`
    (a state_dict entry that is not a parameter), `constant`; a program's names prefixed `<program>/` but `model`'s."""
    from torch.export.pt2_archive._package import load_pt2

    out = {}
    for program, ep in load_pt2(path).exported_programs.items():
        prefix = "" if program == "model" else f"{program}/"
        params = set(ep.graph_signature.parameters)
        for k, t in ep.state_dict.items():
            out[prefix + k] = ("param" if k in params else "buffer", t)
        for k, t in ep.constants.items():
            out[prefix + k] = ("constant", t)
    return out


def _exported(tmp_path) -> list[str]:
    """The fixture modules exported and saved by the installed torch, beside the committed files."""
    make = _make_pt2()
    make.OUT = str(tmp_path)
    make.main()
    return [os.path.join(FIXTURES, "pt2", n) for n in ("mixed.pt2", "two.pt2")] + \
        [str(tmp_path / n) for n in ("mixed.pt2", "two.pt2")]


def test_scalar_types_are_torch_serializers():
    """SCALAR_TYPES is torch's serializer table (torch/_export/serde/serialize.py) through allowlist.py's dtype names."""
    from torch._export.serde.serialize import _TORCH_TO_SERIALIZE_DTYPE

    seen = {}
    for dtype, scalar in _TORCH_TO_SERIALIZE_DTYPE.items():
        seen[int(scalar)] = TORCH_DTYPES[str(dtype).removeprefix("torch.")]
    assert seen == SCALAR_TYPES


def test_tensors_equal_torch_export_load(tmp_path):
    for path in _exported(tmp_path):
        assert detect(path).name == FORMAT, path
        ckpt = open_checkpoint(path)
        want = _oracle(path)
        assert sorted(t.name for t in ckpt) == sorted(want), path
        for t in ckpt:
            _, value = want[t.name]
            assert t.shape == tuple(value.shape), (path, t.name)
            assert t.dtype == TORCH_DTYPES[str(value.dtype).removeprefix("torch.")], (path, t.name)
            np.testing.assert_array_equal(ckpt.read(t.name).astype(np.float64),
                                          value.detach().double().numpy(), err_msg=f"{path} {t.name}")


def test_parameters_buffers_and_ties_are_the_modules(tmp_path, cli):
    """`ckptstat --json`: parameters = the module's parameters() (the tied embedding once), buffers and constants
    apart, the tie named."""
    for path in _exported(tmp_path):
        rc, out, _ = cli(path, "--json")
        assert rc == 0
        report = json.loads(out)
        want = _oracle(path)
        # torch.export.load gives a tied pair two Parameters over one storage (its module's parameters() counts
        # both): the parameters torch loads, once per storage and view
        views = {(t.untyped_storage().data_ptr(), t.storage_offset(), t.shape, t.stride()): t.numel()
                 for kind, t in want.values() if kind == "param"}
        assert report["parameters"]["unique"] == sum(views.values()), path
        if os.path.basename(path) == "mixed.pt2":   # and the module that wrote it
            assert report["parameters"]["unique"] == sum(p.numel() for p in _make_pt2().Mixed().parameters())
        apart = {n for r in report["non_parameters"] for n in r["names"]}
        assert apart == {n for n, (kind, _) in want.items() if kind != "param"}, path
        if os.path.basename(path) == "mixed.pt2":
            assert report["parameters"]["aliases"] == [{"name": "proj.weight", "same_as": "embed.weight"}]


def test_stats_equal_numpy_over_torchs_values(tmp_path, cli):
    path = os.path.join(FIXTURES, "pt2", "mixed.pt2")
    rc, out, _ = cli("stats", path, "--json", "-f", "conv.weight")
    assert rc == 0
    want = _oracle(path)["conv.weight"][1].detach().double().numpy()
    t = json.loads(out)["tensors"][0]
    assert t["name"] == "conv.weight" and t["count"] == want.size
    assert t["mean"] == pytest.approx(want.mean(), rel=1e-12) and t["max"] == want.max() and t["min"] == want.min()


def test_an_aotinductor_package_is_named_not_counted_as_empty(tmp_path, cli):
    """An archive with no program to read (AOTInductor's compiled library only) is one line, never "0 parameters"."""
    import zipfile

    src = zipfile.ZipFile(os.path.join(FIXTURES, "pt2", "two.pt2"))
    path = tmp_path / "aoti.pt2"
    with zipfile.ZipFile(path, "w") as z:
        for n in ("two/archive_format", "two/archive_version", "two/byteorder"):
            z.writestr(n, src.read(n))
        z.writestr("two/data/aotinductor/model/model.wrapper.so", b"\x7fELF" + bytes(60))
    rc, out, err = cli(str(path))
    assert rc == 1 and out == "" and err.count("\n") == 1 and "AOTInductor package" in err
    rc, out, _ = cli("scan", str(path), "--json")
    assert rc == 1 and json.loads(out)["status"] == "unknown" and "AOTIModelPackageLoader" in json.loads(out)["verdict"]


def test_over_http_as_locally_in_few_round_trips(tmp_path):
    """`ckptstat tensors` and `stats` of a .pt2 URL (a subprocess, a loopback server answering after 50 ms): the
    local answers, with the records' local headers fetched together, not one round trip per weight."""
    import subprocess
    import sys

    from remote_server import Server, round_trips

    m = torch.nn.Sequential(*[torch.nn.Linear(8, 8) for _ in range(150)])
    torch.export.save(torch.export.export(m, (torch.randn(2, 8),)), tmp_path / "deep.pt2")
    assert (tmp_path / "deep.pt2").stat().st_size > 4 * (1 << 16)

    def run(*args: str) -> dict:
        p = subprocess.run([sys.executable, "-m", "ckptstat", *args, "--json"], capture_output=True, text=True,
                           timeout=300)
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout)

    with Server(str(tmp_path), stall=0.05) as s:
        remote = run("tensors", f"{s.url}/deep.pt2")
        trips = round_trips(s)
        remote_stats = run("stats", f"{s.url}/deep.pt2", "-f", "0.weight")
    local = run("tensors", str(tmp_path / "deep.pt2"))
    assert remote["tensors"] == local["tensors"] and len(local["tensors"]) == 300
    assert trips <= 8, trips
    assert remote_stats["tensors"] == run("stats", str(tmp_path / "deep.pt2"), "-f", "0.weight")["tensors"]
