"""torch.export archives (`.pt2`: torch.export.save, torch.export.pt2_archive._package.package_pt2), read without
torch (docs/torch.md, "torch.export archives").

A zip whose records torch's reader finds as it finds a torch.save zip's (containers.TorchZip: under the folder of the
first entry), with `archive_format` holding `pt2`. Each program NAME has its graph in `models/NAME.json` (not read
here) and, beside it (torch/export/pt2_archive/_package.py `_load_state_dict`, `_load_constants`):

- `data/weights/NAME_weights_config.json`: {"config": {fqn: {"path_name", "is_param", "use_pickle", "tensor_meta"}}}.
  A weight not pickled is the record `data/weights/<path_name>`, a storage's raw bytes, which torch.as_strided views
  with tensor_meta's sizes, strides and storage_offset (in elements): weights sharing a path_name share a storage.
- `data/constants/NAME_constants_config.json`: the same for the lifted tensor constants (path names `tensor_*`); the
  `custom_obj_*` records (TorchScript objects) and `opaque_obj_*` records (pickled Python objects) hold no tensor.

What torch.export.load unpickles (`Archive.unpickled`: a pickled weight or constant, a legacy layout's state dict,
those objects, the sample inputs) is not read here; the totals say what they leave out (Checkpoint.partial), and
`ckptstat scan` follows each (analysis/scan/pt2.py).
"""
from __future__ import annotations

import json
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, Any

from ...core import Checkpoint, dtypes
from ...core.files import file_size, open_regular
from ...core.io import prefetch
from ...core.limits import limits
from ...errors import CheckpointError, CorruptCheckpointError, UnknownFormatError, reading
from ..registry import Format, Probe, register
from .allowlist import StorageRef, TensorRef
from .containers import StorageRecord, TorchZip, data_offset, zip_open
from .reader import build_tensors
from .zipstream import ZipStreamReader

FORMAT = "pytorch export (.pt2)"
MAX_SMALL = 1 << 16     # archive_format, byteorder, version records
# torch/_export/serde/schema.py ScalarType -> canonical dtype; tests/test_pt2.py reads it against torch's serializer.
SCALAR_TYPES: dict[int, str] = {
    1: "U8", 2: "I8", 3: "I16", 4: "I32", 5: "I64", 6: "F16", 7: "F32", 8: "F64", 9: "C32", 10: "C64", 11: "C128",
    12: "BOOL", 13: "BF16", 28: "U16", 29: "F8_E4M3", 30: "F8_E5M2", 31: "F8_E4M3FNUZ", 32: "F8_E5M2FNUZ",
    33: "F8_E8M0", 34: "U32", 35: "U64",
}
STRIDED = 7             # schema.Layout.Strided
# How torch.export.load reads what it unpickles (the scan report's words).
TORCH_LOAD = "torch.load(weights_only=False)"
ARTIFACT = "torch.load(weights_only=True), then weights_only=False when that raises (deserialize_torch_artifact)"
PICKLE_LOADS = "pickle.loads"
SCRIPT_OBJ = "torch._C._pickle_load_obj (TorchScript's unpickler)"


@dataclass(frozen=True)
class Payload:
    """One entry of a weights or constants config."""
    program: str
    kind: str               # "weight" or "constant"
    fqn: str
    record: str             # after the archive folder: data/weights/weight_0
    pickled: bool           # use_pickle: the record is a torch.save of the value
    param: bool
    meta: Any               # tensor_meta (a dict; None for a pickled value or an object)

    @property
    def name(self) -> str:
        return self.fqn if self.program == "model" else f"{self.program}/{self.fqn}"


@dataclass
class Archive:
    programs: list[str]
    payloads: list[Payload] = field(default_factory=list)
    unpickled: list[tuple[str, str]] = field(default_factory=list)   # (record, how torch.export.load unpickles it)
    compiled: list[str] = field(default_factory=list)   # AOTInductor records: libraries aoti_load_package loads
    byteorder: str = "little"


Read = Callable[[zipfile.ZipInfo, int], bytes]   # a record's bytes, at most the int (the caller bounds the read)


def is_pt2(tz: TorchZip, read: Read) -> bool:
    """Whether torch's reader finds `archive_format` holding `pt2` (as load_pt2 checks the archive)."""
    info = tz.locate("archive_format")
    return info is not None and info.file_size <= MAX_SMALL and read(info, MAX_SMALL).strip() == b"pt2"


def _names(tz: TorchZip, folder: str, suffix: str) -> list[str]:
    """The X of every record `folder` + X + `suffix` (one level: no `/` in X)."""
    start, end = folder.encode(), suffix.encode()
    out = []
    for r in tz.records:
        if r.startswith(start) and r.endswith(end) and len(r) > len(start) + len(end):
            x = r[len(start):len(r) - len(end)]
            if b"/" not in x:
                out.append(x.decode("utf-8", "replace"))
    return sorted(out)


def json_record(path: str, info: zipfile.ZipInfo, read: Read) -> Any:
    """A JSON record of the archive (a config, a program's graph), at most `index_bytes` (the --limit)."""
    cap = limits().index_bytes
    if info.file_size > cap:
        raise CorruptCheckpointError(path, f"{info.filename} is {info.file_size:,} bytes, more than the {cap:,} "
                                           "ckptstat reads (--limit index_bytes=N)")
    try:
        return json.loads(read(info, cap).decode("utf-8"))
    except (ValueError, RecursionError):
        raise CorruptCheckpointError(path, f"{info.filename} is not JSON") from None


def _config(path: str, tz: TorchZip, read: Read, record: str) -> dict[str, Any] | None:
    info = tz.locate(record)
    if info is None:
        return None
    doc = json_record(path, info, read)
    config = doc.get("config") if isinstance(doc, dict) else None
    if not isinstance(config, dict):
        raise CorruptCheckpointError(path, f"{info.filename} has no \"config\" object")
    return config


def _payloads(path: str, program: str, kind: str, folder: str, config: dict[str, Any], a: Archive) -> None:
    for fqn, entry in config.items():
        path_name = entry.get("path_name") if isinstance(entry, dict) else None
        if not isinstance(path_name, str) or not path_name or "/" in path_name:
            raise CorruptCheckpointError(path, f"{kind} {fqn[:80]!r} of program {program!r}: no plain path_name")
        record = folder + path_name
        pickled = entry.get("use_pickle") is True
        if kind == "constant" and not path_name.startswith("tensor_"):
            # torch.export.load: custom_obj_* through TorchScript's unpickler, opaque_obj_* through pickle.loads;
            # any other prefix raises before either
            how = SCRIPT_OBJ if path_name.startswith("custom_obj_") else \
                PICKLE_LOADS if path_name.startswith("opaque_obj_") else None
            if how is not None:
                a.unpickled.append((record, how))
            continue
        if pickled:
            a.unpickled.append((record, TORCH_LOAD))
        a.payloads.append(Payload(program, kind, fqn, record, pickled, entry.get("is_param") is True,
                                  None if pickled else entry.get("tensor_meta")))


def read_archive(path: str, tz: TorchZip, read: Read) -> Archive:
    """The archive's programs, payloads and what torch.export.load would unpickle (nothing is unpickled here)."""
    a = Archive(_names(tz, "models/", ".json"))
    order = tz.locate("byteorder")
    if order is not None and order.file_size <= MAX_SMALL:
        a.byteorder = read(order, MAX_SMALL).decode("ascii", "replace").strip()
        if a.byteorder not in ("little", "big"):
            raise CorruptCheckpointError(path, f"byteorder record says {a.byteorder[:20]!r}")
    for program in a.programs:
        for kind, folder in (("weight", "data/weights/"), ("constant", "data/constants/")):
            if tz.locate(f"{folder}{program}.pt") is not None:   # the layout before the configs, first when present
                a.unpickled.append((f"{folder}{program}.pt", ARTIFACT))
                continue
            config = _config(path, tz, read, f"{folder}{program}_{kind}s_config.json")
            if config is not None:
                _payloads(path, program, kind, folder, config, a)
        if tz.locate(f"data/sample_inputs/{program}.pt") is not None:
            a.unpickled.append((f"data/sample_inputs/{program}.pt", ARTIFACT))
    a.compiled = [r.decode("utf-8", "replace") for r in tz.records
                  if r.startswith(b"data/aotinductor/") and r.endswith((b".so", b".dll", b".dylib"))]
    return a


def _ints(path: str, p: Payload, key: str, value: object) -> tuple[int, ...]:
    """A tensor_meta list of {"as_int": n} (a symbolic size has no as_int: not a stored weight's)."""
    if not isinstance(value, list) or len(value) > 64:
        raise CorruptCheckpointError(path, f"{p.kind} {p.name[:80]!r}: tensor_meta {key} is not a short list")
    out = []
    for v in value:
        n = v.get("as_int") if isinstance(v, dict) else None
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise CorruptCheckpointError(path, f"{p.kind} {p.name[:80]!r}: tensor_meta {key} holds {str(v)[:40]}, "
                                               "not a non-negative as_int")
        out.append(n)
    return tuple(out)


def _ref(path: str, p: Payload, nbytes: int) -> TensorRef:
    m = p.meta
    if not isinstance(m, dict):
        raise CorruptCheckpointError(path, f"{p.kind} {p.name[:80]!r} has no tensor_meta")
    code = m.get("dtype")
    dtype = SCALAR_TYPES.get(code) if isinstance(code, int) else None
    if dtype is None:
        raise CorruptCheckpointError(path, f"{p.kind} {p.name[:80]!r}: dtype code {str(code)[:20]} is not one ckptstat "
                                           "reads")
    if m.get("layout", STRIDED) != STRIDED:
        raise CorruptCheckpointError(path, f"{p.kind} {p.name[:80]!r}: layout {str(m.get('layout'))[:20]} (only "
                                           "strided tensors are read)")
    shape, stride = _ints(path, p, "sizes", m.get("sizes")), _ints(path, p, "strides", m.get("strides"))
    if len(shape) != len(stride):
        raise CorruptCheckpointError(path, f"{p.kind} {p.name[:80]!r}: sizes {list(shape)} and strides {list(stride)} "
                                           "differ in rank")
    (offset,) = _ints(path, p, "storage_offset", [m.get("storage_offset")])
    itemsize = dtypes.get(dtype).bits // 8   # (every SCALAR_TYPES dtype is whole bytes)
    return TensorRef(StorageRef(p.record, dtype, nbytes // itemsize), dtype, offset, shape, stride)


def _records(path: str, f: IO[bytes], zf: zipfile.ZipFile, size: int) -> Read:
    def read(info: zipfile.ZipInfo, cap: int) -> bytes:
        data_offset(path, f, info, size)   # its extent checked against the file before zipfile reads it
        with reading(path, f"damaged record {info.filename}"), zf.open(info) as member:
            return member.read(cap + 1)[:cap]
    return read


def open_pt2(path: str) -> Checkpoint:
    """A torch.export archive's weights and tensor constants (see the module doc)."""
    size = file_size(path)
    with open_regular(path) as f:   # a URL: the central directory, then the records' local headers, by range requests
        zf = zip_open(path, f)
        tz = TorchZip(zf.infolist())
        prefetch(f, [(i.header_offset, 30) for i in tz.infos if i.header_offset >= 0])
        if tz.refusal:
            raise CorruptCheckpointError(path, f"not a zip torch's reader opens: {tz.refusal}")
        read = _records(path, f, zf, size)
        if not is_pt2(tz, read):
            raise CorruptCheckpointError(path, "not a torch.export archive: no archive_format record holding pt2")
        a = read_archive(path, tz, read)
        if not a.programs:
            raise UnknownFormatError(path, "a torch.export archive without a program (models/*.json) to read" + (
                f": an AOTInductor package ({len(a.compiled)} compiled librar{'y' if len(a.compiled) == 1 else 'ies'}"
                " under data/aotinductor/), whose weights live in its libraries or beside them in AOTInductor's own "
                "layout; `ckptstat scan` judges it" if a.compiled else ""))
        found: list[tuple[str, TensorRef]] = []
        records: dict[str, StorageRecord] = {}
        compressed = False
        for p in a.payloads:
            if p.pickled:
                continue
            info = tz.locate(p.record)
            if info is None:
                raise CorruptCheckpointError(path, f"{p.kind} {p.name[:80]!r}: no record {tz.folder}/{p.record}")
            if p.record not in records:
                start = data_offset(path, f, info, size)
                stored = info.compress_type == zipfile.ZIP_STORED
                compressed |= not stored
                records[p.record] = StorageRecord(p.record, info.file_size, start if stored else None, info.filename)
            found.append((p.name, _ref(path, p, records[p.record].nbytes)))
    tensors, notes = build_tensors(path, found, records, a.byteorder)
    roles = {p.name: "buffer" for p in a.payloads if not p.pickled and not p.param}
    left = [p.name for p in a.payloads if p.pickled]
    partial = None
    if left:
        partial = (f"{len(left)} pickled weight(s) or constant(s) (torch.export.load unpickles them with "
                   f"{TORCH_LOAD}; not read here): {', '.join(left[:4])}{' ...' if len(left) > 4 else ''}")
    legacy = [r for r, how in a.unpickled if how == ARTIFACT and not r.startswith("data/sample_inputs/")]
    if legacy:
        partial = (partial + "; " if partial else "") + (
            f"the state dict of the layout before weight configs ({', '.join(legacy)}), a torch.save that "
            "torch.export.load unpickles: not read here")
    objects = sum(1 for _, how in a.unpickled if how in (SCRIPT_OBJ, PICKLE_LOADS))
    if objects:
        notes.append(f"{objects} constant object(s) (TorchScript or pickled Python objects) hold no tensor")
    ckpt = Checkpoint(path=path, format=FORMAT, tensors=tensors, files=(path,), notes=notes, ordered=True, roles=roles,
                      partial=partial,
                      metadata={"torch.archive": tz.folder, "torch.byteorder": a.byteorder,
                                "pt2.programs": ", ".join(a.programs)})
    if compressed:
        ckpt.readers[path] = ZipStreamReader(path)
    return ckpt


def accept_pt2(probe: Probe) -> bool:
    """A zip torch's reader opens, with `archive_format` holding `pt2` and no `data.pkl` (torch.load's)."""
    if probe.head[:4] != b"PK\x03\x04":
        return False
    try:
        with reading(probe.path), open_regular(probe.path) as f:
            zf = zip_open(probe.path, f)
            tz = TorchZip(zf.infolist())
            return not tz.refusal and tz.locate("data.pkl") is None and is_pt2(tz, _records(probe.path, f, zf, probe.size))
    except CheckpointError:   # not a readable zip: not this format
        return False


register(Format(FORMAT, accept_pt2, open_pt2, (".pt2",)))
