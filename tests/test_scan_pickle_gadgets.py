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


def test_a_call_through_rebuild_from_type(tmp_path):
    transformers = pytest.importorskip("transformers")
    from torch._tensor import _rebuild_from_type_v2

    cls = transformers.TrainingArguments
    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps({"split_batches": True}))
    fields = [f for f in dataclasses.fields(cls) if f.init]
    args = [f.default if f.default is not dataclasses.MISSING else
            f.default_factory() if f.default_factory is not dataclasses.MISSING else None for f in fields]
    names = [f.name for f in fields]
    args[names.index("output_dir")] = str(tmp_path / "out")
    args[names.index("accelerator_config")] = str(secret)

    class Call:
        def __reduce__(self):
            return _rebuild_from_type_v2, (cls, cls, tuple(args), {})

    path = tmp_path / "model.pt"
    torch.save({"weight": torch.zeros(2), "args": Call()}, path)
    out = _load(str(path), str(tmp_path), "print('READ', r['args'].accelerator_config.split_batches)")
    assert "READ True" in out, out   # the file the pickle named was read
    r = scan_path(str(path))
    assert r["status"] == "unsafe" and "transformers.training_args.TrainingArguments" in r["unsafe_globals"], r["verdict"]
