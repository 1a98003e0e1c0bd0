"""The file-shaped cases of the fifth red-team pass's names and bounds (issue 31; tests/test_hostile_names.py,
tests/test_pickle_bounds.py), added to the memory-capped subprocess corpus (tests/test_hostile_corpus.py): every
command on each, under its RLIMIT_AS and CPU caps. Not collected by pytest (no test_ prefix). The remote cases
(servers that lie, trickle, hang up or redirect) are servers, not files: tests/test_remote_policy.py runs them
through the CLI."""
from __future__ import annotations

import struct
import zipfile
from typing import Any

import numpy as np
from safetensors.numpy import save_file

BOUNDS_CASE_NAMES = [
    "torch pickle of 1.5M empty sets", "torch pickle of 1M memoised sets", "safetensors name with a lone surrogate",
    "safetensors metadata with a lone surrogate", "torch name with a lone surrogate", "names with bidi overrides",
]
BIDI = "w.\u202egnp.exe\u2066x\u2069.\u2028y\u2029z"


def empty_sets(n: int, memoised: bool) -> bytes:
    """data.pkl: n empty sets, kept alive in lists of at most 1M (MAX_ITEMS), appended 50,000 at a time (the
    stack holds 100,000), or each memoised (MEMOIZE) and popped: 1 or 3 bytes of pickle a set."""
    p = bytearray(b"\x80\x04")
    if memoised:
        p += b"\x8f\x94\x30" * n + b"N."   # EMPTY_SET MEMOIZE POP ...; None
        return bytes(p)
    p += b"]"   # EMPTY_LIST: the outer list
    while n > 0:
        inner = min(n, 990_000)
        p += b"]"
        for k in range(0, inner, 50_000):
            p += b"(" + b"\x8f" * min(50_000, inner - k) + b"e"   # MARK EMPTY_SET... APPENDS
        p += b"a"   # APPEND the inner list to the outer
        n -= inner
    return bytes(p + b".")


def pickle_zip(path, pkl: bytes) -> str:
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("archive/data.pkl", pkl)
        z.writestr("archive/byteorder", b"little")
    return str(path)


def surrogate_safetensors(path, header_json: str) -> str:
    raw = header_json.encode("utf-8")
    raw += b" " * (-len(raw) % 8)
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + np.ones(2, np.float32).tobytes())
    return str(path)


def add_bounds_cases(tmp, cases: dict[str, Any], Case: type) -> None:
    """Adds BOUNDS_CASE_NAMES to `cases` (tmp: the corpus folder)."""
    import torch

    # (the 3.96M and 1.3M sets: as many opcodes as scan's walk takes ~10 s of CPU for here, the corpus's
    # cap; these sizes still built more than the corpus's 300 MiB before the bound)
    cases["torch pickle of 1.5M empty sets"] = Case(pickle_zip(tmp / "sets.pt", empty_sets(1_500_000, False)), "open",
                                                    "build more than")
    cases["torch pickle of 1M memoised sets"] = Case(pickle_zip(tmp / "memo.pt", empty_sets(1_000_000, True)), "open",
                                                     "build more than")
    tensor = '"dtype": "F32", "shape": [2], "data_offsets": [0, 8]'
    cases["safetensors name with a lone surrogate"] = Case(surrogate_safetensors(
        tmp / "surrogate-name.safetensors", '{"w\\ud800": {' + tensor + "}}"), "open", "lone surrogate")
    cases["safetensors metadata with a lone surrogate"] = Case(surrogate_safetensors(
        tmp / "surrogate-meta.safetensors", '{"__metadata__": {"k": "\\udfff"}, "w": {' + tensor + "}}"), "open",
        "lone surrogate")
    torch.save({"w\ud800": torch.ones(2)}, tmp / "surrogate.pt")
    cases["torch name with a lone surrogate"] = Case(str(tmp / "surrogate.pt"), "open", "lone surrogate")
    save_file({BIDI: np.ones(4, np.float32), "model.layers.0.mlp.w": np.ones((4, 4), np.float32)},
              str(tmp / "bidi.safetensors"), metadata={"note": BIDI})
    cases["names with bidi overrides"] = Case(str(tmp / "bidi.safetensors"), "ok")
