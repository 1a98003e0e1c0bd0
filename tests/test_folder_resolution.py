"""A folder passed where a file is meant (formats/registry.py `resolve_folder`) with no file a Hugging Face folder
names: it opens the one file of a format ckptstat reads, and says in one line which files it holds when there are
several. A Lightning run's `last.ckpt`, a `.pt2` export and an `.npy` array alone in a folder were "folder holds no
weights file ckptstat recognises" (the folder's suffixes were a list of their own, short of the readers' extensions:
it now ends with every format's)."""
import json
import os
import shutil

import pytest
from conftest import fixture

from ckptstat.formats import registry

ONE = {   # a committed fixture of each extension the old list lacked, written by its library (fixtures/make_*.py)
    ".ckpt": "training/lightning/last.ckpt",   # PyTorch Lightning's ModelCheckpoint
    ".pt2": "pt2/two.pt2",                     # torch.export.save
    ".npy": "numpy/embedding.npy",             # numpy.save
    ".hdf5": "keras2/weights.h5",              # Keras' save_weights, under HDF5's other name
}


def _copy(src: str, folder: str, name: str) -> str:
    os.makedirs(folder, exist_ok=True)
    shutil.copyfile(src, os.path.join(folder, name))
    return os.path.join(folder, name)


@pytest.mark.parametrize("suffix", sorted(ONE))
def test_a_folder_opens_its_one_file(cli, tmp_path, suffix) -> None:
    folder = str(tmp_path / "run")
    path = _copy(fixture(ONE[suffix]), folder, "weights" + suffix)
    rc, out, err = cli("--json", path)
    assert rc == 0, err
    alone = json.loads(out)
    rc, out, err = cli("--json", folder)
    assert rc == 0, err
    found = json.loads(out)
    assert found["path"] == path and found["format"] == alone["format"]
    assert found["parameters"] == alone["parameters"]


@pytest.mark.parametrize("suffix", sorted(ONE))
def test_a_folder_of_several_names_them_in_one_line(cli, tmp_path, suffix) -> None:
    folder = str(tmp_path / "run")
    for name in ("a", "b"):
        _copy(fixture(ONE[suffix]), folder, name + suffix)
    rc, out, err = cli(folder)
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and f"2 {suffix} files (a{suffix}, b{suffix}); pass one file" in err, err
    assert "index.json" not in err   # (no index shards these: the advice is for safetensors, .bin, .h5, .msgpack)


def test_every_reader_extension_is_a_folder_suffix() -> None:
    """Where no preferred suffix matches, every registered format's extensions are tried (one place per fact: the
    Format's own `extensions`)."""
    registry._load_all()
    tried = set(registry.PREFERRED_SUFFIXES) | set(registry._folder_suffixes())
    assert {e for f in registry.FORMATS for e in f.extensions} <= tried
