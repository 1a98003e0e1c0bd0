"""`ckptstat scan`: every global a torch file's pickles reference, read from their opcodes alone
(nothing is unpickled), and whether `torch.load(weights_only=False)` would import something outside
torch's weights_only allowlist (docs/torch.md)."""
from __future__ import annotations

import os
import pickletools
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any, cast

from ...errors import CheckpointError, CorruptCheckpointError, FileNotFound, UnknownFormatError, reading
from .allowlist import Refused, is_allowed
from .containers import LEGACY_MAGIC_BYTES, data_offset, zip_open
from .unpickler import MAX_OPS, Bounded, remaining

SCAN_SCHEMA = "ckptstat.scan/1"
_STRING_OPS = {"SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE", "STRING", "BINSTRING", "SHORT_BINSTRING"}
_PUT_OPS = {"PUT", "BINPUT", "LONG_BINPUT"}
_GET_OPS = {"GET", "BINGET", "LONG_BINGET"}


@dataclass
class PickleScan:
    record: str
    opcodes: int = 0
    globals: Counter[str] = field(default_factory=Counter)


def scan_pickle(data: Bounded, record: str) -> PickleScan:
    """Globals from GLOBAL / INST opcodes, and STACK_GLOBAL resolved from the two strings pushed
    before it (directly or through the memo); an unresolvable one is reported as such."""
    out = PickleScan(record)
    memo: dict[object, object] = {}   # memo index -> value
    recent: list[object] = []   # values of the last pushes (strings, else None)
    # genops reads through read / readline / tell alone, which Bounded provides.
    for op, arg, _pos in pickletools.genops(cast(IO[bytes], data)):
        out.opcodes += 1
        if out.opcodes > MAX_OPS:
            raise Refused(f"{record}: pickle has more than {MAX_OPS:,} opcodes")
        name = op.name
        if name in ("GLOBAL", "INST"):
            out.globals[str(arg).replace(" ", ".", 1)] += 1
        elif name == "STACK_GLOBAL":
            mod, attr = (recent[-2], recent[-1]) if len(recent) >= 2 else (None, None)
            ok = isinstance(mod, str) and isinstance(attr, str)
            out.globals[f"{mod}.{attr}" if ok else "<unresolved STACK_GLOBAL>"] += 1
        elif name.startswith("EXT"):
            out.globals[f"<copyreg extension {arg}>"] += 1
        if name in _STRING_OPS:
            recent.append(arg)
        elif name in _PUT_OPS:
            memo[arg] = recent[-1] if recent else None
            continue
        elif name == "MEMOIZE":
            memo[len(memo)] = recent[-1] if recent else None
            continue
        elif name in _GET_OPS:
            recent.append(memo.get(arg))
        elif name in ("FRAME", "PROTO", "MARK"):
            continue
        else:
            recent.append(None)
        del recent[:-2]
    return out


def _pickle_members(path: str, f: IO[bytes]) -> Iterator[tuple[str, Bounded]]:
    head = f.read(16)
    f.seek(0)
    if head[:4] == b"PK\x03\x04":
        size = os.path.getsize(path)
        zf = zip_open(path, f)
        for info in zf.infolist():
            if info.filename.endswith(".pkl"):
                data_offset(path, f, info, size)
                with zf.open(info) as member:
                    yield info.filename, Bounded(member, info.file_size)
        return
    if head[:1] != b"\x80":
        raise UnknownFormatError(path, "holds no pickle (not a torch.save file or a pickle)")
    if LEGACY_MAGIC_BYTES in head:
        for what in ("magic number", "protocol", "sys_info", "object", "storage keys"):
            yield f"{what} pickle", Bounded(f, remaining(f))
        return
    yield "pickle", Bounded(f, remaining(f))


def _entry(name: str, count: int) -> dict[str, object]:
    return {"name": name, "count": count, "allowed": is_allowed(name)}


def scan(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Report (schema ckptstat.scan/1) of every global the file's pickles reference, and whether
    `torch.load(weights_only=False)` would run code (a global outside the weights_only allowlist)."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFound(path, "no such file") if not os.path.exists(path) else CheckpointError(path, "not a file")
    with reading(path):                 # the OS's own errors (permission...) as they are
        f = open(path, "rb")
    with f, reading(path, "malformed pickle or zip"):
        try:
            scans = [scan_pickle(stream, record) for record, stream in _pickle_members(path, f)]
        except Refused as e:
            raise CorruptCheckpointError(path, str(e)) from None
    every: Counter[str] = Counter()
    for s in scans:
        every.update(s.globals)
    unsafe = sorted(g for g in every if not is_allowed(g))
    return {
        "schema": SCAN_SCHEMA,
        "path": path,
        "pickles": [{"record": s.record, "opcodes": s.opcodes, "globals": [_entry(g, n) for g, n in sorted(s.globals.items())]}
                    for s in scans],
        "globals": [_entry(g, n) for g, n in sorted(every.items())],
        "unsafe_globals": unsafe,
        "weights_only_loadable": not unsafe,
        "would_run_code": bool(unsafe),
        "verdict": ("UNSAFE: torch.load without weights_only would import and may call: " + ", ".join(unsafe)) if unsafe
        else "safe: every global is in torch's weights_only allowlist",
    }
