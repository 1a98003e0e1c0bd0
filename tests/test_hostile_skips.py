"""The twelfth red-team pass (docs/security.md, "Checks added by the twelfth red-team pass"): what a scan skipped,
stopped at, or read past. Each payload is run by the real loader in a throw-away process (it creates a marker file),
and `ckptstat scan` / `audit` run as a user runs them, as a subprocess."""
from __future__ import annotations

import gzip
import json
import os
import pickle
import subprocess
import sys
import zipfile

import numpy as np
import pytest
from conftest import ROOT

BIG = (1 << 20) + 12_345   # a string longer than the walk's 64 KiB read chunk, not a multiple of it


def ckptstat(*args: str) -> tuple[int, str, str]:
    r = subprocess.run([sys.executable, "-m", "ckptstat", *args], capture_output=True, text=True, cwd=ROOT, timeout=300)
    return r.returncode, r.stdout, r.stderr


def runs(code: str, path: str, marker: str) -> bool:
    """Whether the real loader (`code`, reading sys.argv[1]) runs the payload: the marker file appears."""
    subprocess.run([sys.executable, "-c", code, path], capture_output=True, timeout=300)
    ran = os.path.exists(marker)
    if ran:
        os.remove(marker)
    return ran


class _Opens:
    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _padded_payload(marker: str) -> bytes:
    """A pickle holding a big string the walk skips over, then a call of open(marker, 'w')."""
    return pickle.dumps(["X" * BIG, _Opens(marker)], protocol=2)


# --- a payload after a big argument in a compressed stream --------------------------------------------------------

def _torch_zip_deflated(path: str, data_pkl: bytes) -> None:
    """torch.save's archive with its data.pkl replaced and deflated (torch's reader inflates deflated records)."""
    import torch

    plain = path + ".plain"
    torch.save({"w": torch.zeros(2)}, plain)
    with zipfile.ZipFile(plain) as zin, zipfile.ZipFile(path, "w") as z:
        for info in zin.infolist():
            if info.filename.endswith("/data.pkl"):
                z.writestr(info.filename, data_pkl, compress_type=zipfile.ZIP_DEFLATED)
            else:
                z.writestr(info, zin.read(info.filename))
    os.remove(plain)


def test_a_payload_after_a_big_string_in_a_deflated_or_gzipped_pickle_is_seen(tmp_path):
    """The walk skips a big argument by decompressing and dropping it; the decompressors hand back a chunk (64 KiB)
    whatever was asked, and what came past the argument was dropped with it: the payload after it was never walked.
    np.savez_compressed writes exactly that for an object array whose first item is a long string: `safe` (exit 0);
    a gzip'd pickle `safe`; a torch archive with a deflated data.pkl 'torch.load raises' (exit 2), and in a folder
    under a name without a pickle extension not listed at all (exit 0)."""
    marker = str(tmp_path / "ran")
    folder = tmp_path / "run"
    folder.mkdir()
    a = np.empty(2, dtype=object)
    a[0], a[1] = "X" * BIG, _Opens(marker)
    np.savez_compressed(folder / "arrays.npz", a=a)
    (folder / "model.pkl.gz").write_bytes(gzip.compress(_padded_payload(marker)))
    _torch_zip_deflated(str(folder / "checkpoint_best"), _padded_payload(marker))
    assert runs("import numpy, sys; numpy.load(sys.argv[1], allow_pickle=True)['a']", str(folder / "arrays.npz"), marker)
    assert runs("import gzip, pickle, sys; pickle.load(gzip.open(sys.argv[1]))", str(folder / "model.pkl.gz"), marker)
    assert runs("import torch, sys; torch.load(sys.argv[1], weights_only=False)", str(folder / "checkpoint_best"), marker)
    rc, out, err = ckptstat("scan", str(folder), "--json")
    assert rc == 1, err
    files = {f["path"]: f for f in json.loads(out)["files"]}
    assert {p: f["status"] for p, f in files.items()} == {
        "arrays.npz": "unsafe", "model.pkl.gz": "unsafe", "checkpoint_best": "unsafe"}
    assert all(f["unsafe_globals"] == [f"{open.__module__}.open"] for f in files.values())


# --- a config a folder scan did not list because scan could not read it whole --------------------------------------

HOSTILE_TEMPLATE = "{{ messages.__class__.__mro__ }}"


def _tokenizer_folder(folder) -> None:
    transformers = pytest.importorskip("transformers")
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel

    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=Tokenizer(WordLevel({"a": 0, "<unk>": 1},
                                                                                    unk_token="<unk>")))
    tok.save_pretrained(folder)


@pytest.mark.parametrize("form", ["dict", "list with a None", "over 64 MiB"])
def test_a_tokenizer_config_scan_cannot_read_is_listed_not_dropped(form, tmp_path):
    """The chat template transformers renders, in forms scan raised on: a dict name -> template (the tokenizer keeps it
    and renders its "default"), a list whose other entry's template is None (loads: never compiled), a
    tokenizer_config.json past the 64 MiB scan reads (transformers reads any). The folder scan did not list the file
    (a config's error drops it, as any file without a pickle's name that no loader reads): exit 0."""
    transformers = pytest.importorskip("transformers")
    _tokenizer_folder(tmp_path)
    path = tmp_path / "tokenizer_config.json"
    config = json.loads(path.read_text())
    config["chat_template"] = ({"default": HOSTILE_TEMPLATE} if form == "dict" else
                               [{"name": "default", "template": HOSTILE_TEMPLATE}, {"name": "rag", "template": None}]
                               if form.startswith("list") else HOSTILE_TEMPLATE)
    text = json.dumps(config)
    if form.startswith("over"):
        text = text[:-1] + ', "padding": "' + " " * (64 << 20) + '"}'
    path.write_text(text)
    assert transformers.AutoTokenizer.from_pretrained(tmp_path).get_chat_template() == HOSTILE_TEMPLATE
    rc, out, err = ckptstat("scan", str(tmp_path), "--json")
    assert rc == 1, err
    files = {f["path"]: f["status"] for f in json.loads(out)["files"]}
    assert files == {"tokenizer_config.json": "unknown" if form.startswith("over") else "unsafe"}


def test_a_saved_model_past_the_bytes_scan_reads_is_unknown_not_dropped(tmp_path):
    """A saved_model.pb larger than `index_bytes` (frozen graphs with their constants reach it) was an error, and so
    not listed by a folder scan: exit 0 for TensorFlow 2.21's WriteFile model (fixtures/make_saved_model_ops.py)."""
    import shutil

    from conftest import FIXTURES

    shutil.copytree(os.path.join(FIXTURES, "tf-saved-model-ops", "write_file"), tmp_path / "model")
    rc, out, err = ckptstat("--limit", "index_bytes=4096", "scan", str(tmp_path / "model"), "--json")
    assert rc == 1, err
    assert {f["path"]: f["status"] for f in json.loads(out)["files"]} == {"saved_model.pb": "unknown"}
