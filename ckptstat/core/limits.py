"""The limits that bound what a hostile file can make ckptstat allocate, loop over or read
(docs/security.md lists each with its default and why).

Every reader checks a size, count or length a file claims against the file's own size first; these
limits come on top, where the file's size alone would still allow too much (a Python object costs
10-100x the bytes that describe it) or where the claim is about work, not bytes (a sparse dataset
of 2^60 elements stores almost nothing). A limit that a real checkpoint could reach can be raised:
`ckptstat --limit NAME=N ...` on the command line, `set_limits(NAME=N)` from Python.
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace


@dataclass(frozen=True)
class Limits:
    # config.json (and --config): read at most this many bytes; a bigger file is refused.
    config_bytes: int = 16 << 20
    # A sharded checkpoint's *.index.json (a 200,000-tensor index is ~15 MB).
    index_bytes: int = 128 << 20
    # Values a tensor may yield per byte it stores (x stored bytes, + expansion_floor): a stride-0 view,
    # an HDF5 dataset of unallocated chunks, a compressed dataset. deflate peaks near 1032:1.
    expansion: int = 4096
    expansion_floor: int = 64 << 20
    # A compressed zip member (a recompressed torch file): its declared size may be at most this many
    # times its compressed size (+ 1 MiB). Storage records are streamed (deflate peaks near 1032:1);
    # data.pkl is unpickled in memory, and pickles compress 3-10:1, so its ratio is tighter. data.pkl
    # may also not pass pickle_bytes, compressed or not.
    zip_ratio: int = 1100
    pickle_ratio: int = 64
    pickle_bytes: int = 256 << 20
    # Bytes a deflated member (an .npz array of savez_compressed, a .keras model.weights.h5) may inflate to per
    # compressed byte (+ expansion_floor) when its values are read or it is decompressed to a temporary file: real
    # weights deflate 1.1-3:1, zeros 1000:1 (a 3 MB .npz of three 1 GiB zero arrays took 27 s of `stats`).
    inflate_ratio: int = 128
    # A strided view over a compressed storage record, or a deflated .keras model.weights.h5, is
    # decompressed into a temporary file first: at most this many bytes of it.
    spill_bytes: int = 16 << 30
    # What a pickle may build, in bytes of Python objects per byte of pickle (+ 16 MiB): each opcode's object
    # (an empty set costs 216 bytes for 1 of pickle, a memo entry ~100 for 2) and what its calls return
    # (bytearray(), set(), OrderedDict(...) of memo'd objects: copies of one big object are not free). Real
    # saves build ~9 bytes a byte (130,000 tiny tensors: 8.6). The tensor names a pickle yields are charged too, at
    # ~1 KiB each (formats/torch/unpickler.py TENSOR_BYTES: real saves spend ~130 bytes of pickle a tensor).
    pickle_build_ratio: int = 16
    # GGUF: metadata keys and tensors (each costs ~1 KiB of Python objects), a key's or a tensor
    # name's length, and the longest string value kept as metadata (longer ones are summarised).
    gguf_keys: int = 1 << 16
    gguf_tensors: int = 1 << 18
    gguf_name_bytes: int = 1 << 16
    gguf_string_bytes: int = 1 << 20
    # HDF5: items in one attribute (layer_names, weight_names) and parts of a split attribute.
    h5_attribute_items: int = 1 << 20
    h5_attribute_parts: int = 1 << 12
    # TF2 object graph: depth of a path from the root (a chain of nodes costs depth^2 otherwise).
    tf_graph_depth: int = 1 << 10
    # Remote sources (docs/remote.md): requests and body bytes one command may make and fetch. A header-only
    # command on a 3-shard model makes ~10 requests of ~100 KiB each; values stream the whole checkpoint.
    remote_requests: int = 100_000
    remote_bytes: int = 1 << 40
    # Seconds one command may spend on the network, from its first request: one deadline however a server
    # behaves (a byte every 0.3 s, endless retries). Streaming a big checkpoint's values may need more.
    remote_seconds: int = 4 * 3600
    # `ckptstat scan URL` of a file that is not a zip (a bare pickle, a legacy stream, a tar): fetched whole when
    # it is at most this big; a bigger one is read by ranges up to this many bytes from its start, and the verdict
    # is 'unknown' when torch.load's path goes further (docs/torch.md, "Remote files").
    remote_scan_bytes: int = 64 << 20


    def inflated_pickle(self, compressed: int) -> int:
        """The most bytes scan decompresses a compressed pickle to (a deflated data.pkl, a `.pkl.gz`): pickle_ratio x
        its `compressed` bytes + 1 MiB, at most pickle_bytes; past it the rest is unknown."""
        return min(self.pickle_bytes, self.pickle_ratio * compressed + (1 << 20))


_current = Limits()


def limits() -> Limits:
    """The limits in force."""
    return _current


def names() -> list[str]:
    return [f.name for f in fields(Limits)]


def set_limits(**values: int) -> Limits:
    """Change some limits for the rest of the process (`ckptstat --limit NAME=N`); returns the old ones."""
    global _current
    unknown = sorted(set(values) - set(names()))
    if unknown:
        raise ValueError(f"unknown limit {unknown[0]!r}; limits are {', '.join(names())}")
    for k, v in values.items():
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ValueError(f"limit {k} must be a non-negative integer, got {v!r}")
    old, _current = _current, replace(_current, **values)
    return old


def reset(to: Limits | None = None) -> None:
    global _current
    _current = to if to is not None else Limits()
