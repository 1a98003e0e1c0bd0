"""Pickles of globals torch's weights_only allowlist holds that torch.load(weights_only=False) still turns against the
loading process (docs/security.md, the twenty-second pass; a helper's cases): the legacy stream's and the tar
format's persistent_load hand a module container's class back (a BUILD on it sets `dump_patches` and `__name__`, and
torch then writes `<__name__>.patch` with lines of the file's choosing), and `_rebuild_from_type_v2(func, ...)` calls
`func(*args)` (a TrainingArguments whose `accelerator_config` is a path: its __post_init__ reads that file). The real
torch.load, in a throw-away process, does each; scan must say UNSAFE."""
from __future__ import annotations

import dataclasses
import json
import os
import pickle
import struct
import subprocess
import sys

import pytest
from conftest import fixture_script

torch = pytest.importorskip("torch")

from ckptstat.analysis.scan import scan_path  # noqa: E402

MAGIC = 0x1950A86A20F9469CFC6C


def _text(s: str) -> bytes:   # BINUNICODE
    return b"X" + struct.pack("<I", len(s.encode())) + s.encode()


def _global(module: str, name: str) -> bytes:
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n"


def _patching(target: str, tar: bool) -> bytes:
    """An object pickle: a persistent id naming `_rebuild_tensor_v2` as a module container (legacy: ('module', fn,
    '', ''); tar: (fn, '', '')), BUILD setting its dump_patches and __name__, then a second id whose source differs."""
    head = b"" if tar else _text("module")
    fn = _global("torch._utils", "_rebuild_tensor_v2")
    return (b"\x80\x02(" + head + fn + _text("") + _text("") + b"tQ"
            + b"}" + _text("dump_patches") + b"\x88s}" + _text("__name__") + _text(target) + b"s\x86b0"
            + b"(" + head + fn + _text("x.py") + _text("# another source\n") + b"tQ0}.")


def legacy_patching(target: str) -> bytes:
    sysinfo = pickle.dumps({"protocol_version": 1001, "little_endian": True,
                            "type_sizes": {"short": 2, "int": 4, "long": 4}}, protocol=2)
    return (pickle.dumps(MAGIC, protocol=2) + pickle.dumps(1001, protocol=2) + sysinfo + _patching(target, False)
            + b"\x80\x02]q\x00.")


def tar_patching(target: str) -> bytes:
    members = {"storages": pickle.dumps(0, 2) + pickle.dumps([], 2), "tensors": pickle.dumps(0, 2),
               "pickle": _patching(target, True)}
    return fixture_script("make_scan_corpus")._tar(members)   # torch < 0.4's layout


def _load(path: str, cwd: str, then: str = "") -> str:
    code = (f"import torch, warnings\nwarnings.simplefilter('ignore')\nr = torch.load({path!r}, weights_only=False)\n"
            f"{then}")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd, timeout=300)
    return out.stdout + out.stderr


@pytest.mark.parametrize("build", [legacy_patching, tar_patching], ids=["legacy", "tar"])
def test_a_persistent_id_class_built_on(tmp_path, build):
    target = str(tmp_path / "PATCHED")
    path = tmp_path / "model.pt"
    path.write_bytes(build(target))
    _load(str(path), str(tmp_path))
    assert os.path.exists(target + ".patch"), "torch.load writes the .patch file"
    r = scan_path(str(path))
    assert r["status"] == "unsafe" and r["unsafe_globals"] == ["torch._utils._rebuild_tensor_v2"], r["verdict"]
    assert "its attributes set by BUILD" in r["verdict"]


def _trainer_arguments(tmp_path):
    """(TrainingArguments, its __init__ arguments: the defaults, its accelerator_config a JSON file it reads)."""
    cls = pytest.importorskip("transformers").TrainingArguments
    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps({"split_batches": True}))
    fields = [f for f in dataclasses.fields(cls) if f.init]
    args = [f.default if f.default is not dataclasses.MISSING else
            f.default_factory() if f.default_factory is not dataclasses.MISSING else None for f in fields]
    names = [f.name for f in fields]
    args[names.index("output_dir")] = str(tmp_path / "out")
    args[names.index("accelerator_config")] = str(secret)
    return cls, args


def test_a_call_through_rebuild_from_type(tmp_path):
    from torch._tensor import _rebuild_from_type_v2

    cls, args = _trainer_arguments(tmp_path)

    class Call:
        def __reduce__(self):
            return _rebuild_from_type_v2, (cls, cls, tuple(args), {})

    path = tmp_path / "model.pt"
    torch.save({"weight": torch.zeros(2), "args": Call()}, path)
    out = _load(str(path), str(tmp_path), "print('READ', r['args'].accelerator_config.split_batches)")
    assert "READ True" in out, out   # the file the pickle named was read
    r = scan_path(str(path))
    assert r["status"] == "unsafe" and "transformers.training_args.TrainingArguments" in r["unsafe_globals"], r["verdict"]


# A third helper's cases (red team of `scan`, 2026-12-07): what the walk did not follow exactly.

PAD = b" " * 70_000   # a memo index line longer than the walk reads at once; the C unpickler skips the spaces


def _torch_zip(path, pickle_bytes: bytes) -> None:
    import zipfile
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr("m/data.pkl", pickle_bytes)
        z.writestr("m/byteorder", "little")
        z.writestr("m/version", "3\n")


def test_a_memo_index_past_the_line_the_walk_reads(tmp_path):
    """PUT / GET with an index line of 70,000 spaces and a digit: the C unpickler reads it (PyLong_FromString skips
    the spaces), the walk took the memo for inexact and pushed an unknown value, so the legacy stream's persistent id
    ('module', _rebuild_tensor_v2, ...) and the BUILD on it (the first test's .patch writer) went unseen: safe."""
    target = str(tmp_path / "PATCHED")
    path = tmp_path / "model.pt"
    fn = _global("torch._utils", "_rebuild_tensor_v2")
    laundered = fn + b"p" + PAD + b"0\n0g" + PAD + b"0\n"
    path.write_bytes(legacy_patching(target).replace(fn, laundered, 1))
    _load(str(path), str(tmp_path))
    assert os.path.exists(target + ".patch"), "torch.load writes the .patch file"
    r = scan_path(str(path))
    assert r["status"] != "safe", r["verdict"]


def test_a_trainer_class_called_through_a_long_memo_index(tmp_path):
    """TrainingArguments, plain data only when rebuilt without a call, fetched back through such a memo index and
    called (REDUCE): its __init__ and __post_init__ run under torch.load."""
    pytest.importorskip("transformers")
    path = tmp_path / "model.pt"
    _torch_zip(path, b"\x80\x02" + _global("transformers.training_args", "TrainingArguments") + b"p" + PAD
               + b"0\n0g" + PAD + b"0\n(" + _text(str(tmp_path / "out")) + b"tR.")
    out = _load(str(path), str(tmp_path), "print('TYPE', type(r).__name__)")
    assert "TYPE TrainingArguments" in out, out
    r = scan_path(str(path))
    assert r["status"] != "safe", r["verdict"]


def test_a_call_through_rebuild_from_type_of_arguments_built_by_a_call(tmp_path):
    """`_rebuild_from_type_v2(TrainingArguments, ..., tuple([...]), {})`: the arguments a call of plain data made
    (builtins.tuple), which the walk does not keep: the call of the class went unjudged."""
    from torch._tensor import _rebuild_from_type_v2

    cls, args = _trainer_arguments(tmp_path)

    class Args:
        def __reduce__(self):
            return tuple, (list(args),)

    class Call:
        def __reduce__(self):
            return _rebuild_from_type_v2, (cls, cls, Args(), {})

    path = tmp_path / "model.pt"
    torch.save({"weight": torch.zeros(2), "args": Call()}, path)
    out = _load(str(path), str(tmp_path), "print('READ', r['args'].accelerator_config.split_batches)")
    assert "READ True" in out, out
    r = scan_path(str(path))
    assert r["status"] == "unsafe", r["verdict"]


@pytest.mark.parametrize("module, cls, args, keyword", [("torch", "Tensor", b")", "cdata"),
                                                  ("torch.storage", "UntypedStorage", b"K\x10\x85", "allocator")],
                         ids=["tensor-cdata", "storage-allocator"])
def test_keyword_arguments_of_an_allowed_class(tmp_path, module, cls, args, keyword):
    """NEWOBJ_EX `cls.__new__(cls, **kwargs)` of allowlisted torch classes: `torch.Tensor(cdata=n)` and
    `UntypedStorage(allocator=n)` take n as a C++ pointer (a TensorImpl, an Allocator whose virtual allocate() is
    called): torch.load(weights_only=False) crashes at the address the file chose. weights_only=True refuses
    NEWOBJ_EX, and no pickler writes it for these classes."""
    path = tmp_path / "model.pt"
    _torch_zip(path, b"\x80\x04" + _global(module, cls) + args + b"}\x8c" + bytes([len(keyword)])
               + keyword.encode() + b"\x8a\x05AAAAAs\x92.")
    code = f"import torch\ntorch.load({str(path)!r}, weights_only=False)\n"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=300)
    assert done.returncode < 0, done   # killed by a signal (SIGSEGV): torch followed the file's pointer
    r = scan_path(str(path))
    assert r["status"] == "unsafe", r["verdict"]


def test_a_build_on_a_class_its_own_loader_imports(tmp_path):
    """A DeepSpeed ZeRO optimizer state (its own loader: torch.load(weights_only=False), DeepSpeed's loss scaler
    accepted beside the allowlist), in the legacy format: the persistent id ('module', DynamicLossScaler, '', ''), a
    BUILD setting the class's dump_patches and __name__, a second id with another source: torch writes
    `<__name__>.patch`. The loader's accepted names dropped the BUILD's finding with the import's. DeepSpeed is stood
    in by a module of the same name and class (the test install has none)."""
    fake = tmp_path / "fake" / "deepspeed" / "runtime" / "fp16"
    fake.mkdir(parents=True)
    for d in (fake, fake.parent, fake.parent.parent):
        (d / "__init__.py").write_text("")
    (fake / "loss_scaler.py").write_text("class DynamicLossScaler:\n    cur_scale = 1.0\n")
    target = str(tmp_path / "PATCHED")
    cls = _global("deepspeed.runtime.fp16.loss_scaler", "DynamicLossScaler")
    pid = b"(" + _text("module") + cls
    main = (b"\x80\x02" + pid + _text("") + _text("") + b"tQ"
            + b"N}" + _text("dump_patches") + b"\x88s" + _text("__name__") + _text(target) + b"s\x86b0"
            + pid + _text("x.py") + _text("# another source\n") + b"tQ0}.")
    sysinfo = pickle.dumps({"protocol_version": 1001, "little_endian": True,
                            "type_sizes": {"short": 2, "int": 4, "long": 4}}, protocol=2)
    path = tmp_path / "zero_pp_rank_0_mp_rank_00_optim_states.pt"
    path.write_bytes(pickle.dumps(MAGIC, protocol=2) + pickle.dumps(1001, protocol=2) + sysinfo + main
                     + b"\x80\x02]q\x00.")
    code = f"import torch, warnings\nwarnings.simplefilter('ignore')\ntorch.load({str(path)!r}, weights_only=False)\n"
    subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=300, cwd=tmp_path,
                   env={**os.environ, "PYTHONPATH": str(tmp_path / "fake")})
    assert os.path.exists(target + ".patch"), "torch.load writes the .patch file"
    r = scan_path(str(path))
    assert r["status"] == "unsafe", r["verdict"]
    assert "BUILD on the imported global itself" in " ".join(f["why"] for p in r["pickles"] for f in p["findings"])
