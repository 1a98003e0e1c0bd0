"""Keras 3 `.keras` archives (docs/keras_zip.md; keras/src/saving/saving_lib.py): a zip holding
`metadata.json`, `config.json` (the model's Keras config) and `model.weights.h5`, the same HDF5 tree
a Keras 3 `.weights.h5` file holds (`layers/<layer>/vars/<i>`, `optimizer/vars/<i>`; see
formats/keras_h5.py).

Detected by content: a zip whose first member is one of those three names and whose central
directory lists both `model.weights.h5` and `config.json`. Keras writes the members stored
(uncompressed): h5py then reads the HDF5 file in place through a window onto the archive (a
file-like object over the member's byte range) and a contiguous dataset's values are read straight
from the archive by offset. A member some tool deflated is copied, once per open or read, into an
anonymous temporary file of at most the member's declared size (itself bounded by
limits().zip_ratio times its compressed size): never the whole archive extracted.
"""
from __future__ import annotations

import importlib
import json
import os
import shutil
import struct
import tempfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, TYPE_CHECKING, Any

from ..core import Checkpoint, TensorInfo, dtypes
from ..core.files import open_regular, refuse_external
from ..core.io import Window
from ..core.limits import limits
from ..core.spill import KeptSpill
from ..core.tensor import check_inflation, read_flat_file
from ..errors import CorruptCheckpointError, reading
from .keras_h5 import _KERAS3_DENSE, _dtype, _h5py, _hyperslab, _walk, value_dataset
from .keras_names import frozen_roles
from .registry import Format, Probe, register
from .torch.containers import data_offset, zip_open

if TYPE_CHECKING:
    from numpy.typing import NDArray

WEIGHTS, CONFIG, METADATA = "model.weights.h5", "config.json", "metadata.json"
MAX_METADATA = 1 << 20


class _Values:
    """The values reader of one .keras archive. A deflated model.weights.h5 is decompressed once, into an
    anonymous temporary file kept until close(): decompressing it again for every chunk made reading n
    tensors cost n times the member (a 1 MB archive declaring 1 GB of zeros over 10,000 datasets: 10 TB)."""

    def __init__(self, path: str):
        self.path = path
        self.spill = KeptSpill()   # (a forked stats worker makes its own: no shared offset)

    def spilled(self, zf: zipfile.ZipFile, info: zipfile.ZipInfo) -> IO[bytes]:
        def fill(tmp: IO[bytes]) -> None:
            with zf.open(info) as member:
                shutil.copyfileobj(member, tmp, 1 << 20)   # at most file_size bytes: zipfile stops there (CRC-checked)
        return self.spill.get(info.filename, fill)

    def close(self) -> None:
        self.spill.close()

    def __call__(self, info: TensorInfo, start: int, count: int) -> NDArray[Any]:
        return _read(info, start, count, self)


@contextmanager
def _weights(path: str, values: _Values | None = None) -> Iterator[tuple[Any, int | None, zipfile.ZipFile]]:
    """(the open h5py.File of model.weights.h5, the member's offset in the archive when stored, the zip).
    A deflated member is decompressed into `values`' kept temporary file, or, without it, a fresh one."""
    h5py = _h5py()
    with open_regular(path) as f:
        size = os.fstat(f.fileno()).st_size
        zf = zip_open(path, f)
        try:
            info = zf.getinfo(WEIGHTS)
        except KeyError:
            raise CorruptCheckpointError(path, f"the archive has no {WEIGHTS}") from None
        start = data_offset(path, f, info, size)
        if info.compress_type == zipfile.ZIP_STORED:
            with h5py.File(Window(f, start, info.file_size), "r") as h5:
                yield h5, start, zf
            return
        # a deflated member may declare ~1000x its compressed size (data_offset): a 1 MB archive whose weights inflate
        # to 1 GiB of zeros was spilled whole, for 64 bytes of values
        check_inflation(path, WEIGHTS, info.file_size, info.compress_size)
        spill = limits().spill_bytes
        if info.file_size > spill:
            raise CorruptCheckpointError(path, f"{WEIGHTS} is deflated to {info.compress_size:,} bytes from "
                                               f"{info.file_size:,}, more than the {spill:,} ckptstat decompresses to a "
                                               "temporary file (--limit spill_bytes=N)")
        if values is not None:
            with h5py.File(values.spilled(zf, info), "r") as h5:
                yield h5, None, zf
            return
        with tempfile.TemporaryFile() as tmp, zf.open(info) as member:
            shutil.copyfileobj(member, tmp, 1 << 20)   # at most file_size bytes: zipfile stops there (CRC-checked)
            tmp.flush()
            with h5py.File(tmp, "r") as h5:
                yield h5, None, zf


def _small_json(zf: zipfile.ZipFile, name: str, path: str) -> Any:
    info = zf.getinfo(name)
    if info.file_size > MAX_METADATA:
        raise CorruptCheckpointError(path, f"{name} in the archive is {info.file_size:,} bytes")
    with zf.open(info) as member:
        return json.loads(member.read(MAX_METADATA + 1).decode("utf-8"))


def _open(path: str) -> Checkpoint:
    tensors: dict[str, TensorInfo] = {}
    metadata: dict[str, str] = {}
    deflated = False
    with _weights(path) as (h5, start, zf):
        names = set(zf.namelist())
        if CONFIG not in names:
            raise CorruptCheckpointError(path, f"the archive has no {CONFIG}")
        config = _small_json(zf, CONFIG, path)
        if isinstance(config, dict):
            metadata["keras.class_name"] = str(config.get("class_name", ""))[:200]
        quantized, sources = policy_modes(config)
        if quantized:
            metadata["keras.quantization"] = ",".join(quantized)
            metadata["keras.quantization_source"] = ",".join(sources)
        if METADATA in names:
            meta = _small_json(zf, METADATA, path)
            if isinstance(meta, dict) and "keras_version" in meta:
                metadata["keras.keras_version"] = str(meta["keras_version"])[:200]
        member_size = zf.getinfo(WEIGHTS).file_size
        for name, dset, storage in _walk(h5, path):
            if dset.external or dset.is_virtual:
                raise refuse_external(path, f"dataset {dset.name!r} in {WEIGHTS} keeps its values in other files")
            dtype, order = _dtype(dset)
            shape = tuple(int(d) for d in dset.shape)
            t = TensorInfo(name, dtype, shape, path, None, 0)   # validates the shape
            offset, nbytes = None, int(dset.id.get_storage_size())
            contiguous = dset.chunks is None and not dset.compression and dtype != "STR" and t.numel
            at = dset.id.get_offset() if contiguous else None
            if at is not None:
                nbytes = dset.dtype.itemsize * t.numel
                if at + nbytes > member_size:
                    raise CorruptCheckpointError(path, f"dataset {dset.name!r}: bytes [{at}, {at + nbytes}) run past the "
                                                       f"end of {WEIGHTS} ({member_size} bytes)")
                offset = start + at if start is not None else None
            deflated |= offset is None
            extra: dict[str, object] = {"h5_path": dset.name, "member": WEIGHTS}
            if _KERAS3_DENSE.search(name) and len(shape) == 2:
                extra["layout"] = "in_out"   # a Dense kernel is stored [in, out] (formats/keras_h5.py)
            tensors[name] = TensorInfo(name, dtype, shape, path, offset, nbytes, order, storage=storage, extra=extra)
    ckpt = Checkpoint(path=path, format="keras (zip)", tensors=tensors, files=(path,), metadata=metadata,
                      roles=frozen_roles(config, list(tensors)))
    keras_hub = importlib.import_module(f"{__package__}.keras_hub")
    ckpt.config, how = keras_hub.archive_config(config)   # a KerasHub backbone or causal LM saved by model.save
    if how:
        ckpt.notes.append(how)
    if deflated:
        ckpt.readers[path] = _Values(path)
        if start is None:
            ckpt.notes.append(f"{WEIGHTS} is deflated in the archive: values are read from a temporary copy of it")
    return ckpt


_POLICY_WALK = 1 << 20   # JSON nodes visited (config.json is at most MAX_METADATA bytes)


def policy_modes(config: Any) -> tuple[list[str], list[str]]:
    """The quantisation modes of the dtype policies a Keras config names (`{"module": "keras.dtype_policies",
    "class_name": "QuantizedDTypePolicy", "config": {"mode": "int8", "source_name": "float32"}}`; int4's
    `int4/<block>`), and the policies' source names (the compute dtype: `float32`, `mixed_bfloat16`...), each sorted:
    what census/quant/keras.py checks the variables' layout against, and analysis/dequantized_keras.py their values."""
    modes: set[str] = set()
    sources: set[str] = set()
    stack, seen = [config], 0
    while stack and seen < _POLICY_WALK:
        node = stack.pop()
        seen += 1
        if isinstance(node, dict):
            inner = node.get("config")
            if node.get("module") == "keras.dtype_policies" and isinstance(inner, dict) and isinstance(inner.get("mode"), str):
                modes.add(inner["mode"][:40])
                sources.add(str(inner.get("source_name"))[:40])
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return sorted(modes), sorted(sources)


def open_keras(path: str) -> Checkpoint:
    # What h5py and zipfile raise on damaged bytes (OSError, KeyError, RuntimeError, ValueError...) is
    # the file's damage: one line naming it.
    with reading(path, "damaged .keras archive"):
        return _open(path)


def _read(info: TensorInfo, start: int, count: int, reader: _Values | None = None) -> NDArray[Any]:
    if info.offset is not None:
        return read_flat_file(info, start, count)
    import numpy as np

    with _weights(info.file, reader) as (h5, _, _zf):
        dset = value_dataset(h5, info)
        parts = _hyperslab(dset, (), info.shape, start, count) if info.shape else [np.asarray(dset[()]).reshape(-1)]
        values = parts[0] if len(parts) == 1 else np.concatenate(parts)
    if info.dtype == "BF16":
        return dtypes.decode(values.view(np.uint8), "BF16", values.size)
    return values.astype(values.dtype.newbyteorder("<")) if values.dtype.byteorder == ">" else values


def accept(probe: Probe) -> bool:
    head = probe.head
    if head[:4] != b"PK\x03\x04" or len(head) < 30:
        return False
    n = struct.unpack_from("<H", head, 26)[0]
    if head[30:30 + n].decode("latin1") not in (WEIGHTS, CONFIG, METADATA):
        return False
    try:
        with reading(probe.path), open_regular(probe.path) as f:
            names = set(zip_open(probe.path, f).namelist())
    except Exception:   # noqa: BLE001 - not a readable zip: not this format (the extension decides who reports it)
        return False
    return {WEIGHTS, CONFIG} <= names


register(Format("keras (zip)", accept, open_keras, (".keras",)))
