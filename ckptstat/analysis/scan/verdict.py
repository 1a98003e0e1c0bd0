"""One file's scan verdict from what each loader would do with its bytes, the same for a local file and a URL
(analysis/scan/__init__.py `scan_local`, analysis/scan/remote.py `scan_url`): torch.load's report (or why it cannot
read the file) and the report of numpy's or Keras' reading (analysis/scan/loaders.py `judge_other`); the worse wins,
torch's on a tie unless torch.load raises in the file (then it is the other loader's). A Flax msgpack file, an
ONNX model or a TensorFlow bundle's file that torch.load cannot read holds no pickle to scan."""
from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from ...errors import CheckpointError, CorruptCheckpointError
from ...formats.msgpack_walk import looks_like_flax
from ...formats.onnx_model import accept as onnx_accept
from ...formats.registry import Probe

HEAD = 4096   # the bytes looked at for a Flax msgpack file
FLAX_NO_PICKLE = ("no pickle to scan: a Flax msgpack checkpoint, which flax.serialization reads with msgpack, never "
                  "pickle, and torch.load cannot read (docs/flax.md)")
RANK = {"unsafe": 0, "unknown": 1, "safe": 2}
_TF_BUNDLE_NAME = re.compile(r".\.(index|data-\d{5}-of-\d{5})$")


def no_pickle_reader(path: str, head: bytes) -> str | None:
    """What reads a file torch.load cannot, when that reader reads no pickle: an ONNX model (by its first bytes, as
    the ONNX reader accepts it), a TensorFlow checkpoint bundle's index or data shard (by name)."""
    if onnx_accept(Probe(path, 1 << 62, head)):   # (its size unknown here: a field's length is not checked against it)
        return "an ONNX model, which onnx.load and onnxruntime read as protobuf, never pickle (docs/onnx.md)"
    if _TF_BUNDLE_NAME.search(path.split("?", 1)[0]):
        return ("a TensorFlow checkpoint bundle's file, which TensorFlow reads as a table of tensors, never pickle "
                "(docs/tensorflow.md)")
    return None


def extension_codes_only(r: dict[str, Any]) -> bool:
    """torch.load raises in the file, and what made it unsafe is copyreg extension codes alone: a Flax file's map
    markers 0x82-0x84 read as EXT opcodes, which a process that registered none (the default) refuses at once."""
    return (raises(r) and bool(r["findings"])
            and all(f["opcode"].startswith("EXT") for f in r["findings"]))


def raises(r: dict[str, Any]) -> bool:
    """torch.load raises in the file (it is another loader's: on a tie, that loader's report is the file's)."""
    return r["torch_load"].startswith("torch.load raises")


def combine(path: str, torch_report: dict[str, Any] | None, torch_error: CheckpointError | None,
            other: dict[str, Any] | None, head: Callable[[int], bytes],
            other_error: CheckpointError | None = None) -> dict[str, Any]:
    """The file's report: torch.load's (`torch_report`, or `torch_error` when it cannot read the file) against the
    other loaders' (`other`, None when none reads it; `other_error`, why the loader its bytes name cannot read it: a
    GGUF's, a config's); `head(n)`, the file's first n bytes (read only when needed). The other loader's error is the
    file's only where torch.load's path reaches nothing unsafe or unknown: a pickle behind a GGUF's magic (`G` is
    BINFLOAT) runs under torch.load whatever the GGUF reader makes of it."""
    if other_error is not None:
        if torch_report is None or torch_report["status"] == "safe":
            raise other_error
        torch_report["notes"].append(f"its bytes also name another loader, which cannot read them: {other_error.reason}")
    if other is None and (torch_report is None or extension_codes_only(torch_report)):
        first = head(HEAD)
        if looks_like_flax(first, whole=len(first) < HEAD):
            raise CorruptCheckpointError(path, FLAX_NO_PICKLE)
        reader = no_pickle_reader(path, first)
        if reader is not None and torch_report is None:
            raise CorruptCheckpointError(path, f"no pickle to scan: {reader}")
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
