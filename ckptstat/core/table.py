"""Rows of the same keys held as columns: a stats report's 200,000 per-tensor rows (issue 35). A row as a dict
costs ~2 KB and ~1 µs to build; as a slot in a list per key, a pointer; as an entry of a numpy array, its 1 to 8
bytes. A Table reads as a sequence of dicts (`table[i]`, iteration, len, ==), each made when read, of Python values;
core/jsontext.py writes it from its columns, as the list of those dicts (`list(table)`) would be written.

A column is a list, or a numpy array of bool, int64 or float64 (a run of tiny tensors' statistics: analysis/stats/
tiny.py), read as the list its `tolist()` gives, a float NaN read as None (`values`). Rows added (`append`,
`extend`) are kept as parts and joined when the columns are next read, each column once: one array where every
part's is an array or a list of values it holds exactly (`_packed`), else one list.

A key whose values are dicts of their own fixed keys (a row's quantiles) is a nested Table (`nested`)."""
from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from itertools import chain
from typing import TYPE_CHECKING, Any, overload

if TYPE_CHECKING:
    import numpy as np

Row = dict[str, Any]
BLOCK = 4096   # an array column is read this many values at a time (their Python objects never all at once)


def is_array(col: object) -> bool:
    """Whether a column is a numpy array (not a list or a nested Table)."""
    return not isinstance(col, (list, Table))


def values(col: Any) -> Any:
    """A column's values as Python objects: an array's `tolist()`, NaN read as None; a list or a Table as it is."""
    if not is_array(col):
        return col
    out = col.tolist()
    if col.dtype.kind == "f":
        import numpy as np

        for i in np.flatnonzero(np.isnan(col)).tolist():
            out[i] = None
    return out


def iterate(col: Any) -> Iterator[Any]:
    """A column's values one by one, as `values` reads them (an array's a block at a time: never all at once)."""
    if not is_array(col):
        return iter(col)
    return chain.from_iterable(values(col[i:i + BLOCK]) for i in range(0, len(col), BLOCK))


def _packed(col: list[Any], dtype: Any) -> Any:
    """A list of values as an array of `dtype` that reads back as the same values (floats and None: float64, no
    NaN of their own; ints in int64; bools), else None."""
    import numpy as np

    kinds = set(map(type, col))
    try:
        if dtype.kind == "f" and kinds <= {float, type(None)}:
            a = np.array(col, dtype)
            return a if int(np.isnan(a).sum()) == col.count(None) else None
        if (dtype.kind == "i" and kinds <= {int}) or (dtype.kind == "b" and kinds <= {bool}):
            return np.array(col, dtype)
    except OverflowError:   # an int beyond int64
        pass
    return None


def _joined(cols: list[Any]) -> Any:
    """Columns one after another: one array if every nonempty one is an array of one dtype or a list `_packed`
    into it, else one list."""
    cols = [c for c in cols if len(c)]
    if len(cols) <= 1:
        return cols[0] if cols else []
    arrays = [c for c in cols if is_array(c)]
    if arrays:
        import numpy as np

        dtype = arrays[0].dtype
        packed = [c if is_array(c) else _packed(c, dtype) for c in cols]
        if all(p is not None and p.dtype == dtype for p in packed):
            return np.concatenate(packed)
    return list(chain.from_iterable(map(values, cols)))


class Table(Sequence[Row]):
    __slots__ = ("_columns", "_parts", "_open")

    def __init__(self, keys: Sequence[str], nested: Mapping[str, Sequence[str]] | None = None):
        nested = nested or {}
        self._columns: dict[str, Any] = {k: Table(nested[k]) if k in nested else [] for k in keys}
        self._parts: list[Table] = []      # rows added since the columns were last read
        self._open: Table | None = None    # the last part, when it takes appended rows (list columns)

    @property
    def columns(self) -> dict[str, Any]:
        """Each key's column (the rows added since the last read joined to it first)."""
        if self._parts:
            parts, self._parts, self._open = self._parts, [], None
            for k, c in self._columns.items():
                if isinstance(c, Table):
                    for p in parts:
                        c.extend(p.columns[k])
                else:
                    self._columns[k] = _joined([c, *(p.columns[k] for p in parts)])
        return self._columns

    @columns.setter
    def columns(self, cols: dict[str, Any]) -> None:
        self._columns, self._parts, self._open = cols, [], None

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(self._columns)

    def __len__(self) -> int:
        col = next(iter(self.columns.values()), None)
        return 0 if col is None else len(col)

    @overload
    def __getitem__(self, i: int) -> Row: ...
    @overload
    def __getitem__(self, i: slice) -> Table: ...

    def __getitem__(self, i: int | slice) -> Row | Table:
        if isinstance(i, slice):
            out = Table(())
            out.columns = {k: c[i] for k, c in self.columns.items()}
            return out
        n = len(self)
        if not -n <= i < n:
            raise IndexError("table index out of range")
        i %= n
        return {k: values(c[i:i + 1])[0] if is_array(c) else c[i] for k, c in self.columns.items()}

    def __iter__(self) -> Iterator[Row]:
        keys = self.keys
        return (dict(zip(keys, row)) for row in zip(*map(iterate, self.columns.values())))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and not isinstance(other, str) and list(self) == list(other)

    __hash__ = None   # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Table({len(self)} rows: {', '.join(self._columns)})"

    def append(self, row: Mapping[str, Any]) -> None:
        """One row, of exactly the table's keys in its order."""
        if tuple(row) != self.keys:
            raise ValueError(f"a row of keys {tuple(row)} in a table of {self.keys}")
        if self._open is None:
            self._open = self._empty()
            self._parts.append(self._open)
        for k, c in self._open._columns.items():
            c.append(row[k])

    def extend(self, rows: Table | Sequence[Mapping[str, Any]]) -> None:
        """Rows of another table (its columns, joined when read: the table is not to be changed after) or dicts
        (row by row)."""
        if not isinstance(rows, Table):
            for r in rows:
                self.append(r)
            return
        if rows.keys != self.keys:
            raise ValueError(f"a table of keys {rows.keys} added to a table of {self.keys}")
        self._parts.append(rows)
        self._open = None

    def _empty(self) -> Table:
        """A table of no rows, of this one's keys and nested tables, its columns lists."""
        out = Table(())
        out._columns = {k: c._empty() if isinstance(c, Table) else [] for k, c in self._columns.items()}
        return out

    def add_column(self, key: str, values: Sequence[Any] | np.ndarray) -> None:
        """A column after the others, one value a row (a list, or an array as `columns` reads it)."""
        if len(values) != len(self) or key in self.columns:
            raise ValueError(f"column {key!r}: {len(values)} values for {len(self)} rows")
        self.columns[key] = values
