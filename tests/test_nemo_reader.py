"""`.nemo` archives opened as checkpoints (formats/nemo.py): the tensors of `model_weights.ckpt` read in place from an
uncompressed archive, as torch.load reads the member NeMo's restore_from extracts; what this reader does not open
(a gzip'd archive, model-parallel ranks, a Megatron distributed checkpoint) refused in one line. The archives are
fixtures/make_nemo.py's (tar layouts as NeMo's SaveRestoreConnector writes them, torch.save of real state dicts),
and one written here with bf16 and int8 tensors."""
import io
import json
import os
import tarfile

import numpy as np
import pytest
from conftest import fixture
from remote_server import Server
from test_remote import fresh_sources  # noqa: F401  (autouse: empty caches, quick retries, no full downloads)

from ckptstat import open_checkpoint

torch = pytest.importorskip("torch")


def _member_state(path: str) -> dict:
    """What torch.load(weights_only=True) holds for the archive's model_weights.ckpt, as restore_from loads it."""
    with tarfile.open(path, "r:") as tar:
        data = tar.extractfile(next(m for m in tar.getmembers() if m.name.endswith("model_weights.ckpt"))).read()
    return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)


def _written(tmp_path) -> str:
    """An archive as NeMo writes one (`tar.add(folder, arcname=".")`, "w:"), its weights bf16, int8 and float32."""
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "model_config.yaml").write_text("target: nemo.collections.asr.models.EncDecCTCModelBPE\n")
    (folder / "tokenizer.model").write_bytes(os.urandom(300))   # an artifact before the weights
    g = torch.Generator().manual_seed(0)
    torch.save({"encoder.w": torch.randn(7, 5, generator=g).to(torch.bfloat16),
                "encoder.q": torch.randint(-128, 127, (3, 11), generator=g, dtype=torch.int8),
                "decoder.b": torch.randn(13, generator=g)}, folder / "model_weights.ckpt")
    out = str(tmp_path / "written.nemo")
    with tarfile.open(out, "w:") as tar:
        tar.add(str(folder), arcname=".")
    return out


@pytest.mark.parametrize("name", ["benign-asr-ctc-bpe.nemo", "benign-fastpitch.nemo", "written"])
def test_tensors_are_torch_loads(tmp_path, name) -> None:
    path = _written(tmp_path) if name == "written" else fixture(f"nemo/{name}")
    want = _member_state(path)
    ckpt = open_checkpoint(path)
    assert ckpt.format == "nemo (.nemo)" and sorted(ckpt.tensors) == sorted(want)
    for k, t in want.items():
        assert ckpt[k].shape == tuple(t.shape), k
        np.testing.assert_array_equal(ckpt.read(k).astype(np.float64).reshape(-1), t.double().numpy().reshape(-1))


def test_cli_counts_what_torch_holds(cli, tmp_path) -> None:
    path = _written(tmp_path)
    rc, out, err = cli("--json", path)
    assert rc == 0, err
    # (an integer tensor is no parameter: torch refuses an nn.Parameter of int8 that requires grad)
    assert json.loads(out)["parameters"]["unique"] == sum(t.numel() for t in _member_state(path).values()
                                                          if t.is_floating_point())
    rc, out, err = cli("stats", "--json", path)
    assert rc == 0, err


@pytest.mark.parametrize("name, says", [
    ("benign-megatron-gpt-tp2.nemo", "2 model-parallel ranks (mp_rank_00/model_weights.ckpt, mp_rank_01/model_weights.ckpt)"),
    ("benign-megatron-gpt-dist.nemo", "a Megatron distributed checkpoint: extract it"),
    ("benign-quartznet-gz.nemo", "a gzip'd NeMo archive"),
])
def test_what_it_does_not_open_is_one_line(cli, name, says) -> None:
    rc, out, err = cli(fixture(f"nemo/{name}"))
    assert rc != 0 and out == ""
    assert err.count("\n") == 1 and fixture(f"nemo/{name}") in err and says in err, err


def test_weights_past_the_end_are_refused(cli, tmp_path) -> None:
    """A member whose size claims more bytes than the archive holds: named, never read."""
    data = bytearray(open(_written(tmp_path), "rb").read())
    with tarfile.open(fileobj=io.BytesIO(bytes(data))) as tar:
        m = next(m for m in tar.getmembers() if m.name.endswith("model_weights.ckpt"))
    cut = str(tmp_path / "cut.nemo")
    with open(cut, "wb") as f:
        f.write(bytes(data[:m.offset_data + m.size // 2]))
    rc, out, err = cli(cut)
    assert rc != 0 and out == "" and err.count("\n") == 1 and cut in err, err


def test_over_https_as_locally(tmp_path, cli) -> None:
    """A URL reads as the file does (formats/registry.py REMOTE_FORMATS): the same tensors and values, and the summary
    fetches the tar's and the zip's headers, not the weights (a 4 MiB tensor stays on the server)."""
    folder = tmp_path / "served"
    folder.mkdir()
    model = tmp_path / "model"
    model.mkdir()
    (model / "model_config.yaml").write_text("target: x.Y\n")
    state = {"big": torch.randn(1024, 1024), "small": torch.arange(6, dtype=torch.float32)}
    torch.save(state, model / "model_weights.ckpt")
    with tarfile.open(folder / "m.nemo", "w:") as tar:
        tar.add(str(model), arcname=".")
    size = os.path.getsize(folder / "m.nemo")
    with Server(str(folder)) as s:
        rc, out, err = cli("--json", s.url + "/m.nemo")
        assert rc == 0, err
        assert json.loads(out)["parameters"]["unique"] == sum(t.numel() for t in state.values())
        assert s.bytes_sent < size // 10, (s.bytes_sent, size)
        ckpt = open_checkpoint(s.url + "/m.nemo")
        np.testing.assert_array_equal(ckpt.read("small"), state["small"].numpy())
        np.testing.assert_array_equal(ckpt.read("big"), state["big"].numpy())
