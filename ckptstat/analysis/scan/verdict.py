"""One file's scan verdict from what each loader would do with its bytes, the same for a local file and a URL
(analysis/scan/__init__.py `scan_local`, analysis/scan/remote.py `scan_url`): torch.load's report (or why it cannot
read the file) and the report of numpy's or Keras' reading (analysis/scan/loaders.py `judge_other`); the worse wins,
torch's on a tie unless torch.load raises in the file (then it is the other loader's). A Flax msgpack file
torch.load cannot read holds no pickle to scan."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...errors import CheckpointError, CorruptCheckpointError
from ...formats.msgpack_walk import looks_like_flax

HEAD = 4096   # the bytes looked at for a Flax msgpack file
FLAX_NO_PICKLE = ("no pickle to scan: a Flax msgpack checkpoint, which flax.serialization reads with msgpack, never "
                  "pickle, and torch.load cannot read (docs/flax.md)")
RANK = {"unsafe": 0, "unknown": 1, "safe": 2}


def extension_codes_only(r: dict[str, Any]) -> bool:
    """torch.load raises in the file, and what made it unsafe is copyreg extension codes alone: a Flax file's map
    markers 0x82-0x84 read as EXT opcodes, which a process that registered none (the default) refuses at once."""
    return (raises(r) and bool(r["findings"])
            and all(f["opcode"].startswith("EXT") for f in r["findings"]))


def raises(r: dict[str, Any]) -> bool:
    """torch.load raises in the file (it is another loader's: on a tie, that loader's report is the file's)."""
    return r["torch_load"].startswith("torch.load raises")


def combine(path: str, torch_report: dict[str, Any] | None, torch_error: CheckpointError | None,
            other: dict[str, Any] | None, head: Callable[[int], bytes]) -> dict[str, Any]:
    """The file's report: torch.load's (`torch_report`, or `torch_error` when it cannot read the file) against the
    other loaders' (`other`, None when none reads it); `head(n)`, the file's first n bytes (read only when needed)."""
    if other is None and (torch_report is None or extension_codes_only(torch_report)):
        first = head(HEAD)
        if looks_like_flax(first, whole=len(first) < HEAD):
            raise CorruptCheckpointError(path, FLAX_NO_PICKLE)
        if torch_report is None:
            assert torch_error is not None
            raise torch_error
    if other is None or torch_report is not None and RANK[torch_report["status"]] < RANK[other["status"]] or \
            torch_report is not None and torch_report["status"] == other["status"] and not raises(torch_report):
        assert torch_report is not None
        if other is not None:
            torch_report["notes"].append(f"{other['format']} to its own loader too: {other['verdict']}")
        return torch_report
    if torch_report is not None and torch_report["status"] != "safe":
        other["notes"].append(f"torch.load (which raises in the file) reads it too: {torch_report['verdict']}")
    return other
