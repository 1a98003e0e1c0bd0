"""The exception tree. Every problem with an input ends in one of these, with one line of text.

    CkptstatError
     +-- CheckpointError          (exit 1) a file is missing, unreadable or not what it claims
     |    +-- FileNotFound
     |    +-- UnknownFormatError  no reader accepts the file's first bytes
     |    +-- CorruptCheckpointError  a header, offset or size is inconsistent with the file
     |    +-- UnsafeCheckpointError  a pickle references a global outside the allowlist
     +-- UsageError               (exit 2) the arguments do not make sense
     +-- MissingDependencyError   (exit 1) an optional extra is not installed
"""
from __future__ import annotations

import os


class CkptstatError(Exception):
    exit_code = 1


class CheckpointError(CkptstatError):
    """A problem with a checkpoint file; the message names the file."""

    def __init__(self, path: str | os.PathLike[str] | None, reason: str):
        self.path = os.fspath(path) if path is not None else None
        self.reason = reason
        super().__init__(f"{self.path}: {reason}" if self.path else reason)


class FileNotFound(CheckpointError):
    pass


class UnknownFormatError(CheckpointError):
    pass


class CorruptCheckpointError(CheckpointError):
    pass


class UnsafeCheckpointError(CheckpointError):
    pass


class UsageError(CkptstatError):
    exit_code = 2


class MissingDependencyError(CkptstatError):
    pass
