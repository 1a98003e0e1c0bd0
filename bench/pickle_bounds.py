"""The pickle bounds of docs/security.md at the sizes issue 31 reported, too slow for the unit suite (the corpus
runs 1.5M sets and 1M memoised ones): `summary` and `scan` of torch zips whose data.pkl builds 3.96M empty
sets, 1.3M memoised sets, and one memo entry a byte (8M MEMOIZE, deflated: an 8 KB file).

Each command a fresh process, wall time, CPU and peak RSS from wait4 (bench/_measure.py); the exit code and the
first line of stderr say how it ended (summary: refused, exit 1; scan: its verdict's exit code).
Run: `python bench/pickle_bounds.py [--repeat N] [--out bench/results/pickle_bounds.md]`.
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _measure import emit, measure  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from hostile_corpus_bounds import empty_sets, pickle_zip  # noqa: E402


def memo_a_byte(path: Path, n: int) -> str:
    """data.pkl: None, then n MEMOIZE (a memo entry a byte of pickle), deflated."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("archive/data.pkl", b"\x80\x04N" + b"\x94" * n + b".")
        z.writestr("archive/byteorder", b"little")
    return str(path)


# Measured by hand before the walk's memo bound (commit 0caa172, /usr/bin/time -v, same machine), and the figures.
BEFORE = ("Before: issue 31 reported 931 MB and 10.6 s for `summary` of the 3.96M sets (403 MB for 1.3M memoised ones), "
          "before pickle_build_ratio. Before the walk charged its memo (0caa172), `scan` kept every memo entry: 1.3M "
          "memoised sets 241 MB and 9.5 s of CPU, exit 0; the 8 KB deflated file of 8M MEMOIZE 704 MB and 15.8 s of "
          "CPU, exit 0.")
HOW = {"build more than": "refused: builds more than pickle_build_ratio allows",
       "a memo of more than": "UNKNOWN: the walk's memo past pickle_build_ratio",
       "safe: every global": "SAFE (walked to the end)"}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--out", default=None, help="write a markdown results file")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        files = {"3.96M empty sets": pickle_zip(t / "sets.pt", empty_sets(3_960_000, False)),
                 "1.3M memoised sets": pickle_zip(t / "memo.pt", empty_sets(1_300_000, True)),
                 "8M MEMOIZE, deflated": memo_a_byte(t / "memo8m.pt", 8_000_000)}
        for case, path in files.items():
            for cmd in ("summary", "scan"):
                argv = [sys.executable, "-m", "ckptstat", cmd, path]
                m = measure(argv, args.repeat, timeout=600, cwd=str(ROOT))
                said = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=600)
                said_text = " ".join((said.stdout + said.stderr).split())
                how = next((v for k, v in HOW.items() if k in said_text), said_text[-90:])
                rows.append((case, os.path.getsize(path), cmd, m["wall_s"], m["cpu_s"], m["rss_mib"], said.returncode, how))
    lines = ["# Pickle bounds at issue 31's sizes", "",
             f"Written by `python bench/pickle_bounds.py --repeat {args.repeat}` on {datetime.date.today()}: "
             f"{platform.machine()}, {os.cpu_count()} CPUs visible (shared with other jobs: wall times vary, CPU "
             f"less), Python {platform.python_version()}. Whole process each (interpreter start-up included), peak RSS "
             "from wait4.", "",
             "| data.pkl | file | command | wall | CPU | peak RSS | exit | how it ended |",
             "|---|---:|---|---:|---:|---:|---:|---|"]
    for case, size, cmd, wall, cpu, rss, rc, how in rows:
        lines.append(f"| {case} | {size / 1e6:.2f} MB | `{cmd}` | {wall:.1f} s | {cpu:.1f} s | {rss:.0f} MiB | {rc} | {how} |")
    lines += ["", BEFORE]
    emit("\n".join(lines) + "\n", args.out)


if __name__ == "__main__":
    main()
