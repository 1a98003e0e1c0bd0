"""What the first bytes of an archive users extract look like: a zip, a tar, a compressed stream, 7-Zip or RAR
(analysis/scan/archive.py judges one; the registry's error names one). No archive library is imported here: the
registry is on every command's start-up path."""
from __future__ import annotations

# (magic, the name scan's decompressor knows it by: analysis/scan/compressed.py; zstd needs the zstd extra)
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"   # RFC 8878 3.1.1 Magic_Number 0xFD2FB528
CODECS = ((b"\x1f\x8b", "gzip"), (b"BZh", "bz2"), (b"\xfd7zXZ\x00", "xz"), (ZSTD_MAGIC, "zstd"))
ZIP_STARTS = (b"PK\x03\x04", b"PK\x05\x06")
UNOPENED = ((b"7z\xbc\xaf\x27\x1c", "a 7-Zip archive"), (b"Rar!\x1a\x07", "a RAR archive"))   # no reader in Python's library


def codec(head: bytes) -> str | None:
    """The compression a file's first bytes name (gzip, bz2, xz, zstd), or None."""
    return next((name for magic, name in CODECS if head.startswith(magic)), None)


def unopened(head: bytes) -> str | None:
    """An archive format whose first bytes these are that ckptstat does not open (7-Zip, RAR), in words, or None."""
    return next((name for magic, name in UNOPENED if head.startswith(magic)), None)


def archive_kind(head: bytes) -> str | None:
    """What an archive's first bytes (512 or more) say it is, in words, or None: a zip, a tar (its magic at byte 257,
    or an old tar's header checksum), a compressed stream (a `.tar.gz`, a `.pt.gz`, a compressed pickle), 7-Zip, RAR."""
    if head[:4] in ZIP_STARTS:
        return "a zip archive"
    if head[257:262] == b"ustar" or len(head) >= 512 and _checksum(head):
        return "a tar archive"
    found = codec(head)
    return f"{found}-compressed data" if found else unopened(head)


def _checksum(block: bytes) -> bool:
    try:
        return int(block[148:156].rstrip(b"\0 ").decode("ascii") or "-1", 8) == \
            sum(block[:148]) + 8 * 32 + sum(block[156:512])
    except (ValueError, UnicodeDecodeError):
        return False
