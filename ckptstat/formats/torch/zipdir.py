"""A zip's central directory as torch's reader finds it (caffe2/serialize/inline_container.cc over miniz 3.0.2,
`mz_zip_reader_read_central_dir`), not as Python's zipfile does.

The two differ on hostile bytes (docs/security.md, fifth pass):

- where the directory is: miniz reads it at the offset the end record states (torch's reader gives miniz
  its own read callback, so no prepended-data shift applies); zipfile reads it `size` bytes before the end
  record and treats any difference as data prepended to the archive, shifting every entry's offset by it.
  Two directories in one file, one at each place, show each reader another archive;
- what is refused: zipfile raises on "version needed to extract" above 6.3; miniz never looks at it.

So a file torch.load could read is traced through the directory miniz reads. The checks are miniz's own
(entry count and size against the file, each record's signature and lengths inside the directory, a stored
record's two sizes equal, its data inside the file, no masked local headers); a check scan is unsure torch
makes is left out, so scan may follow a file torch refuses, never the reverse.
"""
from __future__ import annotations

import struct
import zipfile
from typing import IO

_CDH = struct.Struct("<4s6H3L5H2L")    # central directory file header, 46 bytes (APPNOTE 4.3.12)
_MAX32 = 0xFFFFFFFF
_MASKED = 0x2000                      # general purpose bit 13: local header values masked (central directory encryption)


def end_record(f: IO[bytes], size: int) -> tuple[int, int, int] | None:
    """(entry count, central directory offset and size) of the end-of-central-directory record miniz finds: the
    last signature with a whole record after it, in the last 64 KiB + 22 bytes, read as zip64 when its
    locator precedes it. None: there is none (torch's reader cannot open the zip)."""
    tail = min(size, (1 << 16) + 22)
    f.seek(size - tail)
    data = f.read(tail)
    at = data.rfind(b"PK\x05\x06", 0, len(data) - 18)     # a signature with 18 bytes after it
    if at < 0:
        return None
    entries, length, offset = struct.unpack_from("<H", data, at + 10)[0], *struct.unpack_from("<LL", data, at + 12)
    loc = at - 20
    if loc >= 0 and data[loc:loc + 4] == b"PK\x06\x07":
        (eocd64,) = struct.unpack_from("<Q", data, loc + 8)
        if 0 <= eocd64 <= size - 56:
            f.seek(eocd64)
            rec = f.read(56)
            if rec[:4] == b"PK\x06\x06":
                entries, length, offset = struct.unpack_from("<QQQ", rec, 32)
    return int(entries), int(offset), int(length)


def _zip64(extra: bytes, sizes: list[int]) -> None:
    """Replace the 0xFFFFFFFF values among [uncompressed, compressed, local header offset] from the zip64
    extended information field (id 1; APPNOTE 4.5.3), in that order."""
    at = 0
    while at + 4 <= len(extra):
        tag, n = struct.unpack_from("<HH", extra, at)
        if tag == 1:
            body, pos = extra[at + 4:at + 4 + n], 0
            for i, v in enumerate(sizes):
                if v == _MAX32 and pos + 8 <= len(body):
                    sizes[i] = struct.unpack_from("<Q", body, pos)[0]
                    pos += 8
            return
        at += 4 + n


def central_directory(f: IO[bytes], size: int, max_entries: int) -> tuple[list[zipfile.ZipInfo], str | None]:
    """The entries torch's reader lists, in directory order, and None; or [] and why torch.load raises (or, past
    `max_entries`, why scan does not follow: the reason then starts with "more than")."""
    end = end_record(f, size)
    if end is None:
        return [], "a zip without an end of central directory"
    count, offset, length = end
    if count > max_entries:
        return [], f"more than {max_entries:,} entries ({count:,})"
    if length < 46 * count or offset + length > size:
        return [], f"the zip's central directory ({length:,} bytes at offset {offset:,} for {count:,} entries) " \
                   "does not fit the file"
    f.seek(offset)
    cd = f.read(length)
    infos: list[zipfile.ZipInfo] = []
    at = 0
    for i in range(count):
        if len(cd) - at < 46 or cd[at:at + 4] != b"PK\x01\x02":
            return [], f"central directory entry {i} at offset {offset + at:,} has no signature"
        (_, _, _, flags, method, _, _, _, csize, usize, name_len, extra_len, comment_len, _, _, _,
         header) = _CDH.unpack_from(cd, at)
        total = 46 + name_len + extra_len + comment_len
        if total > len(cd) - at:
            return [], f"central directory entry {i} runs past the directory"
        raw = cd[at + 46:at + 46 + name_len]
        values = [usize, csize, header]
        if _MAX32 in values:
            _zip64(cd[at + 46 + name_len:at + 46 + name_len + extra_len], values)
        usize, csize, header = values
        if flags & _MASKED:
            return [], f"central directory entry {i}: masked local header (encrypted directory)"
        if (method == 0 and usize != csize) or (usize and not csize):
            return [], f"central directory entry {i}: sizes {csize:,} / {usize:,} do not fit its method"
        if header + 30 + csize > size:
            return [], f"central directory entry {i}: its data runs past the end of the file"
        try:
            name = raw.decode("utf-8") if flags & 0x800 else raw.decode("cp437")
        except UnicodeDecodeError:   # kept losslessly as cp437 (containers.raw_name encodes it back)
            name, flags = raw.decode("cp437"), flags & ~0x800
        info = zipfile.ZipInfo(name)
        info.flag_bits, info.compress_type, info.compress_size, info.file_size = flags, method, csize, usize
        info.header_offset = header
        infos.append(info)
        at += total
    return infos, None
