"""A pickle that starts with GGUF's magic (red-team pass `scan2`, docs/torch.md "ckptstat scan"): `G` is BINFLOAT, so
b"GGUF" and the version are an 8-byte float and the pickle goes on. torch.load(weights_only=False) reads it as a
legacy stream and runs it; the GGUF reader refuses its counts. scan let the GGUF reader's error stand for the file:
`scan FILE` said unreadable (exit 2) and a folder's scan passed over a file so built under a name no loader claims
(exit 0, nothing listed). Now another loader's error is the verdict only when torch.load's path reaches nothing."""
from __future__ import annotations

import gguf
import pytest
from polyglots import payload, torch_load_runs

from ckptstat.analysis.scan import exit_code, scan_path

pytest.importorskip("torch")


def gguf_pickle(marker: str) -> bytes:
    data = gguf.GGUF_MAGIC.to_bytes(4, "little") + gguf.GGUF_VERSION.to_bytes(4, "little")
    assert data[:1] == b"G"   # BINFLOAT: this and the next 7 bytes are a float
    return data + b"\x00" + b"0" + payload(marker)   # (POP the float, then os.mkdir(marker))


@pytest.mark.parametrize("name", ["weights.dat", "model.gguf"])
def test_a_pickle_behind_the_gguf_magic_is_unsafe(tmp_path, name):
    folder = tmp_path / "model"
    folder.mkdir()
    path = folder / name
    path.write_bytes(gguf_pickle(str(tmp_path / "RAN")))
    with pytest.raises((ValueError, IndexError)):   # gguf's own reader refuses it
        gguf.GGUFReader(str(path))
    assert torch_load_runs(str(path), str(tmp_path / "RAN")), "torch.load(weights_only=False) runs it"
    r = scan_path(str(path))
    assert r["status"] == "unsafe" and r["unsafe_globals"] == ["os.mkdir"], r["verdict"]
    tree = scan_path(str(folder))
    assert [(f["path"], f["status"]) for f in tree["files"]] == [(name, "unsafe")]
    assert exit_code(tree) == 1
