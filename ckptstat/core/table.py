"""Rows of the same keys held as columns: a stats report's 200,000 per-tensor rows (issue 35). A row as a dict
costs ~2 KB and ~1 µs to build; as a slot in a list per key, a pointer. A Table reads as a sequence of dicts
(`table[i]`, iteration, len, ==), each made when read; core/jsontext.py writes it from its columns, as the list
of those dicts (`list(table)`) would be written.

A key whose values are dicts of their own fixed keys (a row's quantiles) is a nested Table (`nested`)."""
from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, overload

Row = dict[str, Any]


class Table(Sequence[Row]):
    __slots__ = ("columns",)

    def __init__(self, keys: Sequence[str], nested: Mapping[str, Sequence[str]] | None = None):
        nested = nested or {}
        self.columns: dict[str, Any] = {k: Table(nested[k]) if k in nested else [] for k in keys}

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(self.columns)

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
        if not -len(self) <= i < len(self):
            raise IndexError("table index out of range")
        return {k: c[i] for k, c in self.columns.items()}

    def __iter__(self) -> Iterator[Row]:
        keys = self.keys
        return (dict(zip(keys, values)) for values in zip(*self.columns.values()))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and not isinstance(other, str) and list(self) == list(other)

    __hash__ = None   # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Table({len(self)} rows: {', '.join(self.columns)})"

    def append(self, row: Mapping[str, Any]) -> None:
        """One row, of exactly the table's keys in its order."""
        if tuple(row) != self.keys:
            raise ValueError(f"a row of keys {tuple(row)} in a table of {self.keys}")
        for k, c in self.columns.items():
            c.append(row[k])

    def extend(self, rows: Table | Sequence[Mapping[str, Any]]) -> None:
        """Rows of another table (column by column) or dicts (row by row)."""
        if not isinstance(rows, Table):
            for r in rows:
                self.append(r)
            return
        if rows.keys != self.keys:
            raise ValueError(f"a table of keys {rows.keys} added to a table of {self.keys}")
        for k, c in self.columns.items():
            c.extend(rows.columns[k])

    def add_column(self, key: str, values: list[Any]) -> None:
        """A column after the others, one value a row."""
        if len(values) != len(self) or key in self.columns:
            raise ValueError(f"column {key!r}: {len(values)} values for {len(self)} rows")
        self.columns[key] = values
