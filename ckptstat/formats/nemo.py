"""NeMo `.nemo` archives (nemo/core/connectors/save_restore_connector.py): a tar, written `tarfile.open(path, "w:")` and
`tar.add(folder, arcname=".")` ("w:gz" before NeMo 1.7), of `model_config.yaml` (the model's OmegaConf config) and
`model_weights.ckpt` (torch.save of the model's state dict), with the artifacts the config names (tokenizer files).

An uncompressed archive's members lie whole in the file, so the weights are read in place: the tar's headers listed
with Python's tarfile, the reader NeMo uses (bounded: core/tar.py, at most MAX_TAR_MEMBERS), then the `model_weights.ckpt`
member's zip read through a window onto its bytes (formats/torch/containers.py `zip_contents`), its storage records by
offset into the archive, as a DCP item's are. The config is not interpreted here: `ckptstat scan` judges what
restore_from would run with it (analysis/scan/nemo.py).

Refused in one line, each saying what to do instead: a gzip'd archive (no offsets to read by: extract it), several
model-parallel ranks (`mp_rank_00/model_weights.ckpt`, ...: each holds parts of the tensors), a Megatron distributed
checkpoint (`model_weights/`: extract it, then open that folder), weights that are not a torch.save zip.
"""
from __future__ import annotations

import posixpath
import tarfile
from typing import IO, Any

from ..core import Checkpoint
from ..core.files import open_regular, size_of
from ..core.io import Window
from ..core.tar import MAX_TAR_MEMBERS, TarHeaderBound, bounded_tarinfo
from ..errors import CorruptCheckpointError, UnknownFormatError
from .registry import Format, Probe, register
from .torch.containers import StorageRecord, zip_contents
from .torch.reader import torch_checkpoint

FORMAT = "nemo (.nemo)"
CONFIG = "model_config.yaml"
WEIGHTS = "model_weights.ckpt"
_GZIP, _USTAR = b"\x1f\x8b", b"ustar"


def _listing(f: IO[bytes]) -> tuple[list[tarfile.TarInfo], str | None]:
    """The archive's members as tarfile lists them, at most MAX_TAR_MEMBERS, and what stopped the listing (None: its end)."""
    found: list[tarfile.TarInfo] = []
    try:
        tar = tarfile.open(fileobj=f, mode="r:", tarinfo=bounded_tarinfo())
        while (m := tar.next()) is not None:
            if len(found) >= MAX_TAR_MEMBERS:
                return found, f"a tar of more than {MAX_TAR_MEMBERS:,} members"
            found.append(m)
        return found, None
    except (tarfile.TarError, TarHeaderBound) as e:
        return found, f"not a tar NeMo's restore_from reads ({e})"


def _named(members: list[tarfile.TarInfo], base: str) -> list[tarfile.TarInfo]:
    return [m for m in members if posixpath.basename(posixpath.normpath(m.name)) == base]


def _weights(path: str, members: list[tarfile.TarInfo], size: int) -> tarfile.TarInfo:
    """The one `model_weights.ckpt` restore_from loads whole, or a one-line refusal saying what the archive holds."""
    weights = [m for m in _named(members, WEIGHTS) if m.isfile()]
    if len(weights) > 1:
        ranks = ", ".join(posixpath.normpath(m.name) for m in weights[:3])
        raise UnknownFormatError(path, f"a NeMo archive of {len(weights)} model-parallel ranks ({ranks}"
                                       f"{', ...' if len(weights) > 3 else ''}), each holding parts of the tensors: "
                                       f"extract it and open one rank's {WEIGHTS}")
    if not weights:
        if any("model_weights" in posixpath.normpath(m.name).split("/") for m in members):
            raise UnknownFormatError(path, "a NeMo archive whose model_weights/ is a Megatron distributed checkpoint: "
                                           "extract it and open that folder (a torch.distributed.checkpoint)")
        raise CorruptCheckpointError(path, f"a NeMo archive without {WEIGHTS}")
    m = weights[0]
    if m.offset_data + m.size > size:
        raise CorruptCheckpointError(path, f"{WEIGHTS} claims {m.size:,} bytes at offset {m.offset_data:,}, past the "
                                           f"archive's end ({size:,} bytes)")
    return m


def open_nemo(path: str) -> Checkpoint:
    with open_regular(path) as f:
        size = size_of(f)
        if f.read(2) == _GZIP:
            raise UnknownFormatError(path, "a gzip'd NeMo archive (NeMo before 1.7): its members have no offsets to "
                                           f"read by; extract it (tar xzf) and open its {WEIGHTS}")
        f.seek(0)
        members, error = _listing(f)
        if error:
            raise CorruptCheckpointError(path, error)
        m = _weights(path, members, size)
        window: Any = Window(f, m.offset_data, m.size)   # (a seekable file of its own: Window is no IO subclass)
        contents = zip_contents(path, window, m.size)
    if contents.compressed:
        raise CorruptCheckpointError(path, f"{WEIGHTS} has compressed storage records (torch.save stores them)")
    contents.records = {k: StorageRecord(r.key, r.nbytes, None if r.offset is None else r.offset + m.offset_data,
                                         r.record) for k, r in contents.records.items()}
    ckpt = torch_checkpoint(path, FORMAT, contents)
    ckpt.metadata.update({"nemo.weights": posixpath.normpath(m.name),
                          "nemo.config": "yes" if _named(members, CONFIG) else "none"})
    return ckpt


def accept(probe: Probe) -> bool:
    """A gzip'd file named `.nemo` (to refuse it in one line), or a tar (its ustar magic) holding a
    `model_config.yaml` or a `model_weights.ckpt` among the members listed before any damage."""
    if probe.head[:2] == _GZIP:
        return probe.path.endswith(".nemo")
    if probe.head[257:262] != _USTAR:
        return False
    with open_regular(probe.path) as f:
        members, error = _listing(f)   # (listed as far as it goes: a damaged archive is this reader's to refuse)
    return bool(_named(members, CONFIG) or _named(members, WEIGHTS)) or (error is not None and probe.path.endswith(".nemo"))


register(Format(FORMAT, accept, open_nemo, (".nemo",)))
