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


_BLOCK = 4096                          # miniz's backwards search reads 4 KiB blocks ...
_SEARCH = 0xFFFF + 22                   # ... until it has gone back this far (a comment's length plus the record)


def _locate_end(f: IO[bytes], size: int) -> int | None:
    """Where miniz's `mz_zip_reader_locate_header_sig` finds the end record: the last signature with 22 bytes after
    it in the last 4 KiB block, else in the block 4,093 bytes before, until one starts 65,557 bytes or more before
    the end (so up to some 69.6 KB back); None where it finds none, or where torch's copy steps below offset 0
    (a small file: its read fails)."""
    if size < 22:
        return None
    cur = max(size - _BLOCK, 0)
    while True:
        f.seek(cur)
        buf = f.read(min(_BLOCK, size - cur))
        last = min(len(buf) - 4, size - cur - 22)           # a start with a whole record after it
        at = buf.rfind(b"PK\x05\x06", 0, last + 4) if last >= 0 else -1
        if at >= 0:
            return cur + at
        if cur == 0 or size - cur >= _SEARCH:
            return None
        cur -= _BLOCK - 3
        if cur < 0:
            return None


def end_record(f: IO[bytes], size: int) -> tuple[int, int, int, int] | str:
    """(entry count, central directory offset and size, this disk's number) as miniz's
    `mz_zip_reader_read_central_dir` reads them, or why torch's reader cannot open the zip: the end record
    `_locate_end` finds, read as zip64 where the 20 bytes before it (when it starts 76 bytes or more into the file)
    are a locator naming a zip64 end record; one disk."""
    at = _locate_end(f, size)
    if at is None:
        return "a zip without an end of central directory"
    f.seek(at)
    rec = f.read(22)
    disk, cd_disk, on_disk, entries, length, offset = struct.unpack_from("<4H2L", rec, 4)
    if at >= 76:
        f.seek(at - 20)
        locator = f.read(20)
        if locator[:4] == b"PK\x06\x07":
            eocd64, disks = struct.unpack_from("<QL", locator, 8)
            if eocd64 > size - 56:
                return "a zip64 locator naming a record past the end of the file"
            f.seek(eocd64)
            rec64 = f.read(56)
            if rec64[:4] == b"PK\x06\x06":
                record, _, _, disk, cd_disk, on_disk, entries, length, offset = struct.unpack_from("<Q2H2L4Q", rec64, 4)
                if record < 44 or disks != 1 or entries >= 1 << 32 or on_disk >= 1 << 32 or length >= 1 << 32:
                    return "a zip64 end record torch's reader refuses"
    if entries != on_disk or (disk | cd_disk and (disk, cd_disk) != (1, 1)):
        return "a zip split over several disks"
    return int(entries), int(offset), int(length), int(disk)


def _zip64(extra: bytes, sizes: list[int]) -> None:
    """Replace the 0xFFFFFFFF values among [uncompressed, compressed, local header offset] from the zip64
    extended information field (id 1; APPNOTE 4.5.3), in that order, as miniz reads an entry it extracts."""
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


def _directory_sizes(extra: bytes, sizes: list[int]) -> bool:
    """[uncompressed, compressed, local header offset] as torch's copy of miniz reads them while it indexes the
    directory: the fields walked to the zip64 one (id 1), then its values read from the rest of the extra data,
    whatever that field's own length says. False where miniz refuses the entry (a field running past the data)."""
    if not extra or _MAX32 not in sizes:
        return True
    at, left = 0, len(extra)
    while True:
        if left < 4:
            return False
        tag, n = struct.unpack_from("<HH", extra, at)
        if n + 4 > left:
            return False
        if tag == 1:
            break
        at, left = at + 4 + n, left - 4 - n
        if not left:
            return True
    at, left = at + 4, left - 4
    for i, v in enumerate(sizes):
        if v == _MAX32 and left >= 8:
            sizes[i] = struct.unpack_from("<Q", extra, at)[0]
            at, left = at + 8, left - 8
    return True


def central_directory(f: IO[bytes], size: int, max_entries: int) -> tuple[list[zipfile.ZipInfo], str | None]:
    """The entries torch's reader lists, in directory order, and None; or [] and why torch.load raises (or, past
    `max_entries`, why scan does not follow: the reason then starts with "more than")."""
    end = end_record(f, size)
    if isinstance(end, str):
        return [], end
    count, offset, length, disks = end
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
        (_, _, _, flags, method, _, _, _, csize, usize, name_len, extra_len, comment_len, disk, _, _,
         header) = _CDH.unpack_from(cd, at)
        total = 46 + name_len + extra_len + comment_len
        extra = cd[at + 46 + name_len:at + 46 + name_len + extra_len]
        # the directory's checks, as torch's copy of miniz makes them (a size of 0xFFFFFFFF skips them; its test for
        # a stored entry reads the method and the time as one 32-bit word)
        checked = [usize, csize, header]
        if not _directory_sizes(extra, checked):
            return [], f"central directory entry {i}: a zip64 field running past its extra data"
        d_usize, d_csize, d_header = checked
        stored = struct.unpack_from("<L", cd, at + 10)[0] == 0
        if _MAX32 not in (d_usize, d_csize) and ((stored and d_usize != d_csize) or (d_usize and not d_csize)):
            return [], f"central directory entry {i}: sizes {d_csize:,} / {d_usize:,} do not fit its method"
        if disk == 0xFFFF or disk not in (disks, 1):
            return [], f"central directory entry {i}: on another disk ({disk})"
        if d_csize != _MAX32 and d_header + 30 + d_csize > size:
            return [], f"central directory entry {i}: its data runs past the end of the file"
        if flags & _MASKED:
            return [], f"central directory entry {i}: masked local header (encrypted directory)"
        if total > len(cd) - at:
            return [], f"central directory entry {i} runs past the directory"
        raw = cd[at + 46:at + 46 + name_len]
        values = [usize, csize, header]       # as miniz reads the entry when torch extracts it
        _zip64(extra, values)
        usize, csize, header = values
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
