"""A file's tensors held as columns (issue 35): a safetensors header of 200,000 tensors made a TensorInfo per name
before anything was asked of it, and the census then walked those objects to read back their names, dtypes and
shapes. A TensorTable keeps one list per field; the census reads the lists (`columns`), and a TensorInfo is made for
a name when something asks for that name, then kept, so that the table reads as the dict of TensorInfo it replaces.

It holds what TensorInfo.validated promises: contiguous little-endian tensors whose shapes the reader checked, with
no storage, stride or extra facts."""
from __future__ import annotations

import operator
from array import array
from collections.abc import ItemsView, Iterable, Iterator, KeysView, Mapping, Sequence, ValuesView
from typing import Any, NamedTuple

from .tensor import TensorInfo

_HAS_EXTRA = operator.attrgetter("extra")   # filter(_HAS_EXTRA, tensors): those with extra facts, sifted in C


class TensorTable(Mapping[str, TensorInfo]):
    __slots__ = ("names", "dtypes", "shapes", "numels", "files", "offsets", "nbytes", "_index", "_made")

    def __init__(self, names: list[str], dtypes: list[str], shapes: list[tuple[int, ...]], numels: list[int],
                 files: list[str], offsets: Sequence[int], nbytes: list[int]):
        """One row a tensor, in the file's order; names distinct, each column as long as `names`. offsets: an
        array("q") (8 bytes a row; a list holds a distinct int object of 32 bytes each) or a list."""
        self.names, self.dtypes, self.shapes, self.numels = names, dtypes, shapes, numels
        self.files, self.offsets, self.nbytes = files, offsets, nbytes
        self._index = dict(zip(names, range(len(names))))
        self._made: dict[str, TensorInfo] = {}

    @classmethod
    def concat(cls, tables: list[TensorTable]) -> TensorTable:
        """The rows of `tables` one after another (a sharded checkpoint's shards); the caller checked that no name
        is in two of them."""
        def joined(column: str) -> list[Any]:
            return [v for t in tables for v in getattr(t, column)]
        offsets = array("q")
        for t in tables:
            offsets.extend(t.offsets)
        out = cls(joined("names"), joined("dtypes"), joined("shapes"), joined("numels"), joined("files"), offsets,
                  joined("nbytes"))
        for t in tables:
            out._made.update(t._made)   # a TensorInfo already handed out stays the one a name reads
        return out

    def __getitem__(self, name: str) -> TensorInfo:
        t = self._made.get(name)
        if t is None:
            i = self._index[name]
            t = self._made[name] = TensorInfo.validated(name, self.dtypes[i], self.shapes[i], self.files[i],
                                                          self.offsets[i], self.nbytes[i])
        return t

    def __iter__(self) -> Iterator[str]:
        return iter(self._index)

    def __len__(self) -> int:
        return len(self.names)

    def __contains__(self, name: object) -> bool:
        return name in self._index

    def keys(self) -> KeysView[str]:
        return self._index.keys()

    def values(self) -> ValuesView[TensorInfo]:
        return self._every().values()

    def items(self) -> ItemsView[str, TensorInfo]:
        return self._every().items()

    def _every(self) -> dict[str, TensorInfo]:
        """Every row's TensorInfo, made at once (in C) where not made yet."""
        if len(self._made) < len(self.names):
            every = dict(zip(self.names, map(TensorInfo.validated, self.names, self.dtypes, self.shapes, self.files,
                                             self.offsets, self.nbytes)))
            every.update(self._made)
            self._made = every
        return self._made


class Columns(NamedTuple):
    names: list[str]
    dtypes: list[str]
    shapes: list[tuple[int, ...]]
    numels: list[int]
    nbytes: list[int]   # as stored in the file (TensorInfo.nbytes)


def columns(tensors: Mapping[str, TensorInfo]) -> Columns:
    """Every tensor's name, dtype, shape, element count and stored bytes, in order: a TensorTable's own columns, else
    read from each TensorInfo."""
    if isinstance(tensors, TensorTable):
        return Columns(tensors.names, tensors.dtypes, tensors.shapes, tensors.numels, tensors.nbytes)
    infos = list(tensors.values())
    return Columns([t.name for t in infos], [t.dtype for t in infos], [t.shape for t in infos],
                   [t.numel for t in infos], [t.nbytes for t in infos])


def with_extra(tensors: Mapping[str, TensorInfo]) -> Iterable[TensorInfo]:
    """The tensors that carry extra facts (a quantised weight, a kernel's stored layout...); none in a TensorTable."""
    return () if isinstance(tensors, TensorTable) else filter(_HAS_EXTRA, tensors.values())
