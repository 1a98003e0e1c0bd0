"""Tables of one row per tensor (`tensors`, `stats --tensors`, `diff`'s changed tensors): a frontier MoE has 45k-140k
tensors, and rich lays out each cell through several measuring and rendering passes (~1 ms a row: `tensors` of
20,000 tensors took 24 s). Past FAST_ROWS rows, the title, header and rule are still rich's (the same table with
the rows' column widths and no row), and each row is one line written as rich lays it out: fmt.table's style
(SIMPLE_HEAD box, the table's padding between columns, none at the edges), the name column left-justified and
elided in the middle (names.elide) to what the other columns leave of the console's width (names.fit_names' rule),
the others right-justified. The same characters as rich's table (tests/test_render_rows.py compares them); on a
terminal the rows' dim parts (an elision's ellipsis, an alias line) are plain. Where only rich's layout can say (a
non-ASCII name to elide, columns that do not fit beside the narrowest name), the rich table is printed."""
from __future__ import annotations

from collections.abc import Sequence

from rich.cells import cell_len
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from .names import NARROWEST, Name, elide, fit_names, whole

FAST_ROWS = 1000

# A row: its name and the name it is an alias of or None (both inert text: names.inert), then the other cells.
Row = tuple[str, str | None, Sequence[str]]


def print_rows(console: Console, t: Table, rows: Sequence[Row]) -> None:
    """Print `rows` in `t`, a table made by fmt.table (its title and columns, no rows yet; its padding may be
    narrower). Cells are shown as text, never read as markup: a file-derived one must be inert (`name_cell`)."""
    if len(rows) < FAST_ROWS or not _fast(console, t, rows):
        console.print(_rich_table(console, t, rows))


def _rich_table(console: Console, t: Table, rows: Sequence[Row]) -> Table:
    for name, alias, cells in rows:
        shown: Name | Group = Name(Text(name))
        if alias is not None:
            shown = Group(shown, Name(Text("= ", style="dim").append(alias)))
        t.add_row(shown, *map(Text, cells))   # text, never markup
    return fit_names(t, console)


def _width(s: str) -> int:
    return len(s) if s.isascii() else cell_len(s)


def _fast(console: Console, head: Table, rows: Sequence[Row]) -> bool:
    """Print the table the fast way; False (nothing printed) where only rich's layout can say."""
    _, right, _, left = head.padding
    gap = " " * (right + 1 + left)   # a column's right padding, the box's divider (a space), the next's left
    widths = [_width(str(c.header)) for c in head.columns]
    for name, alias, cells in rows:
        widths[0] = max(widths[0], _width(name), 0 if alias is None else 2 + _width(alias))
        for i, c in enumerate(cells, 1):
            widths[i] = max(widths[i], _width(c))
    total = sum(widths) + len(gap) * (len(widths) - 1) + 2
    excess = total - console.options.max_width
    if excess > 0 and not whole(console):
        widths[0] = max(NARROWEST, widths[0] - excess)
        if sum(widths) + len(gap) * (len(widths) - 1) + 2 > console.options.max_width:
            return False
        if not all(line.isascii() for name, alias, _ in rows for line in (name, alias or "")):
            return False
    for column, w in zip(head.columns, widths):
        column.width = w
    if excess > 0 and whole(console):   # a file: as wide as its rows (fit_names)
        head.width = total
    with console.capture() as cap:
        console.print(head, crop=False)
    lines = cap.get().split("\n")   # title, top edge, header, rule, bottom edge, ""
    w0, rest = widths[0], widths[1:]
    blank = gap.join(" " * w for w in rest)
    body = []
    for name, alias, cells in rows:
        body.append(" " + _cell(name, w0) + gap + gap.join(_right(c, w) for c, w in zip(cells, rest)) + " ")
        if alias is not None:
            body.append(" " + _cell("= " + alias, w0) + gap + blank + " ")
    out = "\n".join(lines[:-2] + body + lines[-2:])
    try:
        console.file.write(out)
        console.file.flush()
    except BrokenPipeError:
        console.on_broken_pipe()
    return True


def _cell(name: str, width: int) -> str:
    shown = elide(name, width) if _width(name) > width else name
    return shown + " " * (width - _width(shown))


def _right(cell: str, width: int) -> str:
    return " " * (width - _width(cell)) + cell

