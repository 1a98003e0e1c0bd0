"""`ckptstat scan`: a file's globals, findings and verdict; a folder's one line per file and totals.
Everything that comes from a file (names, records, reasons quoting them) is printed inert."""
from __future__ import annotations

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from .names import Name, fit_names, name_line, safe

_STYLE = {"unsafe": "bold red", "unknown": "bold yellow", "unreadable": "yellow", "safe": "green"}
_ORDER = ("unsafe", "unknown", "unreadable", "safe")
MEMBERS_SHOWN = 20   # an archive's members listed one a line; the rest counted


def render_scan(r: dict, console: Console) -> None:
    console.print(name_line("file         ", r["path"]))
    console.print(Text("format       ").append_text(safe(r["format"])))
    if r["torch_load"]:
        console.print(Text("torch.load   ").append_text(safe(r["torch_load"])))
    pickles = ", ".join(f"{p['record']} ({p['opcodes']} opcodes{'' if p['reached'] else ', not reached'})"
                        for p in r["pickles"])
    console.print(Text("pickles      ").append_text(safe(pickles or "none")))
    if r["globals"]:
        t = Table(title="Globals the pickles import", box=box.SIMPLE_HEAD, title_justify="left", pad_edge=False)
        for c in ("global", "count", "weights_only"):
            t.add_column(c, justify="left" if c == "global" else "right")
        plain = set(r["plain_data_globals"])
        for g in r["globals"]:
            t.add_row(Name(g["name"]), str(g["count"]), "allowed" if g["allowed"] else
                      Text("refused (plain data)", style="yellow") if g["name"] in plain else
                      Text("REFUSED", style="bold red"))
        console.print(fit_names(t, console))
    for f in r["findings"]:
        where = (f" byte {f['file_offset']:,}" if f["file_offset"] is not None else
                 f" offset {f['offset']:,}" if f["offset"] is not None else "")   # None: a text's finding (its line)
        console.print(Text("finding      ", style="red").append_text(
            safe(f"{f['record']}{where}: {f['opcode']} {f['global']}: {f['why']}")))
    for why in r["unknown"]:
        console.print(Text("unknown      ", style="yellow").append_text(safe(why)))
    for note in r["notes"]:
        console.print(Text("note         ", style="dim").append_text(safe(note)))
    members = sorted(r.get("members", []), key=lambda m: _ORDER.index(m["status"]))   # (an archive's: archive.py)
    for m in members[:MEMBERS_SHOWN]:   # the worst first
        console.print(name_line(Text(f"member {m['status'].upper():<11}", style=_STYLE[m["status"]]), m["path"]))
    if len(members) > MEMBERS_SHOWN:
        console.print(Text(f"member ...      {len(members) - MEMBERS_SHOWN:,} more (--json lists every one)", style="dim"))
    console.print(safe(r["verdict"]), style=_STYLE[r["status"]])


def _detail(f: dict) -> str:
    if f["status"] == "unsafe":
        return ", ".join(f["unsafe_globals"])
    if f["status"] == "unknown":
        return f["unknown"][0] if f["unknown"] else ""
    if f["status"] == "unreadable":
        return f["error"] or ""
    return "; ".join([f"{what}: {', '.join(f[key])}" for what, key in (("plain data", "plain_data_globals"),
                      ("unreached", "unreached_unsafe_globals")) if f[key]])


def render_scan_tree(r: dict, console: Console) -> None:
    for f in r["files"]:
        detail = _detail(f)
        console.print(name_line(Text(f"{f['status'].upper():<11}", style=_STYLE[f["status"]]), f["path"],
                                safe(f"  {detail}") if detail else ""))
    for s in r["skipped"]:
        console.print(name_line(Text(f"{'SKIPPED':<11}", style="dim"), s["path"], safe(f"  {s['why']}")))
    t = r["totals"]
    console.print(f"{t['files']} file(s) scanned: {t['safe']} safe, {t['unsafe']} unsafe, {t['unknown']} unknown, "
                  f"{t['unreadable']} unreadable; {t['skipped']} skipped")
