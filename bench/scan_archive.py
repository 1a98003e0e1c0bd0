"""`ckptstat scan` of archives users extract (analysis/scan/archive.py) beside what they would otherwise run: extracting
with `tar` and scanning the folder. Two archives: a SageMaker-style `model.tar.gz` (a float16 safetensors, a torch.save
`pytorch_model.bin`, config.json, code/inference.py), and a WebDataset-style shard (`.tar` of small images and labels),
which scan should pass through without writing its members out.

Each command a fresh process after one warm-up run, wall time, CPU and peak RSS from wait4 (bench/_measure.py); the
bytes each writes to its temporary folder: extraction's folder for `tar`, the members scan writes (counted from the
archive by archive.py's own rule, `worth_judging`).
Run: `python bench/scan_archive.py [--mb 600] [--repeat 2] [--out bench/results/scan_archive.md]`.
"""
from __future__ import annotations

import argparse
import datetime
import io
import json
import os
import platform
import sys
import tarfile
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _measure import compiled_env, emit, measured  # noqa: E402

from ckptstat.analysis.scan.archive import HEAD, worth_judging  # noqa: E402


def model_tar(folder: str, mb: int) -> str:
    import torch
    from safetensors.numpy import save_file

    src = os.path.join(folder, "model")
    os.makedirs(os.path.join(src, "code"))
    rng = np.random.default_rng(0)
    n = (mb << 20) * 2 // 3 // 2   # two thirds of it in the safetensors, float16
    save_file({"w": rng.standard_normal(n, dtype=np.float32).astype(np.float16)}, os.path.join(src, "model.safetensors"))
    torch.save({"w": torch.randn((mb << 20) // 3 // 4)}, os.path.join(src, "pytorch_model.bin"))
    with open(os.path.join(src, "config.json"), "w") as f:
        json.dump({"model_type": "bert"}, f)
    with open(os.path.join(src, "code", "inference.py"), "w") as f:
        f.write("def model_fn(model_dir):\n    return None\n")
    path = os.path.join(folder, "model.tar.gz")
    with tarfile.open(path, "w:gz", compresslevel=1) as t:
        t.add(src, arcname=".")
    return path


def shard_tar(folder: str, samples: int) -> str:
    rng = np.random.default_rng(1)
    path = os.path.join(folder, "shard-000000.tar")
    with tarfile.open(path, "w") as t:
        for i in range(samples):
            for ext, data in (("jpg", b"\xff\xd8\xff\xe0" + rng.bytes(20_000)), ("cls", str(i % 10).encode()),
                              ("json", json.dumps({"id": i}).encode())):
                info = tarfile.TarInfo(f"{i:06d}.{ext}")
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
    return path


def written_by_scan(path: str) -> int:
    """The bytes scan writes out of the archive: its members that archive.py's rule judges worth writing."""
    total = 0
    with tarfile.open(path) as t:
        for m in t:
            if m.isreg():
                f = t.extractfile(m)
                assert f is not None
                total += m.size if worth_judging(m.name, f.read(HEAD)) else 0
    return total


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=600, help="the model's weights, in MiB")
    ap.add_argument("--samples", type=int, default=5000, help="samples in the WebDataset shard")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    env = compiled_env()
    lines = [f"# `ckptstat scan` of archives ({datetime.date.today()}, {platform.node()}, {os.cpu_count()} cores)", "",
             "Each archive: `ckptstat scan ARCHIVE` against extracting it with `tar` and scanning the folder (what a "
             "user would otherwise run), each a fresh process, median of the runs after a warm-up; `written`: bytes "
             "put in a temporary folder (tar's extraction; the members scan judges).", ""]
    with tempfile.TemporaryDirectory() as d:
        for path in (model_tar(d, args.mb), shard_tar(d, args.samples)):
            out = os.path.join(d, "extracted")
            # (exit 1 is a verdict: the model's code/inference.py, which SageMaker imports, makes it unknown)
            cmds = {"ckptstat scan ARCHIVE": (["sh", "-c", f'{sys.executable} -m ckptstat scan "{path}" > /dev/null; '
                                               'test $? -le 1'], env),
                    "tar xf + ckptstat scan FOLDER": (["sh", "-c", f'rm -rf "{out}" && mkdir "{out}" && tar xf "{path}" '
                                                       f'-C "{out}" && {sys.executable} -m ckptstat scan "{out}" '
                                                       '> /dev/null; test $? -le 1'], env)}
            rows = measured(cmds, args.repeat)
            extracted = sum(os.path.getsize(os.path.join(r, n)) for r, _, ns in os.walk(out) for n in ns)
            written = {"ckptstat scan ARCHIVE": written_by_scan(path), "tar xf + ckptstat scan FOLDER": extracted}
            lines += [f"## {os.path.basename(path)} ({os.path.getsize(path) / 2**20:.0f} MiB)", "",
                      "| command | wall | CPU user+sys | peak RSS | written | x tar + scan (wall) |", "|---|---|---|---|---|---|"]
            base = rows["tar xf + ckptstat scan FOLDER"]["wall_s"]
            lines += [f"| {name} | {r['wall_s']:.2f} s | {r['cpu_s']:.2f} s | {r['rss_mib']:.0f} MiB | "
                      f"{written[name] / 2**20:.1f} MiB | {r['wall_s'] / base:.2f}x |" for name, r in rows.items()]
            lines.append("")
    emit("\n".join(lines), args.out)


if __name__ == "__main__":
    main()
