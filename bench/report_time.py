"""`ckptstat report` of a tiny model against the commands it combines (issue 32: "report of a tiny model
takes about 20 s"): each a whole process, median wall and CPU (user + sys) of N runs after a warm-up, with
byte-compiled modules (PYTHONDONTWRITEBYTECODE removed from the environment, as a user's install has them).

    python bench/report_time.py [--model fixtures/bert-tiny] [--repeat 5] [--out bench/results/report_time.md]

The header-only report should cost about what summary + ties + flops + memory cost together (less: one
interpreter start and one open instead of four); the full report about what those and `stats` and `plot` cost.
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _measure import compiled_env, emit, measure  # noqa: E402

ROOT = os.path.dirname(HERE)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(ROOT, "fixtures", "bert-tiny"))
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out")
    args = ap.parse_args()
    env = compiled_env()
    ck = [sys.executable, "-m", "ckptstat"]
    tmp = tempfile.mkdtemp()
    m = args.model
    parts = {
        "summary": [*ck, "summary", m],
        "ties": [*ck, "ties", m],
        "flops": [*ck, "flops", m],
        "memory": [*ck, "memory", m],
        "stats": [*ck, "stats", m, "--no-progress"],
        "plot": [*ck, "plot", m, "-o", os.path.join(tmp, "p.png"), "--no-progress"],
    }
    reports = {
        "report --no-stats -o r.md": [*ck, "report", m, "--no-stats", "-o", os.path.join(tmp, "h.md")],
        "report -o r.md": [*ck, "report", m, "-o", os.path.join(tmp, "r.md"), "--no-progress"],
        "report -o r.html": [*ck, "report", m, "-o", os.path.join(tmp, "r.html"), "--no-progress"],
    }
    rows = {}
    for name, cmd in {**parts, **reports}.items():
        measure(cmd, 1, env=env, cwd=ROOT)   # warm-up: byte-compile, page cache
        rows[name] = measure(cmd, args.repeat, env=env, cwd=ROOT)
        assert rows[name]["ok"], name
    header = ("summary", "ties", "flops", "memory")
    sums = {"summary + ties + flops + memory": header, "... + stats + plot": (*header, "stats", "plot")}
    lines = [f"`ckptstat report` against the commands it combines, on {os.path.relpath(m, ROOT)}.",
             f"Machine: {platform.machine()}, {os.cpu_count()} cores (shared), Python {platform.python_version()}; "
             f"median of {args.repeat} whole-process runs after a warm-up, byte-compiled modules.", "",
             "| command | wall (median) | CPU user+sys (median) | peak RSS |", "|---|---|---|---|"]
    for name, r in rows.items():
        lines.append(f"| {name} | {r['wall_s']:.2f} s | {r['cpu_s']:.2f} s | {r['rss_mib']:.0f} MiB |")
    for name, keys in sums.items():
        lines.append(f"| *{name}* (sum) | {sum(rows[k]['wall_s'] for k in keys):.2f} s | "
                     f"{sum(rows[k]['cpu_s'] for k in keys):.2f} s | |")
    emit("\n".join(lines) + "\n", args.out)


if __name__ == "__main__":
    main()
