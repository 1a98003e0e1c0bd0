"""Builders and oracles for PyTorch ``torch.export`` archives (``.pt2``), for the pt2 reader and ``ckptstat scan`` tests.

Not collected by pytest (no test_ prefix). Needs torch (the test install pins 2.13.0); nothing runs at import.

API
- ``benign(folder, names=None) -> {case: path}``: real archives written by ``torch.export.save`` (``package_pt2`` for
  the two-program case), one per name in BENIGN.
- ``oracle(path) -> {name: entry}``: what torch itself loads. One entry per ``ep.state_dict`` item (kind "weight")
  and per ``ep.constants`` item (kind "constant"); keys are the fqns, ``<program>/<fqn>`` when the archive holds a
  program other than "model" (read with ``load_pt2``, as ``torch.export.load`` only returns "model").
- ``hostile(folder, marker, python=None) -> [Case]``: archives rewritten from benign ones so that one member carries
  a payload that creates the empty file ``marker``; ``Case.executes`` is measured by ``torch.export.load`` in a
  subprocess (``python``: default this interpreter).
- ``measure(paths, marker, python=None, call=False)``: that measurement (``call``: also run ``ep.module()`` on the
  example inputs); ``rewrite``/``members``: the member-preserving zip rewriter and reader; ``payload_pickle`` /
  ``torch_zip``: the payload bytes. The loader strings (TORCH_LOAD, ARTIFACT, ...) are the words of Case.loader.

Archive layout (torch/export/pt2_archive/_package.py ``package_pt2``; every member under one root folder, the
file's stem, stored uncompressed, data 64-byte aligned by an "FB" extra field padded with "Z"):
``archive_format`` "pt2", ``archive_version`` "0", ``byteorder`` "little", ``.data/version`` "6\\n",
``.data/serialization_id``; per program ``models/<p>.json`` (the graph), ``data/sample_inputs/<p>.pt`` (torch.save
zip), ``data/weights/<p>_weights_config.json`` and ``data/constants/<p>_constants_config.json``:
``{"config": {fqn: {"path_name", "is_param", "use_pickle", "tensor_meta": {"dtype": ScalarType int,
"sizes"/"strides": [{"as_int": n}], "storage_offset": {"as_int": n}, "requires_grad", "device": {"type", "index"},
"layout": 7}}}}`` (tensor_meta null for objects). A raw weight file (``weight_<i>`` / ``tensor_<i>``) is the
whole untyped storage of its group; tied weights and views name the same ``path_name`` with their own
sizes/strides/offset. ``use_pickle`` files are torch.save zips of tensor subclasses; ``opaque_obj_<i>`` plain
pickles, ``custom_obj_<i>`` TorchScript pickles.
"""
from __future__ import annotations

import io
import json
import struct
import subprocess
import sys
import zipfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

BENIGN = ("mlp", "conv_bn", "tied", "constant", "nonpersistent", "dtypes", "views", "multi", "subclass")

# How torch.export.load reads a member (the same words as ckptstat/formats/torch/pt2.py).
TORCH_LOAD = "torch.load(weights_only=False)"
ARTIFACT = "torch.load(weights_only=True), then weights_only=False when that raises (deserialize_torch_artifact)"
PICKLE_LOADS = "pickle.loads"
SCRIPT_OBJ = "torch._C._pickle_load_obj (TorchScript's unpickler)"
SYMPIFY = "sympy.sympify (eval) of a SymExpr expr_str (GraphModuleDeserializer._parse_sym_expr)"
GUARDS = "guards_code compiled by ep.module() (_unlift._convert_guards_code_to_fn), run when that module is called"
TEXT = "read as text (_load_extra_files), never unpickled"

_ALIGN = 64
# torch dtype name -> the safetensors-style code ckptstat uses
_CODES = {
    "float64": "F64", "float32": "F32", "float16": "F16", "bfloat16": "BF16", "float8_e4m3fn": "F8_E4M3",
    "float8_e5m2": "F8_E5M2", "float8_e4m3fnuz": "F8_E4M3FNUZ", "float8_e5m2fnuz": "F8_E5M2FNUZ",
    "float8_e8m0fnu": "F8_E8M0", "int64": "I64", "int32": "I32", "int16": "I16", "int8": "I8", "uint8": "U8",
    "uint16": "U16", "uint32": "U32", "uint64": "U64", "bool": "BOOL", "complex64": "C64", "complex128": "C128",
}


@dataclass(frozen=True)
class Case:
    """One hostile archive: ``member`` (full zip name, root folder included) holds the payload, ``loader`` says how
    torch.export.load reads it, ``executes`` whether the marker appeared under torch.export.load."""

    name: str
    path: Path
    member: str
    loader: str
    executes: bool
    note: str = ""


# --- benign archives ---------------------------------------------------------------------------------------------


def _modules() -> dict[str, Callable[[], dict[str, Any]]]:
    """Builders of each BENIGN case: {program name: ExportedProgram}. Classes are local so torch stays lazy."""
    import torch
    from torch import nn

    def export(mod: nn.Module, *args: Any) -> Any:
        return torch.export.export(mod, args)

    class Mlp(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc1, self.act, self.fc2 = nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc2(self.act(self.fc1(x)))

    class ConvBn(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv, self.bn = nn.Conv2d(2, 3, 3), nn.BatchNorm2d(3)
            with torch.no_grad():
                self.bn.running_mean.uniform_(-1, 1)
                self.bn.running_var.uniform_(1, 2)
                self.bn.num_batches_tracked.fill_(7)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.bn(self.conv(x))

    class Tied(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb, self.out = nn.Embedding(5, 4), nn.Linear(4, 5, bias=False)
            self.out.weight = self.emb.weight

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            return self.out(self.emb(ids))

    class Constant(nn.Module):
        """Plain tensor attributes used in forward: export lifts them into ep.constants; shift views scale."""

        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(3, 3)
            self.scale = torch.tensor([1.0, 2.0, 3.0, 4.0])
            self.shift = self.scale[1:]

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.lin(x) * self.scale[:3] + self.shift

    class NonPersistent(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(3, 3)
            self.register_buffer("mask", torch.tensor([1.0, 0.0, 1.0]), persistent=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.lin(x) * self.mask

    class Dtypes(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w_bf16 = nn.Parameter(torch.randn(3, 3).bfloat16())
            self.w_f16 = nn.Parameter(torch.randn(3).half())
            self.w_f8 = nn.Parameter(torch.randn(2, 3).to(torch.float8_e4m3fn), requires_grad=False)
            self.register_buffer("idx", torch.tensor([0, 2, 1], dtype=torch.int64))
            self.register_buffer("flag", torch.tensor([True, False, True]))
            self.register_buffer("f64", torch.tensor([0.1, -2.5, 3.0], dtype=torch.float64))
            self.register_buffer("empty", torch.zeros(0, 3))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = (x.bfloat16() @ self.w_bf16).float() + self.w_f16.float() + self.w_f8.float().sum()
            return y[:, self.idx] * self.flag + self.f64.float() + self.empty.sum()

    class Views(nn.Module):
        """A transposed parameter, and two parameters viewing one 12-float storage (elements 10, 11 unused)."""

        def __init__(self) -> None:
            super().__init__()
            self.t = nn.Parameter(torch.randn(4, 6).t())
            base = torch.randn(12)
            self.v1 = nn.Parameter(base[:6].view(2, 3))
            self.v2 = nn.Parameter(base[4:10])

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x @ self.t + self.v1.sum() + self.v2.sum()

    class Head(nn.Module):
        def __init__(self, shared: nn.Linear) -> None:
            super().__init__()
            self.enc, self.proj = shared, nn.Linear(3, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.proj(self.enc(x))

    def multi() -> dict[str, Any]:
        enc = nn.Linear(4, 3)
        return {"a": export(enc, torch.randn(1, 4)), "b": export(Head(enc), torch.randn(1, 4))}

    def subclass() -> dict[str, Any]:
        from torch.testing._internal.two_tensor import TwoTensor

        class Sub(nn.Module):
            """A TwoTensor parameter (use_pickle weight) and a non-persistent TwoTensor buffer (use_pickle constant)."""

            def __init__(self) -> None:
                super().__init__()
                self.lin = nn.Linear(3, 3)
                self.p = nn.Parameter(TwoTensor(torch.randn(3), torch.randn(3)))
                self.register_buffer("nb", TwoTensor(torch.ones(3), torch.zeros(3)), persistent=False)

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                return self.lin(x) + self.p + self.nb

        return {"model": export(Sub(), torch.randn(2, 3))}

    def conv_bn() -> dict[str, Any]:
        return {"model": export(ConvBn().eval(), torch.randn(1, 2, 5, 5))}

    return {
        "mlp": lambda: {"model": export(Mlp(), torch.randn(2, 4))},
        "conv_bn": conv_bn,
        "tied": lambda: {"model": export(Tied(), torch.tensor([[1, 2]]))},
        "constant": lambda: {"model": export(Constant(), torch.randn(2, 3))},
        "nonpersistent": lambda: {"model": export(NonPersistent(), torch.randn(2, 3))},
        "dtypes": lambda: {"model": export(Dtypes(), torch.randn(2, 3))},
        "views": lambda: {"model": export(Views(), torch.randn(2, 6))},
        "multi": multi,
        "subclass": subclass,
    }


def benign(folder: Path, names: Iterable[str] | None = None) -> dict[str, Path]:
    """Writes ``<folder>/<case>.pt2`` for each case (default: all of BENIGN) with ``torch.export.save``, or with
    ``torch.export.pt2_archive._package.package_pt2(f, exported_programs={"a": ..., "b": ...})`` for "multi"."""
    import torch
    from torch.export.pt2_archive._package import package_pt2

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    builders = _modules()
    out: dict[str, Path] = {}
    for name in names or BENIGN:
        torch.manual_seed(0)
        programs = builders[name]()
        path = folder / f"{name}.pt2"
        if list(programs) == ["model"]:
            torch.export.save(programs["model"], path)
        else:
            package_pt2(path, exported_programs=programs)
        out[name] = path
    return out


# --- oracle ------------------------------------------------------------------------------------------------------


def _program_names(path: Path) -> list[str]:
    """Program names as load_pt2 (_load_exported_programs) finds them: every ``models/<name>.json``."""
    with zipfile.ZipFile(path) as zf:
        rels = [n.split("/", 1)[1] for n in zf.namelist() if "/" in n]
    return sorted(r[len("models/"):-len(".json")] for r in rels if r.startswith("models/") and r.endswith(".json"))


def _values(t: Any) -> np.ndarray:
    """Logical values (strides and offset applied): float64 (bf16/f16/fp8 through torch's float32), int64, bool."""
    import torch

    t = t.detach()
    if t.dtype == torch.bool:
        return t.numpy().copy()
    if t.is_complex():
        return t.to(torch.complex128).numpy()
    if t.is_floating_point():
        return t.to(torch.float64 if t.dtype == torch.float64 else torch.float32).numpy().astype(np.float64)
    return t.to(torch.int64).numpy()


def _entry(kind: str, value: Any, spec: Any, storages: dict[int, int]) -> dict[str, Any]:
    """One oracle entry; ``storage`` numbers distinct loaded storages (equal for tied weights and views)."""
    import torch
    from torch.export.graph_signature import InputKind

    entry: dict[str, Any] = {
        "kind": kind,
        "param": spec.kind == InputKind.PARAMETER if spec is not None else isinstance(value, torch.nn.Parameter),
        "role": spec.kind.name.lower() if spec is not None else None,   # parameter, buffer, constant_tensor, ...
        "persistent": spec.persistent if spec is not None else None,    # buffers only
        "dtype": None, "shape": None, "values": None, "storage": None, "subclass": None, "inner": None,
    }
    if not isinstance(value, torch.Tensor):       # a ScriptObject or opaque object constant
        entry["subclass"] = f"{type(value).__module__}.{type(value).__qualname__}"
        return entry
    entry["dtype"] = _CODES.get(str(value.dtype).removeprefix("torch."), str(value.dtype))
    entry["shape"] = list(value.shape)
    if type(value.data) is not torch.Tensor:      # _package._is_tensor_subclass: saved with use_pickle
        entry["subclass"] = f"{type(value.data).__module__}.{type(value.data).__qualname__}"
        attrs, _ = value.__tensor_flatten__()
        entry["inner"] = {a: _values(getattr(value, a)) for a in attrs}
        return entry
    storage = value.untyped_storage()
    key = storage.data_ptr() if storage.nbytes() else -len(storages) - 1
    entry["storage"] = storages.setdefault(key, len(storages))
    entry["values"] = _values(value)
    return entry


def oracle(path: Path) -> dict[str, dict[str, Any]]:
    """What torch loads: ``torch.export.load`` (one program, "model") or ``load_pt2(...).exported_programs``.

    Entry fields: kind ("weight": ep.state_dict, buffers included; "constant": ep.constants, which also holds
    non-persistent buffers), param, role and persistent (from ep.graph_signature.input_specs), dtype (safetensors
    code), shape, values (numpy; None for a tensor subclass, whose ``inner`` maps ``__tensor_flatten__`` attributes
    to values), storage (tied/shared tensors: two names, one storage number), subclass (class of a subclass or object).
    """
    import torch
    from torch.export.pt2_archive._package import load_pt2

    names = _program_names(Path(path))
    if names == ["model"]:
        programs = {"model": torch.export.load(str(path))}
    else:
        programs = load_pt2(str(path)).exported_programs
    out: dict[str, dict[str, Any]] = {}
    storages: dict[int, int] = {}                  # across programs: each program loads its own storages
    for program, ep in programs.items():
        specs = {s.target: s for s in ep.graph_signature.input_specs if s.target is not None}
        for kind, items in (("weight", ep.state_dict.items()), ("constant", ep.constants.items())):
            for fqn, value in items:
                key = fqn if names == ["model"] else f"{program}/{fqn}"
                out[key] = _entry(kind, value, specs.get(fqn), storages)
    return out


# --- payloads and the zip rewriter -------------------------------------------------------------------------------


def payload_pickle(marker: Path, protocol: int = 2) -> bytes:
    """A pickle whose REDUCE calls ``builtins.open(marker, "w")`` (creates an empty file). Protocol 0 is ASCII."""
    path = str(marker)
    if protocol == 0:
        return f"cbuiltins\nopen\n(V{path}\nVw\ntR.".encode("raw_unicode_escape")

    def text(s: str) -> bytes:
        b = s.encode()
        return b"X" + struct.pack("<I", len(b)) + b

    return b"\x80\x02cbuiltins\nopen\n" + text(path) + text("w") + b"\x86R."


def torch_zip(data_pkl: bytes) -> bytes:
    """A torch.save-style zip (``archive/data.pkl``, ``byteorder``, ``.data/version``) around ``data_pkl``,
    written by torch._C.PyTorchFileWriter as torch.save does; TorchScript's _pickle_save writes the same layout."""
    import torch

    buf = io.BytesIO()
    writer = torch._C.PyTorchFileWriter(buf)
    writer.write_record("data.pkl", data_pkl, len(data_pkl))
    writer.write_record("byteorder", b"little", 6)
    writer.write_end_of_file()
    return buf.getvalue()


def _write_zip(dst: Path, members: Sequence[tuple[str, bytes]]) -> Path:
    """Stored (uncompressed) zip, each member's data 64-byte aligned by an "FB" extra field as torch pads it."""
    with zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as zf:
        for name, data in members:
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_STORED
            start = zf.fp.tell() + 30 + len(name.encode()) + 4     # local header, name, extra field header
            pad = -start % _ALIGN
            info.extra = b"FB" + struct.pack("<H", pad) + b"Z" * pad
            zf.writestr(info, data)
    return dst


def members(path: Path) -> tuple[str, list[tuple[str, bytes]]]:
    """(root folder, [(name relative to the root, bytes)]) of an archive, in order."""
    with zipfile.ZipFile(path) as zf:
        names = zf.namelist()
        root = names[0].split("/", 1)[0]
        return root, [(n[len(root) + 1:], zf.read(n)) for n in names]


def rewrite(src: Path, dst: Path, replace: dict[str, bytes] | None = None, add: dict[str, bytes] | None = None) -> Path:
    """Copies ``src`` to ``dst`` with members (names relative to the root) replaced or appended; every other member
    keeps its name, order and bytes."""
    root, items = members(src)
    replace, add = replace or {}, add or {}
    missing = set(replace) - {n for n, _ in items}
    if missing:
        raise KeyError(f"not in {src}: {sorted(missing)}")
    out = [(f"{root}/{n}", replace.get(n, b)) for n, b in items]
    out += [(f"{root}/{n}", b) for n, b in add.items()]
    return _write_zip(Path(dst), out)


# --- hostile archives --------------------------------------------------------------------------------------------

_DRIVER = r"""
import json, pathlib, sys
import torch
marker, call = pathlib.Path(sys.argv[1]), sys.argv[2] == "1"
seen = []
for p in sys.argv[3:]:
    marker.unlink(missing_ok=True)
    try:
        ep = torch.export.load(p)
        if call:
            args, kwargs = ep.example_inputs
            ep.module()(*args, **kwargs)
    except Exception:
        pass
    seen.append(marker.exists())
    marker.unlink(missing_ok=True)
print("PT2_MEASURE " + json.dumps(seen))
"""


def measure(paths: Sequence[Path], marker: Path, python: str | None = None, call: bool = False) -> list[bool]:
    """Whether ``torch.export.load(path)`` (then, when ``call``, ``ep.module()`` run on ep.example_inputs) creates
    ``marker``, per path, in one subprocess of ``python`` (default: this interpreter); the marker is removed before
    and after each."""
    if not paths:
        return []
    cmd = [python or sys.executable, "-c", _DRIVER, str(marker), "1" if call else "0", *map(str, paths)]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    for line in run.stdout.splitlines():
        if line.startswith("PT2_MEASURE "):
            return [bool(x) for x in json.loads(line[len("PT2_MEASURE "):])]
    raise RuntimeError(f"measurement failed ({run.returncode}): {run.stderr[-2000:]}")


def _config(src: Path, rel: str) -> dict[str, Any]:
    return json.loads(dict(members(src)[1])[rel])


def _with_constant(src: Path, fqn: str, path_name: str) -> bytes:
    """The constants config of ``src`` plus an object entry, as _package._package_constants writes one."""
    config = _config(src, "data/constants/model_constants_config.json")
    config["config"][fqn] = {"path_name": path_name, "is_param": False, "use_pickle": True, "tensor_meta": None}
    return json.dumps(config).encode()


def _model_json(src: Path, edit: Callable[[dict[str, Any]], None]) -> bytes:
    doc = _config(src, "models/model.json")
    edit(doc)
    return json.dumps(doc).encode()


def _symbolic_size(expr: str) -> Callable[[dict[str, Any]], None]:
    def edit(doc: dict[str, Any]) -> None:
        meta = next(iter(doc["graph_module"]["graph"]["tensor_values"].values()))
        meta["sizes"][0] = {"as_expr": {"expr_str": expr, "hint": {"as_int": meta["sizes"][0]["as_int"]}}}
    return edit


def _guards(code: str) -> Callable[[dict[str, Any]], None]:
    def edit(doc: dict[str, Any]) -> None:
        doc["guards_code"] = [code]
    return edit


def _v27_zip(dst: Path, mlp: Path, payload: bytes) -> Path:
    """The pre-2.8 layout torch.export.load falls back to when load_pt2 raises RuntimeError: top-level ``version``,
    ``serialized_exported_program.json`` and ``serialized_{state_dict,constants,example_inputs}.pt``."""
    parts = dict(members(mlp)[1])
    schema = json.loads(parts["models/model.json"])["schema_version"]
    return _write_zip(dst, [
        ("version", f"{schema['major']}.{schema['minor']}".encode()),
        ("serialized_exported_program.json", parts["models/model.json"]),
        ("serialized_state_dict.pt", payload),
        ("serialized_constants.pt", b""),
        ("serialized_example_inputs.pt", parts["data/sample_inputs/model.pt"]),
    ])


def hostile(folder: Path, marker: Path, python: str | None = None) -> list[Case]:
    """One archive per member torch.export.load unpickles (plus models/model.json's sympify and guards_code, and a
    member it never reads), each rewritten from a benign archive in ``folder/bases``; ``executes`` measured with
    ``python`` (default this interpreter)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    bases = benign(folder / "bases", ("mlp", "constant", "subclass"))
    mlp, const, sub = bases["mlp"], bases["constant"], bases["subclass"]
    evil, evil_zip = payload_pickle(marker), torch_zip(payload_pickle(marker))
    weights = _config(sub, "data/weights/model_weights_config.json")["config"]
    pickled_weight = "data/weights/" + next(m["path_name"] for m in weights.values() if m["use_pickle"])
    consts = _config(sub, "data/constants/model_constants_config.json")["config"]
    pickled_const = "data/constants/" + next(m["path_name"] for m in consts.values() if m["use_pickle"])
    sym = f"open({str(marker)!r}, 'w')"
    # name: (base, member, loader, note, build(dst))
    plan: dict[str, tuple[Path, str, str, str, Callable[[Path], Path]]] = {
        "weight_use_pickle": (sub, pickled_weight, TORCH_LOAD, "_load_state_dict",
                              lambda d: rewrite(sub, d, {pickled_weight: evil_zip})),
        "weight_use_pickle_raw": (sub, pickled_weight, TORCH_LOAD, "_load_state_dict; torch.load's legacy (non-zip) path",
                                  lambda d: rewrite(sub, d, {pickled_weight: evil})),
        "constant_use_pickle": (sub, pickled_const, TORCH_LOAD, "_load_constants",
                                lambda d: rewrite(sub, d, {pickled_const: evil_zip})),
        "opaque_obj": (const, "data/constants/opaque_obj_0", PICKLE_LOADS, "_load_constants",
                       lambda d: rewrite(const, d, {"data/constants/model_constants_config.json":
                                                    _with_constant(const, "evil", "opaque_obj_0")},
                                         {"data/constants/opaque_obj_0": evil})),
        "custom_obj": (const, "data/constants/custom_obj_0", SCRIPT_OBJ,
                       "_load_constants; TorchScript's unpickler refuses builtins.open ('Unknown type name')",
                       lambda d: rewrite(const, d, {"data/constants/model_constants_config.json":
                                                    _with_constant(const, "evil", "custom_obj_0")},
                                         {"data/constants/custom_obj_0": evil_zip})),
        "sample_inputs": (mlp, "data/sample_inputs/model.pt", ARTIFACT, "GraphModuleDeserializer.deserialize",
                          lambda d: rewrite(mlp, d, {"data/sample_inputs/model.pt": evil_zip})),
        "legacy_weights": (mlp, "data/weights/model.pt", ARTIFACT,
                           "_load_state_dict returns its bytes when present; deserialized after the graph",
                           lambda d: rewrite(mlp, d, add={"data/weights/model.pt": evil_zip})),
        "legacy_constants": (mlp, "data/constants/model.pt", ARTIFACT,
                             "_load_constants returns its bytes when present; deserialized before the graph",
                             lambda d: rewrite(mlp, d, add={"data/constants/model.pt": evil_zip})),
        "sympy_expr": (mlp, "models/model.json", SYMPIFY, "a tensor size {'as_expr': {'expr_str': \"open(...)\"}}",
                       lambda d: rewrite(mlp, d, {"models/model.json": _model_json(mlp, _symbolic_size(sym))})),
        "guards_code": (mlp, "models/model.json", GUARDS, "",
                        lambda d: rewrite(mlp, d, {"models/model.json":
                                                   _model_json(mlp, _guards(f"{sym} is not None"))})),
        "extra_member": (mlp, "extra/notes.pkl", TEXT, "protocol-0 (ASCII) pickle, so the text read succeeds",
                         lambda d: rewrite(mlp, d, add={"extra/notes.pkl": payload_pickle(marker, 0)})),
        "v27_zip": (mlp, "serialized_state_dict.pt", ARTIFACT,
                    "torch.export.load's fallback after load_pt2 raises RuntimeError (no root folder)",
                    lambda d: _v27_zip(d, mlp, evil_zip)),
    }
    paths = {name: build(folder / f"{name}.pt2") for name, (*_, build) in plan.items()}
    seen = dict(zip(paths, measure(list(paths.values()), marker, python)))
    (at_call,) = measure([paths["guards_code"]], marker, python, call=True)
    cases = []
    for name, (base, member, loader, note, _) in plan.items():
        root = "" if name == "v27_zip" else members(base)[0] + "/"
        if name == "guards_code":
            note = f"calling ep.module() on the example inputs runs it: {at_call}"
        cases.append(Case(name, paths[name], root + member, loader, seen[name], note))
    return cases


__all__ = ["BENIGN", "Case", "benign", "oracle", "hostile", "measure", "rewrite", "members", "payload_pickle",
           "torch_zip", "TORCH_LOAD", "ARTIFACT", "PICKLE_LOADS", "SCRIPT_OBJ", "SYMPIFY", "GUARDS", "TEXT"]
