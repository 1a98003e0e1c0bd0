"""The exception tree. Every problem with an input ends in one of these, with one line of text.

    CkptstatError
     +-- CheckpointError          (exit 1) a file is missing, unreadable or not what it claims
     |    +-- FileNotFound
     |    +-- UnknownFormatError  no reader accepts the file's first bytes
     |    +-- CorruptCheckpointError  a header, offset or size is inconsistent with the file
     |    +-- UnsafeCheckpointError  a pickle references a global outside the allowlist
     |    +-- ExternalReferenceError  the file refers to a file outside the checkpoint (docs/security.md)
     +-- UsageError               (exit 2) the arguments do not make sense
     +-- MissingDependencyError   (exit 1) an optional extra is not installed

Parsers do not list the low-level exceptions a hostile file can make them raise (struct.error,
IndexError, UnicodeDecodeError, zlib.error, ...): `reading()` is the one boundary that turns
whatever is not already a CkptstatError into a CheckpointError naming the file (Pillow's rule,
`ImageFile.__init__`). It is used where headers are parsed (formats.registry.open_checkpoint) and
where values are read (core.tensor.Checkpoint).
"""
from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager


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


class ExternalReferenceError(CheckpointError):
    """The checkpoint refers to a file outside what the user named (an HDF5 external link, a TF
    `checkpoint` pointer to another folder, a symlink out of the folder); --allow-external follows it."""


class UsageError(CkptstatError):
    exit_code = 2


class NoAnalyticModel(UsageError):
    """No op template describes the model: an unknown model_type or tensor names, or a template its file disagrees
    with. Only this refusal lets the meta path (analysis/meta.py) try transformers; a config with a bad value is a
    plain UsageError and is refused as it stands."""


class MissingDependencyError(CkptstatError):
    """An optional extra is not installed (README's "Extras" table): `extra` is the one to install."""

    def __init__(self, message: str, extra: str | None = None):
        self.extra = extra
        super().__init__(message)


def missing_extra(needs: str, module: str | None, extra: str, hint: str = "") -> MissingDependencyError:
    """The one message for a feature whose extra is missing: what needs it, the module that is absent,
    and the line to install it."""
    what = f" ({module} is not installed)" if module else ""
    return MissingDependencyError(f"{needs} needs the {extra!r} extra{what}: pip install 'ckptstat[{extra}]'{hint}",
                                  extra)


def one_line(text: str) -> str:
    """Another library's multi-line message on one line: its lines, stripped, joined by a space (an error
    line shows file-derived newlines as \\x0a, render/names.py `inert`; a library's are its layout)."""
    return " ".join(part.strip() for part in text.splitlines() if part.strip())


def as_checkpoint_error(path: str | os.PathLike[str], exc: BaseException, what: str = "") -> CheckpointError:
    """The CheckpointError for a low-level exception raised while parsing `path`."""
    if isinstance(exc, CheckpointError):
        return exc
    prefix = f"{what}: " if what else ""
    if isinstance(exc, IsADirectoryError):
        return CheckpointError(path, "is a folder, not a file")
    if isinstance(exc, OSError) and exc.errno is not None:   # the OS's own: permission, I/O error, of the file it names
        # (a shard of the index `path`, a config.json beside it), else of `path`
        return CheckpointError(exc.filename if isinstance(exc.filename, str) and exc.filename else path,
                               prefix + (exc.strerror or str(exc)))
    # Anything else is a parser tripping over the bytes (a decoder's OSError has no errno: bz2's
    # "Invalid data stream", HDF5 through h5py). Its text may quote the file's bytes (a KeyError's
    # key, int()'s "invalid literal"): shown short and escaped, never raw.
    return CorruptCheckpointError(path, f"{prefix}{type(exc).__name__}: {short_text(exc)}")


MAX_QUOTED = 200   # characters of a low-level exception's text kept in a message


def quoted(value: object, limit: int = 60) -> str:
    """repr(value) for a message, at most `limit` characters: a value taken from a file (a dtype, a
    shape, a list of offsets) may be megabytes long, or an integer too long for repr()."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 128:
        return f"<an integer of {value.bit_length():,} bits>"
    if isinstance(value, (list, tuple, dict)) and len(value) > limit:
        return f"<a {type(value).__name__} of {len(value):,} items>"
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - an integer past repr's digit limit inside a list
        return f"<a {type(value).__name__}>"
    return text if len(text) <= limit else text[:limit] + "..."


def short_text(exc: BaseException) -> str:
    """An exception's text, cut to MAX_QUOTED characters and with everything but printable ASCII
    escaped (what a file put there reaches the terminal inert, and never as a megabyte of text)."""
    try:
        text = str(exc)
    except Exception:  # noqa: BLE001 - a hostile object's __str__
        return "(no message)"
    cut = len(text) > MAX_QUOTED
    text = text[:MAX_QUOTED].encode("ascii", "backslashreplace").decode("ascii")
    text = "".join(c if " " <= c <= "~" else f"\\x{ord(c):02x}" for c in text)
    return text + ("..." if cut else "")


@contextmanager
def reading(path: str | os.PathLike[str], what: str = "") -> Iterator[None]:
    """Every exception but our own becomes one CheckpointError naming `path` (and `what`)."""
    try:
        yield
    except CkptstatError:
        raise
    except Exception as e:  # noqa: BLE001 - the boundary: hostile bytes may raise anything
        raise as_checkpoint_error(path, e, what) from None
