"""TorchScript archives (`torch.jit.save` of a scripted or traced module, `.pt` / `.ptl` files served by Triton,
TorchServe, mobile), read without running their code (docs/torch.md, "TorchScript archives").

The archive is a torch.save zip with more records: `<folder>/data.pkl` pickles the module object tree (each module an
object of a TorchScript class, `__torch__.torch.nn.modules.linear.Linear`, or a mangled one,
`__torch__.torch.nn.modules.linear.___torch_mangle_3.Linear`: NEWOBJ with no arguments, then BUILD with its
attributes in slot order), its tensors as torch.save's (`torch._utils._rebuild_tensor_v2` over `data/<key>` records);
`code/__torch__/<module path>.py` declares each class, and which of its attributes are parameters and buffers:

    class Linear(Module):
      __parameters__ = ["weight", "bias", ]
      __buffers__ = []
      weight : Tensor

`torch.jit.load` compiles that code and builds the objects (its unpickler imports no Python: TorchScript classes come
from the compiled code). The reader builds each object as an inert record (pickled_objects.Instance) laid out as an
nn.Module's `__dict__` from its class's declaration: its parameters and buffers (in slot order, as the scripted
module's `named_parameters` / `named_buffers` give them) and its submodules (the attributes that are modules), so
the walk names the tensors as the loaded module's `state_dict()` names them. TorchScript keeps every buffer in its
state_dict (it has no non-persistent buffers); a tensor attribute that is neither is in no state_dict. The code is
only scanned for those declarations, never run; `ckptstat scan` says unknown (torch.jit.load runs it).
"""
from __future__ import annotations

import re
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Any

from ...errors import CorruptCheckpointError
from .allowlist import Refused
from .data_classes import DataGlobal
from .pickled_objects import Instance
from .unpickler import SafeUnpickler

CODE_BYTES = 64 << 20    # the code/ records read for declarations, in all (a 7B model's traced code: ~2 MB)
CODE_RECORDS = 20_000    # and their number (a traced BERT has 75; each is a read)
_CLASS = re.compile(r"^class ([A-Za-z_][\w]*)\(([\w.]*)\):", re.M)
_LIST = re.compile(r"^  (__parameters__|__buffers__) = \[(.*)\]$", re.M)
_ITEM = re.compile(r'"((?:[^"\\]|\\.)*)"')
CUSTOM_CLASSES = "__torch__.torch.classes."   # registered C++ classes (quantized packed params): no code/ record


@dataclass(frozen=True)
class Declared:
    """A TorchScript class as code/ declares it: whether it is a Module, its parameters' and buffers' names."""
    module: bool
    parameters: frozenset[str]
    buffers: frozenset[str]


def declarations(path: str, records: list[zipfile.ZipInfo], folder: str,
                 read: Callable[[zipfile.ZipInfo], bytes]) -> dict[str, Declared]:
    """Each class the code/ `records` (code_records) declare, by qualified name (`code/__torch__/a/b.py`'s `class C`
    is `__torch__.a.b.C`); `read(info)`: a record's bytes, its extent checked against the file first."""
    out: dict[str, Declared] = {}
    budget = CODE_BYTES
    for info in records:
        name = info.filename
        budget -= info.file_size
        if budget < 0:
            raise CorruptCheckpointError(path, f"the TorchScript archive's code/ records hold more than {CODE_BYTES:,} "
                                               "bytes")
        text = read(info).decode("utf-8", "replace")
        module = name[len(folder) + len("/code/"):-3].replace("/", ".")
        heads = list(_CLASS.finditer(text))
        for i, head in enumerate(heads):
            body = text[head.end(): heads[i + 1].start() if i + 1 < len(heads) else len(text)]
            lists = {m.group(1): frozenset(_ITEM.findall(m.group(2))) for m in _LIST.finditer(body)}
            out[f"{module}.{head.group(1)}"] = Declared(head.group(2) == "Module", lists.get("__parameters__", frozenset()),
                                                        lists.get("__buffers__", frozenset()))
    return out


def code_records(path: str, infos: list[zipfile.ZipInfo], folder: str) -> list[zipfile.ZipInfo]:
    """The archive's `code/**.py` records, which declare its classes: at most CODE_RECORDS (each is a read)."""
    prefix = f"{folder}/code/"
    records = [i for i in infos if i.filename.startswith(prefix) and i.filename.endswith(".py")]
    if len(records) > CODE_RECORDS:
        raise CorruptCheckpointError(path, f"the TorchScript archive holds {len(records):,} code/ records, more than "
                                           f"the {CODE_RECORDS:,} read for declarations")
    return records


class ScriptObject(Instance):
    """An object of a TorchScript class: BUILD's attributes, laid out as an nn.Module's __dict__ when it is one."""

    def __init__(self, shown: str, declared: Declared | None):
        super().__init__(shown)
        self.declared = declared

    def build(self, state: Any) -> None:
        super().build(state)
        d = self.declared
        if d is None or not d.module:
            return
        attributes = {k: v for k, v in self.items() if isinstance(k, str)}
        self["_parameters"] = {k: v for k, v in attributes.items() if k in d.parameters}
        self["_buffers"] = {k: v for k, v in attributes.items() if k in d.buffers}
        self["_modules"] = {k: v for k, v in attributes.items() if isinstance(v, Instance) and v.is_module()}


def _same(value: Any, *tag: Any) -> Any:   # torch.jit._pickle: build_intlist(list), restore_type_tag(value, "List[int]")
    return value


class ScriptUnpickler(SafeUnpickler):
    """torch's weights_only allowlist, TorchScript's classes (`__torch__.*`, recorded with their declarations) and the
    list helpers TorchScript's pickler writes (torch/jit/_pickle.py); nothing is imported or called."""

    HELPERS = {f"torch.jit._pickle.{n}": _same for n in ("build_intlist", "build_doublelist", "build_boollist",
                                                         "build_tensorlist", "restore_type_tag")}

    def __init__(self, file: IO[bytes], path: str, record: str, storages: bool = True, limit: int | None = None,
                 declared: dict[str, Declared] | None = None):
        super().__init__(file, path, record, storages, limit)
        self.declared = declared or {}
        self.script_classes: set[str] = set()

    def find_class(self, module: str, name: str) -> object:
        full = f"{module}.{name}"
        if full in self.HELPERS:
            return self.HELPERS[full]
        if not module.startswith("__torch__"):
            return super().find_class(module, name)
        declared = self.declared.get(full)
        if declared is None and not full.startswith(CUSTOM_CLASSES):
            raise Refused(f"TorchScript class {full[:200]!r} is declared in no code/ record")
        self.script_classes.add(full)
        return DataGlobal(full, new=lambda: ScriptObject(full, declared))


def script_note(classes: frozenset[str]) -> str:
    return (f"a TorchScript archive (torch.jit.save): {len(classes)} TorchScript class(es) read as inert records laid "
            "out by their code/ declarations, tensors named as the loaded module's state_dict() names them (every "
            "buffer kept, as TorchScript keeps them); its code is not run (`ckptstat scan` says unknown: torch.jit.load "
            "compiles and runs it)")
