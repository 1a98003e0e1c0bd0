"""Start-up of the commands users type, against the same tree with another typer: whole processes, each line's runs
alternated between the two environments (a shared machine drifts), median wall and CPU, and whether the run imported
pydantic (the reason to compare: typer 0.29 coerces every non-flag parameter through a pydantic TypeAdapter).

    pip install --no-deps --target /tmp/typer029 typer==0.29.2
    python bench/cli_start.py --before /tmp/typer029 [--repeat 7] [--out bench/results/cli_start.md]

`--before DIR` is put first on PYTHONPATH for the "before" runs, so its typer shadows the installed one; everything
else (ckptstat, numpy, the fixture) is the same. Byte-compiled modules (PYTHONDONTWRITEBYTECODE removed, as a user's
install has them).
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _measure import compiled_env, emit, measure  # noqa: E402

ROOT = os.path.dirname(HERE)
MODEL = os.path.join("fixtures", "bert-tiny")
LINES = {   # human output goes through typer; the two --json lines take the quick path (commands/quick.py)
    "summary M": ["summary", MODEL],
    "tensors M": ["tensors", MODEL],
    "ties M": ["ties", MODEL],
    "flops M": ["flops", MODEL],
    "stats M --no-progress": ["stats", MODEL, "--no-progress"],
    "summary M --json (quick path)": ["summary", MODEL, "--json"],
    "stats M --json (quick path)": ["stats", MODEL, "--json", "--no-progress"],
}


def _typer(env: dict) -> str:
    return subprocess.run([sys.executable, "-c", "import typer; print(typer.__version__)"], env=env, cwd=ROOT,
                          capture_output=True, text=True, check=True).stdout.strip()


def _imports_pydantic(args: list[str], env: dict) -> bool:
    code = ("import os, sys; sys.argv = ['ckptstat', *sys.argv[1:]]\n"
            "def _exit(rc):\n    raise SystemExit(rc)\n"
            "os._exit = _exit   # __main__.run leaves by os._exit once answered\n"
            "from ckptstat.__main__ import run\n"
            "try:\n    run()\nexcept SystemExit:\n    pass\n"
            "print('pydantic' in sys.modules, file=sys.stderr)")
    r = subprocess.run([sys.executable, "-c", code, *args], env=env, cwd=ROOT, capture_output=True, text=True)
    return r.stderr.strip().splitlines()[-1] == "True"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--before", required=True, help="a folder holding the other typer (pip install --target)")
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--out")
    args = ap.parse_args()
    after = compiled_env()
    before = {**after, "PYTHONPATH": os.pathsep.join(filter(None, [args.before, after.get("PYTHONPATH")]))}
    envs = {"before": before, "after": after}
    versions = {k: _typer(e) for k, e in envs.items()}
    ck = [sys.executable, "-m", "ckptstat"]
    rows = []
    for label, line in LINES.items():
        runs: dict[str, list[dict]] = {"before": [], "after": []}
        for env in envs.values():
            measure([*ck, *line], 1, env=env, cwd=ROOT)   # warm-up: byte-compile, page cache
        for _ in range(args.repeat):   # alternated
            for name, env in envs.items():
                runs[name].append(measure([*ck, *line], 1, env=env, cwd=ROOT))
        med = {n: (statistics.median(r["wall_s"] for r in rs), statistics.median(r["cpu_s"] for r in rs))
               for n, rs in runs.items()}
        assert all(r["ok"] for rs in runs.values() for r in rs), label
        pyd = {n: _imports_pydantic(line, env) for n, env in envs.items()}
        rows.append((label, med, pyd))
    load = os.getloadavg()
    lines = [f"# Start-up of the commands users type: typer {versions['before']} (before) against "
             f"{versions['after']} (after)", "",
             f"Machine: {platform.machine()}, {os.cpu_count()} cores (shared), Python {platform.python_version()}; "
             f"median of {args.repeat} whole-process runs each, the two alternated, after a warm-up; byte-compiled. "
             f"M = {MODEL}. Load average at the end: {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}.", "",
             "Command: `python bench/cli_start.py --before DIR --repeat N` (DIR: `pip install --no-deps --target DIR "
             f"typer=={versions['before']}`).", "",
             "| command | wall before | wall after | after / before | CPU before | CPU after | pydantic imported "
             "(before, after) |", "|---|---|---|---|---|---|---|"]
    for label, med, pyd in rows:
        (wb, cb), (wa, ca) = med["before"], med["after"]
        lines.append(f"| `{label}` | {wb:.3f} s | {wa:.3f} s | {wa / wb:.2f}x | {cb:.3f} s | {ca:.3f} s | "
                     f"{'yes' if pyd['before'] else 'no'}, {'yes' if pyd['after'] else 'no'} |")
    emit("\n".join(lines) + "\n", args.out)


if __name__ == "__main__":
    main()
