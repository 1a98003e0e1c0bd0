"""Hostile DCP folders written through torch's ZStandard stream extension (formats/dcp/extensions.py, docs/dcp.md): the
fixture torch wrote (fixtures/dcp/zstd) with one item's bytes replaced, built with the real `zstandard` package;
added to the memory-capped subprocess corpus (tests/test_hostile_corpus.py) and used by tests/test_dcp.py. Not
collected by pytest (no test_ prefix)."""
from __future__ import annotations

import io
import os
import pickle
import shutil
import zipfile
from typing import Any

from conftest import fixture

DCP_ZSTD_CASE_NAMES = ["dcp zstd frame declares 1 MiB", "dcp zstd frame cut short", "dcp zstd frame inflates past its chunk",
                       "dcp zstd object calling os.mkdir"]


def frame(data: bytes, declare: bool = True) -> bytes:
    """One zstd frame of `data`: with its Frame_Content_Size (zstandard.compress), or without, as torch's writer
    (zstandard's stream_writer) leaves it."""
    import zstandard

    if declare:
        return bytes(zstandard.ZstdCompressor().compress(data))
    out = io.BytesIO()
    with zstandard.ZstdCompressor().stream_writer(out, closefd=False) as w:
        w.write(data)
    return out.getvalue()


def item_bytes(folder: str, fqn: str) -> bytes:
    """The stored (compressed) bytes of one item of a DCP folder, located by its metadata (torch's own pickle)."""
    meta = pickle.loads(open(os.path.join(folder, ".metadata"), "rb").read())   # the fixture torch wrote: trusted
    ((_, info),) = [(k, s) for k, s in meta.storage_data.items() if k.fqn == fqn]
    with open(os.path.join(folder, info.relative_path), "rb") as f:
        f.seek(info.offset)
        return f.read(info.length)


def zstd_folder(dest: str, replace: dict[str, bytes]) -> str:
    """fixtures/dcp/zstd copied to `dest` with the named items' stored bytes replaced (the .distcp file rebuilt and
    every item's offset and length in the metadata moved to match)."""
    src = fixture("dcp", "zstd")
    shutil.copytree(src, dest)
    meta = pickle.loads(open(os.path.join(src, ".metadata"), "rb").read())
    infos = sorted(meta.storage_data.items(), key=lambda kv: kv[1].offset)
    data, at = bytearray(), 0
    for index, info in infos:
        raw = replace.get(index.fqn, item_bytes(src, index.fqn))
        info.offset, info.length = at, len(raw)
        data += raw
        at += len(raw)
    with open(os.path.join(dest, infos[0][1].relative_path), "wb") as f:
        f.write(bytes(data))
    with open(os.path.join(dest, ".metadata"), "wb") as f:
        f.write(pickle.dumps(meta))
    return dest


def calling_mkdir(marker: str) -> bytes:
    """A torch.save zip whose data.pkl calls os.mkdir(marker) when torch.load(weights_only=False) unpickles it."""
    pkl = b"\x80\x02cos\nmkdir\n" + pickle.dumps(marker, 2)[2:-1] + b"\x85R."   # GLOBAL, the str, TUPLE1, REDUCE
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        z.writestr("archive/data.pkl", pkl)
        z.writestr("archive/byteorder", b"little")
        z.writestr("archive/version", b"3\n")
    return out.getvalue()


DEEP = {"ties --deep": 0}   # (no other tensor of w's shape: ties --deep reads none of its values)


def add_dcp_zstd_cases(tmp, cases: dict[str, Any], Case: type) -> None:
    """Adds DCP_ZSTD_CASE_NAMES to `cases` (tmp: the corpus folder)."""
    w = item_bytes(fixture("dcp", "zstd"), "w")
    cases["dcp zstd frame declares 1 MiB"] = Case(zstd_folder(str(tmp / "dcp-zstd-declares"), {
        "w": frame(b"\0" * (1 << 20))}), "values", "declares", expect=DEEP)
    cases["dcp zstd frame cut short"] = Case(zstd_folder(str(tmp / "dcp-zstd-cut"), {"w": w[:-6]}), "values",
                                             "cut short", expect=DEEP)
    cases["dcp zstd frame inflates past its chunk"] = Case(zstd_folder(str(tmp / "dcp-zstd-inflates"), {
        "w": frame(b"\0" * (8 << 20), declare=False)}), "values", "inflates past", expect=DEEP)
    cases["dcp zstd object calling os.mkdir"] = Case(zstd_folder(str(tmp / "dcp-zstd-mkdir"), {
        "step": frame(calling_mkdir(str(tmp / "RAN")), declare=False)}), "ok")
