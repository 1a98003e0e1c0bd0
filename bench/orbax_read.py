"""ckptstat vs orbax itself on an orbax checkpoint: the tree's metadata (what `summary` needs) and every array's
values reduced (what `stats` does), whole processes, each in its own subprocess, ratios from one run.

The checkpoint: orbax's StandardCheckpointer (OCDBT, zarr v2, zstd chunks) of a 7B-layer-shaped tree in bfloat16,
random normal values (weights compress about as poorly), with one array of --big-mb as a single chunk (orbax writes an
unsharded array as one chunk), saved once under bench/_work/.

Contenders:
- summary: `ckptstat summary --json` against orbax's `StandardCheckpointer().metadata(path)` (the tree's shapes and
  dtypes, what a JAX user runs to list a checkpoint);
- values: `ckptstat stats --json` against orbax's restore of the whole tree as numpy arrays, then per array the
  mean, std, min and max (numpy): what a user without ckptstat runs. orbax's restore holds the whole tree; ckptstat
  streams.

Run with a Python that has jax and orbax-checkpoint (it writes the checkpoint and runs orbax):
    python bench/orbax_read.py --ckptstat-python .venv/bin/python [--big-mb 256] [--out bench/results/orbax_read.md]
"""
from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _measure import compiled_env, emit, measured  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

WRITE = """
import sys, numpy as np, ml_dtypes, orbax.checkpoint as ocp
path, big_mb = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(0)
def normal(*shape):
    return (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(ml_dtypes.bfloat16)
h, f = 4096, 11008
layer = {"attn": {n: normal(h, h) for n in ("q", "k", "v", "o")},
         "mlp": {"gate": normal(h, f // 4), "up": normal(h, f // 4), "down": normal(f // 4, h)},
         "norm": np.ones(h, ml_dtypes.bfloat16)}
tree = {"params": {"layer_0": layer, "embed": normal(big_mb * (1 << 20) // (2 * h), h)}, "step": 100}
ck = ocp.StandardCheckpointer()
ck.save(path, tree)
ck.wait_until_finished()
"""

METADATA = """
import sys, orbax.checkpoint as ocp
meta = ocp.StandardCheckpointer().metadata(sys.argv[1])
print(meta is not None)
"""

RESTORE = """
import sys, numpy as np, jax, orbax.checkpoint as ocp
tree = ocp.PyTreeCheckpointer().restore(sys.argv[1])
for x in jax.tree_util.tree_leaves(tree):
    a = np.asarray(x, np.float32)
    a.mean(), a.std(), a.min(), a.max()
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckptstat-python", default=os.path.join(ROOT, ".venv", "bin", "python"))
    ap.add_argument("--big-mb", type=int, default=256)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out")
    args = ap.parse_args()
    path = os.path.join(ROOT, "bench", "_work", f"orbax-{args.big_mb}mb")
    if not os.path.isdir(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        subprocess.run([sys.executable, "-c", WRITE, path, str(args.big_mb)], check=True,
                       env={**os.environ, "JAX_PLATFORMS": "cpu"})
    size = sum(os.path.getsize(os.path.join(d, n)) for d, _, ns in os.walk(path) for n in ns)
    env = compiled_env(JAX_PLATFORMS="cpu")
    ck = [args.ckptstat_python, "-m", "ckptstat"]
    rows = measured({
        "ckptstat summary --json": (ck + ["summary", path, "--json"], env),
        "orbax StandardCheckpointer().metadata": ([sys.executable, "-c", METADATA, path], env),
        "ckptstat stats --json": (ck + ["stats", path, "--json", "--no-progress"], env),
        "orbax restore + numpy reductions": ([sys.executable, "-c", RESTORE, path], env),
    }, args.repeat, cwd=ROOT)

    def line(name: str, base: str) -> str:
        r, b = rows[name], rows[base]
        return (f"| {name} | {r['wall_s']:.2f} s | {r['cpu_s']:.2f} s | {r['wall_s'] / b['wall_s']:.2f}x | "
                f"{r['rss_mib']:.0f} MiB | {r['rss_mib'] / b['rss_mib']:.2f}x |")

    out = [f"# ckptstat vs orbax on an orbax checkpoint ({size / 2**20:.0f} MiB on disk, one {args.big_mb} MiB bfloat16 "
           "array as one chunk)", "",
           f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; median of "
           f"{args.repeat} runs after one warm-up (warm page cache), whole processes; written by bench/orbax_read.py.", "",
           "| command | wall | CPU | x ckptstat (wall) | peak RSS | x ckptstat (RSS) |", "|---|---|---|---|---|---|",
           line("ckptstat summary --json", "ckptstat summary --json"),
           line("orbax StandardCheckpointer().metadata", "ckptstat summary --json"),
           line("ckptstat stats --json", "ckptstat stats --json"),
           line("orbax restore + numpy reductions", "ckptstat stats --json"), ""]
    emit("\n".join(out), args.out)


if __name__ == "__main__":
    main()
