"""TorchScript archives (torch.jit.save of scripted and traced modules, the lite interpreter's `.ptl`), read without
running their code: each TorchScript class an inert record laid out by its code/ declaration (formats/torch/
torchscript.py, docs/torch.md "TorchScript archives").

Oracle: torch itself. `torch.jit.load(path).state_dict()` is what the reader must list: the same names in the same
order, shapes and values; `named_parameters()` says which are parameters, the rest of the state_dict are buffers."""
from __future__ import annotations

import json
import os
import zipfile

import numpy as np
import pytest
import torch
from module_zoo import Block, Shared
from torch import nn

from ckptstat import CorruptCheckpointError, UnsafeCheckpointError, open_checkpoint


class Zoo(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv, self.bn = nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)
        self.lstm, self.gru = nn.LSTM(4, 3, 2), nn.GRU(3, 2)
        self.mha, self.enc = nn.MultiheadAttention(4, 2), nn.TransformerEncoderLayer(8, 2, 16)
        self.emb, self.md = nn.Embedding(5, 3), nn.ModuleDict({"a": nn.Linear(2, 2)})
        self.block = Block()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(self.conv(x))


def _scripted(m: nn.Module):
    return lambda path: torch.jit.script(m).save(path)


def _traced(m: nn.Module, *inputs: torch.Tensor):
    return lambda path: torch.jit.trace(m.eval(), inputs).save(path)


def _lite(path: str) -> None:
    torch.jit.script(nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2)))._save_for_lite_interpreter(path)


def _transformers(family: str):
    def save(path: str) -> None:
        transformers = pytest.importorskip("transformers")
        cfg = transformers.AutoConfig.for_model(family, num_hidden_layers=1, hidden_size=32, intermediate_size=64,
                                                num_attention_heads=2, vocab_size=100, torchscript=True)
        model = transformers.AutoModel.from_config(cfg).eval()
        torch.jit.trace(model, (torch.ones(1, 5, dtype=torch.long),), strict=False).save(path)
    return save


def _cases() -> dict:
    torch.manual_seed(0)
    return {"scripted zoo": _scripted(Zoo()), "scripted block": _scripted(Block()), "scripted ties": _scripted(Shared()),
            "traced convnet": _traced(nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(),
                                                    nn.Linear(100, 5, bias=False)), torch.randn(1, 3, 7, 7)),
            "lite interpreter": _lite, "traced bert": _transformers("bert"), "traced roberta": _transformers("roberta"),
            "traced distilbert": _transformers("distilbert")}


@pytest.mark.parametrize("case", sorted(_cases()))
def test_read_as_the_loaded_module_state_dict(tmp_path, case):
    path = str(tmp_path / "model.pt")
    _cases()[case](path)
    loaded = torch.jit.load(path)
    want = loaded.state_dict()
    ckpt = open_checkpoint(path)
    assert ckpt.format == "torchscript (zip)"
    assert list(ckpt.tensors) == list(want)   # state_dict's order
    for n, t in want.items():
        assert ckpt.tensors[n].shape == tuple(t.shape), n
        np.testing.assert_array_equal(ckpt.read(n).reshape(t.shape), t.numpy(), err_msg=n)
    params = {n for n, _ in loaded.named_parameters(remove_duplicate=False)}
    assert ckpt.roles == {n: "parameter" if n in params else "buffer" for n in want}
    from ckptstat.analysis.summary import summarize

    assert summarize(ckpt)["parameters"]["unique"] == sum(p.numel() for p in loaded.parameters())
    assert any(n.startswith("a TorchScript archive") for n in ckpt.notes)


def test_summary_and_scan_from_the_command_line(tmp_path, cli):
    path = str(tmp_path / "block.pt")
    _scripted(Block())(path)
    rc, out, err = cli("summary", path, "--json")
    assert rc == 0, err
    r = json.loads(out)
    assert r["format"] == "torchscript (zip)"
    table = torch.jit.load(path).table   # a plain tensor attribute, in no state_dict
    assert any(f"1 storage record(s), {table.nbytes:,} bytes" in n for n in r["notes"]), r["notes"]
    rc, out, _ = cli("scan", path, "--json")   # unchanged: torch.jit.load compiles and runs the archive's code
    assert rc == 1 and json.loads(out)["status"] == "unknown"


def _rewrite(src: str, dst: str, change) -> None:
    with zipfile.ZipFile(src) as z:
        members = [(i.filename, z.read(i)) for i in z.infolist()]
    with zipfile.ZipFile(dst, "w") as z:
        for name, data in change(members):
            z.writestr(name, data)


def test_a_class_declared_nowhere_is_refused(tmp_path):
    src, bad = str(tmp_path / "m.pt"), str(tmp_path / "bad.pt")
    _scripted(Block())(src)
    _rewrite(src, bad, lambda ms: [(n, d) for n, d in ms if "/modules/linear" not in n])   # nn.Linear's class, mangled or not
    with pytest.raises(CorruptCheckpointError, match="declared in no code/ record"):
        open_checkpoint(bad)


@pytest.mark.parametrize("limit, value, words", [("CODE_BYTES", 100, "code/ records hold more than 100 bytes"),
                                                 ("CODE_RECORDS", 2, "code/ records, more than the 2 read")])
def test_code_records_are_read_within_a_budget(tmp_path, monkeypatch, limit, value, words):
    """Their bytes and their number (each a read: a million tiny records would be a million)."""
    from ckptstat.formats.torch import torchscript

    src = str(tmp_path / "m.pt")
    _scripted(Block())(src)
    monkeypatch.setattr(torchscript, limit, value)
    with pytest.raises(CorruptCheckpointError, match=words):
        open_checkpoint(src)


def test_a_call_in_its_pickle_is_refused_and_nothing_runs(tmp_path):
    canary = str(tmp_path / "PWNED")
    src, bad = str(tmp_path / "m.pt"), str(tmp_path / "bad.pt")
    _scripted(Block())(src)
    cmd = f"touch {canary}".encode()
    payloads = {
        "os.system": b"\x80\x02cos\nsystem\n\x8c" + bytes([len(cmd)]) + cmd + b"\x85R.",
        "a TorchScript class called with arguments": b"\x80\x02c__torch__.module_zoo\nBlock\nK\x01\x85R.",
        "eval": b"\x80\x02cbuiltins\neval\n\x8c\x08print(1)\x85R.",
    }
    for what, pkl in payloads.items():
        _rewrite(src, bad, lambda ms, pkl=pkl: [(n, pkl if n.endswith("/data.pkl") else d) for n, d in ms])
        with pytest.raises((UnsafeCheckpointError, CorruptCheckpointError)):
            open_checkpoint(bad)
            pytest.fail(what)
    assert not os.path.exists(canary)


def test_mutated_archives_read_or_give_one_error(tmp_path):
    """500 seeded mutants of a scripted module's data.pkl and code/ records: each reads, or ends in a CkptstatError."""
    from zip_mutants import outcomes

    from ckptstat.analysis.summary import summarize

    src = str(tmp_path / "m.pt")
    _scripted(Block())(src)
    seen = outcomes(src, lambda n: n.endswith(("/data.pkl", ".py")), 500, 38, str(tmp_path / "x.pt"),
                    lambda p: summarize(open_checkpoint(p)))
    assert set(seen) <= {"read", "CorruptCheckpointError", "UnsafeCheckpointError"} and "read" in seen, seen
