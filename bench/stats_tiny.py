"""Issue 35 / 31: `ckptstat stats` of a file of many tiny tensors (a frontier MoE's expert layout), whole process
each, in one run, against what a user would otherwise run: a safetensors `safe_open` loop computing each
tensor's mean, std, min and max with numpy (fewer statistics than `stats` gives: no quantiles, no groups), and
`ckptstat summary` (the header alone: the floor under any command on the file).

The file is bench/headers_scale.py's (safetensors' own writer, MoE names, one-element experts), with random
F16 values. Usage:
    python bench/stats_tiny.py [--tensors 20000 200000] [--repeat 3] [--out bench/results/stats_tiny.md]
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
from headers_scale import names  # noqa: E402

ROOT = os.path.dirname(HERE)
NUMPY_LOOP = """
import sys
import numpy as np
from safetensors import safe_open
out = []
with safe_open(sys.argv[1], framework='np') as h:
    for k in h.keys():
        x = h.get_tensor(k).astype(np.float64)
        out.append((x.mean(), x.std(), x.min(), x.max()))
print(len(out))
"""


def build(path: str, count: int) -> None:
    import numpy as np
    from safetensors.numpy import save_file

    rng = np.random.default_rng(0)
    save_file({n: rng.standard_normal(s).astype(np.float16) for n, s in names(count).items()}, path)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tensors", type=int, nargs="+", default=[20_000, 200_000])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out")
    ap.add_argument("--before", help="another ckptstat tree (git archive of an earlier commit): its stats rows beside")
    args = ap.parse_args()
    env = compiled_env()
    ck = [sys.executable, "-m", "ckptstat"]
    lines = ["# stats of many tiny tensors: ckptstat against a safe_open + numpy loop", "",
             f"Machine: {platform.machine()}, {os.cpu_count()} cores (shared), Python {platform.python_version()}; "
             f"median of {args.repeat} whole-process runs after a warm-up, byte-compiled modules. Files: "
             "bench/headers_scale.py's MoE names (one-element experts), random F16, safetensors' writer.", "",
             "| tensors | command | wall | CPU user+sys | µs / tensor (CPU) | x numpy loop (CPU) | peak RSS |",
             "|---|---|---|---|---|---|---|"]
    with tempfile.TemporaryDirectory() as tmp:
        for count in args.tensors:
            path = os.path.join(tmp, f"moe-{count}.safetensors")
            build(path, count)
            cmds = {
                "safe_open + numpy loop (mean, std, min, max)": [sys.executable, "-c", NUMPY_LOOP, path],
                "ckptstat summary (header only)": [*ck, "summary", path],
                "ckptstat stats": [*ck, "stats", path, "--no-progress"],
                "ckptstat stats --json": [*ck, "stats", path, "--no-progress", "--json"],
                "ckptstat stats --csv": [*ck, "stats", path, "--no-progress", "--csv"],
                "ckptstat stats --workers 2": [*ck, "stats", path, "--no-progress", "--workers", "2"],
            }
            where = dict.fromkeys(cmds, ROOT)
            if args.before:   # (-m imports ckptstat from the cwd first)
                for name in ("ckptstat stats", "ckptstat stats --json", "ckptstat stats --csv"):
                    cmds[f"{name} (--before tree)"] = cmds[name]
                    where[f"{name} (--before tree)"] = args.before
            rows = {}
            for name, cmd in cmds.items():
                measure(cmd, 1, env=env, cwd=where[name])   # warm-up: byte-compile, page cache
                rows[name] = measure(cmd, args.repeat, env=env, cwd=where[name])
                assert rows[name]["ok"], name
            base = rows["safe_open + numpy loop (mean, std, min, max)"]["cpu_s"]
            for name, r in rows.items():
                lines.append(f"| {count:,} | {name} | {r['wall_s']:.2f} s | {r['cpu_s']:.2f} s | "
                             f"{1e6 * r['cpu_s'] / count:.1f} | {r['cpu_s'] / base:.2f}x | {r['rss_mib']:.0f} MiB |")
    emit("\n".join(lines) + "\n", args.out)


if __name__ == "__main__":
    main()
