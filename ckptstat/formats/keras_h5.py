"""Keras and Hugging Face TF `.h5` weights, through h5py (imported only when such a file is opened).

Layouts (docs/formats.md section 5):
- TF-Keras 2 `save_weights` (and HF `tf_model.h5`): root attribute `layer_names`; one group per layer
  with attribute `weight_names`; dataset at `group[weight_name]`. Attributes over HDF5's 64 KiB
  object-header limit are split into `name0`, `name1`, ... (tf_keras legacy/saving/hdf5_format.py
  `save_attributes_to_hdf5_group`).
- TF-Keras 2 `model.save('x.h5')`: the same tree under `model_weights`, optimizer state under
  `optimizer_weights` (its own `weight_names`).
- Keras 3 `.weights.h5`: groups mirror attribute paths (`layers/dense/vars/0`, `optimizer/vars/N`);
  bfloat16 datasets are opaque 2-byte values with attribute `dtype="bfloat16"`.

Tensors are named by their Keras weight name (`dense/kernel:0`) in Keras 2 files and by their HDF5
path in Keras 3 files. Contiguous datasets have a plain file offset; chunked or compressed ones are
read through h5py.
"""
from __future__ import annotations

import importlib
import math
import re
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # numpy loads only when values are read
    from numpy.typing import NDArray

from ..core import Checkpoint, TensorInfo, dtypes, urls
from ..core.allocations import bounded
from ..core.files import external_allowed, file_size, open_regular, refuse_external, regular
from ..core.limits import limits
from ..core.tensor import check_inflation, read_flat_file
from ..errors import CheckpointError, CorruptCheckpointError, MissingDependencyError, reading
from .keras_names import dense_layout
from .registry import Format, Probe, register

HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"
# Keras 3 names a layer's group after its class (`dense`, `dense_1`); var 0 of a Dense is its kernel.
_KERAS3_DENSE = re.compile(r"(^|/)layers/(dense|einsum_dense)(_\d+)?/vars/0$")


def accept(probe: Probe) -> bool:
    # The superblock may follow a user block of 512, 1024, 2048... bytes (HDF5 file format spec, 3.1).
    return any(probe.head[o:o + 8] == HDF5_MAGIC for o in (0, 512, 1024, 2048))


def _h5py() -> ModuleType:
    try:
        return importlib.import_module("h5py")
    except ImportError:  # pragma: no cover - h5py is a dependency
        raise MissingDependencyError("reading .h5 files needs h5py: pip install h5py") from None


def _strings(values: Any) -> list[str]:
    import numpy as np

    arr = np.atleast_1d(np.asarray(values))
    return [v.decode("utf-8") if isinstance(v, bytes) else str(v) for v in arr.tolist()]


ATTRIBUTE_MEMORY = 256 << 20   # what reading one string attribute may allocate beyond the file's size


def attribute(obj: Any, name: str) -> list[str]:
    """A string (list) attribute, its size checked before it is read (limits().h5_attribute_items), and read with what
    it may allocate bounded: libhdf5 allocates what a damaged file's strings claim (a 115 KB file made it touch 4 GB)
    before it finds the data missing."""
    shape = obj.attrs.get_id(name).shape or ()
    if math.prod(shape) > limits().h5_attribute_items:
        raise CorruptCheckpointError(obj.file.filename, f"attribute {name!r} of {obj.name!r} holds {math.prod(shape):,} "
                                                        f"items, more than the {limits().h5_attribute_items:,} ckptstat reads")
    size = obj.file.id.get_filesize()
    # a variable-length string's length lives in the file's global heap, which h5py does not show: libhdf5 allocates
    # what it claims, so the read runs with the process's growth bounded (a claim past it fails as an error)
    try:
        with bounded(ATTRIBUTE_MEMORY + size):
            value = obj.attrs[name]
    except OSError as e:
        if "memory allocation failed" not in str(e):
            raise
        raise CorruptCheckpointError(obj.file.filename, f"attribute {name!r} of {obj.name!r} claims strings of more than "
                                                        f"{(ATTRIBUTE_MEMORY + size) >> 20:,} MiB") from None
    return _strings(value)


def load_attribute(group: Any, name: str) -> list[str] | None:
    """A list attribute, joined back from `name0`, `name1`, ... when Keras had to split it."""
    if name in group.attrs:
        return attribute(group, name)
    if f"{name}0" not in group.attrs:
        return None
    out: list[str] = []
    i = 0
    while f"{name}{i}" in group.attrs:
        if i >= limits().h5_attribute_parts or len(out) > limits().h5_attribute_items:
            raise CorruptCheckpointError(group.file.filename, f"attribute {name!r} of {group.name!r} is split into "
                                                              f"more parts or items than ckptstat reads")
        out += attribute(group, f"{name}{i}")
        i += 1
    return out


MAX_SOFT_LINKS = 16   # soft links followed in a row (a cycle of them ends here)


def member(group: Any, name: str, path: str, depth: int = 0) -> Any:
    """group[name], looking at every link on the way before following it: an external link (into
    another file) is refused unless --allow-external; soft links are resolved here, so that one
    pointing through an external link is caught too. Keras names are paths (`dense/kernel:0`)."""
    h5py = _h5py()
    obj = group.file if name.startswith("/") else group
    for part in (p for p in name.split("/") if p and p != "."):
        link = obj.get(part, getlink=True)
        if link is None:
            raise CorruptCheckpointError(path, f"{obj.name.rstrip('/')}/{part[:80]!r} does not exist")
        if isinstance(link, h5py.ExternalLink):
            if not external_allowed():
                raise refuse_external(path, f"HDF5 external link {obj.name.rstrip('/')}/{part!r} -> "
                                            f"{link.filename!r}:{link.path!r}")
            obj = obj[part]
        elif isinstance(link, h5py.SoftLink):
            if depth >= MAX_SOFT_LINKS:
                raise CorruptCheckpointError(path, f"soft links nest more than {MAX_SOFT_LINKS} deep at {part[:80]!r}")
            obj = member(obj, link.path, path, depth + 1)
        else:
            obj = obj[part]
    return obj


def _check_storage(dset: Any, path: str, root: Any) -> bool:
    """Whether the dataset's values live outside the file (external raw storage, a virtual dataset,
    a dataset reached through an external link): refused unless --allow-external, else True."""
    h5py = _h5py()
    external = dset.external
    virtual = bool(dset.is_virtual)
    elsewhere = dset.file != root   # (reached through an external link: h5py opened another file)
    if not (external or virtual or elsewhere):
        return False
    if not external_allowed():
        if external:
            files = ", ".join(repr(e[0]) for e in external[:3])
            raise refuse_external(path, f"dataset {dset.name!r} keeps its values in external file(s) {files}")
        if virtual:
            srcs = ", ".join(repr(m.file_name) for m in dset.virtual_sources()[:3])
            raise refuse_external(path, f"dataset {dset.name!r} is a virtual dataset over {srcs}")
        raise refuse_external(path, f"dataset {dset.name!r} lives in {dset.file.filename!r}")
    del h5py
    return True


_KINDS = {("f", 2): "F16", ("f", 4): "F32", ("f", 8): "F64", ("i", 1): "I8", ("i", 2): "I16", ("i", 4): "I32",
          ("i", 8): "I64", ("u", 1): "U8", ("u", 2): "U16", ("u", 4): "U32", ("u", 8): "U64", ("b", 1): "BOOL",
          ("c", 8): "C64", ("c", 16): "C128"}


def _dtype(dset: Any) -> tuple[str, str]:
    """(canonical dtype, byte order) of a dataset."""
    dt = dset.dtype
    if "dtype" in dset.attrs and attribute(dset, "dtype")[0] == "bfloat16" and dt.itemsize == 2:
        return "BF16", "little"    # Keras 3 stores bf16 as opaque 2-byte values plus this attribute
    if dt.kind in "SUOV":
        if dt.kind == "V" and dt.itemsize == 2 and "bfloat16" in str(dt):
            return "BF16", "little"
        return "STR", "little"
    key = (dt.kind, dt.itemsize)
    if key not in _KINDS:
        raise CorruptCheckpointError(dset.file.filename, f"dataset {dset.name!r}: unsupported dtype {str(dt)[:80]!r}")
    return _KINDS[key], "big" if dt.byteorder == ">" else "little"


def _info(name: str, dset: Any, path: str, size: int, h5_path: str | None, root: Any,
          storage: str | None = None) -> TensorInfo:
    outside = _check_storage(dset, path, root)
    dtype, order = _dtype(dset)
    if dset.shape is None:   # (h5py.Empty: a null dataspace, which Keras cannot load either)
        raise CheckpointError(path, f"dataset {dset.name!r} has a null dataspace (h5py.Empty): no shape, no values")
    shape = tuple(int(d) for d in dset.shape)
    numel = math.prod(shape)
    # Allocated bytes: a dataset of unallocated chunks (read as its fill value) stores almost nothing,
    # whatever its shape; Checkpoint refuses to read far more values than are stored.
    nbytes = dset.id.get_storage_size()
    offset = None
    extra: dict[str, object] = {"h5_path": h5_path or dset.name}
    contiguous = dset.chunks is None and not dset.compression and dtype != "STR" and not outside
    if outside:
        nbytes = dset.dtype.itemsize * numel   # stored elsewhere (allowed): read through h5py
        extra["external"] = True
    elif contiguous and numel and dset.id.get_offset() is not None:
        offset = dset.id.get_offset()
        nbytes = dset.dtype.itemsize * numel
        if offset is not None and offset + nbytes > size:
            raise CorruptCheckpointError(path, f"dataset {dset.name!r}: bytes [{offset}, {offset + nbytes}) run past "
                                               f"the end of the {size}-byte file")
    elif dset.chunks is not None:
        extra["chunks"] = list(dset.chunks)
        if dset.compression:
            extra["compression"] = dset.compression
    layout = dense_layout(name, shape) or ("in_out" if _KERAS3_DENSE.search(name) and len(shape) == 2 else None)
    if layout:
        extra["layout"] = layout
    if "name" in dset.parent.attrs and name.startswith(("layers/", "optimizer/")):
        extra["keras_name"] = attribute(dset.parent, "name")[0]
    return TensorInfo(name, dtype, shape, path, offset, int(nbytes), order, storage=storage or dset.name, extra=extra)


ALIAS_FLOOR = 1024   # Keras 2 listing entries that name a dataset already listed, beyond one per dataset listed


class _Listing:
    """Resolves the entries of a Keras 2 listing (layer_names x weight_names): each layer and each spelling of a
    name once (member() costs ~0.5 ms and its h5py objects ~5 KB: a 2.8 MB file listing one dataset 200,000 times
    ran past 2 minutes at 1.1 GB), and entries naming a dataset already listed (a layer tracking another's variables
    lists them again) at most one per dataset listed + ALIAS_FLOOR."""

    def __init__(self, path: str):
        self.path = path
        self.resolved: dict[tuple[str, tuple[str, ...]], Any] = {}
        self.listed: set[Any] = set()
        self.again = 0

    def resolve(self, group: Any, name: str) -> Any:
        key = ("/" if name.startswith("/") else group.name, tuple(p for p in name.split("/") if p and p != "."))
        obj = self.resolved.get(key)
        if obj is None:
            obj = self.resolved[key] = member(group, name, self.path)
        return obj

    def entry(self, group: Any, name: str) -> Any:
        obj = self.resolve(group, name)
        ident = obj.id   # h5py ObjectIDs of one HDF5 object (any link, any spelling) are equal
        if ident in self.listed:
            self.again += 1
            if self.again > len(self.listed) + ALIAS_FLOOR:
                raise CorruptCheckpointError(self.path, f"weight_names list more than {self.again - 1:,} weights already "
                                                        f"listed ({len(self.listed):,} datasets listed + {ALIAS_FLOOR:,}): "
                                                        "one weight listed again and again?")
        else:
            self.listed.add(ident)
        return obj


def _keras2(root: Any, layer_names: list[str], listing: _Listing) -> list[tuple[str, Any, str]]:
    out = []
    weights: dict[int, list[str]] = {}   # a layer's weight_names, read once however often it is listed
    for layer in layer_names:
        group = listing.resolve(root, layer)
        if id(group) not in weights:
            weights[id(group)] = load_attribute(group, "weight_names") or []
        for wn in weights[id(group)]:
            out.append((wn, listing.entry(group, wn), f"{root.name.rstrip('/')}/{layer}/{wn}"))
    return out


MAX_GROUP_DEPTH = 256   # group nesting _walk follows: h5py opens each object by its path (a chain of n groups costs
                        # n^2: a 1.5 MB file of 1,500 nested groups took 8 s, and it grows with the square)


def _walk(group: Any, path: str, keras3: bool = True) -> list[tuple[str, Any, str]]:
    """(name, dataset, storage) for every link to a dataset in the tree. A dataset hard-linked under two names is
    listed under both (Keras 3 loads it into each variable), its storage the name first met: two names, one storage
    (aliases). A soft or external link is never followed: in a Keras 3 tree it is refused, as Keras 3 refuses it
    ("Not allowed: H5 file with SoftLink", keras/src/saving/saving_lib.py); in another HDF5 file it is skipped."""
    out: list[tuple[str, Any, str]] = []
    h5py = _h5py()
    too_deep: list[str] = []
    refused: list[tuple[str, Any]] = []
    too_many: list[str] = []
    first: dict[Any, str] = {}   # a dataset's object id -> the name first met (h5py ObjectIDs of one object are equal)

    def visit(name: str, link: Any) -> bool | None:   # visits every link; recurses through hard links only
        if name.count("/") >= MAX_GROUP_DEPTH:
            too_deep.append(name)
            return True                   # (a value that is not None stops the visit)
        if isinstance(link, (h5py.SoftLink, h5py.ExternalLink)):
            if keras3:
                refused.append((name, link))
                return True
            return None
        obj = group[name]
        if isinstance(obj, h5py.Dataset):
            if obj.id in first and len(out) - len(first) >= len(first) + ALIAS_FLOOR:
                too_many.append(name)   # (a link costs ~100 bytes, opening it ~0.5 ms: as _Listing bounds Keras 2's)
                return True
            out.append((name, obj, first.setdefault(obj.id, obj.name)))
        return None

    group.visititems_links(visit)
    if refused:   # (raised here: an exception raised inside the visit comes out of h5py as a SystemError)
        name, link = refused[0]
        kind = type(link).__name__
        target = f"{link.filename}:{link.path}" if isinstance(link, h5py.ExternalLink) else link.path
        raise CorruptCheckpointError(path, f"{name[:200]!r} is an HDF5 {kind} to {target[:200]!r}, which Keras 3 refuses "
                                           f"to load (\"Not allowed: H5 file with {kind}\"); not followed")
    if too_deep:
        raise CorruptCheckpointError(path, f"groups nest more than {MAX_GROUP_DEPTH} deep ({too_deep[0][:60]!r}...)")
    if too_many:
        raise CorruptCheckpointError(path, f"more than {len(out) - len(first):,} hard links name datasets already met "
                                           f"({len(first):,} datasets + {ALIAS_FLOOR:,}), e.g. {too_many[0][:80]!r}")
    return out


def open_h5(path: str) -> Checkpoint:
    # h5py reports a damaged file as whatever HDF5's error stack maps to (OSError, KeyError,
    # RuntimeError "bad local heap signature", ValueError...): all of it is the file's damage.
    with reading(path, "damaged HDF5 file"):
        return _open_h5(path)


def _h5_file(path: str) -> Any:
    """h5py's File over the local file, or over a URL's remote file (range requests: h5py reads any seekable file
    object; core/files.py open_regular)."""
    h5py = _h5py()
    try:
        # HDF5 opens links and external files relative to the file's folder (the default); nothing is
        # followed before member() and _check_storage have looked at it.
        return h5py.File(open_regular(path) if urls.is_url(path) else path, "r")
    except OSError as e:
        raise CorruptCheckpointError(path, f"not a readable HDF5 file ({e})") from None


def _open_h5(path: str) -> Checkpoint:
    h5py = _h5py()
    size = file_size(path)
    with _h5_file(path) as f:
        layout = "hdf5"
        stored_as: dict[str, str] = {}   # a hard-linked dataset's name -> the name of its storage (_walk)
        mw = member(f, "model_weights", path) if "model_weights" in f else None
        weights_root = mw if isinstance(mw, h5py.Group) else f
        names = load_attribute(weights_root, "layer_names")
        if names is not None:
            layout = "keras2-full" if weights_root is not f else "keras2"
            listing = _Listing(path)
            entries = _keras2(weights_root, names, listing)
            opt = member(f, "optimizer_weights", path) if "optimizer_weights" in f else None
            if layout == "keras2-full" and isinstance(opt, h5py.Group):
                entries += [(f"optimizer_weights/{wn}", listing.entry(opt, wn), f"/optimizer_weights/{wn}")
                            for wn in load_attribute(opt, "weight_names") or []]
        else:
            layout = "keras3" if "layers" in f or "vars" in f else "hdf5"
            walked = _walk(f, path, layout == "keras3")
            entries = [(name, dset, dset.name) for name, dset, _ in walked]
            stored_as = {name: storage for name, _, storage in walked}
        tensors: dict[str, TensorInfo] = {}
        copies = 0
        for name, dset, h5_path in entries:
            if not isinstance(dset, h5py.Dataset):
                raise CorruptCheckpointError(path, f"weight {name!r} names a group, not a dataset")
            if name in tensors and layout != "hdf5":
                first = tensors[name]
                if first.shape == tuple(int(d) for d in dset.shape) and first.dtype == _dtype(dset)[0]:
                    # One Keras variable listed by two layers: save_weights writes each layer's
                    # `weights`, and a layer that tracks another one lists that layer's variables
                    # again (HF TFBertForMaskedLM's `mlm___cls` holds the input embedding layer;
                    # tf_keras legacy/saving/hdf5_format.py save_weights_to_hdf5_group). Keras counts
                    # a variable once (count_params); the second copy is kept out, its bytes overhead.
                    _check_storage(dset, path, f)
                    copies += 1
                    continue
                name = dset.name.lstrip("/")   # two different weights under one name: keep both, qualified
            tensors[name] = _info(name, dset, path, size, h5_path, f, stored_as.get(name))
        metadata = {f"h5.{k}": attribute(f, k)[0] for k in ("backend", "keras_version") if k in f.attrs}
        metadata["h5.layout"] = layout
        if copies:
            metadata["h5.weights_listed_twice"] = str(copies)
    ckpt = Checkpoint(path=path, format="keras-h5", tensors=tensors, files=(path,), metadata=metadata)
    if any(t.offset is None for t in tensors.values()):
        ckpt.readers[path] = read_h5
    return ckpt


def _hyperslab(dset: Any, prefix: tuple[int, ...], shape: tuple[int, ...], start: int, count: int) -> list[NDArray[Any]]:
    """Elements [start, start + count) of the C-order flattening of dset[prefix], as at most
    2 x rank + 1 hyperslab reads that select exactly those elements (never a whole row more: a
    chunked dataset's rows can be far bigger than the chunk asked for)."""
    import numpy as np

    if not count:   # (a zero-size variable: a Dense of 0 inputs stores a (0, units) kernel)
        return [np.empty(0, dset.dtype)]
    if len(shape) == 1:
        return [np.asarray(dset[prefix + (slice(start, start + count),)]).reshape(-1)]
    row = math.prod(shape[1:])
    out, pos, end = [], start, start + count
    while pos < end:
        r, off = divmod(pos, row)
        if off == 0 and end - pos >= row:
            n = (end - pos) // row
            out.append(np.asarray(dset[prefix + (slice(r, r + n),)]).reshape(-1))
            pos += n * row
        else:
            take = min(row - off, end - pos)
            out += _hyperslab(dset, prefix + (r,), shape[1:], off, take)
            pos += take
    return out


def value_dataset(h5: Any, info: TensorInfo) -> Any:
    """The dataset of `info` in the open file `h5`, checked before its values are read (here and in keras_zip.py)."""
    dset = h5[str(info.extra["h5_path"])]
    if tuple(dset.shape) != info.shape:
        raise CorruptCheckpointError(info.file, f"dataset {dset.name!r} changed shape since it was opened")
    if dset.chunks is not None and dset.id.get_create_plist().get_nfilters():
        # HDF5 decompresses a filtered chunk whole for any element of it, again on every read: a 260 KB file's one
        # 256 MiB chunk of zeros took 124 s of CPU (64 reads of 4 MiB), a 16-element dataset's 512 MiB chunk 512 MiB
        # of memory. A chunk is held to what its dataset stores, as a deflated member is.
        check_inflation(info.file, f"tensor {info.name!r}: one HDF5 chunk of {list(dset.chunks)}",
                        math.prod(dset.chunks) * dset.dtype.itemsize, int(dset.id.get_storage_size()))
    return dset


def read_h5(info: TensorInfo, start: int, count: int) -> NDArray[Any]:
    """Elements [start, start + count): contiguous datasets straight from the file; chunked and
    compressed ones through h5py, selecting exactly those elements. (What h5py raises on damaged
    chunks is converted where values are read, Checkpoint._read.)"""
    if info.offset is not None:
        return read_flat_file(info, start, count)
    import numpy as np

    if not urls.is_url(info.file):
        regular(info.file)   # h5py opens it itself: a file swapped for a FIFO must not block it
    with _h5_file(info.file) as f:
        dset = value_dataset(f, info)
        if not info.shape:
            values = np.asarray(dset[()]).reshape(-1)
        else:
            parts = _hyperslab(dset, (), info.shape, start, count)
            values = parts[0] if len(parts) == 1 else np.concatenate(parts)
    if info.dtype == "BF16":
        return dtypes.decode(values.view(np.uint8), "BF16", values.size)
    return values.astype(values.dtype.newbyteorder("<")) if values.dtype.byteorder == ">" else values


register(Format("keras-h5", accept, open_h5, (".h5", ".hdf5", ".keras")))
