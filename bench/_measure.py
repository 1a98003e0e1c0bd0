"""Whole-process wall time, CPU time and peak RSS of a command, measured with os.wait4 by a launcher that forks it."""
from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys


def compiled_env(drop: tuple[str, ...] = (), **extra: str) -> dict:
    """This process's environment for a contender, with byte-compiled modules as an installed package has them
    (PYTHONDONTWRITEBYTECODE dropped: without .pyc files every run compiles ckptstat's modules, ~0.15 s), without the
    variables in `drop`, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE" and k not in drop}
    env.update(extra)
    return env


def run_once(cmd: list[str], env: dict | None = None, timeout: float | None = None,
             cwd: str | None = None) -> tuple[float, float, int]:
    """(seconds, peak RSS in MiB, exit code) of one run of cmd (in `cwd`: `python -m` looks there first)."""
    return _run(cmd, env, timeout, cwd)[:3]


# The command runs under a small launcher that forks it and reports the child's own rusage: Linux keeps, in a process's
# peak RSS, the peak of the memory it was forked from (fs/exec.c saves the old mm's high-water mark at exec), so a
# command forked straight from this process (often hundreds of MiB: a bench holding models or servers) would report
# this process's size. The launcher is a bare interpreter (~10 MiB), under any command measured here.
_LAUNCH = """
import os, sys, time
start = time.perf_counter()
pid = os.fork()
if pid == 0:
    try:
        os.execvp(sys.argv[2], sys.argv[2:])
    finally:
        os._exit(127)
_, status, ru = os.wait4(pid, 0)
os.write(int(sys.argv[1]), f"{time.perf_counter() - start} {ru.ru_maxrss} {ru.ru_utime + ru.ru_stime} {status}".encode())
"""


def _run(cmd: list[str], env: dict | None, timeout: float | None, cwd: str | None) -> tuple[float, float, int, float]:
    """run_once's figures and the CPU seconds (user + sys) of the command and the children it waited for; wall time
    from the fork to the command's exit, as the launcher saw it."""
    read, write = os.pipe()
    with os.fdopen(read, "rb") as reader:
        try:
            proc = subprocess.Popen([sys.executable, "-c", _LAUNCH, str(write), *cmd], stdout=subprocess.DEVNULL,
                                    stderr=subprocess.PIPE, env=env, cwd=cwd, pass_fds=(write,), start_new_session=True)
        finally:
            os.close(write)   # the launcher holds its own copy: the read below ends when it exits
        try:
            proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)   # the launcher and the command
            proc.communicate()
        report = reader.read().split()
    if not report:   # killed before it reported
        return float(timeout or 0), 0.0, -9, 0.0
    wall, maxrss, cpu, status = float(report[0]), int(report[1]), float(report[2]), int(report[3])
    return wall, maxrss / 1024, os.waitstatus_to_exitcode(status), cpu


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


def measured(cmds: dict[str, tuple[list[str], dict]], repeat: int, cwd: str | None = None) -> dict[str, dict]:
    """Each named (command, environment) measured `repeat` times after one warm-up run (byte-compile, page cache);
    every run must succeed."""
    rows = {}
    for name, (cmd, env) in cmds.items():
        measure(cmd, 1, env=env, cwd=cwd)
        rows[name] = measure(cmd, repeat, env=env, cwd=cwd)
        assert rows[name]["ok"], name
    return rows


def per_value_table(rows: dict[str, dict], baseline: str, values: int, against: str) -> list[str]:
    """A markdown table of measured rows: wall, CPU, CPU ns a value of `values`, wall against `baseline`'s (headed
    `x {against} (wall)`), peak RSS."""
    base = rows[baseline]
    return ["| command | wall | CPU user+sys | ns / value (CPU) | x " + against + " (wall) | peak RSS |",
            "|---|---|---|---|---|---|"] + [
        f"| {name} | {r['wall_s']:.2f} s | {r['cpu_s']:.2f} s | {1e9 * r['cpu_s'] / values:.1f} | "
        f"{r['wall_s'] / base['wall_s']:.2f}x | {r['rss_mib']:.0f} MiB |" for name, r in rows.items()]


def table(rows: list[tuple[str, dict]], baseline: str) -> str:
    base = dict(rows)[baseline]
    out = ["| contender | wall (median) | peak RSS | time vs ckptstat | RSS vs ckptstat | ok |",
           "|---|---|---|---|---|---|"]
    for name, r in rows:
        out.append(f"| {name} | {r['wall_s']:.3f} s | {r['rss_mib']:.0f} MiB | {r['wall_s'] / base['wall_s']:.1f}x "
                   f"| {r['rss_mib'] / base['rss_mib']:.1f}x | {'yes' if r['ok'] else 'FAILED'} |")
    return "\n".join(out)


def counted_race(module: str, ours: list[str], theirs: dict[str, list[str]], repeat: int, name: str,
                 cwd: str) -> tuple[dict[str, dict], int, int]:
    """A checkpoint built by bench/<module>.py's `build(path)` (in a child process; it returns the parameter count),
    then `python -m ckptstat *ours PATH --json` (its unique parameters) raced against each of `theirs` (a command
    given PATH as its first argument, printing the parameter count as its last line), in one run, whole process each:
    (rows, ckptstat's first, the parameter count all agree on, the file's size). The file is called `name`."""
    import json
    import tempfile

    here = os.path.dirname(os.path.abspath(__file__))
    env, py = compiled_env(), sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, name)
        built = subprocess.run([py, "-c", f"import sys; sys.path.insert(0, {here!r}); import {module} as m; "
                                f"print(m.build({path!r}))"], check=True, capture_output=True, text=True, cwd=cwd)
        params = int(built.stdout.strip().splitlines()[-1])
        cmds = {"ckptstat " + " ".join(ours + ["summary"]).strip(): ([py, "-m", "ckptstat", *ours, path, "--json"], env),
                **{label: ([*cmd[:3], path, *cmd[3:]], env) for label, cmd in theirs.items()}}
        rows = measured(cmds, repeat, cwd=cwd)
        for label, (cmd, _) in cmds.items():
            out = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=cwd, env=env).stdout
            count = json.loads(out)["parameters"]["unique"] if label.startswith("ckptstat") else \
                int(out.strip().splitlines()[-1])
            assert count == params, (label, count, params)
        return rows, params, os.path.getsize(path)


def race_table(rows: dict[str, dict]) -> list[str]:
    """wall, CPU, peak RSS and wall against the first row's, one row a contender."""
    base = next(iter(rows.values()))
    return ["| contender | wall | CPU user+sys | peak RSS | wall x ckptstat |", "|---|---|---|---|---|"] + [
        f"| {name} | {r['wall_s']:.3f} s | {r['cpu_s']:.3f} s | {r['rss_mib']:.0f} MiB | {r['wall_s'] / base['wall_s']:.2f}x |"
        for name, r in rows.items()]


def race_main(module: str, ours: list[str], theirs: dict[str, list[str]], name: str, title: str,
              describe: str, closing: str) -> None:
    """A bench script's main: --repeat and --out, counted_race, then the table recorded with `title`, the file
    (`describe`, formatted with its `size_mib` and `params`), the machine, and `closing`."""
    import argparse
    import platform

    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out")
    args = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    rows, params, size = counted_race(module, ours, theirs, args.repeat, name, root)
    lines = [f"# {title}", "", describe.format(size_mib=size / 2**20, params=params) + " "
             f"Machine: {platform.machine()}, {os.cpu_count()} cores (shared), Python {platform.python_version()}; "
             f"median of {args.repeat} whole-process runs after a warm-up.", "", *race_table(rows), "", closing]
    emit("\n".join(lines) + "\n", args.out)


def emit(text: str, out: str | None) -> None:
    """Print a result and, with --out, record it in the repo."""
    print(text)
    if out:
        with open(out, "w") as f:
            f.write(text)
