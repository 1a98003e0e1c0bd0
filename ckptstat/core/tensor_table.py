"""A file's tensors held as columns (issue 35): a safetensors header of 200,000 tensors made a TensorInfo per name
before anything was asked of it, and the census then walked those objects to read back their names, dtypes and
shapes. A TensorTable keeps one list per field; the census reads the lists (`columns`), and a TensorInfo is made for
a name when something asks for that name, then kept, so that the table reads as the dict of TensorInfo it replaces.

It holds what TensorInfo.validated promises: contiguous little-endian tensors whose shapes the reader checked, with
no storage, stride or extra facts."""
from __future__ import annotations

import itertools
import operator
from array import array
from collections.abc import ItemsView, Iterable, Iterator, Mapping, Sequence, ValuesView
from typing import Any, NamedTuple, overload

from .tensor import TensorInfo

_HAS_EXTRA = operator.attrgetter("extra")   # filter(_HAS_EXTRA, tensors): those with extra facts, sifted in C


SCANS = 32   # look-ups of a name by scanning before TensorTable makes its index


class TensorTable(Mapping[str, TensorInfo]):
    __slots__ = ("names", "dtypes", "shapes", "numels", "files", "offsets", "nbytes", "_index", "_scans", "_made")

    def __init__(self, names: list[str], dtypes: list[str], shapes: list[tuple[int, ...]], numels: list[int],
                 files: Sequence[str], offsets: Sequence[int], nbytes: list[int]):
        """One row a tensor, in the file's order; names distinct, each column as long as `names`. offsets: an
        array("q") (8 bytes a row; a list holds a distinct int object of 32 bytes each) or a list; files: a list, or
        Repeated (one file's table)."""
        self.names, self.dtypes, self.shapes, self.numels = names, dtypes, shapes, numels
        self.files, self.offsets, self.nbytes = files, offsets, nbytes
        self._index: dict[str, int] | None = None   # name -> row, made by _row once scanning would cost more
        self._scans = 0
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

    def _row(self, name: str) -> int | None:
        """The row of `name`, else None. A header read for its summary looks up a few dozen names (its metadata's,
        a family's signature tensors): the first SCANS look-ups scan the names column (10 ms at 1M names), the
        next makes the index (0.5 s and ~70 MB at 1M names: a dict entry and an int a row)."""
        if self._index is None:
            if self._scans < SCANS:
                self._scans += 1
                try:
                    return self.names.index(name)
                except ValueError:
                    return None
            self._index = dict(zip(self.names, range(len(self.names))))
        return self._index.get(name)

    def __getitem__(self, name: str) -> TensorInfo:
        t = self._made.get(name)
        if t is None:
            i = self._row(name)
            if i is None:
                raise KeyError(name)
            t = self._made[name] = TensorInfo.validated(name, self.dtypes[i], self.shapes[i], self.files[i],
                                                          self.offsets[i], self.nbytes[i])
        return t

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.names)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and (name in self._made or self._row(name) is not None)

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


class Repeated(Sequence[str]):
    """One value `length` times, without a list (8 bytes a row): the files column of a one-file table."""

    __slots__ = ("value", "length")

    def __init__(self, value: str, length: int):
        self.value, self.length = value, length

    def __len__(self) -> int:
        return self.length

    def __iter__(self) -> Iterator[str]:
        return itertools.repeat(self.value, self.length)

    @overload
    def __getitem__(self, i: int) -> str: ...

    @overload
    def __getitem__(self, i: slice) -> list[str]: ...

    def __getitem__(self, i: int | slice) -> str | list[str]:
        if isinstance(i, slice):
            return [self.value] * len(range(*i.indices(self.length)))
        if not -self.length <= i < self.length:
            raise IndexError(i)
        return self.value


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
