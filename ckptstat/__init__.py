"""ckptstat: a static checkpoint inspector. Reads weight files directly, never builds the model."""
from __future__ import annotations

__version__ = "0.1.0"

from .errors import (  # noqa: E402
    CheckpointError, CkptstatError, CorruptCheckpointError, FileNotFound, MissingDependencyError,
    UnknownFormatError, UnsafeCheckpointError, UsageError,
)
from .formats.registry import open_checkpoint  # noqa: E402
from .tensor import Checkpoint, TensorInfo  # noqa: E402


def summarize(path_or_ckpt, config=None) -> dict:
    """The summary report (schema ckptstat.summary/1) of a path or an open Checkpoint."""
    from .report import summarize as _summarize

    ckpt = path_or_ckpt if isinstance(path_or_ckpt, Checkpoint) else open_checkpoint(path_or_ckpt, config)
    return _summarize(ckpt)


def bert_stat(path, input_size: tuple[int, int] = (1, 1), config=None, show: bool = True) -> dict:
    """Bertstat's entry point, kept for its users: parameters per bucket for the checkpoint at `path`.

    input_size is (batch, seq_length), as in Bertstat. Returns the summary report; with show=True
    also prints it.
    """
    from .api import bert_stat as _bert_stat

    return _bert_stat(path, input_size, config, show)


__all__ = [
    "Checkpoint", "TensorInfo", "open_checkpoint", "summarize", "bert_stat",
    "CkptstatError", "CheckpointError", "CorruptCheckpointError", "FileNotFound", "UnknownFormatError",
    "UnsafeCheckpointError", "UsageError", "MissingDependencyError", "__version__",
]
