"""GGUF split sets: one model in N files, `<prefix>-00001-of-0000N.gguf` ... (docs/gguf.md).

llama.cpp's gguf-split (tools/gguf-split/gguf-split.cpp) and gguf-py's GGUFWriter (split_max_tensors /
split_max_size; gguf_writer.py add_shard_kv_data) write the same layout: every shard is a complete GGUF
file holding a disjoint run of the tensors, and carries three keys,
    split.no            u16, 0-based index of this shard
    split.count         u16, number of shards
    split.tensors.count i32, tensors over all shards
and the model's other metadata sits in the first shard only. Shard files are named by
llama_split_path (src/llama.cpp): "%s-%05d-of-%05d.gguf" with the 1-based shard number; llama.cpp finds
the other shards from that name (llama_split_prefix), and so does ckptstat: beside the file, in the
same folder, never anywhere else.

Opening any shard opens the set. A missing shard is a warning (Checkpoint.notes) with the count of
tensors it held, from split.tensors.count, and Checkpoint.partial makes the totals say they are
partial. Metadata that disagrees with the files (shard number, count, tensor total, a tensor in
two shards) is a one-line CorruptCheckpointError naming the shard.
"""
from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass

from ..core import Checkpoint, TensorInfo, urls
from ..core.files import check_inside, dirname, exists, join, listdir, regular
from ..errors import CkptstatError, CorruptCheckpointError

KEY_NO, KEY_COUNT, KEY_TENSORS = "split.no", "split.count", "split.tensors.count"
MAX_SHARDS = 0xFFFF   # split.count is a u16 (llama.cpp reads it with gguf_get_val_u16)
SHARD_NAME = re.compile(r"(?P<prefix>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf")


@dataclass(frozen=True)
class Split:
    """A shard's split.* keys (no is 0-based, as written)."""
    no: int
    count: int
    tensors: int | None   # split.tensors.count; None when the writer left it out


def shard_name(prefix: str, no: int, count: int) -> str:
    """llama_split_path: the file name of 0-based shard `no` of `count`."""
    return f"{prefix}-{no + 1:05d}-of-{count:05d}.gguf"


def split_keys(path: str, scalars: dict[str, tuple[bool, object]]) -> Split | None:
    """The split.* keys of one shard, from {key: (is an integer type, value)}; None for a plain file."""
    if KEY_COUNT not in scalars and KEY_NO not in scalars:
        return None
    got: dict[str, int] = {}
    for key in (KEY_NO, KEY_COUNT, KEY_TENSORS):
        if key not in scalars:
            continue
        is_int, value = scalars[key]
        if not is_int or not isinstance(value, int):
            raise CorruptCheckpointError(path, f"{key} is not an integer")
        got[key] = value
    for key in (KEY_NO, KEY_COUNT):
        if key not in got:
            other = KEY_COUNT if key == KEY_NO else KEY_NO
            raise CorruptCheckpointError(path, f"{other} is set but {key} is missing")
    count, no, tensors = got[KEY_COUNT], got[KEY_NO], got.get(KEY_TENSORS)
    if not 1 <= count <= MAX_SHARDS:
        raise CorruptCheckpointError(path, f"split.count {count} is not between 1 and {MAX_SHARDS}")
    if not 0 <= no < count:
        raise CorruptCheckpointError(path, f"split.no {no} is not a shard of split.count {count} (0 to {count - 1})")
    if tensors is not None and tensors < 0:
        raise CorruptCheckpointError(path, f"split.tensors.count {tensors} is negative")
    return Split(no, count, tensors)


def pick_shard(names: list[str]) -> str | None:
    """The file to open for a folder of .gguf files that are all shards of one split set (the lowest
    shard present); None when they are not exactly one set (then the folder is ambiguous)."""
    matches = [SHARD_NAME.fullmatch(n) for n in names]
    if not matches or None in matches or len({(m["prefix"], m["count"]) for m in matches if m}) != 1:
        return None
    return min(names)


def open_set(path: str, first: Checkpoint, split: Split,
             open_one: Callable[[str], tuple[Checkpoint, Split | None]]) -> Checkpoint:
    """The whole split set `path` belongs to, `first` being `path` already opened."""
    m = SHARD_NAME.fullmatch(os.path.basename(path))
    parts: dict[int, Checkpoint] = {split.no: first}
    missing: list[str] = []
    if split.count > 1 and m is None:   # llama.cpp could not find the others either
        missing = [f"the other {split.count - 1}, which cannot be found: the file's name does not follow "
                   "<prefix>-NNNNN-of-NNNNN.gguf"]
        return _merge(path, [first], split, missing, split.count - 1)
    if m is not None:
        if int(m["count"]) != split.count or int(m["no"]) != split.no + 1:
            raise CorruptCheckpointError(path, f"file name says shard {int(m['no'])} of {int(m['count'])}, but its "
                                               f"metadata says shard {split.no + 1} of {split.count} (split.no is 0-based)")
        folder = dirname(path)   # a local folder, or a URL's (core/files.py: the same rule for both)
        names = {no: shard_name(m["prefix"], no, split.count) for no in range(split.count) if no != split.no}
        present = _present(folder, list(names.values()))
        for no, name in names.items():
            shard = join(folder, name)
            if name not in present:
                missing.append(name)
                continue
            check_inside(shard, "shard", path)   # a symlink out of the folder is refused before it is read
            regular(shard, "shard")
            part, s = open_one(shard)
            if s is None:
                raise CorruptCheckpointError(shard, f"shard {no + 1} of {split.count} has no split.* metadata")
            if s.no != no or s.count != split.count:
                raise CorruptCheckpointError(shard, f"file name says shard {no + 1} of {split.count}, but its metadata "
                                                    f"says shard {s.no + 1} of {s.count} (split.no is 0-based)")
            if s.tensors != split.tensors:
                raise CorruptCheckpointError(shard, f"split.tensors.count {s.tensors} differs from {split.tensors} in "
                                                    f"{os.path.basename(path)}")
            parts[no] = part
    return _merge(path, [parts[no] for no in sorted(parts)], split, missing, len(missing))


def _present(folder: str, names: list[str]) -> set[str]:
    """Which of `names` are in `folder`. A URL folder is listed once where the source can list it, not
    asked once per shard (split.count may claim 65535); a local one is stat'ed per name (a dangling
    symlink is present: reading it then says what is wrong)."""
    if urls.is_url(folder):
        try:
            listing = set(listdir(folder))
        except CkptstatError:
            return {n for n in names if exists(join(folder, n))}
        return {n for n in names if n in listing}
    return {n for n in names if os.path.lexists(os.path.join(folder, n))}


def _merge(path: str, parts: list[Checkpoint], split: Split, missing: list[str], n_missing: int) -> Checkpoint:
    head = parts[0]   # the lowest shard present: the first holds the model's metadata
    tensors: dict[str, TensorInfo] = {}
    merged = Checkpoint(path=path, format=head.format, tensors=tensors, files=(), metadata=dict(head.metadata),
                        declared_architecture=head.declared_architecture)
    owner: dict[str, str] = {}
    for part in parts:
        shard = part.files[0]
        for name, info in part.tensors.items():
            if name in tensors:
                raise CorruptCheckpointError(shard, f"tensor {name!r} is also in {os.path.basename(owner[name])}")
            tensors[name] = info
            owner[name] = shard
        merged.files += part.files
        merged.readers.update(part.readers)
        merged.notes += part.notes
    held = len(merged.tensors)
    declared = split.tensors
    if not missing:
        if declared is not None and held != declared:
            raise CorruptCheckpointError(path, f"split.tensors.count is {declared}, but the {split.count} shard(s) hold "
                                               f"{held} tensors")
        return merged
    if declared is not None and held > declared:
        raise CorruptCheckpointError(path, f"split.tensors.count is {declared}, but the shards present already hold {held}")
    absent = "an unknown number of" if declared is None else f"{declared - held:,} of {declared:,}"
    shown = ", ".join(missing[:3]) + (f", ... ({len(missing)} in all)" if len(missing) > 3 else "")
    merged.partial = (f"{n_missing} of the {split.count} shards of the GGUF split set are missing: {absent} tensors "
                      "(split.tensors.count) are not counted")
    merged.notes.append(f"warning: {merged.partial} ({shown}); every total is partial")
    return merged
