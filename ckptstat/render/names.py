"""Names that never wrap: a tensor or module name too long for its room keeps its start and its end
and loses its middle (`bert.encoder.layer.1…output.dense.weight`), cut at dots where it can.

`Name` is a rich renderable that elides itself to whatever width rich gives it (a table cell, or the
console's width), so every table and list that shows names reads the same at 80 columns and on a wide
terminal. Only a terminal's width forces a cut: output that is not a terminal, with no width declared
($COLUMNS), is a file or a pipe, which has no width; there (`whole(console)`) a table of names is as wide
as its rows and a name line as long as its name (issue 32: `diff A B > file` once read `encode…weight`).
"""
from __future__ import annotations

import re

from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from ..core.text import inert

ELLIPSIS = "…"
# Where a name may be cut, with what a cut there costs in characters: between components of module
# paths (bert.encoder.layer.1), TF scopes (bert/encoder) and Keras names (dense/kernel:0) for free;
# the head may also end between words of one component (post_attention) at a price. The tail always
# starts at a component, so that `…proj.weight` never stands for both `down_proj` and `up_proj`.
SEPARATORS = {".": 0, "/": 0, ":": 0, "_": 3, "-": 3}
MIN_WIDTH = 16       # what a name asks for when rich must squeeze the table
NARROWEST = 10       # the least a name column gets when the other columns need the rest
_INDEX = re.compile(r"[./_\[](\d+)(?:[./:_\]]|$)")


def safe(s: object) -> Text:
    """A file-derived string as inert text: control characters shown as \\xNN, and wrapped in Text
    so rich never reads it as markup."""
    return Text(inert(s))


def _cuts(s: str, width: int) -> tuple[int, int]:
    """(end of the head, start of the tail) so that s[:head] + ELLIPSIS + s[tail:] is `width` long
    at most. Among cuts at separators that keep at least two thirds of the room, prefer a tail that
    keeps the last two components (`k_proj.weight`: what tells sibling rows apart), then the most
    kept (a head that keeps the first layer index counts 4 more, a head cut inside a component 3
    less), then the longest tail. Without such a cut, cut anywhere, half and half."""
    room = width - len(ELLIPSIS)
    seps = [i for i, c in enumerate(s) if c in SEPARATORS]
    cost = {i: SEPARATORS[s[i]] for i in seps}
    starts = [j for j in seps if not cost[j]]   # a tail starts at a component
    index = _INDEX.search(s)   # a layer index is worth a few characters of the rest
    index_end = index.end(1) if index else len(s) + 1
    least = max(1, room // 6)   # keep a real start and a real end
    best: tuple[int, int] | None = None
    best_key: tuple[bool, int, int] = (False, -1, 0)
    for h in seps:                # head = s[:h], the separator dropped
        if h < least or h > room - least:
            continue
        for j in starts:          # tail = s[j + 1:]
            t = len(s) - j - 1
            if j <= h or t < least or h + t > room or 3 * (h + t) < 2 * room:
                continue
            key = (len(starts) >= 2 and j <= starts[-2], h + t + (4 if h >= index_end else 0) - cost[h], t)
            if key > best_key:
                best, best_key = (h, j + 1), key
    return best or (room // 2, len(s) - (room - room // 2))


def elide(s: str, width: int) -> str:
    """`s` in at most `width` characters: the middle replaced by an ellipsis when it is too long."""
    if len(s) <= width:
        return s
    if width <= len(ELLIPSIS) + 1:
        return s[:width]
    h, t = _cuts(s, width)
    return s[:h] + ELLIPSIS + s[t:]


def elide_text(text: Text, width: int) -> Text:
    """`elide` for styled text: the kept head and tail keep their styles."""
    if text.cell_len <= width:
        return text
    s = text.plain
    if width <= len(ELLIPSIS) + 1:
        return text[:width]
    h, t = _cuts(s, width)
    out = text[:h]
    out.append(ELLIPSIS, style="dim")
    out.append_text(text[t:])
    return out


def whole(console: Console) -> bool:
    """Whether names are shown whole, never elided: commands/common.py's console says so when stdout is not
    a terminal and $COLUMNS is unset (prints are then not cropped to the console's width either)."""
    return bool(getattr(console, "names_whole", False))


class Name:
    """A file-derived name (made inert) or a Text built from names, rendered on one line, elided in
    the middle to the width it is given. Never wraps, never folds."""

    def __init__(self, name: object, style: str = "") -> None:
        self.text = name.copy() if isinstance(name, Text) else safe(name)
        if style:
            self.text.stylize(style)
        self.text.no_wrap = True
        self.text.overflow = "crop"

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        n = self.text.cell_len
        return Measurement(min(n, MIN_WIDTH), n).clamp(max_width=options.max_width)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield elide_text(self.text, max(1, options.max_width))

    def __str__(self) -> str:
        return self.text.plain


def fit_names(table: Table, console: Console, column: int = 0) -> Table:
    """Give `table`'s name column what the other columns leave of the console's width (at least
    `NARROWEST`), so that rich shrinks names, which elide, and never the numbers beside them."""
    col = table.columns[column]
    col.no_wrap = True
    col.max_width = None
    wide = console.options.update(width=1 << 16, max_width=1 << 16)
    total = Measurement.get(console, wide, table).maximum
    excess = total - console.options.max_width
    if excess > 0 and whole(console):   # a file: the table as wide as its rows, nothing cut or wrapped
        table.width = total
    elif excess > 0:
        natural = max((Measurement.get(console, wide, cell).maximum for cell in [col.header, *col.cells]), default=0)
        col.max_width = max(NARROWEST, natural - excess)
        if natural - excess < NARROWEST:   # the other columns alone overflow the terminal: rich cropped their numbers
            table.width = total - natural + min(natural, NARROWEST)   # (numel 64 for 64,000); wider, printed uncropped
    return table


def overflows(console: Console, objects: tuple[object, ...]) -> bool:
    """Whether one of `objects` is a table `fit_names` made wider than the console: printed uncropped (the terminal
    wraps its rows), no number cut."""
    return any(isinstance(o, Table) and o.width is not None and o.width > console.width for o in objects)


class NameLine:
    """One output line `prefix NAME suffix`. The prefix is kept and the name shown whole when it fits
    the line; a suffix (prose: a reason, a count) that does not fit beside it moves to the next line,
    indented, and wraps there at spaces. A name longer than the line is elided: to leave room for
    the suffix when that still shows `MIN_WIDTH` characters of it, else to the whole line."""

    def __init__(self, prefix: str | Text, name: object, suffix: str | Text = "", style: str = "") -> None:
        self.prefix = Text(prefix) if isinstance(prefix, str) else prefix
        self.name = Name(name)
        self.suffix = Text(suffix) if isinstance(suffix, str) else suffix
        self.style = style

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        n = self.prefix.cell_len + self.name.text.cell_len + self.suffix.cell_len
        return Measurement(min(n, self.prefix.cell_len + MIN_WIDTH), n).clamp(max_width=options.max_width)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        pre, suf, full = self.prefix.cell_len, self.suffix.cell_len, self.name.text.cell_len
        width = max(1, options.max_width, pre + full + suf if whole(console) else 0)
        line = self.prefix.copy()
        if pre + full + suf <= width or (pre + full > width and width - pre - suf >= MIN_WIDTH):
            line.append_text(elide_text(self.name.text, width - pre - suf)).append_text(self.suffix)
            rest = None
        else:
            line.append_text(elide_text(self.name.text, max(1, width - pre)))
            lead = len(self.suffix.plain) - len(self.suffix.plain.lstrip())
            rest = Text(" " * min(pre, width // 2)).append_text(self.suffix[lead:]) if suf > lead else None
        # to a file or a pipe (`whole`) the line is as long as it is: its Text cropped itself to rich's default 80
        # columns, which are no width there (`ckptstat DIR > out.txt` printed `checkpoint   /a/long/path/mod`)
        line.no_wrap, line.overflow = True, "ignore" if whole(console) else "crop"
        for out in (line, rest):
            if out is not None:
                if self.style:
                    out.stylize(self.style)
                yield out


def name_line(prefix: str | Text, name: object, suffix: str | Text = "", style: str = "") -> NameLine:
    """`prefix NAME suffix` on one line, the name elided to fit (see `NameLine`)."""
    return NameLine(prefix, name, suffix, style)
