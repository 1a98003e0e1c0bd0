"""ckptstat vs tf.train.list_variables on a BERT-base-size TF1 checkpoint, whole process.

Run with a Python that has TensorFlow (it builds the checkpoint and runs the TF contender):
    /work/tfenv/bin/python bench/tf_list_variables.py [--ckptstat-python /work/main/.venv/bin/python]
ckptstat runs as `<ckptstat-python> -m ckptstat PREFIX --json` from the repository root, so this
checkout's code is what is measured. Each contender runs in its own subprocess; wall time is measured
around it and peak RSS comes from os.wait4's rusage for that child. Writes bench/results/tf_list_variables.md.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORK = os.path.join(ROOT, "bench", "_work", "tf-bert-base")
H, L, F, V, P, T = 768, 12, 3072, 30522, 512, 2


def google_bert_shapes() -> dict[str, list[int]]:
    s = {"bert/embeddings/word_embeddings": [V, H], "bert/embeddings/position_embeddings": [P, H],
         "bert/embeddings/token_type_embeddings": [T, H],
         "bert/embeddings/LayerNorm/gamma": [H], "bert/embeddings/LayerNorm/beta": [H]}
    for i in range(L):
        p = f"bert/encoder/layer_{i}/"
        for m in ("attention/self/query", "attention/self/key", "attention/self/value", "attention/output/dense"):
            s[p + m + "/kernel"], s[p + m + "/bias"] = [H, H], [H]
        s[p + "intermediate/dense/kernel"], s[p + "intermediate/dense/bias"] = [H, F], [F]
        s[p + "output/dense/kernel"], s[p + "output/dense/bias"] = [F, H], [H]
        for m in ("attention/output/LayerNorm", "output/LayerNorm"):
            s[p + m + "/gamma"], s[p + m + "/beta"] = [H], [H]
    s["bert/pooler/dense/kernel"], s["bert/pooler/dense/bias"] = [H, H], [H]
    s["cls/predictions/transform/dense/kernel"], s["cls/predictions/transform/dense/bias"] = [H, H], [H]
    s["cls/predictions/transform/LayerNorm/gamma"], s["cls/predictions/transform/LayerNorm/beta"] = [H], [H]
    s["cls/predictions/output_bias"] = [V]
    s["cls/seq_relationship/output_weights"], s["cls/seq_relationship/output_bias"] = [2, H], [2]
    return s


def build() -> str:
    prefix = os.path.join(WORK, "model.ckpt-0")
    if os.path.isfile(prefix + ".index"):
        return prefix
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    tf1 = tf.compat.v1
    os.makedirs(WORK, exist_ok=True)
    with tf.Graph().as_default():
        init = tf1.truncated_normal_initializer(stddev=0.02, seed=0)
        for name, shape in google_bert_shapes().items():
            tf1.get_variable(name, shape=shape, initializer=init)
        tf1.train.get_or_create_global_step()
        with tf1.Session() as sess:
            sess.run(tf1.global_variables_initializer())
            tf1.train.Saver(save_relative_paths=True).save(sess, prefix, write_meta_graph=False)
    return prefix


TF_LIST = """
import os, sys, math
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import tensorflow as tf
v = tf.train.list_variables(sys.argv[1])
print(sum(math.prod(s) for _, s in v), len(v))
"""


def run(cmd: list[str], cwd: str) -> tuple[float, int, str]:
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    out = p.stdout.read().decode() if p.stdout else ""
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode:
        raise SystemExit(f"{cmd} failed with {p.returncode}")
    return wall, usage.ru_maxrss * 1024, out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckptstat-python", default=os.environ.get("CKPTSTAT_PYTHON", "/work/main/.venv/bin/python"))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--build-only", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.build_only:
        build()
        return
    # Build in a child: a parent that had imported TensorFlow would hand its peak RSS to every
    # child it forks (Linux keeps the pre-exec high-water mark in ru_maxrss).
    subprocess.run([sys.executable, os.path.abspath(__file__), "--build-only"], check=True, stderr=subprocess.DEVNULL)
    prefix = os.path.join(WORK, "model.ckpt-0")
    size = sum(os.path.getsize(os.path.join(WORK, f)) for f in os.listdir(WORK) if f.startswith("model.ckpt-0"))
    contenders = {
        "tf.train.list_variables + count": [sys.executable, "-c", TF_LIST, prefix],
        "ckptstat summary --json": [args.ckptstat_python, "-m", "ckptstat", prefix, "--json"],
        "ckptstat summary --verify --json": [args.ckptstat_python, "-m", "ckptstat", prefix, "--verify", "--json"],
    }
    results = {}
    for name, cmd in contenders.items():
        runs = [run(cmd, ROOT) for _ in range(args.repeat)]
        results[name] = (statistics.median(r[0] for r in runs), max(r[1] for r in runs), runs[-1][2])
    tf_total, tf_vars = (int(x) for x in results["tf.train.list_variables + count"][2].split())
    rep = json.loads(results["ckptstat summary --json"][2])
    state = sum(n["elements"] for n in rep["non_parameters"])
    assert rep["parameters"]["unique"] + state == tf_total, (rep["parameters"]["unique"], state, tf_total)
    base_wall, base_rss = results["tf.train.list_variables + count"][:2]
    lines = [
        "# ckptstat vs tf.train.list_variables (BERT-base-size TF1 checkpoint)",
        "",
        f"Checkpoint: google-research BERT-base names and shapes (pretraining heads + global_step), float32, "
        f"{tf_vars} variables, {tf_total:,} elements, {size / 2**20:.0f} MiB on disk; built by "
        "`bench/tf_list_variables.py` with TensorFlow.",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, CPU only; {platform.python_version()}. "
        f"Median of {args.repeat} runs, whole process (interpreter start and imports included); "
        "peak RSS from os.wait4 per child. The 2 cores are shared with other jobs: wall times vary by about 2x between runs.",
        "",
        "| contender | wall (s) | wall vs TF | peak RSS (MiB) | RSS vs TF |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, (wall, rss, _) in results.items():
        lines.append(f"| {name} | {wall:.2f} | {wall / base_wall:.2f}x | {rss / 2**20:.0f} | {rss / base_rss:.2f}x |")
    lines += ["", f"Counts agree: TF lists {tf_total:,} elements; ckptstat reports {rep['parameters']['unique']:,} "
              f"parameters + {state:,} training-state elements (global_step).",
              "`--verify` reads every tensor byte and checks its crc32c (numpy, table-driven, lane-parallel)."]
    text = "\n".join(lines) + "\n"
    os.makedirs(os.path.join(ROOT, "bench", "results"), exist_ok=True)
    with open(os.path.join(ROOT, "bench", "results", "tf_list_variables.md"), "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
