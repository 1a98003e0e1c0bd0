"""Throughput of `ckptstat audit` on the generated zoo (fixtures/make_zoo.py): serial, a local pool of
2 worker processes, and a Dask LocalCluster of 2 worker processes (1 thread each); with --modelscan, the
`ckptstat audit` command (one worker, two) beside modelscan's (`modelscan -p ZOO`) on the same zoo, whole
processes.

    python bench/audit_throughput.py [--copies 5] [--repeat 3] [--out bench/results/audit.md]
    python bench/audit_throughput.py --modelscan /tmp/peers/bin/modelscan --copies 17 [--repeat 3]

Builds the zoo once under bench/_work/zoo and copies it `--copies` times (the units are small: the
figures measure the per-checkpoint cost of opening, summarising, tie-checking and scanning, plus the
executor's overhead, not disk bandwidth; every file is in the page cache after the first pass). Each
executor runs `analysis.audit.run` over the same units in this process, after one warm-up pass; the
pool's and the cluster's start-up are timed apart (the pool starts per run, as the CLI does; a
cluster is long-lived). Records are checked equal across executors, timing fields aside.
"""
from __future__ import annotations

import argparse
import logging
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "fixtures"))
WORK = os.path.join(HERE, "_work", "zoo")

from ckptstat.analysis.audit import run, strip_timing  # noqa: E402
from ckptstat.analysis.audit.cluster import runner  # noqa: E402
from ckptstat.analysis.audit.find import discover  # noqa: E402


def build(copies: int) -> str:
    from make_zoo import build_zoo

    base = os.path.join(WORK, "copy-0")
    if not os.path.isdir(base):
        shutil.rmtree(WORK, ignore_errors=True)
        build_zoo(base)
    for i in range(1, copies):
        dst = os.path.join(WORK, f"copy-{i}")
        if not os.path.isdir(dst):
            shutil.copytree(base, dst, symlinks=True)
    for extra in sorted(os.listdir(WORK)):
        if extra.startswith("copy-") and int(extra[5:]) >= copies:
            shutil.rmtree(os.path.join(WORK, extra))
    return WORK


def build_heavy(count: int, vocab: int = 50_000, width: int = 160) -> list[str]:
    """`count` GPT-2 folders whose config ties lm_head to wte while the file stores both (equal values):
    the audit compares the two 32 MB copies in 4 MiB chunks, so each unit reads 64 MB (`duplicated`)."""
    import torch
    from safetensors.torch import save_file
    from transformers import GPT2Config, GPT2LMHeadModel

    folder = os.path.join(HERE, "_work", "heavy")
    first = os.path.join(folder, "gpt2-0")
    if not os.path.isdir(first):
        torch.manual_seed(0)
        model = GPT2LMHeadModel(GPT2Config(vocab_size=vocab, n_embd=width, n_layer=1, n_head=2, n_positions=64))
        os.makedirs(first)
        model.config.save_pretrained(first)
        sd = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
        sd["lm_head.weight"] = sd["transformer.wte.weight"].clone()
        save_file(sd, os.path.join(first, "model.safetensors"), metadata={"format": "pt"})
    for i in range(1, count):
        if not os.path.isdir(os.path.join(folder, f"gpt2-{i}")):
            shutil.copytree(first, os.path.join(folder, f"gpt2-{i}"))
    return [os.path.join(folder, f"gpt2-{i}") for i in range(count)]


def timed(label: str, units: list, repeat: int, **kw: object) -> tuple[dict, dict]:
    list(run(units, **kw))   # warm-up: imports, page cache
    times, records = [], {}
    for _ in range(repeat):
        t0 = time.perf_counter()
        records = {r["path"]: strip_timing(r) for r in run(units, **kw)}
        times.append(time.perf_counter() - t0)
    return {"label": label, "seconds": statistics.median(times), "runs": repeat}, records


def versus_modelscan(zoo: str, units: int, files: int, modelscan: str, repeat: int) -> list[str]:
    """`ckptstat audit ZOO` (1 and 2 workers) and `modelscan -p ZOO`, each a whole process (imports, start-up and
    the walk counted, as a user meets them): wall (median of `repeat` after a warm-up), peak RSS, files a second.
    modelscan's own JSON report says what it scanned and skipped."""
    import json
    import tempfile
    from collections import Counter

    sys.path.insert(0, HERE)
    from _measure import measure

    py = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        out, report = os.path.join(tmp, "audit.jsonl"), os.path.join(tmp, "modelscan.json")
        fresh = f"rm -f {out}; exec "   # a run resumes from an existing --out: each starts from none
        contenders = [
            ("ckptstat audit, 1 worker", ["sh", "-c", fresh + f"{py} -m ckptstat audit {zoo} --out {out}"]),
            ("ckptstat audit --workers 2", ["sh", "-c", fresh + f"{py} -m ckptstat audit {zoo} --out {out} --workers 2"]),
            ("ckptstat scan ZOO (the scan alone, modelscan's job)", [py, "-m", "ckptstat", "scan", zoo, "--json"]),
            ("modelscan -p ZOO", [modelscan, "-p", zoo, "-r", "json", "-o", report]),
        ]
        env = dict(os.environ, PYTHONPATH=ROOT)
        rows = []
        for name, cmd in contenders:
            measure(cmd, repeat=1, env=env, cwd=tmp, timeout=1800)   # warm-up: page cache, byte-compiled modules
            rows.append((name, measure(cmd, repeat=repeat, env=env, cwd=tmp, timeout=1800)))
        with open(out) as f:
            records = [json.loads(line) for line in f]
        with open(report) as f:
            found = json.load(f)
        summary, errors = found.get("summary", {}), found.get("errors", [])
    verdicts = dict(Counter(r["scan"]["verdict"] if r.get("scan") else "error" for r in records))
    lines = ["## `ckptstat audit` beside modelscan", "",
             f"{units} checkpoints in {files} files ({len(records)} records; the zoo of fixtures/make_zoo.py copied, "
             f"hostile files included). Whole processes, median of {repeat} runs after a warm-up; the machine's load "
             f"average was {os.getloadavg()[0]:.1f} at the end. modelscan {summary.get('modelscan_version', '?')} "
             "(its own venv).",
             "",
             "| command | wall (median) | checkpoints/s | files/s | peak RSS (main process) | exit |",
             "|---|---:|---:|---:|---:|---|"]
    for name, r in rows:
        lines.append(f"| {name} | {r['wall_s']:.2f} s | {units / r['wall_s']:.0f} | {files / r['wall_s']:.0f} | "
                     f"{r['rss_mib']:.0f} MiB | {'0' if r['ok'] else 'non-zero'} |")
    scanned = summary.get("scanned", {}).get("total_scanned", "?")
    lines += ["", f"What each did: ckptstat audit opened, summarised, tie-checked, config-checked and scanned every "
              f"checkpoint (scan verdicts {verdicts}); modelscan scanned {scanned} of the {files} files (it reads "
              f"pickles, zips, numpy, Keras/H5 and SavedModel; safetensors, GGUF and ONNX it skips), reported "
              f"{summary.get('total_issues', '?')} issues and {len(errors)} errors (files it failed to read).", ""]
    return lines


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--copies", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--heavy", type=int, default=0, help="Audit N checkpoints that each read 64 MB (a tie stored "
                    "twice, compared) instead of the zoo.")
    ap.add_argument("--build-only", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--modelscan", help="modelscan's command: time `ckptstat audit` beside it instead")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "audit.md"))
    args = ap.parse_args()
    if args.build_only:
        build(args.copies)
        return
    if args.modelscan:
        # The zoo is built in a child (torch and transformers imported): a measured child's peak RSS starts from
        # this parent's at fork time.
        subprocess.run([sys.executable, __file__, "--build-only", "--copies", str(args.copies)], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        zoo = WORK
        units, _ = discover(zoo)
        files = sum(len(fs) for _, _, fs in os.walk(zoo))
        lines = versus_modelscan(zoo, len(units), files, args.modelscan, args.repeat)
        with open(args.out, "a") as f:
            f.write("\n".join(lines) + "\n")
        print("\n".join(lines))
        return
    if args.heavy:
        units = [u for folder in build_heavy(args.heavy) for u in discover(folder)[0]]
    else:
        units, _ = discover(build(args.copies))
    total = sum(u.bytes for u in units)
    rows = []
    serial, ref = timed("serial (1 process)", units, args.repeat)
    rows.append(serial)
    pool, recs = timed("local pool, --workers 2", units, args.repeat, workers=2)
    assert recs == ref, "pool records differ from the serial run's"
    rows.append(pool)

    import distributed

    t0 = time.perf_counter()
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                       silence_logs=logging.ERROR)
    client = distributed.Client(cluster)
    start = time.perf_counter() - t0
    try:
        dask_row, recs = timed("Dask LocalCluster, 2 workers x 1 thread", units, args.repeat, cluster=runner(client))
        assert recs == ref, "Dask records differ from the serial run's"
        rows.append(dask_row)
    finally:
        client.close()
        cluster.close()

    what = (f"`python bench/audit_throughput.py --heavy {args.heavy} --repeat {args.repeat}`: {len(units)} GPT-2 "
            "checkpoints whose config ties lm_head to wte while the file stores both copies, compared in bounded "
            f"chunks (64 MB read per checkpoint), {total / 1e6:.1f} MB in all" if args.heavy else
            f"`python bench/audit_throughput.py --copies {args.copies} --repeat {args.repeat}`: {len(units)} checkpoints "
            f"({args.copies} copies of fixtures/make_zoo.py's zoo, hostile files included), {total / 1e6:.1f} MB in all")
    lines = [
        f"## {'Checkpoints that read values' if args.heavy else 'The zoo: header-bound checkpoints'}",
        "",
        f"{what}. Median of {args.repeat} runs after a warm-up, in one process calling `analysis.audit.run`; records checked "
        "equal across the three (timing fields aside).",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs visible, Python {platform.python_version()}, "
        f"{platform.system()} {platform.release()}.",
        "",
        "| executor | seconds | checkpoints/s | MB/s | vs serial |",
        "|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(f"| {r['label']} | {r['seconds']:.2f} | {len(units) / r['seconds']:.1f} | "
                     f"{total / 1e6 / r['seconds']:.2f} | {serial['seconds'] / r['seconds']:.2f}x |")
    lines += ["", f"Dask LocalCluster start-up (2 worker processes): {start:.1f} s, not counted above. The local pool "
              "starts its processes inside each timed run, as the CLI does.", ""]
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "a") as f:   # the two workloads append their sections
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
