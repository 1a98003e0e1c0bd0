"""A pickle saved under a `*.safetensors` name (red-team pass `scan2`, docs/torch.md "ckptstat scan"). torch.load (2.13)
hands such a path to safetensors, but np.load(allow_pickle=True) and torch.load given the open file unpickle it.
scan took the file for safetensors when its 9th byte alone was `{`: `scan FILE` said "no pickle to scan" (exit 2) and a
folder's scan passed over it (exit 0, nothing listed). Now only a header safetensors opens (its length within the
file, then a JSON object) counts; anything else is traced as a pickle."""
from __future__ import annotations

import json
import struct

import pytest
from polyglots import loader_runs, payload

from ckptstat.analysis.scan import exit_code, scan_path
from ckptstat.errors import CorruptCheckpointError

torch = pytest.importorskip("torch")
safetensors = pytest.importorskip("safetensors")
safetensors_torch = pytest.importorskip("safetensors.torch")

NP_LOAD = "import sys, numpy\ntry: numpy.load(sys.argv[1], allow_pickle=True)\nexcept Exception: pass"
TORCH_FILE = ("import sys, torch\ntry: torch.load(open(sys.argv[1], 'rb'), weights_only=False)\n"
              "except Exception: pass")


def brace_pickle(marker: str) -> bytes:
    """A protocol-0 pickle whose 9th byte is `{` (BINUNICODE 'abc{d', POP), then os.mkdir(marker)."""
    data = b"X\x05\x00\x00\x00abc{d0" + payload(marker)
    assert data[8:9] == b"{"
    return data


def sized_brace_pickle(marker: str) -> bytes:
    """The same with its first 8 bytes a header length inside the file (1112), its header no JSON."""
    data = b"X\x04\x00\x00\x00\x00\x00\x00{0" + payload(marker)
    (n,) = struct.unpack("<Q", data[:8])
    return data + b" " * (8 + n - len(data))


@pytest.mark.parametrize("build", [brace_pickle, sized_brace_pickle])
def test_a_pickle_named_safetensors_is_traced(tmp_path, build):
    folder = tmp_path / "model"
    folder.mkdir()
    path = folder / "model.safetensors"
    path.write_bytes(build(str(tmp_path / "RAN")))
    with pytest.raises(safetensors.SafetensorError):   # what transformers and torch.load(path) do: safetensors refuses it
        safetensors_torch.load_file(str(path))
    assert loader_runs(NP_LOAD, str(path), str(tmp_path / "RAN")), "np.load(allow_pickle=True) runs it"
    assert loader_runs(TORCH_FILE, str(path), str(tmp_path / "RAN")), "torch.load(open file) runs it"
    r = scan_path(str(path))
    assert r["status"] == "unsafe" and r["unsafe_globals"] == ["os.mkdir"], r["verdict"]
    tree = scan_path(str(folder))
    assert [(f["path"], f["status"]) for f in tree["files"]] == [("model.safetensors", "unsafe")]
    assert exit_code(tree) == 1


def test_a_real_safetensors_file_is_still_safetensors(tmp_path):
    path = tmp_path / "model.safetensors"
    safetensors_torch.save_file({"w": torch.zeros(3)}, str(path), metadata={"k": "{"})
    (n,) = struct.unpack("<Q", path.read_bytes()[:8])
    assert isinstance(json.loads(path.read_bytes()[8:8 + n]), dict)
    with pytest.raises(CorruptCheckpointError, match="no pickle to scan"):
        scan_path(str(path))
    assert scan_path(str(tmp_path))["files"] == []
