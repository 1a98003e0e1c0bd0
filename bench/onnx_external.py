"""ckptstat vs onnx on an external-data ONNX model with 256 MiB of weights, whole process each.

The model (16 MatMul initializers of 2048 x 2048 float32, 16 MiB each, in `model.onnx.data`) is
written by onnx's own helpers (onnx.helper, onnx.external_data_helper) into a temp dir. Contenders,
each a fresh subprocess measured with os.wait4 (wall time and peak RSS of that child):
  ckptstat                 : `python -m ckptstat DIR/model.onnx --json` (headers only)
  onnx.load(no external)   : onnx.load(load_external_data=False) and a count from the initializer dims
  onnx.load(with external) : onnx.load() (what a script that counts `numpy_helper.to_array` sizes runs)
Run: `python bench/onnx_external.py [--repeat N] [--out bench/results/onnx_external.md]`.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _measure import emit, measure  # noqa: E402

N, SIDE = 16, 2048      # 16 x 2048 x 2048 float32 = 256 MiB of weights

COUNT = """
import math, sys, onnx
m = onnx.load(sys.argv[1], load_external_data=sys.argv[2] == "1")
print(sum(math.prod(t.dims) for t in m.graph.initializer))
"""


def build(folder: str) -> str:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    inits, nodes = [], []
    prev = "x"
    for i in range(N):
        w = np.full((SIDE, SIDE), i, dtype=np.float32)
        inits.append(numpy_helper.from_array(w, f"layers.{i}.weight"))
        nodes.append(helper.make_node("MatMul", [prev, f"layers.{i}.weight"], [f"h{i}"]))
        prev = f"h{i}"
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, SIDE])],
                              [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [1, SIDE])], inits)
    model = helper.make_model(graph)
    path = os.path.join(folder, "model.onnx")
    onnx.save_model(model, path, save_as_external_data=True, all_tensors_to_one_file=True, location="model.onnx.data")
    return path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    py = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        # built in its own process, so that this parent stays small (forked children inherit peak RSS)
        path = subprocess.run([py, "-c", f"import sys; sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r});"
                               f"from onnx_external import build; print(build({tmp!r}))"],
                              check=True, capture_output=True, text=True).stdout.strip()
        data = os.path.getsize(os.path.join(tmp, "model.onnx.data"))
        ours = json.loads(subprocess.run([py, "-m", "ckptstat", path, "--json"], check=True, capture_output=True,
                                         text=True).stdout)["parameters"]["unique"]
        theirs = int(subprocess.run([py, "-c", COUNT, path, "0"], check=True, capture_output=True, text=True).stdout)
        assert ours == theirs == N * SIDE * SIDE, (ours, theirs)
        rows = [
            ("ckptstat", measure([py, "-m", "ckptstat", path, "--json"], args.repeat)),
            ("onnx.load(load_external_data=False)", measure([py, "-c", COUNT, path, "0"], args.repeat)),
            ("onnx.load() (external data loaded)", measure([py, "-c", COUNT, path, "1"], args.repeat)),
        ]
    lines = ["# ckptstat vs onnx on an external-data ONNX model", "",
             f"Model: {N} MatMul initializers of {SIDE} x {SIDE} float32 written by onnx's helpers, "
             f"{data / 2**20:.0f} MiB in model.onnx.data; every contender counts {ours:,} parameters.",
             f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; median of "
             f"{args.repeat} runs, whole process, peak RSS from wait4.", "",
             "| contender | wall (median) | peak RSS (max) |", "|---|---|---|"]
    for name, r in rows:
        lines.append(f"| {name} | {r['wall_s']:.3f} s | {r['rss_mib']:.0f} MiB |")
    lines += ["", "Goal (issue 21): summarised in under 150 MB peak RSS."]
    emit("\n".join(lines) + "\n", args.out)


if __name__ == "__main__":
    main()
