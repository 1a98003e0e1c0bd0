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


def _saved_twice(folder: str, first_sharded: bool):
    """A folder transformers' save_pretrained wrote twice, once sharded and once not (the second save leaves the
    first's model.safetensors or index behind); the model transformers' from_pretrained loads from it."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                   num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=32)
    torch.manual_seed(0)
    first, second = transformers.LlamaForCausalLM(cfg), transformers.LlamaForCausalLM(cfg)
    first.save_pretrained(folder, **({"max_shard_size": "8KB"} if first_sharded else {}))
    second.save_pretrained(folder, **({} if first_sharded else {"max_shard_size": "8KB"}))
    return transformers.LlamaForCausalLM.from_pretrained(folder).state_dict()


@pytest.mark.parametrize("first_sharded", [True, False], ids=["sharded-then-single", "single-then-sharded"])
def test_a_folder_saved_twice_reads_the_file_transformers_loads(cli, tmp_path, first_sharded) -> None:
    """model.safetensors and model.safetensors.index.json side by side: transformers reads model.safetensors (its
    single file before its index); ckptstat read the index, whose shards a later save had deleted ("shard ...
    missing", exit 1) or which held another save's weights, and said nothing of the other file."""
    from safetensors.numpy import load_file

    folder = str(tmp_path / "out")
    loaded = _saved_twice(folder, first_sharded)
    assert {"model.safetensors", "model.safetensors.index.json"} <= set(os.listdir(folder))
    single = load_file(os.path.join(folder, "model.safetensors"))
    assert all((loaded[k].numpy() == v).all() for k, v in single.items())   # transformers loads model.safetensors
    rc, out, err = cli("--json", folder)
    assert rc == 0, err
    r = json.loads(out)
    assert r["path"] == os.path.join(folder, "model.safetensors")
    assert r["parameters"]["unique"] == sum(v.size for v in single.values())
    assert any("also holds model.safetensors.index.json, not read" in n for n in r["notes"]), r["notes"]
