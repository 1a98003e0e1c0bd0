"""Tar headers read with Python's tarfile (the reader NeMo and torch use), bounded: a NeMo archive's members
(formats/nemo.py, analysis/scan/nemo.py) and torch's pre-0.4 tar (analysis/scan/torch_load.py)."""
from __future__ import annotations

import tarfile

from ..errors import CkptstatError

# tarfile parses a PAX or GNU long-name header with regular expressions that take quadratic time before CPython
# 3.11.10 / 3.12.6 (CVE-2024-6232: 64 KiB of digits took 2.8 s, 256 KiB 38 s, on every file the trace opens as a tar);
# real ones hold a path and a few numbers.
MAX_TAR_EXTENDED = 8 << 10              # bytes of one extended header
MAX_TAR_EXTENDED_TOTAL = 1 << 20        # of all of a file's
MAX_TAR_MEMBERS = 100_000               # members listed (tarfile keeps each: ~1 KiB of objects)


class TarHeaderBound(CkptstatError):
    """A tar's extended header past MAX_TAR_EXTENDED (a CkptstatError: scan's trace passes it on, never taking it for the
    file's own error): ckptstat cannot tell how tarfile reads the file."""


def bounded_tarinfo() -> type[tarfile.TarInfo]:
    """A TarInfo class for tarfile.open(tarinfo=...) that raises TarHeaderBound at an extended header (PAX, GNU long
    name or link) over MAX_TAR_EXTENDED bytes, or past MAX_TAR_EXTENDED_TOTAL in all, before tarfile parses it."""
    seen = [0]

    class Bounded(tarfile.TarInfo):
        def _proc_member(self, tf: tarfile.TarFile) -> tarfile.TarInfo:
            if self.type in (tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK, tarfile.XHDTYPE, tarfile.XGLTYPE,
                             tarfile.SOLARIS_XHDTYPE):
                seen[0] += self.size
                if self.size > MAX_TAR_EXTENDED or seen[0] > MAX_TAR_EXTENDED_TOTAL:
                    raise TarHeaderBound(f"a tar extended header of {self.size:,} bytes ({seen[0]:,} in all; "
                                         f"ckptstat parses at most {MAX_TAR_EXTENDED:,} each, "
                                         f"{MAX_TAR_EXTENDED_TOTAL:,} in all)")
            return super()._proc_member(tf)  # type: ignore[misc,no-any-return]
    return Bounded
