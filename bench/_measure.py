"""Whole-process wall time and peak RSS of a command, measured by the parent with os.wait4."""
from __future__ import annotations

import os
import statistics
import subprocess
import time


def run_once(cmd: list[str], env: dict | None = None, timeout: float | None = None,
             cwd: str | None = None) -> tuple[float, float, int]:
    """(seconds, peak RSS in MiB, exit code) of one run of cmd (in `cwd`: `python -m` looks there first)."""
    return _run(cmd, env, timeout, cwd)[:3]


def _run(cmd: list[str], env: dict | None, timeout: float | None, cwd: str | None) -> tuple[float, float, int, float]:
    """run_once's figures and the CPU seconds (user + sys) of the child and the children it waited for."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=cwd)
    deadline = None if timeout is None else start + timeout
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if deadline and time.perf_counter() > deadline:
            proc.kill()
            pid, status, usage = os.wait4(proc.pid, 0)
            break
        time.sleep(0.005)
    wall = time.perf_counter() - start
    return wall, usage.ru_maxrss / 1024, os.waitstatus_to_exitcode(status), usage.ru_utime + usage.ru_stime


def measure(cmd: list[str], repeat: int = 3, env: dict | None = None, timeout: float | None = None,
            cwd: str | None = None) -> dict:
    runs = [_run(cmd, env, timeout, cwd) for _ in range(repeat)]
    return {
        "wall_s": statistics.median(r[0] for r in runs),
        "cpu_s": statistics.median(r[3] for r in runs),   # user + sys of the process and its children (workers)
        "rss_mib": max(r[1] for r in runs),
        "ok": all(r[2] == 0 for r in runs),
        "runs": repeat,
    }


def table(rows: list[tuple[str, dict]], baseline: str) -> str:
    base = dict(rows)[baseline]
    out = ["| contender | wall (median) | peak RSS | time vs ckptstat | RSS vs ckptstat | ok |",
           "|---|---|---|---|---|---|"]
    for name, r in rows:
        out.append(f"| {name} | {r['wall_s']:.3f} s | {r['rss_mib']:.0f} MiB | {r['wall_s'] / base['wall_s']:.1f}x "
                   f"| {r['rss_mib'] / base['rss_mib']:.1f}x | {'yes' if r['ok'] else 'FAILED'} |")
    return "\n".join(out)


def emit(text: str, out: str | None) -> None:
    """Print a result and, with --out, record it in the repo."""
    print(text)
    if out:
        with open(out, "w") as f:
            f.write(text)
