"""The TF bundle reader: `<prefix>.index` plus `<prefix>.data-SSSSS-of-NNNNN` shards, and usually a text
file `checkpoint` naming the latest prefix (docs/formats.md section 4). Every entry's byte range is
checked against its shard and its size against dtype and shape; registration."""
from __future__ import annotations

import math
import os
import re
from dataclasses import replace

from ...core import Checkpoint, TensorInfo, dtypes
from ...core.files import check_inside, external_allowed, open_regular, refuse_external, regular
from ...core.io import read_bytes
from ...errors import CorruptCheckpointError, FileNotFound
from ..keras_names import dense_layout
from ..registry import _FILE_HOOKS, Format, Probe, register
from .checksums import verify
from .graph import OBJECT_GRAPH_KEY, Node, model_paths, object_graph
from .partitions import describe, find_slices, read_partitioned
from .records import Entry, parse_entry, parse_header, tensor_dtype
from .table import MAGIC_BYTES, read_table
from .wire import Bad

_DATA_NAME = re.compile(r"^(?P<prefix>.+)\.data-\d{5}-of-\d{5}$")


def accept(probe: Probe) -> bool:
    # By magic; or by name, so that a damaged `.index` gets this reader's precise error.
    if probe.tail == MAGIC_BYTES or probe.path.endswith(".index"):
        return True
    m = _DATA_NAME.match(probe.path)
    return bool(m and os.path.isfile(m["prefix"] + ".index"))


def data_file(prefix: str, shard: int, num_shards: int) -> str:
    return f"{prefix}.data-{shard:05d}-of-{num_shards:05d}"


def _inside(path: str, folder: str) -> bool:
    real, root = os.path.realpath(path), os.path.realpath(folder)
    return real.startswith(root.rstrip(os.sep) + os.sep)


def latest_prefix(pointer: str) -> str:
    """The prefix the `checkpoint` text file names (CheckpointState text proto, model_checkpoint_path).

    The pointer's folder is the checkpoint: a relative path inside it is taken as written; otherwise
    (an absolute path, as TF writes them, or `../`) the copy in the folder of the same name is
    preferred, so that a copied run reads its own weights and not the original run's. A path that
    still leads outside the folder is refused unless --allow-external."""
    with open_regular(pointer, "checkpoint state file") as f:
        text = f.read(1 << 20).decode("utf-8", "replace")
    # One line, as TF writes it (text_format): `[ \t]`, not `\s`, and no newline inside the quotes, so that each
    # line is scanned once (with `\s*` a 1 MB file of newlines made the search quadratic: ~15 CPU minutes)
    m = re.search(r'^[ \t]*model_checkpoint_path:[ \t]*"((?:[^"\\\n]|\\.)*)"', text, re.M)
    if not m:
        raise CorruptCheckpointError(pointer, "no model_checkpoint_path in this checkpoint state file")
    named = m.group(1).encode("utf-8", "backslashreplace").decode("unicode_escape", "replace")
    folder = os.path.dirname(os.path.abspath(pointer))
    written = named if os.path.isabs(named) else os.path.join(folder, named)
    local = os.path.join(folder, os.path.basename(named))
    if _inside(written + ".index", folder) and os.path.isfile(written + ".index"):
        return written
    if os.path.basename(named) and os.path.isfile(local + ".index") and _inside(local + ".index", folder):
        return local
    if os.path.isfile(written + ".index"):
        if not external_allowed():
            raise refuse_external(pointer, f"model_checkpoint_path {named!r} leads to {os.path.realpath(written)!r}")
        return written
    raise FileNotFound(local + ".index", f"named by {os.path.basename(pointer)} (model_checkpoint_path {named!r}) "
                                         "but missing")


def open_pointer(pointer: str) -> Checkpoint:
    index = latest_prefix(pointer) + ".index"
    check_inside(index, "index", pointer)
    regular(index, "index")
    return open_bundle(index)


def open_bundle(path: str) -> Checkpoint:
    m = _DATA_NAME.match(path)
    if m:                                # a data shard was named: open its index
        path = m["prefix"] + ".index"
    prefix = path[: -len(".index")] if path.endswith(".index") else path
    try:
        return _open(path, prefix)
    except Bad as e:
        raise CorruptCheckpointError(path, str(e)) from None


def _extra(name: str, shape: tuple[int, ...], extra: dict[str, object]) -> dict[str, object]:
    layout = dense_layout(name, shape)
    if layout:
        extra["layout"] = layout
    return extra


def _numel_bytes(dtype: str, shape: tuple[int, ...]) -> int:
    return dtypes.get(dtype).nbytes(math.prod(shape))


def _open(path: str, prefix: str) -> Checkpoint:
    table = read_table(path)
    if not table or table[0][0] != b"":
        raise Bad("no bundle header (the entry with the empty key)")
    header = parse_header(table[0][1])
    num_shards = header.num_shards
    if not 1 <= num_shards <= 100_000:
        raise Bad(f"header claims {num_shards} data shards")
    byteorder = "big" if header.endianness == 1 else "little"
    shards = [data_file(prefix, i, num_shards) for i in range(num_shards)]
    sizes: dict[int, int] = {}

    def shard_size(i: int, name: str) -> int:
        if i >= num_shards:
            raise Bad(f"tensor {name!r} is in shard {i} but the header says there are {num_shards}")
        if i not in sizes:
            if not os.path.lexists(shards[i]):
                raise FileNotFound(shards[i], f"data shard of {os.path.basename(path)} is missing")
            check_inside(shards[i], "data shard", path)
            sizes[i] = regular(shards[i], "data shard").st_size
        return sizes[i]

    def check_range(name: str, e: Entry, dtype: str, shape: tuple[int, ...]) -> None:
        end = shard_size(e.shard_id, name)
        if e.offset < 0 or e.size < 0 or e.offset + e.size > end:
            raise Bad(f"tensor {name!r}: bytes [{e.offset}, {e.offset + e.size}) run past the end of "
                      f"{os.path.basename(shards[e.shard_id])} ({end} bytes)")
        if dtype == "STR":
            # docs/formats.md section 4: a varint length per string (1 byte at least), then 4 bytes of crc
            numel = math.prod(shape)
            if numel and e.size < numel + 4:
                raise Bad(f"tensor {name!r}: {numel} strings cannot fit in {e.size} bytes")
        elif e.size != _numel_bytes(dtype, shape):
            raise Bad(f"tensor {name!r}: {e.size} bytes stored but {dtype}{list(shape)} needs {_numel_bytes(dtype, shape)}")

    entries = {key: parse_entry(value) for key, value in table[1:]}
    tensors: dict[str, TensorInfo] = {}
    partitioned = 0
    for key, e in entries.items():
        if key[:1] == b"\x00":
            continue                      # a slice of a partitioned variable, gathered below
        try:
            name = key.decode("utf-8")
        except UnicodeDecodeError:
            raise Bad(f"tensor key {key[:40]!r} is not UTF-8") from None
        dtype = tensor_dtype(e.dtype, name)
        if e.slices:
            parts = find_slices(name, e, entries)
            for part, extent in parts:
                check_range(name, part, dtype, tuple(n for _, n in extent))
            tensors[name] = TensorInfo(name, dtype, e.shape, path, None, sum(p.size for p, _ in parts), byteorder,
                                       storage=name, extra=_extra(name, e.shape, {"partitions": describe(parts, shards)}))
            partitioned += 1
            continue
        check_range(name, e, dtype, e.shape)
        extra: dict[str, object] = {"crc32c": e.crc32c} if e.crc32c is not None else {}
        tensors[name] = TensorInfo(name, dtype, e.shape, shards[e.shard_id], e.offset, e.size, byteorder,
                                   storage=name, extra=_extra(name, e.shape, extra))

    files = (path,) + tuple(shards[i] for i in sorted(sizes))
    ckpt = Checkpoint(path=prefix, format="tf-bundle", tensors=tensors, files=files,
                      metadata={"tf.num_shards": str(num_shards), "tf.endianness": byteorder,
                                "tf.version": str(header.version)})
    if partitioned:
        ckpt.readers[path] = read_partitioned
    ckpt.metadata["tf.partitioned"] = str(partitioned)
    graph = tensors.get(OBJECT_GRAPH_KEY)
    if graph is not None and graph.dtype == "STR" and graph.numel == 1:
        _adopt_model_variables(ckpt, object_graph(read_bytes(graph.file, graph.offset or 0, graph.nbytes)))
    return ckpt


def _adopt_model_variables(ckpt: Checkpoint, nodes: list[Node]) -> None:
    """Variables keyed under optimizer/ that the model itself reaches are named by their model path
    (graph.model_paths); TF's key stays in extra.checkpoint_key."""
    adopted, tensors = 0, ckpt.editable()
    for key, new in model_paths(nodes):
        if key not in tensors or new in tensors:
            continue
        info = tensors.pop(key)
        tensors[new] = replace(info, name=new, extra=_extra(new, info.shape, {**info.extra, "checkpoint_key": key}))
        adopted += 1
    if adopted:
        ckpt.tensors = dict(sorted(tensors.items()))
        ckpt.notes.append(f"object graph: {adopted} variable(s) keyed under optimizer/ are the model's own "
                          "(reachable from it); shown under their model path, TF's key in extra.checkpoint_key")


register(Format("tf-bundle", accept, open_bundle, (".index",), verify=verify))
# A folder's (or a user's) `checkpoint` state file names the latest prefix.
_FILE_HOOKS["checkpoint"] = open_pointer
